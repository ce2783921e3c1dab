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
use crate::model::grammar::Grammar;
use crate::model::pooling::Pooling;
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
    /// `Some(n)`: each generated token's log-probability under the model (its raw logits,
    /// before penalties and temperature, as vLLM's default), with the `n` most likely tokens
    /// (at most [`MAX_TOP_LOGPROBS`]). OpenAI's `logprobs` / `top_logprobs`.
    pub logprobs: Option<usize>,
    /// What the output must match (JSON, a JSON Schema, a Lark grammar): tokens the grammar does
    /// not allow are never sampled, and the reply ends when the grammar is complete. Compiled
    /// when the request is submitted; one that does not compile is refused then.
    pub grammar: Option<Grammar>,
    /// With a grammar: it applies only after the reply's reasoning (see [`GrammarDelay`]).
    pub grammar_after: Option<GrammarDelay>,
    /// `Some(n)`: each prompt token's log-probability (after the first) given the tokens before
    /// it, with the `n` most likely tokens at its place (vLLM's `prompt_logprobs`; the
    /// completions' `echo` with `logprobs`). Such a request does not read the prefix cache (the
    /// logits of a cached position cost its whole forward again); it fills the cache like any
    /// other. With it, `max_tokens` may be 0: score the prompt, generate nothing.
    pub prompt_logprobs: Option<usize>,
    /// `Some(pooling)`: a sentence embedding of the prompt ([`GenerationReport::embedding`]),
    /// its final rows pooled so, nothing generated (`max_tokens` 0). Such a request reads the
    /// prefix cache only where the pooling allows ([`Pooling::reads_cache`]) and fills it like
    /// any other.
    pub embed: Option<Pooling>,
}

/// When a grammar starts: after a thinking model's reasoning, as vLLM's and llama.cpp's do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrammarDelay {
    /// The grammar applies from the token after the reply first contains this text (the tag
    /// that ends the reasoning); the reply is free until then. Whitespace may come between the
    /// two, [`GrammarDelay::GAP`] bytes at most, as the model writes it.
    pub until: String,
    /// `Some(text)`: after [`GrammarDelay::until`], the grammar waits further for this text,
    /// whatever comes between: harmony's `<|message|>`, after `<|channel|>final` and a
    /// constraint the model may write (` <|constrain|>json`).
    pub then: Option<String>,
    /// `Some(id)`: a model that opens its reasoning itself (token `id`, e.g. Qwen3's `<think>`).
    /// The first token is then one the grammar allows or `id`; only after `id` does the grammar
    /// wait for [`GrammarDelay::until`]. `None`: the prompt opened the reasoning, it always waits.
    pub if_first: Option<u32>,
}

impl GrammarDelay {
    /// The most bytes of whitespace-only tokens that may come between [`GrammarDelay::until`]
    /// and the grammar's first token: the line break a model writes after its reasoning
    /// (Qwen3's and DeepSeek-R1's `</think>\n\n`), which its template renders back the same way.
    pub const GAP: usize = 4;
}

/// The most alternatives [`GenerateParams::logprobs`] reports per token (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// A generated token's log-probability, and the most likely tokens at its step.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    /// The most likely tokens, most likely first, with their log-probabilities.
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    /// Token `id`'s log-probability under `logits` (a log-softmax over all of them) and the
    /// `top` most likely tokens (ties: the lower id first).
    pub fn from_logits(logits: &[f32], id: u32, top: usize) -> Self {
        let max = logits
            .iter()
            .copied()
            .filter(|l| l.is_finite())
            .fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits
            .iter()
            .filter(|l| l.is_finite())
            .map(|&l| f64::from(l - max).exp())
            .sum();
        let log_z = max as f64 + sum.ln();
        let lp = |l: f32| {
            if l.is_finite() {
                (l as f64 - log_z) as f32
            } else {
                f32::NEG_INFINITY
            }
        };
        let mut best: Vec<(u32, f32)> = Vec::with_capacity(top + 1);
        if top > 0 {
            for (i, &l) in logits.iter().enumerate() {
                if !l.is_finite() {
                    continue;
                }
                if best.len() == top && best.last().is_some_and(|&(_, b)| l <= b) {
                    continue;
                }
                let at = best.partition_point(|&(_, b)| b >= l);
                best.insert(at, (i as u32, l));
                best.truncate(top);
            }
        }
        Self {
            id,
            logprob: logits.get(id as usize).map_or(f32::NEG_INFINITY, |&l| lp(l)),
            top: best.into_iter().map(|(i, l)| (i, lp(l))).collect(),
        }
    }
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
            logprobs: None,
            grammar: None,
            grammar_after: None,
            prompt_logprobs: None,
            embed: None,
        }
    }

    /// The prompt's embedding pooled by `pooling`, nothing generated.
    pub fn embedding(pooling: Pooling) -> Self {
        Self {
            embed: Some(pooling),
            ..Self::greedy(0)
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
    /// With [`StopReason::StopString`]: which of the request's stop strings ended the reply.
    pub stop_string: Option<String>,
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
    /// Each generated token's log-probability when [`GenerateParams::logprobs`] was set.
    pub logprobs: Vec<TokenLogprob>,
    /// With [`GenerateParams::prompt_logprobs`]: prompt tokens 1.. (the first has none).
    pub prompt_logprobs: Vec<TokenLogprob>,
    /// With [`GenerateParams::embed`]: the prompt's pooled final rows (not normalized).
    pub embedding: Option<Vec<f32>>,
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
    /// the end of a character or a possible stop string is held back. `logprob`: the token's
    /// log-probability when asked for ([`GenerateParams::logprobs`]); `None` on the last event
    /// that only flushes held-back text.
    Token {
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
        /// On a request's first token, with [`GenerateParams::prompt_logprobs`]: the prompt's.
        prompt_logprobs: Option<Vec<TokenLogprob>>,
    },
    /// The request finished.
    Done(Box<GenerationReport>),
    /// The request failed; everything it held is already released.
    Error(EngineError),
}
