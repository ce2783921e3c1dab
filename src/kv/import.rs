//! Importing blocks from outside the RAM tiers: the disk tier's hits enter the trie here.
//!
//! Owns: [`ImportPlan`] and the `impl KvCacheManager` blocks [`KvCacheManager::import`] and
//! [`KvCacheManager::discard`]. An import continues a prompt's cached prefix by `n` blocks: each
//! gets a node in the trie and one block, in the host tier when there is one (the next `start`
//! promotes it like any host hit), else in the device tier. The caller runs the plan's copies,
//! then fills every returned block before its next call into the manager; a block it cannot fill
//! (a read error, a checksum) it [`discard`](KvCacheManager::discard)s, which drops that node and
//! the ones imported after it.
//!
//! Invariants: the matched path is held (device references, host pins) while blocks are taken,
//! so an import never evicts the prefix it extends; imported blocks end unreferenced and cached
//! (most recently used), so the capacity accounting is unchanged; an import never takes a
//! referenced block, and stops early (imports fewer) rather than fail.
//!
//! Counterpart: SGLang HiCache's `load_back` from its storage tier into host memory
//! (`prefetch_from_storage`), LMCache's retrieve into the paged buffer.

use super::trie::Lookup;
use super::{BlockId, CopyPlan, KvCacheManager, Tier};

/// Where the blocks of an import go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportPlan {
    /// Copies to run before filling the blocks (demotions of device blocks the import evicted).
    pub plan: CopyPlan,
    /// The block for each imported block of the prompt, in order from `first_block`.
    pub blocks: Vec<(Tier, BlockId)>,
    /// Index (in the prompt) of the first imported block.
    pub first_block: usize,
}

impl KvCacheManager {
    /// Blocks of `tokens` already cached, as [`peek`](Self::peek) counts them (for the import's
    /// `from`).
    pub fn cached_blocks(&self, tokens: &[u32]) -> usize {
        self.lookup(tokens).len()
    }

    /// Adds blocks `from .. to` of `tokens` to the trie as cached blocks the caller fills (see
    /// the module docs). `from` must be where the cached prefix ends (else nothing is imported);
    /// blocks past `(tokens.len() - 1) / block_size` are never imported. May import fewer than
    /// asked when the tier has no unreferenced block left.
    pub fn import(&mut self, tokens: &[u32], from: usize, to: usize) -> ImportPlan {
        let mut out = ImportPlan {
            first_block: from,
            ..ImportPlan::default()
        };
        let bs = self.cfg.block_size;
        let to = to.min(tokens.len().saturating_sub(1) / bs);
        if !self.cfg.prefix_caching || from >= to {
            return out;
        }
        let path = self.match_path(tokens);
        if path.len() != from {
            return out;
        }
        let tier = if self.cfg.host_blocks > 0 {
            Tier::Host
        } else {
            Tier::Device
        };
        // Hold the path so that taking blocks cannot evict it.
        let mut held: Vec<(Tier, BlockId)> = Vec::with_capacity(path.len() + to - from);
        for &id in &path {
            let Some(n) = self.trie.get(id) else { return out };
            match (n.device, n.host) {
                (Some(d), _) => {
                    self.device.incref(d);
                    held.push((Tier::Device, d));
                }
                (None, Some(h)) => {
                    self.host.incref(h);
                    held.push((Tier::Host, h));
                }
                (None, None) => {}
            }
        }
        let mut parent = path.last().copied();
        for k in from..to {
            let block = &tokens[k * bs..(k + 1) * bs];
            let parent_hash = match parent {
                None => None,
                Some(p) => match self.trie.get(p) {
                    Some(n) => Some(n.hash),
                    None => break,
                },
            };
            let hash = (self.hasher)(parent_hash, block);
            if self.trie.find_child(parent, hash, block) != Lookup::Miss {
                break;
            }
            let b = match tier {
                Tier::Host => match self.take_host_block() {
                    Some(h) => h,
                    None => break,
                },
                Tier::Device => {
                    if self.device.available() == 0 {
                        break;
                    }
                    match self.alloc_device(&mut out.plan) {
                        Ok(d) => d,
                        Err(_) => break,
                    }
                }
            };
            let Some(id) = self.trie.insert(parent, hash, block.into()) else {
                self.release(tier, b, false);
                break;
            };
            if let Some(n) = self.trie.get_mut(id) {
                match tier {
                    Tier::Host => n.host = Some(b),
                    Tier::Device => n.device = Some(b),
                }
            }
            match tier {
                Tier::Host => {
                    self.host.set_node(b, Some(id));
                    self.host.incref(b);
                }
                Tier::Device => self.device.set_node(b, Some(id)),
            }
            held.push((tier, b));
            out.blocks.push((tier, b));
            parent = Some(id);
        }
        for (t, b) in held {
            self.release(t, b, true);
        }
        self.counters.imported_blocks += out.blocks.len() as u64;
        out
    }

    /// Drops a reference taken by `import` (`held`), or parks a block in hand.
    fn release(&mut self, tier: Tier, b: BlockId, held: bool) {
        let pool = match tier {
            Tier::Device => &mut self.device,
            Tier::Host => &mut self.host,
        };
        if held || tier == Tier::Device {
            pool.decref(b);
        } else {
            pool.park(b);
        }
    }

    /// Drops the cached node held by `block` of `tier` and everything below it (an imported
    /// block that could not be filled). Referenced blocks are left alone.
    pub fn discard(&mut self, tier: Tier, block: BlockId) {
        if self.pool(tier).ref_cnt(block) > 0 {
            return;
        }
        if let Some(node) = self.pool(tier).node(block) {
            self.remove_subtree(node);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kv::manager::tests::cfg;
    use crate::kv::testkit::FakeRuntime;
    use crate::kv::{KvCacheManager, SeqId, Tier};

    /// Imports `prompt`'s blocks from `from`, filling them in `rt` as a cache file would.
    fn import_and_fill(m: &mut KvCacheManager, rt: &mut FakeRuntime, prompt: &[u32], from: usize) -> usize {
        let plan = m.import(prompt, from, usize::MAX);
        rt.apply(&plan.plan);
        for (i, &(tier, b)) in plan.blocks.iter().enumerate() {
            let k = plan.first_block + i;
            rt.fill(tier, b, &prompt[k * 8..(k + 1) * 8]);
        }
        m.check_invariants().unwrap();
        plan.blocks.len()
    }

    #[test]
    fn imported_blocks_are_host_hits_then_promoted() {
        let mut m = KvCacheManager::new(cfg(8, 8)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let prompt: Vec<u32> = (0..33).collect();
        assert_eq!(import_and_fill(&mut m, &mut rt, &prompt, 0), 4);
        assert_eq!(m.peek(&prompt).host_tokens, 32);
        assert_eq!(m.stats().imported_blocks, 4);
        let s = m.start(SeqId(1), &prompt).unwrap();
        assert_eq!(s.cached_tokens, 32);
        rt.apply(&s.plan);
        let table = m.block_table(SeqId(1)).unwrap().to_vec();
        let want: Vec<_> = prompt[..32].iter().map(|t| Some(*t)).collect();
        assert_eq!(rt.read(&table, 32), want);
        m.free(SeqId(1)).unwrap();
        m.check_invariants().unwrap();
        // importing again is a no-op: the blocks are cached
        assert_eq!(m.import(&prompt, 0, 9).blocks.len(), 0);
        assert_eq!(m.import(&prompt, 4, 9).blocks.len(), 0);
    }

    #[test]
    fn import_continues_a_cached_prefix_and_never_evicts_it() {
        let mut m = KvCacheManager::new(cfg(8, 3)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let prompt: Vec<u32> = (0..41).collect();
        assert_eq!(import_and_fill(&mut m, &mut rt, &prompt[..17], 0), 2);
        // from must be where the match ends
        assert!(m.import(&prompt, 1, 5).blocks.is_empty());
        // 3 more asked, one host block left unpinned: the held path survives
        assert_eq!(import_and_fill(&mut m, &mut rt, &prompt, 2), 1);
        assert_eq!(m.peek(&prompt).tokens, 24);
    }

    #[test]
    fn without_a_host_tier_blocks_go_to_device_and_discard_drops_the_rest() {
        let mut m = KvCacheManager::new(cfg(4, 0)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let prompt: Vec<u32> = (0..33).collect();
        let plan = m.import(&prompt, 0, 4);
        assert_eq!(plan.blocks.len(), 4);
        assert!(plan.blocks.iter().all(|(t, _)| *t == Tier::Device));
        m.check_invariants().unwrap();
        assert_eq!(m.stats().device.cached_blocks, 4);
        // block 2 could not be read: it and block 3 go
        m.discard(plan.blocks[2].0, plan.blocks[2].1);
        m.check_invariants().unwrap();
        assert_eq!(m.peek(&prompt).device_tokens, 16);
        assert_eq!(m.stats().device.free_blocks, 2);
        for (i, &(tier, b)) in plan.blocks[..2].iter().enumerate() {
            rt.fill(tier, b, &prompt[i * 8..(i + 1) * 8]);
        }
        let s = m.start(SeqId(1), &prompt[..25]).unwrap();
        assert_eq!(s.cached_tokens, 16);
        let table = m.block_table(SeqId(1)).unwrap().to_vec();
        let want: Vec<_> = prompt[..16].iter().map(|t| Some(*t)).collect();
        assert_eq!(rt.read(&table, 16), want);
    }
}
