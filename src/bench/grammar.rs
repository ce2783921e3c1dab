//! `hearth bench grammar`: decoding with a JSON-Schema grammar against the same requests
//! without one, at several batch sizes.
//!
//! Each request is one chat prompt continued for exactly `tokens` tokens, greedy: unconstrained
//! with `ignore_eos`, constrained by a schema that cannot end sooner (an array of at least a
//! thousand short strings), so both sides generate the same number of tokens and the only
//! difference is the grammar's per-step mask (computed on the engine thread before sampling)
//! and its bookkeeping. A batch of `b` requests is submitted at once; the figure is decode
//! tokens per second over the batch (tokens after each request's first, over the time from the
//! first request's first token to the last request's end). Runs alternate and the best of
//! `repeats` is kept for each side, so a noisy machine hurts both alike. The first grammar of
//! the model (which builds the vocabulary's token trie) is compiled before anything is timed.
//!
//! Counterpart: vLLM's `benchmarks/benchmark_serving_structured_output.py`.

use std::path::Path;
use std::time::Duration;

use candle_core::Device;

use super::BenchError;
use crate::config::Settings;
use crate::engine::{Engine, EngineHandle, Event, GenerateParams, GenerateRequest, GenerationReport, Grammar, Message};
use crate::model::source::{resolve, ModelSource};
use crate::model::LoadedModel;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GrammarBenchOptions {
    /// Tokens generated per request.
    pub tokens: usize,
    /// Batch sizes (requests at once).
    pub batch: Vec<usize>,
    pub repeats: usize,
}

/// One batch size's best figures, both sides.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GrammarRun {
    pub batch: usize,
    /// Decode tokens per second over the batch, no grammar.
    pub unconstrained_tokens_per_s: f64,
    /// The same with the JSON-Schema grammar.
    pub constrained_tokens_per_s: f64,
}

impl GrammarRun {
    /// Constrained over unconstrained (the target is at least 0.9).
    pub fn ratio(&self) -> f64 {
        self.constrained_tokens_per_s / self.unconstrained_tokens_per_s.max(1e-9)
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GrammarBenchReport {
    pub model: String,
    pub vocab_size: usize,
    pub device: String,
    pub options: GrammarBenchOptions,
    pub schema: serde_json::Value,
    pub runs: Vec<GrammarRun>,
}

impl std::fmt::Display for GrammarBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "model: {} ({} tokens in the vocabulary), device: {}, {} tokens per request, best of {}\n",
            self.model, self.vocab_size, self.device, self.options.tokens, self.options.repeats
        )?;
        writeln!(f, "| batch | unconstrained tok/s | JSON schema tok/s | ratio |")?;
        writeln!(f, "|---:|---:|---:|---:|")?;
        for r in &self.runs {
            writeln!(
                f,
                "| {} | {:.1} | {:.1} | {:.2} |",
                r.batch,
                r.unconstrained_tokens_per_s,
                r.constrained_tokens_per_s,
                r.ratio()
            )?;
        }
        Ok(())
    }
}

/// The schema every constrained request follows: it cannot end before `tokens`.
fn long_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "array",
        "items": {"type": "string", "maxLength": 12},
        "minItems": 1000,
    })
}

/// Runs the benchmark on the GGUF at `path` with `settings`' cache and engine limits.
pub fn run_grammar_bench(
    path: &Path,
    device: &Device,
    settings: &Settings,
    opts: GrammarBenchOptions,
) -> Result<GrammarBenchReport, BenchError> {
    if opts.tokens < 2 || opts.batch.is_empty() || opts.batch.contains(&0) || opts.repeats == 0 {
        return Err(BenchError::Invalid(
            "--tokens must be at least 2, and --batch sizes and --repeats at least 1".into(),
        ));
    }
    let resolved = resolve(&ModelSource::Local(path.to_path_buf()), &Default::default())?;
    let model = LoadedModel::load(&resolved, device, settings.model.context_length)?;
    let (name, vocab_size, device_name) = (model.info.name.clone(), model.tokenizer.vocab_size(), model.info.device.clone());
    let engine = Engine::new(model, &settings.cache, &settings.engine)?;
    let max_batch = opts.batch.iter().copied().max().unwrap_or(1);
    let handle = EngineHandle::spawn(engine, max_batch.max(settings.engine.max_queued))?;
    let schema = long_schema();
    let grammar = Grammar::JsonSchema(schema.clone());
    // The first grammar builds the vocabulary's trie: not part of any timing.
    handle.check_grammar(&grammar)?;
    let prompts = (0..max_batch)
        .map(|i| {
            handle.tokenize_chat(&[Message::user(format!(
                "List fruit names as a JSON array of strings, at least a thousand of them (list {i})."
            ))])
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut runs = Vec::new();
    for &batch in &opts.batch {
        let (mut free, mut bound) = (0.0f64, 0.0f64);
        for _ in 0..opts.repeats {
            free = free.max(batch_rate(&handle, &prompts[..batch], opts.tokens, None)?);
            bound = bound.max(batch_rate(&handle, &prompts[..batch], opts.tokens, Some(&grammar))?);
        }
        runs.push(GrammarRun {
            batch,
            unconstrained_tokens_per_s: free,
            constrained_tokens_per_s: bound,
        });
        tracing::info!("grammar bench: batch {batch} done");
    }
    Ok(GrammarBenchReport {
        model: name,
        vocab_size,
        device: device_name,
        options: opts,
        schema,
        runs,
    })
}

/// Submits one request per prompt at once and returns the batch's decode tokens per second.
fn batch_rate(
    handle: &EngineHandle,
    prompts: &[Vec<u32>],
    tokens: usize,
    grammar: Option<&Grammar>,
) -> Result<f64, BenchError> {
    let params = GenerateParams {
        ignore_eos: true,
        grammar: grammar.cloned(),
        ..GenerateParams::greedy(tokens)
    };
    let mut streams = prompts
        .iter()
        .map(|p| handle.submit(GenerateRequest::new(p.clone(), params.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    let mut reports: Vec<GenerationReport> = Vec::with_capacity(streams.len());
    for s in &mut streams {
        loop {
            match s.blocking_recv() {
                Some(Event::Token { .. }) => {}
                Some(Event::Done(r)) => {
                    reports.push(*r);
                    break;
                }
                Some(Event::Error(e)) => return Err(e.into()),
                None => return Err(BenchError::Invalid("the engine ended a request without a result".into())),
            }
        }
    }
    if let Some(short) = reports.iter().find(|r| r.tokens.len() != tokens) {
        return Err(BenchError::Invalid(format!(
            "a request generated {} tokens instead of {tokens} (stopped by {:?})",
            short.tokens.len(),
            short.stop
        )));
    }
    // Every request was submitted at (nearly) the same instant: times after submission compare.
    let first = reports.iter().map(|r| r.ttft).min().unwrap_or_default();
    let last = reports.iter().map(|r| r.ttft + r.decode).max().unwrap_or_default();
    let decoded: usize = reports.iter().map(|r| r.tokens.len() - 1).sum();
    Ok(decoded as f64 / last.saturating_sub(first).max(Duration::from_micros(1)).as_secs_f64())
}
