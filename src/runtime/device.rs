//! What the runtime asks of the device itself: its free and total memory (VRAM through CUDA,
//! RAM on the CPU), the cache's block counts sized from it, the [`KvMemory`] placed on it, and
//! the memory split the GUI and `/metrics` show.
//!
//! Invariant: the engine never asks the device directly; every CUDA query is here (and in
//! `memory.rs` for the pool), so a new backend adds its arm in one file.
//!
//! Counterpart: vLLM's `Worker.determine_num_available_blocks` (profiling free memory after
//! the weights) and `CacheEngine` allocation.

use candle_core::Device;

use super::{pool_sizes, KvMemory, MemorySplit, PoolSizes, RuntimeError};
use crate::config::{available_ram_bytes, total_ram_bytes, CacheSettings};
use crate::kv::TierStats;
use crate::ops::PagedLayout;

/// Free and total bytes of the memory the device tier lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    pub free: u64,
    pub total: u64,
}

/// `device`'s memory now: VRAM on CUDA, available and total RAM otherwise.
pub fn device_memory(device: &Device) -> Result<DeviceMemory, RuntimeError> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => {
            let (free, total) = dev
                .cuda_stream()
                .context()
                .mem_get_info()
                .map_err(|e| RuntimeError::Device(e.to_string()))?;
            Ok(DeviceMemory {
                free: free as u64,
                total: total as u64,
            })
        }
        _ => Ok(DeviceMemory {
            free: available_ram_bytes().unwrap_or(0),
            total: total_ram_bytes().unwrap_or(0),
        }),
    }
}

/// Block counts for `cache` on `device`, from the memory available now (after the weights are
/// loaded): free VRAM for the device tier on CUDA; on the CPU both tiers come out of the same
/// RAM, the host tier first. The device tier holds at least one `context`.
pub fn size_pools(
    device: &Device,
    cache: &CacheSettings,
    layout: &PagedLayout,
    context: usize,
) -> Result<PoolSizes, RuntimeError> {
    let ram = available_ram_bytes().unwrap_or(4 << 30);
    let device_free = if device.is_cuda() {
        device_memory(device)?.free
    } else {
        ram.saturating_sub(cache.host_bytes)
    };
    pool_sizes(cache, device.is_cuda(), layout, device_free, ram, context)
}

impl KvMemory {
    /// The tiers for `device`: the device tier in VRAM on CUDA, in RAM otherwise; the host
    /// tier in RAM.
    pub fn on_device(
        device: &Device,
        layout: PagedLayout,
        device_blocks: usize,
        host_blocks: usize,
    ) -> Result<Self, RuntimeError> {
        match device {
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) => Self::new_cuda(dev, layout, device_blocks, host_blocks),
            _ => Ok(Self::new(layout, device_blocks, host_blocks)),
        }
    }
}

/// Seconds of the fastest of `repeats` plain host → device copies of `bytes` from pinned RAM,
/// one `cuMemcpyHtoDAsync` each: the yardstick the host tier's block copies are measured
/// against. CUDA only.
pub fn plain_pinned_copy_secs(device: &Device, bytes: usize, repeats: usize) -> Result<f64, RuntimeError> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => super::cuda_copy::plain_copy_secs(dev, bytes, repeats),
        _ => {
            let _ = (bytes, repeats);
            Err(RuntimeError::Device("a pinned host → device copy needs a CUDA device".into()))
        }
    }
}

/// How `device`'s memory is split between `weights` bytes of weights, the device tier `kv`
/// and the rest.
pub fn memory_split(device: &Device, weights: u64, kv: &TierStats) -> Result<MemorySplit, RuntimeError> {
    let m = device_memory(device)?;
    Ok(if device.is_cuda() {
        MemorySplit::new("cuda", m.total, m.free, weights, kv, false)
    } else {
        MemorySplit::new("cpu", m.total, m.free, weights, kv, true)
    })
}
