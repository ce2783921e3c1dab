//! Scenarios of the KV cache manager through its public API, with a fake runtime that executes
//! every plan over token ids: after each step, reading a running sequence's block table must give
//! back exactly its tokens. Covers hits (same prompt, shared prefix, three-turn chat, mid-block
//! prefixes, short prompts), the host tier (demotion, promotion, write-through), hash collisions
//! and pool pressure.

use std::collections::HashMap;

use hearth::kv::testkit::FakeRuntime;
use hearth::kv::{BlockHash, KvCacheConfig, KvCacheManager, KvError, SeqId, SeqStart, Tier};

const BS: usize = 8;

fn cfg(device: usize, host: usize) -> KvCacheConfig {
    KvCacheConfig {
        block_size: BS,
        device_blocks: device,
        host_blocks: host,
        prefix_caching: true,
        write_through: false,
        bytes_per_block: 1024,
    }
}

struct Harness {
    m: KvCacheManager,
    rt: FakeRuntime,
    history: HashMap<SeqId, Vec<u32>>,
    next: u64,
}

impl Harness {
    fn new(cfg: KvCacheConfig) -> Self {
        Self::from(KvCacheManager::new(cfg).unwrap())
    }

    fn from(m: KvCacheManager) -> Self {
        let rt = FakeRuntime::new(m.config());
        Self {
            m,
            rt,
            history: HashMap::new(),
            next: 0,
        }
    }

    fn check(&self) {
        self.m.check_invariants().unwrap();
        for (seq, h) in &self.history {
            let table = self.m.block_table(*seq).unwrap();
            let want: Vec<_> = h.iter().map(|t| Some(*t)).collect();
            assert_eq!(self.rt.read(table, h.len()), want, "{seq}: content");
            assert_eq!(self.m.num_tokens(*seq), Some(h.len()));
        }
    }

    /// Starts a sequence, runs its plan, prefills and commits the uncached part of the prompt.
    fn run(&mut self, prompt: &[u32]) -> (SeqId, SeqStart) {
        let seq = SeqId(self.next);
        self.next += 1;
        let peek = self.m.peek(prompt);
        let s = self.m.start(seq, prompt).unwrap();
        assert_eq!(s.hit, peek);
        assert_eq!(s.cached_tokens, s.hit.tokens);
        assert!(s.cached_tokens < prompt.len() && s.cached_tokens.is_multiple_of(BS));
        self.rt.apply(&s.plan);
        self.history.insert(seq, prompt[..s.cached_tokens].to_vec());
        self.check();
        self.commit(seq, &prompt[s.cached_tokens..]);
        (seq, s)
    }

    fn commit(&mut self, seq: SeqId, tokens: &[u32]) {
        let table = self.m.block_table(seq).unwrap().to_vec();
        let h = self.history.get_mut(&seq).unwrap();
        self.rt.write(&table, h.len(), tokens);
        h.extend_from_slice(tokens);
        let plan = self.m.commit(seq, tokens).unwrap();
        self.rt.apply(&plan);
        self.check();
    }

    /// Decodes `tokens` one at a time (allocate one slot, write, commit).
    fn generate(&mut self, seq: SeqId, tokens: &[u32]) {
        for &t in tokens {
            let plan = self.m.allocate(seq, 1).unwrap();
            self.rt.apply(&plan);
            self.commit(seq, &[t]);
        }
    }

    fn free(&mut self, seq: SeqId) -> Vec<u32> {
        self.m.free(seq).unwrap();
        let h = self.history.remove(&seq).unwrap();
        self.check();
        h
    }
}

fn seq_of(range: std::ops::Range<u32>) -> Vec<u32> {
    range.collect()
}

#[test]
fn same_prompt_twice_hits_every_full_block_but_the_last_token() {
    for len in [8, 9, 15, 16, 17, 40] {
        let mut h = Harness::new(cfg(16, 0));
        let p = seq_of(0..len);
        let (a, s) = h.run(&p);
        assert_eq!(s.cached_tokens, 0);
        h.free(a);
        let (_, s) = h.run(&p);
        assert_eq!(s.cached_tokens, (len as usize - 1) / BS * BS, "len {len}");
        assert_eq!(s.hit.device_tokens, s.cached_tokens);
        assert!(s.plan.is_empty());
    }
}

#[test]
fn same_prompt_while_the_first_still_runs_shares_its_blocks() {
    let mut h = Harness::new(cfg(16, 0));
    let p = seq_of(0..33);
    let (a, _) = h.run(&p);
    let (b, s) = h.run(&p);
    assert_eq!(s.cached_tokens, 32);
    let (ta, tb) = (h.m.block_table(a).unwrap(), h.m.block_table(b).unwrap());
    assert_eq!(ta[..4], tb[..4]);
    assert_ne!(ta[4], tb[4]);
    assert_eq!(h.m.stats().device.referenced_blocks, 6);
    h.free(a);
    h.free(b);
}

#[test]
fn shared_prefix_with_different_suffixes() {
    let mut h = Harness::new(cfg(16, 0));
    let system = seq_of(1000..1020); // 2.5 blocks
    let mut p1 = system.clone();
    p1.extend(seq_of(0..10));
    let mut p2 = system.clone();
    p2.extend(seq_of(50..70));
    let (a, _) = h.run(&p1);
    let (b, s) = h.run(&p2);
    // the first two blocks are pure system prompt; the third mixes in p1's suffix
    assert_eq!(s.cached_tokens, 16);
    h.free(a);
    h.free(b);
    let mut p3 = system.clone();
    p3.extend(seq_of(50..60));
    assert_eq!(h.m.peek(&p3).tokens, 24); // p2's third block matches p3's
}

#[test]
fn three_turn_chat_hits_through_the_generated_reply() {
    let mut h = Harness::new(cfg(32, 0));
    let turn1 = seq_of(0..21);
    let (a, s) = h.run(&turn1);
    assert_eq!(s.cached_tokens, 0);
    h.generate(a, &seq_of(500..513));
    let mut turn2 = h.free(a); // prompt + reply: 34 tokens
    turn2.extend(seq_of(100..111));
    let (b, s) = h.run(&turn2);
    assert_eq!(s.cached_tokens, 32); // through the reply's full blocks
    h.generate(b, &seq_of(600..605));
    let mut turn3 = h.free(b);
    turn3.extend(seq_of(200..203)); // 53 tokens
    let (_, s) = h.run(&turn3);
    assert_eq!(s.cached_tokens, 48);
    assert_eq!(h.m.stats().lookups, 3);
}

#[test]
fn prefixes_ending_mid_block_match_only_full_blocks() {
    let mut h = Harness::new(cfg(16, 0));
    let (a, _) = h.run(&seq_of(0..30));
    h.free(a);
    let mut p = seq_of(0..20);
    p.extend([999, 998, 997]);
    let (_, s) = h.run(&p);
    assert_eq!(s.cached_tokens, 16);
    let mut q = seq_of(0..5);
    q.extend(seq_of(900..920));
    assert_eq!(h.m.peek(&q).tokens, 0);
}

#[test]
fn prompts_shorter_than_one_block_never_hit_and_never_fail() {
    let mut h = Harness::new(cfg(4, 2));
    for round in 0..3 {
        for len in 1..=BS as u32 {
            let (s, start) = h.run(&seq_of(0..len));
            assert_eq!(start.cached_tokens, 0, "round {round} len {len}");
            assert_eq!(h.m.block_table(s).unwrap().len(), 1);
            h.free(s);
        }
    }
    assert_eq!(h.m.stats().hit_tokens(), 0);
}

#[test]
fn tiny_device_pool_demotes_then_promotes_a_host_hit() {
    let mut h = Harness::new(cfg(3, 6));
    let a = seq_of(0..17);
    let (s, _) = h.run(&a);
    h.free(s);
    // another 3-block prompt takes the whole device pool: a's blocks are demoted
    let (s, start) = h.run(&seq_of(100..117));
    assert_eq!(start.plan.demote.len(), 2);
    assert!(start.plan.promote.is_empty());
    h.free(s);
    let st = h.m.stats();
    assert_eq!((st.demotions, st.host.cached_blocks), (2, 2));
    assert_eq!(h.m.peek(&a).host_tokens, 16);
    let (s, start) = h.run(&a);
    assert_eq!(start.hit.host_tokens, 16);
    assert_eq!(start.hit.device_tokens, 0);
    assert_eq!(start.plan.promote.len(), 2);
    // the promoted blocks are the first two of the block table, in order
    let table = h.m.block_table(s).unwrap();
    assert_eq!(start.plan.promote.iter().map(|p| p.1).collect::<Vec<_>>(), table[..2]);
    let st = h.m.stats();
    assert_eq!((st.promotions, st.hit_tokens_host), (2, 16));
    assert_eq!(st.host.referenced_blocks, 2); // pinned until the sequence ends
    h.free(s);
    assert_eq!(h.m.stats().host.referenced_blocks, 0);
}

#[test]
fn write_through_makes_demotion_free() {
    let mut h = Harness::new(KvCacheConfig {
        write_through: true,
        ..cfg(3, 6)
    });
    let a = seq_of(0..17);
    let (s, _) = h.run(&a);
    h.free(s);
    assert_eq!(h.m.stats().write_through_copies, 2);
    let before = h.m.stats();
    let (s, start) = h.run(&seq_of(100..117));
    // a's blocks leave the device pool without a copy (the commit of the new blocks writes them
    // through, which is the only demote traffic)
    assert!(start.plan.demote.is_empty());
    h.free(s);
    let after = h.m.stats();
    assert_eq!(after.demotions, before.demotions);
    assert_eq!(after.evictions_device, before.evictions_device + 2);
    let (_, start) = h.run(&a);
    assert_eq!(start.hit.host_tokens, 16);
}

#[test]
fn forced_hash_collision_gets_no_false_hit() {
    for host in [0, 4] {
        let m = KvCacheManager::with_hasher(cfg(8, host), |_, _| BlockHash(7)).unwrap();
        let mut h = Harness::from(m);
        let (a, _) = h.run(&seq_of(0..17));
        h.free(a);
        // different tokens, same hashes at every level
        let other = seq_of(100..117);
        assert_eq!(h.m.peek(&other).tokens, 0);
        let (b, s) = h.run(&other); // content checked inside
        assert_eq!(s.cached_tokens, 0);
        h.free(b);
        // the first prompt still hits; the colliding one was not cached
        let (c, s) = h.run(&seq_of(0..17));
        assert_eq!(s.cached_tokens, 16);
        h.free(c);
        // same first block, colliding second block
        let mut mixed = seq_of(0..8);
        mixed.extend(seq_of(300..309));
        let (_, s) = h.run(&mixed);
        assert_eq!(s.cached_tokens, 8);
    }
}

#[test]
fn pressure_when_every_device_block_is_referenced() {
    let mut h = Harness::new(cfg(4, 2));
    let (a, _) = h.run(&seq_of(0..16));
    let (b, _) = h.run(&seq_of(100..116));
    assert_eq!(h.m.available_blocks(Tier::Device), 0);
    let stats = h.m.stats();
    let tables = (
        h.m.block_table(a).unwrap().to_vec(),
        h.m.block_table(b).unwrap().to_vec(),
    );
    let err = h.m.start(SeqId(99), &seq_of(0..16)).unwrap_err();
    // the first block is a hit on a referenced block; the second must be recomputed
    assert_eq!(
        err,
        KvError::NoFreeBlocks {
            tier: Tier::Device,
            needed: 1,
            available: 0
        }
    );
    assert_eq!(
        h.m.allocate(a, 1),
        Err(KvError::NoFreeBlocks {
            tier: Tier::Device,
            needed: 1,
            available: 0
        })
    );
    assert!(h.m.allocate(a, 0).unwrap().is_empty());
    assert!(!h.m.contains(SeqId(99)));
    assert_eq!(h.m.stats(), stats);
    assert_eq!(h.m.block_table(a).unwrap(), tables.0);
    assert_eq!(h.m.block_table(b).unwrap(), tables.1);
    h.check();
    // freeing one sequence makes room again
    h.free(b);
    h.generate(a, &[1, 2, 3]);
}

#[test]
fn caching_off_recomputes_everything() {
    let mut h = Harness::new(KvCacheConfig {
        prefix_caching: false,
        write_through: true,
        ..cfg(8, 4)
    });
    let p = seq_of(0..30);
    for _ in 0..3 {
        let (s, start) = h.run(&p);
        assert_eq!(start.cached_tokens, 0);
        assert!(start.plan.is_empty());
        h.free(s);
    }
    let st = h.m.stats();
    assert_eq!(
        (st.trie_blocks, st.device.cached_blocks, st.write_through_copies),
        (0, 0, 0)
    );
    assert_eq!((st.lookups, st.prompt_tokens, st.hit_tokens()), (3, 90, 0));
}

#[test]
fn stats_add_up_and_serialize() {
    let mut h = Harness::new(cfg(6, 3));
    let (a, _) = h.run(&seq_of(0..20));
    let st = h.m.stats();
    for t in [st.device, st.host] {
        assert_eq!(t.free_blocks + t.cached_blocks + t.referenced_blocks, t.capacity_blocks);
    }
    assert_eq!(st.device.referenced_bytes(), 3 * 1024);
    assert_eq!(st.running_seqs, 1);
    h.free(a);
    let json = serde_json::to_value(h.m.stats()).unwrap();
    assert_eq!(json["device"]["cached_blocks"], 2);
    assert_eq!(json["block_size"], 8);
}
