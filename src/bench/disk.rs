//! `hearth bench disk`: the disk tier. A long conversation is saved, the engine is restarted
//! (a fresh engine, empty RAM tiers), and the next turn's time to first token is measured with
//! the history read from its cache file, against the same turn with no cache file; then the
//! read throughput of a cache file (every block checked against its checksum) against a plain
//! sequential read of a file of the same size.
//!
//! Both files are read right after being written, so both come from the page cache: the
//! comparison is of hearth's reader (header, per-block reads, checksums) against the plainest
//! possible read, not of the disk.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::Device;

use super::BenchError;
use crate::config::{CacheSettings, DevicePool, EngineSettings};
use crate::engine::{DiskSettings, Engine, GenerateParams, GenerateRequest, GenerationReport, SaveTo};
use crate::model::source::{resolve, ModelSource};
use crate::model::LoadedModel;
use crate::persist::{cache_dir, cache_path, CacheFile, ConversationId, Message, PersistError, Role};
use crate::runtime::PoolSizes;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DiskBenchOptions {
    /// Tokens of the saved conversation (its prompt; the reply adds `reply_tokens`).
    pub history_tokens: usize,
    /// Tokens of the next turn's new message.
    pub question_tokens: usize,
    pub reply_tokens: usize,
    pub block_size: usize,
    pub repeats: usize,
    /// How K/V is stored (`None`: the device's default).
    pub kv_dtype: Option<crate::config::KvDtype>,
}

impl Default for DiskBenchOptions {
    fn default() -> Self {
        Self {
            history_tokens: 4096,
            question_tokens: 64,
            reply_tokens: 16,
            block_size: 16,
            repeats: 3,
            kv_dtype: None,
        }
    }
}

/// Best-of-`repeats` figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DiskBenchReport {
    /// How K/V was stored.
    pub kv_dtype: crate::config::KvDtype,
    pub options: DiskBenchOptions,
    pub model: String,
    pub parameters: u64,
    pub device: String,
    /// Bytes of the conversation's cache file.
    pub cache_file_bytes: u64,
    /// Writing it (in the background writer), milliseconds.
    pub write_ms: f64,
    /// The next turn after a restart, history read from the cache file.
    pub ttft_restart_ms: f64,
    /// Prompt tokens of that turn read from disk.
    pub disk_hit_tokens: usize,
    /// The same turn with no cache file (a full prefill).
    pub ttft_uncached_ms: f64,
    /// Reading every block of the cache file, checksums checked, GB/s.
    pub cache_read_gbps: f64,
    /// Reading a file of the same size in one sequential pass, GB/s.
    pub plain_read_gbps: f64,
}

/// The run's figures and then [`DiskBenchReport::table`].
impl std::fmt::Display for DiskBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "model: {} ({:.1}M parameters), device: {}, K/V {}, a {}-token conversation + {}-token reply, then a {}-token \
             message; block size {}, best of {} runs\n",
            self.model,
            self.parameters as f64 / 1e6,
            self.device,
            self.kv_dtype,
            o.history_tokens,
            o.reply_tokens,
            o.question_tokens,
            o.block_size,
            o.repeats
        )?;
        f.write_str(&self.table())
    }
}

impl DiskBenchReport {
    pub fn ttft_ratio(&self) -> f64 {
        self.ttft_restart_ms / self.ttft_uncached_ms
    }

    pub fn read_ratio(&self) -> f64 {
        self.cache_read_gbps / self.plain_read_gbps
    }

    /// A Markdown table with the targets.
    pub fn table(&self) -> String {
        let ok = |pass: bool| if pass { "met" } else { "missed" };
        format!(
            "| measure | value | ratio | target |\n\
             |---|---:|---:|---|\n\
             | TTFT of the next turn, no cache file (full prefill) | {:.1} ms | 1 | |\n\
             | TTFT of the next turn after a restart ({} tokens from disk) | {:.1} ms | {:.4} | ≤ 1/10 (0.1): {} |\n\
             | cache file size | {:.1} MiB | | |\n\
             | writing the cache file (background) | {:.1} ms | | |\n\
             | plain sequential read of a file that size | {:.2} GB/s | 1 | |\n\
             | cache file read (blocks + checksums) | {:.2} GB/s | {:.3} | ≥ 0.7: {} |\n",
            self.ttft_uncached_ms,
            self.disk_hit_tokens,
            self.ttft_restart_ms,
            self.ttft_ratio(),
            ok(self.ttft_ratio() <= 0.1),
            self.cache_file_bytes as f64 / (1u64 << 20) as f64,
            self.write_ms,
            self.plain_read_gbps,
            self.cache_read_gbps,
            self.read_ratio(),
            ok(self.read_ratio() >= 0.7),
        )
    }
}

fn ids(len: usize, vocab: usize, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(7919).wrapping_add(salt.wrapping_mul(104_729)) + 3) % vocab as u32)
        .collect()
}

/// Runs the disk benchmark on the GGUF at `path`, with its files in `work` (removed after).
pub fn run_disk_bench(
    path: &Path,
    device: &Device,
    work: &Path,
    opts: DiskBenchOptions,
) -> Result<DiskBenchReport, BenchError> {
    let _ = std::fs::remove_dir_all(work);
    let r = bench(path, device, work, opts);
    let _ = std::fs::remove_dir_all(work);
    r
}

fn bench(path: &Path, device: &Device, work: &Path, opts: DiskBenchOptions) -> Result<DiskBenchReport, BenchError> {
    let resolved = resolve(&ModelSource::Local(path.to_path_buf()), &Default::default())?;
    let total = opts.history_tokens + opts.reply_tokens + opts.question_tokens + 1;
    let blocks = total.div_ceil(opts.block_size) + 1;
    let cache = CacheSettings {
        kv_dtype: opts.kv_dtype,
        block_size: opts.block_size,
        device_pool: DevicePool::Bytes(0), // sizes are given explicitly below
        host_bytes: 0,
        prefix_caching: true,
        write_through: false,
        disk_budget_bytes: 1 << 40,
    };
    let sizes = PoolSizes {
        device_blocks: blocks,
        host_blocks: blocks,
    };
    let disk = DiskSettings::new(work.join("data"), 1 << 40);
    let fresh = |with_disk: bool| -> Result<Engine, BenchError> {
        let model = LoadedModel::load(&resolved, device, Some(total))?;
        let e = Engine::with_pool_sizes(model, &cache, &EngineSettings::default(), sizes)?;
        Ok(if with_disk { e.with_disk(&disk)? } else { e })
    };
    let conversation = ConversationId::parse("bench-disk")?;
    let params = GenerateParams {
        ignore_eos: true,
        ..GenerateParams::greedy(opts.reply_tokens)
    };
    let run = |e: &mut Engine, prompt: Vec<u32>| -> Result<GenerationReport, BenchError> {
        let request = GenerateRequest {
            prompt,
            params: params.clone(),
            save: Some(SaveTo {
                conversation: conversation.clone(),
                messages: Some(vec![Message::new(Role::User, "benchmark")]),
            }),
        };
        Ok(e.run(request, |_| Ok(()))?)
    };

    // The conversation so far, saved.
    let mut first = fresh(true)?;
    let info = first.model().info.clone();
    let vocab = first.model().transformer.hparams().vocab_size;
    let history = ids(opts.history_tokens, vocab, 1);
    let reply = run(&mut first, history.clone())?;
    let t = Instant::now();
    first.flush_disk();
    let write_ms = t.elapsed().as_secs_f64() * 1e3;
    drop(first);
    let file = cache_path(&cache_dir(&disk.data_dir), &conversation);
    let pristine = std::fs::read(&file).map_err(|e| PersistError::io(&file, e))?;
    let mut next = history;
    next.extend(&reply.tokens);
    next.extend(ids(opts.question_tokens, vocab, 2));

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (mut restart, mut uncached, mut disk_hit_tokens) = (f64::MAX, f64::MAX, 0);
    for _ in 0..opts.repeats.max(1) {
        // Each restart starts from the same file (the turn itself rewrites it).
        std::fs::write(&file, &pristine).map_err(|e| PersistError::io(&file, e))?;
        let mut e = fresh(true)?;
        let r = run(&mut e, next.clone())?;
        e.flush_disk();
        restart = restart.min(ms(r.ttft));
        disk_hit_tokens = r.cached.disk_tokens;
        drop(e);
        let mut cold = fresh(false)?;
        let r = cold.generate(&next, &params, |_| Ok(()))?;
        uncached = uncached.min(ms(r.ttft));
    }

    // Read throughput: the cache file vs a plain file of the same size.
    std::fs::write(&file, &pristine).map_err(|e| PersistError::io(&file, e))?;
    let plain = work.join("plain.bin");
    std::fs::write(&plain, &pristine).map_err(|e| PersistError::io(&plain, e))?;
    let bytes = pristine.len() as u64;
    // Both read into the same memory, allocated and touched beforehand.
    let mut buf = vec![1u8; bytes as usize];
    let (mut cache_s, mut plain_s) = (f64::MAX, f64::MAX);
    for _ in 0..opts.repeats.max(1) + 2 {
        cache_s = cache_s.min(time_cache_read(&file, &mut buf)?);
        plain_s = plain_s.min(time_plain_read(&plain, &mut buf)?);
    }
    Ok(DiskBenchReport {
        options: opts,
        model: info.name,
        parameters: info.parameters,
        device: info.device,
        kv_dtype: cache.kv_dtype(),
        cache_file_bytes: bytes,
        write_ms,
        ttft_restart_ms: restart,
        disk_hit_tokens,
        ttft_uncached_ms: uncached,
        cache_read_gbps: bytes as f64 / cache_s / 1e9,
        plain_read_gbps: bytes as f64 / plain_s / 1e9,
    })
}

/// Seconds to open `file` and read every block, checking each checksum (the engine's read).
fn time_cache_read(file: &Path, buf: &mut [u8]) -> Result<f64, BenchError> {
    let t = Instant::now();
    let mut f = CacheFile::open(file)?;
    let bb = f.header().block_bytes() as usize;
    let n = f.header().blocks.len().min(buf.len() / bb.max(1));
    let (good, err) = f.read_blocks(0, buf[..n * bb].chunks_exact_mut(bb.max(1)).collect());
    if let Some(e) = err {
        return Err(e.into());
    }
    std::hint::black_box((&buf, good));
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds to read `file` front to back into `buf` (its size), as `std::fs::read` would.
fn time_plain_read(file: &PathBuf, buf: &mut [u8]) -> Result<f64, BenchError> {
    let t = Instant::now();
    let mut f = std::fs::File::open(file).map_err(|e| PersistError::io(file, e))?;
    f.read_exact(buf).map_err(|e| PersistError::io(file, e))?;
    std::hint::black_box(&buf);
    Ok(t.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testkit::{write_model, TinyModelSpec, WeightType};

    #[test]
    fn a_small_run_reads_the_history_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        write_model(
            &TinyModelSpec::tiny(crate::model::hparams::Family::Llama, WeightType::Q8_0),
            &model,
        )
        .unwrap();
        let opts = DiskBenchOptions {
            history_tokens: 200,
            question_tokens: 8,
            reply_tokens: 4,
            block_size: 16,
            repeats: 1,
            kv_dtype: None,
        };
        let work = dir.path().join("work");
        let r = run_disk_bench(&model, &Device::Cpu, &work, opts).unwrap();
        assert_eq!(r.disk_hit_tokens, 203 / 16 * 16);
        assert!(r.cache_file_bytes > 0 && r.cache_read_gbps > 0.0 && r.plain_read_gbps > 0.0);
        assert!(r.table().contains("after a restart"));
        assert!(!work.exists(), "the benchmark's files are removed");
    }
}
