//! Copies of recurrent states at block boundaries: what lets a model with recurrent layers
//! (Qwen3.5's gated delta nets) take a cached prefix.
//!
//! Owns: [`StateCache`], copies of [`RecurrentState`]s keyed by the [`BlockHash`] of the block
//! that ends where each was taken (a block hash names its whole prefix), least recently used
//! dropped first beyond a byte budget; and [`capture_point`], where in a chunk to take one.
//!
//! A recurrent layer's state after `n` tokens cannot be rebuilt from K/V blocks: it is what
//! those `n` tokens left, as one value. So for such a model a cached prefix may end only at a
//! block whose state the cache holds ([`StateCache::contains`] is the cache manager's rule, see
//! `KvCacheManager::start_at`): the attention layers' K/V comes from the blocks, the recurrent
//! layers' state from here. A running sequence takes a copy at the last block boundary of each
//! chunk it runs (its latest, replacing the one before); the copy enters this cache when its
//! prompt is done (a resent prompt, a shared one) and when the sequence ends (the next turn of
//! the chat, an agent's next request, which resend it all). A prompt whose K/V blocks the cache
//! holds further than any copy (a system prompt another conversation began with, a chat edited
//! at an earlier message) computes from the last copy, or from the start, but ends a chunk
//! where the shared blocks end and keeps the copy taken there at once: the next prompt sharing
//! that prefix starts from it (the second prompt marks a shared prefix, the third hits). Without
//! a copy a request computes every token, as without a cache: never a wrong answer, only a
//! slower one.
//!
//! Invariants: a copy is keyed by the hash of the block ending exactly where it was taken; the
//! bytes held never exceed the budget, except that the newest copy is always kept.
//!
//! Counterpart: SGLang's `MambaRadixCache` (states on some radix nodes, evicted apart from
//! the K/V), vLLM's prefix caching for hybrid models (a state per cached block, "align" mode).

use std::collections::HashMap;

use crate::kv::BlockHash;
use crate::model::RecurrentState;

/// Copies of recurrent states by the hash of the block they end at.
#[derive(Debug)]
pub struct StateCache {
    entries: HashMap<BlockHash, (RecurrentState, u64)>,
    bytes: usize,
    budget: usize,
    tick: u64,
}

impl StateCache {
    /// An empty cache holding at most `budget` bytes of states (and always the newest one).
    pub fn new(budget: usize) -> Self {
        Self {
            entries: HashMap::new(),
            bytes: 0,
            budget,
            tick: 0,
        }
    }

    /// Whether a state ends at the block `hash`.
    pub fn contains(&self, hash: BlockHash) -> bool {
        self.entries.contains_key(&hash)
    }

    /// A copy of the state that ends at the block `hash`, marked as just used.
    pub fn get(&mut self, hash: BlockHash) -> Option<RecurrentState> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(&hash).map(|(s, used)| {
            *used = tick;
            s.clone()
        })
    }

    /// Keeps `state` as the one ending at the block `hash` (replacing any there), then drops
    /// the least recently used others while over budget.
    pub fn insert(&mut self, hash: BlockHash, state: RecurrentState) {
        self.tick += 1;
        self.bytes += state.bytes();
        if let Some((old, _)) = self.entries.insert(hash, (state, self.tick)) {
            self.bytes -= old.bytes();
        }
        while self.bytes > self.budget && self.entries.len() > 1 {
            let Some((&oldest, _)) = self.entries.iter().filter(|(h, _)| **h != hash).min_by_key(|(_, (_, used))| *used)
            else {
                break;
            };
            if let Some((s, _)) = self.entries.remove(&oldest) {
                self.bytes -= s.bytes();
            }
        }
    }

    /// How many states it holds, and their bytes.
    pub fn usage(&self) -> (usize, usize) {
        (self.entries.len(), self.bytes)
    }

    /// Its figures for the engine's stats.
    pub fn stats(&self) -> super::stats::StateCacheStats {
        super::stats::StateCacheStats {
            copies: self.entries.len(),
            bytes: self.bytes as u64,
            budget_bytes: self.budget as u64,
        }
    }
}

/// The rule for where a cached prefix may end (`KvCacheManager::start_at`, `peek_at`): at any
/// block for a model without recurrent layers (no `cache`), else only at a block whose state
/// `cache` holds.
pub fn may_end(cache: Option<&StateCache>, hash: BlockHash) -> bool {
    cache.is_none_or(|c| c.contains(hash))
}

/// Where to take a copy in a chunk of `n` tokens after `computed`: after the last of them that
/// ends a block of `block_size` (as a count of the chunk's tokens), if any does.
pub fn capture_point(computed: usize, n: usize, block_size: usize) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let boundary = (computed + n) / block_size * block_size;
    (boundary > computed).then(|| boundary - computed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(fill: f32) -> RecurrentState {
        RecurrentState::from_floats(&[[2, 4]], &[fill; 6]).unwrap()
    }

    #[test]
    fn the_least_recently_used_state_goes_first_and_the_newest_stays() {
        let one = state(1.0).bytes();
        let mut cache = StateCache::new(2 * one);
        cache.insert(BlockHash(1), state(1.0));
        cache.insert(BlockHash(2), state(2.0));
        assert!(cache.get(BlockHash(1)).is_some()); // 1 is now newer than 2
        cache.insert(BlockHash(3), state(3.0));
        assert!(cache.contains(BlockHash(1)) && cache.contains(BlockHash(3)) && !cache.contains(BlockHash(2)));
        assert_eq!(cache.usage(), (2, 2 * one));
        assert_eq!(cache.get(BlockHash(3)), Some(state(3.0)));
        // A budget below one state still keeps the newest.
        let mut tight = StateCache::new(1);
        tight.insert(BlockHash(1), state(1.0));
        tight.insert(BlockHash(2), state(2.0));
        assert_eq!(tight.usage(), (1, one));
        assert!(tight.contains(BlockHash(2)));
        // Replacing a state counts its bytes once.
        tight.insert(BlockHash(2), state(5.0));
        assert_eq!(tight.usage(), (1, one));
    }

    #[test]
    fn a_copy_is_taken_at_the_last_block_boundary_of_a_chunk() {
        assert_eq!(capture_point(0, 40, 16), Some(32));
        assert_eq!(capture_point(10, 6, 16), Some(6));
        assert_eq!(capture_point(16, 1, 16), None);
        assert_eq!(capture_point(31, 1, 16), Some(1));
        assert_eq!(capture_point(0, 15, 16), None);
    }
}
