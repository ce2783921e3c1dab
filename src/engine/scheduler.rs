//! The scheduler: which requests run in the next step, and how many of their tokens.
//!
//! Owns: [`Scheduler`]: the waiting queue and the running list (in admission order), and the
//! decisions of one step ([`SchedulerOutput`]).
//!
//! One call to [`Scheduler::schedule`], under a budget of `max_batch_tokens`:
//! 1. running requests whose consumer went away are cancelled (their blocks freed);
//! 2. every running request that sampled a token gets room for it (`allocate`) and decodes it,
//!    one token each, oldest first; when the device tier has no block left, the newest running
//!    request is preempted: its blocks are freed (full ones stay cached) and it goes back to the
//!    front of the queue, to be recomputed later from its prompt and what it generated so far;
//! 3. running requests still in their prompt get chunks of it from what is left of the budget
//!    (chunked prefill: a long prompt never holds up the decodes for more than one such step);
//! 4. if nothing was preempted, waiting requests are admitted (oldest first, while there is
//!    budget, room among `max_running` and device blocks for the whole prompt): saved blocks
//!    that extend their cached prefix are read from the disk tier first (the `Prefetch` hook),
//!    then the cache manager matches their cached prefix (host hits are promoted) and they
//!    prefill the rest.
//!
//! Invariants: a request in `running` holds a started sequence in the cache manager, one in
//! `waiting` holds none; decodes always fit the budget (`max_batch_tokens >= max_running`); a
//! request alone in `running` that cannot grow has reached the end of the cache and finishes
//! with [`StopReason::ContextFull`] instead of waiting forever.
//!
//! Counterpart: vLLM v1's `Scheduler.schedule()` (token budget, running first, recompute
//! preemption of the newest request, no admission in a step that preempted).

use std::collections::VecDeque;
use std::time::Instant;

use super::sequence::Sequence;
use super::{EngineError, RequestId, StopReason};
use crate::config::EngineSettings;
use crate::kv::{KvCacheManager, KvError, SeqId};
use crate::runtime::KvMemory;

/// How a request left the scheduler without finishing a step.
#[derive(Debug)]
pub(crate) enum Ending {
    /// Finished normally (the cache is full for a request running alone).
    Stop(StopReason),
    /// Its consumer went away or it was cancelled.
    Cancelled,
    Error(EngineError),
}

/// What one step runs.
#[derive(Debug, Default)]
pub(crate) struct SchedulerOutput {
    /// `(index into the running list, tokens to feed)`, each from the request's `computed`.
    pub(crate) chunks: Vec<(usize, usize)>,
    /// Requests that ended while scheduling; their blocks are already freed.
    pub(crate) ended: Vec<(Sequence, Ending)>,
    /// Requests preempted in this step.
    pub(crate) preempted: usize,
}

/// Continuous batching with chunked prefill and recompute preemption.
#[derive(Debug)]
pub struct Scheduler {
    cfg: EngineSettings,
    waiting: VecDeque<Sequence>,
    running: Vec<Sequence>,
    next_seq: u64,
}

/// Reads saved blocks extending a prompt's cached prefix into the cache before admission (the
/// disk tier); returns the prompt tokens it read.
pub(crate) type Prefetch<'a> = &'a mut dyn FnMut(&[u32], &mut KvCacheManager, &mut KvMemory) -> usize;

/// What making room for a running request came to.
enum Room {
    Ready,
    /// The request left `running` (preempted, or ended).
    Gone,
}

impl Scheduler {
    pub fn new(cfg: EngineSettings) -> Self {
        Self {
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_seq: 0,
        }
    }

    pub fn config(&self) -> &EngineSettings {
        &self.cfg
    }

    /// Requests waiting (never admitted, or preempted).
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Requests holding blocks.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub(crate) fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    pub(crate) fn add(&mut self, s: Sequence) {
        self.waiting.push_back(s);
    }

    pub(crate) fn running_mut(&mut self) -> &mut Vec<Sequence> {
        &mut self.running
    }

    /// Removes request `id` wherever it is, freeing its blocks.
    pub(crate) fn remove(&mut self, id: RequestId, kv: &mut KvCacheManager) -> Option<Sequence> {
        if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            return self.waiting.remove(i);
        }
        let i = self.running.iter().position(|s| s.id == id)?;
        Some(self.take_running(i, kv))
    }

    /// Removes the running request at `i`, freeing its blocks.
    pub(crate) fn take_running(&mut self, i: usize, kv: &mut KvCacheManager) -> Sequence {
        let mut s = self.running.remove(i);
        release(&mut s, kv);
        s
    }

    /// Decides the next step (see the module docs), making the cache manager's allocations and
    /// running their copy plans on `memory`.
    pub(crate) fn schedule(
        &mut self,
        kv: &mut KvCacheManager,
        memory: &mut KvMemory,
        prefetch: Prefetch<'_>,
    ) -> SchedulerOutput {
        let mut out = SchedulerOutput::default();
        self.reap_abandoned(kv, &mut out);
        let mut budget = self.cfg.max_batch_tokens;

        // Decodes: room for each sampled token, preempting the newest when blocks run out.
        let mut i = 0;
        while i < self.running.len() {
            if let Room::Gone = self.make_room(i, kv, memory, &mut out) {
                continue;
            }
            if self.running[i].remaining() == 1 && budget > 0 {
                out.chunks.push((i, 1));
                budget -= 1;
            }
            i += 1;
        }
        // Prompt chunks of admitted requests.
        for (i, s) in self.running.iter().enumerate() {
            if budget == 0 {
                break;
            }
            let r = s.remaining();
            if r > 1 {
                let n = r.min(budget);
                out.chunks.push((i, n));
                budget -= n;
            }
        }
        if out.preempted == 0 {
            self.admit(&mut budget, kv, memory, prefetch, &mut out);
        }
        out
    }

    /// Cancels every request whose consumer is gone.
    fn reap_abandoned(&mut self, kv: &mut KvCacheManager, out: &mut SchedulerOutput) {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].is_abandoned() {
                let s = self.take_running(i, kv);
                out.ended.push((s, Ending::Cancelled));
            } else {
                i += 1;
            }
        }
        let (gone, kept): (Vec<_>, Vec<_>) = self.waiting.drain(..).partition(Sequence::is_abandoned);
        self.waiting = kept.into();
        out.ended.extend(gone.into_iter().map(|s| (s, Ending::Cancelled)));
    }

    /// Reserves blocks for every token of running request `i`.
    fn make_room(
        &mut self,
        i: usize,
        kv: &mut KvCacheManager,
        memory: &mut KvMemory,
        out: &mut SchedulerOutput,
    ) -> Room {
        let s = &self.running[i];
        let Some(seq) = s.seq else {
            return Room::Ready;
        };
        let need = s.tokens.len().saturating_sub(kv.num_reserved(seq).unwrap_or(0));
        if need == 0 {
            return Room::Ready;
        }
        loop {
            let t = Instant::now();
            let r = kv.allocate(seq, need);
            self.running[i].bookkeeping += t.elapsed();
            match r {
                Ok(plan) => {
                    if let Err(e) = memory.execute(&plan) {
                        let s = self.take_running(i, kv);
                        out.ended.push((s, Ending::Error(e.into())));
                        return Room::Gone;
                    }
                    return Room::Ready;
                }
                Err(KvError::NoFreeBlocks { .. }) if self.running.len() > 1 => {
                    // Preempt the newest request (possibly this one, if it is the newest).
                    let last = self.running.len() - 1;
                    let mut victim = self.take_running(last, kv);
                    tracing::debug!(
                        "preempting {} ({} tokens) to free blocks",
                        victim.id,
                        victim.tokens.len()
                    );
                    victim.preempted();
                    self.waiting.push_front(victim);
                    out.preempted += 1;
                    if last == i {
                        return Room::Gone;
                    }
                }
                Err(KvError::NoFreeBlocks { .. }) => {
                    // Alone and still no room: this request fills the whole cache.
                    let s = self.take_running(i, kv);
                    tracing::warn!(
                        "{} stopped at {} tokens: the KV cache's device tier is full",
                        s.id,
                        s.tokens.len()
                    );
                    out.ended.push((s, Ending::Stop(StopReason::ContextFull)));
                    return Room::Gone;
                }
                Err(e) => {
                    let s = self.take_running(i, kv);
                    out.ended.push((s, Ending::Error(e.into())));
                    return Room::Gone;
                }
            }
        }
    }

    /// Admits waiting requests while there is budget, room and blocks.
    fn admit(
        &mut self,
        budget: &mut usize,
        kv: &mut KvCacheManager,
        memory: &mut KvMemory,
        prefetch: Prefetch<'_>,
        out: &mut SchedulerOutput,
    ) {
        let bs = kv.config().block_size;
        let capacity = kv.config().device_blocks;
        while *budget > 0 && self.running.len() < self.cfg.max_running {
            let Some(front) = self.waiting.front_mut() else {
                break;
            };
            if kv.config().blocks_for(front.tokens.len()) > capacity {
                let needed_tokens = front.tokens.len();
                if let Some(s) = self.waiting.pop_front() {
                    let e = EngineError::CacheTooSmall {
                        needed_tokens,
                        capacity_tokens: capacity * bs,
                    };
                    out.ended.push((s, Ending::Error(e)));
                }
                continue;
            }
            let seq = SeqId(self.next_seq);
            let from_disk = prefetch(&front.tokens, kv, memory);
            let t = Instant::now();
            let started = kv.start(seq, &front.tokens);
            front.bookkeeping += t.elapsed();
            let mut start = match started {
                Ok(start) => start,
                // Not now: blocks come back as running requests finish.
                Err(KvError::NoFreeBlocks { .. }) => break,
                Err(e) => {
                    if let Some(s) = self.waiting.pop_front() {
                        out.ended.push((s, Ending::Error(e.into())));
                    }
                    continue;
                }
            };
            self.next_seq += 1;
            let Some(mut s) = self.waiting.pop_front() else {
                break;
            };
            start.hit.disk_tokens = from_disk.min(start.hit.host_tokens);
            s.admitted(seq, start.cached_tokens, start.hit);
            if let Err(e) = memory.execute(&start.plan) {
                release(&mut s, kv);
                out.ended.push((s, Ending::Error(e.into())));
                continue;
            }
            let n = s.remaining().min(*budget);
            out.chunks.push((self.running.len(), n));
            *budget -= n;
            self.running.push(s);
        }
    }
}

/// Frees the request's blocks in the cache manager, if it holds any.
fn release(s: &mut Sequence, kv: &mut KvCacheManager) {
    if let Some(seq) = s.seq.take() {
        let t = Instant::now();
        if let Err(e) = kv.free(seq) {
            tracing::error!("{}: releasing its blocks failed: {e}", s.id);
        }
        s.bookkeeping += t.elapsed();
    }
}
