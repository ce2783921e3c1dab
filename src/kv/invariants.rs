//! The full consistency check of the manager, for tests and debugging.
//!
//! Owns: [`KvCacheManager::check_invariants`]. It scans everything (O(capacity + trie + sequence
//! blocks)); nothing on the hot path calls it.
//!
//! Invariants checked:
//! - per tier: free + cached-unreferenced + referenced = capacity, the counters match the blocks,
//!   the free queue is well linked and holds exactly the unreferenced blocks;
//! - every block's reference count equals the number of running sequences holding it (device) or
//!   pinning it (host); a referenced device block outside the trie has exactly one holder;
//! - trie: every node holds `block_size` tokens, has at least one copy, is keyed under its parent
//!   by `hasher(parent hash, tokens)`, is reachable from the root; node and block agree on every
//!   copy in both directions; with prefix caching off the trie is empty;
//! - sequences: `blocks.len() == ceil(reserved / block_size)`, `committed <= reserved`, no block
//!   twice, the pending partial block has `committed % block_size` tokens, and a cached block at
//!   table index `i` is a node at depth `i + 1`.
//!
//! Counterpart: vLLM's `FreeKVCacheBlockQueue` consistency tests, SGLang's `_check_tree` helpers.

use std::collections::{HashMap, HashSet};

use super::{BlockId, KvCacheManager, Tier};

impl KvCacheManager {
    /// Checks every invariant listed in `invariants.rs`; Err describes the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        let bs = self.cfg.block_size;
        for tier in [Tier::Device, Tier::Host] {
            let pool = self.pool(tier);
            pool.check()?;
            let c = pool.counts();
            if c.free + c.cached + c.referenced != pool.capacity() {
                return Err(format!("{tier}: {c:?} does not add up to {}", pool.capacity()));
            }
            if pool.capacity() != self.cfg.capacity(tier) {
                return Err(format!("{tier}: capacity {} != config", pool.capacity()));
            }
            if pool.queued().count() != pool.available() {
                return Err(format!("{tier}: queue iteration disagrees with its length"));
            }
        }
        self.check_trie()?;

        let mut device_refs: HashMap<BlockId, u32> = HashMap::new();
        let mut host_refs: HashMap<BlockId, u32> = HashMap::new();
        for (seq, st) in &self.seqs {
            if st.blocks.len() != self.cfg.blocks_for(st.reserved) {
                return Err(format!(
                    "{seq}: {} blocks for {} reserved tokens",
                    st.blocks.len(),
                    st.reserved
                ));
            }
            if st.committed > st.reserved {
                return Err(format!("{seq}: {} committed > {} reserved", st.committed, st.reserved));
            }
            if self.cfg.prefix_caching && st.partial.len() != st.committed % bs {
                return Err(format!(
                    "{seq}: partial block has {} tokens, expected {}",
                    st.partial.len(),
                    st.committed % bs
                ));
            }
            let mut own = HashSet::new();
            for (i, &b) in st.blocks.iter().enumerate() {
                if !own.insert(b) {
                    return Err(format!("{seq}: {b} appears twice in its block table"));
                }
                *device_refs.entry(b).or_default() += 1;
                if let Some(node) = self.device.node(b) {
                    let depth = self.trie.depth(node);
                    if depth != i + 1 {
                        return Err(format!("{seq}: cached {b} at index {i} is a node at depth {depth}"));
                    }
                }
            }
            for &h in &st.host_pins {
                *host_refs.entry(h).or_default() += 1;
            }
        }
        for (tier, refs) in [(Tier::Device, &device_refs), (Tier::Host, &host_refs)] {
            let pool = self.pool(tier);
            for i in 0..pool.capacity() {
                let b = BlockId(i as u32);
                let expected = refs.get(&b).copied().unwrap_or(0);
                if pool.ref_cnt(b) != expected {
                    return Err(format!(
                        "{tier} {b}: ref_cnt {} but {expected} holders",
                        pool.ref_cnt(b)
                    ));
                }
                if tier == Tier::Device && expected > 1 && pool.node(b).is_none() {
                    return Err(format!("{tier} {b}: shared by {expected} sequences but not cached"));
                }
                if let Some(node) = pool.node(b) {
                    let copy = self.trie.get(node).and_then(|n| match tier {
                        Tier::Device => n.device,
                        Tier::Host => n.host,
                    });
                    if copy != Some(b) {
                        return Err(format!("{tier} {b}: holds a node whose {tier} copy is {copy:?}"));
                    }
                }
            }
        }
        Ok(())
    }

    fn check_trie(&self) -> Result<(), String> {
        let bs = self.cfg.block_size;
        if !self.cfg.prefix_caching && self.trie.len() > 0 {
            return Err(format!(
                "prefix caching is off but the trie has {} nodes",
                self.trie.len()
            ));
        }
        let mut live = 0;
        for (id, n) in self.trie.iter() {
            live += 1;
            if n.tokens.len() != bs {
                return Err(format!("node {id:?} holds {} tokens, not {bs}", n.tokens.len()));
            }
            if n.device.is_none() && n.host.is_none() {
                return Err(format!("node {id:?} has no copy in any tier"));
            }
            if let Some(d) = n.device {
                if self.device.node(d) != Some(id) {
                    return Err(format!("node {id:?}: device {d} does not point back"));
                }
            }
            if let Some(h) = n.host {
                if self.host.node(h) != Some(id) {
                    return Err(format!("node {id:?}: host {h} does not point back"));
                }
            }
            let parent_hash = match n.parent {
                None => None,
                Some(p) => {
                    let parent = self.trie.get(p).ok_or(format!("node {id:?}: dead parent"))?;
                    if parent.children.get(&n.hash) != Some(&id) {
                        return Err(format!("node {id:?}: not linked from its parent"));
                    }
                    Some(parent.hash)
                }
            };
            if n.parent.is_none() && self.trie.roots().all(|(h, r)| (*h, *r) != (n.hash, id)) {
                return Err(format!("node {id:?}: not linked from the root"));
            }
            if (self.hasher)(parent_hash, &n.tokens) != n.hash {
                return Err(format!("node {id:?}: hash does not match its tokens and parent"));
            }
            for (h, c) in &n.children {
                let child = self.trie.get(*c).ok_or(format!("node {id:?}: dead child"))?;
                if child.parent != Some(id) || child.hash != *h {
                    return Err(format!("node {id:?}: child {c:?} disagrees on parent or key"));
                }
            }
        }
        if live != self.trie.len() {
            return Err(format!("trie counts {} nodes, {live} live", self.trie.len()));
        }
        let mut reachable = 0;
        let mut stack: Vec<_> = self.trie.roots().map(|(_, id)| *id).collect();
        while let Some(id) = stack.pop() {
            reachable += 1;
            if reachable > live {
                return Err("trie has a cycle".into());
            }
            if let Some(n) = self.trie.get(id) {
                stack.extend(n.children.values().copied());
            }
        }
        if reachable != live {
            return Err(format!("{} of {live} trie nodes are unreachable", live - reachable));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::kv::{BlockId, KvCacheConfig, KvCacheManager, SeqId};

    /// A manager with one running sequence and two cached blocks.
    fn busy() -> KvCacheManager {
        let mut m = KvCacheManager::new(KvCacheConfig {
            block_size: 8,
            device_blocks: 6,
            host_blocks: 2,
            ..Default::default()
        })
        .unwrap();
        m.start(SeqId(1), &(0..20).collect::<Vec<_>>()).unwrap();
        m.commit(SeqId(1), &(0..20).collect::<Vec<_>>()).unwrap();
        m.check_invariants().unwrap();
        m
    }

    #[test]
    fn detects_a_reference_nobody_holds() {
        let mut m = busy();
        m.device.incref(BlockId(5));
        let e = m.check_invariants().unwrap_err();
        assert!(e.contains("ref_cnt 1 but 0 holders"), "{e}");
    }

    #[test]
    fn detects_a_node_and_block_that_disagree() {
        let mut m = busy();
        let id = m.trie.iter().map(|(id, _)| id).next().unwrap();
        m.trie.get_mut(id).unwrap().device = None;
        assert!(m.check_invariants().is_err());
    }

    #[test]
    fn detects_tokens_that_do_not_match_the_hash() {
        let mut m = busy();
        let id = m.trie.iter().map(|(id, _)| id).next().unwrap();
        m.trie.get_mut(id).unwrap().tokens[0] += 1;
        let e = m.check_invariants().unwrap_err();
        assert!(e.contains("hash"), "{e}");
    }

    #[test]
    fn detects_a_block_table_that_lost_a_block() {
        let mut m = busy();
        m.seqs.get_mut(&SeqId(1)).unwrap().blocks.pop();
        assert!(m.check_invariants().is_err());
    }
}
