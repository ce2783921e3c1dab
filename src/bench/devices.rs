//! `hearth bench devices`: the model on one device (`--device cuda`) against the same GGUF on
//! the CPU, the reference: free-running greedy text, and teacher-forced logits.
//!
//! For each prompt (through the model's chat template) both devices decode `tokens` greedy
//! tokens, free-running; then the prompt and the CPU's reply are fed in one prefill on each
//! device and the logits of every reply position are compared. The two devices multiply with
//! different kernels (ours on the CPU, candle's on CUDA), so their logits differ in the last
//! bits and a near-tie may break either way: a disagreement counts as a *near-tie* when the
//! CPU's top two logits there are closer than twice the two devices' largest logit difference
//! at that position. [`DeviceBenchReport::agrees`] holds when every disagreement, teacher-forced
//! or in the free-running text, is a near-tie; `hearth bench devices` fails otherwise.
//!
//! Counterpart: llama.cpp's `llama-perplexity --kl-divergence` of one backend against another.

use std::path::Path;

use candle_core::Device;

use super::kv::{greedy, margin, teacher_forced_logits};
use super::BenchError;
use crate::config::KvDtype;
use crate::model::sampling::argmax;
use crate::model::source::{resolve, ModelSource};
use crate::model::LoadedModel;
use crate::persist::Message;

#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceBenchOptions {
    pub prompts: Vec<String>,
    /// Greedy tokens generated (and compared) per prompt.
    pub tokens: usize,
    /// How K/V is stored on both devices.
    pub kv_dtype: KvDtype,
}

/// Where two runs first pick different tokens.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Divergence {
    pub prompt: usize,
    /// The position in the reply.
    pub token: usize,
    /// The CPU's top logit minus its second there.
    pub reference_margin: f32,
    /// The largest difference between the two devices' logits there (teacher-forced).
    pub max_abs_diff: f32,
}

impl Divergence {
    /// The CPU's top two logits are closer than twice the devices' difference: either pick is
    /// within the rounding of the two kernels.
    pub fn near_tie(&self) -> bool {
        self.reference_margin <= 2.0 * self.max_abs_diff
    }
}

/// One prompt's free-running greedy replies.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PromptReplies {
    pub prompt: String,
    pub reference_text: String,
    pub device_text: String,
    /// The first position whose token differs (`None`: the same tokens throughout).
    pub first_difference: Option<Divergence>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceBenchReport {
    pub options: DeviceBenchOptions,
    pub model: String,
    pub device: String,
    pub reference_device: String,
    pub replies: Vec<PromptReplies>,
    /// Teacher-forced, over every position of every reply.
    pub mean_abs_logit_error: f64,
    pub max_abs_logit_error: f64,
    /// The largest |logit| on the CPU, for scale.
    pub max_abs_logit: f64,
    pub positions: usize,
    pub same_greedy: usize,
    /// Every teacher-forced position whose greedy token differs, in order.
    pub divergences: Vec<Divergence>,
}

impl DeviceBenchReport {
    /// Every disagreement, teacher-forced or in the free-running text, is a near-tie.
    pub fn agrees(&self) -> bool {
        self.divergences.iter().all(Divergence::near_tie)
            && self.replies.iter().filter_map(|r| r.first_difference).all(|d| d.near_tie())
    }
}

impl std::fmt::Display for DeviceBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "model: {}, {} against {} (the reference), K/V {}, {} prompts × {} greedy tokens\n",
            self.model,
            self.device,
            self.reference_device,
            self.options.kv_dtype,
            self.replies.len(),
            self.options.tokens
        )?;
        let tie = |d: &Divergence| {
            format!(
                "token {}: CPU margin {:.4}, max |diff| {:.4}, {}",
                d.token,
                d.reference_margin,
                d.max_abs_diff,
                if d.near_tie() { "a near-tie" } else { "NOT a near-tie" }
            )
        };
        for (i, r) in self.replies.iter().enumerate() {
            writeln!(f, "prompt {i}: {:?}", r.prompt)?;
            match &r.first_difference {
                None => writeln!(f, "  same greedy text on both: {:?}", r.reference_text)?,
                Some(d) => {
                    writeln!(f, "  the greedy texts differ from {}", tie(d))?;
                    writeln!(f, "  {}: {:?}", self.reference_device, r.reference_text)?;
                    writeln!(f, "  {}: {:?}", self.device, r.device_text)?;
                }
            }
        }
        writeln!(
            f,
            "\nteacher-forced on the CPU's replies: mean |logit diff| {:.5}, max {:.5} (max |logit| {:.2}); \
             same greedy token at {}/{} positions",
            self.mean_abs_logit_error, self.max_abs_logit_error, self.max_abs_logit, self.same_greedy, self.positions
        )?;
        for d in &self.divergences {
            writeln!(f, "  prompt {} {}", d.prompt, tie(d))?;
        }
        let verdict = if self.agrees() {
            "the devices agree (every difference is a near-tie)"
        } else {
            "the devices DISAGREE where the CPU's choice is clear"
        };
        writeln!(f, "\nverdict: {verdict}")
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Runs the comparison of `device` against the CPU on the GGUF at `path`.
pub fn run_device_bench(
    path: &Path,
    device: &Device,
    opts: DeviceBenchOptions,
) -> Result<DeviceBenchReport, BenchError> {
    if opts.prompts.is_empty() || opts.tokens == 0 {
        return Err(BenchError::Invalid("compare at least one prompt and one token".into()));
    }
    opts.kv_dtype
        .check_device(device.is_cuda())
        .map_err(|e| BenchError::Invalid(format!("K/V type {}: {e}", opts.kv_dtype)))?;
    let resolved = resolve(&ModelSource::Local(path.to_path_buf()), &Default::default())?;
    let cpu = LoadedModel::load(&resolved, &Device::Cpu, None)?;
    let dev = LoadedModel::load(&resolved, device, None)?;
    let (n, dtype) = (opts.tokens, opts.kv_dtype);
    let decode = |ids: &[u32]| cpu.tokenizer.decode_skip_special(ids);
    let (mut sum, mut max, mut scale, mut count) = (0f64, 0f32, 0f32, 0usize);
    let (mut same, mut divergences, mut replies) = (0usize, Vec::new(), Vec::new());
    for (pi, p) in opts.prompts.iter().enumerate() {
        let prompt = cpu.chat_ids(&[Message::user(p.as_str())])?;
        let want = greedy(&cpu.transformer, &prompt, n, dtype)?;
        let got = greedy(&dev.transformer, &prompt, n, dtype)?;
        let base = teacher_forced_logits(&cpu.transformer, &prompt, &want, dtype)?;
        let forced = teacher_forced_logits(&dev.transformer, &prompt, &want, dtype)?;
        let at = |token: usize| Divergence {
            prompt: pi,
            token,
            reference_margin: margin(&base[token]),
            max_abs_diff: max_abs_diff(&forced[token], &base[token]),
        };
        for (i, (g, b)) in forced.iter().zip(&base).enumerate() {
            sum += g.iter().zip(b).map(|(x, y)| f64::from((x - y).abs())).sum::<f64>();
            count += g.len();
            max = max.max(max_abs_diff(g, b));
            scale = b.iter().fold(scale, |m, v| m.max(v.abs()));
            if argmax(g) == argmax(b) {
                same += 1;
            } else {
                divergences.push(at(i));
            }
        }
        replies.push(PromptReplies {
            prompt: p.clone(),
            reference_text: decode(&want)?,
            device_text: decode(&got)?,
            first_difference: want.iter().zip(&got).position(|(a, b)| a != b).map(at),
        });
    }
    Ok(DeviceBenchReport {
        model: cpu.info.name.clone(),
        device: dev.info.device.clone(),
        reference_device: cpu.info.device.clone(),
        replies,
        mean_abs_logit_error: sum / count.max(1) as f64,
        max_abs_logit_error: f64::from(max),
        max_abs_logit: f64::from(scale),
        positions: opts.prompts.len() * n,
        same_greedy: same,
        divergences,
        options: opts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testkit::{write_model, TinyModelSpec, WeightType};

    fn tie(reference_margin: f32, max_abs_diff: f32) -> Divergence {
        Divergence {
            prompt: 0,
            token: 3,
            reference_margin,
            max_abs_diff,
        }
    }

    #[test]
    fn the_cpu_against_itself_agrees_bit_for_bit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        let spec = TinyModelSpec::tiny(crate::model::hparams::Family::Llama, WeightType::Q8_0);
        write_model(&spec, &path).unwrap();
        let opts = DeviceBenchOptions {
            prompts: vec!["hello".into(), "what is two and two".into()],
            tokens: 6,
            kv_dtype: KvDtype::F16,
        };
        let mut r = run_device_bench(&path, &Device::Cpu, opts).unwrap();
        assert_eq!((r.max_abs_logit_error, r.same_greedy, r.positions), (0.0, 12, 12));
        assert!(r.max_abs_logit > 0.0);
        assert!(r.replies.iter().all(|p| p.first_difference.is_none() && p.reference_text == p.device_text));
        assert!(r.agrees() && r.to_string().contains("verdict: the devices agree"));

        // The verdict: a difference where the CPU's margin is within twice the devices'
        // difference is a near-tie; one where the CPU's choice is clear is not.
        r.divergences.push(tie(0.01, 0.006));
        assert!(r.agrees());
        r.replies[1].first_difference = Some(tie(0.5, 0.01));
        assert!(!r.agrees());
        let text = r.to_string();
        assert!(text.contains("NOT a near-tie") && text.contains("DISAGREE"), "{text}");
    }

    #[test]
    fn bad_options_are_refused() {
        let opts = |prompts: Vec<String>, tokens, kv_dtype| DeviceBenchOptions {
            prompts,
            tokens,
            kv_dtype,
        };
        let p = Path::new("/nonexistent.gguf");
        let cpu = Device::Cpu;
        assert!(run_device_bench(p, &cpu, opts(vec![], 4, KvDtype::F16)).is_err());
        assert!(run_device_bench(p, &cpu, opts(vec!["x".into()], 0, KvDtype::F16)).is_err());
        assert!(run_device_bench(p, &cpu, opts(vec!["x".into()], 4, KvDtype::F16)).is_err());
    }
}
