//! What the manager hands back: copy plans for the runtime and lookup results for the engine.
//!
//! Owns: [`CopyPlan`], [`PrefixMatch`], [`SeqStart`].
//!
//! Contract with the runtime: a plan is executed before the next forward and before
//! [`free`](super::KvCacheManager::free) of a sequence it was returned for: first every `demote`
//! (device `src` → host `dst`), then every `promote` (host `src` → device `dst`), each list in
//! order. Plans returned one after another may be merged with [`CopyPlan::extend`] and executed as
//! one: the manager keeps the host source of every promotion pinned while the promoting sequence
//! runs, so no later demotion can overwrite it before it is read, and demoting before promoting is
//! exactly the order a device block evicted and reused within one operation needs.
//!
//! Counterpart: vLLM's `blocks_to_swap_out` / `blocks_to_swap_in`, SGLang's
//! `HiCacheController.write` / `load` queues.

use super::BlockId;

/// Copies the runtime must make before the next forward: all `demote` (device `src` → host `dst`)
/// first, then all `promote` (host `src` → device `dst`).
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct CopyPlan {
    /// `(device src, host dst)` pairs.
    pub demote: Vec<(BlockId, BlockId)>,
    /// `(host src, device dst)` pairs.
    pub promote: Vec<(BlockId, BlockId)>,
}

impl CopyPlan {
    /// No copies to make.
    pub fn is_empty(&self) -> bool {
        self.demote.is_empty() && self.promote.is_empty()
    }

    /// Appends `other`'s copies after this plan's, to be executed as one plan (see the module docs
    /// for why that is equivalent to executing them in turn).
    pub fn extend(&mut self, other: CopyPlan) {
        self.demote.extend(other.demote);
        self.promote.extend(other.promote);
    }

    /// Number of block copies in the plan.
    pub fn len(&self) -> usize {
        self.demote.len() + self.promote.len()
    }
}

/// The longest cached prefix of a prompt, in tokens, by the tier each block is served from.
///
/// `tokens` is a multiple of the block size and at most `prompt.len() - 1`: the last prompt token
/// is always recomputed so the forward has its logits.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PrefixMatch {
    /// All cached tokens: `device_tokens + host_tokens`.
    pub tokens: usize,
    /// Tokens in blocks with a device copy (no copy needed).
    pub device_tokens: usize,
    /// Tokens in blocks only on the host tier (promoted to device before the prefill).
    pub host_tokens: usize,
    /// Of `host_tokens`, those just read from a cache file (the disk tier). The manager never
    /// sets this; the engine does, as it does the reading.
    pub disk_tokens: usize,
}

/// What [`KvCacheManager::start`](super::KvCacheManager::start) reports for a new sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqStart {
    /// Prompt tokens whose K/V is already in the sequence's blocks (once `plan` ran): the prefill
    /// computes `prompt[cached_tokens..]` and commits exactly those tokens.
    pub cached_tokens: usize,
    /// Prompt tokens whose K/V blocks the cache holds (device or host), whether or not the
    /// prefix may end there: more than `cached_tokens` where `start_at`'s rule stopped it
    /// earlier (a recurrent model with no copy of its state at that block).
    pub matched_tokens: usize,
    /// The cache hit, by tier.
    pub hit: PrefixMatch,
    /// Promotions of host hits (and demotions of blocks evicted to make room).
    pub plan: CopyPlan,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extend_keeps_order_per_list() {
        let mut a = CopyPlan {
            demote: vec![(BlockId(1), BlockId(2))],
            promote: vec![(BlockId(3), BlockId(4))],
        };
        assert!(!a.is_empty());
        a.extend(CopyPlan {
            demote: vec![(BlockId(5), BlockId(6))],
            promote: vec![],
        });
        assert_eq!(a.demote, vec![(BlockId(1), BlockId(2)), (BlockId(5), BlockId(6))]);
        assert_eq!(a.promote, vec![(BlockId(3), BlockId(4))]);
        assert_eq!(a.len(), 3);
        assert!(CopyPlan::default().is_empty());
    }
}
