//! hearth: run a quantized LLM locally and keep every conversation's KV cache warm.
//!
//! The crate is layered; imports point down this list, never up
//! (see `docs/architecture.md`):
//!
//! | module   | owns |
//! |----------|------|
//! | [`config`] | settings from TOML + CLI, app paths |
//! | [`kv`]     | pure KV-cache bookkeeping: block pools per tier, the prefix trie, the cache manager |
//! | [`ops`]    | attention over a [`ops::KvStore`], the K/V interface the forward writes and reads through |
//! | [`model`]  | GGUF loading, hub download, tokenizer, chat template, the transformer forward, sampling |
//! | [`runtime`] | the memory behind block ids (device and host tiers) and the copies between them |
//! | [`persist`] | conversation files, cache files (format, checksums, atomic writes), the disk tier index |
//! | [`engine`] | turning a prompt into a stream of tokens (the request loop) |
//! | `gui`    | the desktop app (feature `gui`): the chat window, conversations, the cache panel |
//! | [`server`] | `hearth --headless`: the OpenAI-compatible HTTP server over the engine |
//! | [`bench`](mod@bench)  | `hearth bench`: our forward against candle-transformers on the same file |
//!
//! The forward ([`model::Transformer::forward`]) never owns a KV cache: it writes new
//! K/V and reads past K/V through [`ops::KvStore`], which the paged block pool
//! implements; [`ops::ContiguousKv`] is the simple store used until then and in tests.

pub mod bench;
pub mod config;
pub mod engine;
#[cfg(feature = "gui")]
pub mod gui;
pub mod kv;
pub mod model;
pub mod ops;
pub mod persist;
pub mod runtime;
pub mod server;
