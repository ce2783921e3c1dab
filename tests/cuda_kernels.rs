//! hearth's CUDA paged-attention kernels against the CPU store (the
//! reference): write K/V into blocks through scattered block tables, then
//! attend, for a packed batch of prefill chunks over cached prefixes and
//! decode steps, several GQA ratios, head sizes 64 and 256, block sizes 16 and 32,
//! and every K/V type the kernels store (f32, f16, bf16): both pools then hold the
//! same bytes. And the tiers on CUDA: blocks demoted to pinned host RAM and promoted
//! back on the copy stream arrive whole.
//!
//! Built only with `--features cuda`; each test returns early (and says so)
//! when no CUDA device is present.
#![cfg(feature = "cuda")]

use candle_core::{Device, Tensor};
use hearth::config::KvDtype;
use hearth::kv::{BlockId, CopyPlan, Tier};
use hearth::ops::cuda_paged::{CudaPagedKvBatch, CudaPool};
use hearth::ops::test_util::rand_vec;
use hearth::ops::{Attend, BatchLayout, KvShape, KvStore, LayerKv, PagedKvBatch, PagedLayout, SeqChunk, Window};
use hearth::runtime::KvMemory;

/// The CUDA device, or `None` (the test then skips) where there is none; with
/// `HEARTH_REQUIRE_CUDA` set (as `scripts/gpu-run.sh` does on the GPU machine), no device
/// fails the test instead, so a missing library cannot pass as a skipped run.
fn cuda() -> Option<candle_core::CudaDevice> {
    match Device::new_cuda(0) {
        Ok(Device::Cuda(d)) => Some(d),
        other => {
            assert!(
                std::env::var_os("HEARTH_REQUIRE_CUDA").is_none(),
                "HEARTH_REQUIRE_CUDA is set but there is no CUDA device: {:?}",
                other.err()
            );
            eprintln!("no CUDA device: skipping");
            None
        }
    }
}

#[test]
fn paged_attention_matches_the_cpu_store() {
    let Some(dev) = cuda() else { return };
    let gpu = Device::Cuda(dev.clone());
    // (block size, heads, each layer's K/V heads and width, V read from K): two with layers of
    // two shapes (Gemma 4's: the global layer's heads fewer and wider, up to 512); the last
    // DeepSeek-V2's latent, one head of 576 kept as K only.
    let layer = |kv_heads, head_dim| LayerKv { kv_heads, head_dim };
    let shapes = [
        (16, 8, [layer(2, 64); 2], false),
        (32, 4, [layer(4, 64); 2], false),
        (16, 6, [layer(1, 64); 2], false),
        (32, 8, [layer(4, 64); 2], false),
        (16, 4, [layer(1, 256); 2], false),
        (16, 8, [layer(4, 256), layer(2, 512)], false),
        (32, 4, [layer(2, 64), layer(1, 128)], false),
        (16, 16, [layer(1, 576); 2], true),
    ];
    for ((block_size, heads, layers, v_from_k), dtype) in shapes
        .into_iter()
        .flat_map(|s| [KvDtype::F32, KvDtype::F16, KvDtype::Bf16].map(|d| (s, d)))
    {
        let shape = KvShape::per_layer(layers.to_vec());
        let l = PagedLayout::new(if v_from_k { shape.with_v_from_k() } else { shape }, block_size, dtype);
        let blocks = 24;
        let mut cpu_pool = vec![0u8; blocks * l.block_len()];
        let mut gpu_pool = CudaPool::new(&dev, l.clone(), blocks).unwrap();
        // Scattered, non-monotonic tables.
        // Sequence 2 reaches 74 tokens: five blocks of 16.
        let tables = vec![vec![17u32, 3, 9, 21, 0], vec![5u32, 11, 2], vec![8u32, 19, 14, 1, 23]];
        let steps = vec![
            vec![
                SeqChunk { cached: 0, new: 37 },
                SeqChunk { cached: 0, new: 5 },
                SeqChunk { cached: 0, new: 70 },
            ],
            vec![
                SeqChunk { cached: 37, new: 1 },
                SeqChunk { cached: 5, new: 20 },
                SeqChunk { cached: 70, new: 1 },
            ],
            vec![
                SeqChunk { cached: 38, new: 1 },
                SeqChunk { cached: 25, new: 1 },
                SeqChunk { cached: 71, new: 3 },
            ],
        ];
        for (s, chunks) in steps.into_iter().enumerate() {
            let batch = BatchLayout::new(chunks).unwrap();
            let t = batch.total_tokens();
            for (layer, &LayerKv { kv_heads, head_dim }) in layers.iter().enumerate() {
                let seed = (s * 10 + layer) as u64;
                let mk = |n: usize, seed: u64, shape: (usize, usize, usize)| {
                    Tensor::from_vec(rand_vec(n, seed), shape, &Device::Cpu).unwrap()
                };
                let q = mk(t * heads * head_dim, seed, (t, heads, head_dim));
                let k = mk(t * kv_heads * head_dim, seed + 100, (t, kv_heads, head_dim));
                // Where V is read from K, the caller passes K as V.
                let v = if v_from_k { k.clone() } else { mk(t * kv_heads * head_dim, seed + 200, (t, kv_heads, head_dim)) };
                // Layer 0 is a sliding-window layer (Gemma's local layers; in the third step a
                // chunked one, Llama 4's), layer 1 global; from
                // the second step on, scores are soft-capped (Gemma 2) at a cap that bends them;
                // in the first and last steps layer 1 has attention sinks (gpt-oss); in the second,
                // ALiBi (BLOOM's, MPT's).
                let sinks: Vec<f32> = (0..heads).map(|h| 1.5 - h as f32 * 0.8).collect();
                let slopes: Vec<f32> = (0..heads).map(|h| 0.5f32.powi(h as i32 + 1)).collect();
                let how = Attend {
                    scale: 1.0 / (head_dim as f64).sqrt(),
                    window: (layer == 0).then_some(if s == 2 { Window::Chunked(16) } else { Window::Sliding(19) }),
                    softcap: (s > 0).then_some(0.3),
                    sinks: (layer == 1 && s != 1).then_some(&sinks[..]),
                    alibi: (s == 1).then_some(&slopes[..]),
                };
                let expect = PagedKvBatch::new(&mut cpu_pool, l.clone(), tables.clone())
                    .attend(layer, &q, &k, &v, &batch, how)
                    .unwrap();
                let (qg, kg, vg) = (
                    q.to_device(&gpu).unwrap(),
                    k.to_device(&gpu).unwrap(),
                    v.to_device(&gpu).unwrap(),
                );
                let got = CudaPagedKvBatch::new(&mut gpu_pool, tables.clone())
                    .attend(layer, &qg, &kg, &vg, &batch, how)
                    .unwrap()
                    .to_device(&Device::Cpu)
                    .unwrap();
                let d: f32 = (got - expect)
                    .unwrap()
                    .abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar()
                    .unwrap();
                assert!(
                    d < 1e-4,
                    "{dtype} bs {block_size} heads {heads}/{kv_heads}x{head_dim} step {s} layer {layer}: {d}"
                );
                if layer == 1 {
                    // A later layer reading layer 1's K/V without writing (Gemma 4's sharing).
                    let q = mk(t * heads * head_dim, seed + 300, (t, heads, head_dim));
                    let how = Attend { sinks: None, ..how };
                    let expect = PagedKvBatch::new(&mut cpu_pool, l.clone(), tables.clone())
                        .attend_shared(layer, &q, &batch, how)
                        .unwrap();
                    let got = CudaPagedKvBatch::new(&mut gpu_pool, tables.clone())
                        .attend_shared(layer, &q.to_device(&gpu).unwrap(), &batch, how)
                        .unwrap()
                        .to_device(&Device::Cpu)
                        .unwrap();
                    let d: f32 = (got - expect).unwrap().abs().unwrap().max_all().unwrap().to_scalar().unwrap();
                    assert!(d < 1e-4, "{dtype} bs {block_size} heads {heads}/{kv_heads}x{head_dim} step {s}, shared: {d}");
                }
            }
        }
        // The pools hold the same K/V bytes afterwards: each value rounded once, the same way.
        let back = gpu_pool.device.clone_dtoh(&gpu_pool.data).unwrap();
        assert!(back == cpu_pool, "{dtype}: pool contents differ");
    }
}

/// Blocks written on the device, demoted to the pinned host tier and promoted back into other
/// device blocks (scattered and consecutive, so both one-block copies and runs), arrive whole;
/// a bad plan copies nothing.
#[test]
fn blocks_move_between_vram_and_pinned_host_ram_whole() {
    let Some(dev) = cuda() else { return };
    let l = PagedLayout::uniform(3, 2, 64, 16, KvDtype::F16);
    let (device_blocks, host_blocks) = (24u32, 12u32);
    let mut m = KvMemory::new_cuda(&dev, l.clone(), device_blocks as usize, host_blocks as usize).unwrap();
    assert!(m.host_is_pinned());
    let pattern = |b: u32| -> Vec<u8> { (0..l.block_len()).map(|i| (i as u32 * 31 + b * 7) as u8).collect() };
    for b in 0..8 {
        let r = m.fill_block(Tier::Device, BlockId(b), |dst| {
            dst.copy_from_slice(&pattern(b));
            Ok::<(), ()>(())
        });
        assert!(matches!(r, Ok(Ok(()))));
    }
    // Device 0..8 → host (0..4 consecutive, 4..8 reversed), then back to device 16..24.
    let demote: Vec<_> = (0..8u32)
        .map(|i| (BlockId(i), BlockId(if i < 4 { i } else { 11 - i })))
        .collect();
    let promote: Vec<_> = demote.iter().map(|&(d, h)| (h, BlockId(d.0 + 16))).collect();
    m.execute(&CopyPlan {
        demote,
        promote: vec![],
    })
    .unwrap();
    m.execute(&CopyPlan {
        demote: vec![],
        promote,
    })
    .unwrap();
    for b in 0..8 {
        assert_eq!(
            m.device_block(BlockId(b + 16)).unwrap(),
            pattern(b),
            "device block {}",
            b + 16
        );
        let h = if b < 4 { b } else { 11 - b };
        assert_eq!(m.host_block(BlockId(h)).unwrap(), &pattern(b)[..], "host block {h}");
    }
    let bad = CopyPlan {
        demote: vec![(BlockId(0), BlockId(1)), (BlockId(1), BlockId(host_blocks))],
        promote: vec![],
    };
    assert!(m.execute(&bad).is_err());
    assert_eq!(
        m.host_block(BlockId(1)).unwrap(),
        &pattern(1)[..],
        "a bad plan copies nothing"
    );
}
