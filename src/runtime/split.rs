//! How the device's memory is split between the model, the KV cache and the
//! rest: the figures behind the GUI's VRAM bar and `/metrics`.

use crate::kv::TierStats;

/// One device's memory, in bytes; the parts add up to `total` (unless the
/// operating system's figures moved underneath, when `other` is clamped at 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MemorySplit {
    /// `"cuda"` (VRAM) or `"cpu"` (RAM).
    pub device: &'static str,
    pub total: u64,
    pub weights: u64,
    /// KV blocks referenced by running requests.
    pub kv_used: u64,
    /// KV blocks holding cached prefixes, evictable.
    pub kv_cached: u64,
    /// KV blocks holding nothing. In RAM they are reserved but not yet
    /// committed, so they are counted here and not in `free`.
    pub kv_free: u64,
    /// Everything else in use: the CUDA context and activations on a GPU;
    /// the rest of the system on the CPU.
    pub other: u64,
    pub free: u64,
}

impl MemorySplit {
    /// The split for a device with `total` bytes of which the system reports
    /// `reported_free` free, holding `weights` bytes of weights and the
    /// device tier `kv`. `pool_reserved_lazily`: the pool's untouched blocks
    /// are still counted free by the system (RAM), not taken (VRAM).
    pub fn new(
        device: &'static str,
        total: u64,
        reported_free: u64,
        weights: u64,
        kv: &TierStats,
        pool_reserved_lazily: bool,
    ) -> Self {
        let (kv_used, kv_cached, kv_free) = (kv.referenced_bytes(), kv.cached_bytes(), kv.free_bytes());
        let free = if pool_reserved_lazily {
            reported_free.saturating_sub(kv_free)
        } else {
            reported_free
        };
        let other = total.saturating_sub(free + weights + kv_used + kv_cached + kv_free);
        Self {
            device,
            total,
            weights,
            kv_used,
            kv_cached,
            kv_free,
            other,
            free,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(referenced: usize, cached: usize, free: usize) -> TierStats {
        TierStats {
            capacity_blocks: referenced + cached + free,
            referenced_blocks: referenced,
            cached_blocks: cached,
            free_blocks: free,
            bytes_per_block: 100,
        }
    }

    #[test]
    fn parts_add_up_for_vram_and_ram() {
        let kv = tier(2, 3, 5);
        let v = MemorySplit::new("cuda", 10_000, 4_000, 3_000, &kv, false);
        assert_eq!((v.kv_used, v.kv_cached, v.kv_free, v.other), (200, 300, 500, 2_000));
        let r = MemorySplit::new("cpu", 10_000, 4_000, 3_000, &kv, true);
        assert_eq!((r.free, r.other), (3_500, 2_500));
        for s in [v, r] {
            assert_eq!(
                s.weights + s.kv_used + s.kv_cached + s.kv_free + s.other + s.free,
                s.total
            );
        }
    }
}
