//! Shared test support: tiny models in temp dirs and candle-transformers'
//! reference implementations behind one small trait.
#![allow(dead_code)]

pub mod llama_ref;
pub mod real;

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::{quantized_llama, quantized_phi3, quantized_qwen2, quantized_qwen3};
use hearth::model::gguf::GgufFile;
use hearth::model::hparams::Family;
use hearth::model::testkit::{write_model, TinyModelSpec};
use hearth::model::{Logits, Transformer};
use hearth::ops::{BatchLayout, ContiguousBatch, ContiguousKv};

/// Writes `spec` into `dir` and returns the path.
pub fn write_tiny(dir: &Path, spec: &TinyModelSpec, name: &str) -> PathBuf {
    let path = dir.join(name);
    write_model(spec, &path).unwrap();
    path
}

pub fn load_ours(path: &Path, max_positions: usize) -> Transformer {
    let mut f = GgufFile::open(path).unwrap();
    Transformer::from_gguf(&mut f, &Device::Cpu, max_positions).unwrap()
}

/// candle-transformers' model for the same file.
pub enum Reference {
    Llama(quantized_llama::ModelWeights),
    Qwen2(quantized_qwen2::ModelWeights),
    Qwen3(quantized_qwen3::ModelWeights),
    /// Reads the fused `attn_qkv` and `ffn_up` as they are; rope base 10 000 and full rotary
    /// only (the tiny Phi-3 spec's), so LongRoPE and partial rotary are checked against llama.cpp
    /// (`tests/tiny_llama_cpp.rs`). It has no way to clear its cache: `clear` loads it again.
    Phi3(quantized_phi3::ModelWeights, PathBuf),
}

impl Reference {
    pub fn load(path: &Path, family: Family) -> Self {
        let mut r = std::fs::File::open(path).unwrap();
        let c = gguf_file::Content::read(&mut r).unwrap();
        let d = Device::Cpu;
        match family {
            Family::Llama => Self::Llama(quantized_llama::ModelWeights::from_gguf(c, &mut r, &d).unwrap()),
            Family::Qwen2 => Self::Qwen2(quantized_qwen2::ModelWeights::from_gguf(c, &mut r, &d).unwrap()),
            Family::Qwen3 => Self::Qwen3(quantized_qwen3::ModelWeights::from_gguf(c, &mut r, &d).unwrap()),
            Family::Phi3 => Self::Phi3(
                quantized_phi3::ModelWeights::from_gguf(false, c, &mut r, &d).unwrap(),
                path.to_path_buf(),
            ),
            // candle-transformers' quantized_gemma3 gates its MLP with SiLU (Gemma uses GELU)
            // and lets a local layer see window + 1 positions; llama.cpp is Gemma's reference
            // (tests/real_gemma3.rs).
            Family::Gemma3 => panic!("no candle-transformers reference for gemma3"),
            // Its quantized_qwen3_moe runs the experts on CUDA only; tests/forward.rs compares
            // a MoE file whose experts are all one MLP with the dense qwen3 reference.
            Family::Qwen3Moe => panic!("no CPU candle-transformers reference for qwen3moe"),
            // No candle-transformers model has its YaRN parameters or attention temperature;
            // llama.cpp is its reference (tests/tiny_llama_cpp.rs).
            Family::Mistral3 => panic!("no candle-transformers reference for mistral3"),
            // None has a quantized candle-transformers model (NoPE layers; Granite's
            // multipliers; Gemma 2's soft caps; ERNIE 4.5; OLMo 2's, EXAONE 4.0's and GLM-4's norms; GLM-4.5's routing;
            // gpt-oss's sinks and biased experts; Gemma 4's layers; DeepSeek-V2's latent
            // attention; Seed-OSS; Qwen3.5's delta net; Cohere's parallel layer); llama.cpp is their reference
            // (tests/tiny_llama_cpp.rs).
            Family::SmolLM3
            | Family::Granite
            | Family::Gemma2
            | Family::Ernie45
            | Family::Olmo2
            | Family::Exaone4
            | Family::Glm4
            | Family::Glm4Moe
            | Family::GptOss
            | Family::Gemma4
            | Family::DeepSeek2
            | Family::SeedOss
            | Family::Qwen35
            | Family::Lfm2
            | Family::GraniteHybrid
            | Family::NemotronH
            | Family::Cohere => {
                panic!("no candle-transformers reference for {}", family.arch())
            }
        }
    }

    /// Logits of the last of `ids`, fed at position `pos`.
    pub fn forward(&mut self, ids: &[u32], pos: usize) -> Vec<f32> {
        let x = Tensor::new(ids, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        let out = match self {
            Self::Llama(m) => m.forward(&x, pos),
            Self::Qwen2(m) => m.forward(&x, pos),
            Self::Qwen3(m) => m.forward(&x, pos),
            Self::Phi3(m, _) => m.forward(&x, pos),
        }
        .unwrap();
        out.flatten_all()
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    pub fn clear(&mut self) {
        match self {
            Self::Llama(m) => m.clear_kv_cache(),
            Self::Qwen2(m) => m.clear_kv_cache(),
            Self::Qwen3(m) => m.clear_kv_cache(),
            Self::Phi3(_, path) => *self = Self::load(&path.clone(), Family::Phi3),
        }
    }
}

/// Runs ours on one sequence, continuing `kv`; logits of the last token.
pub fn ours_step(tf: &Transformer, kv: &mut ContiguousKv, ids: &[u32]) -> Vec<f32> {
    let batch = BatchLayout::single(kv.len(), ids.len()).unwrap();
    let l = tf
        .forward(
            ids,
            &batch,
            &mut ContiguousBatch::new(vec![kv]),
            Logits::LastPerSequence,
        )
        .unwrap();
    l.flatten_all().unwrap().to_vec1().unwrap()
}

pub fn new_kv(tf: &Transformer, max: usize) -> ContiguousKv {
    ContiguousKv::new(tf.kv_shape(), DType::F32, &Device::Cpu, max)
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "logit vectors differ in length");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The cosine similarity of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (n(a) * n(b))
}

pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Deterministic prompt ids inside the vocabulary.
pub fn prompt(len: usize, vocab: usize, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 7919 + salt * 104_729 + 3) % vocab as u32)
        .collect()
}

/// Cache settings for tests: f32 K/V (the tests of the other types say so; see
/// `tests/cache_equality.rs`'s `every_kv_dtype_*`).
pub fn cache_settings(prefix_caching: bool, block_size: usize) -> hearth::config::CacheSettings {
    hearth::config::CacheSettings {
        kv_dtype: Some(hearth::config::KvDtype::F32),
        block_size,
        device_pool: hearth::config::DevicePool::Bytes(1),
        host_bytes: 0,
        prefix_caching,
        write_through: false,
        disk_budget_bytes: 0,
    }
}

/// Loads the model at `path` into an engine with explicit tier sizes (block size 16).
pub fn engine(path: &Path, prefix_caching: bool, device_blocks: usize, host_blocks: usize) -> hearth::engine::Engine {
    engine_with(path, cache_settings(prefix_caching, 16), device_blocks, host_blocks)
}

pub fn engine_with(
    path: &Path,
    cache: hearth::config::CacheSettings,
    device_blocks: usize,
    host_blocks: usize,
) -> hearth::engine::Engine {
    engine_limits(
        path,
        cache,
        &hearth::config::EngineSettings::default(),
        device_blocks,
        host_blocks,
    )
}

/// An engine with explicit scheduler limits and tier sizes.
pub fn engine_limits(
    path: &Path,
    cache: hearth::config::CacheSettings,
    limits: &hearth::config::EngineSettings,
    device_blocks: usize,
    host_blocks: usize,
) -> hearth::engine::Engine {
    let resolved = hearth::model::source::resolve(
        &hearth::model::source::ModelSource::Local(path.to_path_buf()),
        &Default::default(),
    )
    .unwrap();
    let model = hearth::model::LoadedModel::load(&resolved, &Device::Cpu, None).unwrap();
    hearth::engine::Engine::with_pool_sizes(
        model,
        &cache,
        limits,
        hearth::runtime::PoolSizes {
            device_blocks,
            host_blocks,
        },
    )
    .unwrap()
}

/// Every block of both tiers is free or cached: no request holds any.
pub fn assert_blocks_released(s: &hearth::kv::CacheStats, what: &str) {
    for (tier, t) in [("device", &s.device), ("host", &s.host)] {
        assert_eq!(t.referenced_blocks, 0, "{what}: {tier} blocks still referenced");
        assert_eq!(
            t.free_blocks + t.cached_blocks,
            t.capacity_blocks,
            "{what}: {tier} accounting"
        );
    }
    assert_eq!(s.running_seqs, 0, "{what}: sequences still started");
}

/// Greedy generation of `n` tokens, keeping every step's logits.
pub fn greedy(n: usize) -> hearth::engine::GenerateParams {
    hearth::engine::GenerateParams {
        keep_logits: true,
        ..hearth::engine::GenerateParams::greedy(n)
    }
}

/// [`greedy`], exactly `n` tokens: an end-of-sequence token does not stop it.
pub fn greedy_exactly(n: usize) -> hearth::engine::GenerateParams {
    hearth::engine::GenerateParams {
        ignore_eos: true,
        ..greedy(n)
    }
}

/// Two runs of the same prompt: the same greedy tokens, and every step's logits within `tol`.
pub fn assert_same_run(
    a: &hearth::engine::GenerationReport,
    b: &hearth::engine::GenerationReport,
    what: &str,
    tol: f32,
) {
    assert_eq!(a.tokens, b.tokens, "{what}: greedy tokens differ");
    for (step, (x, y)) in a.logits.iter().zip(&b.logits).enumerate() {
        let d = max_abs_diff(x, y);
        assert!(d < tol, "{what} step {step}: max |logit diff| {d}");
    }
}

/// A disk that is full while the returned switch is on: a write hook for `DiskSettings::faults`
/// failing every write step with "No space left on device" (as ENOSPC reads).
pub fn full_disk(on: bool) -> (std::sync::Arc<std::sync::atomic::AtomicBool>, hearth::persist::Faults) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let full = std::sync::Arc::new(AtomicBool::new(on));
    let hook = full.clone();
    let faults = hearth::persist::Faults::new(move |_| {
        if hook.load(Ordering::SeqCst) {
            Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "No space left on device",
            ))
        } else {
            Ok(())
        }
    });
    (full, faults)
}

/// Runs `prompt` straight through `engine`, bypassing any front-end; its report.
pub async fn run_in_engine(
    engine: &hearth::engine::EngineHandle,
    prompt: Vec<u32>,
    params: hearth::engine::GenerateParams,
) -> Box<hearth::engine::GenerationReport> {
    let mut events = engine
        .submit(hearth::engine::GenerateRequest::new(prompt, params))
        .unwrap();
    loop {
        match events.recv().await {
            Some(hearth::engine::Event::Done(r)) => break r,
            Some(hearth::engine::Event::Token { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
