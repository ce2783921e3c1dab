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

use candle_core::{DType, Device, Tensor};

use super::delta_net::{with_f32, RecurrentSeq, RecurrentState};
use super::gguf::GgufFile;
use super::hparams::HParams;
use super::linear::QLinear;
use super::transformer::{check_shape, load_2d};
use super::ModelError;
use crate::ops::par::for_rows;
use crate::ops::{BatchLayout, OpsError};

/// One short convolution layer.
pub(super) struct ShortConv {
    /// Its index among the recurrent layers.
    slot: usize,
    /// Every recurrent layer's state sizes (for a copy of the whole state).
    shape: Vec<[usize; 2]>,
    taps: usize,
    in_proj: QLinear,
    /// `shortconv.conv` transposed: `[taps][hidden]`, host f32.
    conv: Vec<f32>,
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
        let taps = p.l_cache;
        let cpu = Device::Cpu;
        let name = n("shortconv.conv.weight");
        let conv = file.tensor(&name, &cpu)?;
        check_shape(&name, conv.shape().dims(), &[d, taps])?;
        let by_channel = conv.dequantize(&cpu)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        Ok(Self {
            slot: p.layers[..i].iter().filter(|&&r| r).count(),
            shape: hp.state_shape().unwrap_or_default(),
            taps,
            in_proj: QLinear::new(load_2d(file, &n("shortconv.in_proj.weight"), [3 * d, d], device)?, device)?,
            conv: (0..taps * d).map(|k| by_channel[(k % d) * taps + k / d]).collect(),
            out_proj: QLinear::new(load_2d(file, &n("shortconv.out_proj.weight"), [d, d], device)?, device)?,
        })
    }

    /// The layer's output for the normed rows `h` (`[t, hidden]`, packed per `batch`), each
    /// sequence's state advanced over its rows: `[t, hidden]`.
    pub(super) fn forward(&self, h: &Tensor, batch: &BatchLayout, seqs: &mut [RecurrentSeq]) -> Result<Tensor, ModelError> {
        if seqs.len() != batch.len() {
            return Err(OpsError::Layout(format!("{} recurrent states for a batch of {}", seqs.len(), batch.len())).into());
        }
        let (t, d) = h.dims2()?;
        let bcx = self.in_proj.forward(h)?.to_dtype(DType::F32)?;
        let mut out = vec![0f32; t * d];
        with_f32(&bcx, |all| {
            let mut row = 0;
            for (s, chunk) in seqs.iter_mut().zip(batch.seqs()) {
                let r = row..row + chunk.new;
                self.run(&all[r.start * 3 * d..r.end * 3 * d], d, s, &mut out[r.start * d..r.end * d])?;
                row = r.end;
            }
            Ok(())
        })?;
        self.out_proj.forward(&Tensor::from_vec(out, (t, d), h.device())?)
    }

    /// One sequence's rows (`B`, `C`, `x` each `d` wide) through the convolution into `out`.
    fn run(&self, bcx: &[f32], d: usize, s: &mut RecurrentSeq, out: &mut [f32]) -> Result<(), ModelError> {
        let n = bcx.len() / (3 * d);
        let keep = self.taps - 1;
        let slot = self.slot;
        let state = &mut s
            .state
            .layer_mut(slot)
            .ok_or_else(|| OpsError::Layout(format!("a recurrent state without layer slot {slot}")))?[0];
        // The carried values of B·x, then this chunk's.
        let mut input = Vec::with_capacity((keep + n) * d);
        input.extend_from_slice(state);
        for row in bcx.chunks_exact(3 * d) {
            input.extend(row[..d].iter().zip(&row[2 * d..]).map(|(b, x)| b * x));
        }
        let (conv, taps) = (&self.conv, self.taps);
        let input_ref = &input;
        for_rows(out, d, 1 << 14, |i, y| {
            for j in 0..taps {
                let (a, w) = (&input_ref[(i + j) * d..][..d], &conv[j * d..][..d]);
                for ((o, a), w) in y.iter_mut().zip(a).zip(w) {
                    *o += a * w;
                }
            }
            let c = &bcx[i * 3 * d + d..][..d];
            y.iter_mut().zip(c).for_each(|(o, c)| *o *= c);
        });
        if let Some(m) = s.capture_after.filter(|m| (1..=n).contains(m)) {
            let taken = s.captured.get_or_insert_with(|| RecurrentState::new(&self.shape));
            if let Some(l) = taken.layer_mut(slot) {
                l[0].copy_from_slice(&input[m * d..(m + keep) * d]);
            }
        }
        state.copy_from_slice(&input[n * d..]);
        Ok(())
    }
}
