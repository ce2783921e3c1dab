//! Model-based test of the KV cache manager: long random sequences of start / allocate / commit
//! / free on tiny pools (so pressure, demotion, promotion and eviction all happen), checked after
//! every operation against a simple reference:
//!
//! - the runtime is simulated by [`FakeRuntime`]: plans are merged as an engine would (extended
//!   until the next "forward", i.e. the next commit or free) and executed demote-then-promote;
//!   tokens are written through the block table before each commit. After executing what is
//!   pending, every running sequence's block table must read back exactly its tokens, and every
//!   block the manager claims caches a prefix (`lookup`) must hold that prefix's tokens;
//! - accounting: referenced device blocks = the union of the running block tables, referenced host
//!   blocks = the union of the sources of their promotions, per tier free + cached + referenced =
//!   capacity, and `check_invariants` passes;
//! - `NoFreeBlocks` is returned exactly when the reference says the request cannot fit (from the
//!   running block tables and the claimed hit blocks alone), with the exact numbers, and then
//!   nothing changed; other errors likewise change nothing;
//! - hit results agree with `peek`, and counters move as documented.
//!
//! Hashers include a constant one and a weak one, so collisions are frequent.

use std::collections::HashSet;

use hearth::kv::testkit::FakeRuntime;
use hearth::kv::{
    hash_block, BlockHash, BlockHasher, BlockId, CopyPlan, KvCacheConfig, KvCacheManager, KvError, SeqId, Tier,
};
use proptest::prelude::*;
use proptest::test_runner::Config;

const BS: usize = 8;

#[derive(Debug, Clone)]
enum Op {
    /// A prompt from `src` (a base prompt or a finished conversation), cut at `cut`, plus
    /// `extra` new tokens drawn from `salt`.
    Start {
        src: u8,
        cut: u8,
        extra: u8,
        salt: u32,
    },
    Allocate {
        who: u8,
        n: u8,
    },
    Commit {
        who: u8,
        n: u8,
        salt: u32,
    },
    Free {
        who: u8,
    },
    /// Execute the pending plan now (a forward with nothing to commit).
    Flush,
    /// Calls that must fail and change nothing.
    Misuse {
        kind: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u8>(), any::<u8>(), 0u8..20, any::<u32>())
            .prop_map(|(src, cut, extra, salt)| Op::Start { src, cut, extra, salt }),
        3 => (any::<u8>(), 0u8..20).prop_map(|(who, n)| Op::Allocate { who, n }),
        6 => (any::<u8>(), 1u8..24, any::<u32>()).prop_map(|(who, n, salt)| Op::Commit { who, n, salt }),
        2 => any::<u8>().prop_map(|who| Op::Free { who }),
        1 => Just(Op::Flush),
        1 => any::<u8>().prop_map(|kind| Op::Misuse { kind }),
    ]
}

fn constant_hash(_: Option<BlockHash>, _: &[u32]) -> BlockHash {
    BlockHash(7)
}

/// Collides whenever the first tokens agree.
fn weak_hash(parent: Option<BlockHash>, tokens: &[u32]) -> BlockHash {
    BlockHash(parent.map_or(0, |p| p.0 % 3) + u64::from(tokens.first().copied().unwrap_or(0) % 4))
}

#[derive(Debug, Clone)]
struct Setup {
    device: usize,
    host: usize,
    write_through: bool,
    prefix_caching: bool,
    hasher: u8,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        4usize..=10,
        prop_oneof![Just(0usize), Just(6), 1usize..=3],
        any::<bool>(),
        0u8..10,
        0u8..10,
    )
        .prop_map(|(device, host, write_through, caching, hasher)| Setup {
            device,
            host,
            write_through,
            prefix_caching: caching != 0,
            hasher,
        })
}

struct Live {
    seq: SeqId,
    prompt: Vec<u32>,
    /// Tokens committed (cached prefix included).
    history: Vec<u32>,
    reserved: usize,
    table: Vec<BlockId>,
    pins: Vec<BlockId>,
}

struct Model {
    m: KvCacheManager,
    rt: FakeRuntime,
    pending: CopyPlan,
    live: Vec<Live>,
    bases: Vec<Vec<u32>>,
    finished: Vec<Vec<u32>>,
    next_seq: u64,
}

/// A tiny deterministic generator for token ids (the small vocabulary makes equal blocks common).
fn tokens(salt: u32, n: usize, vocab: u32) -> Vec<u32> {
    let mut x = u64::from(salt) | 1;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 33) as u32) % vocab
        })
        .collect()
}

impl Model {
    fn new(s: &Setup) -> Self {
        let cfg = KvCacheConfig {
            block_size: BS,
            device_blocks: s.device,
            host_blocks: s.host,
            prefix_caching: s.prefix_caching,
            write_through: s.write_through,
            bytes_per_block: 4096,
        };
        let hasher: BlockHasher = match s.hasher {
            0 => constant_hash,
            1 => weak_hash,
            _ => hash_block,
        };
        let m = KvCacheManager::with_hasher(cfg, hasher).unwrap();
        let rt = FakeRuntime::new(m.config());
        let bases = vec![
            (1000..1030).collect(),
            (1000..1012).chain(2000..2020).collect(),
            (3000..3017).collect(),
            (4000..4004).collect(),
        ];
        Self {
            m,
            rt,
            pending: CopyPlan::default(),
            live: Vec::new(),
            bases,
            finished: Vec::new(),
            next_seq: 0,
        }
    }

    fn cap(&self) -> usize {
        self.m.config().device_blocks
    }

    fn referenced(&self) -> HashSet<BlockId> {
        self.live.iter().flat_map(|l| l.table.iter().copied()).collect()
    }

    /// The runtime after executing what is pending.
    fn executed(&self) -> FakeRuntime {
        let mut rt = self.rt.clone();
        rt.apply(&self.pending);
        rt
    }

    fn forward(&mut self) {
        let plan = std::mem::take(&mut self.pending);
        self.rt.apply(&plan);
    }

    fn pick(&self, who: u8) -> Option<usize> {
        (!self.live.is_empty()).then(|| who as usize % self.live.len())
    }

    /// Everything a caller can observe, to compare before and after a failed call.
    fn snapshot(&self) -> impl PartialEq + std::fmt::Debug {
        let tables: Vec<_> = self
            .live
            .iter()
            .map(|l| (self.m.block_table(l.seq).map(<[_]>::to_vec), self.m.num_tokens(l.seq)))
            .collect();
        let lookups: Vec<_> = self.bases.iter().map(|b| self.m.lookup(b)).collect();
        (self.m.stats(), tables, lookups)
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Start { src, cut, extra, salt } => self.start(src, cut, extra, salt)?,
            Op::Allocate { who, n } => {
                let Some(i) = self.pick(who) else { return Ok(()) };
                let n = n as usize;
                let l = &self.live[i];
                let needed = (l.reserved + n).div_ceil(BS) - l.table.len();
                let available = self.cap() - self.referenced().len();
                let before = self.snapshot();
                match self.m.allocate(l.seq, n) {
                    Ok(plan) => {
                        prop_assert!(needed <= available, "allocate fit although {needed} > {available}");
                        self.pending.extend(plan);
                        self.live[i].reserved += n;
                    }
                    Err(e) => {
                        prop_assert_eq!(
                            e,
                            KvError::NoFreeBlocks {
                                tier: Tier::Device,
                                needed,
                                available
                            }
                        );
                        prop_assert_eq!(self.snapshot(), before);
                    }
                }
            }
            Op::Commit { who, n, salt } => {
                let Some(i) = self.pick(who) else { return Ok(()) };
                self.forward();
                let l = &self.live[i];
                let room = l.reserved - l.history.len();
                let mut toks: Vec<u32> = l
                    .prompt
                    .iter()
                    .skip(l.history.len())
                    .take(n as usize)
                    .copied()
                    .collect();
                if toks.is_empty() {
                    toks = tokens(salt, n as usize, 3); // "generated"
                }
                if toks.len() > room {
                    let before = self.snapshot();
                    let e = self.m.commit(l.seq, &toks).unwrap_err();
                    prop_assert!(matches!(e, KvError::CommitOverflow { .. }), "{e:?}");
                    prop_assert_eq!(self.snapshot(), before);
                    toks.truncate(room);
                }
                let l = &self.live[i];
                self.rt.write(&l.table, l.history.len(), &toks);
                let plan = self
                    .m
                    .commit(l.seq, &toks)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                // write-through copies only blocks that were just filled
                prop_assert!(plan.promote.is_empty());
                if !self.m.config().write_through {
                    prop_assert!(plan.demote.is_empty());
                }
                for (src, _) in &plan.demote {
                    prop_assert!(self.live[i].table.contains(src));
                }
                self.pending.extend(plan);
                self.live[i].history.extend_from_slice(&toks);
            }
            Op::Free { who } => {
                let Some(i) = self.pick(who) else { return Ok(()) };
                self.forward();
                let l = self.live.swap_remove(i);
                self.m.free(l.seq).map_err(|e| TestCaseError::fail(e.to_string()))?;
                self.finished.push(l.history);
                if self.finished.len() > 6 {
                    self.finished.remove(0);
                }
            }
            Op::Flush => self.forward(),
            Op::Misuse { kind } => {
                let before = self.snapshot();
                let ghost = SeqId(u64::MAX);
                let r = match (kind % 4, self.live.first()) {
                    (0, _) => self.m.free(ghost),
                    (1, _) => self.m.allocate(ghost, 1).map(|_| ()),
                    (2, Some(l)) => self.m.start(l.seq, &[1, 2, 3]).map(|_| ()),
                    _ => self.m.start(ghost, &[]).map(|_| ()),
                };
                prop_assert!(r.is_err());
                prop_assert_eq!(self.snapshot(), before);
            }
        }
        self.check()
    }

    fn start(&mut self, src: u8, cut: u8, extra: u8, salt: u32) -> Result<(), TestCaseError> {
        let sources = self.bases.len() + self.finished.len();
        let src = src as usize % sources;
        let base = match self.bases.get(src) {
            Some(b) => b,
            None => &self.finished[src - self.bases.len()],
        };
        let mut prompt: Vec<u32> = base[..(cut as usize % (base.len() + 1))].to_vec();
        prompt.extend(tokens(salt, extra as usize, 3));
        prompt.truncate(48);
        if prompt.is_empty() {
            prompt.push(salt % 5);
        }
        let seq = SeqId(self.next_seq);
        self.next_seq += 1;

        // What the manager claims is cached must really be there (once pending copies ran).
        let hits = self.m.lookup(&prompt);
        let peek = self.m.peek(&prompt);
        let executed = self.executed();
        for (i, &(tier, b)) in hits.iter().enumerate() {
            prop_assert!(
                executed.holds(tier, b, &prompt[i * BS..(i + 1) * BS]),
                "claimed hit block {i} ({tier} {b}) holds other tokens"
            );
        }
        let host_hits: Vec<BlockId> = hits.iter().filter(|h| h.0 == Tier::Host).map(|h| h.1).collect();
        let device_hits: Vec<BlockId> = hits.iter().filter(|h| h.0 == Tier::Device).map(|h| h.1).collect();
        prop_assert_eq!(peek.tokens, hits.len() * BS);
        prop_assert_eq!(peek.host_tokens, host_hits.len() * BS);
        if !self.m.config().prefix_caching {
            prop_assert!(hits.is_empty());
        }

        // The reference's verdict: blocks to hand out vs unreferenced blocks not taken by the hit.
        let referenced = self.referenced();
        let needed = host_hits.len() + prompt.len().div_ceil(BS) - hits.len();
        let available = self.cap() - referenced.len() - device_hits.iter().filter(|b| !referenced.contains(b)).count();
        let before = self.snapshot();
        let stats = self.m.stats();
        match self.m.start(seq, &prompt) {
            Err(e) => {
                prop_assert_eq!(
                    e,
                    KvError::NoFreeBlocks {
                        tier: Tier::Device,
                        needed,
                        available
                    }
                );
                prop_assert!(needed > available);
                prop_assert_eq!(self.snapshot(), before);
            }
            Ok(s) => {
                prop_assert!(needed <= available, "start fit although {needed} > {available}");
                prop_assert_eq!(s.hit, peek);
                prop_assert_eq!(s.cached_tokens, peek.tokens);
                prop_assert!(s.cached_tokens < prompt.len());
                let table = self.m.block_table(seq).unwrap_or_default().to_vec();
                prop_assert_eq!(table.len(), prompt.len().div_ceil(BS));
                // device hits are shared as they are; host hits are promoted into the table
                let mut promotes = s.plan.promote.iter();
                for (i, &(tier, b)) in hits.iter().enumerate() {
                    match tier {
                        Tier::Device => prop_assert_eq!(table[i], b),
                        Tier::Host => prop_assert_eq!(promotes.next(), Some(&(b, table[i]))),
                    }
                }
                prop_assert!(promotes.next().is_none());
                for b in &table[hits.len()..] {
                    prop_assert!(!referenced.contains(b), "fresh {b} was referenced");
                }
                let now = self.m.stats();
                prop_assert_eq!(now.lookups, stats.lookups + 1);
                prop_assert_eq!(now.prompt_tokens, stats.prompt_tokens + prompt.len() as u64);
                prop_assert_eq!(now.hit_tokens_host, stats.hit_tokens_host + peek.host_tokens as u64);
                prop_assert_eq!(now.promotions, stats.promotions + host_hits.len() as u64);
                self.pending.extend(s.plan);
                self.live.push(Live {
                    seq,
                    history: prompt[..s.cached_tokens].to_vec(),
                    reserved: prompt.len(),
                    prompt,
                    table,
                    pins: host_hits,
                });
            }
        }
        Ok(())
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        self.m.check_invariants().map_err(TestCaseError::fail)?;
        let stats = self.m.stats();
        for t in [stats.device, stats.host] {
            prop_assert_eq!(t.free_blocks + t.cached_blocks + t.referenced_blocks, t.capacity_blocks);
        }
        prop_assert_eq!(stats.running_seqs, self.live.len());
        // block tables only grow, and match the reference's view
        for l in &mut self.live {
            let table = self.m.block_table(l.seq).unwrap_or_default();
            prop_assert!(table.starts_with(&l.table), "{}: block table rewritten", l.seq);
            prop_assert_eq!(table.len(), l.reserved.div_ceil(BS));
            l.table = table.to_vec();
            prop_assert_eq!(self.m.num_tokens(l.seq), Some(l.history.len()));
        }
        prop_assert_eq!(stats.device.referenced_blocks, self.referenced().len());
        let pins: HashSet<BlockId> = self.live.iter().flat_map(|l| l.pins.iter().copied()).collect();
        prop_assert_eq!(stats.host.referenced_blocks, pins.len());
        // after the pending copies, every running sequence reads back exactly its tokens
        let executed = self.executed();
        for l in &self.live {
            let want: Vec<_> = l.history.iter().map(|t| Some(*t)).collect();
            prop_assert_eq!(executed.read(&l.table, l.history.len()), want, "{} content", l.seq);
        }
        // and every prefix the cache claims to hold is really there
        for p in self.bases.iter().chain(&self.finished) {
            for (i, (tier, b)) in self.m.lookup(p).into_iter().enumerate() {
                prop_assert!(executed.holds(tier, b, &p[i * BS..(i + 1) * BS]), "stale {tier} {b}");
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(Config { cases: 128, failure_persistence: None, ..Config::default() })]

    #[test]
    fn manager_matches_the_reference(s in setup(), ops in prop::collection::vec(op(), 1..300)) {
        let mut model = Model::new(&s);
        for op in &ops {
            model.step(op)?;
        }
        // drain: free everything, then the pools hold only cached or free blocks
        while let Some(l) = model.live.pop() {
            model.forward();
            model.m.free(l.seq).map_err(|e| TestCaseError::fail(e.to_string()))?;
            model.check()?;
        }
        let st = model.m.stats();
        prop_assert_eq!(st.device.referenced_blocks + st.host.referenced_blocks, 0);
    }
}

/// The random test must reach the interesting paths; this pins that it does, on one fixed run.
#[test]
fn random_runs_exercise_every_path() {
    let s = Setup {
        device: 6,
        host: 4,
        write_through: false,
        prefix_caching: true,
        hasher: 9,
    };
    let mut model = Model::new(&s);
    let mut x: u64 = 12345;
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) as u32
    };
    let mut failures = 0;
    for _ in 0..3000 {
        let r = next();
        let op = match r % 16 {
            0..=3 => Op::Start {
                src: next() as u8,
                cut: next() as u8,
                extra: (next() % 20) as u8,
                salt: next(),
            },
            4..=6 => Op::Allocate {
                who: next() as u8,
                n: (next() % 12) as u8,
            },
            7..=12 => Op::Commit {
                who: next() as u8,
                n: (next() % 24 + 1) as u8,
                salt: next(),
            },
            _ => Op::Free { who: next() as u8 },
        };
        let before = model.m.stats().lookups;
        model.step(&op).unwrap();
        if matches!(op, Op::Start { .. }) && model.m.stats().lookups == before {
            failures += 1;
        }
    }
    let st = model.m.stats();
    assert!(st.hit_tokens_device > 0, "{st:?}");
    assert!(st.hit_tokens_host > 0, "{st:?}");
    assert!(st.promotions > 0 && st.demotions > 0, "{st:?}");
    assert!(st.evictions_device > 0 && st.evictions_host > 0, "{st:?}");
    assert!(failures > 0, "no NoFreeBlocks in {}", st.lookups);
}
