//! LFM2's gated short convolution: the mixer of most of its layers.
//!
//! Owns: `ShortConv`, as llama.cpp's `src/models/lfm2.cpp` builds it: one projection gives each
//! token's `B`, `C` and `x` (`shortconv.in_proj`); `B·x` runs through a causal convolution of
//! `l_cache` taps per channel (`shortconv.conv`) over the token and those before it; the result
//! times `C` is projected back (`shortconv.out_proj`). No activation.
//!
//! Invariants: what a sequence carries from token to token is the last `l_cache - 1` values of
//! `B·x` (its slot's first buffer in a [`RecurrentState`]; the second is empty), so a copy taken
//! after a block stands for the whole prefix, as the delta net's (`super::delta_net`). The
//! projections run on the model's device, the convolution on the host in f32.
//!
//! Counterpart: llama.cpp's `build_shortconv_block`; vLLM's `ShortConv` (LFM2) with its conv
//! state in the mamba cache.

use candle_core::{Device, Tensor};

use super::causal_conv::{missing_slot, per_sequence, CausalConv};
use super::delta_net::RecurrentSeq;
use super::gguf::GgufFile;
use super::hparams::HParams;
use super::linear::QLinear;
use super::transformer::load_2d;
use super::ModelError;
use crate::ops::{BatchLayout, OpsError};

/// One short convolution layer.
pub(super) struct ShortConv {
    /// Its index among the recurrent layers.
    slot: usize,
    in_proj: QLinear,
    /// `shortconv.conv`.
    conv: CausalConv,
    out_proj: QLinear,
}

impl ShortConv {
    /// Layer `i`'s tensors.
    pub(super) fn load(file: &mut GgufFile, hp: &HParams, i: usize, device: &Device) -> Result<Self, ModelError> {
        let p = hp
            .short_conv
            .as_ref()
            .ok_or_else(|| OpsError::Layout(format!("layer {i} is a short convolution in a model without them")))?;
        let d = hp.hidden;
        let n = |s: &str| format!("blk.{i}.{s}");
        Ok(Self {
            slot: p.layers[..i].iter().filter(|&&r| r).count(),
            in_proj: QLinear::new(load_2d(file, &n("shortconv.in_proj.weight"), [3 * d, d], device)?, device)?,
            conv: CausalConv::load(file, &n("shortconv.conv.weight"), d, p.l_cache)?,
            out_proj: QLinear::new(load_2d(file, &n("shortconv.out_proj.weight"), [d, d], device)?, device)?,
        })
    }

    /// The layer's output for the normed rows `h` (`[t, hidden]`, packed per `batch`), each
    /// sequence's state advanced over its rows: `[t, hidden]`.
    pub(super) fn forward(&self, h: &Tensor, batch: &BatchLayout, seqs: &mut [RecurrentSeq]) -> Result<Tensor, ModelError> {
        let d = h.dim(1)?;
        let bcx = self.in_proj.forward(h)?;
        let y = per_sequence(&bcx, batch, seqs, d, h.device(), |rows, _, s, out| self.run(rows, d, s, out))?;
        self.out_proj.forward(&y)
    }

    /// One sequence's rows (`B`, `C`, `x` each `d` wide) through the convolution into `out`.
    fn run(&self, bcx: &[f32], d: usize, s: &mut RecurrentSeq, out: &mut [f32]) -> Result<(), ModelError> {
        let n = bcx.len() / (3 * d);
        // The carried values of B·x, then this chunk's.
        let mut input = s.state.layer_mut(self.slot).ok_or_else(|| missing_slot(self.slot))?[0].clone();
        for row in bcx.chunks_exact(3 * d) {
            input.extend(row[..d].iter().zip(&row[2 * d..]).map(|(b, x)| b * x));
        }
        // Then times C.
        self.conv.run(&input, out, |i, y| {
            y.iter_mut().zip(&bcx[i * 3 * d + d..][..d]).for_each(|(o, c)| *o *= c);
        });
        self.conv.carry(&input, n, s, self.slot)
    }
}
