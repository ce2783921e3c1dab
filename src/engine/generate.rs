//! One request: prefill, then decode with sampling until a stop.

use std::time::{Duration, Instant};

use candle_core::DType;

use super::EngineError;
use crate::model::sampling::{Sampler, SamplingParams};
use crate::model::{LoadedModel, Logits, ModelError};
use crate::ops::{BatchLayout, ContiguousBatch, ContiguousKv};

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-sequence / end-of-turn token.
    Eos,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The context is full.
    ContextFull,
}

/// The outcome of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationReport {
    pub prompt_tokens: usize,
    /// Generated ids (without the stop token).
    pub tokens: Vec<u32>,
    pub text: String,
    pub stop: StopReason,
    /// Time to the first sampled token (prefill plus one sample).
    pub prefill: Duration,
    /// Time spent decoding after the first token.
    pub decode: Duration,
}

/// Runs `prompt` through `model` and streams the completion's text to
/// `on_text` as it is generated.
pub fn generate(
    model: &LoadedModel,
    prompt: &[u32],
    params: &GenerateParams,
    mut on_text: impl FnMut(&str) -> Result<(), EngineError>,
) -> Result<GenerationReport, EngineError> {
    model.check_prompt_fits(prompt.len())?;
    params.sampling.validate()?;
    let context = model.info.context_length;
    let tf = &model.transformer;
    let mut kv = ContiguousKv::new(tf.kv_shape(), DType::F32, tf.device(), context);
    let mut sampler = Sampler::new(params.sampling.clone());
    let mut stream = model.tokenizer.stream();
    let stop_ids = model.tokenizer.stop_ids();

    let start = Instant::now();
    let mut history: Vec<u32> = prompt.to_vec();
    let mut batch = BatchLayout::single(0, prompt.len()).map_err(ModelError::from)?;
    let mut input: Vec<u32> = prompt.to_vec();
    let mut generated = Vec::new();
    let mut text = String::new();
    let mut first_token_at = None;
    let stop = loop {
        let logits = {
            let mut store = ContiguousBatch::new(vec![&mut kv]);
            tf.forward(&input, &batch, &mut store, Logits::LastPerSequence)?
        };
        let logits: Vec<f32> = logits.squeeze(0).and_then(|l| l.to_vec1()).map_err(ModelError::from)?;
        let next = sampler.sample(&logits, &history);
        first_token_at.get_or_insert_with(Instant::now);
        if stop_ids.contains(&next) {
            break StopReason::Eos;
        }
        generated.push(next);
        history.push(next);
        if let Some(piece) = stream.push(next)? {
            on_text(&piece)?;
            text.push_str(&piece);
        }
        if generated.len() >= params.max_tokens {
            break StopReason::MaxTokens;
        }
        let cached = history.len() - 1;
        if cached + 1 > context {
            break StopReason::ContextFull;
        }
        batch = BatchLayout::single(cached, 1).map_err(ModelError::from)?;
        input = vec![next];
    };
    // Text held back waiting for the rest of a character is flushed.
    if let Some(rest) = stream.finish()? {
        on_text(&rest)?;
        text.push_str(&rest);
    }
    let first = first_token_at.unwrap_or_else(Instant::now);
    Ok(GenerationReport {
        prompt_tokens: prompt.len(),
        tokens: generated,
        text,
        stop,
        prefill: first.duration_since(start),
        decode: first.elapsed(),
    })
}
