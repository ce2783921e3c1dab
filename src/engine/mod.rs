//! Turning prompts into streams of tokens, over the shared KV cache.
//!
//! [`Engine`] owns the model, the [`crate::kv::KvCacheManager`] and the
//! [`crate::runtime::KvMemory`] behind it. For each request it asks the
//! manager for the longest cached prefix (copying host hits back to the
//! device tier), prefills only the rest through the paged K/V store, then
//! decodes token by token, committing every full block into the prefix trie
//! (prompt and generated tokens alike) so the next turn of a chat hits. For
//! now one request runs at a time on the caller's thread; the engine thread
//! with a queue and continuous batching comes with the server.
//!
//! Invariant: a request's blocks are released when it ends, whether it
//! finished, failed or its consumer went away.
//!
//! Counterpart: vLLM's `LLMEngine.step` / `Scheduler` for a single request.

mod error;
mod generate;

pub use error::EngineError;
pub use generate::{Engine, GenerateParams, GenerationReport, StopReason};
