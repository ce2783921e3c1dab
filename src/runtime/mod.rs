//! The memory behind block ids, and the execution of the cache manager's plans.
//!
//! [`KvMemory`] owns the device tier (the pool the forward reads; RAM on a CPU
//! build) and the host tier (the overflow arena), both laid out as
//! [`crate::ops::PagedLayout`] blocks so one block moves between tiers in one
//! copy. [`KvMemory::execute`] runs a [`crate::kv::CopyPlan`] (demotions,
//! then promotions) before the forward that needs it, and
//! [`KvMemory::store`] hands the forward a [`crate::ops::PagedKvBatch`] over
//! the device tier. [`pool_sizes`] turns the cache settings into block counts
//! ([`size_pools`] from the device's free memory), and [`MemorySplit`]
//! reports how the device's memory is shared out. `device.rs` holds every
//! query of the device itself (free VRAM or RAM, where the pool goes).
//!
//! Invariant: `kv` decides, `runtime` obeys: nothing here chooses which block
//! holds what.
//!
//! Counterpart: vLLM's `CacheEngine` / `KVCacheManager`'s worker side
//! (`swap_in` / `swap_out`), SGLang's `HostKVCache`.

pub mod cpu;
#[cfg(feature = "cuda")]
mod cuda_copy;
mod device;
mod error;
mod memory;
mod runs;
mod sizing;
mod split;

pub use device::{device_memory, memory_split, plain_pinned_copy_secs, size_pools, DeviceMemory};
pub use error::RuntimeError;
pub use memory::KvMemory;
pub use sizing::{pool_sizes, PoolSizes};
pub use split::MemorySplit;
