//! Mamba-2's selective state space mixer: the layer of most of Granite 4.0's hybrids' layers.
//!
//! Owns: `Mamba2`, as llama.cpp's `build_mamba2_layer` (`src/models/mamba-base.cpp`) builds it:
//! one projection (`ssm_in`) gives each token's gate `z`, the convolution's input (`x`, then
//! `B` and `C`, `state` values per group) and one step size per head; `x`, `B` and `C` run
//! through a causal convolution (`ssm_conv1d`, with its bias) and SiLU. Each head `h` (group
//! `g = h / (heads / groups)`) then keeps a `head_dim × state` state `S`, token after token:
//! `dt = softplus(dt + dt_bias[h])`; `S ← S · exp(dt · A[h]) + (x · dt) ⊗ B_g`;
//! `y = S · C_g + D[h] · x`. The output is `y · SiLU(z)`, RMS-normalized per group
//! (`ssm_norm`; Falcon-H1's files may have none), projected back (`ssm_out`). Falcon-H1 runs
//! one beside every layer's attention (`HParams::ssm_beside_attention`).
//!
//! Invariants: a sequence's state after `n` tokens depends on those `n` tokens only, so a copy
//! taken at a block boundary stands for the whole prefix (`engine::states`), as the delta
//! net's (`super::delta_net`). The projections run on the model's device; the convolution and
//! the scan run on the host in f32, across the CPU threads by head.
//!
//! Counterpart: llama.cpp's `ggml_ssm_conv` and `ggml_ssm_scan` (Mamba-2's scalar decay per
//! head); vLLM's `MambaMixer2` with its `MambaCacheManager`, SGLang's mamba radix cache.

use candle_core::{DType, Device, Tensor};

use super::causal_conv::{missing_slot, per_sequence, CausalConv};
use super::delta_net::{dot, softplus, RecurrentSeq};
use super::gguf::GgufFile;
use super::hparams::{HParams, Mamba2Params};
use super::linear::QLinear;
use super::transformer::{check_shape, load_2d};
use super::ModelError;
use crate::ops::par::{for_ranges, SharedMut};
use crate::ops::{BatchLayout, OpsError};

/// One Mamba-2 layer.
pub(super) struct Mamba2 {
    /// Its index among the recurrent layers (its buffers in a `RecurrentState`).
    slot: usize,
    p: Mamba2Params,
    in_proj: QLinear,
    /// `ssm_conv1d`, and its bias (zeros where the file has none).
    conv: CausalConv,
    conv_bias: Vec<f32>,
    /// `ssm_dt.bias`, `ssm_a` (`-exp(A_log)`, as the converter stores it) and `ssm_d`, per head.
    dt_bias: Vec<f32>,
    a: Vec<f32>,
    d: Vec<f32>,
    /// `ssm_norm`: the grouped RMSNorm's weights, `inner` of them (none in Falcon-H1's files
    /// without it, whose output is not normalized).
    norm: Option<Vec<f32>>,
    out: QLinear,
    eps: f32,
}

impl Mamba2 {
    /// Layer `i`'s tensors.
    pub(super) fn load(file: &mut GgufFile, hp: &HParams, i: usize, device: &Device) -> Result<Self, ModelError> {
        let p = hp
            .mamba2
            .clone()
            .ok_or_else(|| OpsError::Layout(format!("layer {i} is a Mamba-2 layer in a model without them")))?;
        let n = |s: &str| format!("blk.{i}.{s}");
        let (d, ch, heads) = (hp.hidden, p.conv_channels(), p.heads);
        let conv_bias = match file.has_tensor(&n("ssm_conv1d.bias")) {
            true => host_vec(file, &n("ssm_conv1d.bias"), &[&[ch]])?,
            false => vec![0.0; ch],
        };
        Ok(Self {
            slot: p.layers[..i].iter().filter(|&&r| r).count(),
            in_proj: QLinear::new(load_2d(file, &n("ssm_in.weight"), [p.proj_width(), d], device)?, device)?,
            conv: CausalConv::load(file, &n("ssm_conv1d.weight"), ch, p.conv_kernel)?,
            conv_bias,
            dt_bias: host_vec(file, &n("ssm_dt.bias"), &[&[heads]])?,
            // Stored `[heads, 1]` (ggml's `{1, n_head}`).
            a: host_vec(file, &n("ssm_a"), &[&[heads, 1], &[heads]])?,
            d: host_vec(file, &n("ssm_d"), &[&[heads, 1], &[heads]])?,
            norm: match hp.ssm_beside_attention && !file.has_tensor(&n("ssm_norm.weight")) {
                true => None,
                false => Some(host_vec(file, &n("ssm_norm.weight"), &[&[p.groups, p.inner / p.groups], &[p.inner]])?),
            },
            out: QLinear::new(load_2d(file, &n("ssm_out.weight"), [d, p.inner], device)?, device)?,
            eps: hp.rms_eps as f32,
            p,
        })
    }

    /// The layer's output for the normed rows `h` (`[t, hidden]`, packed per `batch`), each
    /// sequence's state advanced over its rows: `[t, hidden]`.
    pub(super) fn forward(&self, h: &Tensor, batch: &BatchLayout, seqs: &mut [RecurrentSeq]) -> Result<Tensor, ModelError> {
        let proj = self.in_proj.forward(h)?;
        let y = per_sequence(&proj, batch, seqs, self.p.inner, h.device(), |rows, width, s, out| {
            self.run(rows, width, s, out)
        })?;
        self.out.forward(&y)
    }

    /// One sequence's projected rows (each `width` wide: `z`, the convolution's input, the step
    /// sizes) through the convolution, the scan and the gated norm, into `out` (`[n, inner]`).
    fn run(&self, rows: &[f32], width: usize, s: &mut RecurrentSeq, out: &mut [f32]) -> Result<(), ModelError> {
        if rows.len() < width.max(1) {
            return Ok(());
        }
        // The convolution's input: x, B and C; then its bias and SiLU.
        let (inner, ch) = (self.p.inner, self.p.conv_channels());
        let part = |i: usize| &rows[i * width + inner..][..ch];
        let finish = |_: usize, xr: &mut [f32]| {
            for (v, b) in xr.iter_mut().zip(&self.conv_bias) {
                *v = silu(*v + b);
            }
        };
        self.conv.run_chunk(s, self.slot, rows.len() / width, part, finish, |x, s| self.run_in(rows, width, s, out, x))
    }

    /// [`Self::run`] after the convolution, whose output rows are `x`.
    fn run_in(&self, rows: &[f32], width: usize, s: &mut RecurrentSeq, out: &mut [f32], x: &[f32]) -> Result<(), ModelError> {
        let p = &self.p;
        let (inner, ch, heads) = (p.inner, p.conv_channels(), p.heads);
        // Each token's step size per head, and its decay.
        let dt: Vec<f32> = rows
            .chunks_exact(width)
            .flat_map(|row| row[inner + ch..].iter().zip(&self.dt_bias).map(|(t, b)| softplus(t + b)))
            .collect();
        let decay: Vec<f32> = dt.iter().enumerate().map(|(k, t)| (t * self.a[k % heads]).exp()).collect();
        self.scan(x, &dt, &decay, s, out)?;
        // Times SiLU(z), then RMSNorm per group.
        let group = inner / p.groups;
        for (o, row) in out.chunks_exact_mut(inner).zip(rows.chunks_exact(width)) {
            o.iter_mut().zip(&row[..inner]).for_each(|(y, z)| *y *= silu(*z));
            let Some(norm) = &self.norm else { continue };
            for (og, w) in o.chunks_exact_mut(group).zip(norm.chunks_exact(group)) {
                let r = 1.0 / (og.iter().map(|v| v * v).sum::<f32>() / group as f32 + self.eps).sqrt();
                og.iter_mut().zip(w).for_each(|(v, w)| *v *= r * w);
            }
        }
        Ok(())
    }

    /// The scan over the convolved rows `x` (`[n, conv_channels]`) with each token's step size
    /// and decay per head: every head's state advanced in place (a copy taken where `s` asks),
    /// `y + D · x` into `out`.
    fn scan(&self, x: &[f32], dt: &[f32], decay: &[f32], s: &mut RecurrentSeq, out: &mut [f32]) -> Result<(), ModelError> {
        let p = &self.p;
        let (inner, ch, heads, ds) = (p.inner, p.conv_channels(), p.heads, p.state);
        let (hd, per_group) = (p.head_dim(), heads / p.groups);
        let n = x.len() / ch;
        let (shared_ssm, shared_cap, capture) = scan_targets(s, self.slot, n)?;
        let shared_out = SharedMut::new(out);
        for_ranges(heads, |range| {
            for h in range {
                // SAFETY: each head's state, captured state and output segments are its own.
                let st = unsafe { shared_ssm.part(h * hd * ds, hd * ds) };
                let g = h / per_group;
                for i in 0..n {
                    let xr = &x[i * ch..(i + 1) * ch];
                    let xh = &xr[h * hd..(h + 1) * hd];
                    let b = &xr[inner + g * ds..][..ds];
                    let c = &xr[inner + (p.groups + g) * ds..][..ds];
                    let (t, a) = (dt[i * heads + h], decay[i * heads + h]);
                    let o = unsafe { shared_out.part(i * inner + h * hd, hd) };
                    for ((row, &xv), y) in st.chunks_exact_mut(ds).zip(xh).zip(o.iter_mut()) {
                        *y = decay_add_read(row, a, xv * t, b, c) + self.d[h] * xv;
                    }
                    if capture == Some(i + 1) {
                        if let Some(cap) = &shared_cap {
                            unsafe { cap.part(h * hd * ds, hd * ds) }.copy_from_slice(st);
                        }
                    }
                }
            }
        });
        Ok(())
    }
}

/// Where a scan over `n` new tokens of `s` writes: layer slot `slot`'s state (its second
/// buffer; the first is the convolution's), the copy's where `s` asks for one within these
/// tokens (taken by the convolution before: [`CausalConv::carry`]), and after how many.
#[allow(clippy::type_complexity)]
pub(super) fn scan_targets(
    s: &mut RecurrentSeq,
    slot: usize,
    n: usize,
) -> Result<(SharedMut<'_, f32>, Option<SharedMut<'_, f32>>, Option<usize>), ModelError> {
    let capture = s.capture_after.filter(|m| (1..=n).contains(m));
    let state = &mut s.state.layer_mut(slot).ok_or_else(|| missing_slot(slot))?[1];
    let captured = match capture {
        Some(_) => s.captured.as_mut().and_then(|c| c.layer_mut(slot)).map(|l| SharedMut::new(l[1].as_mut_slice())),
        None => None,
    };
    Ok((SharedMut::new(state), captured, capture))
}

/// `s ← s·a + u·b`, then `s · c` (ggml's `ssm_scan` for one row of a head's state).
fn decay_add_read(s: &mut [f32], a: f32, u: f32, b: &[f32], c: &[f32]) -> f32 {
    for (x, bb) in s.iter_mut().zip(b) {
        *x = *x * a + u * bb;
    }
    dot(s, c)
}

pub(super) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Tensor `name` as host f32 values, its shape one of `shapes`.
pub(super) fn host_vec(file: &mut GgufFile, name: &str, shapes: &[&[usize]]) -> Result<Vec<f32>, ModelError> {
    let cpu = Device::Cpu;
    let t = file.tensor(name, &cpu)?;
    let dims = t.shape().dims().to_vec();
    if !shapes.contains(&dims.as_slice()) {
        check_shape(name, &dims, shapes.first().copied().unwrap_or_default())?;
    }
    Ok(t.dequantize(&cpu)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}
