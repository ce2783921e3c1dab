//! hearth's CUDA paged-attention kernels against the CPU store (the
//! reference): write K/V into blocks through scattered block tables, then
//! attend, for a packed batch of prefill chunks over cached prefixes and
//! decode steps, several GQA ratios and block sizes 16 and 32.
//!
//! Built only with `--features cuda`; each test returns early (and says so)
//! when no CUDA device is present.
#![cfg(feature = "cuda")]

use candle_core::{DType, Device, Tensor};
use hearth::ops::cuda_paged::{CudaPagedKvBatch, CudaPool};
use hearth::ops::{Attend, BatchLayout, KvStore, PagedKvBatch, PagedLayout, SeqChunk};

fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn cuda() -> Option<candle_core::CudaDevice> {
    match Device::new_cuda(0) {
        Ok(Device::Cuda(d)) => Some(d),
        _ => {
            eprintln!("no CUDA device: skipping");
            None
        }
    }
}

#[test]
fn paged_attention_matches_the_cpu_store() {
    let Some(dev) = cuda() else { return };
    let gpu = Device::Cuda(dev.clone());
    for (block_size, heads, kv_heads) in [(16, 8, 2), (32, 4, 4), (16, 6, 1), (32, 8, 4)] {
        let head_dim = 64;
        let l = PagedLayout {
            layers: 2,
            kv_heads,
            head_dim,
            block_size,
            dtype: hearth::config::KvDtype::F32,
        };
        let blocks = 24;
        let mut cpu_pool = vec![0u8; blocks * l.block_len()];
        let mut gpu_pool = CudaPool::new(&dev, l, blocks).unwrap();
        // Scattered, non-monotonic tables.
        let tables = vec![vec![17u32, 3, 9, 21, 0], vec![5u32, 11, 2], vec![8u32, 19, 14, 1]];
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
            for layer in 0..2 {
                let seed = (s * 10 + layer) as u64;
                let mk = |n: usize, seed: u64, shape: (usize, usize, usize)| {
                    Tensor::from_vec(rand_vec(n, seed), shape, &Device::Cpu).unwrap()
                };
                let q = mk(t * heads * head_dim, seed, (t, heads, head_dim));
                let k = mk(t * kv_heads * head_dim, seed + 100, (t, kv_heads, head_dim));
                let v = mk(t * kv_heads * head_dim, seed + 200, (t, kv_heads, head_dim));
                // Layer 0 is a sliding-window layer (Gemma 3's local layers), layer 1 global.
                let how = Attend {
                    scale: 1.0 / (head_dim as f64).sqrt(),
                    window: (layer == 0).then_some(19),
                };
                let expect = PagedKvBatch::new(&mut cpu_pool, l, tables.clone())
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
                    "bs {block_size} heads {heads}/{kv_heads} step {s} layer {layer}: {d}"
                );
            }
        }
        // The pools hold the same K/V afterwards.
        let back = gpu_pool.device.clone_dtoh(&gpu_pool.data).unwrap();
        let d = back
            .iter()
            .zip(
                cpu_pool
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            )
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert_eq!(d, 0.0, "pool contents differ");
        let _ = DType::F32;
    }
}
