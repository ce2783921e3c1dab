//! `hearth bench cache`: time to first token with and without the prefix
//! cache, from each tier, for a long shared prefix plus a short suffix.

use std::path::Path;
use std::time::{Duration, Instant};

use candle_core::Device;

use super::BenchError;
use crate::config::{CacheSettings, DevicePool, EngineSettings};
use crate::engine::{Engine, GenerateParams, GenerationReport};
use crate::model::source::{resolve, ModelSource};
use crate::model::LoadedModel;
use crate::runtime::PoolSizes;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CacheBenchOptions {
    pub prefix_tokens: usize,
    pub suffix_tokens: usize,
    pub block_size: usize,
    pub repeats: usize,
    /// How K/V is stored (`None`: the device's default).
    pub kv_dtype: Option<crate::config::KvDtype>,
}

impl Default for CacheBenchOptions {
    fn default() -> Self {
        Self {
            prefix_tokens: 2048,
            suffix_tokens: 32,
            block_size: 16,
            repeats: 2,
            kv_dtype: None,
        }
    }
}

/// Best-of-`repeats` times, in milliseconds unless named otherwise.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CacheBenchReport {
    /// How K/V was stored.
    pub kv_dtype: crate::config::KvDtype,
    pub options: CacheBenchOptions,
    pub model: String,
    pub parameters: u64,
    pub device: String,
    /// Empty cache, caching on.
    pub ttft_cold_ms: f64,
    /// The prefix is in the device tier.
    pub ttft_device_hit_ms: f64,
    /// The prefix was demoted to the host tier and is promoted back.
    pub ttft_host_hit_ms: f64,
    /// Prefix caching off.
    pub ttft_no_cache_ms: f64,
    /// Prompt tokens served from the cache on the device / host hit.
    pub device_hit_tokens: usize,
    pub host_hit_tokens: usize,
    /// One prefix lookup (`peek`) of the whole prompt, in microseconds.
    pub lookup_us: f64,
    /// Cache-manager bookkeeping during a cold request, in microseconds.
    pub bookkeeping_cold_us: f64,
}

/// The run's figures and then [`CacheBenchReport::table`].
impl std::fmt::Display for CacheBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "model: {} ({:.1}M parameters), device: {}, K/V {}, prefix {} + suffix {} tokens, block size {}, best of {} runs\n",
            self.model,
            self.parameters as f64 / 1e6,
            self.device,
            self.kv_dtype,
            o.prefix_tokens,
            o.suffix_tokens,
            o.block_size,
            o.repeats
        )?;
        f.write_str(&self.table())
    }
}

impl CacheBenchReport {
    pub fn device_hit_ratio(&self) -> f64 {
        self.ttft_device_hit_ms / self.ttft_cold_ms
    }

    pub fn host_hit_ratio(&self) -> f64 {
        self.ttft_host_hit_ms / self.ttft_cold_ms
    }

    /// Bookkeeping as a fraction of a cold TTFT.
    pub fn bookkeeping_fraction(&self) -> f64 {
        self.bookkeeping_cold_us / 1e3 / self.ttft_cold_ms
    }

    /// A Markdown table with the targets.
    pub fn table(&self) -> String {
        let ok = |pass: bool| if pass { "met" } else { "missed" };
        format!(
            "| measure | value | vs cold | target |\n\
             |---|---:|---:|---|\n\
             | TTFT, cold (cache empty) | {:.1} ms | 1 | |\n\
             | TTFT, caching off | {:.1} ms | {:.3} | |\n\
             | TTFT, device hit ({} tokens cached) | {:.1} ms | {:.4} | ≤ 1/20 (0.05): {} |\n\
             | TTFT, host hit ({} tokens promoted) | {:.1} ms | {:.4} | ≤ 1/10 (0.1): {} |\n\
             | prefix lookup | {:.1} µs | {:.6} | |\n\
             | cache bookkeeping per cold request | {:.1} µs | {:.6} | < 1%: {} |\n",
            self.ttft_cold_ms,
            self.ttft_no_cache_ms,
            self.ttft_no_cache_ms / self.ttft_cold_ms,
            self.device_hit_tokens,
            self.ttft_device_hit_ms,
            self.device_hit_ratio(),
            ok(self.device_hit_ratio() <= 0.05),
            self.host_hit_tokens,
            self.ttft_host_hit_ms,
            self.host_hit_ratio(),
            ok(self.host_hit_ratio() <= 0.1),
            self.lookup_us,
            self.lookup_us / 1e3 / self.ttft_cold_ms,
            self.bookkeeping_cold_us,
            self.bookkeeping_fraction(),
            ok(self.bookkeeping_fraction() < 0.01),
        )
    }
}

fn ids(len: usize, vocab: usize, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(7919).wrapping_add(salt.wrapping_mul(104_729)) + 3) % vocab as u32)
        .collect()
}

/// Runs the cache benchmark on the GGUF at `path`.
pub fn run_cache_bench(path: &Path, device: &Device, opts: CacheBenchOptions) -> Result<CacheBenchReport, BenchError> {
    let resolved = resolve(&ModelSource::Local(path.to_path_buf()), &Default::default())?;
    let total = opts.prefix_tokens + opts.suffix_tokens + 1;
    let load = || LoadedModel::load(&resolved, device, Some(total.max(64)));
    let first = load()?;
    let info = first.info.clone();
    let vocab = first.transformer.hparams().vocab_size;
    let per_request = total.div_ceil(opts.block_size) + 1;
    let cache = |prefix_caching| CacheSettings {
        kv_dtype: opts.kv_dtype,
        block_size: opts.block_size,
        device_pool: DevicePool::Bytes(0), // sizes are given explicitly below
        host_bytes: 0,
        prefix_caching,
        write_through: false,
        disk_budget_bytes: 0,
    };
    // Room for one request: the next long request pushes the previous
    // prefix to the host tier.
    let sizes = PoolSizes {
        device_blocks: per_request,
        host_blocks: 3 * per_request,
    };
    let mut cached = Engine::with_pool_sizes(first, &cache(true), &EngineSettings::default(), sizes)?;
    let mut uncached = Engine::with_pool_sizes(load()?, &cache(false), &EngineSettings::default(), sizes)?;
    let params = GenerateParams::greedy(1);
    let run = |e: &mut Engine, prompt: &[u32]| -> Result<GenerationReport, BenchError> {
        Ok(e.generate(prompt, &params, |_| Ok(()))?)
    };

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut best = [f64::MAX; 4];
    let (mut device_hit_tokens, mut host_hit_tokens, mut bookkeeping) = (0, 0, f64::MAX);
    for r in 0..opts.repeats.max(1) as u32 {
        // A fresh prefix each round, so "cold" is really cold.
        let prefix = ids(opts.prefix_tokens, vocab, 100 + r);
        let with = |salt: u32| {
            let mut p = prefix.clone();
            p.extend(ids(opts.suffix_tokens, vocab, salt));
            p
        };
        let cold = run(&mut cached, &with(1000 + r))?;
        best[0] = best[0].min(ms(cold.ttft));
        bookkeeping = bookkeeping.min(cold.bookkeeping.as_secs_f64() * 1e6);
        let dev = run(&mut cached, &with(2000 + r))?;
        best[1] = best[1].min(ms(dev.ttft));
        device_hit_tokens = dev.cached.device_tokens;
        // Another long prompt evicts this prefix to the host tier.
        run(&mut cached, &ids(total - 1, vocab, 9000 + r))?;
        let host = run(&mut cached, &with(3000 + r))?;
        best[2] = best[2].min(ms(host.ttft));
        host_hit_tokens = host.cached.host_tokens;
        let off = run(&mut uncached, &with(4000 + r))?;
        best[3] = best[3].min(ms(off.ttft));
    }

    let probe = {
        let mut p = ids(opts.prefix_tokens, vocab, 100);
        p.extend(ids(opts.suffix_tokens, vocab, 5000));
        p
    };
    let n = 1000;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(cached.peek(std::hint::black_box(&probe)));
    }
    let lookup_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;

    Ok(CacheBenchReport {
        options: opts,
        model: info.name,
        parameters: info.parameters,
        device: info.device,
        kv_dtype: cache(true).kv_dtype(),
        ttft_cold_ms: best[0],
        ttft_device_hit_ms: best[1],
        ttft_host_hit_ms: best[2],
        ttft_no_cache_ms: best[3],
        device_hit_tokens,
        host_hit_tokens,
        lookup_us,
        bookkeeping_cold_us: bookkeeping,
    })
}
