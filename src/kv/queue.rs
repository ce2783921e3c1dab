//! The LRU free queue of one tier: an intrusive doubly linked list over block ids.
//!
//! Owns: [`FreeQueue`]. It holds every block with no reference (free, or cached and
//! unreferenced), least recently used at the front. All operations are O(1), including removing a
//! block from the middle (a cached free block that gets hit again).
//!
//! Invariants: `prev`/`next` links are mutually consistent; walking from `head` visits exactly
//! `len` queued blocks and ends at `tail`; a block is queued at most once.
//!
//! Counterpart: vLLM v1's `FreeKVCacheBlockQueue` (links kept in side arrays here instead of in
//! the block objects, and no fake head/tail blocks: `NIL` ends the list).

use super::BlockId;

const NIL: u32 = u32::MAX;

/// Doubly linked list of the unreferenced blocks of one tier, LRU first.
#[derive(Debug, Clone)]
pub(crate) struct FreeQueue {
    prev: Vec<u32>,
    next: Vec<u32>,
    queued: Vec<bool>,
    head: u32,
    tail: u32,
    len: usize,
}

impl FreeQueue {
    /// A queue over `capacity` blocks holding all of them, in id order (`capacity < u32::MAX`).
    pub(crate) fn full(capacity: usize) -> Self {
        let mut q = Self {
            prev: vec![NIL; capacity],
            next: vec![NIL; capacity],
            queued: vec![false; capacity],
            head: NIL,
            tail: NIL,
            len: 0,
        };
        for i in 0..capacity {
            q.push_back(BlockId(i as u32));
        }
        q
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn contains(&self, id: BlockId) -> bool {
        self.queued.get(id.index()).copied().unwrap_or(false)
    }

    /// Appends `id` as the most recently used block. No-op if it is queued or out of range.
    pub(crate) fn push_back(&mut self, id: BlockId) {
        if !self.can_link(id) {
            return;
        }
        let i = id.0;
        self.prev[id.index()] = self.tail;
        self.next[id.index()] = NIL;
        match self.tail {
            NIL => self.head = i,
            t => self.next[t as usize] = i,
        }
        self.tail = i;
        self.link_done(id);
    }

    /// Prepends `id` so it is handed out first. No-op if it is queued or out of range.
    pub(crate) fn push_front(&mut self, id: BlockId) {
        if !self.can_link(id) {
            return;
        }
        let i = id.0;
        self.next[id.index()] = self.head;
        self.prev[id.index()] = NIL;
        match self.head {
            NIL => self.tail = i,
            h => self.prev[h as usize] = i,
        }
        self.head = i;
        self.link_done(id);
    }

    /// Takes the least recently used block out of the queue.
    pub(crate) fn pop_front(&mut self) -> Option<BlockId> {
        if self.head == NIL {
            return None;
        }
        let id = BlockId(self.head);
        self.remove(id);
        Some(id)
    }

    /// Takes `id` out of the queue wherever it is; returns whether it was queued.
    pub(crate) fn remove(&mut self, id: BlockId) -> bool {
        if !self.contains(id) {
            return false;
        }
        let (p, n) = (self.prev[id.index()], self.next[id.index()]);
        match p {
            NIL => self.head = n,
            p => self.next[p as usize] = n,
        }
        match n {
            NIL => self.tail = p,
            n => self.prev[n as usize] = p,
        }
        self.prev[id.index()] = NIL;
        self.next[id.index()] = NIL;
        self.queued[id.index()] = false;
        self.len -= 1;
        true
    }

    /// The queued blocks, LRU first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = BlockId> + '_ {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let id = BlockId(cur);
            cur = self.next.get(cur as usize).copied().unwrap_or(NIL);
            Some(id)
        })
        .take(self.queued.len())
    }

    /// Verifies the links (O(capacity)); Err names the first inconsistency.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut seen = 0usize;
        let mut prev = NIL;
        let mut cur = self.head;
        while cur != NIL {
            let i = cur as usize;
            if i >= self.queued.len() {
                return Err(format!("free queue links to out-of-range block {cur}"));
            }
            if !self.queued[i] {
                return Err(format!("block {cur} is linked but not marked queued"));
            }
            if self.prev[i] != prev {
                return Err(format!("block {cur}: prev link {} != {prev}", self.prev[i]));
            }
            seen += 1;
            if seen > self.queued.len() {
                return Err("free queue has a cycle".into());
            }
            prev = cur;
            cur = self.next[i];
        }
        if prev != self.tail {
            return Err(format!("free queue tail {} != last block {prev}", self.tail));
        }
        let marked = self.queued.iter().filter(|q| **q).count();
        if seen != self.len || marked != self.len {
            return Err(format!(
                "free queue len {} but {seen} linked and {marked} marked",
                self.len
            ));
        }
        Ok(())
    }

    fn can_link(&self, id: BlockId) -> bool {
        id.index() < self.queued.len() && !self.queued[id.index()]
    }

    fn link_done(&mut self, id: BlockId) {
        self.queued[id.index()] = true;
        self.len += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(q: &FreeQueue) -> Vec<u32> {
        q.iter().map(|b| b.0).collect()
    }

    #[test]
    fn starts_full_in_id_order() {
        let q = FreeQueue::full(4);
        assert_eq!(ids(&q), vec![0, 1, 2, 3]);
        assert_eq!(q.len(), 4);
        q.check().unwrap();
    }

    #[test]
    fn pop_push_and_remove_from_the_middle() {
        let mut q = FreeQueue::full(5);
        assert_eq!(q.pop_front(), Some(BlockId(0)));
        assert!(q.remove(BlockId(2)));
        assert!(!q.remove(BlockId(2)));
        assert_eq!(ids(&q), vec![1, 3, 4]);
        q.push_back(BlockId(2));
        q.push_front(BlockId(0));
        assert_eq!(ids(&q), vec![0, 1, 3, 4, 2]);
        q.push_back(BlockId(2)); // already queued: no-op
        q.push_back(BlockId(99)); // out of range: no-op
        assert_eq!(q.len(), 5);
        assert!(q.remove(BlockId(2)));
        assert!(q.remove(BlockId(0)));
        assert_eq!(ids(&q), vec![1, 3, 4]);
        q.check().unwrap();
        while q.pop_front().is_some() {}
        assert_eq!(q.len(), 0);
        assert_eq!(q.pop_front(), None);
        q.check().unwrap();
        q.push_front(BlockId(3));
        assert_eq!(ids(&q), vec![3]);
        q.check().unwrap();
    }

    #[test]
    fn empty_capacity() {
        let mut q = FreeQueue::full(0);
        assert_eq!(q.pop_front(), None);
        q.check().unwrap();
    }
}
