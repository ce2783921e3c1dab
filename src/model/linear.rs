//! Projections of one input fused into a single quantized matmul.
//!
//! Q, K and V (and the MLP's gate and up) read the same normed hidden state.
//! When their weights share a GGUF type, their rows are concatenated into one
//! matrix at load time, so the forward quantizes the activations once and
//! runs one larger matmul, then splits the output columns. Each output column
//! is still the dot product of the same weight row with the same quantized
//! input, so the numbers equal those of separate matmuls.
//!
//! Counterpart: vLLM's `QKVParallelLinear` and `MergedColumnParallelLinear`.

use std::borrow::Cow;

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

use super::ModelError;

enum Parts {
    Fused(QMatMul),
    Separate(Vec<QMatMul>),
}

/// Several `[out_i, in]` projections of the same input.
pub struct FusedLinear {
    parts: Parts,
    widths: Vec<usize>,
}

impl FusedLinear {
    /// Fuses `weights` (all `[out_i, in]`) when they share a type; otherwise
    /// keeps them as separate matmuls.
    pub fn new(weights: Vec<QTensor>, device: &Device) -> Result<Self, ModelError> {
        let widths: Vec<usize> = weights.iter().map(|w| w.shape().dims()[0]).collect();
        let dtype = weights[0].dtype();
        let cols = weights[0].shape().dims()[1];
        let same = weights
            .iter()
            .all(|w| w.dtype() == dtype && w.shape().dims()[1] == cols);
        if same && weights.len() > 1 {
            let mut bytes: Vec<u8> = Vec::new();
            for w in &weights {
                bytes.extend_from_slice(&w.data()?);
            }
            let rows = widths.iter().sum();
            // A type candle cannot rebuild from bytes stays unfused.
            if let Ok(t) = qtensor_from_ggml(dtype, &Cow::from(bytes), vec![rows, cols], device) {
                return Ok(Self {
                    parts: Parts::Fused(QMatMul::from_qtensor(t)?),
                    widths,
                });
            }
        }
        let parts = weights
            .into_iter()
            .map(QMatMul::from_qtensor)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            parts: Parts::Separate(parts),
            widths,
        })
    }

    /// `x`: `[tokens, in]` → one `[tokens, out_i]` per projection.
    pub fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>, ModelError> {
        match &self.parts {
            Parts::Separate(ms) => Ok(ms.iter().map(|m| m.forward(x)).collect::<Result<Vec<_>, _>>()?),
            Parts::Fused(m) => {
                let y = m.forward(x)?;
                let mut out = Vec::with_capacity(self.widths.len());
                let mut at = 0;
                for w in &self.widths {
                    out.push(y.narrow(1, at, *w)?);
                    at += w;
                }
                Ok(out)
            }
        }
    }

    #[cfg(test)]
    fn is_fused(&self) -> bool {
        matches!(self.parts, Parts::Fused(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::GgmlDType;

    fn weight(rows: usize, cols: usize, seed: u32, dtype: GgmlDType) -> QTensor {
        let data: Vec<f32> = (0..rows * cols)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        QTensor::quantize(&Tensor::from_vec(data, (rows, cols), &Device::Cpu).unwrap(), dtype).unwrap()
    }

    #[test]
    fn fused_equals_separate_matmuls() {
        let cpu = Device::Cpu;
        let x = Tensor::from_vec(
            (0..3 * 64).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(),
            (3, 64),
            &cpu,
        )
        .unwrap();
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0, GgmlDType::F32] {
            let shapes = [(32, 1), (16, 2), (16, 3)];
            let ws = shapes.iter().map(|&(r, s)| weight(r, 64, s, dtype)).collect();
            let fused = FusedLinear::new(ws, &cpu).unwrap();
            assert!(fused.is_fused(), "{dtype:?}");
            let outs = fused.forward(&x).unwrap();
            for (&(r, s), y) in shapes.iter().zip(outs) {
                let w = weight(r, 64, s, dtype);
                let expect = QMatMul::from_qtensor(w).unwrap().forward(&x).unwrap();
                let d: f32 = (y - expect)
                    .unwrap()
                    .abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar()
                    .unwrap();
                assert_eq!(d, 0.0, "{dtype:?}");
            }
        }
    }

    #[test]
    fn mixed_types_stay_separate() {
        let cpu = Device::Cpu;
        let ws = vec![weight(32, 64, 1, GgmlDType::Q8_0), weight(32, 64, 2, GgmlDType::Q4_0)];
        let l = FusedLinear::new(ws, &cpu).unwrap();
        assert!(!l.is_fused());
        let x = Tensor::ones((2, 64), candle_core::DType::F32, &cpu).unwrap();
        let outs = l.forward(&x).unwrap();
        assert_eq!(outs[1].dims(), &[2, 32]);
    }
}
