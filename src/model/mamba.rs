//! Mamba's selective state space mixer in its first form: Jamba's Mamba layers.
//!
//! Owns: `Mamba`, as llama.cpp's `build_mamba_layer` (`src/models/mamba-base.cpp`) builds it:
//! `ssm_in` gives each token's `x` and gate `z`; `x` runs through a causal convolution
//! (`ssm_conv1d`, with its bias) and SiLU; `ssm_x` takes the result to a low-rank step, `B` and
//! `C` (Jamba's files RMS-normalize the three: `ssm_dt_norm`, `ssm_b_norm`, `ssm_c_norm`), and
//! `ssm_dt` (with its bias) the step up to one per channel. Each channel `c` then keeps `state`
//! values `S`, token after token: `dt = softplus(dt[c])`; `S ← S · exp(dt · A[c]) + B · x · dt`
//! (`A[c]` one value per state value: Mamba-2's is one per head); `y = S · C + D[c] · x`.
//! The output is `y · SiLU(z)`, projected back (`ssm_out`).
//!
//! Invariants: a sequence's state after `n` tokens depends on those `n` tokens only, so a copy
//! taken at a block boundary stands for the whole prefix (`engine::states`), as Mamba-2's
//! (`super::mamba2`). The projections run on the model's device; the convolution and the scan
//! on the host in f32, the scan across the CPU threads by channel.
//!
//! Counterpart: llama.cpp's `ggml_ssm_conv` and `ggml_ssm_scan` (Mamba-1's decay per channel
//! and state value); vLLM's `MambaMixer` (Jamba's), SGLang's mamba radix cache.

use candle_core::{DType, Device, Tensor};

use super::causal_conv::{per_sequence, CausalConv};
use super::delta_net::{dot, softplus, RecurrentSeq};
use super::gguf::GgufFile;
use super::hparams::{HParams, MambaParams};
use super::linear::QLinear;
use super::mamba2::{host_vec, scan_targets, silu};
use super::transformer::{load_2d, load_vec};
use super::ModelError;
use crate::ops::norm;
use crate::ops::par::{for_ranges, SharedMut};
use crate::ops::{BatchLayout, OpsError};

/// One Mamba layer.
pub(super) struct Mamba {
    /// Its index among the recurrent layers (its buffers in a `RecurrentState`).
    slot: usize,
    p: MambaParams,
    /// `ssm_in`: `x`, then `z`.
    in_proj: QLinear,
    conv: CausalConv,
    conv_bias: Vec<f32>,
    /// `ssm_x`: the low-rank step, then `B`, then `C`.
    x_proj: QLinear,
    /// Jamba's RMSNorms of the step, `B` and `C`, where the file has them.
    norms: Option<[Tensor; 3]>,
    /// `ssm_dt` and its bias: the step, one per channel.
    dt_proj: QLinear,
    dt_bias: Tensor,
    /// `ssm_a` (`-exp(A_log)`, as the converter stores it), `[inner][state]`; `ssm_d`, per
    /// channel.
    a: Vec<f32>,
    d: Vec<f32>,
    out: QLinear,
    eps: f32,
}

impl Mamba {
    /// Layer `i`'s tensors.
    pub(super) fn load(file: &mut GgufFile, hp: &HParams, i: usize, device: &Device) -> Result<Self, ModelError> {
        let p = hp
            .mamba
            .clone()
            .ok_or_else(|| OpsError::Layout(format!("layer {i} is a Mamba layer in a model without them")))?;
        let n = |s: &str| format!("blk.{i}.{s}");
        let (d, inner, ds, r) = (hp.hidden, p.inner, p.state, p.dt_rank);
        let norms = match file.has_tensor(&n("ssm_dt_norm.weight")) {
            true => Some([
                load_vec(file, &n("ssm_dt_norm.weight"), r, device)?,
                load_vec(file, &n("ssm_b_norm.weight"), ds, device)?,
                load_vec(file, &n("ssm_c_norm.weight"), ds, device)?,
            ]),
            false => None,
        };
        Ok(Self {
            slot: p.layers[..i].iter().filter(|&&m| m).count(),
            in_proj: QLinear::new(load_2d(file, &n("ssm_in.weight"), [2 * inner, d], device)?, device)?,
            conv: CausalConv::load(file, &n("ssm_conv1d.weight"), inner, p.conv_kernel)?,
            conv_bias: host_vec(file, &n("ssm_conv1d.bias"), &[&[inner]])?,
            x_proj: QLinear::new(load_2d(file, &n("ssm_x.weight"), [r + 2 * ds, inner], device)?, device)?,
            norms,
            dt_proj: QLinear::new(load_2d(file, &n("ssm_dt.weight"), [inner, r], device)?, device)?,
            dt_bias: load_vec(file, &n("ssm_dt.bias"), inner, device)?,
            a: host_vec(file, &n("ssm_a"), &[&[inner, ds]])?,
            d: host_vec(file, &n("ssm_d"), &[&[inner]])?,
            out: QLinear::new(load_2d(file, &n("ssm_out.weight"), [d, inner], device)?, device)?,
            eps: hp.rms_eps as f32,
            p,
        })
    }

    /// The layer's output for the normed rows `h` (`[t, hidden]`, packed per `batch`), each
    /// sequence's state advanced over its rows: `[t, hidden]`.
    pub(super) fn forward(&self, h: &Tensor, batch: &BatchLayout, seqs: &mut [RecurrentSeq]) -> Result<Tensor, ModelError> {
        let (inner, r, ds) = (self.p.inner, self.p.dt_rank, self.p.state);
        let xz = self.in_proj.forward(h)?.to_dtype(DType::F32)?;
        let x = per_sequence(&xz, batch, seqs, inner, h.device(), |rows, width, s, out| self.convolve(rows, width, s, out))?;
        let dbc = self.x_proj.forward(&x)?.to_dtype(DType::F32)?;
        let mut parts = [dbc.narrow(1, 0, r)?.contiguous()?, dbc.narrow(1, r, ds)?.contiguous()?, dbc.narrow(1, r + ds, ds)?.contiguous()?];
        if let Some(w) = &self.norms {
            for (part, w) in parts.iter_mut().zip(w) {
                *part = norm::rms_norm(part, w, self.eps)?;
            }
        }
        let [dt, b, c] = parts;
        let dt = self.dt_proj.forward(&dt)?.to_dtype(DType::F32)?.broadcast_add(&self.dt_bias)?;
        // Each token's row for the scan: x, its step per channel, B, C, z.
        let rows = Tensor::cat(&[&x, &dt, &b, &c, &xz.narrow(1, inner, inner)?], 1)?;
        let y = per_sequence(&rows, batch, seqs, inner, h.device(), |rows, width, s, out| self.scan(rows, width, s, out))?;
        self.out.forward(&y)
    }

    /// One sequence's rows of `x` (the first `inner` of each `width`) through the convolution,
    /// its bias and SiLU, into `out` (`[n, inner]`); the carried inputs advanced.
    fn convolve(&self, rows: &[f32], width: usize, s: &mut RecurrentSeq, out: &mut [f32]) -> Result<(), ModelError> {
        let inner = self.p.inner;
        let n = rows.len() / width.max(1);
        if n == 0 {
            return Ok(());
        }
        let finish = |_: usize, xr: &mut [f32]| {
            for (v, b) in xr.iter_mut().zip(&self.conv_bias) {
                *v = silu(*v + b);
            }
        };
        self.conv.run_chunk(s, self.slot, n, |i| &rows[i * width..][..inner], finish, |x, _| {
            out.copy_from_slice(x);
            Ok(())
        })
    }

    /// One sequence's scan over its rows (each `width` wide: `x`, the step per channel, `B`,
    /// `C`, `z`): every channel's state advanced in place (a copy taken where `s` asks),
    /// `(y + D · x) · SiLU(z)` into `out` (`[n, inner]`).
    fn scan(&self, rows: &[f32], width: usize, s: &mut RecurrentSeq, out: &mut [f32]) -> Result<(), ModelError> {
        let (inner, ds) = (self.p.inner, self.p.state);
        let n = rows.len() / width.max(1);
        let (shared_ssm, shared_cap, capture) = scan_targets(s, self.slot, n)?;
        let shared_out = SharedMut::new(out);
        for_ranges(inner, |range| {
            let (c0, len) = (range.start, range.len());
            // SAFETY: each range's channels' state, captured state and output are its own.
            let st = unsafe { shared_ssm.part(c0 * ds, len * ds) };
            for i in 0..n {
                let row = &rows[i * width..][..width];
                let (x, dt, b, c, z) = (&row[..inner], &row[inner..2 * inner], &row[2 * inner..][..ds], &row[2 * inner + ds..][..ds], &row[2 * inner + 2 * ds..]);
                let o = unsafe { shared_out.part(i * inner + c0, len) };
                for (k, (srow, y)) in st.chunks_exact_mut(ds).zip(o.iter_mut()).enumerate() {
                    let ch = c0 + k;
                    let t = softplus(dt[ch]);
                    let xt = x[ch] * t;
                    for ((sv, a), bv) in srow.iter_mut().zip(&self.a[ch * ds..][..ds]).zip(b) {
                        *sv = *sv * (t * a).exp() + bv * xt;
                    }
                    *y = (dot(srow, c) + self.d[ch] * x[ch]) * silu(z[ch]);
                }
                if capture == Some(i + 1) {
                    if let Some(cap) = &shared_cap {
                        unsafe { cap.part(c0 * ds, len * ds) }.copy_from_slice(st);
                    }
                }
            }
        });
        Ok(())
    }
}
