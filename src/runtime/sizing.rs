//! From cache settings to block counts.

use super::RuntimeError;
use crate::config::{default_device_fraction, CacheSettings, DevicePool};
use crate::ops::PagedLayout;

/// Capacity of each tier, in blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSizes {
    pub device_blocks: usize,
    pub host_blocks: usize,
}

/// Block counts for `cache` with blocks of `layout`, where `device_free` bytes
/// are free on the device after the weights and `host_available` bytes of RAM
/// are available, on a CUDA device or not (for [`DevicePool::Default`]). The device pool must
/// hold at least one full `context`.
pub fn pool_sizes(
    cache: &CacheSettings,
    cuda: bool,
    layout: &PagedLayout,
    device_free: u64,
    host_available: u64,
    context: usize,
) -> Result<PoolSizes, RuntimeError> {
    let block_bytes = layout.block_bytes().max(1);
    let device_bytes = match cache.device_pool {
        DevicePool::Fraction(f) => (device_free as f64 * f) as u64,
        DevicePool::Default => (device_free as f64 * default_device_fraction(cuda)) as u64,
        DevicePool::Bytes(b) if b > device_free => {
            return Err(RuntimeError::NotEnoughMemory {
                tier: "device",
                asked: b,
                available: device_free,
            })
        }
        DevicePool::Bytes(b) => b,
    };
    if cache.host_bytes > host_available {
        return Err(RuntimeError::NotEnoughMemory {
            tier: "host",
            asked: cache.host_bytes,
            available: host_available,
        });
    }
    let device_blocks = (device_bytes / block_bytes) as usize;
    let needed = context.div_ceil(layout.block_size);
    if device_blocks < needed {
        return Err(RuntimeError::PoolTooSmall {
            blocks: device_blocks,
            tokens: device_blocks * layout.block_size,
            context,
        });
    }
    Ok(PoolSizes {
        device_blocks,
        host_blocks: (cache.host_bytes / block_bytes) as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pool: DevicePool, host: u64) -> CacheSettings {
        CacheSettings {
            kv_dtype: None,
            block_size: 16,
            device_pool: pool,
            host_bytes: host,
            prefix_caching: true,
            write_through: false,
            disk_budget_bytes: 0,
        }
    }

    #[test]
    fn fraction_and_explicit_sizes() {
        let l = PagedLayout::uniform(2, 2, 8, 16, crate::config::KvDtype::F32);
        let bb = l.block_bytes(); // 2 * 2 * 16 * 16 * 4 = 4096
        assert_eq!(bb, 4096);
        let s = pool_sizes(&settings(DevicePool::Fraction(0.5), 10 * bb), false, &l, 400 * bb, 1 << 40, 64).unwrap();
        assert_eq!(
            s,
            PoolSizes {
                device_blocks: 200,
                host_blocks: 10
            }
        );
        let s = pool_sizes(&settings(DevicePool::Bytes(8 * bb), 0), false, &l, 400 * bb, 1 << 40, 64).unwrap();
        assert_eq!(s.device_blocks, 8);
        assert!(matches!(
            pool_sizes(&settings(DevicePool::Bytes(2 * bb), 0), false, &l, 400 * bb, 1 << 40, 64),
            Err(RuntimeError::PoolTooSmall { blocks: 2, .. })
        ));
        assert!(matches!(
            pool_sizes(&settings(DevicePool::Bytes(500 * bb), 0), false, &l, 400 * bb, 1 << 40, 64),
            Err(RuntimeError::NotEnoughMemory { .. })
        ));
        // The default fraction follows the device: 0.9 of free VRAM, 0.25 of available RAM.
        let on = |cuda| pool_sizes(&settings(DevicePool::Default, 0), cuda, &l, 400 * bb, 1 << 40, 64);
        assert_eq!(on(true).unwrap().device_blocks, 360);
        assert_eq!(on(false).unwrap().device_blocks, 100);
        assert!(pool_sizes(&settings(DevicePool::Fraction(0.5), 1 << 30), false, &l, 400 * bb, 1 << 20, 64).is_err());
    }
}
