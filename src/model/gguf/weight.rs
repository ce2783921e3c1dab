//! A matrix as the file reader hands it to the model's projections: candle's tensor, and
//! where our CPU kernels run a type in the file's own blocks that candle lacks, those blocks.
//!
//! IQ4_XS reads as Q8_0 for candle (`super::convert`), which rounds each sub-block's scale
//! `d·(ls − 32)` to f16; our kernels take IQ4_XS as it is stored (`ops::qmatmul`'s
//! `QuantKind::Iq4Xs`), so on the CPU [`Weight`] carries the file's bytes beside the Q8_0
//! tensor, and `model::linear::QLinear` packs those. Every other use (a GPU, a
//! dequantized vector, candle's matmul where ours does not run) reads the tensor.
//!
//! Invariants: `native`, when present, is the file's bytes of the same `[rows, cols]` matrix,
//! row after row, of a type whose rows are whole blocks.
//!
//! Counterpart: llama.cpp keeps every tensor in its file type and picks a kernel per type;
//! candle's `QTensor` holds only the types candle knows.

use std::ops::Deref;

use candle_core::quantized::QTensor;

use super::types::GgmlType;

/// A matrix's candle tensor, and its blocks as the file stores them where the CPU kernels take
/// that type natively.
#[derive(Debug)]
pub struct Weight {
    tensor: QTensor,
    native: Option<NativeBlocks>,
}

/// A matrix's bytes in its file type, row after row.
#[derive(Debug, Clone)]
pub struct NativeBlocks {
    pub ty: GgmlType,
    pub bytes: Vec<u8>,
}

impl Weight {
    pub fn new(tensor: QTensor, native: Option<NativeBlocks>) -> Self {
        Self { tensor, native }
    }

    /// The file's own blocks, where kept.
    pub fn native(&self) -> Option<&NativeBlocks> {
        self.native.as_ref()
    }

    pub fn into_tensor(self) -> QTensor {
        self.tensor
    }

    pub fn into_parts(self) -> (QTensor, Option<NativeBlocks>) {
        (self.tensor, self.native)
    }
}

impl From<QTensor> for Weight {
    fn from(tensor: QTensor) -> Self {
        Self { tensor, native: None }
    }
}

impl Deref for Weight {
    type Target = QTensor;

    fn deref(&self) -> &QTensor {
        &self.tensor
    }
}

/// Whether the CPU kernels take `ty` in its own blocks (a type read as Q8_0 for candle).
pub fn runs_natively(ty: GgmlType) -> bool {
    ty == GgmlType::IQ4_XS
}
