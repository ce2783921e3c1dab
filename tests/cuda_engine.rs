//! End to end on a CUDA device: the engine with its device tier in VRAM and its host tier in
//! pinned RAM gives the CPU engine's greedy tokens (logits within a tolerance for the
//! different matmul kernels), with the cache and without, from the device tier, from the host
//! tier (demotion and promotion under a tiny VRAM pool) and from the disk tier after a
//! restart; for every K/V type the CUDA kernels store (f16, the default; bf16; f32); and an
//! embedding model's pooled vectors.
//!
//! Built only with `--features cuda`; returns early when no CUDA device is present.
#![cfg(feature = "cuda")]

mod common;

use std::path::Path;

use candle_core::Device;
use common::*;
use hearth::config::{CacheSettings, KvDtype};
use hearth::bench::margin;
use hearth::engine::{DiskSettings, Engine, GenerateRequest, GenerationReport, SaveTo};
use hearth::model::hparams::Family;
use hearth::model::testkit::{TinyModelSpec, WeightType};
use hearth::persist::{ConversationId, Message, Role};
use hearth::runtime::PoolSizes;

const GPU_TYPES: [KvDtype; 3] = [KvDtype::F16, KvDtype::Bf16, KvDtype::F32];

fn settings(dtype: KvDtype, prefix_caching: bool) -> CacheSettings {
    CacheSettings {
        kv_dtype: Some(dtype),
        ..cache_settings(prefix_caching, 16)
    }
}

/// The CUDA device, or `None` (the test then skips) where there is none; with
/// `HEARTH_REQUIRE_CUDA` set (as `scripts/gpu-run.sh` does on the GPU machine), no device
/// fails the test instead, so a missing library cannot pass as a skipped run.
fn gpu_device() -> Option<Device> {
    match Device::new_cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            assert!(
                std::env::var_os("HEARTH_REQUIRE_CUDA").is_none(),
                "HEARTH_REQUIRE_CUDA is set but there is no CUDA device: {e}"
            );
            None
        }
    }
}

fn cuda_engine(path: &Path, cache: &CacheSettings, device_blocks: usize, host_blocks: usize) -> Option<Engine> {
    let gpu = gpu_device()?;
    let resolved = hearth::model::source::resolve(
        &hearth::model::source::ModelSource::Local(path.to_path_buf()),
        &Default::default(),
    )
    .unwrap();
    let model = hearth::model::LoadedModel::load(&resolved, &gpu, None).unwrap();
    Some(
        Engine::with_pool_sizes(
            model,
            cache,
            &hearth::config::EngineSettings::default(),
            PoolSizes {
                device_blocks,
                host_blocks,
            },
        )
        .unwrap(),
    )
}

/// `got` against the reference run `want`: each step's logits within tolerance, and the same
/// greedy tokens, except where the reference's top two logits are closer than the two runs'
/// largest difference at that step (a near-tie, which the different matmul kernels of the two
/// devices may break either way): the runs are compared up to there and it is reported.
///
/// The tolerance, 5% of the largest logit: the two devices' quantized matmuls round the
/// activations to 8 bits in different blocks (candle's CUDA kernels to q8_1 per 32 values, ours
/// per their own blocks) and sum in different orders, and the tiny random models amplify that.
/// On an H200 (2026-12-04) 7 of the 72 runs below went over 3%, the largest to 3.7%
/// (DeepSeek-V2 at its first decode step, for every K/V type alike).
fn close(got: &GenerationReport, want: &GenerationReport, what: &str) {
    for (step, (x, y)) in got.logits.iter().zip(&want.logits).enumerate() {
        let d = max_abs_diff(x, y);
        let scale = y.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(
            d < 0.05 * scale,
            "{what} step {step}: max |diff| {d}, max |logit| {scale}"
        );
        if got.tokens.get(step) != want.tokens.get(step) {
            let m = margin(y);
            assert!(
                m <= 2.0 * d,
                "{what} step {step}: greedy tokens differ ({:?} against {:?}) where the reference's \
                 top two logits are {m} apart, more than twice the runs' max |diff| {d}",
                got.tokens.get(step),
                want.tokens.get(step)
            );
            eprintln!("{what}: a near-tie at step {step} (margin {m}, max |diff| {d}): compared up to there");
            return;
        }
    }
    assert_eq!(got.tokens, want.tokens, "{what}: greedy tokens differ");
}

/// Every family and K/V type runs, even after a failure, and the failures are listed at the
/// end (each one's message is printed where it happens): one run on a lent GPU shows them all.
#[test]
fn cuda_engine_matches_cpu_from_every_tier() {
    if gpu_device().is_none() {
        eprintln!("no CUDA device: skipping");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    for family in Family::ALL {
        let spec = TinyModelSpec::tiny(family, WeightType::Q8_0);
        let path = write_tiny(dir.path(), &spec, &format!("{family:?}.gguf"));
        for dtype in GPU_TYPES {
            let run_one = || family_from_every_tier(&spec, &path, family, dtype);
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(run_one)).is_err() {
                failed.push(format!("{family:?} K/V {dtype}"));
            }
        }
    }
    assert!(failed.is_empty(), "{} of {} failed: {failed:?}", failed.len(), Family::ALL.len() * GPU_TYPES.len());
}

fn family_from_every_tier(spec: &TinyModelSpec, path: &Path, family: Family, dtype: KvDtype) {
    let what = |s: &str| format!("{family:?} K/V {dtype} {s}");
    let Some(mut gpu) = cuda_engine(path, &settings(dtype, true), 5, 16) else {
        return;
    };
    let mut cpu = engine_with(path, settings(dtype, false), 64, 0);
    let v = spec.vocab.size;
    let (a, b) = (prompt(64, v, 30), prompt(64, v, 31));
    let run = |e: &mut Engine, p: &[u32]| e.generate(p, &greedy(6), |_| Ok(())).unwrap();

    let cold = run(&mut gpu, &a);
    close(&cold, &run(&mut cpu, &a), &what("cold"));
    run(&mut gpu, &b); // pushes a's blocks to the host tier
    let host_hit = run(&mut gpu, &a);
    assert!(
        host_hit.cached.host_tokens >= 32,
        "{}: {:?}",
        what("host"),
        host_hit.cached
    );
    close(&host_hit, &cold, &what("host hit"));
    let device_hit = run(&mut gpu, &a);
    assert!(
        device_hit.cached.device_tokens >= 32,
        "{}: {:?}",
        what("device"),
        device_hit.cached
    );
    close(&device_hit, &cold, &what("device hit"));
    assert_blocks_released(&gpu.cache_stats(), &what("after the hits"));
}

/// Embeddings on the GPU: each pooling's vector is the CPU engine's (cosine similarity, the
/// kernels differing in rounding), cold and, for last-token pooling, from the device tier.
#[test]
fn cuda_embeddings_match_cpu() {
    use hearth::engine::{normalize, GenerateParams, Pooling};
    let dir = tempfile::tempdir().unwrap();
    for (ty, pooling) in [(1, Pooling::Mean), (2, Pooling::Cls), (3, Pooling::Last)] {
        let spec = TinyModelSpec::embedding(ty, WeightType::Q8_0);
        let path = write_tiny(dir.path(), &spec, &format!("embed-{ty}.gguf"));
        let Some(mut gpu) = cuda_engine(&path, &settings(KvDtype::F16, true), 64, 0) else {
            return;
        };
        let mut cpu = engine_with(&path, settings(KvDtype::F16, false), 64, 0);
        let p = prompt(50, spec.vocab.size, 5);
        let params = GenerateParams::embedding(pooling);
        let unit = |r: GenerationReport| {
            let mut v = r.embedding.expect("an embedding");
            normalize(&mut v);
            v
        };
        let want = unit(cpu.generate(&p, &params, |_| Ok(())).unwrap());
        for what in ["cold", "again"] {
            let r = gpu.generate(&p, &params, |_| Ok(())).unwrap();
            if what == "again" && pooling == Pooling::Last {
                assert!(r.cached.device_tokens >= 32, "{pooling:?}: {:?}", r.cached);
            }
            let got = unit(r);
            let cos: f32 = got.iter().zip(&want).map(|(a, b)| a * b).sum();
            assert!(cos > 0.999, "{pooling:?} {what}: cosine {cos} against the CPU's");
        }
        assert_blocks_released(&gpu.cache_stats(), &format!("{pooling:?}"));
    }
}

/// Encoders on the GPU (BERT's and nomic-embed-text's layers: attention over each whole input
/// both ways, post-norms): the CPU engine's vectors, several inputs of different lengths in
/// one batch, nothing cached.
#[test]
fn cuda_encoder_embeddings_match_cpu() {
    use hearth::engine::{normalize, GenerateParams, Pooling};
    let dir = tempfile::tempdir().unwrap();
    for arch in ["bert", "nomic-bert"] {
        let spec = TinyModelSpec::encoder(arch, 1, WeightType::Q8_0);
        let path = write_tiny(dir.path(), &spec, &format!("{arch}.gguf"));
        let Some(mut gpu) = cuda_engine(&path, &settings(KvDtype::F16, true), 64, 0) else {
            return;
        };
        let mut cpu = engine_with(&path, settings(KvDtype::F16, false), 64, 0);
        let params = GenerateParams::embedding(Pooling::Mean);
        let unit = |r: GenerationReport| {
            let mut v = r.embedding.expect("an embedding");
            normalize(&mut v);
            v
        };
        for (i, n) in [40usize, 7, 100].into_iter().enumerate() {
            let p = prompt(n, spec.vocab.size, i as u32);
            let want = unit(cpu.generate(&p, &params, |_| Ok(())).unwrap());
            let r = gpu.generate(&p, &params, |_| Ok(())).unwrap();
            assert_eq!(r.cached.tokens, 0, "{arch}: an encoder's input from the cache");
            let got = unit(r);
            let cos: f32 = got.iter().zip(&want).map(|(a, b)| a * b).sum();
            assert!(cos > 0.999, "{arch} input {i}: cosine {cos} against the CPU's");
        }
        assert_blocks_released(&gpu.cache_stats(), arch);
    }
}

/// A long prefix promoted from the host tier while the suffix is prefilled: many blocks in
/// flight on the copy stream when the forward starts. The result is the cold run's.
#[test]
fn a_long_promotion_is_complete_before_attention_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    // A context of 2048 tokens: the prompts below are longer than the tiny model's 512.
    let spec = TinyModelSpec {
        context_length: 2048,
        ..TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0)
    };
    let path = write_tiny(dir.path(), &spec, "llama.gguf");
    let v = spec.vocab.size;
    // 40 blocks of prefix; the device tier holds one such request at a time.
    let Some(mut gpu) = cuda_engine(&path, &settings(KvDtype::F16, true), 44, 128) else {
        eprintln!("no CUDA device: skipping");
        return;
    };
    let mut cpu = engine_with(&path, settings(KvDtype::F16, false), 64, 0);
    let mut a = prompt(640, v, 40);
    a.extend(prompt(5, v, 41));
    let run = |e: &mut Engine, p: &[u32]| e.generate(p, &greedy(4), |_| Ok(())).unwrap();
    let cold = run(&mut cpu, &a);
    run(&mut gpu, &a);
    run(&mut gpu, &prompt(650, v, 42)); // a's blocks go to the host tier
    let host_hit = run(&mut gpu, &a);
    // All 40 full blocks hit; the 3 that the second prompt's 41 blocks left in the device
    // tier's 44 from there, the other 37 promoted from the host tier.
    assert_eq!(host_hit.cached.tokens, 640, "{:?}", host_hit.cached);
    assert!(host_hit.cached.host_tokens >= 37 * 16, "{:?}", host_hit.cached);
    close(&host_hit, &cold, "host hit of 37 blocks");
}

/// One saved turn of `conversation`.
fn turn(e: &mut Engine, conversation: &ConversationId, prompt: &[u32], n: usize) -> GenerationReport {
    let request = GenerateRequest {
        prompt: prompt.to_vec(),
        params: greedy(n),
        save: Some(SaveTo {
            conversation: conversation.clone(),
            messages: Some(vec![Message::new(Role::User, "turn")]),
        }),
    };
    e.run(request, |_| Ok(())).unwrap()
}

#[test]
fn cuda_disk_tier_after_a_restart_matches_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let path = write_tiny(dir.path(), &spec, "llama.gguf");
    let v = spec.vocab.size;
    let c = ConversationId::parse("gpu-chat").unwrap();
    for dtype in GPU_TYPES {
        let data = dir.path().join(format!("data-{dtype}"));
        let with_disk = |e: Engine| e.with_disk(&DiskSettings::new(&data, 1 << 30)).unwrap();
        let Some(first) = cuda_engine(&path, &settings(dtype, true), 16, 16) else {
            eprintln!("no CUDA device: skipping");
            return;
        };
        let mut first = with_disk(first);
        let history = prompt(70, v, 50);
        let r = turn(&mut first, &c, &history, 10);
        first.flush_disk();
        assert_eq!(first.stats().disk.unwrap().write_failures, 0, "K/V {dtype}");
        drop(first);

        let mut next = history.clone();
        next.extend(&r.tokens);
        next.extend(prompt(9, v, 51));
        let mut second = with_disk(cuda_engine(&path, &settings(dtype, true), 16, 16).unwrap());
        let warm = turn(&mut second, &c, &next, 6);
        assert!(warm.cached.disk_tokens >= 64, "K/V {dtype}: {:?}", warm.cached);
        let cold = engine_with(&path, settings(dtype, false), 64, 0)
            .generate(&next, &greedy(6), |_| Ok(()))
            .unwrap();
        close(&warm, &cold, &format!("K/V {dtype} disk hit after a restart"));
    }
}
