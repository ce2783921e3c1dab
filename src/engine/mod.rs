//! Turning prompts into streams of tokens, for many requests at once, over the shared KV cache.
//!
//! The pieces:
//!
//! - [`Engine`] (`core.rs`) owns the model, the [`crate::kv::KvCacheManager`] and the
//!   [`crate::runtime::KvMemory`] behind it. [`Engine::step`] asks the [`Scheduler`] what to
//!   run, runs every scheduled request in one batched forward (decodes and prompt chunks packed
//!   together), samples, commits full blocks into the prefix trie and sends each request its
//!   events.
//! - [`Scheduler`] (`scheduler.rs`): continuous batching with chunked prefill under a token
//!   budget; admission looks up the cached prefix (host hits are promoted); when blocks run out
//!   the newest running request is preempted (its blocks freed, its tokens recomputed later,
//!   mostly from the cache).
//! - `sequence.rs`: one request's state (tokens, sampler, detokenizer, stop strings).
//! - [`EngineHandle`] (`handle.rs`): the engine thread and the cloneable handle front-ends
//!   hold; [`RequestStream`] carries one request's [`Event`]s; dropping it cancels the request.
//! - `conversations.rs`: the conversation operations (list, create, rename, system prompt,
//!   delete, send, regenerate, edit-and-resend) as `EngineHandle` methods, for every front-end.
//! - [`launch`] (`launch.rs`): the one start-up sequence (model resolved and loaded, cache
//!   sized, disk tier opened, engine thread spawned) every front-end uses.
//! - [`EngineStats`] (`stats.rs`): cache, queue, request counters, latency histograms.
//!
//! Invariants: whatever way a request ends (finished, failed, cancelled, its consumer gone,
//! preempted), its blocks are released; a request's tokens are the same whether it ran alone or
//! batched with others, preempted or not (greedy), and with or without the cache.
//!
//! Counterpart: vLLM v1's `EngineCore` (`step`), `Scheduler` (`schedule` /
//! `update_from_output`) and `AsyncLLM`.

mod conversations;
mod core;
mod disk;
mod error;
mod handle;
mod launch;
mod request;
mod scheduler;
mod sequence;
mod states;
mod stats;
mod stop;

pub use self::core::Engine;
pub use disk::DiskSettings;
pub use error::{EngineError, ErrorKind};
pub use handle::{EngineHandle, EventSender, QueueTicket, RequestStream, Submission};
pub use launch::{launch, LaunchProgress, LaunchStage, LoadMeter};
pub use request::{
    Event, GenerateParams, GenerateRequest, GenerationReport, GrammarDelay, RequestId, SaveTo, StopReason, TokenLogprob,
    MAX_TOP_LOGPROBS,
};
pub use scheduler::Scheduler;
pub use states::StateCache;
pub use stats::{EngineStats, Histogram, StateCacheStats, RequestCounters, TOKENS_PER_SECOND_BUCKETS, TTFT_BUCKETS};

// The data front-ends show and send, re-exported so that `gui` and `server` need nothing but
// `engine` and `config` (tests/code_rules.rs checks it).
pub use crate::kv::{PrefixMatch, TierStats};
pub use crate::model::chat::tools::{ParsedCall, ParsedReply, Tool, ToolFormat, ToolStream};
pub use crate::model::chat::ListMarks;
pub use crate::model::chat::reasoning::{Reasoning, ReasoningStream, Section, SplitPiece, SplitReply, ThinkTags};
pub use crate::model::chat::{check_kwargs, rfc3339, Message, Role, TemplateKwargs, ToolCall};
pub use crate::model::grammar::{Grammar, GrammarError};
pub use crate::model::infill::{infill_ids, Infill};
pub use crate::model::pooling::{normalize, Pooling};
pub use crate::model::source::{Cancel, DownloadProgress};
pub use crate::model::{ChatPrompt, ModelError, ModelInfo, ModelPurpose};
pub use crate::persist::{Conversation, ConversationId, ConversationSettings, ConversationSummary, NEW_CHAT_TITLE};
