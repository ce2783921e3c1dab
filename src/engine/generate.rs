//! The engine: a model, its KV cache manager and the memory behind it, and
//! the loop that turns one prompt into a stream of tokens.

use std::time::{Duration, Instant};

use super::EngineError;
use crate::config::{available_ram_bytes, total_ram_bytes, CacheSettings, SamplingParams};
use crate::kv::{CacheStats, KvCacheConfig, KvCacheManager, PrefixMatch, SeqId};
use crate::model::sampling::Sampler;
use crate::model::{LoadedModel, Logits, ModelError};
use crate::ops::{BatchLayout, PagedLayout};
use crate::runtime::{pool_sizes, KvMemory, MemorySplit, PoolSizes};

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Keep every step's logits in the report (tests compare them).
    pub keep_logits: bool,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-sequence / end-of-turn token.
    Eos,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The context is full.
    ContextFull,
}

/// The outcome of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationReport {
    pub prompt_tokens: usize,
    /// Prompt tokens served from the cache, by tier.
    pub cached: PrefixMatch,
    /// Generated ids (without the stop token).
    pub tokens: Vec<u32>,
    pub text: String,
    pub stop: StopReason,
    /// Time to the first sampled token (cache lookup, copies, prefill, one sample).
    pub ttft: Duration,
    /// Time spent decoding after the first token.
    pub decode: Duration,
    /// Time spent in the cache manager's bookkeeping (lookup, allocation,
    /// commits, release), not counting copies or the forward.
    pub bookkeeping: Duration,
    /// Each step's logits when [`GenerateParams::keep_logits`] was set.
    pub logits: Vec<Vec<f32>>,
}

/// A model with its KV cache. One request runs at a time (the engine thread
/// with continuous batching comes later); requests share the cache.
pub struct Engine {
    model: LoadedModel,
    kv: KvCacheManager,
    memory: KvMemory,
    next_seq: u64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("model", &self.model.info)
            .field("memory", &self.memory)
            .finish()
    }
}

impl Engine {
    /// Sizes the cache from `cache` and the memory available now (after the
    /// weights are loaded): free VRAM for the device tier on a CUDA device,
    /// RAM otherwise.
    pub fn new(model: LoadedModel, cache: &CacheSettings) -> Result<Self, EngineError> {
        let layout = Self::layout(&model, cache);
        let ram = available_ram_bytes().unwrap_or(4 << 30);
        let device_free = match model.transformer.device() {
            #[cfg(feature = "cuda")]
            candle_core::Device::Cuda(dev) => {
                let (free, _total) = dev
                    .cuda_stream()
                    .context()
                    .mem_get_info()
                    .map_err(|e| crate::runtime::RuntimeError::Device(e.to_string()))?;
                free as u64
            }
            // Both tiers come out of the same RAM: the host tier is taken first.
            _ => ram.saturating_sub(cache.host_bytes),
        };
        let sizes = pool_sizes(cache, &layout, device_free, ram, model.info.context_length)?;
        Self::with_pool_sizes(model, cache, sizes)
    }

    /// An engine with explicit tier capacities (tests and benchmarks).
    pub fn with_pool_sizes(model: LoadedModel, cache: &CacheSettings, sizes: PoolSizes) -> Result<Self, EngineError> {
        let layout = Self::layout(&model, cache);
        let kv = KvCacheManager::new(KvCacheConfig {
            block_size: cache.block_size,
            device_blocks: sizes.device_blocks,
            host_blocks: sizes.host_blocks,
            prefix_caching: cache.prefix_caching,
            write_through: cache.write_through,
            bytes_per_block: layout.block_bytes(),
        })?;
        let memory = match model.transformer.device() {
            #[cfg(feature = "cuda")]
            candle_core::Device::Cuda(dev) => KvMemory::new_cuda(dev, layout, sizes.device_blocks, sizes.host_blocks)?,
            _ => KvMemory::new(layout, sizes.device_blocks, sizes.host_blocks),
        };
        tracing::debug!(
            "KV cache: {} device blocks, {} host blocks of {} tokens ({} KiB each)",
            sizes.device_blocks,
            sizes.host_blocks,
            cache.block_size,
            layout.block_bytes() / 1024
        );
        Ok(Self {
            model,
            kv,
            memory,
            next_seq: 0,
        })
    }

    fn layout(model: &LoadedModel, cache: &CacheSettings) -> PagedLayout {
        let s = model.transformer.kv_shape();
        PagedLayout {
            layers: s.layers,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            block_size: cache.block_size,
        }
    }

    pub fn model(&self) -> &LoadedModel {
        &self.model
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.kv.stats()
    }

    /// How the device's memory is split between weights, the KV cache's
    /// device tier and the rest (VRAM on a CUDA device, RAM otherwise).
    pub fn memory(&self) -> Result<MemorySplit, EngineError> {
        let kv = self.kv.stats().device;
        let weights = self.model.transformer.weight_bytes();
        match self.model.transformer.device() {
            #[cfg(feature = "cuda")]
            candle_core::Device::Cuda(dev) => {
                let (free, total) = dev
                    .cuda_stream()
                    .context()
                    .mem_get_info()
                    .map_err(|e| crate::runtime::RuntimeError::Device(e.to_string()))?;
                Ok(MemorySplit::new("cuda", total as u64, free as u64, weights, &kv, false))
            }
            _ => {
                let total = total_ram_bytes().unwrap_or(0);
                let free = available_ram_bytes().unwrap_or(0);
                Ok(MemorySplit::new("cpu", total, free, weights, &kv, true))
            }
        }
    }

    /// The cached prefix `prompt` would get now, without changing anything.
    pub fn peek(&self, prompt: &[u32]) -> PrefixMatch {
        self.kv.peek(prompt)
    }

    /// Runs `prompt` and streams the completion's text to `on_text`. Whatever
    /// happens, the sequence's blocks are released before this returns.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        on_text: impl FnMut(&str) -> Result<(), EngineError>,
    ) -> Result<GenerationReport, EngineError> {
        self.model.check_prompt_fits(prompt.len())?;
        params.sampling.validate()?;
        let started = Instant::now();
        let seq = SeqId(self.next_seq);
        self.next_seq += 1;
        let t = Instant::now();
        let start = self.kv.start(seq, prompt)?;
        let mut bookkeeping = t.elapsed();
        let result = self
            .memory
            .execute(&start.plan)
            .map_err(EngineError::from)
            .and_then(|()| self.run(seq, prompt, start.cached_tokens, params, on_text, started));
        let t = Instant::now();
        let freed = self.kv.free(seq);
        bookkeeping += t.elapsed();
        let mut report = result?;
        freed?;
        report.cached = start.hit;
        report.bookkeeping += bookkeeping;
        Ok(report)
    }

    fn run(
        &mut self,
        seq: SeqId,
        prompt: &[u32],
        cached: usize,
        params: &GenerateParams,
        mut on_text: impl FnMut(&str) -> Result<(), EngineError>,
        started: Instant,
    ) -> Result<GenerationReport, EngineError> {
        let context = self.model.info.context_length;
        let tf = &self.model.transformer;
        let mut sampler = Sampler::new(params.sampling.clone());
        let mut stream = self.model.tokenizer.stream();
        let stop_ids = self.model.tokenizer.stop_ids();

        let mut history: Vec<u32> = prompt.to_vec();
        let mut pos = cached;
        let mut input: Vec<u32> = prompt[cached..].to_vec();
        let mut generated = Vec::new();
        let mut text = String::new();
        let mut kept = Vec::new();
        let mut first_token_at = None;
        let mut bookkeeping = Duration::ZERO;
        let stop = loop {
            let batch = BatchLayout::single(pos, input.len()).map_err(ModelError::from)?;
            let logits = {
                let table = self.kv.block_table(seq).ok_or(crate::kv::KvError::UnknownSeq(seq))?;
                let mut store = self.memory.store(&[table]);
                tf.forward(&input, &batch, store.as_mut(), Logits::LastPerSequence)?
            };
            let t = Instant::now();
            let plan = self.kv.commit(seq, &input)?;
            bookkeeping += t.elapsed();
            self.memory.execute(&plan)?;
            pos += input.len();
            let logits: Vec<f32> = logits.squeeze(0).and_then(|l| l.to_vec1()).map_err(ModelError::from)?;
            let next = sampler.sample(&logits, &history);
            if params.keep_logits {
                kept.push(logits);
            }
            first_token_at.get_or_insert_with(Instant::now);
            if stop_ids.contains(&next) {
                break StopReason::Eos;
            }
            generated.push(next);
            history.push(next);
            if let Some(piece) = stream.push(next)? {
                on_text(&piece)?;
                text.push_str(&piece);
            }
            if generated.len() >= params.max_tokens {
                break StopReason::MaxTokens;
            }
            if pos + 1 > context {
                break StopReason::ContextFull;
            }
            let t = Instant::now();
            let plan = self.kv.allocate(seq, 1)?;
            bookkeeping += t.elapsed();
            self.memory.execute(&plan)?;
            input = vec![next];
        };
        // Text held back waiting for the rest of a character is flushed.
        if let Some(rest) = stream.finish()? {
            on_text(&rest)?;
            text.push_str(&rest);
        }
        let first = first_token_at.unwrap_or_else(Instant::now);
        Ok(GenerationReport {
            prompt_tokens: prompt.len(),
            cached: PrefixMatch::default(),
            tokens: generated,
            text,
            stop,
            ttft: first.duration_since(started),
            decode: first.elapsed(),
            bookkeeping,
            logits: kept,
        })
    }
}
