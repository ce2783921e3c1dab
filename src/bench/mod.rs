//! `hearth bench cache`: TTFT cold, with a device hit, a host hit and with
//! caching off, for a long shared prefix (see [`run_cache_bench`]).
//!
//! `hearth bench serve`: the OpenAI server under concurrent load, prefix caching on and off
//! (see [`run_serve_bench`]); [`client`] is the small HTTP client it drives the server with.
//!
//! `hearth bench agent`: a coding agent's loop (a long system prompt, tools, a growing history)
//! through `/v1/messages` and `/v1/responses`, prefix caching on and off (see
//! [`run_agent_bench`]).
//!
//! `hearth bench disk`: the next turn of a saved conversation after a restart (history read from
//! its cache file) against the same turn uncached, and cache file read throughput against a
//! plain read (see [`run_disk_bench`]).
//!
//! `hearth bench grammar`: decoding under a JSON-Schema grammar against the same requests
//! without one, at several batch sizes (see [`run_grammar_bench`]).
//!
//! `hearth bench kv`: each K/V storage type against f32 on a real model, teacher-forced (logit
//! error, greedy agreement; see [`run_kv_bench`]).
//!
//! `hearth bench devices`: the model on one device against the CPU on the same GGUF: greedy text
//! free-running and teacher-forced logits (see [`run_device_bench`]).
//!
//! `hearth bench gpu`: every figure of the CUDA path in one run: host → device block copies
//! against a plain pinned copy, prefill and decode at batch 1 and 16 against candle, and TTFT
//! of a long prompt from every tier (see [`run_gpu_bench`]).
//!
//! `hearth bench decode`: prefill and decode throughput of our forward against
//! candle-transformers' `quantized_llama` on the same GGUF, in one run.
//!
//! Both sides run the same token ids on the same device, with greedy argmax
//! after each step; runs alternate (ours, theirs, ours, ...) and the best of
//! `repeats` is kept for each, so a noisy machine hurts both alike. The
//! reported ratio is ours / theirs (above 1 = we are faster).

mod agent;
mod cache;
pub mod client;
mod decode;
mod devices;
mod disk;
mod gpu;
mod grammar;
mod kv;
mod serve;

pub use agent::{run_agent_bench, AgentBenchOptions, AgentBenchReport, AgentRun, AgentTurn};
pub use cache::{run_cache_bench, CacheBenchOptions, CacheBenchReport};
pub use decode::{run_decode_bench, BenchError, BenchOptions, BenchReport, Throughput};
pub use devices::{run_device_bench, DeviceBenchOptions, DeviceBenchReport, Divergence, PromptReplies};
pub use disk::{run_disk_bench, DiskBenchOptions, DiskBenchReport};
pub use gpu::{run_gpu_bench, CopyBenchReport, GpuBenchOptions, GpuBenchReport};
pub use grammar::{run_grammar_bench, GrammarBenchOptions, GrammarBenchReport, GrammarRun};
pub use kv::{
    log_softmax, margin, run_kv_bench, teacher_forced_logits, KvBenchOptions, KvBenchReport, KvTypeReport, KV_BENCH_PROMPTS,
};
pub use serve::{run_serve_bench, ServeBenchOptions, ServeBenchReport, ServeRun};

use crate::config::KvDtype;
use crate::kv::BlockId;
use crate::model::{RecurrentSeq, Transformer};
use crate::ops::PagedLayout;
use crate::runtime::KvMemory;

/// `tf`'s K/V in blocks of 16 tokens (as `hearth run` uses), stored as `dtype`.
fn paged_layout(tf: &Transformer, dtype: KvDtype) -> PagedLayout {
    PagedLayout::new(tf.kv_shape(), 16, dtype)
}

/// The recurrent states of `n` sequences before their first token (none for a model without
/// recurrent layers): what `Transformer::forward_with` advances from one call to the next.
fn fresh_states(tf: &Transformer, n: usize) -> Vec<RecurrentSeq> {
    match tf.recurrent_state() {
        Some(s) => (0..n).map(|_| RecurrentSeq::new(s.clone())).collect(),
        None => Vec::new(),
    }
}

/// K/V memory on `tf`'s device (VRAM on CUDA) for one sequence of up to `tokens` tokens and
/// its block table (blocks in order): what the single-sequence benchmarks run the forward on.
fn one_sequence(tf: &Transformer, dtype: KvDtype, tokens: usize) -> Result<(KvMemory, Vec<BlockId>), BenchError> {
    sequences(tf, dtype, tokens, 1).map(|(m, mut tables)| (m, tables.remove(0)))
}

/// K/V memory on `tf`'s device for `n` sequences of up to `tokens` tokens each, and their
/// block tables (sequence `i` has blocks `i * per ..`, in order).
fn sequences(
    tf: &Transformer,
    dtype: KvDtype,
    tokens: usize,
    n: usize,
) -> Result<(KvMemory, Vec<Vec<BlockId>>), BenchError> {
    let layout = paged_layout(tf, dtype);
    let per = tokens.div_ceil(layout.block_size);
    let memory = KvMemory::on_device(tf.device(), layout, per * n.max(1), 0)
        .map_err(|e| BenchError::Invalid(format!("K/V memory for the benchmark: {e}")))?;
    let tables = (0..n.max(1))
        .map(|i| ((i * per) as u32..((i + 1) * per) as u32).map(BlockId).collect())
        .collect();
    Ok((memory, tables))
}
