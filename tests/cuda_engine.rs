//! End to end on a CUDA device: the engine with its device tier in VRAM
//! gives the CPU engine's greedy tokens (logits within a tolerance for the
//! different matmul kernels), with the cache and without, from both tiers.
//!
//! Built only with `--features cuda`; returns early when no CUDA device is
//! present.
#![cfg(feature = "cuda")]

mod common;

use candle_core::Device;
use common::*;
use hearth::engine::{Engine, GenerationReport};
use hearth::model::hparams::Family;
use hearth::model::testkit::{TinyModelSpec, WeightType};
use hearth::runtime::PoolSizes;

fn cuda_engine(
    path: &std::path::Path,
    prefix_caching: bool,
    device_blocks: usize,
    host_blocks: usize,
) -> Option<Engine> {
    let gpu = Device::new_cuda(0).ok()?;
    let resolved = hearth::model::source::resolve(
        &hearth::model::source::ModelSource::Local(path.to_path_buf()),
        &Default::default(),
    )
    .unwrap();
    let model = hearth::model::LoadedModel::load(&resolved, &gpu, None).unwrap();
    Some(
        Engine::with_pool_sizes(
            model,
            &cache_settings(prefix_caching, 16),
            &hearth::config::EngineSettings::default(),
            PoolSizes {
                device_blocks,
                host_blocks,
            },
        )
        .unwrap(),
    )
}

fn close(a: &GenerationReport, b: &GenerationReport, what: &str) {
    assert_eq!(a.tokens, b.tokens, "{what}: greedy tokens differ");
    for (step, (x, y)) in a.logits.iter().zip(&b.logits).enumerate() {
        let d = max_abs_diff(x, y);
        let scale = y.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(
            d < 0.03 * scale,
            "{what} step {step}: max |diff| {d}, max |logit| {scale}"
        );
    }
}

#[test]
fn cuda_engine_matches_cpu_from_every_tier() {
    let dir = tempfile::tempdir().unwrap();
    for family in [Family::Llama, Family::Qwen2, Family::Qwen3] {
        let spec = TinyModelSpec::tiny(family, WeightType::Q8_0);
        let path = write_tiny(dir.path(), &spec, &format!("{family:?}.gguf"));
        let Some(mut gpu) = cuda_engine(&path, true, 5, 16) else {
            eprintln!("no CUDA device: skipping");
            return;
        };
        let mut cpu = engine(&path, false, 64, 0);
        let v = spec.vocab.size;
        let (a, b) = (prompt(64, v, 30), prompt(64, v, 31));
        let run = |e: &mut Engine, p: &[u32]| e.generate(p, &greedy(6), |_| Ok(())).unwrap();

        let cold = run(&mut gpu, &a);
        close(&cold, &run(&mut cpu, &a), &format!("{family:?} cold"));
        run(&mut gpu, &b); // pushes a's blocks to the host tier
        let host_hit = run(&mut gpu, &a);
        assert!(host_hit.cached.host_tokens >= 32, "{family:?}: {:?}", host_hit.cached);
        close(&host_hit, &cold, &format!("{family:?} host hit"));
        let device_hit = run(&mut gpu, &a);
        assert!(
            device_hit.cached.device_tokens >= 32,
            "{family:?}: {:?}",
            device_hit.cached
        );
        close(&device_hit, &cold, &format!("{family:?} device hit"));
    }
}
