//! Rotary position embeddings for a packed batch (each row has its own position).
//!
//! Frequencies: `1 / base^(2i/d)`, divided per frequency by the model's
//! `rope_freqs.weight` when present (Llama 3.1+ stores its long-context
//! scaling that way, llama.cpp's `rope_freqs`), then scaled as the metadata
//! asks: positions divided by a linear factor, or YaRN (llama.cpp's
//! `rope_yarn`: each frequency between its interpolated and original value by
//! a ramp over the pair index, cos and sin multiplied by `1 + 0.1·ln(factor)`),
//! and cos and sin by `rope.scaling.attn_factor`.
//!
//! Partial rotary (Phi-4-mini): the tables cover the first `dims` dimensions of a head, whose
//! frequencies are `1 / base^(2i/dims)`, and [`RopeTables::apply`] passes the rest through
//! unchanged, as llama.cpp's `ggml_rope_ext` with `n_dims` below the head size does.

use candle_core::{DType, Device, Tensor};

use super::hparams::{RopeScaling, RopeStyle};
use super::ModelError;

/// Precomputed cos/sin tables, `[max_positions, dims / 2]`.
#[derive(Debug, Clone)]
pub struct RopeTables {
    cos: Tensor,
    sin: Tensor,
    style: RopeStyle,
    /// The rotated dimensions at the start of each head.
    dims: usize,
    max_positions: usize,
}

/// What the tables rotate by: base, scaling, magnitude and pairing.
#[derive(Debug, Clone, Copy)]
pub struct RopeSpec {
    pub base: f64,
    pub scaling: RopeScaling,
    /// Multiplies every cos and sin (`rope.scaling.attn_factor`).
    pub attn_factor: f64,
    pub style: RopeStyle,
}

/// llama.cpp's `ggml_rope_yarn_corr_dims`: the pair indices between which YaRN's ramp runs,
/// for `dims` rotated dimensions (`betas`: `beta_fast`, `beta_slow`, 32 and 1 by default).
fn yarn_ramp_pairs(dims: usize, original_context: usize, base: f64, (beta_fast, beta_slow): (f64, f64)) -> (f64, f64) {
    let corr = |beta: f64| {
        dims as f64 * (original_context as f64 / (beta * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
    };
    (corr(beta_fast).floor().max(0.0), corr(beta_slow).ceil().min(dims as f64 - 1.0))
}

impl RopeTables {
    /// Tables for rotating the first `dims` dimensions of each head; `freq_factors` (one per
    /// pair) divide the frequencies.
    pub fn new(
        dims: usize,
        spec: RopeSpec,
        freq_factors: Option<&[f32]>,
        max_positions: usize,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let RopeSpec {
            base,
            scaling,
            attn_factor,
            style,
        } = spec;
        let half = dims / 2;
        if let Some(f) = freq_factors {
            if f.len() != half {
                return Err(ModelError::BadTensor {
                    name: "rope frequency factors".into(),
                    actual: vec![f.len()],
                    expected: vec![half],
                });
            }
        }
        let pos_scale = match scaling {
            RopeScaling::None | RopeScaling::Yarn { .. } => 1.0,
            RopeScaling::Linear { factor } => 1.0 / factor,
        };
        let mut inv_freq: Vec<f64> = (0..half)
            .map(|i| {
                let f = 1.0 / base.powf((2 * i) as f64 / dims as f64);
                match freq_factors {
                    Some(ff) => f / ff[i] as f64,
                    None => f,
                }
            })
            .collect();
        if let RopeScaling::Yarn {
            factor,
            original_context,
            beta_fast,
            beta_slow,
            ..
        } = scaling
        {
            let (low, high) = yarn_ramp_pairs(dims, original_context, base, (beta_fast, beta_slow));
            for (i, f) in inv_freq.iter_mut().enumerate() {
                // 1 keeps the frequency (fast pairs), 0 divides it by the factor (slow ones).
                let ramp = 1.0 - ((i as f64 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
                *f *= (1.0 - ramp) / factor + ramp;
            }
        }
        // llama.cpp: ggml's `1 + 0.1·ln f`, times `get_mscale(f, 1) / get_mscale(f, m)` over
        // its own `1 + 0.1·ln f` when the file sets a log multiplier `m`.
        let mscale = (scaling.yarn_magnitude() * attn_factor) as f32;
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for p in 0..max_positions {
            for f in &inv_freq {
                // Same f32 rounding as candle's tables: angle computed in f32.
                let angle = (p as f64 * pos_scale) as f32 * (*f as f32);
                cos.push(angle.cos() * mscale);
                sin.push(angle.sin() * mscale);
            }
        }
        Ok(Self {
            cos: Tensor::from_vec(cos, (max_positions, half), device)?,
            sin: Tensor::from_vec(sin, (max_positions, half), device)?,
            style,
            dims,
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

    /// Rotates `x` (`[tokens, heads, head_dim]`) with tables from [`Self::gather`]: its first
    /// `dims` dimensions, the rest unchanged.
    pub fn apply(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor, ModelError> {
        let (t, h, d) = x.dims3()?;
        if d > self.dims {
            let rotated = self.apply(&x.narrow(2, 0, self.dims)?, cos, sin)?;
            return Ok(Tensor::cat(&[&rotated, &x.narrow(2, self.dims, d - self.dims)?], 2)?);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(scaling: RopeScaling, attn_factor: f64) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let spec = RopeSpec {
            base: 10_000.0,
            scaling,
            attn_factor,
            style: RopeStyle::Neox,
        };
        let t = RopeTables::new(64, spec, None, 300, &Device::Cpu).unwrap();
        (t.cos.to_vec2().unwrap(), t.sin.to_vec2().unwrap())
    }

    /// YaRN keeps the fast pairs' angles, divides the slow pairs' by the factor, ramps
    /// between, and scales cos and sin by `1 + 0.1·ln(factor)`; at factor 1 it is no scaling.
    /// Pairs for head 64, base 10 000, original context 512: the ramp runs over pairs 3..=16.
    #[test]
    fn yarn_keeps_fast_pairs_and_interpolates_slow_ones() {
        assert_eq!(yarn_ramp_pairs(64, 128, 10_000.0, (32.0, 1.0)), (0.0, 11.0));
        assert_eq!(yarn_ramp_pairs(64, 512, 10_000.0, (32.0, 1.0)), (3.0, 16.0));
        // The file's betas (Ministral 3) move the ramp.
        assert_eq!(yarn_ramp_pairs(64, 512, 10_000.0, (16.0, 2.0)), (5.0, 13.0));
        let (none_cos, _) = tables(RopeScaling::None, 1.0);
        let yarn = |factor| {
            tables(
                RopeScaling::Yarn {
                    factor,
                    original_context: 512,
                    beta_fast: 32.0,
                    beta_slow: 1.0,
                    log_multiplier: 0.0,
                },
                1.0,
            )
        };
        assert_eq!(yarn(1.0).0, none_cos);
        let (lin_cos, _) = tables(RopeScaling::Linear { factor: 4.0 }, 1.0);
        let (y_cos, y_sin) = yarn(4.0);
        let m = (1.0 + 0.1 * 4f64.ln()) as f32;
        for p in [1, 57, 299] {
            for i in 0..=3 {
                assert!((y_cos[p][i] - none_cos[p][i] * m).abs() < 1e-5, "pair {i} at {p}");
            }
            for i in 16..32 {
                assert!((y_cos[p][i] - lin_cos[p][i] * m).abs() < 1e-4, "pair {i} at {p}");
            }
            for i in 0..32 {
                let norm = (y_cos[p][i].powi(2) + y_sin[p][i].powi(2)).sqrt();
                assert!((norm - m).abs() < 1e-5);
            }
        }
        // A pair inside the ramp is between the two.
        let (a, b, c) = (none_cos[57][10] * m, y_cos[57][10], lin_cos[57][10] * m);
        assert!(b != a && b != c);
        // A log multiplier of 1 cancels the magnitude (Ministral 3), leaving the angles.
        let (m_cos, m_sin) = tables(
            RopeScaling::Yarn {
                factor: 4.0,
                original_context: 512,
                beta_fast: 32.0,
                beta_slow: 1.0,
                log_multiplier: 1.0,
            },
            1.0,
        );
        for (i, (c, s)) in m_cos[57].iter().zip(&m_sin[57]).enumerate() {
            assert!((c * m - y_cos[57][i]).abs() < 1e-5 && (s * m - y_sin[57][i]).abs() < 1e-5);
        }
        // rope.scaling.attn_factor multiplies cos and sin whatever the scaling.
        let (cos2, _) = tables(RopeScaling::None, 2.0);
        assert!(cos2.iter().flatten().zip(none_cos.iter().flatten()).all(|(x, y)| *x == 2.0 * y));
    }

    /// Partial rotary: the first `dims` dimensions of each head rotate as a head of `dims`
    /// would, the others pass through.
    #[test]
    fn partial_rotary_rotates_the_first_dims_only() {
        let spec = RopeSpec {
            base: 10_000.0,
            scaling: RopeScaling::None,
            attn_factor: 1.0,
            style: RopeStyle::Neox,
        };
        let dev = Device::Cpu;
        let partial = RopeTables::new(32, spec, None, 64, &dev).unwrap();
        let x = Tensor::randn(0f32, 1.0, (5, 3, 48), &dev).unwrap();
        let pos = positions_tensor(&[0, 3, 9, 20, 63], &dev).unwrap();
        let (cos, sin) = partial.gather(&pos).unwrap();
        let y = partial.apply(&x, &cos, &sin).unwrap();
        let head32 = partial.apply(&x.narrow(2, 0, 32).unwrap().contiguous().unwrap(), &cos, &sin).unwrap();
        let v = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(v(&y.narrow(2, 0, 32).unwrap()), v(&head32));
        assert_eq!(v(&y.narrow(2, 32, 16).unwrap()), v(&x.narrow(2, 32, 16).unwrap()));
        // Position 0 rotates nothing; a later one does.
        assert_eq!(v(&y.get(0).unwrap()), v(&x.get(0).unwrap()));
        assert_ne!(v(&y.get(1).unwrap().narrow(1, 0, 32).unwrap()), v(&x.get(1).unwrap().narrow(1, 0, 32).unwrap()));
    }
}
