//! The prefix trie: one node per cached full block, keyed by the block hash chain.
//!
//! Owns: [`PrefixTrie`], [`Node`], [`NodeId`]. A node's path from the root spells a token prefix,
//! one full block per level. A node knows where its block's K/V lives: a device copy, a host copy,
//! or both. Which blocks are referenced, and LRU order, are the pools' business.
//!
//! Invariants (checked by the manager's `check_invariants`):
//! - every node holds exactly `block_size` tokens (the trie never holds a partial block), never
//!   changes them, and sits under its parent keyed by `hasher(parent hash, tokens)`;
//! - a child key is unique under its parent. Two different blocks whose hashes collide under the
//!   same parent cannot both be cached: the first one stays and the later one is simply not cached
//!   ([`Lookup::Collision`]). Lookups compare tokens, so a collision is a miss, never a false hit;
//! - outside an operation, every node has at least one copy (a node left with none is removed
//!   together with its subtree, which has become unreachable);
//! - a [`NodeId`] carries a generation: an id kept across operations (a sequence's position in the
//!   trie) becomes dead, not wrong, when its slot is reused.
//!
//! Counterpart: SGLang's `RadixCache` / `HiRadixCache` `TreeNode` (`value` / `host_value`, one tree
//! for both tiers), paged like vLLM v1 (one node per block instead of a compressed radix edge).

use std::collections::HashMap;

use super::{BlockHash, BlockHasher, BlockId};

/// A node of the trie; dead once its slot is reused (the generation differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct NodeId {
    index: usize,
    generation: u32,
}

/// One cached full block.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// `None`: a first block, child of the root.
    pub(crate) parent: Option<NodeId>,
    pub(crate) hash: BlockHash,
    pub(crate) tokens: Box<[u32]>,
    /// The device copy, if any.
    pub(crate) device: Option<BlockId>,
    /// The host copy, if any.
    pub(crate) host: Option<BlockId>,
    pub(crate) children: HashMap<BlockHash, NodeId>,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    generation: u32,
    node: Option<Node>,
}

/// Result of looking for a child block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// A child with this hash and these tokens.
    Hit(NodeId),
    /// A child with this hash but other tokens (a hash collision).
    Collision(NodeId),
    Miss,
}

/// The tree of cached blocks.
#[derive(Debug, Clone, Default)]
pub(crate) struct PrefixTrie {
    slots: Vec<Slot>,
    vacant: Vec<usize>,
    roots: HashMap<BlockHash, NodeId>,
    len: usize,
}

impl PrefixTrie {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Live nodes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn get(&self, id: NodeId) -> Option<&Node> {
        let slot = self.slots.get(id.index)?;
        (slot.generation == id.generation)
            .then_some(slot.node.as_ref())
            .flatten()
    }

    pub(crate) fn get_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        let slot = self.slots.get_mut(id.index)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.node.as_mut()
    }

    fn children(&self, parent: Option<NodeId>) -> Option<&HashMap<BlockHash, NodeId>> {
        match parent {
            None => Some(&self.roots),
            Some(p) => self.get(p).map(|n| &n.children),
        }
    }

    /// The child of `parent` (`None`: the root) for a block with `hash` and `tokens`.
    pub(crate) fn find_child(&self, parent: Option<NodeId>, hash: BlockHash, tokens: &[u32]) -> Lookup {
        let Some(&id) = self.children(parent).and_then(|c| c.get(&hash)) else {
            return Lookup::Miss;
        };
        match self.get(id) {
            Some(n) if *n.tokens == *tokens => Lookup::Hit(id),
            Some(_) => Lookup::Collision(id),
            None => Lookup::Miss,
        }
    }

    /// The longest chain of nodes spelling the first full blocks of `tokens`, at most
    /// `max_blocks` of them. Every step compares tokens.
    pub(crate) fn match_prefix(
        &self,
        tokens: &[u32],
        block_size: usize,
        max_blocks: usize,
        hasher: BlockHasher,
    ) -> Vec<NodeId> {
        let mut path = Vec::new();
        let mut parent: Option<(NodeId, BlockHash)> = None;
        for block in tokens.chunks_exact(block_size).take(max_blocks) {
            let hash = hasher(parent.map(|p| p.1), block);
            match self.find_child(parent.map(|p| p.0), hash, block) {
                Lookup::Hit(id) => {
                    path.push(id);
                    parent = Some((id, hash));
                }
                Lookup::Collision(_) | Lookup::Miss => break,
            }
        }
        path
    }

    /// Adds a node with no copies under `parent`; `None` if the parent is dead or the key taken.
    pub(crate) fn insert(&mut self, parent: Option<NodeId>, hash: BlockHash, tokens: Box<[u32]>) -> Option<NodeId> {
        match self.children(parent) {
            Some(c) if !c.contains_key(&hash) => {}
            _ => return None,
        }
        let node = Node {
            parent,
            hash,
            tokens,
            device: None,
            host: None,
            children: HashMap::new(),
        };
        let index = match self.vacant.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
        };
        let slot = self.slots.get_mut(index)?;
        slot.node = Some(node);
        let id = NodeId {
            index,
            generation: slot.generation,
        };
        let siblings = match parent {
            None => &mut self.roots,
            Some(p) => &mut self.get_mut(p)?.children,
        };
        siblings.insert(hash, id);
        self.len += 1;
        Some(id)
    }

    /// Removes `id` and all its descendants, unlinking `id` from its parent; returns the removed
    /// nodes (their copies are the caller's to release). Dead ids remove nothing.
    pub(crate) fn remove_subtree(&mut self, id: NodeId) -> Vec<Node> {
        let Some(node) = self.get(id) else {
            return Vec::new();
        };
        let (parent, hash) = (node.parent, node.hash);
        let siblings = match parent {
            None => Some(&mut self.roots),
            Some(p) => self.get_mut(p).map(|n| &mut n.children),
        };
        if let Some(s) = siblings {
            s.remove(&hash);
        }
        let mut removed = Vec::new();
        let mut stack = vec![id];
        while let Some(id) = stack.pop() {
            let Some(slot) = self.slots.get_mut(id.index) else {
                continue;
            };
            if slot.generation != id.generation {
                continue;
            }
            let Some(node) = slot.node.take() else {
                continue;
            };
            slot.generation = slot.generation.wrapping_add(1);
            self.vacant.push(id.index);
            self.len -= 1;
            stack.extend(node.children.values().copied());
            removed.push(node);
        }
        removed
    }

    /// Live nodes with their ids (for checks).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (NodeId, &Node)> + '_ {
        self.slots.iter().enumerate().filter_map(|(index, s)| {
            s.node.as_ref().map(|n| {
                (
                    NodeId {
                        index,
                        generation: s.generation,
                    },
                    n,
                )
            })
        })
    }

    /// The first blocks' nodes (for checks).
    pub(crate) fn roots(&self) -> impl Iterator<Item = (&BlockHash, &NodeId)> + '_ {
        self.roots.iter()
    }

    /// Number of blocks from the root down to and including `id` (0 if dead); O(depth).
    pub(crate) fn depth(&self, id: NodeId) -> usize {
        let mut depth = 0;
        let mut cur = Some(id);
        while let Some(n) = cur.and_then(|c| self.get(c)) {
            depth += 1;
            cur = n.parent;
            if depth > self.len {
                break;
            }
        }
        depth
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::hash_block;

    fn add(t: &mut PrefixTrie, parent: Option<NodeId>, tokens: &[u32]) -> NodeId {
        let ph = parent.map(|p| t.get(p).unwrap().hash);
        t.insert(parent, hash_block(ph, tokens), tokens.into()).unwrap()
    }

    #[test]
    fn match_follows_the_chain_and_compares_tokens() {
        let mut t = PrefixTrie::new();
        let a = add(&mut t, None, &[1, 2]);
        let b = add(&mut t, Some(a), &[3, 4]);
        let c = add(&mut t, Some(a), &[5, 6]);
        assert_eq!(t.len(), 3);
        assert_eq!(t.match_prefix(&[1, 2, 3, 4, 9], 2, 10, hash_block), vec![a, b]);
        assert_eq!(t.match_prefix(&[1, 2, 5, 6], 2, 10, hash_block), vec![a, c]);
        assert_eq!(t.match_prefix(&[1, 2, 5, 6], 2, 1, hash_block), vec![a]);
        assert_eq!(t.match_prefix(&[1, 9, 5, 6], 2, 10, hash_block), vec![]);
        assert_eq!(t.depth(c), 2);
    }

    #[test]
    fn collisions_are_misses() {
        fn constant(_: Option<BlockHash>, _: &[u32]) -> BlockHash {
            BlockHash(7)
        }
        let mut t = PrefixTrie::new();
        let a = t.insert(None, BlockHash(7), vec![1, 2].into()).unwrap();
        assert_eq!(t.find_child(None, BlockHash(7), &[1, 2]), Lookup::Hit(a));
        assert_eq!(t.find_child(None, BlockHash(7), &[3, 4]), Lookup::Collision(a));
        assert_eq!(t.find_child(None, BlockHash(8), &[1, 2]), Lookup::Miss);
        assert_eq!(t.insert(None, BlockHash(7), vec![3, 4].into()), None);
        assert_eq!(t.match_prefix(&[3, 4, 1], 2, 1, constant), vec![]);
        assert_eq!(t.match_prefix(&[1, 2, 1], 2, 1, constant), vec![a]);
    }

    #[test]
    fn remove_subtree_kills_ids_and_unlinks() {
        let mut t = PrefixTrie::new();
        let a = add(&mut t, None, &[1, 2]);
        let b = add(&mut t, Some(a), &[3, 4]);
        let c = add(&mut t, Some(b), &[5, 6]);
        let d = add(&mut t, None, &[7, 8]);
        let removed = t.remove_subtree(b);
        assert_eq!(removed.len(), 2);
        assert!(t.get(b).is_none() && t.get(c).is_none());
        assert!(t.get(a).unwrap().children.is_empty());
        assert_eq!(t.len(), 2);
        // the slot is reused with a new generation: the old id stays dead
        let e = add(&mut t, Some(a), &[3, 4]);
        assert_ne!(e, b);
        assert!(t.get(b).is_none());
        assert!(t.remove_subtree(b).is_empty());
        assert_eq!(t.insert(Some(c), BlockHash(1), vec![0, 0].into()), None);
        assert_eq!(t.remove_subtree(a).len(), 2);
        assert_eq!(t.iter().map(|(id, _)| id).collect::<Vec<_>>(), vec![d]);
        assert_eq!(t.roots().count(), 1);
    }
}
