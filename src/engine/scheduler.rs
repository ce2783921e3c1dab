//! The scheduler: which requests run in the next step, and how many of their tokens.
//!
//! Owns: [`Scheduler`]: the waiting queue and the running list (in admission order), and the
//! decisions of one step ([`SchedulerOutput`]: the chunks to run by request id, the copy plans
//! the cache manager made, the requests admitted, preempted and ended). The scheduler decides
//! and keeps the cache manager's books; the engine acts: it reads saved blocks from the disk
//! tier for the requests [`Scheduler::admission_candidates`] names before scheduling, runs the
//! copy plans, the forward and the sampling, and counts what happened.
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
//!    budget, room among `max_running` and device blocks for the whole prompt): the cache
//!    manager matches their cached prefix (host hits, including the blocks the engine just read
//!    from the disk tier, are promoted) and they prefill the rest.
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
use crate::kv::{BlockHash, CopyPlan, KvCacheManager, KvError, SeqId};

/// How a request left the scheduler without finishing a step.
#[derive(Debug)]
pub(crate) enum Ending {
    /// Finished normally (the cache is full for a request running alone).
    Stop(StopReason),
    /// Its consumer went away or it was cancelled.
    Cancelled,
    Error(EngineError),
}

/// What one step runs, and what scheduling it did to the cache.
#[derive(Debug, Default)]
pub(crate) struct SchedulerOutput {
    /// `(request, tokens to feed)`, each from the request's `computed`, in batch order.
    pub(crate) chunks: Vec<(RequestId, usize)>,
    /// The copies the cache manager's decisions need (demotions to make room, promotions of
    /// host hits), to run in this order before the forward; each with the request it was for.
    pub(crate) plans: Vec<(RequestId, CopyPlan)>,
    /// Requests admitted in this step.
    pub(crate) admitted: Vec<RequestId>,
    /// Requests preempted in this step (back at the front of the queue).
    pub(crate) preempted: Vec<RequestId>,
    /// Requests that ended while scheduling; their blocks are already freed.
    pub(crate) ended: Vec<(Sequence, Ending)>,
}

impl SchedulerOutput {
    /// Takes request `id` out of this step's batch (its copies failed, say).
    pub(crate) fn drop_request(&mut self, id: RequestId) {
        self.chunks.retain(|c| c.0 != id);
    }
}

/// Continuous batching with chunked prefill and recompute preemption.
#[derive(Debug)]
pub struct Scheduler {
    cfg: EngineSettings,
    waiting: VecDeque<Sequence>,
    running: Vec<Sequence>,
    next_seq: u64,
    /// An encoder's: a prompt is admitted only when all of it fits the step's budget (its
    /// tokens attend to each other both ways, so it cannot run in chunks).
    whole_prompts: bool,
}

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
            whole_prompts: false,
        }
    }

    /// A scheduler that runs every prompt whole, in one step ([`Self::whole_prompts`]'s field):
    /// an encoder's. `cfg.max_batch_tokens` must hold the longest prompt.
    pub fn whole_prompts(cfg: EngineSettings) -> Self {
        Self {
            whole_prompts: true,
            ..Self::new(cfg)
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

    /// Running request `id`.
    pub(crate) fn running(&self, id: RequestId) -> Option<&Sequence> {
        self.running.iter().find(|s| s.id == id)
    }

    /// Running request `id`, to feed and sample.
    pub(crate) fn running_mut(&mut self, id: RequestId) -> Option<&mut Sequence> {
        self.running.iter_mut().find(|s| s.id == id)
    }

    /// The waiting requests the next [`Self::schedule`] may admit (as many as there are free
    /// places among `max_running`, from the front of the queue): the engine reads their saved
    /// blocks from the disk tier first and notes how many tokens it read in
    /// [`Sequence::disk_tokens`].
    pub(crate) fn admission_candidates(&mut self) -> impl Iterator<Item = &mut Sequence> {
        let places = self.cfg.max_running.saturating_sub(self.running.len());
        self.waiting.iter_mut().take(places)
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
    fn take_running(&mut self, i: usize, kv: &mut KvCacheManager) -> Sequence {
        let mut s = self.running.remove(i);
        release(&mut s, kv);
        s
    }

    /// Decides the next step (see the module docs), making the cache manager's allocations; the
    /// copies they need come back in [`SchedulerOutput::plans`] for the engine to run.
    /// A cached prefix may end only at blocks `ends` accepts (every block, unless the model has
    /// recurrent layers: `engine::states`).
    pub(crate) fn schedule(&mut self, kv: &mut KvCacheManager, ends: &dyn Fn(BlockHash) -> bool) -> SchedulerOutput {
        let mut out = SchedulerOutput::default();
        self.reap_abandoned(kv, &mut out);
        let mut budget = self.cfg.max_batch_tokens;

        // Decodes: room for each sampled token, preempting the newest when blocks run out.
        let mut i = 0;
        while i < self.running.len() {
            if let Room::Gone = self.make_room(i, kv, &mut out) {
                continue;
            }
            if self.running[i].remaining() == 1 && budget > 0 {
                out.chunks.push((self.running[i].id, 1));
                budget -= 1;
            }
            i += 1;
        }
        // Prompt chunks of admitted requests.
        for s in &self.running {
            if budget == 0 {
                break;
            }
            let r = s.remaining();
            if r > 1 {
                let n = s.chunk(r.min(budget));
                out.chunks.push((s.id, n));
                budget -= n;
            }
        }
        if out.preempted.is_empty() {
            self.admit(&mut budget, kv, ends, &mut out);
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
    fn make_room(&mut self, i: usize, kv: &mut KvCacheManager, out: &mut SchedulerOutput) -> Room {
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
                    out.plans.push((self.running[i].id, plan));
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
                    out.preempted.push(victim.id);
                    self.waiting.push_front(victim);
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
    fn admit(&mut self, budget: &mut usize, kv: &mut KvCacheManager, ends: &dyn Fn(BlockHash) -> bool, out: &mut SchedulerOutput) {
        let bs = kv.config().block_size;
        let capacity = kv.config().device_blocks;
        while *budget > 0 && self.running.len() < self.cfg.max_running {
            let Some(front) = self.waiting.front_mut() else {
                break;
            };
            // (The budget left may hold it in a later step.)
            if self.whole_prompts && front.tokens.len() > *budget && *budget < self.cfg.max_batch_tokens {
                break;
            }
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
            let t = Instant::now();
            let started = kv.start_at(seq, &front.tokens, front.reads_cache(), ends);
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
            start.hit.disk_tokens = s.disk_tokens.min(start.hit.host_tokens);
            s.admitted(seq, start.cached_tokens, start.matched_tokens, start.hit);
            out.plans.push((s.id, start.plan));
            out.admitted.push(s.id);
            let n = s.chunk(s.remaining().min(*budget));
            out.chunks.push((s.id, n));
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
