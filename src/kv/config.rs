//! Sizing and policy switches of the KV cache.
//!
//! Owns: [`KvCacheConfig`] and its validation. The engine derives it from the user's settings
//! (block size, device pool size from free memory, host tier in GiB); the manager only sees
//! block counts.
//!
//! Invariants once [`KvCacheConfig::validate`] passed: `block_size` is a power of two in
//! `8..=256`; `1 <= device_blocks < u32::MAX`; `host_blocks < u32::MAX` (block ids are `u32`).
//!
//! Counterpart: vLLM's `CacheConfig` (`block_size`, `num_gpu_blocks`, `enable_prefix_caching`),
//! SGLang's `--hicache-ratio` / `--hicache-write-policy`.

use super::KvError;

/// Smallest allowed block size (tokens).
pub const MIN_BLOCK_SIZE: usize = 8;
/// Largest allowed block size (tokens).
pub const MAX_BLOCK_SIZE: usize = 256;

/// Sizes and policy of one [`KvCacheManager`](super::KvCacheManager).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvCacheConfig {
    /// Tokens per block: a power of two in `8..=256` (default 16).
    pub block_size: usize,
    /// Capacity of the device tier, in blocks (at least 1).
    pub device_blocks: usize,
    /// Capacity of the host tier, in blocks (0: no host tier; evicted blocks are dropped).
    pub host_blocks: usize,
    /// `false`: nothing is ever matched or kept after `free` (to compare against a cold run).
    pub prefix_caching: bool,
    /// `true`: every committed block is copied to host at once, so a later demotion costs nothing.
    pub write_through: bool,
    /// Bytes of K+V of all layers of one block; used for stats only.
    pub bytes_per_block: u64,
}

impl Default for KvCacheConfig {
    fn default() -> Self {
        Self {
            block_size: 16,
            device_blocks: 1024,
            host_blocks: 0,
            prefix_caching: true,
            write_through: false,
            bytes_per_block: 0,
        }
    }
}

impl KvCacheConfig {
    /// Checks the ranges listed in the module docs.
    pub fn validate(&self) -> Result<(), KvError> {
        let bad = |field, value: usize, reason| KvError::InvalidConfig {
            field,
            value: value as u64,
            reason,
        };
        if !self.block_size.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&self.block_size) {
            return Err(bad("block_size", self.block_size, "must be a power of two in 8..=256"));
        }
        if self.device_blocks == 0 {
            return Err(bad("device_blocks", 0, "the device tier needs at least one block"));
        }
        let max = u32::MAX as usize - 1;
        if self.device_blocks > max {
            return Err(bad("device_blocks", self.device_blocks, "block ids are 32-bit"));
        }
        if self.host_blocks > max {
            return Err(bad("host_blocks", self.host_blocks, "block ids are 32-bit"));
        }
        Ok(())
    }

    /// Capacity of `tier`, in blocks.
    pub fn capacity(&self, tier: super::Tier) -> usize {
        match tier {
            super::Tier::Device => self.device_blocks,
            super::Tier::Host => self.host_blocks,
        }
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        let c = KvCacheConfig::default();
        assert_eq!(c.block_size, 16);
        c.validate().unwrap();
        assert_eq!(c.blocks_for(0), 0);
        assert_eq!(c.blocks_for(16), 1);
        assert_eq!(c.blocks_for(17), 2);
    }

    #[test]
    fn rejects_out_of_range_values() {
        for bs in [0, 4, 12, 24, 512] {
            let c = KvCacheConfig {
                block_size: bs,
                ..Default::default()
            };
            assert!(
                matches!(
                    c.validate(),
                    Err(KvError::InvalidConfig {
                        field: "block_size",
                        ..
                    })
                ),
                "{bs}"
            );
        }
        for bs in [8, 16, 32, 64, 128, 256] {
            let c = KvCacheConfig {
                block_size: bs,
                ..Default::default()
            };
            c.validate().unwrap();
        }
        let c = KvCacheConfig {
            device_blocks: 0,
            ..Default::default()
        };
        assert!(matches!(
            c.validate(),
            Err(KvError::InvalidConfig {
                field: "device_blocks",
                ..
            })
        ));
    }
}
