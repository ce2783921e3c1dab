//! The device and host block arenas and the copies between them.

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

/// Both tiers' memory, as flat arrays of [`PagedLayout`] blocks (in the layout's K/V type;
/// RAM is held as 4-byte words so every block is 4-aligned).
///
/// RAM is reserved up front but zero pages are only committed by the
/// operating system when first written, so an idle pool costs little.
pub struct KvMemory {
    layout: PagedLayout,
    device: DeviceTier,
    host: Vec<u32>,
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

impl KvMemory {
    /// Both tiers in RAM.
    pub fn new(layout: PagedLayout, device_blocks: usize, host_blocks: usize) -> Self {
        let bw = layout.block_words();
        Self {
            layout,
            device: DeviceTier::Ram(vec![0u32; device_blocks * bw]),
            host: vec![0u32; host_blocks * bw],
            device_blocks,
        }
    }

    /// The device tier in VRAM on `device`, the host tier in RAM.
    #[cfg(feature = "cuda")]
    pub fn new_cuda(
        device: &candle_core::CudaDevice,
        layout: PagedLayout,
        device_blocks: usize,
        host_blocks: usize,
    ) -> Result<Self, RuntimeError> {
        let pool = crate::ops::cuda_paged::CudaPool::new(device, layout, device_blocks)
            .map_err(|e| RuntimeError::Device(e.to_string()))?;
        Ok(Self {
            layout,
            device: DeviceTier::Cuda(pool),
            host: vec![0u32; host_blocks * layout.block_words()],
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
        self.host.len() / self.layout.block_words().max(1)
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
        let bw = self.layout.block_words();
        let range = |b: BlockId| b.0 as usize * bw..(b.0 as usize + 1) * bw;
        match &mut self.device {
            DeviceTier::Ram(device) => {
                for &(src, dst) in &plan.demote {
                    self.host[range(dst)].copy_from_slice(&device[range(src)]);
                }
                for &(src, dst) in &plan.promote {
                    device[range(dst)].copy_from_slice(&self.host[range(src)]);
                }
            }
            #[cfg(feature = "cuda")]
            DeviceTier::Cuda(pool) => {
                // Copies are ordered on the compute stream, so the next forward
                // never reads a block still arriving.
                let stream = pool.device.cuda_stream();
                let err =
                    |e: candle_core::cuda_backend::cudarc::driver::DriverError| RuntimeError::Device(e.to_string());
                for &(src, dst) in &plan.demote {
                    let host: &mut [f32] = bytemuck::cast_slice_mut(&mut self.host[range(dst)]);
                    stream.memcpy_dtoh(&pool.data.slice(range(src)), host).map_err(err)?;
                }
                for &(src, dst) in &plan.promote {
                    let host: &[f32] = bytemuck::cast_slice(&self.host[range(src)]);
                    stream
                        .memcpy_htod(host, &mut pool.data.slice_mut(range(dst)))
                        .map_err(err)?;
                }
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
                self.layout,
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
        let bw = self.layout.block_words();
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
        let range = b.0 as usize * bw..(b.0 as usize + 1) * bw;
        let ram: &mut [u32] = match (tier, &mut self.device) {
            (Tier::Host, _) => &mut self.host[range],
            (Tier::Device, DeviceTier::Ram(d)) => &mut d[range],
            #[cfg(feature = "cuda")]
            (Tier::Device, DeviceTier::Cuda(pool)) => {
                let mut buf = vec![0f32; bw];
                if let Err(e) = fill(bytemuck::cast_slice_mut(&mut buf)) {
                    return Ok(Err(e));
                }
                pool.device
                    .cuda_stream()
                    .memcpy_htod(&buf, &mut pool.data.slice_mut(range))
                    .map_err(|e| RuntimeError::Device(e.to_string()))?;
                return Ok(Ok(()));
            }
        };
        Ok(fill(bytemuck::cast_slice_mut(ram)))
    }

    /// The RAM of blocks `blocks` of `tier`, each as little-endian bytes, to be filled at once
    /// (a cache file read). `None` for a VRAM tier, an id out of range, or an id given twice.
    pub fn blocks_bytes_mut(&mut self, tier: Tier, blocks: &[BlockId]) -> Option<Vec<&mut [u8]>> {
        let bw = self.layout.block_words();
        let ram: &mut [u32] = match (tier, &mut self.device) {
            (Tier::Host, _) => &mut self.host,
            (Tier::Device, DeviceTier::Ram(d)) => d,
            #[cfg(feature = "cuda")]
            (Tier::Device, DeviceTier::Cuda(_)) => return None,
        };
        let mut chunks: Vec<Option<&mut [u32]>> = ram.chunks_exact_mut(bw.max(1)).map(Some).collect();
        blocks
            .iter()
            .map(|b| {
                chunks
                    .get_mut(b.0 as usize)
                    .and_then(Option::take)
                    .map(bytemuck::cast_slice_mut::<u32, u8>)
            })
            .collect()
    }

    /// Appends the device blocks `blocks`, in order, to `out` as little-endian bytes (what a
    /// cache file stores).
    pub fn copy_device_blocks(&self, blocks: &[BlockId], out: &mut Vec<u8>) -> Result<(), RuntimeError> {
        let bw = self.layout.block_words();
        let d = self.device_blocks();
        if let Some(bad) = blocks.iter().find(|b| b.0 as usize >= d) {
            return Err(RuntimeError::BadBlock {
                tier: "device",
                block: bad.0,
                capacity: d,
            });
        }
        out.reserve(blocks.len() * bw * 4);
        match &self.device {
            DeviceTier::Ram(device) => {
                for b in blocks {
                    let at = b.0 as usize * bw;
                    out.extend_from_slice(bytemuck::cast_slice(&device[at..at + bw]));
                }
            }
            #[cfg(feature = "cuda")]
            DeviceTier::Cuda(pool) => {
                let mut buf = vec![0f32; bw];
                for b in blocks {
                    let at = b.0 as usize * bw;
                    pool.device
                        .cuda_stream()
                        .memcpy_dtoh(&pool.data.slice(at..at + bw), &mut buf)
                        .map_err(|e| RuntimeError::Device(e.to_string()))?;
                    out.extend_from_slice(bytemuck::cast_slice(&buf));
                }
            }
        }
        Ok(())
    }

    /// One RAM device block's bytes (tests compare tiers with it); `None`
    /// for a VRAM tier or an id out of range.
    pub fn device_block(&self, b: BlockId) -> Option<&[u8]> {
        let bw = self.layout.block_words();
        match &self.device {
            DeviceTier::Ram(device) => device
                .get(b.0 as usize * bw..(b.0 as usize + 1) * bw)
                .map(bytemuck::cast_slice),
            #[cfg(feature = "cuda")]
            DeviceTier::Cuda(_) => None,
        }
    }

    /// One host block's bytes.
    pub fn host_block(&self, b: BlockId) -> Option<&[u8]> {
        let bw = self.layout.block_words();
        self.host
            .get(b.0 as usize * bw..(b.0 as usize + 1) * bw)
            .map(bytemuck::cast_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demote_then_promote_moves_whole_blocks() {
        let l = PagedLayout {
            layers: 1,
            kv_heads: 1,
            head_dim: 2,
            block_size: 2,
            dtype: crate::ops::KvDtype::F32,
        };
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
        assert_eq!(m.host_block(BlockId(0)), m.device_block(BlockId(1)));
        assert_eq!(m.device_block(BlockId(2)), m.device_block(BlockId(1)));
        let bad = CopyPlan {
            demote: vec![(BlockId(3), BlockId(0))],
            promote: vec![],
        };
        assert!(m.execute(&bad).is_err());
    }
}
