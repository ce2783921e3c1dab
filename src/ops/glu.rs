//! The MLP's gated activation, `act(gate) · up`, as one pass over the
//! gate/up projection's output.
//!
//! Llama and Qwen take `silu(gate) · up`, Gemma `gelu_tanh(gate) · up`. Both
//! are `gate · σ(z) · up` with `z = gate` (SiLU) or
//! `z = 2·√(2/π)·(gate + 0.044715·gate³)` (GELU's tanh form, since
//! `½(1 + tanh u) = σ(2u)`), and `σ(z)` is computed from `e^(−|z|)` only
//! (`fast_math::exp`, vectorized): `1/(1+e)` for `z ≥ 0`, `e/(1+e)`
//! below, so neither side overflows and GELU's `1 + tanh` loses nothing to
//! cancellation for negative inputs.
//!
//! On the CPU the two inputs may be column slices of one fused matmul output
//! (rows with a stride); the op reads them in place, splits the rows across the
//! threads, and writes one contiguous `[rows, width]` result. This replaced
//! candle's `gelu`/`silu` (a libm `tanhf`/`expf` per element, 16% of a Gemma 3
//! prefill's samples, and on one thread: candle splits an elementwise op
//! across threads only for a contiguous input) and the separate multiply.
//! Other devices keep candle's ops.
//!
//! Invariant: an output element depends only on its gate and up values (no
//! reduction), so its bits never depend on how rows are batched or split.
//!
//! gpt-oss's experts take OpenAI's clamped SwiGLU: with `g = min(gate, 7)`,
//! `g · σ(1.702·g) · (clamp(up, −7, 7) + 1)` ([`Gate::SwigluOai`]); SmallThinker's
//! `max(gate, 0) · up` ([`Gate::Relu`]); BitNet b1.58's `max(gate, 0)² · up`
//! ([`Gate::ReluSquared`]).
//!
//! Counterpart: vLLM's `SiluAndMul` / `GeluAndMul(approximate="tanh")` /
//! `SwigluOAIAndMul`, llama.cpp's `ggml_swiglu` / `ggml_geglu` / `ggml_swiglu_oai`.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Shape, Tensor};

use super::fast_math::exp;
use super::par;
use super::OpsError;

/// The gate's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `silu(x) = x · σ(x)`.
    Silu,
    /// `gelu_tanh(x) = ½x(1 + tanh(√(2/π)(x + 0.044715x³)))`.
    GeluTanh,
    /// gpt-oss: `g · σ(α·g) · (clamp(up, −L, L) + 1)` with `g = min(x, L)`, `α` =
    /// [`SWIGLU_OAI_ALPHA`], `L` = [`SWIGLU_OAI_LIMIT`] (llama.cpp's `ggml_swiglu_oai`).
    SwigluOai,
    /// SmallThinker's experts: `max(x, 0)` (llama.cpp's `ggml_reglu`).
    Relu,
    /// BitNet b1.58's MLP where its file says `relu2`: `max(x, 0)²`.
    ReluSquared,
}

/// gpt-oss's SwiGLU: the sigmoid's slope (llama.cpp's `alpha`, hard-coded as in OpenAI's
/// reference).
pub const SWIGLU_OAI_ALPHA: f32 = 1.702;
/// gpt-oss's SwiGLU: the clamp on the gate (above) and on up (both sides).
pub const SWIGLU_OAI_LIMIT: f32 = 7.0;

/// Below this many elements the op runs on the calling thread (a decode step's
/// few thousand are done before the pool would wake).
const SERIAL_ELEMENTS: usize = 1 << 15;

/// `act(gate) · up`, elementwise; `gate` and `up` have the same shape. The
/// result is contiguous.
pub fn gated(gate: &Tensor, up: &Tensor, act: Gate) -> Result<Tensor, OpsError> {
    if gate.dims() != up.dims() {
        return Err(OpsError::Layout(format!(
            "gate {:?} and up {:?} differ in shape",
            gate.dims(),
            up.dims()
        )));
    }
    let on_cpu = gate.device().is_cpu() && up.device().is_cpu();
    if !on_cpu || gate.dtype() != DType::F32 || up.dtype() != DType::F32 {
        return with_candle_ops(gate, up, act);
    }
    let dims = gate.dims().to_vec();
    let width = dims.last().copied().unwrap_or(1);
    let (g, u) = (rows_of(gate, width)?, rows_of(up, width)?);
    Ok(g.apply_op2_no_bwd(&u, &GatedOp(act))?.reshape(dims)?)
}

/// `act(x)`, elementwise, for an MLP without a gate (GPT-2's and BERT's up, GELU, down): on
/// the CPU [`row`]'s arithmetic with `up` all ones (a product by 1 is exact), across the
/// threads, where candle's `gelu` ran a libm `tanhf` per element on one thread (a fifth of a
/// BERT-base embedding's samples). The result is contiguous.
pub fn activated(x: &Tensor, act: Gate) -> Result<Tensor, OpsError> {
    if !x.device().is_cpu() || x.dtype() != DType::F32 {
        return with_candle_ops(x, &x.ones_like()?, act);
    }
    let dims = x.dims().to_vec();
    let width = dims.last().copied().unwrap_or(1);
    Ok(rows_of(x, width)?.apply_op1_no_bwd(&ActivationOp(act))?.reshape(dims)?)
}

/// The op in candle's elementwise ops, for devices and types the CPU form does not take.
fn with_candle_ops(gate: &Tensor, up: &Tensor, act: Gate) -> Result<Tensor, OpsError> {
    Ok(match act {
        Gate::Silu => (gate.silu()? * up)?,
        Gate::GeluTanh => (gate.gelu()? * up)?,
        Gate::SwigluOai => {
            let l = SWIGLU_OAI_LIMIT as f64;
            let g = gate.minimum(l)?;
            // σ(α·g) as 1 / (1 + e^(−α·g)).
            let sig = (g.affine(-(SWIGLU_OAI_ALPHA as f64), 0.0)?.exp()? + 1.0)?.recip()?;
            ((g * sig)? * up.clamp(-l, l)?.affine(1.0, 1.0)?)?
        }
        Gate::Relu => (gate.relu()? * up)?,
        Gate::ReluSquared => (gate.relu()?.sqr()? * up)?,
    })
}

/// `t` as `[rows, width]` whose rows the op can read in place: a 2-D tensor
/// with contiguous rows as it is (a column slice included), anything else
/// made contiguous first.
fn rows_of(t: &Tensor, width: usize) -> Result<Tensor, OpsError> {
    let l = t.layout();
    if l.dims().len() == 2 && (l.stride()[1] == 1 || width <= 1) {
        return Ok(t.clone());
    }
    let rows = t.elem_count().checked_div(width).unwrap_or(0);
    Ok(t.contiguous()?.reshape((rows, width))?)
}

/// `σ(z) · x`, from `e^(−|z|)` (see the module docs).
#[inline(always)]
fn times_sigmoid(x: f32, z: f32) -> f32 {
    let e = exp(-z.abs());
    let num = if z >= 0.0 { x } else { x * e };
    num / (1.0 + e)
}

/// One row: `out[i] = act(g[i]) · u[i]` (the op's own arithmetic, for callers that hold
/// plain slices).
pub fn row(act: Gate, g: &[f32], u: &[f32], out: &mut [f32]) {
    const C: f32 = 2.0 * 0.797_884_6; // 2·√(2/π)
    let it = out.iter_mut().zip(g).zip(u);
    match act {
        Gate::Silu => it.for_each(|((o, &x), &y)| *o = times_sigmoid(x, x) * y),
        Gate::GeluTanh => it.for_each(|((o, &x), &y)| *o = times_sigmoid(x, C * (x + 0.044_715 * x * x * x)) * y),
        Gate::SwigluOai => it.for_each(|((o, &x), &y)| {
            let g = x.min(SWIGLU_OAI_LIMIT);
            *o = times_sigmoid(g, SWIGLU_OAI_ALPHA * g) * (y.clamp(-SWIGLU_OAI_LIMIT, SWIGLU_OAI_LIMIT) + 1.0)
        }),
        Gate::Relu => it.for_each(|((o, &x), &y)| *o = x.max(0.0) * y),
        Gate::ReluSquared => it.for_each(|((o, &x), &y)| {
            let r = x.max(0.0);
            *o = r * r * y
        }),
    }
}

/// The CPU form: both inputs `[rows, width]` with unit column stride.
struct GatedOp(Gate);

/// A `[rows, width]` input with unit column stride: its storage from the first row on,
/// the row stride, and the width.
fn rows_slice<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<(&'a [f32], usize, usize)> {
    let CpuStorage::F32(data) = s else {
        candle_core::bail!("gated activation: inputs must be f32");
    };
    let (&[rows, width], stride) = (l.dims(), l.stride()) else {
        candle_core::bail!("gated activation: inputs must be [rows, width]");
    };
    let row_stride = if rows <= 1 { width } else { stride[0] };
    let need = if rows == 0 { 0 } else { (rows - 1) * row_stride + width };
    let Some(data) = data.get(l.start_offset()..l.start_offset() + need) else {
        candle_core::bail!("gated activation: the layout reaches past its storage");
    };
    Ok((data, row_stride, width))
}

impl CustomOp2 for GatedOp {
    fn name(&self) -> &'static str {
        "hearth-gated-activation"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (g, gs, width) = rows_slice(s1, l1)?;
        let (u, us, _) = rows_slice(s2, l2)?;
        let rows = l1.dims()[0];
        let mut out = vec![0f32; rows * width];
        par::for_rows(&mut out, width, SERIAL_ELEMENTS, |r, o| {
            row(self.0, &g[r * gs..r * gs + width], &u[r * us..r * us + width], o);
        });
        Ok((CpuStorage::F32(out), Shape::from((rows, width))))
    }
}

/// [`activated`]'s CPU form: one input `[rows, width]` with unit column stride.
struct ActivationOp(Gate);

impl CustomOp1 for ActivationOp {
    fn name(&self) -> &'static str {
        "hearth-activation"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, xs, width) = rows_slice(s, l)?;
        let rows = l.dims()[0];
        let ones = vec![1f32; width];
        let mut out = vec![0f32; rows * width];
        par::for_rows(&mut out, width, SERIAL_ELEMENTS, |r, o| row(self.0, &x[r * xs..r * xs + width], &ones, o));
        Ok((CpuStorage::F32(out), Shape::from((rows, width))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::rand_vec;
    use candle_core::Device;

    fn silu64(x: f64) -> f64 {
        x / (1.0 + (-x).exp())
    }

    /// `½x(1 + tanh u)`, written `x / (1 + e^(−2u))` (equal; `1 + tanh u` cancels to 0 in f64 too
    /// for negative `u` past about −19).
    fn gelu64(x: f64) -> f64 {
        let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        x / (1.0 + (-2.0 * u).exp())
    }

    /// Against the f64 formulas over [−30, 30] (and the tails), with up = 1:
    /// within a few ulp of the exact value, plus what rounding `z` to f32
    /// costs (`σ(z)` for `z < 0` is about `e^z`, so a relative error `ε` in
    /// `z` is `|z|·ε` in the result).
    #[test]
    fn matches_the_formulas_to_a_few_ulp() {
        let mut xs: Vec<f32> = (-6000..=6000).map(|i| i as f32 * 0.005).collect();
        xs.extend([-100.0, -88.0, -20.0, 0.0, -0.0, 1e-30, -1e-30, 20.0, 88.0, 100.0, 1e6]);
        let n = xs.len();
        let ones = vec![1f32; n];
        for (act, exact) in [(Gate::Silu, silu64 as fn(f64) -> f64), (Gate::GeluTanh, gelu64)] {
            let mut out = vec![0f32; n];
            row(act, &xs, &ones, &mut out);
            for (&x, &o) in xs.iter().zip(&out) {
                let e = exact(x as f64);
                let z = match act {
                    Gate::Silu | Gate::SwigluOai | Gate::Relu | Gate::ReluSquared => 0.0,
                    Gate::GeluTanh => 1.6 * (x.abs() as f64 + 0.044715 * (x.abs() as f64).powi(3)),
                };
                let tol = (6.0 + 2.0 * z) * f32::EPSILON as f64 * e.abs() + 1e-35;
                assert!((o as f64 - e).abs() <= tol, "{act:?}({x}) = {o}, exact {e}");
            }
        }
    }

    /// The op over column slices of one fused output (as the MLP gives it),
    /// serial and across threads, equals the row function, and is close to
    /// candle's own `silu`/`gelu` times `up`.
    #[test]
    fn slices_of_a_fused_output_equal_the_row_function() {
        let cpu = Device::Cpu;
        for (rows, width) in [(1, 40), (3, 7), (96, 512)] {
            let fused = Tensor::from_vec(rand_vec(rows * 2 * width, 7), (rows, 2 * width), &cpu)
                .unwrap()
                .affine(6.0, 0.0)
                .unwrap();
            let (g, u) = (fused.narrow(1, 0, width).unwrap(), fused.narrow(1, width, width).unwrap());
            for act in [Gate::Silu, Gate::GeluTanh, Gate::SwigluOai, Gate::Relu, Gate::ReluSquared] {
                let got = gated(&g, &u, act).unwrap();
                assert!(got.is_contiguous());
                assert_eq!(got.dims(), &[rows, width]);
                let got: Vec<f32> = got.flatten_all().unwrap().to_vec1().unwrap();
                let (gv, uv): (Vec<f32>, Vec<f32>) = (
                    g.contiguous().unwrap().flatten_all().unwrap().to_vec1().unwrap(),
                    u.contiguous().unwrap().flatten_all().unwrap().to_vec1().unwrap(),
                );
                let mut want = vec![0f32; rows * width];
                row(act, &gv, &uv, &mut want);
                assert_eq!(got, want, "{act:?} {rows}x{width}");
                let candle = with_candle_ops(&g, &u, act).unwrap();
                let candle: Vec<f32> = candle.flatten_all().unwrap().to_vec1().unwrap();
                for (a, b) in got.iter().zip(&candle) {
                    assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{act:?}: {a} against candle's {b}");
                }
            }
        }
    }

    /// The ungated op (GPT-2's and BERT's GELU) equals the gated one with up all ones, bit for
    /// bit, on a column slice and across the threads, and candle's `gelu` within rounding.
    #[test]
    fn the_ungated_activation_is_the_gated_one_times_one() {
        let cpu = Device::Cpu;
        for (rows, width) in [(1, 40), (3, 7), (96, 512)] {
            let wide = Tensor::from_vec(rand_vec(rows * 2 * width, 9), (rows, 2 * width), &cpu).unwrap().affine(6.0, 0.0).unwrap();
            let x = wide.narrow(1, width, width).unwrap();
            let ones = x.ones_like().unwrap();
            let got = activated(&x, Gate::GeluTanh).unwrap();
            assert!(got.is_contiguous());
            let got: Vec<f32> = got.flatten_all().unwrap().to_vec1().unwrap();
            let want: Vec<f32> = gated(&x, &ones, Gate::GeluTanh).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(got, want, "{rows}x{width}");
            let candle: Vec<f32> = x.gelu().unwrap().flatten_all().unwrap().to_vec1().unwrap();
            for (a, b) in got.iter().zip(&candle) {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} against candle's {b}");
            }
        }
    }

    /// gpt-oss's clamped SwiGLU against its f64 formula, with gates and ups inside and beyond
    /// the clamp: the gate clamps above only (a very negative gate gives ~0), up on both sides.
    #[test]
    fn swiglu_oai_clamps_the_gate_above_and_up_on_both_sides() {
        let gates = [-30.0f32, -3.0, -0.5, 0.0, 0.7, 6.9, 7.0, 7.5, 40.0];
        let ups = [-20.0f32, -7.5, -1.0, 0.0, 2.0, 6.9, 8.0, 100.0, 0.3];
        let mut out = vec![0f32; gates.len()];
        row(Gate::SwigluOai, &gates, &ups, &mut out);
        for ((&x, &y), &o) in gates.iter().zip(&ups).zip(&out) {
            let g = (x as f64).min(7.0);
            let e = g / (1.0 + (-1.702 * g).exp()) * ((y as f64).clamp(-7.0, 7.0) + 1.0);
            // As for GELU above: a relative error ε in `z = α·g` is `|z|·ε` in `σ(z)` for `z < 0`.
            let tol = (6.0 + 2.0 * 1.702 * g.abs()) * f32::EPSILON as f64 * e.abs() + 1e-35;
            assert!((o as f64 - e).abs() <= tol, "({x}, {y}) = {o}, exact {e}");
        }
        // Beyond the clamps the output does not move: (7.5, 100) is (7, 7).
        let mut at_limits = [0f32];
        row(Gate::SwigluOai, &[7.0], &[7.0], &mut at_limits);
        assert_eq!(out[7], at_limits[0]);
    }

    #[test]
    fn higher_rank_and_empty_inputs_keep_their_shape() {
        let cpu = Device::Cpu;
        let g = Tensor::from_vec(rand_vec(24, 3), (2, 3, 4), &cpu).unwrap();
        let u = Tensor::from_vec(rand_vec(24, 4), (2, 3, 4), &cpu).unwrap();
        let got = gated(&g, &u, Gate::Silu).unwrap();
        assert_eq!(got.dims(), &[2, 3, 4]);
        let flat = gated(&g.reshape((6, 4)).unwrap(), &u.reshape((6, 4)).unwrap(), Gate::Silu).unwrap();
        let (a, b): (Vec<f32>, Vec<f32>) = (
            got.flatten_all().unwrap().to_vec1().unwrap(),
            flat.flatten_all().unwrap().to_vec1().unwrap(),
        );
        assert_eq!(a, b);
        let e = Tensor::zeros((0, 8), DType::F32, &cpu).unwrap();
        assert_eq!(gated(&e, &e, Gate::GeluTanh).unwrap().dims(), &[0, 8]);
    }

    #[test]
    fn shapes_that_differ_are_refused() {
        let cpu = Device::Cpu;
        let g = Tensor::zeros((2, 4), DType::F32, &cpu).unwrap();
        let u = Tensor::zeros((2, 5), DType::F32, &cpu).unwrap();
        assert!(matches!(gated(&g, &u, Gate::Silu), Err(OpsError::Layout(_))));
    }
}
