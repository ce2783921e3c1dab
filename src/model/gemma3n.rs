//! Gemma 3n's blocks that no other family has: AltUp's streams, Laurel's low-rank residual and
//! the MLP gate's Gaussian top-k. The rest of its layer (Q/K/V norms, K/V shared by the last
//! layers, the per-layer inputs) is Gemma 4's E models', which came from it.
//!
//! - [`AltUp`]: each token's hidden state is `inputs` streams (`[t, inputs, hidden]`): the
//!   scaled embedding, and each of its projections by `altup_proj` rescaled to its magnitude.
//!   After the last layer the streams but the first are projected back (`altup_unembd_proj`),
//!   rescaled to the first's magnitude, and all averaged.
//! - [`LayerAltUp`]: a layer runs on the first stream of its prediction
//!   (`pred_j = s_j + Σ_k c_jk · s_k`, the coefficients `altup_predict_coef` of the router's
//!   `tanh` modalities of the first stream), then corrects every stream by what it did
//!   (`pred_j + (1 + d_j) · (out − pred_0)`, `d = altup_correct_coef · modalities(out)`); the
//!   router reads `altup_router_norm(x) / hidden`. Its per-layer input, gated by the corrected
//!   first stream times `altup_correct_scale`, is added to the other streams.
//! - [`Laurel`]: `h + norm(laurel_r(laurel_l(h)))` of the attention's normed input, averaged
//!   with the attention's output (`(attn + laurel) / √2`).
//! - [`sparse_gate`]: the MLP gate less its mean and `k` standard deviations, floored at 0
//!   (its first layers' activation sparsity).
//!
//! Invariant: stream 0 is the active one (`HParams::altup` refuses another index), so the
//! cache's K/V are those of the layers' runs on it, as for any other family.
//!
//! Counterpart: llama.cpp's `src/models/gemma3n.cpp`; Hugging Face's `Gemma3nTextModel`
//! (`Gemma3nTextAltUp`, `Gemma3nTextLaurelBlock`).

use candle_core::{Device, Tensor, D};

use super::gguf::GgufFile;
use super::hparams::HParams;
use super::linear::QLinear;
use super::transformer::{check_shape, load_2d, load_rows_f32, load_vec};
use super::ModelError;
use crate::ops::norm;

/// Each row's Euclidean length (`[.., 1]`), as llama.cpp's `calc_magnitude`.
fn magnitude(x: &Tensor) -> Result<Tensor, ModelError> {
    Ok(x.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?)
}

/// `y` rescaled row by row to the lengths `target` (`[t, 1]`).
fn rescaled(y: &Tensor, target: &Tensor) -> Result<Tensor, ModelError> {
    Ok(y.broadcast_mul(target)?.broadcast_div(&magnitude(y)?)?)
}

/// Stream `j` of `s` (`[t, inputs, hidden]`): `[t, hidden]`.
fn stream(s: &Tensor, j: usize) -> Result<Tensor, ModelError> {
    Ok(s.narrow(1, j, 1)?.squeeze(1)?.contiguous()?)
}

/// The model's projections into and out of the streams.
pub struct AltUp {
    /// Streams 1.. from the embedding (`altup_proj`, one `[hidden, hidden]` each).
    spread: Vec<QLinear>,
    /// Streams 1.. back into the hidden state (`altup_unembd_proj`).
    merge: Vec<QLinear>,
}

impl AltUp {
    /// `altup_proj` and `altup_unembd_proj` (`[inputs − 1, hidden, hidden]`), when `hp` has
    /// AltUp.
    pub fn load(file: &mut GgufFile, hp: &HParams, device: &Device) -> Result<Option<Self>, ModelError> {
        let Some(p) = &hp.altup else { return Ok(None) };
        let (d, k) = (hp.hidden, p.inputs - 1);
        let mut split = |name: &str| -> Result<Vec<QLinear>, ModelError> {
            if let Some(dims) = file.tensor_shape(name) {
                check_shape(name, &dims, &[k, d, d])?;
            }
            file.tensor_row_split(name, &vec![d; k], d, device)?
                .into_iter()
                .map(|t| QLinear::new(t, device))
                .collect()
        };
        Ok(Some(Self {
            spread: split("altup_proj.weight")?,
            merge: split("altup_unembd_proj.weight")?,
        }))
    }

    /// The streams of the scaled embeddings `x` (`[t, hidden]`): `[t, inputs, hidden]`.
    pub fn spread(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let target = magnitude(x)?;
        let mut streams = vec![x.clone()];
        for p in &self.spread {
            streams.push(rescaled(&p.forward(x)?, &target)?);
        }
        Ok(Tensor::stack(&streams, 1)?)
    }

    /// The hidden state (`[t, hidden]`) of the streams `s` after the last layer.
    pub fn merge(&self, s: &Tensor) -> Result<Tensor, ModelError> {
        let first = stream(s, 0)?;
        let target = magnitude(&first)?;
        let mut sum = first;
        for (j, p) in self.merge.iter().enumerate() {
            sum = (sum + rescaled(&p.forward(&stream(s, j + 1)?)?, &target)?)?;
        }
        Ok(sum.affine(1.0 / (self.merge.len() + 1) as f64, 0.0)?)
    }
}

/// A layer's prediction and correction of the streams, and its Laurel block.
pub struct LayerAltUp {
    /// `altup_router`: `[inputs, hidden]`.
    router: QLinear,
    router_norm: Tensor,
    /// `altup_predict_coef`: `[inputs², inputs]` (row `j · inputs + k`: stream `k`'s share of
    /// prediction `j`).
    predict: Tensor,
    /// `altup_correct_coef`: `[inputs, inputs]`.
    correct: Tensor,
    /// `altup_correct_scale`: multiplies the corrected first stream before it gates the
    /// per-layer input.
    correct_scale: Tensor,
    laurel: Laurel,
    inputs: usize,
    hidden: usize,
    eps: f32,
}

impl LayerAltUp {
    /// Layer `i`'s AltUp and Laurel tensors, when `hp` has AltUp.
    pub fn load(file: &mut GgufFile, hp: &HParams, i: usize, device: &Device) -> Result<Option<Self>, ModelError> {
        let Some(p) = &hp.altup else { return Ok(None) };
        let (d, n) = (hp.hidden, p.inputs);
        let name = |s: &str| format!("blk.{i}.{s}");
        Ok(Some(Self {
            router: QLinear::new(load_2d(file, &name("altup_router.weight"), [n, d], device)?, device)?,
            router_norm: load_vec(file, &name("altup_router_norm.weight"), d, device)?,
            predict: load_rows_f32(file, &name("altup_predict_coef.weight"), [n * n, n], device)?,
            correct: load_rows_f32(file, &name("altup_correct_coef.weight"), [n, n], device)?,
            correct_scale: load_vec(file, &name("altup_correct_scale.weight"), d, device)?,
            laurel: Laurel::load(file, i, d, device)?,
            inputs: n,
            hidden: d,
            eps: hp.rms_eps as f32,
        }))
    }

    /// The router's modalities of `x` (`[t, hidden]`): `[t, inputs]`, each in (−1, 1).
    fn modalities(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let normed = norm::rms_norm(x, &self.router_norm, self.eps)?.affine(1.0 / self.hidden as f64, 0.0)?;
        Ok(self.router.forward(&normed)?.tanh()?)
    }

    /// The layer's prediction of each stream of `s` (`[t, inputs, hidden]`), from the first.
    pub fn predict(&self, s: &Tensor) -> Result<Tensor, ModelError> {
        let (t, n) = (s.dim(0)?, self.inputs);
        let m = self.modalities(&stream(s, 0)?)?;
        let coefs = m.matmul(&self.predict.t()?)?.reshape((t, n, n))?;
        let s = s.contiguous()?;
        Ok((coefs.matmul(&s)? + &s)?)
    }

    /// The predictions `pred` corrected by the layer's output `out` (`[t, hidden]`), which its
    /// run on the first of them gave.
    pub fn correct(&self, pred: &Tensor, out: &Tensor) -> Result<Tensor, ModelError> {
        let m = self.modalities(out)?;
        let coefs = m.matmul(&self.correct.t()?)?.affine(1.0, 1.0)?; // [t, inputs]
        let innovation = (out - stream(pred, 0)?)?;
        Ok(pred.broadcast_add(&coefs.unsqueeze(2)?.broadcast_mul(&innovation.unsqueeze(1)?)?)?)
    }

    /// The stream the layer runs on: the first of its predictions `pred` (`[t, hidden]`).
    pub fn active(&self, pred: &Tensor) -> Result<Tensor, ModelError> {
        stream(pred, 0)
    }

    /// What gates the per-layer input: the corrected first stream times `altup_correct_scale`.
    pub fn gate_input(&self, corrected: &Tensor) -> Result<Tensor, ModelError> {
        Ok(stream(corrected, 0)?.broadcast_mul(&self.correct_scale)?)
    }

    /// `s` with `y` (`[t, hidden]`) added to every stream but the first.
    pub fn add_to_others(&self, s: &Tensor, y: &Tensor) -> Result<Tensor, ModelError> {
        let rest = s.narrow(1, 1, self.inputs - 1)?.broadcast_add(&y.unsqueeze(1)?)?;
        Ok(Tensor::cat(&[&s.narrow(1, 0, 1)?, &rest], 1)?)
    }

    /// Laurel's output for the attention's normed input `h`.
    pub fn laurel(&self, h: &Tensor) -> Result<Tensor, ModelError> {
        self.laurel.forward(h, self.eps)
    }
}

/// Laurel's low-rank residual of the attention's normed input.
struct Laurel {
    /// `laurel_l`: `[rank, hidden]`.
    left: QLinear,
    /// `laurel_r`: `[hidden, rank]`.
    right: QLinear,
    post_norm: Tensor,
}

impl Laurel {
    fn load(file: &mut GgufFile, i: usize, d: usize, device: &Device) -> Result<Self, ModelError> {
        let name = |s: &str| format!("blk.{i}.{s}");
        let left_name = name("laurel_l.weight");
        // The rank is the checkpoint's (64 in the published files): read from the tensor.
        let rank = match file.tensor_shape(&left_name).as_deref() {
            Some([rank, _]) => *rank,
            Some(dims) => {
                return Err(ModelError::BadTensor {
                    name: left_name,
                    actual: dims.to_vec(),
                    expected: vec![0, d],
                })
            }
            None => return Err(ModelError::MissingTensor { name: left_name }),
        };
        Ok(Self {
            left: QLinear::new(load_2d(file, &left_name, [rank, d], device)?, device)?,
            right: QLinear::new(load_2d(file, &name("laurel_r.weight"), [d, rank], device)?, device)?,
            post_norm: load_vec(file, &name("laurel_post_norm.weight"), d, device)?,
        })
    }

    fn forward(&self, h: &Tensor, eps: f32) -> Result<Tensor, ModelError> {
        let low = self.right.forward(&self.left.forward(h)?)?;
        Ok((norm::rms_norm(&low, &self.post_norm, eps)? + h)?)
    }
}

/// Gemma 3n's Gaussian top-k of an MLP gate (`[t, width]`): each row less its mean and `k` of
/// its standard deviations (over `width − 1`, as llama.cpp's), floored at 0.
pub fn sparse_gate(gate: &Tensor, k: f32) -> Result<Tensor, ModelError> {
    let width = gate.dim(D::Minus1)?;
    let mean = gate.mean_keepdim(D::Minus1)?;
    let var = gate.broadcast_sub(&mean)?.sqr()?.sum_keepdim(D::Minus1)?.affine(1.0 / width.saturating_sub(1).max(1) as f64, 0.0)?;
    let cutoff = (mean + var.sqrt()?.affine(f64::from(k), 0.0)?)?;
    Ok(gate.broadcast_sub(&cutoff)?.relu()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cutoff is the mean plus `k` sample standard deviations: of 1, 2, 3, 4 (mean 2.5,
    /// deviation √(5/3)), with `k` 1 only 4 passes, by 4 − 3.79.
    #[test]
    fn sparse_gate_keeps_what_passes_the_cutoff() {
        let g = Tensor::new(&[[1f32, 2.0, 3.0, 4.0]], &Device::Cpu).unwrap();
        let out = sparse_gate(&g, 1.0).unwrap().to_vec2::<f32>().unwrap();
        let cutoff = 2.5 + (5.0f32 / 3.0).sqrt();
        assert_eq!(&out[0][..3], &[0.0, 0.0, 0.0]);
        assert!((out[0][3] - (4.0 - cutoff)).abs() < 1e-6, "{out:?}");
    }

    /// Rescaling keeps a row's direction and takes the target's length.
    #[test]
    fn rescaled_rows_take_the_target_length() {
        let y = Tensor::new(&[[3f32, 4.0], [0.0, 2.0]], &Device::Cpu).unwrap();
        let target = Tensor::new(&[[10f32], [1.0]], &Device::Cpu).unwrap();
        let out = rescaled(&y, &target).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(out, vec![vec![6.0, 8.0], vec![0.0, 1.0]]);
    }
}
