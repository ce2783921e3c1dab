//! The device and host block arenas and the copies between them.

use super::RuntimeError;
use crate::kv::{BlockId, CopyPlan};
use crate::ops::{PagedKvBatch, PagedLayout};

/// Both tiers' memory, as flat arrays of [`PagedLayout`] blocks.
///
/// Memory is reserved up front but zero pages are only committed by the
/// operating system when first written, so an idle pool costs little.
pub struct KvMemory {
    layout: PagedLayout,
    device: Vec<f32>,
    host: Vec<f32>,
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
    pub fn new(layout: PagedLayout, device_blocks: usize, host_blocks: usize) -> Self {
        let be = layout.block_elems();
        Self {
            layout,
            device: vec![0f32; device_blocks * be],
            host: vec![0f32; host_blocks * be],
        }
    }

    pub fn layout(&self) -> &PagedLayout {
        &self.layout
    }

    pub fn device_blocks(&self) -> usize {
        self.device.len() / self.layout.block_elems().max(1)
    }

    pub fn host_blocks(&self) -> usize {
        self.host.len() / self.layout.block_elems().max(1)
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
        let be = self.layout.block_elems();
        for &(src, dst) in &plan.demote {
            let (s, t) = (src.0 as usize * be, dst.0 as usize * be);
            self.host[t..t + be].copy_from_slice(&self.device[s..s + be]);
        }
        for &(src, dst) in &plan.promote {
            let (s, t) = (src.0 as usize * be, dst.0 as usize * be);
            self.device[t..t + be].copy_from_slice(&self.host[s..s + be]);
        }
        Ok(())
    }

    /// A store for one forward over the device tier; sequence `i` of the
    /// batch uses `tables[i]`.
    pub fn store(&mut self, tables: &[&[BlockId]]) -> PagedKvBatch<'_> {
        let tables = tables.iter().map(|t| t.iter().map(|b| b.0).collect()).collect();
        PagedKvBatch::new(&mut self.device, self.layout, tables)
    }

    /// One device block's contents (tests compare tiers with it).
    pub fn device_block(&self, b: BlockId) -> Option<&[f32]> {
        let be = self.layout.block_elems();
        self.device.get(b.0 as usize * be..(b.0 as usize + 1) * be)
    }

    /// One host block's contents.
    pub fn host_block(&self, b: BlockId) -> Option<&[f32]> {
        let be = self.layout.block_elems();
        self.host.get(b.0 as usize * be..(b.0 as usize + 1) * be)
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
        };
        let mut m = KvMemory::new(l, 3, 2);
        // 8 floats a block: block 1 is device[8..16].
        m.device[8..16].copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let plan = CopyPlan {
            demote: vec![(BlockId(1), BlockId(0))],
            promote: vec![(BlockId(0), BlockId(2))],
        };
        m.execute(&plan).unwrap();
        assert_eq!(
            m.host_block(BlockId(0)),
            Some(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0][..])
        );
        assert_eq!(m.host_block(BlockId(0)), m.device_block(BlockId(1)));
        assert_eq!(m.device_block(BlockId(2)), m.device_block(BlockId(1)));
        let bad = CopyPlan {
            demote: vec![(BlockId(3), BlockId(0))],
            promote: vec![],
        };
        assert!(m.execute(&bad).is_err());
    }
}
