//! The token embedding table, kept in host memory as the GGUF stores it
//! (quantized); a forward dequantizes only the rows of its tokens.
//!
//! The table is the model's widest matrix (`vocab × hidden`): widened to f32
//! up front it took 671 MB for Gemma 3 270M (a 253 MB file) and would take
//! 2.1 GB for a Llama 3 8B, in VRAM on a GPU, to serve a lookup of a few rows
//! per step. Rows are dequantized with candle's own block decoders, so a row's
//! values are bit for bit those of dequantizing the whole table. On a GPU the
//! looked-up rows (`tokens × hidden` f32) are copied to the device; the tied
//! output projection, which does need the table on the device, is loaded
//! there separately.
//!
//! IQ4_XS, which candle reads as Q8_0 with each sub-block's scale rounded to f16, is kept in
//! the file's own blocks where the reader carries them ([`Weight`]) and decoded as ggml's
//! `get_rows` decodes it ([`crate::model::gguf::convert::dequantize_iq4_xs`]).
//!
//! A tied table on the CPU (no `output.weight`: the output projection is the embedding) is
//! held once: the output projection's repacked matrix gives its rows back as the GGUF bytes
//! it was packed from ([`PackedMatrix::row_gguf`], [`FloatMatrix::row_gguf`], exact), and
//! those are decoded as above, so a lookup's values do not change
//! ([`TokenEmbedding::shared`]).
//!
//! Counterpart: llama.cpp keeps `token_embd` in host memory and runs its
//! `get_rows` there; vLLM's `VocabParallelEmbedding` (unquantized).

use std::borrow::Cow;

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};

use super::gguf::convert::dequantize_iq4_xs;
use super::gguf::weight::{native_kind, Weight};
use super::linear::OurMatrix;
use super::ModelError;
use crate::ops::qmatmul::QuantKind;
#[cfg(doc)]
use crate::ops::{fmatmul::FloatMatrix, qmatmul::PackedMatrix};

/// `token_embd.weight`: `rows` token vectors of `dim` values, each row
/// `row_bytes` of GGUF blocks.
pub struct TokenEmbedding {
    format: Format,
    rows: usize,
    dim: usize,
    row_bytes: usize,
    table: Table,
}

/// How a row's bytes decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// candle's decoder of this type.
    Candle(GgmlDType),
    /// IQ4_XS's own blocks (a type candle lacks): [`dequantize_iq4_xs`].
    Iq4Xs,
}

impl Format {
    /// Bytes of a row of `dim` values, if `dim` is whole blocks.
    fn row_bytes(self, dim: usize) -> Option<usize> {
        let (block, bytes) = match self {
            Self::Candle(t) => (t.block_size(), t.type_size()),
            Self::Iq4Xs => (256, 136),
        };
        dim.is_multiple_of(block).then_some(dim / block * bytes)
    }
}

/// Where the rows' GGUF bytes come from.
enum Table {
    /// The file's bytes, row after row.
    Bytes(Vec<u8>),
    /// A tied output projection's matrix in our kernels' layout (the same bytes, read back).
    Shared(OurMatrix),
}

impl TokenEmbedding {
    /// The table of `t` (`[rows, dim]`, any GGUF type, on any device).
    pub fn new(t: &QTensor) -> Result<Self, ModelError> {
        Self::from_bytes(Format::Candle(t.dtype()), t.shape().dims(), t.data()?.into_owned())
    }

    /// The table of `w`: in the file's own blocks where it carries them (IQ4_XS; candle's
    /// reading of them dropped), else as [`new`](Self::new).
    pub fn from_weight(w: Weight) -> Result<Self, ModelError> {
        let (t, native) = w.into_parts();
        match native {
            Some(n) if native_kind(n.ty) == Some(QuantKind::Iq4Xs) => {
                let dims = t.shape().dims().to_vec();
                drop(t);
                Self::from_bytes(Format::Iq4Xs, &dims, n.bytes)
            }
            _ => Self::new(&t),
        }
    }

    fn from_bytes(format: Format, dims: &[usize], bytes: Vec<u8>) -> Result<Self, ModelError> {
        let &[rows, dim] = dims else {
            return Err(bad(format!("shape {dims:?}, not [vocab, hidden]")));
        };
        if rows == 0 || bytes.len() % rows != 0 {
            return Err(bad(format!("{} bytes do not split into {rows} rows", bytes.len())));
        }
        Ok(Self {
            format,
            rows,
            dim,
            row_bytes: bytes.len() / rows,
            table: Table::Bytes(bytes),
        })
    }

    /// The table of a tied output projection our kernels run, read from its matrix in their
    /// layout (`dtype`: the GGUF type it was made from): no copy of the file's bytes.
    /// A matrix packed as IQ4_XS gives IQ4_XS's blocks back, whatever `dtype`.
    pub fn shared(dtype: GgmlDType, packed: OurMatrix) -> Result<Self, ModelError> {
        let (rows, dim) = (packed.rows(), packed.cols());
        let format = match &packed {
            OurMatrix::Packed(p) if p.kind() == QuantKind::Iq4Xs => Format::Iq4Xs,
            _ => Format::Candle(dtype),
        };
        let row_bytes = format.row_bytes(dim).filter(|_| rows > 0);
        let Some(row_bytes) = row_bytes else {
            return Err(bad(format!("a packed {rows}×{dim} table of {format:?}")));
        };
        Ok(Self {
            format,
            rows,
            dim,
            row_bytes,
            table: Table::Shared(packed),
        })
    }

    /// Rows `ids` as f32 `[ids.len(), dim]` on `device`.
    pub fn lookup(&self, ids: &[u32], device: &Device) -> Result<Tensor, ModelError> {
        if ids.is_empty() {
            return Ok(Tensor::zeros((0, self.dim), DType::F32, device)?);
        }
        let mut picked = Vec::with_capacity(ids.len() * self.row_bytes);
        for &id in ids {
            let r = id as usize;
            if r >= self.rows {
                return Err(ModelError::TokenOutOfRange { id, vocab: self.rows });
            }
            match &self.table {
                Table::Bytes(b) => picked.extend_from_slice(&b[r * self.row_bytes..(r + 1) * self.row_bytes]),
                Table::Shared(p) => p.row_gguf(r, &mut picked),
            }
        }
        let x = match self.format {
            Format::Candle(dtype) => {
                let q = qtensor_from_ggml(dtype, &Cow::from(picked), vec![ids.len(), self.dim], &Device::Cpu)?;
                q.dequantize(&Device::Cpu)?.to_dtype(DType::F32)?
            }
            Format::Iq4Xs => {
                let mut v = Vec::with_capacity(ids.len() * self.dim);
                dequantize_iq4_xs(&picked, &mut v);
                Tensor::from_vec(v, (ids.len(), self.dim), &Device::Cpu)?
            }
        };
        Ok(if device.is_cpu() { x } else { x.to_device(device)? })
    }

    /// Whether the rows are read from the output projection's packed matrix.
    pub fn is_shared(&self) -> bool {
        matches!(self.table, Table::Shared(_))
    }

    /// Bytes of the table as the file stores it.
    pub fn file_bytes(&self) -> u64 {
        (self.rows * self.row_bytes) as u64
    }
}

fn bad(reason: String) -> ModelError {
    candle_core::Error::Msg(format!("token_embd.weight: {reason}")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of a table, for each type a GGUF may store it in, equals the
    /// row of the whole table dequantized at once; ids past the table are refused.
    #[test]
    fn rows_equal_the_whole_table_dequantized() {
        let cpu = Device::Cpu;
        let (rows, dim) = (11, 256);
        let data: Vec<f32> = (0..rows * dim).map(|i| ((i * 7919 % 1000) as f32 / 250.0) - 2.0).collect();
        let table = Tensor::from_vec(data, (rows, dim), &cpu).unwrap();
        for dtype in [GgmlDType::F32, GgmlDType::F16, GgmlDType::BF16, GgmlDType::Q8_0, GgmlDType::Q4_1, GgmlDType::Q4K, GgmlDType::Q6K] {
            let q = QTensor::quantize(&table, dtype).unwrap();
            let whole = q.dequantize(&cpu).unwrap();
            let e = TokenEmbedding::new(&q).unwrap();
            let ids = [3u32, 0, 10, 3, 7];
            let got = e.lookup(&ids, &cpu).unwrap();
            let want = whole.index_select(&Tensor::new(&ids[..], &cpu).unwrap(), 0).unwrap();
            let (got, want): (Vec<Vec<f32>>, Vec<Vec<f32>>) = (got.to_vec2().unwrap(), want.to_vec2().unwrap());
            assert_eq!(got, want, "{dtype:?}");
            assert!(matches!(
                e.lookup(&[1, 11], &cpu),
                Err(ModelError::TokenOutOfRange { id: 11, vocab: 11 })
            ));
            assert_eq!(e.lookup(&[], &cpu).unwrap().dims(), &[0, dim]);

            // Read from the tied output's matrix in our kernels' layout: the same values.
            let linear = crate::model::linear::QLinear::new(q, &cpu).unwrap();
            let Some(table) = linear.shared_table() else {
                continue;
            };
            let shared = TokenEmbedding::shared(dtype, table).unwrap();
            assert_eq!(shared.file_bytes(), e.file_bytes());
            let from_packed: Vec<Vec<f32>> = shared.lookup(&ids, &cpu).unwrap().to_vec2().unwrap();
            assert_eq!(from_packed, want, "{dtype:?} from the packed matrix");
            assert!(matches!(
                shared.lookup(&[11], &cpu),
                Err(ModelError::TokenOutOfRange { id: 11, vocab: 11 })
            ));
        }
    }

    /// An IQ4_XS table carried in its own blocks: its rows are ggml's values (each sub-block's
    /// `d·(ls − 32)` unrounded, which the Q8_0 candle reads rounds to f16), whether read from
    /// the file's bytes or back from the tied output's packed matrix.
    #[test]
    fn iq4_xs_rows_are_ggml_values() {
        let cpu = Device::Cpu;
        let (rows, dim) = (9, 512);
        let weight = || crate::model::gguf::weight::iq4_xs_weight(rows, dim, 0x2545_F491);
        let raw = weight().native().map(|n| n.bytes.clone()).unwrap();
        let ids = [4u32, 0, 8, 4];
        let row_bytes = dim / 256 * 136;
        let mut want = Vec::new();
        for &id in &ids {
            dequantize_iq4_xs(&raw[id as usize * row_bytes..][..row_bytes], &mut want);
        }
        let flat = |e: &TokenEmbedding| e.lookup(&ids, &cpu).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        // The Q8_0 candle reads differs (the test's point: its scales are rounded).
        assert_ne!(flat(&TokenEmbedding::new(&weight()).unwrap()), want);
        let own = TokenEmbedding::from_weight(weight()).unwrap();
        assert_eq!(own.file_bytes(), raw.len() as u64);
        assert_eq!(flat(&own), want);
        let linear = crate::model::linear::QLinear::new(weight(), &cpu).unwrap();
        let shared = TokenEmbedding::shared(GgmlDType::Q8_0, linear.shared_table().unwrap()).unwrap();
        assert_eq!(shared.file_bytes(), raw.len() as u64);
        assert_eq!(flat(&shared), want, "from the packed matrix");
    }
}
