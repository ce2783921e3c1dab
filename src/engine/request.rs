//! What a front-end asks of the engine and what comes back.
//!
//! Owns: [`RequestId`], [`GenerateRequest`] / [`GenerateParams`] (a tokenized prompt and how to
//! continue it), [`Event`] (what a request's channel carries), [`GenerationReport`] (the closing
//! figures: usage, cache hit, timings) and [`StopReason`].
//!
//! Counterpart: vLLM's `EngineCoreRequest` / `RequestOutput`, OpenAI's `finish_reason`.

use std::time::Duration;

use crate::config::SamplingParams;
use crate::kv::PrefixMatch;
use crate::persist::{ConversationId, Message};

use super::EngineError;

/// One request's id, unique for the engine's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct RequestId(pub u64);

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "req-{}", self.0)
    }
}

/// How to continue a prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateParams {
    /// Most tokens to generate (the reply also ends at the context's end).
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Stop strings: the reply ends before the first occurrence of any of
    /// them, which is not part of the reply's text.
    pub stop: Vec<String>,
    /// Go on past end-of-sequence tokens until `max_tokens` or a stop string
    /// (vLLM's `ignore_eos`: fixed-length replies for benchmarks and tests).
    pub ignore_eos: bool,
    /// Keep every step's logits in the report (tests compare them).
    pub keep_logits: bool,
}

impl GenerateParams {
    /// `max_tokens` greedy tokens, no stop strings.
    pub fn greedy(max_tokens: usize) -> Self {
        Self {
            max_tokens,
            sampling: SamplingParams::greedy(),
            stop: Vec::new(),
            ignore_eos: false,
            keep_logits: false,
        }
    }
}

/// A tokenized prompt and how to continue it.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub params: GenerateParams,
    /// Save the turn into a conversation when it finishes: its text, and a cache file of its
    /// K/V (when the engine has a disk tier).
    pub save: Option<SaveTo>,
}

impl GenerateRequest {
    /// A request that saves nothing.
    pub fn new(prompt: Vec<u32>, params: GenerateParams) -> Self {
        Self {
            prompt,
            params,
            save: None,
        }
    }
}

/// Where a finished turn is saved.
#[derive(Debug, Clone, PartialEq)]
pub struct SaveTo {
    pub conversation: ConversationId,
    /// `None`: the conversation already holds the prompt's messages (the engine's
    /// conversation API saved the user's message first); the reply is appended. `Some`: the
    /// conversation becomes these messages and the reply (a request naming a conversation over
    /// the HTTP API).
    pub messages: Option<Vec<Message>>,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum StopReason {
    /// The model produced an end-of-sequence / end-of-turn token.
    Eos,
    /// The reply reached one of the request's stop strings.
    StopString,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The context is full.
    ContextFull,
}

impl StopReason {
    /// OpenAI's `finish_reason`: `"stop"` or `"length"`.
    pub fn finish_reason(self) -> &'static str {
        match self {
            Self::Eos | Self::StopString => "stop",
            Self::MaxTokens | Self::ContextFull => "length",
        }
    }
}

/// The outcome of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationReport {
    pub id: RequestId,
    pub prompt_tokens: usize,
    /// Prompt tokens served from the cache when the request was first
    /// scheduled, by tier.
    pub cached: PrefixMatch,
    /// Generated ids (without the stop token; with the tokens of a stop
    /// string, which were generated).
    pub tokens: Vec<u32>,
    /// The reply's text (without a stop string and what followed it).
    pub text: String,
    pub stop: StopReason,
    /// Time from submission to the first scheduled step.
    pub queued: Duration,
    /// Time from submission to the first sampled token.
    pub ttft: Duration,
    /// Time from the first sampled token to the end.
    pub decode: Duration,
    /// Time spent in the cache manager's bookkeeping for this request
    /// (lookup, allocation, commits, release), not counting copies or the
    /// forward.
    pub bookkeeping: Duration,
    /// Times the request was preempted (its blocks freed and its tokens
    /// recomputed later) to make room for others.
    pub preemptions: u32,
    /// Each step's logits when [`GenerateParams::keep_logits`] was set.
    pub logits: Vec<Vec<f32>>,
}

impl GenerationReport {
    /// Generated tokens per second after the first (0 for one token or less).
    pub fn decode_rate(&self) -> f64 {
        if self.tokens.len() > 1 {
            (self.tokens.len() - 1) as f64 / self.decode.as_secs_f64().max(1e-9)
        } else {
            0.0
        }
    }
}

/// What a request's channel carries: tokens as they are sampled, then
/// exactly one `Done` or `Error`.
#[derive(Debug)]
pub enum Event {
    /// One generated token and the text it completes. `text` is empty while
    /// the end of a character or a possible stop string is held back.
    Token { id: u32, text: String },
    /// The request finished.
    Done(Box<GenerationReport>),
    /// The request failed; everything it held is already released.
    Error(EngineError),
}
