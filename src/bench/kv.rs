//! `hearth bench kv`: what storing K/V as f16, bf16 or q8_0 costs in accuracy against f32, on a
//! real model, teacher-forced.
//!
//! For each prompt (through the model's chat template): f32 K/V decodes `tokens` greedy tokens;
//! then the prompt and those tokens are fed in one prefill with each K/V type and the logits of
//! every generated position are compared with f32's. Reported per type: bytes per cached token,
//! the mean and largest absolute logit difference, how many positions pick the same greedy
//! token, and the first position that does not, with f32's margin there (its top two logits'
//! difference: a near-tie flips under any rounding).
//!
//! Our attention gives a row the same bits whether it was decoded or prefilled (the paged
//! store's invariant), so the teacher-forced f32 logits are the greedy run's own, and a first
//! disagreement is where free-running greedy text with that type would first differ.
//!
//! Counterpart: llama.cpp's `llama-perplexity --kl-divergence` against a base run.

use std::path::Path;

use candle_core::{Device, Tensor};

use super::BenchError;
use crate::config::KvDtype;
use crate::model::sampling::argmax;
use crate::model::source::{resolve, ModelSource};
use crate::model::{LoadedModel, Logits, ModelError, Transformer};
use crate::ops::BatchLayout;
use crate::persist::Message;

/// Prompts with clear answers (the defaults of `hearth bench kv`).
pub const KV_BENCH_PROMPTS: &[&str] = &[
    "What is the capital of France?",
    "Write a Python function that returns the square of a number.",
    "List the first five prime numbers.",
    "Explain in two sentences why the sky is blue.",
];

#[derive(Debug, Clone, serde::Serialize)]
pub struct KvBenchOptions {
    pub prompts: Vec<String>,
    /// Greedy tokens generated (and compared) per prompt.
    pub tokens: usize,
}

/// One type against f32.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KvTypeReport {
    pub dtype: KvDtype,
    pub bytes_per_token: usize,
    pub mean_abs_logit_error: f64,
    pub max_abs_logit_error: f64,
    /// The same over the log-probabilities of f32's top 10 tokens at each position: the figure
    /// `scripts/llama-kv-error.py` reads from llama.cpp's server for its own K/V types.
    pub mean_abs_logprob_error: f64,
    pub max_abs_logprob_error: f64,
    /// Positions compared and those whose greedy token is f32's.
    pub positions: usize,
    pub same_greedy: usize,
    /// Every disagreement, in order: prompt, position in the reply, f32's top-two margin there.
    /// The first one is where free-running greedy text with this type would first differ.
    pub divergences: Vec<(usize, usize, f32)>,
}

impl KvTypeReport {
    /// The first position (prompt, token, f32 margin) whose greedy token is not f32's.
    pub fn first_divergence(&self) -> Option<(usize, usize, f32)> {
        self.divergences.first().copied()
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct KvBenchReport {
    pub options: KvBenchOptions,
    pub model: String,
    pub device: String,
    pub types: Vec<KvTypeReport>,
}

impl std::fmt::Display for KvBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "model: {}, device: {}, {} prompts × {} greedy tokens (f32 K/V), teacher-forced with each type\n",
            self.model,
            self.device,
            self.options.prompts.len(),
            self.options.tokens
        )?;
        writeln!(
            f,
            "| K/V | bytes/token | vs f32 | mean abs logit error | max abs logit error | mean / max top-10 logprob error | same greedy token | first divergence (prompt, token, f32 margin) |"
        )?;
        writeln!(f, "|---|---:|---:|---:|---:|---:|---:|---|")?;
        let base = self
            .types
            .iter()
            .find(|t| t.dtype == KvDtype::F32)
            .map(|t| t.bytes_per_token);
        for t in &self.types {
            let ratio = base.map_or(f64::NAN, |b| t.bytes_per_token as f64 / b as f64);
            let first = match t.first_divergence() {
                None => "none".to_string(),
                Some((p, i, m)) => format!("{p}, {i}, {m:.3}"),
            };
            writeln!(
                f,
                "| {} | {} | {:.3} | {:.4} | {:.4} | {:.4} / {:.4} | {}/{} | {} |",
                t.dtype,
                t.bytes_per_token,
                ratio,
                t.mean_abs_logit_error,
                t.max_abs_logit_error,
                t.mean_abs_logprob_error,
                t.max_abs_logprob_error,
                t.same_greedy,
                t.positions,
                first
            )?;
        }
        for t in self.types.iter().filter(|t| !t.divergences.is_empty()) {
            let list: Vec<String> = t
                .divergences
                .iter()
                .map(|(p, i, m)| format!("{p}:{i} ({m:.3})"))
                .collect();
            writeln!(
                f,
                "\n{} differs at (prompt:token (f32 margin)): {}",
                t.dtype,
                list.join(", ")
            )?;
        }
        Ok(())
    }
}

/// Top logit minus the second.
pub fn margin(row: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &v in row {
        if v > a {
            b = a;
            a = v;
        } else if v > b {
            b = v;
        }
    }
    a - b
}

/// Log-softmax of a logit row.
pub fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = row.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln() + max;
    row.iter().map(|&v| v as f64 - lse).collect()
}

/// The indices of the `k` largest values, largest first.
fn top_k(row: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    idx.truncate(k);
    idx
}

fn rows(t: &Tensor) -> Result<Vec<Vec<f32>>, BenchError> {
    Ok(t.to_dtype(candle_core::DType::F32)?.to_vec2::<f32>()?)
}

/// Greedy `n` tokens after `prompt` (one prefill, then one decode step per token) with K/V
/// stored as `dtype`.
pub(super) fn greedy(tf: &Transformer, prompt: &[u32], n: usize, dtype: KvDtype) -> Result<Vec<u32>, BenchError> {
    let (mut memory, table) = super::one_sequence(tf, dtype, prompt.len() + n + 1)?;
    let batch = BatchLayout::single(0, prompt.len()).map_err(ModelError::from)?;
    let mut states = super::fresh_states(tf, 1);
    let logits = tf.forward_with(
        prompt,
        &batch,
        memory.store(&[&table]).as_mut(),
        &mut states,
        Logits::LastPerSequence,
    )?;
    let mut out = vec![argmax(&rows(&logits)?[0])];
    while out.len() < n {
        let batch = BatchLayout::single(prompt.len() + out.len() - 1, 1).map_err(ModelError::from)?;
        let last = [out[out.len() - 1]];
        let mut store = memory.store(&[&table]);
        let logits = tf.forward_with(&last, &batch, store.as_mut(), &mut states, Logits::LastPerSequence)?;
        out.push(argmax(&rows(&logits)?[0]));
    }
    Ok(out)
}

/// The logits predicting each of `reply`'s tokens, with `prompt` and `reply` fed in one
/// prefill over K/V stored as `dtype` (teacher-forced: row `i` predicts `reply[i]`).
/// Also what the real-model tests compare with llama.cpp's recorded log-probabilities.
pub fn teacher_forced_logits(
    tf: &Transformer,
    prompt: &[u32],
    reply: &[u32],
    dtype: KvDtype,
) -> Result<Vec<Vec<f32>>, BenchError> {
    let (Some(_), Some((_, forced))) = (prompt.first(), reply.split_last()) else {
        return Err(BenchError::Invalid("teacher forcing needs a prompt and a reply".into()));
    };
    let mut ids = prompt.to_vec();
    ids.extend(forced);
    let (mut memory, table) = super::one_sequence(tf, dtype, ids.len())?;
    let batch = BatchLayout::single(0, ids.len()).map_err(ModelError::from)?;
    let logits = tf.forward(&ids, &batch, memory.store(&[&table]).as_mut(), Logits::All)?;
    Ok(rows(&logits)?.split_off(prompt.len() - 1))
}

/// Runs the comparison on the GGUF at `path`.
pub fn run_kv_bench(path: &Path, device: &Device, opts: KvBenchOptions) -> Result<KvBenchReport, BenchError> {
    let resolved = resolve(&ModelSource::Local(path.to_path_buf()), &Default::default())?;
    let model = LoadedModel::load(&resolved, device, None)?;
    let tf = &model.transformer;
    // Every type this device stores (q8_0 is CPU only).
    let all: Vec<KvDtype> = KvDtype::ALL
        .into_iter()
        .filter(|d| d.check_device(device.is_cuda()).is_ok())
        .collect();
    for &dtype in &all {
        tf.kv_shape()
            .check_dtype(dtype)
            .map_err(|e| BenchError::Invalid(format!("K/V type {dtype}: {e}")))?;
    }
    let n = opts.tokens.max(1);
    let mut cases = Vec::new();
    for p in &opts.prompts {
        let prompt = model.chat_ids(&[Message::user(p.as_str())])?;
        let reply = greedy(tf, &prompt, n, KvDtype::F32)?;
        let base = teacher_forced_logits(tf, &prompt, &reply, KvDtype::F32)?;
        cases.push((prompt, reply, base));
    }
    let mut types = Vec::new();
    for dtype in all {
        let (mut sum, mut max, mut count, mut same) = (0f64, 0f64, 0usize, 0usize);
        let (mut lp_sum, mut lp_max, mut lp_count) = (0f64, 0f64, 0usize);
        let mut divergences = Vec::new();
        for (pi, (prompt, reply, base)) in cases.iter().enumerate() {
            let got = teacher_forced_logits(tf, prompt, reply, dtype)?;
            for (i, (g, b)) in got.iter().zip(base).enumerate() {
                for (x, y) in g.iter().zip(b) {
                    let d = f64::from((x - y).abs());
                    sum += d;
                    max = max.max(d);
                }
                count += g.len();
                let (lg, lb) = (log_softmax(g), log_softmax(b));
                for k in top_k(b, 10) {
                    let d = (lg[k] - lb[k]).abs();
                    lp_sum += d;
                    lp_max = lp_max.max(d);
                    lp_count += 1;
                }
                if argmax(g) == argmax(b) {
                    same += 1;
                } else {
                    divergences.push((pi, i, margin(b)));
                }
            }
        }
        types.push(KvTypeReport {
            dtype,
            bytes_per_token: super::paged_layout(tf, dtype).token_bytes(),
            mean_abs_logit_error: sum / count.max(1) as f64,
            max_abs_logit_error: max,
            mean_abs_logprob_error: lp_sum / lp_count.max(1) as f64,
            max_abs_logprob_error: lp_max,
            positions: cases.len() * n,
            same_greedy: same,
            divergences,
        });
    }
    Ok(KvBenchReport {
        options: opts,
        model: model.info.name.clone(),
        device: model.info.device.clone(),
        types,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testkit::{write_model, TinyModelSpec, WeightType};

    #[test]
    fn compares_every_type_with_f32() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        write_model(
            &TinyModelSpec::tiny(crate::model::hparams::Family::Llama, WeightType::Q8_0),
            &path,
        )
        .unwrap();
        let opts = KvBenchOptions {
            prompts: vec!["hello".into()],
            tokens: 6,
        };
        let r = run_kv_bench(&path, &Device::Cpu, opts).unwrap();
        assert_eq!(r.types.len(), 4);
        let f32 = r.types.iter().find(|t| t.dtype == KvDtype::F32).unwrap();
        assert_eq!((f32.max_abs_logit_error, f32.same_greedy, f32.positions), (0.0, 6, 6));
        let f16 = r.types.iter().find(|t| t.dtype == KvDtype::F16).unwrap();
        assert_eq!(f16.bytes_per_token * 2, f32.bytes_per_token);
        assert!(
            f16.max_abs_logit_error > 0.0 && f16.max_abs_logit_error < 0.5,
            "{f16:?}"
        );
        assert!(r.to_string().contains("| q8_0 |"));
    }
}
