//! Test support: a fake runtime that stores token ids where the real one stores K/V.
//!
//! Owns: [`FakeRuntime`]. It executes [`CopyPlan`]s exactly as the runtime contract says (every
//! demote, then every promote) and lets a test write a sequence's tokens through its block table
//! and read them back. If the manager ever hands out a block whose content is not what it claims,
//! reading through the block table shows it.
//!
//! Counterpart: the `runtime` module (device KV storage, host arena, copy stream), minus tensors.

use super::{BlockId, CopyPlan, KvCacheConfig, Tier};

/// Block contents of both tiers as token ids (`None`: never written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeRuntime {
    block_size: usize,
    device: Vec<Vec<Option<u32>>>,
    host: Vec<Vec<Option<u32>>>,
}

impl FakeRuntime {
    /// Empty blocks sized like `cfg`'s tiers.
    pub fn new(cfg: &KvCacheConfig) -> Self {
        let bs = cfg.block_size;
        Self {
            block_size: bs,
            device: vec![vec![None; bs]; cfg.device_blocks],
            host: vec![vec![None; bs]; cfg.host_blocks],
        }
    }

    /// Executes `plan`: all demotes (device → host), then all promotes (host → device), in order.
    /// Copies naming a block out of range are skipped.
    pub fn apply(&mut self, plan: &CopyPlan) {
        for &(src, dst) in &plan.demote {
            if let (Some(s), true) = (self.device.get(src.index()).cloned(), dst.index() < self.host.len()) {
                self.host[dst.index()] = s;
            }
        }
        for &(src, dst) in &plan.promote {
            if let (Some(s), true) = (self.host.get(src.index()).cloned(), dst.index() < self.device.len()) {
                self.device[dst.index()] = s;
            }
        }
    }

    /// Writes `tokens` at positions `start..` of the sequence whose block table is `table`, as the
    /// forward writes K/V. Positions past the table are skipped.
    pub fn write(&mut self, table: &[BlockId], start: usize, tokens: &[u32]) {
        let bs = self.block_size;
        for (i, &t) in tokens.iter().enumerate() {
            let p = start + i;
            let Some(b) = table.get(p / bs) else {
                return;
            };
            if let Some(row) = self.device.get_mut(b.index()).and_then(|blk| blk.get_mut(p % bs)) {
                *row = Some(t);
            }
        }
    }

    /// Writes a whole block's `tokens` into block `id` of `tier`, as reading a cache file into
    /// it does.
    pub fn fill(&mut self, tier: Tier, id: BlockId, tokens: &[u32]) {
        let blocks = match tier {
            Tier::Device => &mut self.device,
            Tier::Host => &mut self.host,
        };
        if let Some(rows) = blocks.get_mut(id.index()) {
            for (r, t) in rows.iter_mut().zip(tokens) {
                *r = Some(*t);
            }
        }
    }

    /// Reads positions `0..len` through `table` (what attention would see).
    pub fn read(&self, table: &[BlockId], len: usize) -> Vec<Option<u32>> {
        let bs = self.block_size;
        (0..len)
            .map(|p| {
                let b = table.get(p / bs)?;
                self.device.get(b.index())?.get(p % bs).copied().flatten()
            })
            .collect()
    }

    /// The rows of one block.
    pub fn block(&self, tier: Tier, id: BlockId) -> Option<&[Option<u32>]> {
        let blocks = match tier {
            Tier::Device => &self.device,
            Tier::Host => &self.host,
        };
        blocks.get(id.index()).map(Vec::as_slice)
    }

    /// Whether block `id` of `tier` holds exactly `tokens`.
    pub fn holds(&self, tier: Tier, id: BlockId, tokens: &[u32]) -> bool {
        self.block(tier, id)
            .is_some_and(|rows| rows.len() == tokens.len() && rows.iter().zip(tokens).all(|(r, t)| *r == Some(*t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demotes_run_before_promotes() {
        let cfg = KvCacheConfig {
            block_size: 8,
            device_blocks: 2,
            host_blocks: 1,
            ..Default::default()
        };
        let mut rt = FakeRuntime::new(&cfg);
        let t: Vec<u32> = (0..8).collect();
        rt.write(&[BlockId(0)], 0, &t);
        assert!(rt.holds(Tier::Device, BlockId(0), &t));
        // host 0 <- device 0, then device 1 <- host 0
        rt.apply(&CopyPlan {
            demote: vec![(BlockId(0), BlockId(0))],
            promote: vec![(BlockId(0), BlockId(1))],
        });
        assert!(rt.holds(Tier::Host, BlockId(0), &t));
        assert!(rt.holds(Tier::Device, BlockId(1), &t));
        let read = rt.read(&[BlockId(1)], 3);
        assert_eq!(read, vec![Some(0), Some(1), Some(2)]);
        assert_eq!(rt.read(&[], 1), vec![None]);
    }
}
