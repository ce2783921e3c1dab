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
//! Counterpart: llama.cpp keeps `token_embd` in host memory and runs its
//! `get_rows` there; vLLM's `VocabParallelEmbedding` (unquantized).

use std::borrow::Cow;

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};

use super::ModelError;

/// `token_embd.weight`: `rows` token vectors of `dim` values, each row
/// `row_bytes` of GGUF blocks.
pub struct TokenEmbedding {
    dtype: GgmlDType,
    rows: usize,
    dim: usize,
    row_bytes: usize,
    bytes: Vec<u8>,
}

impl TokenEmbedding {
    /// The table of `t` (`[rows, dim]`, any GGUF type, on any device).
    pub fn new(t: &QTensor) -> Result<Self, ModelError> {
        let &[rows, dim] = t.shape().dims() else {
            return Err(bad(format!("shape {:?}, not [vocab, hidden]", t.shape().dims())));
        };
        let bytes = t.data()?.into_owned();
        if rows == 0 || bytes.len() % rows != 0 {
            return Err(bad(format!("{} bytes do not split into {rows} rows", bytes.len())));
        }
        Ok(Self {
            dtype: t.dtype(),
            rows,
            dim,
            row_bytes: bytes.len() / rows,
            bytes,
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
            picked.extend_from_slice(&self.bytes[r * self.row_bytes..(r + 1) * self.row_bytes]);
        }
        let q = qtensor_from_ggml(self.dtype, &Cow::from(picked), vec![ids.len(), self.dim], &Device::Cpu)?;
        let x = q.dequantize(&Device::Cpu)?.to_dtype(DType::F32)?;
        Ok(if device.is_cpu() { x } else { x.to_device(device)? })
    }

    /// Host bytes the table takes.
    pub fn bytes(&self) -> u64 {
        self.bytes.len() as u64
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
        for dtype in [GgmlDType::F32, GgmlDType::F16, GgmlDType::Q8_0, GgmlDType::Q4_1, GgmlDType::Q4K, GgmlDType::Q6K] {
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
        }
    }
}
