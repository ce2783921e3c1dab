//! OpenAI's wire types: the request fields hearth reads and the JSON it answers with.
//!
//! Owns: the request field structs (read with [`super::body::fields`]; unknown fields are
//! ignored), the response bodies (`chat.completion`, `text_completion`), the stream chunks
//! (`chat.completion.chunk`, `text_completion`), [`Usage`] and [`Meta`] (id, created, model:
//! the same for every chunk of one response). Fields hearth never fills (`logprobs`) are
//! written as `null`, as OpenAI does.
//!
//! Counterpart: vLLM's `entrypoints/openai/protocol.py`; OpenAI's API reference for
//! `/v1/chat/completions` and `/v1/completions`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::{GenerationReport, ParsedReply, SplitPiece, SplitReply, ToolFormat};

use super::tools::{wire_calls, WireToolCall};

pub(crate) use super::logprobs::Logprobs;

/// Fields both completion routes read.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct CommonFields {
    pub model: Option<String>,
    pub max_tokens: Option<usize>,
    /// OpenAI's newer name for `max_tokens`; wins when both are sent.
    pub max_completion_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// vLLM's extension; `-1` or `0` turns it off.
    pub top_k: Option<i64>,
    /// vLLM's extension.
    pub min_p: Option<f32>,
    /// vLLM's extension (hearth's `repeat_penalty`).
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// `{"token id": bias}` (checked in `params.rs`).
    pub logit_bias: Option<Value>,
    pub seed: Option<u64>,
    /// vLLM's extension: keep generating past end-of-sequence tokens, up to `max_tokens`.
    pub ignore_eos: Option<bool>,
    /// A string or a list of strings (checked in `params.rs`).
    pub stop: Option<Value>,
    pub n: Option<u64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// `{"type": "text" | "json_object" | "json_schema", ...}` (read in `structured.rs`).
    pub response_format: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// `/v1/chat/completions`' own field.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatFields {
    pub messages: Vec<WireMessage>,
    /// hearth's extension: save this turn (messages, reply and the K/V cache file) as the
    /// named conversation.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Each generated token's log-probability.
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// With `logprobs`: how many most likely tokens to report beside each (0–20).
    #[serde(default)]
    pub top_logprobs: Option<u64>,
    /// Functions the model may call (read in `tools.rs`).
    #[serde(default)]
    pub tools: Option<Value>,
    /// `none`, `auto`, `required` or a named function (read in `tools.rs`).
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// `false`: at most one call comes back (the first the model wrote), as in vLLM.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Further variables for the chat template (vLLM's and llama.cpp's extension), e.g.
    /// `{"enable_thinking": false}`; an object.
    #[serde(default)]
    pub chat_template_kwargs: Option<Value>,
    /// llama.cpp's extension: `none` keeps a reply's reasoning in `content`; `auto` or
    /// `deepseek` (the default) returns it as `reasoning_content`.
    #[serde(default)]
    pub reasoning_format: Option<Value>,
    /// OpenAI's `minimal`, `low`, `medium` or `high`: the template variable `reasoning_effort`
    /// (gpt-oss's template writes it into its system message), unless `chat_template_kwargs`
    /// sets it.
    #[serde(default)]
    pub reasoning_effort: Option<Value>,
}

/// One message as sent: `content` is a string, a list of parts, or null.
#[derive(Debug, Deserialize)]
pub(crate) struct WireMessage {
    pub role: String,
    #[serde(default)]
    pub content: Value,
    /// An assistant turn's calls (read in `tools.rs`).
    #[serde(default)]
    pub tool_calls: Option<Value>,
    /// A `tool` message: the call it answers.
    #[serde(default)]
    pub tool_call_id: Option<Value>,
    /// A `tool` message: the function's name.
    #[serde(default)]
    pub name: Option<Value>,
    /// An assistant turn's reasoning, sent back apart from its content.
    #[serde(default)]
    pub reasoning_content: Option<Value>,
}

/// `/v1/completions`' own field: a string, a list of one string, a list of
/// token ids or a list of one list of token ids (checked in `completions.rs`).
#[derive(Debug, Deserialize)]
pub(crate) struct CompletionFields {
    pub prompt: Value,
    /// How many most likely tokens to report beside each generated token's log-probability
    /// (0–20); absent or null: none.
    #[serde(default)]
    pub logprobs: Option<u64>,
    /// Put the prompt before the reply, and with `logprobs` the prompt tokens' own
    /// log-probabilities (as vLLM does); `max_tokens` may then be 0.
    #[serde(default)]
    pub echo: Option<bool>,
    /// The text after the gap the reply fills (fill-in-the-middle): `prompt` is the text
    /// before it.
    #[serde(default)]
    pub suffix: Option<String>,
}

/// Token counts of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
    /// For a model that thinks: how many completion tokens were reasoning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct CompletionTokensDetails {
    /// Reply tokens of the reasoning, its tags included.
    pub reasoning_tokens: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct PromptTokensDetails {
    /// Prompt tokens served from the KV cache (any tier).
    pub cached_tokens: usize,
}

impl Usage {
    pub fn of(report: &GenerationReport) -> Self {
        Self {
            prompt_tokens: report.prompt_tokens,
            completion_tokens: report.tokens.len(),
            total_tokens: report.prompt_tokens + report.tokens.len(),
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: report.cached.tokens,
            },
            completion_tokens_details: None,
        }
    }

    /// With `reasoning_tokens` (see [`super::params::Plan::reasoning_tokens`]) reported.
    pub fn with_reasoning(mut self, reasoning_tokens: Option<usize>) -> Self {
        self.completion_tokens_details = reasoning_tokens.map(|reasoning_tokens| CompletionTokensDetails { reasoning_tokens });
        self
    }

    /// The usage of one response of several choices of the same prompt (`n`), `self` the
    /// first's: the prompt (and what of it the cache served) counted once, as vLLM counts it,
    /// the replies' tokens summed.
    pub fn and(mut self, other: Usage) -> Self {
        self.completion_tokens += other.completion_tokens;
        self.total_tokens = self.prompt_tokens + self.completion_tokens;
        self.completion_tokens_details = match (self.completion_tokens_details, other.completion_tokens_details) {
            (None, None) => None,
            (a, b) => Some(CompletionTokensDetails {
                reasoning_tokens: a.map_or(0, |d| d.reasoning_tokens) + b.map_or(0, |d| d.reasoning_tokens),
            }),
        };
        self
    }

    /// The usage of one response of several prompts' choices: every count summed.
    pub fn plus(mut self, other: Usage) -> Self {
        self.prompt_tokens += other.prompt_tokens;
        self.prompt_tokens_details.cached_tokens += other.prompt_tokens_details.cached_tokens;
        self.and(other)
    }

    /// The usage of a response's choices, each `(prompt, usage)` in order (a prompt's choices
    /// together): each prompt counted once ([`Usage::and`]), the prompts summed
    /// ([`Usage::plus`]). `None` for no choices.
    pub fn of_choices(choices: impl IntoIterator<Item = (usize, Usage)>) -> Option<Usage> {
        let mut total: Option<(usize, Usage)> = None;
        for (prompt, usage) in choices {
            total = Some(match total {
                None => (prompt, usage),
                Some((last, t)) if last == prompt => (prompt, t.and(usage)),
                Some((_, t)) => (prompt, t.plus(usage)),
            });
        }
        total.map(|(_, t)| t)
    }
}

/// What every chunk of one response repeats.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Meta {
    /// A fresh response id with `prefix` (`chatcmpl`, `cmpl`), created now.
    pub fn new(prefix: &str, model: &str) -> Self {
        Self {
            id: format!("{prefix}-{:016x}", rand::random::<u64>()),
            created: super::state::unix_now(),
            model: model.to_string(),
        }
    }
}

/// A stream chunk or a whole response: `choices` of either route's shape.
#[derive(Debug, Serialize)]
pub(crate) struct Envelope<C> {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<C>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl<C> Envelope<C> {
    fn new(meta: &Meta, object: &'static str, choices: Vec<C>, usage: Option<Usage>) -> Self {
        Self {
            id: meta.id.clone(),
            object,
            created: meta.created,
            model: meta.model.clone(),
            choices,
            usage,
        }
    }
}

/// A choice of a response or a chunk: its place among the request's choices.
pub(crate) trait Indexed {
    fn set_index(&mut self, index: u32);
}

impl<C: Indexed> Envelope<C> {
    /// This envelope's choices as choice `index` of the request's `n`.
    pub fn at(mut self, index: u32) -> Self {
        for c in &mut self.choices {
            c.set_index(index);
        }
        self
    }

    /// One response of the whole responses of a request's choices, each with the prompt it
    /// answers, in order: their choices numbered from 0, the usage of all
    /// ([`Usage::of_choices`]). `None` for no parts.
    pub fn merge(parts: Vec<(usize, Self)>) -> Option<Self> {
        let usage = Usage::of_choices(parts.iter().filter_map(|(p, e)| Some((*p, e.usage?))));
        let mut parts = parts.into_iter().enumerate();
        let (_, (_, mut whole)) = parts.next()?;
        for (i, (_, part)) in parts {
            let part = part.at(u32::try_from(i).unwrap_or(u32::MAX));
            whole.choices.extend(part.choices);
        }
        whole.usage = usage;
        Some(whole)
    }
}

/// What a chat chunk adds to the assistant's message.
#[derive(Debug, Default, Serialize)]
pub(crate) struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Reasoning (a `<think>` part), apart from the content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<WireToolCall>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ChatChunkChoice {
    pub index: u32,
    pub delta: ChatDelta,
    pub logprobs: Option<Logprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Serialize)]
pub(crate) struct AssistantMessage {
    pub role: &'static str,
    /// The text; `null` when the reply is only tool calls, as OpenAI writes it.
    pub content: Option<String>,
    /// The reply's reasoning (its `<think>` part), when the model wrote one and the request
    /// did not ask for `reasoning_format: none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<WireToolCall>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub logprobs: Option<Logprobs>,
    pub finish_reason: &'static str,
}

/// A `text_completion` choice, whole or one chunk's piece.
#[derive(Debug, Serialize)]
pub(crate) struct TextChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<Logprobs>,
    pub finish_reason: Option<&'static str>,
}

macro_rules! indexed {
    ($($t:ty),*) => {$(
        impl Indexed for $t {
            fn set_index(&mut self, index: u32) {
                self.index = index;
            }
        }
    )*};
}
indexed!(ChatChunkChoice, ChatChoice, TextChoice);

pub(crate) type ChatChunk = Envelope<ChatChunkChoice>;
pub(crate) type ChatCompletion = Envelope<ChatChoice>;
pub(crate) type TextCompletion = Envelope<TextChoice>;

/// The streamed shapes, built alike for both routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Chat,
    Text,
}

/// One streamed chunk of either route.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum Chunk {
    Chat(ChatChunk),
    Text(TextCompletion),
}

impl Chunk {
    /// This chunk as choice `index`'s.
    pub fn at(self, index: u32) -> Self {
        match self {
            Self::Chat(c) => Self::Chat(c.at(index)),
            Self::Text(c) => Self::Text(c.at(index)),
        }
    }
}

impl Kind {
    /// The chunk sent before any token: the chat's `delta.role`.
    pub fn opening(self, meta: &Meta) -> Option<Chunk> {
        match self {
            Self::Chat => Some(chat_chunk(
                meta,
                ChatDelta {
                    role: Some("assistant"),
                    content: Some(String::new()),
                    ..ChatDelta::default()
                },
                None,
                None,
            )),
            Self::Text => None,
        }
    }

    /// A piece of text (with its tokens' `logprobs` when asked for), or the end with
    /// `finish_reason` (and no text).
    pub fn piece(
        self,
        meta: &Meta,
        text: Option<String>,
        logprobs: Option<Logprobs>,
        finish_reason: Option<&'static str>,
    ) -> Chunk {
        match self {
            Self::Chat => chat_chunk(
                meta,
                ChatDelta {
                    content: text,
                    ..ChatDelta::default()
                },
                logprobs,
                finish_reason,
            ),
            Self::Text => Chunk::Text(Envelope::new(
                meta,
                "text_completion",
                vec![TextChoice {
                    index: 0,
                    text: text.unwrap_or_default(),
                    logprobs,
                    finish_reason,
                }],
                None,
            )),
        }
    }

    /// A chat piece split into reasoning and content (with its tokens' `logprobs` when asked
    /// for); a piece with neither still says `content: ""` (a token whose text is held back).
    pub fn split_piece(meta: &Meta, piece: SplitPiece, logprobs: Option<Logprobs>) -> Chunk {
        let reasoning = (!piece.reasoning.is_empty()).then_some(piece.reasoning);
        let content = (!piece.content.is_empty() || reasoning.is_none()).then_some(piece.content);
        let delta = ChatDelta {
            content,
            reasoning_content: reasoning,
            ..ChatDelta::default()
        };
        chat_chunk(meta, delta, logprobs, None)
    }

    /// A chat chunk carrying the reply's tool calls (each with its `index`).
    pub fn calls(meta: &Meta, calls: Vec<WireToolCall>) -> Chunk {
        let delta = ChatDelta {
            tool_calls: calls,
            ..ChatDelta::default()
        };
        chat_chunk(meta, delta, None, None)
    }

    /// The `stream_options.include_usage` chunk: no choices, the usage.
    pub fn usage(self, meta: &Meta, usage: Usage) -> Chunk {
        match self {
            Self::Chat => Chunk::Chat(Envelope::new(meta, "chat.completion.chunk", Vec::new(), Some(usage))),
            Self::Text => Chunk::Text(Envelope::new(meta, "text_completion", Vec::new(), Some(usage))),
        }
    }
}

/// One `chat.completion.chunk` with one choice.
fn chat_chunk(
    meta: &Meta,
    delta: ChatDelta,
    logprobs: Option<Logprobs>,
    finish_reason: Option<&'static str>,
) -> Chunk {
    let choice = ChatChunkChoice {
        index: 0,
        delta,
        logprobs,
        finish_reason,
    };
    Chunk::Chat(Envelope::new(meta, "chat.completion.chunk", vec![choice], None))
}

/// The whole `chat.completion` for a finished request; `reply`: its text split into reasoning
/// and content; `parsed`: the content split into text and tool calls, with the format they
/// were read in, when the request offered tools and the reply made calls.
pub(crate) fn chat_completion(
    meta: &Meta,
    report: &GenerationReport,
    reply: SplitReply,
    logprobs: Option<Logprobs>,
    parsed: Option<(ToolFormat, ParsedReply)>,
    reasoning_tokens: Option<usize>,
) -> ChatCompletion {
    let (content, tool_calls, finish_reason) = match parsed {
        Some((format, p)) if !p.calls.is_empty() => (
            (!p.content.is_empty()).then_some(p.content),
            wire_calls(p.calls, false, format),
            "tool_calls",
        ),
        _ => (Some(reply.content), Vec::new(), report.stop.finish_reason()),
    };
    Envelope::new(
        meta,
        "chat.completion",
        vec![ChatChoice {
            index: 0,
            message: AssistantMessage {
                role: "assistant",
                content,
                reasoning_content: reply.reasoning,
                tool_calls,
            },
            logprobs,
            finish_reason,
        }],
        Some(Usage::of(report).with_reasoning(reasoning_tokens)),
    )
}

/// The whole `text_completion` for a finished request.
pub(crate) fn text_completion(
    meta: &Meta,
    report: &GenerationReport,
    logprobs: Option<Logprobs>,
    echo: Option<&str>,
) -> TextCompletion {
    Envelope::new(
        meta,
        "text_completion",
        vec![TextChoice {
            index: 0,
            text: format!("{}{}", echo.unwrap_or(""), report.text),
            logprobs,
            finish_reason: Some(report.stop.finish_reason()),
        }],
        Some(Usage::of(report)),
    )
}

/// `GET /v1/models`.
#[derive(Debug, Serialize)]
pub(crate) struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    /// The context length in tokens (prompt plus reply), as vLLM reports it.
    pub max_model_len: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt: usize, cached: usize, completion: usize, reasoning: Option<usize>) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            prompt_tokens_details: PromptTokensDetails { cached_tokens: cached },
            completion_tokens_details: reasoning.map(|reasoning_tokens| CompletionTokensDetails { reasoning_tokens }),
        }
    }

    #[test]
    fn each_prompt_counts_once_and_the_replies_all() {
        assert_eq!(Usage::of_choices([]), None);
        let choices = [
            (0, usage(10, 0, 3, None)),
            (0, usage(10, 8, 4, Some(2))),
            (1, usage(20, 16, 5, None)),
            (1, usage(20, 16, 6, None)),
        ];
        // Prompt 0 as its first choice found it (nothing cached), prompt 1 likewise (16).
        assert_eq!(Usage::of_choices(choices), Some(usage(30, 16, 18, Some(2))));
        assert_eq!(Usage::of_choices([choices[2]]), Some(choices[2].1));
    }
}
