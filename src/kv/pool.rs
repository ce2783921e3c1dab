//! The block pool of one tier: reference counts, which trie node a block holds, the free queue.
//!
//! Owns: [`BlockPool`]. Each block is in exactly one of three states:
//!
//! - *free*: no reference, no content (`node == None`); queued;
//! - *cached*: no reference, holds a trie node's copy (`node == Some`); queued, content kept until
//!   the block is handed out again (lazy eviction);
//! - *referenced*: `ref_cnt > 0` (device: used by running sequences; host: pinned as the source of
//!   a pending promotion); not queued; may or may not hold a node.
//!
//! Invariants: free + cached + referenced = capacity (the counters `referenced` and `cached` are
//! kept in step, so [`BlockPool::counts`] is O(1)); a block is queued iff its `ref_cnt` is 0.
//! Within one manager operation a block taken with [`BlockPool::pop_lru`] is briefly "in hand"
//! (unqueued, unreferenced, no node) until [`BlockPool::incref`] or [`BlockPool::park`]; it counts
//! as free meanwhile.
//!
//! Empty blocks are queued at the front (handed out first: nothing is lost by reusing them),
//! cached ones at the back (most recently used last).
//!
//! Counterpart: vLLM v1's `BlockPool` (`get_new_blocks`, `touch`, `free_blocks`,
//! `_maybe_evict_cached_block`); the hash → block map lives in the trie here.

use super::trie::NodeId;
use super::{BlockId, FreeQueue, Tier};

#[derive(Debug, Clone, Copy, Default)]
struct BlockMeta {
    ref_cnt: u32,
    node: Option<NodeId>,
}

/// Free / cached / referenced block counts of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolCounts {
    pub(crate) free: usize,
    pub(crate) cached: usize,
    pub(crate) referenced: usize,
}

/// The blocks of one tier.
#[derive(Debug, Clone)]
pub(crate) struct BlockPool {
    tier: Tier,
    meta: Vec<BlockMeta>,
    queue: FreeQueue,
    referenced: usize,
    cached: usize,
}

impl BlockPool {
    /// `capacity` free blocks (`capacity < u32::MAX`).
    pub(crate) fn new(tier: Tier, capacity: usize) -> Self {
        Self {
            tier,
            meta: vec![BlockMeta::default(); capacity],
            queue: FreeQueue::full(capacity),
            referenced: 0,
            cached: 0,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.meta.len()
    }

    /// Blocks that can be handed out now: free or cached-unreferenced.
    pub(crate) fn available(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn counts(&self) -> PoolCounts {
        PoolCounts {
            free: self.capacity() - self.referenced - self.cached,
            cached: self.cached,
            referenced: self.referenced,
        }
    }

    pub(crate) fn ref_cnt(&self, id: BlockId) -> u32 {
        self.meta.get(id.index()).map_or(0, |m| m.ref_cnt)
    }

    /// The trie node whose copy `id` holds.
    pub(crate) fn node(&self, id: BlockId) -> Option<NodeId> {
        self.meta.get(id.index()).and_then(|m| m.node)
    }

    /// Takes the least recently used unreferenced block out of the queue and forgets its node,
    /// which is returned so the caller can drop or move that node's copy. The block is "in hand"
    /// until [`incref`](Self::incref) or [`park`](Self::park).
    pub(crate) fn pop_lru(&mut self) -> Option<(BlockId, Option<NodeId>)> {
        let id = self.queue.pop_front()?;
        let m = self.meta.get_mut(id.index())?;
        let old = m.node.take();
        if old.is_some() {
            self.cached -= 1;
        }
        Some((id, old))
    }

    /// Adds a reference; a block that had none leaves the queue.
    pub(crate) fn incref(&mut self, id: BlockId) {
        let Some(m) = self.meta.get_mut(id.index()) else {
            return;
        };
        if m.ref_cnt == 0 {
            if self.queue.remove(id) && m.node.is_some() {
                self.cached -= 1;
            }
            self.referenced += 1;
        }
        m.ref_cnt += 1;
    }

    /// Drops a reference; a block left with none is queued: at the back if it holds a node
    /// (cached), at the front if it is empty.
    pub(crate) fn decref(&mut self, id: BlockId) {
        let Some(m) = self.meta.get_mut(id.index()) else {
            return;
        };
        if m.ref_cnt == 0 {
            return;
        }
        m.ref_cnt -= 1;
        if m.ref_cnt == 0 {
            self.referenced -= 1;
            self.park(id);
        }
    }

    /// Queues an unreferenced block that is in hand: cached at the back, empty at the front.
    pub(crate) fn park(&mut self, id: BlockId) {
        let Some(m) = self.meta.get(id.index()) else {
            return;
        };
        if m.ref_cnt > 0 || self.queue.contains(id) {
            return;
        }
        if m.node.is_some() {
            self.cached += 1;
            self.queue.push_back(id);
        } else {
            self.queue.push_front(id);
        }
    }

    /// Records which node's copy `id` holds. A queued block that loses its node becomes free and
    /// moves to the front of the queue.
    pub(crate) fn set_node(&mut self, id: BlockId, node: Option<NodeId>) {
        let Some(m) = self.meta.get_mut(id.index()) else {
            return;
        };
        let old = std::mem::replace(&mut m.node, node);
        if m.ref_cnt > 0 || !self.queue.contains(id) {
            return;
        }
        match (old.is_some(), node.is_some()) {
            (true, false) => {
                self.cached -= 1;
                self.queue.remove(id);
                self.queue.push_front(id);
            }
            (false, true) => self.cached += 1,
            _ => {}
        }
    }

    /// Verifies the counters and the queue against the blocks (O(capacity)).
    pub(crate) fn check(&self) -> Result<(), String> {
        let tier = self.tier;
        self.queue.check().map_err(|e| format!("{tier}: {e}"))?;
        let (mut referenced, mut cached) = (0, 0);
        for (i, m) in self.meta.iter().enumerate() {
            let queued = self.queue.contains(BlockId(i as u32));
            if (m.ref_cnt == 0) != queued {
                return Err(format!("{tier} block {i}: ref_cnt {} but queued = {queued}", m.ref_cnt));
            }
            if m.ref_cnt > 0 {
                referenced += 1;
            } else if m.node.is_some() {
                cached += 1;
            }
        }
        if referenced != self.referenced || cached != self.cached {
            return Err(format!(
                "{tier}: counters say {} referenced / {} cached, blocks say {referenced} / {cached}",
                self.referenced, self.cached
            ));
        }
        Ok(())
    }

    /// The queued blocks, LRU first (for checks).
    pub(crate) fn queued(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.queue.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::super::trie::PrefixTrie;
    use super::*;
    use crate::kv::BlockHash;

    fn some_node() -> NodeId {
        let mut t = PrefixTrie::new();
        t.insert(None, BlockHash(1), vec![1].into()).unwrap()
    }

    #[test]
    fn counts_follow_references_and_content() {
        let mut p = BlockPool::new(Tier::Device, 3);
        let c = |p: &BlockPool| (p.counts().free, p.counts().cached, p.counts().referenced);
        assert_eq!(c(&p), (3, 0, 0));
        let (b, old) = p.pop_lru().unwrap();
        assert_eq!((b, old), (BlockId(0), None));
        p.incref(b);
        p.incref(b);
        assert_eq!(c(&p), (2, 0, 1));
        let n = some_node();
        p.set_node(b, Some(n));
        p.decref(b);
        assert_eq!(c(&p), (2, 0, 1));
        p.decref(b);
        assert_eq!(c(&p), (2, 1, 0));
        // cached blocks go to the back: 1, 2, 0
        assert_eq!(p.queued().map(|b| b.0).collect::<Vec<_>>(), vec![1, 2, 0]);
        // a hit takes it out of the middle of the queue
        p.incref(b);
        assert_eq!(c(&p), (2, 0, 1));
        p.decref(b);
        p.check().unwrap();
        // losing its node frees it and moves it to the front
        p.set_node(b, None);
        assert_eq!(c(&p), (3, 0, 0));
        assert_eq!(p.queued().map(|b| b.0).collect::<Vec<_>>(), vec![0, 1, 2]);
        p.check().unwrap();
        p.decref(b); // no reference: ignored
        p.check().unwrap();
    }

    #[test]
    fn pop_lru_returns_the_evicted_node() {
        let mut p = BlockPool::new(Tier::Host, 1);
        let (b, _) = p.pop_lru().unwrap();
        let n = some_node();
        p.set_node(b, Some(n));
        p.park(b);
        assert_eq!(p.counts().cached, 1);
        assert_eq!(p.pop_lru(), Some((b, Some(n))));
        assert_eq!(p.node(b), None);
        assert_eq!(p.pop_lru(), None);
        p.park(b);
        assert_eq!(p.counts().free, 1);
        p.check().unwrap();
    }
}
