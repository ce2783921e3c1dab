//! `hearth bench gpu`: every figure of the CUDA path in one run.
//!
//! - Host → device block copies: a promotion plan of scattered blocks (one copy each) and of
//!   consecutive blocks (one run) through [`KvMemory::execute`] on the host tier's pinned
//!   memory and copy stream, against one plain pinned `cuMemcpyHtoDAsync` of the same bytes
//!   in the same run (target: scattered ≥ 80% of plain).
//! - Prefill and decode at batch 1 and 16 against candle-transformers' `quantized_llama`
//!   ([`run_decode_bench`]) on each model.
//! - TTFT of a long prompt cold, from the device tier and the host tier ([`run_cache_bench`];
//!   targets: device hit ≤ 1/50 of cold, host hit ≤ 1/20) and from the disk tier after a
//!   restart ([`run_disk_bench`]).
//!
//! The first model is the TTFT model (by default a random Llama-3.2-1B-shaped Q4_K file);
//! every model is timed for prefill and decode.

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::Device;

use super::{
    run_cache_bench, run_decode_bench, run_disk_bench, BenchError, BenchOptions, BenchReport, CacheBenchOptions,
    CacheBenchReport, DiskBenchOptions, DiskBenchReport,
};
use crate::config::KvDtype;
use crate::kv::{BlockId, CopyPlan};
use crate::ops::PagedLayout;
use crate::runtime::KvMemory;

/// Tokens of the long prompt's uncached suffix (cache bench), or new question (disk bench).
const SUFFIX_TOKENS: usize = 64;
/// Tokens of the saved reply in the disk bench's conversation.
const REPLY_TOKENS: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GpuBenchOptions {
    /// The long prompt for TTFT.
    pub ttft_tokens: usize,
    pub prompt_tokens: usize,
    pub decode_tokens: usize,
    pub batches: Vec<usize>,
    pub repeats: usize,
    pub block_size: usize,
    /// How K/V is stored (`None`: the default, f16).
    pub kv_dtype: Option<KvDtype>,
}

impl Default for GpuBenchOptions {
    fn default() -> Self {
        Self {
            ttft_tokens: 8192,
            prompt_tokens: 512,
            decode_tokens: 128,
            batches: vec![1, 16],
            repeats: 3,
            block_size: 16,
            kv_dtype: None,
        }
    }
}

/// Host → device copy throughput, in GB/s.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CopyBenchReport {
    pub block_bytes: usize,
    pub blocks: usize,
    /// Blocks to scattered destinations: one copy per block.
    pub scattered_gbps: f64,
    /// Consecutive blocks to consecutive destinations: one copy.
    pub contiguous_gbps: f64,
    /// One plain pinned copy of the same bytes.
    pub plain_gbps: f64,
}

impl CopyBenchReport {
    pub fn scattered_fraction(&self) -> f64 {
        self.scattered_gbps / self.plain_gbps
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuBenchReport {
    pub options: GpuBenchOptions,
    pub copy: CopyBenchReport,
    pub decode: Vec<BenchReport>,
    pub cache: CacheBenchReport,
    pub disk: DiskBenchReport,
}

fn met(pass: bool) -> &'static str {
    if pass {
        "met"
    } else {
        "missed"
    }
}

impl std::fmt::Display for CopyBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self;
        writeln!(
            f,
            "## host → device block copies ({} blocks of {} KiB, pinned host tier, copy stream)\n",
            c.blocks,
            c.block_bytes / 1024
        )?;
        writeln!(
            f,
            "| copy | GB/s | vs plain | target |\n|---|---:|---:|---|\n\
             | plain pinned cuMemcpyHtoDAsync, one copy | {:.2} | 1 | |\n\
             | promotion plan, scattered (one copy per block) | {:.2} | {:.3} | ≥ 0.8: {} |\n\
             | promotion plan, consecutive (one run) | {:.2} | {:.3} | |\n",
            c.plain_gbps,
            c.scattered_gbps,
            c.scattered_fraction(),
            met(c.scattered_fraction() >= 0.8),
            c.contiguous_gbps,
            c.contiguous_gbps / c.plain_gbps,
        )
    }
}

/// The TTFT section: the cache bench's table and the CUDA targets.
fn ttft_section(k: &CacheBenchReport, ttft_tokens: usize) -> String {
    format!(
        "## TTFT, {ttft_tokens} tokens\n\n{k}\n\
         CUDA targets: device hit ≤ 1/50 of cold (0.02): {} ({:.4}); host hit ≤ 1/20 (0.05): {} ({:.4})\n",
        met(k.device_hit_ratio() <= 0.02),
        k.device_hit_ratio(),
        met(k.host_hit_ratio() <= 0.05),
        k.host_hit_ratio(),
    )
}

fn decode_section(d: &BenchReport) -> String {
    format!("## prefill and decode\n\n{d}")
}

fn disk_section(d: &DiskBenchReport) -> String {
    format!("## TTFT after a restart (disk tier)\n\n{d}")
}

impl std::fmt::Display for GpuBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.copy)?;
        for d in &self.decode {
            writeln!(f, "{}", decode_section(d))?;
        }
        writeln!(f, "{}", ttft_section(&self.cache, self.options.ttft_tokens))?;
        writeln!(f, "{}", disk_section(&self.disk))
    }
}

/// Runs every measurement; `models[0]` is the TTFT model. `work` is a scratch folder for the
/// disk tier (removed afterwards). Each section goes to `progress` as soon as it is measured,
/// so that a failure in a later one (or a time limit) leaves the earlier figures behind.
pub fn run_gpu_bench(
    models: &[PathBuf],
    device: &Device,
    work: &Path,
    opts: GpuBenchOptions,
    progress: &mut dyn FnMut(String),
) -> Result<GpuBenchReport, BenchError> {
    let Some(big) = models.first() else {
        return Err(BenchError::Invalid("no model to benchmark".into()));
    };
    if !device.is_cuda() {
        return Err(BenchError::Invalid(
            "bench gpu measures the CUDA path: run it with --device cuda on a CUDA build".into(),
        ));
    }
    if opts.ttft_tokens < SUFFIX_TOKENS + REPLY_TOKENS + opts.block_size {
        return Err(BenchError::Invalid(format!(
            "--ttft-tokens must be at least {}",
            SUFFIX_TOKENS + REPLY_TOKENS + opts.block_size
        )));
    }
    let kv_dtype = opts.kv_dtype.unwrap_or(KvDtype::DEFAULT);
    let copy = {
        let shape = crate::model::kv_shape_of(big)?;
        let layout = PagedLayout::new(shape, opts.block_size, kv_dtype);
        copy_bench(device, layout, opts.ttft_tokens.div_ceil(opts.block_size), opts.repeats)?
    };
    progress(copy.to_string());
    let mut decode = Vec::new();
    for path in models {
        for &batch in &opts.batches {
            let o = BenchOptions {
                prompt_tokens: opts.prompt_tokens,
                decode_tokens: opts.decode_tokens,
                batch,
                repeats: opts.repeats,
                reference: true,
                kv_dtype,
            };
            let report = run_decode_bench(path, device, o)?;
            progress(decode_section(&report));
            decode.push(report);
        }
    }
    let cache = run_cache_bench(
        big,
        device,
        CacheBenchOptions {
            prefix_tokens: opts.ttft_tokens - SUFFIX_TOKENS,
            suffix_tokens: SUFFIX_TOKENS,
            block_size: opts.block_size,
            repeats: opts.repeats.min(2),
            kv_dtype: opts.kv_dtype,
        },
    )?;
    progress(ttft_section(&cache, opts.ttft_tokens));
    let disk = run_disk_bench(
        big,
        device,
        work,
        DiskBenchOptions {
            history_tokens: opts.ttft_tokens - SUFFIX_TOKENS - REPLY_TOKENS,
            question_tokens: SUFFIX_TOKENS,
            reply_tokens: REPLY_TOKENS,
            block_size: opts.block_size,
            repeats: opts.repeats.min(2),
            kv_dtype: opts.kv_dtype,
        },
    )?;
    progress(disk_section(&disk));
    Ok(GpuBenchReport {
        options: opts,
        copy,
        decode,
        cache,
        disk,
    })
}

/// Promotions of `blocks` blocks through the tiers' own path, scattered and consecutive,
/// against a plain pinned copy of the same bytes; best of `repeats` each.
fn copy_bench(
    device: &Device,
    layout: PagedLayout,
    blocks: usize,
    repeats: usize,
) -> Result<CopyBenchReport, BenchError> {
    let runtime = |e: crate::runtime::RuntimeError| BenchError::Invalid(format!("copy benchmark: {e}"));
    let mut memory = KvMemory::on_device(device, layout.clone(), blocks, blocks).map_err(runtime)?;
    let n = blocks as u32;
    // Destinations in reverse order: no two neighbours continue a run, so one copy per block.
    let scattered = CopyPlan {
        demote: vec![],
        promote: (0..n).map(|i| (BlockId(i), BlockId(n - 1 - i))).collect(),
    };
    let contiguous = CopyPlan {
        demote: vec![],
        promote: (0..n).map(|i| (BlockId(i), BlockId(i))).collect(),
    };
    let bytes = blocks * layout.block_len();
    let mut time = |plan: &CopyPlan| -> Result<f64, BenchError> {
        let mut best = f64::MAX;
        for _ in 0..repeats.max(1) + 1 {
            memory.wait_for_copies().map_err(runtime)?;
            let t = Instant::now();
            memory.execute(plan).map_err(runtime)?;
            memory.wait_for_copies().map_err(runtime)?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(bytes as f64 / best / 1e9)
    };
    let scattered_gbps = time(&scattered)?;
    let contiguous_gbps = time(&contiguous)?;
    let plain = crate::runtime::plain_pinned_copy_secs(device, bytes, repeats.max(1) + 1).map_err(runtime)?;
    Ok(CopyBenchReport {
        block_bytes: layout.block_len(),
        blocks,
        scattered_gbps,
        contiguous_gbps,
        plain_gbps: bytes as f64 / plain / 1e9,
    })
}
