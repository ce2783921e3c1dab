//! Errors of the `kv` layer.
//!
//! Owns: [`KvError`]. Every variant is structured so the engine can act on it without parsing
//! text: [`KvError::NoFreeBlocks`] in particular is the engine's signal to queue or preempt, and
//! is returned before anything changed (every manager operation is all-or-nothing).
//!
//! Counterpart: vLLM v1's `KVCacheManager.allocate_slots` returning `None` when the pool is short.

use super::{SeqId, Tier};

/// What a [`KvCacheManager`](super::KvCacheManager) operation can fail with. None of them leaves
/// the manager changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// A setting of [`KvCacheConfig`](super::KvCacheConfig) is out of range.
    #[error("invalid KV cache setting {field} = {value}: {reason}")]
    InvalidConfig {
        field: &'static str,
        value: u64,
        reason: &'static str,
    },
    /// The tier has fewer allocatable blocks (free or cached-unreferenced) than the request needs.
    #[error("not enough free {tier} blocks: {needed} needed, {available} available")]
    NoFreeBlocks {
        tier: Tier,
        needed: usize,
        available: usize,
    },
    /// The sequence id is not running.
    #[error("unknown sequence {0}")]
    UnknownSeq(SeqId),
    /// `start` was called for a sequence id that is already running.
    #[error("sequence {0} is already running")]
    DuplicateSeq(SeqId),
    /// `start` was called with no tokens.
    #[error("sequence {0}: the prompt is empty")]
    EmptyPrompt(SeqId),
    /// `commit` was given more tokens than `start`/`allocate` reserved room for.
    #[error("sequence {seq}: committing {adding} tokens after {committed} exceeds the {reserved} reserved")]
    CommitOverflow {
        seq: SeqId,
        reserved: usize,
        committed: usize,
        adding: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_numbers() {
        let e = KvError::NoFreeBlocks {
            tier: Tier::Device,
            needed: 3,
            available: 1,
        };
        assert_eq!(e.to_string(), "not enough free device blocks: 3 needed, 1 available");
        assert_eq!(KvError::UnknownSeq(SeqId(4)).to_string(), "unknown sequence seq 4");
    }
}
