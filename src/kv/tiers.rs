//! Moving cached blocks between tiers: device allocation with eviction and demotion, host
//! allocation with eviction, write-through, and removing nodes that lost every copy.
//!
//! Owns: the `impl KvCacheManager` blocks that hand out blocks. The policy:
//!
//! - device allocation pops the LRU unreferenced device block. If it holds a node's copy: a node
//!   that also has a host copy just loses its device copy (an eviction, no copy); otherwise it is
//!   demoted: it takes a host block ([`KvCacheManager::take_host_block`]) and the plan copies
//!   device → host. With no host tier, or every host block pinned, the copy is dropped;
//! - host allocation pops the LRU unreferenced host block; a node losing its host copy that has
//!   no device copy either leaves the trie;
//! - a node left with no copy leaves the trie together with its subtree, which is now
//!   unreachable. Unreferenced blocks of the subtree become free; a referenced one (a running
//!   sequence's block below an equal node it did not own) stays with its sequence, uncached.
//!
//! Host eviction is LRU over blocks, not strictly leaves-first: freeing tail-first makes
//! descendants usually older than their ancestors, and an interior node dropped takes its
//! subtree with it.
//!
//! Invariant: nothing here touches a referenced block's place in its pool or a pinned host block;
//! callers check capacity first, so running out here means a bookkeeping bug.
//!
//! Counterpart: vLLM v1's `BlockPool.get_new_blocks` / `_maybe_evict_cached_block`, SGLang's
//! `HiRadixCache.evict` (`write_backup` then free the device value) and `evict_host`.

use super::trie::NodeId;
use super::{BlockId, CopyPlan, KvCacheManager, KvError, Tier};

impl KvCacheManager {
    /// Takes one device block for a running sequence (one reference), evicting or demoting the
    /// node it held. Fails only if no block is unreferenced (callers check first).
    pub(crate) fn alloc_device(&mut self, plan: &mut CopyPlan) -> Result<BlockId, KvError> {
        let Some((block, old)) = self.device.pop_lru() else {
            return Err(KvError::NoFreeBlocks {
                tier: Tier::Device,
                needed: 1,
                available: 0,
            });
        };
        if let Some(node) = old {
            self.evict_device_copy(node, block, plan);
        }
        self.device.incref(block);
        Ok(block)
    }

    /// `node` loses its device copy `block` (already taken out of the pool): keep it on host if
    /// it is there, demote it if a host block can be had, else remove it.
    fn evict_device_copy(&mut self, node: NodeId, block: BlockId, plan: &mut CopyPlan) {
        let Some(n) = self.trie.get_mut(node) else {
            return;
        };
        n.device = None;
        if n.host.is_some() {
            self.counters.evictions_device += 1;
            return;
        }
        if let Some(h) = self.take_host_block() {
            // Taking the host block may have removed an ancestor of `node`, and `node` with it.
            if let Some(n) = self.trie.get_mut(node) {
                n.host = Some(h);
                self.host.set_node(h, Some(node));
                self.host.park(h);
                plan.demote.push((block, h));
                self.counters.demotions += 1;
                return;
            }
            self.host.park(h);
            self.counters.evictions_device += 1;
            return;
        }
        self.counters.evictions_device += 1;
        self.remove_subtree(node);
    }

    /// Takes the LRU unreferenced host block, dropping the host copy it held. The block is in
    /// hand: the caller gives it a node and parks it. `None` with no host tier or all pinned.
    pub(crate) fn take_host_block(&mut self) -> Option<BlockId> {
        let (h, old) = self.host.pop_lru()?;
        if let Some(m) = old {
            self.counters.evictions_host += 1;
            if let Some(n) = self.trie.get_mut(m) {
                n.host = None;
                if n.device.is_none() {
                    self.remove_subtree(m);
                }
            }
        }
        Some(h)
    }

    /// Write-through: gives the newly cached `node` (device copy `block`) a host copy now, so
    /// evicting it later costs no copy. Skipped when no host block can be had.
    pub(crate) fn write_through(&mut self, node: NodeId, block: BlockId, plan: &mut CopyPlan) {
        let Some(h) = self.take_host_block() else {
            return;
        };
        // If the host block held an ancestor with no device copy, `node` went with it.
        if let Some(n) = self.trie.get_mut(node) {
            n.host = Some(h);
            self.host.set_node(h, Some(node));
            plan.demote.push((block, h));
            self.counters.write_through_copies += 1;
        }
        self.host.park(h);
    }

    /// Removes `node` and its subtree from the trie and releases their copies.
    pub(crate) fn remove_subtree(&mut self, node: NodeId) {
        for n in self.trie.remove_subtree(node) {
            if let Some(d) = n.device {
                if self.device.ref_cnt(d) == 0 {
                    self.counters.evictions_device += 1;
                }
                self.device.set_node(d, None);
            }
            if let Some(h) = n.host {
                if self.host.ref_cnt(h) == 0 {
                    self.counters.evictions_host += 1;
                }
                self.host.set_node(h, None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kv::testkit::FakeRuntime;
    use crate::kv::{KvCacheConfig, KvCacheManager, SeqId, Tier};

    fn cfg(device: usize, host: usize, write_through: bool) -> KvCacheConfig {
        KvCacheConfig {
            block_size: 8,
            device_blocks: device,
            host_blocks: host,
            prefix_caching: true,
            write_through,
            bytes_per_block: 1,
        }
    }

    fn run(m: &mut KvCacheManager, rt: &mut FakeRuntime, seq: u64, prompt: &[u32]) -> usize {
        let s = m.start(SeqId(seq), prompt).unwrap();
        rt.apply(&s.plan);
        let table = m.block_table(SeqId(seq)).unwrap().to_vec();
        for (p, t) in prompt[..s.cached_tokens].iter().enumerate() {
            assert_eq!(rt.read(&table, p + 1)[p], Some(*t), "hit content at {p}");
        }
        rt.write(&table, s.cached_tokens, &prompt[s.cached_tokens..]);
        let plan = m.commit(SeqId(seq), &prompt[s.cached_tokens..]).unwrap();
        rt.apply(&plan);
        m.free(SeqId(seq)).unwrap();
        m.check_invariants().unwrap();
        s.cached_tokens
    }

    #[test]
    fn eviction_demotes_then_a_hit_promotes() {
        let mut m = KvCacheManager::new(cfg(3, 4, false)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let a: Vec<u32> = (0..17).collect();
        let b: Vec<u32> = (100..117).collect();
        run(&mut m, &mut rt, 1, &a); // a's 2 blocks cached on device
        run(&mut m, &mut rt, 2, &b); // needs 3 blocks: evicts both of a's, demoted
        let s = m.stats();
        assert_eq!(s.demotions, 2);
        assert_eq!(s.host.cached_blocks, 2);
        assert_eq!(m.peek(&a).host_tokens, 16);
        let start = m.start(SeqId(3), &a).unwrap();
        assert_eq!(start.hit.host_tokens, 16);
        assert_eq!(start.plan.promote.len(), 2);
        // pinned while seq 3 runs
        assert_eq!(m.stats().host.referenced_blocks, 2);
        m.check_invariants().unwrap();
        rt.apply(&start.plan);
        let table = m.block_table(SeqId(3)).unwrap().to_vec();
        let want: Vec<_> = a[..16].iter().map(|t| Some(*t)).collect();
        assert_eq!(rt.read(&table, 16), want);
        m.free(SeqId(3)).unwrap();
        // now on both tiers: the next eviction costs no copy
        assert_eq!(m.peek(&a).device_tokens, 16);
        // (seq 3's start demoted b's two blocks to make room for the promotions)
        let before = m.stats();
        assert_eq!(before.demotions, 4);
        run(&mut m, &mut rt, 4, &(200..217).collect::<Vec<_>>());
        let after = m.stats();
        assert_eq!(after.demotions, before.demotions);
        assert_eq!(after.evictions_device, before.evictions_device + 2);
        assert_eq!(after.promotions, 2);
        assert_eq!(m.peek(&a).host_tokens, 16);
    }

    #[test]
    fn without_host_tier_evicted_blocks_are_dropped_with_their_subtree() {
        let mut m = KvCacheManager::new(cfg(3, 0, false)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let a: Vec<u32> = (0..17).collect();
        run(&mut m, &mut rt, 1, &a);
        assert_eq!(m.stats().trie_blocks, 2);
        run(&mut m, &mut rt, 2, &(100..117).collect::<Vec<_>>());
        assert_eq!(m.peek(&a).tokens, 0);
        let s = m.stats();
        assert_eq!(s.evictions_device, 2);
        assert_eq!(s.trie_blocks, 2);
    }

    #[test]
    fn write_through_copies_at_commit_so_eviction_is_free() {
        let mut m = KvCacheManager::new(cfg(3, 4, true)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let a: Vec<u32> = (0..17).collect();
        run(&mut m, &mut rt, 1, &a);
        assert_eq!(m.stats().write_through_copies, 2);
        run(&mut m, &mut rt, 2, &(100..117).collect::<Vec<_>>());
        let s = m.stats();
        assert_eq!(s.demotions, 0);
        assert_eq!(s.evictions_device, 2);
        assert_eq!(run(&mut m, &mut rt, 3, &a), 16);
        assert_eq!(m.stats().hit_tokens_host, 16);
    }

    #[test]
    fn dropping_an_ancestor_detaches_a_running_descendant() {
        let mut m = KvCacheManager::new(cfg(4, 0, false)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let p: Vec<u32> = (0..9).collect();
        run(&mut m, &mut rt, 1, &p); // node P = p[..8], cached, unreferenced
                                     // seq 2 recomputes P (8-token prompt: no hit) and keeps a private duplicate, then commits
                                     // a new block X under P in its own block.
        m.start(SeqId(2), &p[..8]).unwrap();
        m.commit(SeqId(2), &p[..8]).unwrap();
        m.allocate(SeqId(2), 8).unwrap();
        m.commit(SeqId(2), &[100; 8]).unwrap();
        let mut x_prompt = p[..8].to_vec();
        x_prompt.extend([100; 8]);
        x_prompt.push(1);
        assert_eq!(m.peek(&x_prompt).device_tokens, 16);
        m.check_invariants().unwrap();
        // seq 3 takes the last two unreferenced blocks: P is evicted with no host tier, and X,
        // still used by seq 2, leaves the trie with it.
        m.start(SeqId(3), &(50..59).collect::<Vec<_>>()).unwrap();
        m.check_invariants().unwrap();
        assert_eq!(m.peek(&x_prompt).tokens, 0);
        assert_eq!(m.stats().trie_blocks, 0);
        assert_eq!(m.stats().device.referenced_blocks, 4);
        // seq 2 goes on; its chain is gone, so nothing more of it is cached
        m.free(SeqId(3)).unwrap();
        m.allocate(SeqId(2), 8).unwrap();
        m.commit(SeqId(2), &[7; 8]).unwrap();
        m.check_invariants().unwrap();
        assert_eq!(m.stats().trie_blocks, 0);
        m.free(SeqId(2)).unwrap();
        let d = m.stats().device;
        assert_eq!((d.free_blocks, d.cached_blocks), (4, 0));
        assert_eq!(m.pool(Tier::Device).available(), 4);
        m.check_invariants().unwrap();
    }

    /// seq 2 keeps a private copy of P and caches X under P; P is then demoted (host-only) and
    /// seq 2 ends, leaving X cached on device under a host-only parent.
    fn x_under_host_only_p(m: &mut KvCacheManager) -> Vec<u32> {
        let p: Vec<u32> = (0..9).collect();
        let mut rt = FakeRuntime::new(m.config());
        run(m, &mut rt, 1, &p);
        m.start(SeqId(2), &p[..8]).unwrap();
        m.commit(SeqId(2), &p[..8]).unwrap();
        m.allocate(SeqId(2), 8).unwrap();
        m.commit(SeqId(2), &[100; 8]).unwrap();
        run(m, &mut rt, 3, &[9, 9, 9]); // takes P's device block: P demoted
        m.free(SeqId(2)).unwrap();
        m.check_invariants().unwrap();
        let mut px = p[..8].to_vec();
        px.extend([100; 9]);
        px
    }

    #[test]
    fn demoting_a_block_whose_host_only_ancestor_is_the_lru_host_block() {
        let mut m = KvCacheManager::new(cfg(3, 1, false)).unwrap();
        let px = x_under_host_only_p(&mut m);
        let hit = m.peek(&px);
        assert_eq!((hit.host_tokens, hit.device_tokens), (8, 8));
        // three fresh blocks: the last one popped holds X, which needs the only host block, which
        // holds P: P leaves the trie, X with it, and the host block comes back free.
        let before = m.stats();
        let s = m.start(SeqId(4), &(200..217).collect::<Vec<_>>()).unwrap();
        assert!(s.plan.is_empty());
        m.check_invariants().unwrap();
        let after = m.stats();
        assert_eq!(after.trie_blocks, 0);
        assert_eq!(after.host.free_blocks, 1);
        assert_eq!(after.evictions_host, before.evictions_host + 1);
        assert_eq!(after.evictions_device, before.evictions_device + 1);
        assert_eq!(after.demotions, before.demotions);
    }

    #[test]
    fn write_through_of_a_block_whose_host_only_parent_is_evicted() {
        let mut m = KvCacheManager::new(cfg(3, 2, true)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let p: Vec<u32> = (0..9).collect();
        run(&mut m, &mut rt, 1, &p); // P on device and host (written through)
        m.start(SeqId(2), &p[..8]).unwrap();
        m.commit(SeqId(2), &p[..8]).unwrap(); // private copy, chain under P
        run(&mut m, &mut rt, 3, &(50..59).collect::<Vec<_>>()); // P's device copy dropped; Q written through
        assert_eq!(m.peek(&p).host_tokens, 8);
        // X under host-only P: its write-through takes the LRU host block, P's: both leave
        m.allocate(SeqId(2), 8).unwrap();
        let plan = m.commit(SeqId(2), &[100; 8]).unwrap();
        assert!(plan.is_empty());
        m.check_invariants().unwrap();
        assert_eq!(m.peek(&p).tokens, 0);
        assert_eq!(m.stats().trie_blocks, 1); // Q
        m.free(SeqId(2)).unwrap();
        m.check_invariants().unwrap();
        assert_eq!(m.stats().device.cached_blocks, 1);
    }
}
