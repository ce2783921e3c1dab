//! Conversations and cache files on disk: the third tier of the KV cache.
//!
//! Owns, bottom up:
//!
//! - [`ConversationId`] (`ids.rs`): the validated name of a conversation and its files;
//! - `atomic.rs`: [`AtomicFile`] / [`write_atomic`] (temp file, fsync, rename) and the
//!   [`Faults`] hook tests fail writes with;
//! - `format.rs`: the cache file format ([`CacheHeader`], [`KvLayout`], [`Fingerprint`]),
//!   documented byte by byte there and in README;
//! - `cache_file.rs`: [`CacheFile`] (header first, each block checked on read) and
//!   [`write_cache_file`];
//! - `index.rs`: [`DiskIndex`], the disk tier's block-hash index built from headers alone, and
//!   the disk budget's LRU;
//! - `conversation.rs`: [`ConversationStore`], one JSON file per conversation;
//! - `worker.rs`: [`PersistWorker`], the background writer;
//! - `inspect.rs`: [`inspect`] / [`prune_plan`] for `hearth cache list | verify | prune`.
//!
//! The layout of the data directory:
//!
//! ```text
//! <data dir>/conversations/<id>.json   messages, settings, timestamps (never deleted by hearth)
//! <data dir>/cache/<id>.hkv            K/V blocks of the conversation's token history
//! ```
//!
//! Invariants: nothing is written in place; a cache file is used only if its fingerprint, header
//! checksum and each block's checksum match, and only its blocks before the first damaged one;
//! a conversation's text never depends on its cache file.
//!
//! Counterpart: LMCache's disk backend and SGLang's HiCache storage tier (L3), llama.cpp's slot
//! save/restore files.

mod atomic;
mod cache_file;
mod conversation;
mod error;
mod fingerprint;
mod format;
mod ids;
mod index;
mod inspect;
mod temps;
mod worker;

pub use atomic::{write_atomic, AtomicFile, Faults, WriteStep};
pub use cache_file::{write_cache_file, CacheFile, CacheWrite, Written, CACHE_EXT};
pub use conversation::{
    Conversation, ConversationSettings, ConversationStore, ConversationSummary, Kept, Message, Role,
    UnsavedConversation, CONVERSATION_FORMAT, NEW_CHAT_TITLE,
};
pub use error::PersistError;
pub use fingerprint::{fingerprint, kv_layout, KV_SEMANTICS_VERSION};
pub use format::{CacheHeader, Fingerprint, KvDtype, KvLayout, FORMAT_VERSION};
pub use ids::{ConversationId, MAX_ID_LEN};
pub use index::{cache_path, common_blocks, list_cache_files, DiskHit, DiskIndex, IndexedFile, ScanReport};
pub use inspect::{inspect, prune, prune_plan, verify, CacheEntry, EntryStatus};
pub use temps::{remove_stale_temps, temp_files, TempFile, TempSweep};
#[doc(hidden)]
pub use worker::lock as worker_lock;
pub use worker::{title_from, AfterSave, CacheJob, DiskStats, PersistWorker, TurnText, WorkerContext};

/// Where conversation files live under the data directory.
pub fn conversations_dir(data_dir: &std::path::Path) -> std::path::PathBuf {
    data_dir.join("conversations")
}

/// Where cache files live under the data directory.
pub fn cache_dir(data_dir: &std::path::Path) -> std::path::PathBuf {
    data_dir.join("cache")
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
