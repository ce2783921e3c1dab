//! The engine core: a model, its KV cache, the scheduler, and one step of continuous batching.
//!
//! Owns: [`Engine`]. Each [`Engine::step`] asks the [`Scheduler`] for this step's chunks (decodes
//! and prompt chunks of many requests), packs them into one [`BatchLayout`] over their block
//! tables, runs one forward, commits the fed tokens (full blocks enter the prefix trie),
//! samples a token for every request whose input is all fed, and sends each request its events.
//! A request that ends (finished, failed, cancelled) has its blocks released in the same step.
//!
//! [`Engine::generate`] runs one request to completion on the caller's thread through the same
//! step, for tests and benchmarks; front-ends use [`super::EngineHandle`], which runs the steps
//! on the engine thread.
//!
//! Counterpart: vLLM v1's `EngineCore.step()` with its `Scheduler.update_from_output()`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::disk::{DiskSettings, DiskTier};
use super::scheduler::{Ending, Scheduler};
use super::sequence::{LastEvent, Sampled, Sequence};
use super::states::{capture_point, may_end, StateCache};
use super::stats::{EngineStats, RequestCounters};
use super::{EngineError, Event, GenerateParams, GenerateRequest, GenerationReport, Histogram, RequestId, Submission};
use crate::config::{CacheSettings, EngineSettings};
use crate::kv::{CacheStats, KvCacheConfig, KvCacheManager, PrefixMatch};
use crate::model::grammar::Constraint;
use crate::model::{LoadedModel, Logits, ModelError, RecurrentSeq, RecurrentState};
use crate::ops::{BatchLayout, PagedLayout, SeqChunk};
use crate::persist::{fingerprint, kv_layout, CacheJob, ConversationId, ConversationStore, TurnText};
use crate::runtime::{memory_split, size_pools, KvMemory, MemorySplit, PoolSizes};

/// Checks a request before it is queued: a prompt that is empty, over the
/// context or outside the vocabulary, parameters out of range, empty stop
/// strings, a prompt larger than the whole cache (`capacity_tokens`).
pub(crate) fn validate(model: &LoadedModel, capacity_tokens: usize, r: &GenerateRequest) -> Result<(), EngineError> {
    model.check_prompt_fits(r.prompt.len())?;
    let vocab = model.transformer.hparams().vocab_size;
    ModelError::check_token_ids(&r.prompt, vocab)?;
    r.params.sampling.validate()?;
    r.params.sampling.check_vocab(vocab)?;
    if model.transformer.hparams().encoder && r.params.embed.is_none() {
        return Err(EngineError::InvalidRequest(format!(
            "{} is an encoder ({}): it serves embeddings only and generates no text",
            model.info.name, model.info.architecture
        )));
    }
    if r.params.max_tokens == 0 && r.params.prompt_logprobs.is_none() && r.params.embed.is_none() {
        return Err(EngineError::InvalidRequest("max_tokens must be at least 1".into()));
    }
    if r.params.embed.is_some() && r.params.max_tokens > 0 {
        return Err(EngineError::InvalidRequest("an embedding generates nothing: max_tokens must be 0".into()));
    }
    if r.params.stop.iter().any(String::is_empty) {
        return Err(EngineError::InvalidRequest("a stop string must not be empty".into()));
    }
    if r.prompt.len() > capacity_tokens {
        return Err(EngineError::CacheTooSmall {
            needed_tokens: r.prompt.len(),
            capacity_tokens,
        });
    }
    Ok(())
}

/// Request `r`'s grammar compiled, if it has one; an error names what does not compile.
pub(crate) fn constraint_for(model: &LoadedModel, r: &GenerateRequest) -> Result<Option<Constraint>, EngineError> {
    match &r.params.grammar {
        None => Ok(None),
        Some(g) => Ok(Some(model.grammar()?.compile(g)?)),
    }
}

/// Figures kept across steps for [`EngineStats`].
#[derive(Debug, Clone)]
struct Counters {
    requests: RequestCounters,
    prompt_tokens: u64,
    generated_tokens: u64,
    steps: u64,
    ttft: Histogram,
    decode_rate: Histogram,
    busy: Duration,
}

/// One chunk's share of a forward's output.
struct ChunkRows {
    /// Logits of the chunk's last rows (see [`Engine::forward`]).
    logits: Vec<Vec<f32>>,
    /// An embedding's final rows, of the chunk's positions from `pooled_from` on.
    pooled_from: usize,
    pooled: Vec<Vec<f32>>,
}

/// A request's last event, and the text its turn saves first (if it names a conversation).
enum Outgoing {
    Event(LastEvent),
    Turn(ConversationId, TurnText, LastEvent),
}

/// A model with its KV cache and scheduler.
pub struct Engine {
    model: Arc<LoadedModel>,
    kv: KvCacheManager,
    memory: KvMemory,
    scheduler: Scheduler,
    counters: Counters,
    next_request: u64,
    /// Last events of requests that ended in this step, sent after the stats
    /// that count them are published.
    outbox: Vec<Outgoing>,
    /// Cache files of turns that ended in this step, queued after their text.
    cache_jobs: Vec<CacheJob>,
    /// Where the engine thread's handles read stats from.
    published: Option<Arc<Mutex<EngineStats>>>,
    /// Conversations and cache files; `None` until [`Engine::with_disk`].
    disk: Option<DiskTier>,
    /// A model with recurrent layers: copies of its state where cached prefixes may end.
    states: Option<StateCache>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("model", &self.model.info)
            .field("memory", &self.memory)
            .field("scheduler", &self.scheduler)
            .finish()
    }
}

impl Engine {
    /// Sizes the cache from `cache` and the memory available now (after the
    /// weights are loaded): free VRAM for the device tier on a CUDA device,
    /// RAM otherwise.
    pub fn new(model: LoadedModel, cache: &CacheSettings, engine: &EngineSettings) -> Result<Self, EngineError> {
        let layout = Self::layout(&model, cache)?;
        let context = model.info.context_length;
        let sizes = match model.transformer.hparams().encoder {
            // An encoder caches nothing: blocks for the inputs running at once, no host tier.
            true => PoolSizes {
                device_blocks: engine.max_running.max(1) * context.div_ceil(cache.block_size.max(1)),
                host_blocks: 0,
            },
            false => size_pools(model.transformer.device(), cache, &layout, context)?,
        };
        Self::with_pool_sizes(model, cache, engine, sizes)
    }

    /// An engine with explicit tier capacities (tests and benchmarks).
    pub fn with_pool_sizes(
        model: LoadedModel,
        cache: &CacheSettings,
        engine: &EngineSettings,
        sizes: PoolSizes,
    ) -> Result<Self, EngineError> {
        if engine.max_running == 0 || engine.max_batch_tokens < engine.max_running {
            return Err(EngineError::InvalidRequest(format!(
                "engine limits: max_running {} must be at least 1 and max_batch_tokens {} at least max_running",
                engine.max_running, engine.max_batch_tokens
            )));
        }
        let layout = Self::layout(&model, cache)?;
        // An encoder's K/V depends on the tokens after it: nothing is cached, and each prompt
        // runs whole in one step (the budget raised to hold the longest).
        let encoder = model.transformer.hparams().encoder;
        let context = model.info.context_length;
        let kv = KvCacheManager::new(KvCacheConfig {
            block_size: cache.block_size,
            device_blocks: sizes.device_blocks,
            host_blocks: sizes.host_blocks,
            prefix_caching: cache.prefix_caching && !encoder,
            write_through: cache.write_through,
            bytes_per_block: layout.block_bytes(),
        })?;
        let memory = KvMemory::on_device(
            model.transformer.device(),
            layout.clone(),
            sizes.device_blocks,
            sizes.host_blocks,
        )?;
        tracing::debug!(
            "KV cache: {} device blocks, {} host blocks of {} tokens ({} KiB each)",
            sizes.device_blocks,
            sizes.host_blocks,
            cache.block_size,
            layout.block_bytes() / 1024
        );
        // Copies of a recurrent model's state: a quarter of the host tier's bytes, and room for
        // at least 16.
        let states = model.transformer.recurrent_state().map(|fresh| {
            let budget = (sizes.host_blocks as u64 * layout.block_bytes() / 4).max(16 * fresh.bytes() as u64) as usize;
            StateCache::new(budget)
        });
        Ok(Self {
            states,
            model: Arc::new(model),
            kv,
            memory,
            scheduler: match encoder {
                true => Scheduler::whole_prompts(EngineSettings {
                    max_batch_tokens: engine.max_batch_tokens.max(context),
                    ..*engine
                }),
                false => Scheduler::new(*engine),
            },
            counters: Counters {
                requests: RequestCounters::default(),
                prompt_tokens: 0,
                generated_tokens: 0,
                steps: 0,
                ttft: Histogram::new(super::TTFT_BUCKETS),
                decode_rate: Histogram::new(super::TOKENS_PER_SECOND_BUCKETS),
                busy: Duration::ZERO,
            },
            next_request: 0,
            outbox: Vec::new(),
            cache_jobs: Vec::new(),
            published: None,
            disk: None,
        })
    }

    /// Adds the disk tier: conversations and their cache files under `settings.data_dir`.
    /// Hashes the model's files for the cache files' fingerprint (once, here) and indexes the
    /// saved cache files from their headers.
    pub fn with_disk(mut self, settings: &DiskSettings) -> Result<Self, EngineError> {
        let layout = kv_layout(
            self.model.transformer.kv_shape(),
            self.kv.config().block_size,
            self.memory.layout().dtype,
        );
        let started = Instant::now();
        let fp = fingerprint(
            &self.model.info.files,
            &self.model.info.device,
            &self.model.info.kv_variant,
            &layout,
            &mut |_| {},
        )?;
        tracing::debug!(
            "model fingerprint {fp} in {:.0} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        self.disk = Some(DiskTier::open(settings, fp, layout)?);
        Ok(self)
    }

    /// The conversation store, when the engine has a disk tier.
    pub fn conversations(&self) -> Option<&ConversationStore> {
        self.disk.as_ref().map(DiskTier::store)
    }

    /// Waits until every queued save (cache files, conversation text) is on disk, then
    /// publishes stats that count them.
    pub fn flush_disk(&mut self) {
        if let Some(d) = &self.disk {
            d.flush();
        }
        self.flush();
    }

    /// Deletes conversation `id`'s cache file (queued behind pending writes).
    pub fn delete_cache(&self, id: ConversationId) {
        if let Some(d) = &self.disk {
            d.delete_cache(id);
        }
    }

    /// The pool's layout: the model's K/V shape, the block size and the K/V type (the setting,
    /// or the default); a type the model's head size or the device cannot take is an error
    /// naming the setting.
    fn layout(model: &LoadedModel, cache: &CacheSettings) -> Result<PagedLayout, EngineError> {
        let s = model.transformer.kv_shape();
        let dtype = cache.kv_dtype();
        s.check_dtype(dtype)
            .and_then(|()| dtype.check_device(model.transformer.device().is_cuda()))
            .map_err(|reason| EngineError::InvalidRequest(format!("cache.kv_dtype = {dtype}: {reason}")))?;
        Ok(PagedLayout::new(s, cache.block_size, dtype))
    }

    pub fn model(&self) -> &LoadedModel {
        &self.model
    }

    pub(crate) fn model_arc(&self) -> Arc<LoadedModel> {
        self.model.clone()
    }

    /// Tokens the device tier holds: the longest prompt that can ever run.
    pub fn capacity_tokens(&self) -> usize {
        self.kv.config().device_blocks * self.kv.config().block_size
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.kv.stats()
    }

    /// How the device's memory is split between weights, the KV cache's
    /// device tier and the rest (VRAM on a CUDA device, RAM otherwise).
    pub fn memory(&self) -> Result<MemorySplit, EngineError> {
        let weights = self.model.transformer.weight_bytes();
        Ok(memory_split(
            self.model.transformer.device(),
            weights,
            &self.kv.stats().device,
        )?)
    }

    /// A snapshot of the cache, the queue and the counters.
    pub fn stats(&self) -> EngineStats {
        let c = &self.counters;
        EngineStats {
            memory: self.memory().ok(),
            waiting: self.scheduler.num_waiting(),
            running: self.scheduler.num_running(),
            requests: c.requests,
            prompt_tokens: c.prompt_tokens,
            generated_tokens: c.generated_tokens,
            steps: c.steps,
            ttft_seconds: c.ttft.clone(),
            decode_tokens_per_second: c.decode_rate.clone(),
            busy: c.busy,
            disk: self.disk.as_ref().map(DiskTier::stats),
            recurrent_states: self.states.as_ref().map(StateCache::stats),
            ..EngineStats::new(
                self.kv.stats(),
                self.memory.layout().dtype,
                self.memory.layout().token_bytes() as u64,
            )
        }
    }

    /// The cached prefix `prompt` would get now, without changing anything (for a model with
    /// recurrent layers, only up to a block whose state copy is kept, as admission takes it).
    pub fn peek(&self, prompt: &[u32]) -> PrefixMatch {
        let states = self.states.as_ref();
        self.kv.peek_at(prompt, &|h| may_end(states, h))
    }

    /// Whether any request is waiting or running.
    pub fn has_work(&self) -> bool {
        self.scheduler.has_work()
    }

    /// Queues a request that was validated when it was submitted; it runs
    /// from the next step. One that fails validation now ends at once with
    /// an [`Event::Error`].
    pub fn add_request(&mut self, mut s: Submission) {
        if let Err(e) = validate(&self.model, self.capacity_tokens(), &s.request) {
            let _ = s.events.send(Event::Error(e));
            return;
        }
        if s.constraint.is_none() {
            match constraint_for(&self.model, &s.request) {
                Ok(c) => s.constraint = c,
                Err(e) => {
                    let _ = s.events.send(Event::Error(e));
                    return;
                }
            }
        }
        self.counters.requests.submitted += 1;
        self.counters.prompt_tokens += s.request.prompt.len() as u64;
        self.scheduler.add(Sequence::new(s));
    }

    /// Cancels request `id`, releasing everything it holds; its channel gets
    /// [`EngineError::Cancelled`]. Returns whether it was found.
    pub fn cancel(&mut self, id: RequestId) -> bool {
        let found = match self.scheduler.remove(id, &mut self.kv) {
            Some(s) => {
                self.end(s, Ending::Cancelled);
                true
            }
            None => false,
        };
        self.flush();
        found
    }

    /// A recurrent model's request `id`, just admitted: its state where its cached prefix ends
    /// (the state before any token, or the copy kept at that block).
    fn restore_state(&mut self, id: RequestId) -> Result<(), EngineError> {
        let Some(cache) = self.states.as_mut() else {
            return Ok(());
        };
        let Some(s) = self.scheduler.running_mut(id) else {
            return Ok(());
        };
        s.captured.clear();
        s.snapshot = None;
        s.recurrent = if s.computed == 0 {
            self.model.transformer.recurrent_state()
        } else {
            let end = s.seq.and_then(|seq| self.kv.chain_end(seq));
            match end {
                Some((n, hash)) if n == s.computed => cache.get(hash),
                _ => None,
            }
        };
        if s.recurrent.is_none() {
            return Err(EngineError::Step(format!("{id}: no recurrent state where its cached prefix ends ({} tokens)", s.computed)));
        }
        Ok(())
    }

    /// Ends a request that left the scheduler (its blocks already freed);
    /// its last event waits in the outbox for [`Self::flush`].
    fn end(&mut self, mut s: Sequence, how: Ending) {
        // Its last copy of the recurrent state, for the next turn.
        if let (Some(cache), Some((hash, state))) = (self.states.as_mut(), s.snapshot.take()) {
            cache.insert(hash, state);
        }
        let c = &mut self.counters;
        let last = match how {
            Ending::Stop(stop) => {
                let save = s.save.clone();
                let (report, last) = s.finish(stop, &self.model);
                c.requests.finished += 1;
                c.decode_rate.observe(report.decode_rate());
                if let (Some(_), Some(save)) = (&self.disk, save) {
                    let reply = report.text.clone();
                    let text = match save.messages {
                        None => TurnText::AppendReply { reply },
                        Some(messages) => TurnText::Replace { messages, reply },
                    };
                    self.outbox.push(Outgoing::Turn(save.conversation, text, last));
                    return;
                }
                last
            }
            Ending::Cancelled => {
                c.requests.cancelled += 1;
                s.fail(EngineError::Cancelled)
            }
            Ending::Error(e) => {
                tracing::warn!("{} failed: {e}", s.id);
                c.requests.failed += 1;
                s.fail(e)
            }
        };
        self.outbox.push(Outgoing::Event(last));
    }

    /// Publishes the stats (when an [`super::EngineHandle`] reads them), then
    /// sends the last events of the requests that ended: a front-end that
    /// sees a request end sees stats that count it. A turn that names a
    /// conversation gets its last event from the background writer once its
    /// text is saved (so the next message is appended after the reply); its
    /// cache file is queued after that.
    fn flush(&mut self) {
        if let Some(to) = &self.published {
            let s = self.stats();
            match to.lock() {
                Ok(mut g) => *g = s,
                Err(poisoned) => *poisoned.into_inner() = s,
            }
        }
        for out in self.outbox.drain(..) {
            match (out, &self.disk) {
                (Outgoing::Event(last), _) => last.send(),
                (Outgoing::Turn(id, text, last), Some(disk)) => disk.save_turn(id, text, Box::new(move || last.send())),
                (Outgoing::Turn(_, _, last), None) => last.send(),
            }
        }
        if let Some(disk) = &self.disk {
            for job in self.cache_jobs.drain(..) {
                disk.queue_cache(job);
            }
        }
    }

    /// Publishes stats into `to` from now on, after every step and command.
    pub(crate) fn publish_to(&mut self, to: Arc<Mutex<EngineStats>>) {
        self.published = Some(to);
        self.flush();
    }

    /// Runs one step: schedule, one batched forward, commit, sample, send
    /// events, release what ended. Does nothing when there is no work.
    pub fn step(&mut self) {
        self.step_inner();
        self.flush();
    }

    fn step_inner(&mut self) {
        // Saved blocks that extend the cached prefix of the requests about to be admitted.
        if let Some(disk) = &self.disk {
            for s in self.scheduler.admission_candidates() {
                let (read, state) = disk.prefetch(&mut self.kv, &mut self.memory, &s.tokens);
                s.disk_tokens = s.disk_tokens.max(read);
                // A recurrent model's state saved with those blocks.
                let shape = self.model.transformer.hparams().state_shape();
                if let (Some(cache), Some(shape), Some((hash, floats))) = (self.states.as_mut(), shape, state) {
                    match RecurrentState::from_floats(&shape, &floats) {
                        Some(st) => cache.insert(hash, st),
                        None => tracing::warn!("a cache file's recurrent state has {} values, not this model's", floats.len()),
                    }
                }
            }
        }
        let states = self.states.as_ref();
        let ends = |h| may_end(states, h);
        let mut out = self.scheduler.schedule(&mut self.kv, &ends);
        self.counters.requests.preemptions += out.preempted.len() as u64;
        for id in out.admitted.clone() {
            if let Err(e) = self.restore_state(id) {
                out.drop_request(id);
                if let Some(s) = self.scheduler.remove(id, &mut self.kv) {
                    self.end(s, Ending::Error(e));
                }
            }
        }
        for (s, how) in std::mem::take(&mut out.ended) {
            self.end(s, how);
        }
        // The copies the scheduling needs, in order; a request whose copies fail ends.
        for (id, plan) in std::mem::take(&mut out.plans) {
            if let Err(e) = self.memory.execute(&plan) {
                out.drop_request(id);
                if let Some(s) = self.scheduler.remove(id, &mut self.kv) {
                    self.end(s, Ending::Error(e.into()));
                }
            }
        }
        if out.chunks.is_empty() {
            return;
        }
        let started = Instant::now();
        let result = self.forward(&out.chunks);
        self.counters.busy += started.elapsed();
        self.counters.steps += 1;
        let rows = match result {
            Ok(rows) => rows,
            Err(e) => {
                // The whole batch failed: every request in it ends with the error.
                let msg = e.to_string();
                tracing::error!("a batched forward failed: {msg}");
                for &(id, _) in &out.chunks {
                    if let Some(s) = self.scheduler.remove(id, &mut self.kv) {
                        self.end(s, Ending::Error(EngineError::Step(msg.clone())));
                    }
                }
                return;
            }
        };
        self.prepare_masks(&out.chunks);
        let mut ended: Vec<(RequestId, Ending)> = Vec::new();
        for (&(id, n), rows) in out.chunks.iter().zip(rows) {
            if let Some(how) = self.advance(id, n, rows) {
                ended.push((id, how));
            }
        }
        for (id, how) in ended {
            if matches!(how, Ending::Stop(_)) {
                self.save_cache(id);
            }
            if let Some(s) = self.scheduler.remove(id, &mut self.kv) {
                self.end(s, how);
            }
        }
    }

    /// Computes the grammar masks of the requests about to sample in this step, across the
    /// CPU threads (a mask takes a fraction of a millisecond; a batch's would add up).
    fn prepare_masks(&mut self, chunks: &[(RequestId, usize)]) {
        let mut taken: Vec<(RequestId, std::sync::Mutex<Constraint>)> = Vec::new();
        for &(id, n) in chunks {
            if let Some(s) = self.scheduler.running_mut(id) {
                if s.remaining() == n {
                    if let Some(c) = s.constraint.take() {
                        taken.push((id, std::sync::Mutex::new(c)));
                    }
                }
            }
        }
        if taken.is_empty() {
            return;
        }
        crate::ops::par::for_ranges(taken.len(), |range| {
            for (_, c) in &taken[range] {
                if let Ok(mut c) = c.lock() {
                    c.prepare();
                }
            }
        });
        for (id, c) in taken {
            // A poisoned lock still holds the constraint (llguidance catches its own panics).
            let c = c.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(s) = self.scheduler.running_mut(id) {
                s.constraint = Some(c);
            }
        }
    }

    /// After the forward: commits request `id`'s `n` fed tokens (full blocks enter the trie) and,
    /// when its input is all fed, samples its next token. How it ends, if it does.
    fn advance(&mut self, id: RequestId, n: usize, out: ChunkRows) -> Option<Ending> {
        let context = self.model.info.context_length;
        let s = self.scheduler.running_mut(id)?;
        let seq = s.seq?;
        let ChunkRows {
            logits: mut rows,
            pooled_from,
            pooled,
        } = out;
        // The rows are the logits of the chunk's last `rows.len()` positions: all of a chunk
        // that scores its prompt (one row when the chunk is one token), else only its last
        // (none for an embedding, whose final rows are pooled instead).
        s.score_prompt(s.computed + n - rows.len(), &rows);
        s.pool(s.computed + pooled_from, &pooled);
        let logits = rows.pop().unwrap_or_default();
        let t = Instant::now();
        let plan = self.kv.commit(seq, &s.tokens[s.computed..s.computed + n]);
        s.bookkeeping += t.elapsed();
        if let Err(e) = plan
            .map_err(EngineError::from)
            .and_then(|p| self.memory.execute(&p).map_err(EngineError::from))
        {
            return Some(Ending::Error(e));
        }
        s.computed += n;
        // The copies of the recurrent state the forward took, where their blocks are now in the
        // trie: the latest is kept; when the prompt is done, each goes to the cache (the one
        // before its last token for a request that sends it again, the one at its end for one
        // that extends it); the one where the prompt stopped sharing the cache's blocks goes at
        // once (the prefix that prompt shared).
        let prompt_done = s.remaining() == 0 && s.ttft().is_none();
        for (at, state) in std::mem::take(&mut s.captured) {
            if let Some(hash) = self.kv.block_hash_at(seq, at) {
                let fork = s.fork_at == Some(at);
                if fork {
                    s.fork_at = None;
                }
                if let (true, Some(cache)) = (prompt_done || fork, self.states.as_mut()) {
                    cache.insert(hash, state.clone());
                }
                s.snapshot = Some((hash, state));
            }
        }
        if s.remaining() > 0 {
            return None; // a prompt chunk; the prompt goes on next step
        }
        let first = s.ttft().is_none();
        if s.params.max_tokens > 0 {
            self.counters.generated_tokens += 1;
        }
        let ending = match s.sample(logits, &self.model.tokenizer, context) {
            Ok(Sampled::Continue) => None,
            Ok(Sampled::Finished(stop)) => Some(Ending::Stop(stop)),
            Err(e) => Some(Ending::Error(e)),
        };
        // (An embedding's time to its vector is no time to a first token.)
        if first && s.params.embed.is_none() {
            if let Some(t) = s.ttft() {
                self.counters.ttft.observe(t.as_secs_f64());
            }
        }
        ending
    }

    /// Queues the cache file of running request `id`'s conversation, if it names one: the K/V
    /// of every token computed so far (before its blocks are released).
    fn save_cache(&mut self, id: RequestId) {
        let (Some(disk), Some(s)) = (&self.disk, self.scheduler.running(id)) else {
            return;
        };
        let (Some(save), Some(seq)) = (&s.save, s.seq) else {
            return;
        };
        if let Some(table) = self.kv.block_table(seq) {
            let state = s.snapshot.as_ref().map(|(h, st)| (*h, st));
            if let Some(job) = disk.cache_job(&save.conversation, &s.tokens[..s.computed], table, &self.memory, state) {
                self.cache_jobs.push(job);
            }
        }
    }

    /// One forward over `chunks` of the running requests; per chunk, in chunk order, the logits
    /// of its last token, or of every token of a chunk whose prompt is being scored, and the
    /// final rows an embedding pools.
    fn forward(&mut self, chunks: &[(RequestId, usize)]) -> Result<Vec<ChunkRows>, EngineError> {
        let mut states = self.take_states(chunks)?;
        let out = self.forward_chunks(chunks, &mut states);
        self.put_states(chunks, states);
        out
    }

    /// [`Self::forward`] with the recurrent states taken out.
    fn forward_chunks(
        &mut self,
        chunks: &[(RequestId, usize)],
        states: &mut [RecurrentSeq],
    ) -> Result<Vec<ChunkRows>, EngineError> {
        let mut tokens = Vec::new();
        let mut layout = Vec::with_capacity(chunks.len());
        let mut tables = Vec::with_capacity(chunks.len());
        // Rows of logits per chunk: its last, or all of them for a prompt being scored, none
        // for an embedding; and the rows an embedding pools.
        let mut rows: Vec<u32> = Vec::new();
        let mut hidden: Vec<u32> = Vec::new();
        let mut per_chunk = Vec::with_capacity(chunks.len());
        for &(id, n) in chunks {
            let s = self
                .scheduler
                .running(id)
                .ok_or(EngineError::Step(format!("{id} is scheduled but not running")))?;
            let seq = s
                .seq
                .ok_or(EngineError::Step(format!("{} is running without blocks", s.id)))?;
            let first_row = tokens.len() as u32;
            let pooled = s.pooled_rows(n);
            let wanted = match () {
                _ if s.params.embed.is_some() => 0,
                _ if s.scores_prompt() => n,
                _ => 1,
            };
            rows.extend(first_row + (n - wanted) as u32..first_row + n as u32);
            hidden.extend(pooled.clone().map(|r| first_row + r as u32));
            per_chunk.push((wanted, pooled));
            tokens.extend_from_slice(&s.tokens[s.computed..s.computed + n]);
            layout.push(SeqChunk {
                cached: s.computed,
                new: n,
            });
            tables.push(self.kv.block_table(seq).ok_or(crate::kv::KvError::UnknownSeq(seq))?);
        }
        let batch = BatchLayout::new(layout).map_err(ModelError::from)?;
        let mut store = self.memory.store(&tables);
        let which = match () {
            _ if rows.is_empty() => None,
            _ if per_chunk.iter().all(|(k, _)| *k == 1) => Some(Logits::LastPerSequence),
            _ => Some(Logits::Rows(rows)),
        };
        let (logits, pooled) = self
            .model
            .transformer
            .forward_outputs(&tokens, &batch, store.as_mut(), states, which, &hidden)?;
        let rows_of = |t: Option<candle_core::Tensor>| -> Result<Vec<Vec<f32>>, ModelError> {
            Ok(match t {
                Some(t) => t.to_vec2::<f32>()?,
                None => Vec::new(),
            })
        };
        let mut all = rows_of(logits)?.into_iter();
        let mut all_pooled = rows_of(pooled)?.into_iter();
        Ok(per_chunk
            .into_iter()
            .map(|(k, p)| ChunkRows {
                logits: all.by_ref().take(k).collect(),
                pooled_from: p.start,
                pooled: all_pooled.by_ref().take(p.len()).collect(),
            })
            .collect())
    }

    /// A recurrent model's states for the forward over `chunks`, taken out of their requests,
    /// each to copy at the chunk's last block boundary; none for other models.
    fn take_states(&mut self, chunks: &[(RequestId, usize)]) -> Result<Vec<RecurrentSeq>, EngineError> {
        if self.states.is_none() {
            return Ok(Vec::new());
        }
        let bs = self.kv.config().block_size;
        let mut out = Vec::with_capacity(chunks.len());
        for &(id, n) in chunks {
            let Some(state) = self.scheduler.running_mut(id).and_then(|s| s.recurrent.take()) else {
                self.put_states(&chunks[..out.len()], out);
                return Err(EngineError::Step(format!("{id} runs without its recurrent state")));
            };
            // The last chunk of a first prompt copies before its last token: a request that
            // sends the same prompt again recomputes that one (a cached prefix leaves at least
            // one token to run), so its prefix ends a block earlier where the prompt's length
            // is a multiple of the block.
            let (computed, upto) = match self.scheduler.running(id) {
                Some(s) if s.remaining() == n && s.ttft().is_none() => (s.computed, n - 1),
                Some(s) => (s.computed, n),
                None => (0, n),
            };
            let mut r = RecurrentSeq::new(state);
            // (A boundary at the chunk's end is the state after it: `put_states` keeps that.)
            r.capture_after = capture_point(computed, upto, bs).filter(|&m| m < n);
            out.push(r);
        }
        Ok(out)
    }

    /// Puts the states of [`Self::take_states`] back, with the copies the forward took and,
    /// where a chunk ends a block, the state after it.
    fn put_states(&mut self, chunks: &[(RequestId, usize)], states: Vec<RecurrentSeq>) {
        let bs = self.kv.config().block_size;
        for (&(id, n), r) in chunks.iter().zip(states) {
            if let Some(s) = self.scheduler.running_mut(id) {
                s.captured.clear();
                if let (Some(m), Some(c)) = (r.capture_after, r.captured) {
                    s.captured.push((s.computed + m, c));
                }
                let end = s.computed + n;
                if end.is_multiple_of(bs) {
                    s.captured.push((end, r.state.clone()));
                }
                s.recurrent = Some(r.state);
            }
        }
    }

    /// Runs one request to completion on this thread, streaming its text to
    /// `on_text` (an error there cancels the request). Other queued requests
    /// step along with it.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        on_text: impl FnMut(&str) -> Result<(), EngineError>,
    ) -> Result<GenerationReport, EngineError> {
        self.run(GenerateRequest::new(prompt.to_vec(), params.clone()), on_text)
    }

    /// [`Self::generate`] for a whole request (one that saves its turn, say).
    pub fn run(
        &mut self,
        request: GenerateRequest,
        mut on_text: impl FnMut(&str) -> Result<(), EngineError>,
    ) -> Result<GenerationReport, EngineError> {
        validate(&self.model, self.capacity_tokens(), &request)?;
        // Counted down from the top, apart from the ids an EngineHandle hands out.
        let id = RequestId(u64::MAX - self.next_request);
        self.next_request += 1;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        self.add_request(Submission {
            id,
            request,
            events: tx,
            submitted: Instant::now(),
            ticket: None,
            constraint: None,
        });
        loop {
            let waited = if self.has_work() {
                self.step();
                None
            } else {
                // A turn that saves its text gets its last event from the background
                // writer: wait for it (the channel closes when there is nothing more).
                Some(rx.blocking_recv().ok_or(EngineError::Stopped)?)
            };
            let mut drained = std::iter::from_fn(|| rx.try_recv().ok());
            for event in waited.into_iter().chain(&mut drained) {
                match event {
                    Event::Token { text, .. } => {
                        if !text.is_empty() {
                            if let Err(e) = on_text(&text) {
                                self.cancel(id);
                                return Err(e);
                            }
                        }
                    }
                    Event::Done(report) => return Ok(*report),
                    Event::Error(e) => return Err(e),
                }
            }
        }
    }
}
