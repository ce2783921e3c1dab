//! Cache statistics: the one struct the GUI, the server and benchmarks read.
//!
//! Owns: [`CacheStats`], [`TierStats`] (snapshots, serializable) and the manager's running
//! [`Counters`].
//!
//! Invariant: per tier, `free_blocks + cached_blocks + referenced_blocks == capacity_blocks`.
//! `cached_blocks` counts cached blocks that no sequence references (evictable, content kept);
//! a referenced block is counted as referenced whether or not it is also in the trie.
//!
//! Counterpart: vLLM's `PrefixCacheStats` / `KVCacheManager.usage`, SGLang's `/metrics`
//! `cache_hit_rate`.

/// Block counts of one tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TierStats {
    /// All blocks of the tier.
    pub capacity_blocks: usize,
    /// Blocks in use: device blocks of running sequences, host blocks pinned by a pending promotion.
    pub referenced_blocks: usize,
    /// Unreferenced blocks holding cached K/V (evictable, LRU first).
    pub cached_blocks: usize,
    /// Blocks holding nothing.
    pub free_blocks: usize,
    /// K+V bytes of one block (all layers).
    pub bytes_per_block: u64,
}

impl TierStats {
    fn bytes(&self, blocks: usize) -> u64 {
        blocks as u64 * self.bytes_per_block
    }
    pub fn capacity_bytes(&self) -> u64 {
        self.bytes(self.capacity_blocks)
    }
    pub fn referenced_bytes(&self) -> u64 {
        self.bytes(self.referenced_blocks)
    }
    pub fn cached_bytes(&self) -> u64 {
        self.bytes(self.cached_blocks)
    }
    pub fn free_bytes(&self) -> u64 {
        self.bytes(self.free_blocks)
    }
    /// Blocks that can be handed out without failing: free plus cached-unreferenced.
    pub fn available_blocks(&self) -> usize {
        self.free_blocks + self.cached_blocks
    }
}

/// A snapshot of the cache: occupancy per tier and counters since the manager was created.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Tokens per block.
    pub block_size: usize,
    pub device: TierStats,
    pub host: TierStats,
    /// Full blocks in the trie (each on device, host or both).
    pub trie_blocks: usize,
    /// Sequences started and not yet freed.
    pub running_seqs: usize,
    /// Successful `start` calls.
    pub lookups: u64,
    /// Prompt tokens of those calls.
    pub prompt_tokens: u64,
    /// Prompt tokens served from blocks already on device.
    pub hit_tokens_device: u64,
    /// Prompt tokens served from the host tier (promoted).
    pub hit_tokens_host: u64,
    /// Host → device block copies planned.
    pub promotions: u64,
    /// Device → host copies planned to evict a device block that had no host copy.
    pub demotions: u64,
    /// Device → host copies planned at commit time by `write_through`.
    pub write_through_copies: u64,
    /// Cached device copies dropped (their node had a host copy, or could not get one).
    pub evictions_device: u64,
    /// Cached host copies dropped.
    pub evictions_host: u64,
    /// Blocks imported from outside the RAM tiers (the disk tier's cache files).
    pub imported_blocks: u64,
}

impl CacheStats {
    /// Prompt tokens served from the cache, any tier.
    pub fn hit_tokens(&self) -> u64 {
        self.hit_tokens_device + self.hit_tokens_host
    }

    /// `hit_tokens / prompt_tokens` (0 before the first lookup).
    pub fn hit_rate(&self) -> f64 {
        if self.prompt_tokens == 0 {
            0.0
        } else {
            self.hit_tokens() as f64 / self.prompt_tokens as f64
        }
    }
}

/// The manager's running counters (the non-occupancy half of [`CacheStats`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters {
    pub(crate) lookups: u64,
    pub(crate) prompt_tokens: u64,
    pub(crate) hit_tokens_device: u64,
    pub(crate) hit_tokens_host: u64,
    pub(crate) promotions: u64,
    pub(crate) demotions: u64,
    pub(crate) write_through_copies: u64,
    pub(crate) evictions_device: u64,
    pub(crate) evictions_host: u64,
    pub(crate) imported_blocks: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_rates() {
        let t = TierStats {
            capacity_blocks: 10,
            referenced_blocks: 2,
            cached_blocks: 3,
            free_blocks: 5,
            bytes_per_block: 100,
        };
        assert_eq!(t.capacity_bytes(), 1000);
        assert_eq!(t.referenced_bytes(), 200);
        assert_eq!(t.cached_bytes(), 300);
        assert_eq!(t.free_bytes(), 500);
        assert_eq!(t.available_blocks(), 8);
        let mut s = CacheStats::default();
        assert_eq!(s.hit_rate(), 0.0);
        s.prompt_tokens = 10;
        s.hit_tokens_device = 4;
        s.hit_tokens_host = 1;
        assert_eq!(s.hit_tokens(), 5);
        assert!((s.hit_rate() - 0.5).abs() < 1e-12);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"hit_tokens_host\":1"));
    }
}
