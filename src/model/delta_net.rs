//! Qwen3.5's gated delta net: the linear attention of three in four of its layers, and the
//! state a sequence carries through them.
//!
//! Owns: [`RecurrentState`] (per recurrent layer, the convolution's last inputs and every V
//! head's `head_v × head_k` state), [`RecurrentSeq`] (one sequence's state for one forward, and
//! where to take a copy of it), and the layer itself (`DeltaNet`), as llama.cpp's
//! `qwen35.cpp` builds it: one projection gives each token's Q, K and V (through a short causal
//! convolution and SiLU; Q and K L2-normalized per head), another its output gate `z`, two
//! more its per-head `beta` (sigmoid) and decay (`exp(softplus(alpha + dt) · a)`). Each V head
//! `h` (Q/K head `h mod k_heads`, as ggml's fused kernel) then runs the delta rule, token after
//! token: `S ← S · decay; S ← S + k ⊗ beta (v − Sᵀk); o = Sᵀq / √head_k`. The output is
//! RMS-normalized per head, multiplied by `SiLU(z)` and projected back.
//!
//! Invariants: a sequence's state after `n` tokens depends on those `n` tokens only, so a
//! state taken at a block boundary stands for the whole prefix up to it: the prefix cache
//! keeps such copies beside the attention layers' K/V blocks (`engine::states`). The
//! projections run on the model's device; the convolution and the recurrence run on the host
//! in f32, across the CPU threads by V head (state in host memory on every device).
//!
//! Counterpart: llama.cpp's `llm_build_delta_net_base` and `ggml_gated_delta_net`; vLLM's and
//! SGLang's `GatedDeltaNet` with their `MambaCacheManager` / mamba radix cache for the state.

use candle_core::{DType, Device, Tensor};

use super::causal_conv::{missing_slot, per_sequence, CausalConv};
use super::gguf::weight::Weight;
use super::gguf::GgufFile;
use super::hparams::{DeltaNetParams, HParams};
use super::linear::{FusedLinear, QLinear};
use super::transformer::{load_2d, load_vec};
use super::ModelError;
use crate::ops::par::{for_ranges, SharedMut};
use crate::ops::{BatchLayout, OpsError};

/// What a sequence carries through the recurrent layers after some tokens: per recurrent
/// layer, in order, the convolution's last `conv_kernel - 1` inputs (oldest first, each
/// `conv_channels` wide) and every V head's state (`[v_heads][head_v][head_k]`). Zeros before
/// the first token.
#[derive(Debug, Clone, PartialEq)]
pub struct RecurrentState {
    layers: Vec<[Vec<f32>; 2]>,
}

impl RecurrentState {
    /// The state before any token, for recurrent layers of these two buffer sizes each
    /// (`HParams::state_shape`).
    pub fn new(shape: &[[usize; 2]]) -> Self {
        Self {
            layers: shape.iter().map(|&[a, b]| [vec![0.0; a], vec![0.0; b]]).collect(),
        }
    }

    /// A state of the same shape, all zeros (where a copy is taken).
    pub fn zeros_like(other: &Self) -> Self {
        Self {
            layers: other.layers.iter().map(|[a, b]| [vec![0.0; a.len()], vec![0.0; b.len()]]).collect(),
        }
    }

    /// Bytes it holds.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|[c, s]| (c.len() + s.len()) * 4).sum()
    }

    /// Every layer's two buffers, in order (what a cache file stores).
    pub fn buffers(&self) -> impl Iterator<Item = &[f32]> {
        self.layers.iter().flat_map(|[c, s]| [c.as_slice(), s.as_slice()])
    }

    /// Rebuilds one from `floats` written as [`Self::buffers`] gives them, for layers of
    /// `shape`; `None` when the count differs.
    pub fn from_floats(shape: &[[usize; 2]], floats: &[f32]) -> Option<Self> {
        if floats.len() != shape.iter().map(|[a, b]| a + b).sum::<usize>() {
            return None;
        }
        let mut at = 0;
        let mut take = |n: usize| {
            let v = floats[at..at + n].to_vec();
            at += n;
            v
        };
        Some(Self {
            layers: shape.iter().map(|&[a, b]| [take(a), take(b)]).collect(),
        })
    }

    /// Layer slot `slot`'s two buffers.
    pub(super) fn layer_mut(&mut self, slot: usize) -> Option<&mut [Vec<f32>; 2]> {
        self.layers.get_mut(slot)
    }
}

/// One sequence of a batch in one forward: its state (advanced in place over its new tokens),
/// and, where `capture_after` says, a copy of the state after that many of them.
#[derive(Debug)]
pub struct RecurrentSeq {
    pub state: RecurrentState,
    /// Take a copy after this many of the sequence's new tokens (1 to `new`).
    pub capture_after: Option<usize>,
    /// That copy, once the forward has run.
    pub captured: Option<RecurrentState>,
}

impl RecurrentSeq {
    pub fn new(state: RecurrentState) -> Self {
        Self {
            state,
            capture_after: None,
            captured: None,
        }
    }
}

/// One gated delta net layer.
pub(super) struct DeltaNet {
    /// Its index among the recurrent layers (its buffers in a [`RecurrentState`]).
    slot: usize,
    p: DeltaNetParams,
    /// `attn_qkv` (the convolution's input), `attn_gate` (`z`), `ssm_beta`, `ssm_alpha`: one
    /// matmul where their types agree, else one for the first two and one for the others.
    proj: Vec<FusedLinear>,
    /// `ssm_conv1d`.
    conv: CausalConv,
    /// `ssm_dt.bias` and `ssm_a` (`-exp(A_log)`, as the converter stores it), per V head.
    dt_bias: Vec<f32>,
    a: Vec<f32>,
    /// `ssm_norm`: the output's RMSNorm weights, one head's width.
    norm: Vec<f32>,
    out: QLinear,
    eps: f32,
}

/// Layer `i`'s projections, whose output columns are each token's convolution input (Q, K and
/// V), `z`, beta and alpha, each in V-head order: `attn_qkv`, `attn_gate`, `ssm_beta` and
/// `ssm_alpha`; Qwen3-Next's `ssm_ba` (per Q/K head: its V heads' betas, then their alphas), and
/// its older files' `ssm_in` (per Q/K head: its Q, K, V and z rows) in place of the first two,
/// their rows taken apart by head and put back in that order.
fn projections(
    file: &mut GgufFile,
    p: &DeltaNetParams,
    i: usize,
    d: usize,
    device: &Device,
) -> Result<(Vec<Weight>, Vec<Weight>), ModelError> {
    let n = |s: &str| format!("blk.{i}.{s}");
    let (channels, values) = (p.conv_channels(), p.v_heads * p.head_v);
    let (kh, r) = (p.k_heads, p.v_heads / p.k_heads);
    // Every Q/K head's `widths` rows of `name`, regrouped: each width's rows of every head.
    let regroup = |file: &mut GgufFile, name: &str, widths: &[usize]| -> Result<Vec<Weight>, ModelError> {
        let per_head: Vec<usize> = (0..kh).flat_map(|_| widths.iter().copied()).collect();
        let mut parts: Vec<Option<Weight>> = file.tensor_row_split(&n(name), &per_head, d, device)?.into_iter().map(Some).collect();
        let w = widths.len();
        Ok((0..w).flat_map(|j| (0..kh).map(move |g| g * w + j)).filter_map(|k| parts.get_mut(k).and_then(Option::take)).collect())
    };
    let main = if file.has_tensor(&n("attn_qkv.weight")) || !p.grouped {
        vec![
            load_2d(file, &n("attn_qkv.weight"), [channels, d], device)?,
            load_2d(file, &n("attn_gate.weight"), [values, d], device)?,
        ]
    } else {
        regroup(file, "ssm_in.weight", &[p.head_k, p.head_k, r * p.head_v, r * p.head_v])?
    };
    let gates = if p.grouped {
        regroup(file, "ssm_ba.weight", &[r, r])?
    } else {
        vec![
            load_2d(file, &n("ssm_beta.weight"), [p.v_heads, d], device)?,
            load_2d(file, &n("ssm_alpha.weight"), [p.v_heads, d], device)?,
        ]
    };
    Ok((main, gates))
}

/// A host f32 vector of `t`'s values.
fn host(t: &Tensor) -> Result<Vec<f32>, ModelError> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

impl DeltaNet {
    /// Layer `i`'s tensors; `slot` is its index among the recurrent layers.
    pub(super) fn load(file: &mut GgufFile, hp: &HParams, i: usize, device: &Device) -> Result<Self, ModelError> {
        let p = hp
            .recurrent
            .clone()
            .ok_or_else(|| OpsError::Layout(format!("layer {i} is recurrent in a model without a delta net")))?;
        let slot = p.layers[..i].iter().filter(|&&r| r).count();
        let d = hp.hidden;
        let n = |s: &str| format!("blk.{i}.{s}");
        let channels = p.conv_channels();
        let values = p.v_heads * p.head_v;
        let (main, gates) = projections(file, &p, i, d, device)?;
        let proj = if main.iter().chain(&gates).all(|t| t.dtype() == main[0].dtype()) {
            vec![FusedLinear::new(main.into_iter().chain(gates).collect(), device)?]
        } else {
            vec![FusedLinear::new(main, device)?, FusedLinear::new(gates, device)?]
        };
        let cpu = Device::Cpu;
        Ok(Self {
            slot,
            proj,
            conv: CausalConv::load(file, &n("ssm_conv1d.weight"), channels, p.conv_kernel)?,
            dt_bias: host(&load_vec(file, &n("ssm_dt.bias"), p.v_heads, &cpu)?)?,
            a: host(&load_vec(file, &n("ssm_a"), p.v_heads, &cpu)?)?,
            norm: host(&load_vec(file, &n("ssm_norm.weight"), p.head_v, &cpu)?)?,
            out: QLinear::new(load_2d(file, &n("ssm_out.weight"), [d, values], device)?, device)?,
            eps: hp.rms_eps as f32,
            p,
        })
    }

    /// The layer's output for the normed rows `h` (`[t, hidden]`, packed per `batch`), each
    /// sequence's state advanced over its rows: `[t, hidden]`.
    pub(super) fn forward(&self, h: &Tensor, batch: &BatchLayout, seqs: &mut [RecurrentSeq]) -> Result<Tensor, ModelError> {
        // Each row: the convolution's input, z, beta, alpha.
        let joined = match self.proj.as_slice() {
            [one] => one.forward_joined(h)?,
            all => Tensor::cat(&all.iter().map(|p| p.forward_joined(h)).collect::<Result<Vec<_>, _>>()?, 1)?,
        };
        let values = self.p.v_heads * self.p.head_v;
        let o = per_sequence(&joined, batch, seqs, values, h.device(), |all, width, s, out| {
            self.run(Rows { all, width }, s, out)
        })?;
        self.out.forward(&o)
    }

    /// One sequence's rows through the layer: the convolution, the delta rule and the gated
    /// norm, into `out` (`[n, v_heads · head_v]`).
    fn run(&self, rows: Rows<'_>, s: &mut RecurrentSeq, out: &mut [f32]) -> Result<(), ModelError> {
        if rows.len() == 0 {
            return Ok(());
        }
        // The convolution's input: Q, K and V; then SiLU.
        let channels = self.p.conv_channels();
        let silu = |_: usize, xr: &mut [f32]| xr.iter_mut().for_each(|y| *y /= 1.0 + (-*y).exp());
        let part = |i| rows.part(i, 0, channels);
        self.conv.run_chunk(s, self.slot, rows.len(), part, silu, |x, s| self.run_in(&rows, s, out, x))
    }

    /// [`Self::run`] after the convolution, whose output rows are `x`.
    fn run_in(&self, rows: &Rows<'_>, s: &mut RecurrentSeq, out: &mut [f32], x: &mut [f32]) -> Result<(), ModelError> {
        let p = &self.p;
        let channels = p.conv_channels();
        let (values, vh) = (p.v_heads * p.head_v, p.v_heads);
        let n = rows.len();
        let capture = match s.capture_after {
            Some(m) if (1..=n).contains(&m) => Some(m),
            _ => None,
        };
        let ssm = &mut s.state.layer_mut(self.slot).ok_or_else(|| missing_slot(self.slot))?[1];
        // Q and K L2-normalized per head; Q scaled.
        let (hk, hv, kh) = (p.head_k, p.head_v, p.k_heads);
        let q_scale = 1.0 / (hk as f32).sqrt();
        for xr in x.chunks_exact_mut(channels) {
            for (head, v) in xr[..2 * kh * hk].chunks_exact_mut(hk).enumerate() {
                let norm = v.iter().map(|a| a * a).sum::<f32>().sqrt().max(self.eps);
                let scale = if head < kh { q_scale / norm } else { 1.0 / norm };
                v.iter_mut().for_each(|a| *a *= scale);
            }
        }
        let (beta_at, alpha_at) = (channels + values, channels + values + vh);
        let decay: Vec<f32> = (0..n)
            .flat_map(|i| rows.part(i, alpha_at, vh).iter().enumerate())
            .map(|(h, &a)| (softplus(a + self.dt_bias[h]) * self.a[h]).exp())
            .collect();
        let beta: Vec<f32> = (0..n)
            .flat_map(|i| rows.part(i, beta_at, vh).iter())
            .map(|&b| 1.0 / (1.0 + (-b).exp()))
            .collect();
        let mut captured_ssm = match capture {
            Some(_) => s.captured.as_mut().and_then(|c| c.layers.get_mut(self.slot)).map(|l| &mut l[1]),
            None => None,
        };
        let shared_out = SharedMut::new(out);
        let shared_ssm = SharedMut::new(ssm);
        let shared_cap = captured_ssm.as_mut().map(|v| SharedMut::new(v.as_mut_slice()));
        let (x, decay, beta) = (&*x, &decay, &beta);
        for_ranges(vh, |heads| {
            for h in heads {
                // SAFETY: each V head's state, captured state and output segments are its own.
                let st = unsafe { shared_ssm.part(h * hv * hk, hv * hk) };
                let kh_i = if p.grouped { h / (vh / kh) } else { h % kh };
                for i in 0..n {
                    let xr = &x[i * channels..(i + 1) * channels];
                    let q = &xr[kh_i * hk..(kh_i + 1) * hk];
                    let k = &xr[(kh + kh_i) * hk..(kh + kh_i + 1) * hk];
                    let v = &xr[2 * kh * hk + h * hv..2 * kh * hk + (h + 1) * hv];
                    let (g, b) = (decay[i * vh + h], beta[i * vh + h]);
                    let o = unsafe { shared_out.part(i * values + h * hv, hv) };
                    // Row j of the state: decayed, it predicts v[j] at k; the error times beta
                    // is learnt at k; the row is then read at q. (`(S·g)·k = g·(S·k)`.)
                    for (j, sr) in st.chunks_exact_mut(hk).enumerate() {
                        let d = (v[j] - g * dot(sr, k)) * b;
                        o[j] = decay_learn_read(sr, g, d, k, q);
                    }
                    if capture == Some(i + 1) {
                        if let Some(c) = &shared_cap {
                            unsafe { c.part(h * hv * hk, hv * hk) }.copy_from_slice(st);
                        }
                    }
                }
            }
        });
        // RMSNorm per head, times SiLU(z).
        let zs = (0..n).flat_map(|i| rows.part(i, channels, values).chunks_exact(hv));
        for (o, z) in out.chunks_exact_mut(hv).zip(zs) {
            let ms = o.iter().map(|a| a * a).sum::<f32>() / hv as f32;
            let r = 1.0 / (ms + self.eps).sqrt();
            for ((a, &w), &g) in o.iter_mut().zip(&self.norm).zip(z) {
                *a = *a * r * w * (g / (1.0 + (-g).exp()));
            }
        }
        Ok(())
    }
}

/// Lanes of the accumulators below: independent sums the compiler keeps in vector registers.
const LANES: usize = 8;

/// `a · b` over 8 running sums (a float sum in one accumulator waits on each add).
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let ((ac, at), (bc, bt)) = (a.as_chunks::<LANES>(), b.as_chunks::<LANES>());
    let mut acc = [0f32; LANES];
    for (x, y) in ac.iter().zip(bc) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + at.iter().zip(bt).map(|(x, y)| x * y).sum::<f32>()
}

/// `s ← s·g + d·k`, then `s · q` (two passes over a row in L1: each vectorizes).
fn decay_learn_read(s: &mut [f32], g: f32, d: f32, k: &[f32], q: &[f32]) -> f32 {
    for (x, kk) in s.iter_mut().zip(k) {
        *x = *x * g + d * kk;
    }
    dot(s, q)
}

/// `t`'s values as f32, borrowed where they already are (a contiguous f32 tensor in host
/// memory), else copied out (a GPU's).
pub(super) fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> Result<R, ModelError>) -> Result<R, ModelError> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (candle_core::Storage::Cpu(cpu), Some((a, b))) = (&*storage, layout.contiguous_offsets()) {
            if let Ok(all) = cpu.as_slice::<f32>() {
                return f(&all[a..b]);
            }
        }
    }
    f(&host(t)?)
}

/// One sequence's projected rows, each `width` values: the convolution's input (`conv_channels`),
/// `z` (`v_heads · head_v`), beta and alpha (`v_heads` each).
struct Rows<'a> {
    all: &'a [f32],
    width: usize,
}

impl Rows<'_> {
    fn len(&self) -> usize {
        self.all.len() / self.width.max(1)
    }

    /// Row `i`'s values `at..at + n`.
    fn part(&self, i: usize, at: usize, n: usize) -> &[f32] {
        &self.all[i * self.width + at..][..n]
    }
}

/// `ln(1 + eˣ)`, as ggml's: `x` itself above 20.
pub(super) fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}
