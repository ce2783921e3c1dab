//! Rotary position embeddings for a packed batch (each row has its own position).
//!
//! Frequencies: `1 / base^(2i/d)`, divided per frequency by the model's
//! `rope_freqs.weight` when present (Llama 3.1+ stores its long-context
//! scaling that way, llama.cpp's `rope_freqs`), and positions divided by a
//! linear scaling factor when the metadata asks for one.

use candle_core::{DType, Device, Tensor};

use super::hparams::{RopeScaling, RopeStyle};
use super::ModelError;

/// Precomputed cos/sin tables, `[max_positions, head_dim / 2]`.
#[derive(Debug, Clone)]
pub struct RopeTables {
    cos: Tensor,
    sin: Tensor,
    style: RopeStyle,
    max_positions: usize,
}

impl RopeTables {
    pub fn new(
        head_dim: usize,
        base: f64,
        freq_factors: Option<&[f32]>,
        scaling: RopeScaling,
        style: RopeStyle,
        max_positions: usize,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let half = head_dim / 2;
        if let Some(f) = freq_factors {
            if f.len() != half {
                return Err(ModelError::BadTensor {
                    name: "rope_freqs.weight".into(),
                    actual: vec![f.len()],
                    expected: vec![half],
                });
            }
        }
        let pos_scale = match scaling {
            RopeScaling::None => 1.0,
            RopeScaling::Linear { factor } => 1.0 / factor,
        };
        let inv_freq: Vec<f64> = (0..half)
            .map(|i| {
                let f = 1.0 / base.powf((2 * i) as f64 / head_dim as f64);
                match freq_factors {
                    Some(ff) => f / ff[i] as f64,
                    None => f,
                }
            })
            .collect();
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for p in 0..max_positions {
            for f in &inv_freq {
                // Same f32 rounding as candle's tables: angle computed in f32.
                let angle = (p as f64 * pos_scale) as f32 * (*f as f32);
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        Ok(Self {
            cos: Tensor::from_vec(cos, (max_positions, half), device)?,
            sin: Tensor::from_vec(sin, (max_positions, half), device)?,
            style,
            max_positions,
        })
    }

    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// Gathers the tables for `positions` (`[tokens]`, u32): `[tokens, 1, d/2]`.
    pub fn gather(&self, positions: &Tensor) -> Result<(Tensor, Tensor), ModelError> {
        let n = positions.dims1()?;
        let cos = self.cos.index_select(positions, 0)?.reshape((n, 1, ()))?;
        let sin = self.sin.index_select(positions, 0)?.reshape((n, 1, ()))?;
        Ok((cos, sin))
    }

    /// Rotates `x` (`[tokens, heads, head_dim]`) with tables from [`Self::gather`].
    pub fn apply(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor, ModelError> {
        let (t, h, d) = x.dims3()?;
        // Each token is its own "batch" entry so that it gets its own position.
        let x4 = x.contiguous()?.reshape((t, h, 1, d))?;
        let cos = cos.to_dtype(x.dtype())?;
        let sin = sin.to_dtype(x.dtype())?;
        let y = match self.style {
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x4, &cos, &sin)?,
            RopeStyle::Neox => candle_nn::rotary_emb::rope(&x4, &cos, &sin)?,
        };
        Ok(y.reshape((t, h, d))?)
    }
}

/// The positions tensor for a packed batch.
pub fn positions_tensor(positions: &[u32], device: &Device) -> Result<Tensor, ModelError> {
    Ok(Tensor::new(positions, device)?.to_dtype(DType::U32)?)
}
