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
use crate::ops::qmatmul::QuantKind;

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

/// The kind the CPU kernels take `ty` as in its own blocks (a type read as Q8_0 for candle),
/// if they do: the one list of such types, for the reader, the projections and the embedding.
pub fn native_kind(ty: GgmlType) -> Option<QuantKind> {
    match ty {
        GgmlType::IQ4_XS => Some(QuantKind::Iq4Xs),
        _ => None,
    }
}

/// A `[rows, cols]` IQ4_XS matrix of deterministic blocks (`seed`), carried in its own blocks
/// beside candle's Q8_0 reading: each block's `d` has 11 significant bits, so that
/// `d·(ls − 32)` is seldom exact in f16 and the two readings differ.
#[cfg(test)]
pub(crate) fn iq4_xs_weight(rows: usize, cols: usize, seed: u32) -> Weight {
    use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType};
    let mut x = seed | 1;
    let mut raw: Vec<u8> = (0..rows * cols / 256 * 136)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    for (i, b) in raw.chunks_exact_mut(136).enumerate() {
        b[..2].copy_from_slice(&half::f16::from_f32(0.0123 + i as f32 * 0.00071).to_bits().to_le_bytes());
    }
    let q8 = super::convert::to_q8_0(GgmlType::IQ4_XS, &raw).unwrap();
    let t = qtensor_from_ggml(
        GgmlDType::Q8_0,
        &std::borrow::Cow::from(q8),
        vec![rows, cols],
        &candle_core::Device::Cpu,
    );
    Weight::new(
        t.unwrap(),
        Some(NativeBlocks {
            ty: GgmlType::IQ4_XS,
            bytes: raw,
        }),
    )
}
