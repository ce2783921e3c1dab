//! Pure KV-cache bookkeeping: which block ids hold which tokens' K/V, in two tiers, and which
//! copies the runtime must make. No candle, no tensors, no I/O: testable anywhere.
//!
//! The pieces, bottom up:
//!
//! - [`ids`](BlockId): [`BlockId`], [`SeqId`], [`BlockHash`], [`Tier`];
//! - [`hash_block`]: the stable block hash chain (part of the cache file format);
//! - [`KvCacheConfig`]: block size, tier capacities, policy switches;
//! - `queue` / `pool`: per tier, a `BlockPool` of reference-counted blocks with an O(1) LRU free
//!   queue; freed blocks keep their content until handed out again (lazy eviction);
//! - `trie`: the `PrefixTrie`, one node per cached full block; a node knows its device copy and
//!   its host copy; hits are confirmed by comparing tokens;
//! - [`KvCacheManager`]: `start` / `allocate` / `commit` / `free` for the engine, each returning a
//!   [`CopyPlan`] (demote device → host, promote host → device) for the runtime; `tiers.rs` holds
//!   its eviction and demotion policy, `invariants.rs` its self-check;
//! - `import.rs`: [`KvCacheManager::import`], how blocks read from a cache file (the disk tier)
//!   enter the trie as cached blocks;
//! - [`CacheStats`]: occupancy per tier and hit / copy / eviction counters;
//! - `testkit`: a fake runtime that executes plans over token ids, for tests (feature
//!   `testkit`).
//!
//! The runtime owns the memory behind the ids and executes the plans (see [`CopyPlan`] for the
//! ordering contract). The manager never touches K/V.
//!
//! Counterparts: vLLM v1 (`BlockPool`, `FreeKVCacheBlockQueue`, `KVCacheManager`) and SGLang
//! (`RadixCache`, `HiRadixCache`).

mod config;
mod error;
mod hash;
mod ids;
mod import;
mod invariants;
mod manager;
mod plan;
mod pool;
mod queue;
mod seq;
mod stats;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod tiers;
mod trie;

pub use config::{KvCacheConfig, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};
pub use error::KvError;
pub use hash::{hash_block, hash_chain, BlockHasher, ROOT_SEED};
pub use ids::{BlockHash, BlockId, SeqId, Tier};
pub use import::ImportPlan;
pub use manager::KvCacheManager;
pub use plan::{CopyPlan, PrefixMatch, SeqStart};
pub use stats::{CacheStats, TierStats};

pub(crate) use pool::BlockPool;
pub(crate) use queue::FreeQueue;
