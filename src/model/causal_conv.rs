//! The causal convolution of the recurrent layers: each channel a few taps over the token and
//! those just before it, the last inputs carried from chunk to chunk.
//!
//! Owns: `CausalConv` (the taps, held `[taps][channels]` so each runs along a row) and
//! [`per_sequence`], the walk of a packed batch's sequences both recurrent mixers share. Used by
//! Qwen3.5's gated delta net (`super::delta_net`: 4 taps, then SiLU) and LFM2's short
//! convolution (`super::short_conv`: 3 taps, then times `C`).
//!
//! Invariant: the carried rows are the last `taps - 1` inputs, so the output after a chunk does
//! not depend on where the chunks were cut.
//!
//! Counterpart: ggml's `ggml_ssm_conv` with llama.cpp's conv state.

use candle_core::{DType, Device, Tensor};

use super::delta_net::{with_f32, RecurrentSeq, RecurrentState};
use super::gguf::GgufFile;
use super::transformer::check_shape;
use super::ModelError;
use crate::ops::par::{for_rows, with_scratch};
use crate::ops::{BatchLayout, OpsError};

/// One layer's convolution weights.
pub(super) struct CausalConv {
    taps: usize,
    channels: usize,
    /// `[taps][channels]`, host f32.
    weights: Vec<f32>,
}

impl CausalConv {
    /// The weights of tensor `name` (`[channels, taps]` in the file), on the host.
    pub(super) fn load(file: &mut GgufFile, name: &str, channels: usize, taps: usize) -> Result<Self, ModelError> {
        let cpu = Device::Cpu;
        let t = file.tensor(name, &cpu)?;
        check_shape(name, t.shape().dims(), &[channels, taps])?;
        let by_channel = t.dequantize(&cpu)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        Ok(Self {
            taps,
            channels,
            weights: (0..taps * channels).map(|k| by_channel[(k % channels) * taps + k / channels]).collect(),
        })
    }

    /// `out` (`n` rows, zeroed) ← each row's convolution over `input` (the carried `taps - 1`
    /// rows, then the `n` new ones), each row then through `finish(i, row)`.
    pub(super) fn run(&self, input: &[f32], out: &mut [f32], finish: impl Fn(usize, &mut [f32]) + Sync) {
        let (taps, ch, w) = (self.taps, self.channels, &self.weights);
        for_rows(out, ch, 1 << 14, |i, y| {
            for j in 0..taps {
                for ((o, a), b) in y.iter_mut().zip(&input[(i + j) * ch..][..ch]).zip(&w[j * ch..][..ch]) {
                    *o += a * b;
                }
            }
            finish(i, y);
        });
    }

    /// One sequence's chunk of `n` rows through the convolution: its carried inputs (layer slot
    /// `slot` of `s`), then each row's `input_of(i)`, convolved into a buffer reused from call to
    /// call (a long prompt's are tens of MB a layer), each output row through `finish`; the
    /// carried inputs advanced ([`Self::carry`]); then `then(the output rows, s)`.
    pub(super) fn run_chunk<'a, R>(
        &self,
        s: &mut RecurrentSeq,
        slot: usize,
        n: usize,
        input_of: impl Fn(usize) -> &'a [f32],
        finish: impl Fn(usize, &mut [f32]) + Sync,
        then: impl FnOnce(&mut [f32], &mut RecurrentSeq) -> Result<R, ModelError>,
    ) -> Result<R, ModelError> {
        with_scratch(&INPUT, |input| {
            with_scratch(&CONVOLVED, |x| {
                input.clear();
                input.extend_from_slice(&s.state.layer_mut(slot).ok_or_else(|| missing_slot(slot))?[0]);
                for i in 0..n {
                    input.extend_from_slice(input_of(i));
                }
                x.clear();
                x.resize(n * self.channels, 0.0);
                self.run(input, x, finish);
                self.carry(input, n, s, slot)?;
                then(x, s)
            })
        })
    }

    /// After a chunk of `n` rows over `input`: `s`'s carried rows in layer slot `slot` become
    /// the chunk's last inputs, and where `s` asks for a copy after `m` of them, the copy's
    /// carried rows are the inputs before that point.
    pub(super) fn carry(&self, input: &[f32], n: usize, s: &mut RecurrentSeq, slot: usize) -> Result<(), ModelError> {
        let (keep, ch) = ((self.taps - 1) * self.channels, self.channels);
        if let Some(m) = s.capture_after.filter(|m| (1..=n).contains(m)) {
            let taken = s.captured.get_or_insert_with(|| RecurrentState::zeros_like(&s.state));
            if let Some(l) = taken.layer_mut(slot) {
                l[0].copy_from_slice(&input[m * ch..m * ch + keep]);
            }
        }
        let state = &mut s.state.layer_mut(slot).ok_or_else(|| missing_slot(slot))?[0];
        state.copy_from_slice(&input[n * ch..]);
        Ok(())
    }
}

thread_local! {
    /// The convolution's input rows and its output, per thread, reused from call to call.
    static INPUT: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    static CONVOLVED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The error of a state without the layer's slot.
pub(super) fn missing_slot(slot: usize) -> ModelError {
    OpsError::Layout(format!("a recurrent state without layer slot {slot}")).into()
}

/// Runs `f` on each sequence of `batch` in turn: its rows of `proj` (`[t, width]`, read in place
/// on the CPU), their width, its state, and its rows of the output; returns the output,
/// `[t, out_width]`, on `device`.
pub(super) fn per_sequence(
    proj: &Tensor,
    batch: &BatchLayout,
    seqs: &mut [RecurrentSeq],
    out_width: usize,
    device: &Device,
    mut f: impl FnMut(&[f32], usize, &mut RecurrentSeq, &mut [f32]) -> Result<(), ModelError>,
) -> Result<Tensor, ModelError> {
    if seqs.len() != batch.len() {
        return Err(OpsError::Layout(format!("{} recurrent states for a batch of {}", seqs.len(), batch.len())).into());
    }
    let t = proj.dim(0)?;
    let proj = proj.to_dtype(DType::F32)?;
    let mut out = vec![0f32; t * out_width];
    with_f32(&proj, |all| {
        let width = all.len() / t.max(1);
        let mut row = 0;
        for (s, chunk) in seqs.iter_mut().zip(batch.seqs()) {
            let r = row..row + chunk.new;
            f(&all[r.start * width..r.end * width], width, s, &mut out[r.start * out_width..r.end * out_width])?;
            row = r.end;
        }
        Ok(())
    })?;
    Ok(Tensor::from_vec(out, (t, out_width), device)?)
}
