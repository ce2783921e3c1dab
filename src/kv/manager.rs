//! The KV cache manager: the engine's single entry point to the cache.
//!
//! Owns: [`KvCacheManager`]: the device and host [`BlockPool`]s, the [`PrefixTrie`], the running
//! sequences and the counters. It answers in its own types ([`SeqStart`], [`CopyPlan`],
//! [`CacheStats`]); the engine never sees pool or trie internals.
//!
//! Life of a sequence: [`start`](KvCacheManager::start) (match the cached prefix, reference it,
//! promote host hits, allocate the rest of the prompt) → [`commit`](KvCacheManager::commit) the
//! prefill and each generated token, [`allocate`](KvCacheManager::allocate) before each decode
//! step → [`free`](KvCacheManager::free).
//!
//! Policy:
//! - a hit takes a device reference on every block of the matched path; a block referenced by a
//!   running sequence is never evicted or reused;
//! - device allocation pops the LRU unreferenced device block (see `tiers.rs` for what happens to
//!   the node it held: drop if backed up on host, else demote, else the node leaves the trie);
//! - on commit, a block equal to an existing node is not duplicated: if that node has no device
//!   copy, it adopts this block; otherwise this block stays private to the sequence and is freed
//!   empty. Under a hash collision (same hash, other tokens) the block is not cached, nor is the
//!   rest of that sequence;
//! - `free` releases blocks last-first, so a sequence's tail is evicted before its head;
//! - every operation is all-or-nothing: capacity is checked before anything changes.
//!
//! Counterpart: vLLM v1's `KVCacheManager` (`get_computed_blocks`, `allocate_slots`,
//! `cache_blocks`, `free`), SGLang's `HiRadixCache` (`match_prefix`, `load_back`, `write_backup`).

use std::collections::HashMap;

use super::seq::{Chain, SeqState};
use super::stats::Counters;
use super::trie::{Lookup, NodeId, PrefixTrie};
use super::{
    hash_block, BlockHash, BlockHasher, BlockId, BlockPool, CacheStats, CopyPlan, KvCacheConfig, KvError, PrefixMatch, SeqId,
    SeqStart, Tier, TierStats,
};

/// Bookkeeping of the paged KV cache over a device tier and a host tier.
#[derive(Debug, Clone)]
pub struct KvCacheManager {
    pub(crate) cfg: KvCacheConfig,
    pub(crate) hasher: BlockHasher,
    pub(crate) device: BlockPool,
    pub(crate) host: BlockPool,
    pub(crate) trie: PrefixTrie,
    pub(crate) seqs: HashMap<SeqId, SeqState>,
    pub(crate) counters: Counters,
}

impl KvCacheManager {
    /// A manager with every block free, hashing blocks with [`hash_block`].
    pub fn new(cfg: KvCacheConfig) -> Result<Self, KvError> {
        Self::with_hasher(cfg, hash_block)
    }

    /// For tests: a custom block hasher, e.g. one that always returns the same hash.
    pub fn with_hasher(cfg: KvCacheConfig, hasher: BlockHasher) -> Result<Self, KvError> {
        cfg.validate()?;
        Ok(Self {
            device: BlockPool::new(Tier::Device, cfg.device_blocks),
            host: BlockPool::new(Tier::Host, cfg.host_blocks),
            cfg,
            hasher,
            trie: PrefixTrie::new(),
            seqs: HashMap::new(),
            counters: Counters::default(),
        })
    }

    pub fn config(&self) -> &KvCacheConfig {
        &self.cfg
    }

    /// Read-only: the longest cached prefix of `tokens`, in full blocks and at most
    /// `tokens.len() - 1` tokens (the last token is always recomputed so the forward has logits
    /// for it). Changes nothing, not even LRU order or stats.
    pub fn peek(&self, tokens: &[u32]) -> PrefixMatch {
        self.peek_at(tokens, &|_| true)
    }

    /// [`Self::peek`] under [`Self::start_at`]'s rule: the prefix ends at the deepest matched
    /// block whose hash `ends` accepts (none: no prefix).
    pub fn peek_at(&self, tokens: &[u32], ends: &dyn Fn(BlockHash) -> bool) -> PrefixMatch {
        let bs = self.cfg.block_size;
        let path = self.held_path(self.match_path(tokens));
        let mut m = PrefixMatch::default();
        for &(_, device, _) in &path[..self.prefix_end(&path, ends)] {
            m.tokens += bs;
            match device {
                Some(_) => m.device_tokens += bs,
                None => m.host_tokens += bs,
            }
        }
        m
    }

    /// Read-only: the blocks of the prefix [`peek`](Self::peek) matches, in order, each with the
    /// tier it would be served from (its device copy if it has one, else its host copy).
    pub fn lookup(&self, tokens: &[u32]) -> Vec<(Tier, BlockId)> {
        self.held_path(self.match_path(tokens))
            .into_iter()
            .filter_map(|(_, device, host)| match (device, host) {
                (Some(d), _) => Some((Tier::Device, d)),
                (None, h) => h.map(|h| (Tier::Host, h)),
            })
            .collect()
    }

    /// The nodes of `matched` while each holds a copy of its block (device, host, or both):
    /// `(node, device copy, host copy)`.
    fn held_path(&self, matched: Vec<NodeId>) -> Vec<(NodeId, Option<BlockId>, Option<BlockId>)> {
        matched
            .into_iter()
            .map_while(|id| {
                let n = self.trie.get(id)?;
                (n.device.is_some() || n.host.is_some()).then_some((id, n.device, n.host))
            })
            .collect()
    }

    /// How many blocks of `path` a cached prefix takes: up to the deepest whose hash `ends`
    /// accepts (0: none does).
    fn prefix_end(&self, path: &[(NodeId, Option<BlockId>, Option<BlockId>)], ends: &dyn Fn(BlockHash) -> bool) -> usize {
        path.iter()
            .rposition(|&(id, _, _)| self.trie.get(id).is_some_and(|n| ends(n.hash)))
            .map_or(0, |i| i + 1)
    }

    pub(crate) fn match_path(&self, tokens: &[u32]) -> Vec<NodeId> {
        if !self.cfg.prefix_caching {
            return Vec::new();
        }
        let bs = self.cfg.block_size;
        let max_blocks = tokens.len().saturating_sub(1) / bs;
        self.trie.match_prefix(tokens, bs, max_blocks, self.hasher)
    }

    /// Starts `seq` with its prompt: matches the longest cached prefix (as [`peek`](Self::peek)),
    /// takes references on the matched blocks, allocates device blocks for host hits and plans
    /// their promotion, and allocates device blocks for the rest of the prompt. Counts lookup
    /// stats. All-or-nothing: on error (e.g. not enough free device blocks) nothing has changed,
    /// stats included.
    ///
    /// The caller runs `plan`, then prefills `prompt[cached_tokens..]` and commits those tokens.
    pub fn start(&mut self, seq: SeqId, prompt: &[u32]) -> Result<SeqStart, KvError> {
        self.start_reusing(seq, prompt, true)
    }

    /// [`Self::start`]; with `reuse` false the cached prefix is not used (every block is
    /// fresh and every token is computed), though the blocks enter the trie as usual when
    /// committed: a request that needs the logits of every prompt position.
    pub fn start_reusing(&mut self, seq: SeqId, prompt: &[u32], reuse: bool) -> Result<SeqStart, KvError> {
        self.start_at(seq, prompt, reuse, &|_| true)
    }

    /// [`Self::start_reusing`], where the cached prefix may end only at a block whose hash
    /// `ends` accepts (the longest such; none: no prefix): a model with recurrent layers takes
    /// a prefix only where a copy of its state was kept (`engine::states`).
    pub fn start_at(
        &mut self,
        seq: SeqId,
        prompt: &[u32],
        reuse: bool,
        ends: &dyn Fn(BlockHash) -> bool,
    ) -> Result<SeqStart, KvError> {
        if self.seqs.contains_key(&seq) {
            return Err(KvError::DuplicateSeq(seq));
        }
        if prompt.is_empty() {
            return Err(KvError::EmptyPrompt(seq));
        }
        let bs = self.cfg.block_size;
        let matched = if reuse { self.match_path(prompt) } else { Vec::new() };
        let mut path = self.held_path(matched);
        let matched_tokens = path.len() * bs;
        path.truncate(self.prefix_end(&path, ends));
        let host_hits = path.iter().filter(|p| p.1.is_none()).count();
        let unreferenced_device_hits = path
            .iter()
            .filter(|p| p.1.is_some_and(|d| self.device.ref_cnt(d) == 0))
            .count();
        let fresh = self.cfg.blocks_for(prompt.len()) - path.len();
        let needed = host_hits + fresh;
        let available = self.device.available() - unreferenced_device_hits;
        if needed > available {
            return Err(KvError::NoFreeBlocks {
                tier: Tier::Device,
                needed,
                available,
            });
        }

        // From here on nothing fails: the matched blocks are protected first (device references,
        // host pins), so making room below can never evict them.
        let mut plan = CopyPlan::default();
        let mut host_pins = Vec::with_capacity(host_hits);
        for &(_, device, host) in &path {
            match (device, host) {
                (Some(d), _) => self.device.incref(d),
                (None, Some(h)) => {
                    self.host.incref(h);
                    host_pins.push(h);
                }
                (None, None) => {}
            }
        }
        let mut blocks = Vec::with_capacity(path.len() + fresh);
        for &(id, device, host) in &path {
            let d = match (device, host) {
                (Some(d), _) => d,
                (None, Some(h)) => {
                    let d = self.alloc_device(&mut plan)?;
                    self.device.set_node(d, Some(id));
                    if let Some(n) = self.trie.get_mut(id) {
                        n.device = Some(d);
                    }
                    plan.promote.push((h, d));
                    self.counters.promotions += 1;
                    d
                }
                (None, None) => continue,
            };
            blocks.push(d);
        }
        for _ in 0..fresh {
            blocks.push(self.alloc_device(&mut plan)?);
        }

        let cached_tokens = path.len() * bs;
        let hit = PrefixMatch {
            tokens: cached_tokens,
            device_tokens: (path.len() - host_hits) * bs,
            host_tokens: host_hits * bs,
            disk_tokens: 0,
        };
        self.counters.lookups += 1;
        self.counters.prompt_tokens += prompt.len() as u64;
        self.counters.hit_tokens_device += hit.device_tokens as u64;
        self.counters.hit_tokens_host += hit.host_tokens as u64;
        let chain = path.last().map_or(Chain::Root, |p| Chain::Node(p.0));
        self.seqs.insert(
            seq,
            SeqState {
                blocks,
                reserved: prompt.len(),
                committed: cached_tokens,
                chain,
                partial: Vec::with_capacity(if self.cfg.prefix_caching { bs } else { 0 }),
                host_pins,
            },
        );
        Ok(SeqStart {
            cached_tokens,
            matched_tokens,
            hit,
            plan,
        })
    }

    /// Where `seq`'s cached chain ends: the tokens up to the end of its last full block in the
    /// trie, and that block's hash; `None` before its first full block, without prefix caching,
    /// or once its chain has left the trie.
    pub fn chain_end(&self, seq: SeqId) -> Option<(usize, BlockHash)> {
        let st = self.seqs.get(&seq)?;
        match st.chain {
            Chain::Node(id) => self.trie.get(id).map(|n| (st.committed - st.partial.len(), n.hash)),
            Chain::Root | Chain::Broken => None,
        }
    }

    /// The hash of `seq`'s cached block that ends after `tokens` tokens (a multiple of the
    /// block size, within its chain); `None` where its chain does not reach that far.
    pub fn block_hash_at(&self, seq: SeqId, tokens: usize) -> Option<BlockHash> {
        let st = self.seqs.get(&seq)?;
        let Chain::Node(mut id) = st.chain else {
            return None;
        };
        let bs = self.cfg.block_size;
        let mut end = st.committed - st.partial.len();
        while end > tokens {
            id = self.trie.get(id)?.parent?;
            end -= bs;
        }
        (end == tokens).then(|| self.trie.get(id).map(|n| n.hash)).flatten()
    }

    /// Makes room for `n` more tokens of `seq` beyond those already reserved (e.g. each decode
    /// step), allocating device blocks as needed. All-or-nothing.
    pub fn allocate(&mut self, seq: SeqId, n: usize) -> Result<CopyPlan, KvError> {
        let st = self.seqs.get(&seq).ok_or(KvError::UnknownSeq(seq))?;
        let reserved = st.reserved.saturating_add(n);
        let needed = self.cfg.blocks_for(reserved).saturating_sub(st.blocks.len());
        let available = self.device.available();
        if needed > available {
            return Err(KvError::NoFreeBlocks {
                tier: Tier::Device,
                needed,
                available,
            });
        }
        let mut plan = CopyPlan::default();
        let mut fresh = Vec::with_capacity(needed);
        for _ in 0..needed {
            fresh.push(self.alloc_device(&mut plan)?);
        }
        if let Some(st) = self.seqs.get_mut(&seq) {
            st.blocks.extend(fresh);
            st.reserved = reserved;
        }
        Ok(plan)
    }

    /// Records that the K/V of `tokens` (the next tokens of `seq`, prompt or generated) is now
    /// written in its blocks. Each block that becomes full is committed into the trie (with prefix
    /// caching) so that later requests, and the next turn of a chat, hit it. With `write_through`
    /// the returned plan copies newly cached blocks to host. Errors if the tokens exceed what was
    /// reserved.
    pub fn commit(&mut self, seq: SeqId, tokens: &[u32]) -> Result<CopyPlan, KvError> {
        let st = self.seqs.get(&seq).ok_or(KvError::UnknownSeq(seq))?;
        if st.committed + tokens.len() > st.reserved {
            return Err(KvError::CommitOverflow {
                seq,
                reserved: st.reserved,
                committed: st.committed,
                adding: tokens.len(),
            });
        }
        let mut plan = CopyPlan::default();
        let Some(mut st) = self.seqs.remove(&seq) else {
            return Err(KvError::UnknownSeq(seq));
        };
        if !self.cfg.prefix_caching {
            st.committed += tokens.len();
        } else {
            let bs = self.cfg.block_size;
            let mut rest = tokens;
            while !rest.is_empty() {
                let take = (bs - st.partial.len()).min(rest.len());
                st.partial.extend_from_slice(&rest[..take]);
                st.committed += take;
                rest = &rest[take..];
                if st.partial.len() == bs {
                    if let Some(&block) = st.blocks.get(st.committed / bs - 1) {
                        self.cache_block(&mut st, block, &mut plan);
                    }
                    st.partial.clear();
                }
            }
        }
        self.seqs.insert(seq, st);
        Ok(plan)
    }

    /// Puts the full block `block` of `st` (tokens in `st.partial`) into the trie.
    fn cache_block(&mut self, st: &mut SeqState, block: BlockId, plan: &mut CopyPlan) {
        let parent = match st.chain {
            Chain::Broken => return,
            Chain::Root => None,
            Chain::Node(p) => Some(p),
        };
        let parent_hash = match parent {
            None => None,
            Some(p) => match self.trie.get(p) {
                Some(n) => Some(n.hash),
                None => {
                    st.chain = Chain::Broken;
                    return;
                }
            },
        };
        let hash = (self.hasher)(parent_hash, &st.partial);
        match self.trie.find_child(parent, hash, &st.partial) {
            Lookup::Hit(existing) => {
                if let Some(n) = self.trie.get_mut(existing) {
                    if n.device.is_none() {
                        n.device = Some(block);
                        self.device.set_node(block, Some(existing));
                    }
                }
                st.chain = Chain::Node(existing);
            }
            Lookup::Collision(_) => st.chain = Chain::Broken,
            Lookup::Miss => {
                let Some(id) = self.trie.insert(parent, hash, st.partial.as_slice().into()) else {
                    st.chain = Chain::Broken;
                    return;
                };
                if let Some(n) = self.trie.get_mut(id) {
                    n.device = Some(block);
                }
                self.device.set_node(block, Some(id));
                st.chain = Chain::Node(id);
                if self.cfg.write_through {
                    self.write_through(id, block, plan);
                }
            }
        }
    }

    /// Ends `seq`: drops its references; its blocks go to the free queue last-first (so a
    /// sequence's last blocks are evicted before its first), cached ones keeping their content
    /// until reused (lazy eviction), the others free at once.
    pub fn free(&mut self, seq: SeqId) -> Result<(), KvError> {
        let st = self.seqs.remove(&seq).ok_or(KvError::UnknownSeq(seq))?;
        for &b in st.blocks.iter().rev() {
            self.device.decref(b);
        }
        for &h in &st.host_pins {
            self.host.decref(h);
        }
        Ok(())
    }

    /// The device blocks of `seq` in order (its block table): token `p` lives in
    /// `block_table[p / block_size]` at row `p % block_size`.
    pub fn block_table(&self, seq: SeqId) -> Option<&[BlockId]> {
        self.seqs.get(&seq).map(|s| s.blocks.as_slice())
    }

    /// Tokens of `seq` committed so far (including its cached prefix).
    pub fn num_tokens(&self, seq: SeqId) -> Option<usize> {
        self.seqs.get(&seq).map(|s| s.committed)
    }

    /// Tokens `seq` has room for (its prompt plus every `allocate`).
    pub fn num_reserved(&self, seq: SeqId) -> Option<usize> {
        self.seqs.get(&seq).map(|s| s.reserved)
    }

    /// Whether `seq` is running (started and not freed).
    pub fn contains(&self, seq: SeqId) -> bool {
        self.seqs.contains_key(&seq)
    }

    /// Blocks of `tier` that can be handed out now (free plus cached-unreferenced). O(1).
    pub fn available_blocks(&self, tier: Tier) -> usize {
        self.pool(tier).available()
    }

    pub(crate) fn pool(&self, tier: Tier) -> &BlockPool {
        match tier {
            Tier::Device => &self.device,
            Tier::Host => &self.host,
        }
    }

    /// A snapshot of occupancy and counters. O(1).
    pub fn stats(&self) -> CacheStats {
        let tier = |p: &BlockPool| {
            let c = p.counts();
            TierStats {
                capacity_blocks: p.capacity(),
                referenced_blocks: c.referenced,
                cached_blocks: c.cached,
                free_blocks: c.free,
                bytes_per_block: self.cfg.bytes_per_block,
            }
        };
        let c = &self.counters;
        CacheStats {
            block_size: self.cfg.block_size,
            device: tier(&self.device),
            host: tier(&self.host),
            trie_blocks: self.trie.len(),
            running_seqs: self.seqs.len(),
            lookups: c.lookups,
            prompt_tokens: c.prompt_tokens,
            hit_tokens_device: c.hit_tokens_device,
            hit_tokens_host: c.hit_tokens_host,
            promotions: c.promotions,
            demotions: c.demotions,
            write_through_copies: c.write_through_copies,
            evictions_device: c.evictions_device,
            evictions_host: c.evictions_host,
            imported_blocks: c.imported_blocks,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::kv::testkit::FakeRuntime;

    pub(crate) fn cfg(device: usize, host: usize) -> KvCacheConfig {
        KvCacheConfig {
            block_size: 8,
            device_blocks: device,
            host_blocks: host,
            prefix_caching: true,
            write_through: false,
            bytes_per_block: 64,
        }
    }

    /// start + run the plan + write and commit the uncached part of the prompt.
    pub(crate) fn prefill(m: &mut KvCacheManager, rt: &mut FakeRuntime, seq: u64, prompt: &[u32]) -> SeqStart {
        let s = m.start(SeqId(seq), prompt).unwrap();
        m.check_invariants().unwrap();
        rt.apply(&s.plan);
        let table = m.block_table(SeqId(seq)).unwrap().to_vec();
        let want: Vec<_> = prompt[..s.cached_tokens].iter().map(|t| Some(*t)).collect();
        assert_eq!(rt.read(&table, s.cached_tokens), want, "hit content");
        rt.write(&table, s.cached_tokens, &prompt[s.cached_tokens..]);
        let plan = m.commit(SeqId(seq), &prompt[s.cached_tokens..]).unwrap();
        rt.apply(&plan);
        m.check_invariants().unwrap();
        s
    }

    fn toks(range: std::ops::Range<u32>) -> Vec<u32> {
        range.collect()
    }

    #[test]
    fn rejects_bad_calls_without_changing_anything() {
        assert!(matches!(
            KvCacheManager::new(KvCacheConfig {
                block_size: 7,
                ..cfg(4, 0)
            }),
            Err(KvError::InvalidConfig { .. })
        ));
        let mut m = KvCacheManager::new(cfg(4, 0)).unwrap();
        assert_eq!(m.start(SeqId(1), &[]), Err(KvError::EmptyPrompt(SeqId(1))));
        m.start(SeqId(1), &[1, 2, 3]).unwrap();
        let before = m.stats();
        assert_eq!(m.start(SeqId(1), &[1]), Err(KvError::DuplicateSeq(SeqId(1))));
        assert_eq!(m.allocate(SeqId(2), 1), Err(KvError::UnknownSeq(SeqId(2))));
        assert_eq!(m.commit(SeqId(2), &[1]), Err(KvError::UnknownSeq(SeqId(2))));
        assert_eq!(m.free(SeqId(2)), Err(KvError::UnknownSeq(SeqId(2))));
        assert_eq!(
            m.commit(SeqId(1), &[1, 2, 3, 4]),
            Err(KvError::CommitOverflow {
                seq: SeqId(1),
                reserved: 3,
                committed: 0,
                adding: 4
            })
        );
        assert_eq!(m.stats(), before);
        m.check_invariants().unwrap();
    }

    #[test]
    fn second_start_hits_all_full_blocks_but_the_last_token() {
        let mut m = KvCacheManager::new(cfg(8, 0)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let p = toks(0..24); // exactly 3 blocks
        assert_eq!(prefill(&mut m, &mut rt, 1, &p).cached_tokens, 0);
        m.free(SeqId(1)).unwrap();
        assert_eq!(m.peek(&p).tokens, 16);
        let s = prefill(&mut m, &mut rt, 2, &p);
        assert_eq!(s.cached_tokens, 16);
        assert_eq!(s.hit.device_tokens, 16);
        assert!(s.plan.is_empty());
        assert_eq!(m.num_tokens(SeqId(2)), Some(24));
        let st = m.stats();
        assert_eq!((st.lookups, st.prompt_tokens, st.hit_tokens_device), (2, 48, 16));
        // the recomputed last block equals a cached node that has a device copy: it stays private
        assert_eq!(st.trie_blocks, 3);
    }

    #[test]
    fn a_prefix_the_rule_stops_early_still_reports_what_matched() {
        let mut m = KvCacheManager::new(cfg(8, 0)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let p = toks(0..24);
        prefill(&mut m, &mut rt, 1, &p);
        m.free(SeqId(1)).unwrap();
        // Only the first block may end a prefix: two blocks match, one is taken.
        let hashes: Vec<BlockHash> = {
            let s = m.start(SeqId(2), &p).unwrap();
            assert_eq!((s.cached_tokens, s.matched_tokens), (16, 16));
            [8, 16].iter().filter_map(|&at| m.block_hash_at(SeqId(2), at)).collect()
        };
        m.free(SeqId(2)).unwrap();
        assert_eq!(hashes.len(), 2);
        assert_eq!(m.peek_at(&p, &|h| h == hashes[0]).tokens, 8);
        assert_eq!(m.peek_at(&p, &|_| false), PrefixMatch::default());
        assert_eq!(m.peek(&p).tokens, 16);
        let s = m.start_at(SeqId(3), &p, true, &|h| h == hashes[0]).unwrap();
        assert_eq!((s.cached_tokens, s.matched_tokens), (8, 16));
        m.free(SeqId(3)).unwrap();
        // No block may end one: nothing is taken, both still match.
        let s = m.start_at(SeqId(4), &p, true, &|_| false).unwrap();
        assert_eq!((s.cached_tokens, s.matched_tokens), (0, 16));
        m.free(SeqId(4)).unwrap();
        m.check_invariants().unwrap();
    }

    #[test]
    fn peek_changes_nothing() {
        let mut m = KvCacheManager::new(cfg(8, 2)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        prefill(&mut m, &mut rt, 1, &toks(0..20));
        m.free(SeqId(1)).unwrap();
        let before = (m.stats(), m.device.queued().collect::<Vec<_>>());
        assert_eq!(
            m.peek(&toks(0..20)),
            PrefixMatch {
                tokens: 16,
                device_tokens: 16,
                host_tokens: 0,
                disk_tokens: 0
            }
        );
        assert_eq!(m.lookup(&toks(0..17)).len(), 2);
        assert_eq!(m.peek(&toks(0..16)).tokens, 8);
        assert_eq!(m.peek(&[0]).tokens, 0);
        assert_eq!(m.peek(&[]).tokens, 0);
        assert_eq!((m.stats(), m.device.queued().collect::<Vec<_>>()), before);
    }

    #[test]
    fn free_queues_the_tail_first_and_empty_blocks_before_cached_ones() {
        let mut m = KvCacheManager::new(cfg(6, 0)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        prefill(&mut m, &mut rt, 1, &toks(0..20)); // blocks 0, 1 cached; block 2 partial
        let table = m.block_table(SeqId(1)).unwrap().to_vec();
        m.free(SeqId(1)).unwrap();
        let order: Vec<_> = m.device.queued().collect();
        // the partial block is free (front), then the untouched 3..6, then cached tail-first
        assert_eq!(
            order,
            vec![table[2], BlockId(3), BlockId(4), BlockId(5), table[1], table[0]]
        );
        let s = m.stats().device;
        assert_eq!((s.free_blocks, s.cached_blocks, s.referenced_blocks), (4, 2, 0));
    }

    #[test]
    fn concurrent_equal_blocks_are_not_duplicated() {
        let mut m = KvCacheManager::new(cfg(8, 0)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let p = toks(100..117);
        m.start(SeqId(1), &p).unwrap();
        m.start(SeqId(2), &p).unwrap();
        for seq in [1, 2] {
            let table = m.block_table(SeqId(seq)).unwrap().to_vec();
            rt.write(&table, 0, &p);
            m.commit(SeqId(seq), &p).unwrap();
            m.check_invariants().unwrap();
        }
        assert_eq!(m.stats().trie_blocks, 2);
        let first = m.block_table(SeqId(1)).unwrap().to_vec();
        assert_eq!(m.lookup(&p), vec![(Tier::Device, first[0]), (Tier::Device, first[1])]);
        m.free(SeqId(2)).unwrap();
        // seq 2's duplicates went back empty
        assert_eq!(m.stats().device.cached_blocks, 0);
        m.free(SeqId(1)).unwrap();
        assert_eq!(m.stats().device.cached_blocks, 2);
        m.check_invariants().unwrap();
    }

    #[test]
    fn generated_tokens_are_cached_for_the_next_turn() {
        let mut m = KvCacheManager::new(cfg(8, 0)).unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let prompt = toks(0..12);
        prefill(&mut m, &mut rt, 1, &prompt);
        let mut history = prompt.clone();
        for t in 50..58u32 {
            m.allocate(SeqId(1), 1).unwrap();
            let table = m.block_table(SeqId(1)).unwrap().to_vec();
            rt.write(&table, history.len(), &[t]);
            m.commit(SeqId(1), &[t]).unwrap();
            history.push(t);
            m.check_invariants().unwrap();
        }
        assert_eq!(m.num_reserved(SeqId(1)), Some(20));
        m.free(SeqId(1)).unwrap();
        history.extend(200..210);
        let s = prefill(&mut m, &mut rt, 2, &history);
        assert_eq!(s.cached_tokens, 16); // through the reply's full block
    }

    #[test]
    fn prefix_caching_off_never_matches_or_keeps() {
        let mut m = KvCacheManager::new(KvCacheConfig {
            prefix_caching: false,
            ..cfg(4, 2)
        })
        .unwrap();
        let mut rt = FakeRuntime::new(m.config());
        let p = toks(0..20);
        prefill(&mut m, &mut rt, 1, &p);
        m.free(SeqId(1)).unwrap();
        assert_eq!(m.peek(&p), PrefixMatch::default());
        assert_eq!(prefill(&mut m, &mut rt, 2, &p).cached_tokens, 0);
        m.free(SeqId(2)).unwrap();
        let s = m.stats();
        assert_eq!((s.trie_blocks, s.device.cached_blocks, s.device.free_blocks), (0, 0, 4));
    }

    #[test]
    fn no_free_blocks_changes_nothing() {
        let mut m = KvCacheManager::new(cfg(3, 0)).unwrap();
        m.start(SeqId(1), &toks(0..16)).unwrap();
        let before = m.stats();
        assert_eq!(
            m.start(SeqId(2), &toks(0..17)),
            Err(KvError::NoFreeBlocks {
                tier: Tier::Device,
                needed: 3,
                available: 1
            })
        );
        assert_eq!(
            m.allocate(SeqId(1), 9),
            Err(KvError::NoFreeBlocks {
                tier: Tier::Device,
                needed: 2,
                available: 1
            })
        );
        assert_eq!(m.stats(), before);
        assert!(!m.contains(SeqId(2)));
        assert_eq!(m.block_table(SeqId(1)).unwrap().len(), 2);
        m.allocate(SeqId(1), 8).unwrap();
        assert_eq!(m.available_blocks(Tier::Device), 0);
        m.check_invariants().unwrap();
    }
}
