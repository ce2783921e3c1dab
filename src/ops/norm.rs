//! RMSNorm (and LayerNorm, Cohere's) over the last dimension, on the CPU threads the other ops
//! use.
//!
//! `y = x / √(mean(x²) + ε) · α`. candle_nn's CPU form splits the rows of a
//! prompt across rayon's threads, a second pool beside the spinning one our
//! matmuls and attention run on (`par`): on a machine with as many cores as
//! threads, each norm woke rayon's workers while ours spun (a Gemma 3 270M
//! prefill of 512 tokens: 3,000–4,000 context switches, about 200 without).
//! Here the rows go to `par::for_rows`, with candle_nn's arithmetic
//! unchanged (its sequential sum of squares, `x / m · α`), so the numbers are
//! candle_nn's bit for bit: only the threads changed. (An eight-lane sum would
//! be faster per row, but it moves every downstream logit in the last bits,
//! and with int8 activations that moves greedy text at near-ties; the norms
//! are a small part of a forward either way.) Other devices and types keep
//! candle_nn's op.
//!
//! Invariant: a row's result depends only on that row and `α`, so its bits
//! never depend on batching or how the rows are split across threads.
//!
//! LayerNorm without a bias, `(x − mean) / √(var + ε) · α`, takes the same path: its CPU
//! form a row at a time in the order of candle_nn's `layer_norm`, which other devices run.
//!
//! Counterpart: vLLM's `RMSNorm` (its `rms_norm` kernel) and `LayerNorm`, llama.cpp's
//! `ggml_rms_norm` and `ggml_norm` followed by `ggml_mul`.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};

use super::par;
use super::OpsError;

/// Below this many elements the op runs on the calling thread.
const SERIAL_ELEMENTS: usize = 1 << 14;

/// RMSNorm of `x` (`[.., d]`) with weight `alpha` (`[d]`).
pub fn rms_norm(x: &Tensor, alpha: &Tensor, eps: f32) -> Result<Tensor, OpsError> {
    if !on_host_f32(x, alpha, "RMSNorm")? {
        return Ok(candle_nn::ops::rms_norm(x, alpha, eps)?);
    }
    Ok(x.contiguous()?.apply_op2_no_bwd(&alpha.contiguous()?, &NormOp { eps, layer: false })?)
}

/// LayerNorm without a bias of `x` (`[.., d]`) with weight `alpha` (`[d]`).
pub fn layer_norm(x: &Tensor, alpha: &Tensor, eps: f32) -> Result<Tensor, OpsError> {
    if !on_host_f32(x, alpha, "LayerNorm")? {
        let beta = alpha.zeros_like()?;
        return Ok(candle_nn::ops::layer_norm(x, alpha, &beta, eps)?);
    }
    Ok(x.contiguous()?.apply_op2_no_bwd(&alpha.contiguous()?, &NormOp { eps, layer: true })?)
}

/// Whether the rows take our CPU path (both on the host, both f32); an error where `alpha` is
/// not one weight per column.
fn on_host_f32(x: &Tensor, alpha: &Tensor, what: &str) -> Result<bool, OpsError> {
    let d = x.dims().last().copied().unwrap_or(0);
    if alpha.dims() != [d] {
        return Err(OpsError::Layout(format!("{what} weight {:?} for rows of {d}", alpha.dims())));
    }
    let cpu = x.device().is_cpu() && alpha.device().is_cpu();
    Ok(cpu && x.dtype() == DType::F32 && alpha.dtype() == DType::F32)
}

/// One row: `out = x / √(Σx²/d + ε) · α`, in candle_nn's order of operations
/// (a sequential sum), so the result is candle_nn's bit for bit.
#[inline(always)]
fn row(x: &[f32], alpha: &[f32], eps: f32, out: &mut [f32]) {
    let sum2 = x.iter().map(|&v| v * v).sum::<f32>();
    let m = (sum2 / x.len() as f32 + eps).sqrt();
    for ((o, &v), &a) in out.iter_mut().zip(x).zip(alpha) {
        *o = v / m * a;
    }
}

/// One row of LayerNorm: `out = (x − μ) / √(σ² + ε) · α`, in candle_nn's `layer_norm` order
/// (sequential sums of `x` and `x²`, `σ² = Σx²/d − μ²`).
#[inline(always)]
fn layer_row(x: &[f32], alpha: &[f32], eps: f32, out: &mut [f32]) {
    let d = x.len() as f32;
    let (sum, sum2) = x.iter().fold((0f32, 0f32), |(s, s2), &v| (s + v, s2 + v * v));
    let mean = sum / d;
    let var = sum2 / d - mean * mean;
    let inv = 1.0 / (var + eps).sqrt();
    for ((o, &v), &a) in out.iter_mut().zip(x).zip(alpha) {
        *o = (v - mean) * inv * a;
    }
}

/// The CPU op: RMSNorm, or LayerNorm where `layer`.
struct NormOp {
    eps: f32,
    layer: bool,
}

impl CustomOp2 for NormOp {
    fn name(&self) -> &'static str {
        if self.layer {
            "hearth-layer-norm"
        } else {
            "hearth-rms-norm"
        }
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(x), CpuStorage::F32(alpha)) = (s1, s2) else {
            candle_core::bail!("rms_norm: inputs must be f32");
        };
        let (Some((xs, xe)), Some((as_, ae))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
            candle_core::bail!("rms_norm: inputs must be contiguous");
        };
        let (x, alpha) = (&x[xs..xe], &alpha[as_..ae]);
        let d = alpha.len();
        let mut out = vec![0f32; x.len()];
        let eps = self.eps;
        let row = if self.layer { layer_row } else { row };
        par::for_rows(&mut out, d, SERIAL_ELEMENTS, |r, o| row(&x[r * d..(r + 1) * d], alpha, eps, o));
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::rand_vec;
    use candle_core::Device;

    /// Against candle_nn's RMSNorm, bit for bit, for row widths with and without a
    /// tail past a multiple of 8, few rows (serial) and many (across threads), a 3-D
    /// input, and a strided one.
    #[test]
    fn equals_candle_nn_bit_for_bit() {
        let cpu = Device::Cpu;
        for (rows, d) in [(1, 64), (3, 13), (200, 576), (64, 640)] {
            let x = Tensor::from_vec(rand_vec(rows * d, 5), (rows, d), &cpu).unwrap();
            let x = x.affine(3.0, 0.5).unwrap();
            let alpha = Tensor::from_vec(rand_vec(d, 9), d, &cpu).unwrap();
            let got: Vec<f32> = rms_norm(&x, &alpha, 1e-6).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let want: Vec<f32> = candle_nn::ops::rms_norm(&x, &alpha, 1e-6)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            assert_eq!(got, want, "{rows}x{d}");
            // Each row alone gives the bits it gets among many.
            let mut one = vec![0f32; d];
            let xv: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
            let av: Vec<f32> = alpha.to_vec1().unwrap();
            for r in 0..rows {
                row(&xv[r * d..(r + 1) * d], &av, 1e-6, &mut one);
                assert_eq!(one, got[r * d..(r + 1) * d], "row {r} of {rows}x{d}");
            }
        }
        let x = Tensor::from_vec(rand_vec(2 * 3 * 16, 2), (2, 3, 16), &cpu).unwrap();
        let alpha = Tensor::from_vec(rand_vec(16, 3), 16, &cpu).unwrap();
        assert_eq!(rms_norm(&x, &alpha, 1e-5).unwrap().dims(), &[2, 3, 16]);
        let t = x.reshape((6, 16)).unwrap().t().unwrap().contiguous().unwrap().t().unwrap();
        let (a, b): (Vec<f32>, Vec<f32>) = (
            rms_norm(&t, &alpha, 1e-5).unwrap().flatten_all().unwrap().to_vec1().unwrap(),
            rms_norm(&x.reshape((6, 16)).unwrap(), &alpha, 1e-5)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap(),
        );
        assert_eq!(a, b);
    }

    /// LayerNorm against candle_nn's (a zero bias), bit for bit, serial and across threads,
    /// on rows away from zero mean.
    #[test]
    fn layer_norm_equals_candle_nn_bit_for_bit() {
        let cpu = Device::Cpu;
        for (rows, d) in [(1, 64), (3, 13), (200, 576)] {
            let x = Tensor::from_vec(rand_vec(rows * d, 7), (rows, d), &cpu).unwrap();
            let x = x.affine(3.0, 1.5).unwrap();
            let alpha = Tensor::from_vec(rand_vec(d, 4), d, &cpu).unwrap();
            let beta = alpha.zeros_like().unwrap();
            let got: Vec<f32> = layer_norm(&x, &alpha, 1e-5).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let want: Vec<f32> = candle_nn::ops::layer_norm(&x, &alpha, &beta, 1e-5)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            assert_eq!(got, want, "{rows}x{d}");
        }
    }

    #[test]
    fn a_weight_of_the_wrong_width_is_refused() {
        let cpu = Device::Cpu;
        let x = Tensor::zeros((2, 8), DType::F32, &cpu).unwrap();
        let alpha = Tensor::zeros(7, DType::F32, &cpu).unwrap();
        assert!(matches!(rms_norm(&x, &alpha, 1e-6), Err(OpsError::Layout(_))));
        assert!(matches!(layer_norm(&x, &alpha, 1e-6), Err(OpsError::Layout(_))));
    }
}
