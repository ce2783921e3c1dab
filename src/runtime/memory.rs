//! The device and host block arenas and the copies between them.
//!
//! On the CPU both tiers are RAM and a copy is a `memcpy`. On CUDA the device tier is a
//! [`crate::ops::cuda_paged::CudaPool`] and the host tier is pinned RAM with its own copy
//! stream (`cuda_copy.rs`): demotions and promotions run there asynchronously, ordered by
//! events, and every CPU access to host blocks waits for the copies in flight first.

use super::RuntimeError;
use crate::kv::{BlockId, CopyPlan, Tier};

// Cache files store K/V little-endian, as the blocks are in memory here.
const _: () = assert!(
    cfg!(target_endian = "little"),
    "hearth's cache files assume a little-endian machine"
);

fn tier_name(t: Tier) -> &'static str {
    match t {
        Tier::Device => "device",
        Tier::Host => "host",
    }
}
use crate::ops::{KvStore, PagedKvBatch, PagedLayout};

/// Where the device tier's blocks live.
enum DeviceTier {
    /// RAM (CPU builds and CPU devices), in 4-byte words.
    Ram(Vec<u32>),
    /// VRAM, read and written by hearth's CUDA kernels.
    #[cfg(feature = "cuda")]
    Cuda(crate::ops::cuda_paged::CudaPool),
}

/// Where the host tier's blocks live.
enum HostTier {
    /// Plain RAM, in 4-byte words (CPU devices, and CUDA with no host tier).
    Ram(Vec<u32>),
    /// Page-locked RAM with its copy stream (CUDA).
    #[cfg(feature = "cuda")]
    Pinned(super::cuda_copy::PinnedHost),
}

impl HostTier {
    fn len_bytes(&self) -> usize {
        match self {
            Self::Ram(v) => v.len() * 4,
            #[cfg(feature = "cuda")]
            Self::Pinned(p) => p.len_bytes(),
        }
    }

    /// The whole tier as bytes, once no copy is writing it.
    fn bytes(&self) -> Result<&[u8], RuntimeError> {
        match self {
            Self::Ram(v) => Ok(bytemuck::cast_slice(v.as_slice())),
            #[cfg(feature = "cuda")]
            Self::Pinned(p) => p.bytes(),
        }
    }

    /// The whole tier as bytes, once no copy is reading or writing it.
    fn bytes_mut(&mut self) -> Result<&mut [u8], RuntimeError> {
        match self {
            Self::Ram(v) => Ok(bytemuck::cast_slice_mut(v.as_mut_slice())),
            #[cfg(feature = "cuda")]
            Self::Pinned(p) => p.bytes_mut(),
        }
    }
}

/// Both tiers' memory, as flat arrays of [`PagedLayout`] blocks (in the layout's K/V type;
/// RAM is held as 4-byte words so every block is 4-aligned).
///
/// RAM is reserved up front but zero pages are only committed by the
/// operating system when first written, so an idle pool costs little.
pub struct KvMemory {
    layout: PagedLayout,
    device: DeviceTier,
    host: HostTier,
    device_blocks: usize,
}

impl std::fmt::Debug for KvMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvMemory")
            .field("layout", &self.layout)
            .field("device_blocks", &self.device_blocks())
            .field("host_blocks", &self.host_blocks())
            .finish()
    }
}

impl Drop for KvMemory {
    /// Neither tier is freed under a copy still in flight (on CUDA the device pool would be
    /// freed first, on the compute stream, while the copy stream still reads or writes it).
    fn drop(&mut self) {
        let _ = self.wait_for_copies();
    }
}

impl KvMemory {
    /// Both tiers in RAM.
    pub fn new(layout: PagedLayout, device_blocks: usize, host_blocks: usize) -> Self {
        let bw = layout.block_words();
        Self {
            layout,
            device: DeviceTier::Ram(vec![0u32; device_blocks * bw]),
            host: HostTier::Ram(vec![0u32; host_blocks * bw]),
            device_blocks,
        }
    }

    /// The device tier in VRAM on `device`, the host tier in pinned RAM (allocated in full
    /// now) with its own copy stream.
    #[cfg(feature = "cuda")]
    pub fn new_cuda(
        device: &candle_core::CudaDevice,
        layout: PagedLayout,
        device_blocks: usize,
        host_blocks: usize,
    ) -> Result<Self, RuntimeError> {
        let pool = crate::ops::cuda_paged::CudaPool::new(device, layout.clone(), device_blocks)
            .map_err(|e| RuntimeError::Device(e.to_string()))?;
        let host = if host_blocks == 0 {
            HostTier::Ram(Vec::new())
        } else {
            HostTier::Pinned(super::cuda_copy::PinnedHost::new(
                device,
                host_blocks * layout.block_len(),
            )?)
        };
        // The pool is zeroed on the compute stream: wait for it here, on the thread that
        // built the tiers, so that a failure surfaces now and not at the first step on the
        // engine's thread.
        candle_core::backend::BackendDevice::synchronize(device).map_err(|e| RuntimeError::Device(e.to_string()))?;
        Ok(Self {
            layout,
            device: DeviceTier::Cuda(pool),
            host,
            device_blocks,
        })
    }

    pub fn layout(&self) -> &PagedLayout {
        &self.layout
    }

    pub fn device_blocks(&self) -> usize {
        self.device_blocks
    }

    pub fn host_blocks(&self) -> usize {
        self.host.len_bytes() / self.layout.block_len().max(1)
    }

    /// Blocks the calling thread until every copy issued by [`Self::execute`] is done (at once
    /// on the CPU, where copies are done when `execute` returns).
    pub fn wait_for_copies(&self) -> Result<(), RuntimeError> {
        self.host.bytes().map(|_| ())
    }

    /// Whether the host tier is page-locked RAM copied on its own stream (CUDA).
    pub fn host_is_pinned(&self) -> bool {
        match self.host {
            HostTier::Ram(_) => false,
            #[cfg(feature = "cuda")]
            HostTier::Pinned(_) => true,
        }
    }

    /// Runs `plan`: every demotion (device → host), then every promotion
    /// (host → device). Checks every id first, so a bad plan copies nothing.
    pub fn execute(&mut self, plan: &CopyPlan) -> Result<(), RuntimeError> {
        let (d, h) = (self.device_blocks(), self.host_blocks());
        let check = |b: BlockId, tier: &'static str, capacity: usize| {
            if (b.0 as usize) < capacity {
                Ok(())
            } else {
                Err(RuntimeError::BadBlock {
                    tier,
                    block: b.0,
                    capacity,
                })
            }
        };
        for &(src, dst) in &plan.demote {
            check(src, "device", d)?;
            check(dst, "host", h)?;
        }
        for &(src, dst) in &plan.promote {
            check(src, "host", h)?;
            check(dst, "device", d)?;
        }
        let bl = self.layout.block_len();
        match (&mut self.device, &mut self.host) {
            (DeviceTier::Ram(device), host) => {
                let device: &mut [u8] = bytemuck::cast_slice_mut(device.as_mut_slice());
                let host = host.bytes_mut()?;
                for run in super::runs::copy_runs(&plan.demote) {
                    let (src, dst) = run.bytes(bl);
                    host[dst].copy_from_slice(&device[src]);
                }
                for run in super::runs::copy_runs(&plan.promote) {
                    let (src, dst) = run.bytes(bl);
                    device[dst].copy_from_slice(&host[src]);
                }
            }
            #[cfg(feature = "cuda")]
            (DeviceTier::Cuda(pool), HostTier::Pinned(host)) => host.execute(pool, plan)?,
            #[cfg(feature = "cuda")]
            (DeviceTier::Cuda(_), HostTier::Ram(_)) => {
                // Only an empty host tier is plain RAM on CUDA, and the ids were checked.
                debug_assert!(plan.demote.is_empty() && plan.promote.is_empty());
            }
        }
        Ok(())
    }

    /// A store for one forward over the device tier; sequence `i` of the
    /// batch uses `tables[i]`.
    pub fn store(&mut self, tables: &[&[BlockId]]) -> Box<dyn KvStore + '_> {
        let tables: Vec<Vec<u32>> = tables.iter().map(|t| t.iter().map(|b| b.0).collect()).collect();
        match &mut self.device {
            DeviceTier::Ram(device) => Box::new(PagedKvBatch::new(
                bytemuck::cast_slice_mut(device.as_mut_slice()),
                self.layout.clone(),
                tables,
            )),
            #[cfg(feature = "cuda")]
            DeviceTier::Cuda(pool) => Box::new(crate::ops::cuda_paged::CudaPagedKvBatch::new(pool, tables)),
        }
    }

    /// Lets `fill` write block `b` of `tier` as little-endian bytes (a cache file's payload),
    /// straight into RAM; a VRAM block goes through a buffer and one copy. `fill`'s error is
    /// returned as is (the block then holds garbage, and the caller discards it).
    pub fn fill_block<E>(
        &mut self,
        tier: Tier,
        b: BlockId,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<Result<(), E>, RuntimeError> {
        let bl = self.layout.block_len();
        let capacity = match tier {
            Tier::Device => self.device_blocks(),
            Tier::Host => self.host_blocks(),
        };
        if b.0 as usize >= capacity {
            return Err(RuntimeError::BadBlock {
                tier: tier_name(tier),
                block: b.0,
                capacity,
            });
        }
        let range = b.0 as usize * bl..(b.0 as usize + 1) * bl;
        let ram: &mut [u8] = match (tier, &mut self.device) {
            (Tier::Host, _) => &mut self.host.bytes_mut()?[range],
            (Tier::Device, DeviceTier::Ram(d)) => &mut bytemuck::cast_slice_mut(d.as_mut_slice())[range],
            #[cfg(feature = "cuda")]
            (Tier::Device, DeviceTier::Cuda(pool)) => {
                let mut buf = vec![0u8; bl];
                if let Err(e) = fill(&mut buf) {
                    return Ok(Err(e));
                }
                // The block may still be leaving for the host tier: wait for the copy stream.
                pool.settle().map_err(|e| RuntimeError::Device(e.to_string()))?;
                pool.device
                    .cuda_stream()
                    .memcpy_htod(&buf, &mut pool.data.slice_mut(range))
                    .map_err(|e| RuntimeError::Device(e.to_string()))?;
                return Ok(Ok(()));
            }
        };
        Ok(fill(ram))
    }

    /// The RAM of blocks `blocks` of `tier`, each as little-endian bytes, to be filled at once
    /// (a cache file read). `None` for a VRAM tier, an id out of range, or an id given twice;
    /// an error when the host tier's copies in flight failed.
    pub fn blocks_bytes_mut(&mut self, tier: Tier, blocks: &[BlockId]) -> Result<Option<Vec<&mut [u8]>>, RuntimeError> {
        let bl = self.layout.block_len();
        let ram: &mut [u8] = match (tier, &mut self.device) {
            (Tier::Host, _) => self.host.bytes_mut()?,
            (Tier::Device, DeviceTier::Ram(d)) => bytemuck::cast_slice_mut(d.as_mut_slice()),
            #[cfg(feature = "cuda")]
            (Tier::Device, DeviceTier::Cuda(_)) => return Ok(None),
        };
        let mut chunks: Vec<Option<&mut [u8]>> = ram.chunks_exact_mut(bl.max(1)).map(Some).collect();
        Ok(blocks
            .iter()
            .map(|b| chunks.get_mut(b.0 as usize).and_then(Option::take))
            .collect())
    }

    /// Appends the device blocks `blocks`, in order, to `out` as little-endian bytes (what a
    /// cache file stores).
    pub fn copy_device_blocks(&self, blocks: &[BlockId], out: &mut Vec<u8>) -> Result<(), RuntimeError> {
        let bl = self.layout.block_len();
        let d = self.device_blocks();
        if let Some(bad) = blocks.iter().find(|b| b.0 as usize >= d) {
            return Err(RuntimeError::BadBlock {
                tier: "device",
                block: bad.0,
                capacity: d,
            });
        }
        out.reserve(blocks.len() * bl);
        match &self.device {
            DeviceTier::Ram(device) => {
                let device: &[u8] = bytemuck::cast_slice(device.as_slice());
                for b in blocks {
                    let at = b.0 as usize * bl;
                    out.extend_from_slice(&device[at..at + bl]);
                }
            }
            #[cfg(feature = "cuda")]
            DeviceTier::Cuda(pool) => {
                // A block may still be arriving from the host tier: wait for the copy stream.
                pool.settle().map_err(|e| RuntimeError::Device(e.to_string()))?;
                let stream = pool.device.cuda_stream();
                let mut buf = vec![0u8; bl];
                for b in blocks {
                    let at = b.0 as usize * bl;
                    // Into pageable memory: returns once the copy is done.
                    stream
                        .memcpy_dtoh(&pool.data.slice(at..at + bl), &mut buf)
                        .map_err(|e| RuntimeError::Device(e.to_string()))?;
                    out.extend_from_slice(&buf);
                }
            }
        }
        Ok(())
    }

    /// One device block's bytes (tests compare tiers with it), read back from VRAM on CUDA;
    /// `None` for an id out of range.
    pub fn device_block(&self, b: BlockId) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.copy_device_blocks(&[b], &mut out).ok()?;
        Some(out)
    }

    /// One host block's bytes, once no copy is writing it; `None` for an id out of range (or
    /// a failed copy).
    pub fn host_block(&self, b: BlockId) -> Option<&[u8]> {
        let bl = self.layout.block_len();
        self.host.bytes().ok()?.get(b.0 as usize * bl..(b.0 as usize + 1) * bl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demote_then_promote_moves_whole_blocks() {
        let l = PagedLayout::uniform(1, 1, 2, 2, crate::ops::KvDtype::F32);
        let mut m = KvMemory::new(l, 3, 2);
        // 8 floats a block: block 1 is device[8..16] (RAM tier; refutable in CUDA builds).
        #[allow(irrefutable_let_patterns)]
        if let DeviceTier::Ram(d) = &mut m.device {
            let floats: &mut [f32] = bytemuck::cast_slice_mut(&mut d[8..16]);
            floats.copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        }
        let plan = CopyPlan {
            demote: vec![(BlockId(1), BlockId(0))],
            promote: vec![(BlockId(0), BlockId(2))],
        };
        m.execute(&plan).unwrap();
        let host: &[f32] = bytemuck::cast_slice(m.host_block(BlockId(0)).unwrap());
        assert_eq!(host, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0][..]);
        assert_eq!(m.host_block(BlockId(0)).map(<[u8]>::to_vec), m.device_block(BlockId(1)));
        assert_eq!(m.device_block(BlockId(2)), m.device_block(BlockId(1)));
        let bad = CopyPlan {
            demote: vec![(BlockId(3), BlockId(0))],
            promote: vec![],
        };
        assert!(m.execute(&bad).is_err());
    }
}
