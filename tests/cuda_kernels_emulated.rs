//! hearth's CUDA kernels, run on the CPU where there is no GPU: `kernels/paged_attention.cu`,
//! unchanged, compiled as C++ against a stand-in for the CUDA built-ins
//! (`tests/cuda_emu/`: every thread of a block a fiber, `__syncthreads` and `__shfl_xor_sync`
//! barriers, shared memory poisoned with NaN), and given the arguments the CUDA store launches
//! with (`hearth::ops::kernel_args`). Against the CPU store, the reference, as
//! `tests/cuda_kernels.rs` does on a GPU: packed prefill chunks over cached prefixes and decode
//! steps through scattered block tables, GQA, heads of 64, 256 and 512, layers of different
//! shapes and a layer reading another's K/V without writing (Gemma 4), a sliding-window layer
//! and a chunked one (Llama 4),
//! soft-capped scores (Gemma 2), K/V as f32, f16 and bf16; the outputs agree and both pools
//! hold the same bytes.
//!
//! What this cannot see: anything of the real device (memory ordering between warps, the real
//! `__expf`, launch limits, streams). It tests the kernels' indexing, their math and the
//! host's arguments. Needs a C++ compiler (`$CXX`, else `c++`), which the build already needs
//! for the tokenizer's C++ code; without one it says so and passes.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use candle_core::{Device, Tensor};
use hearth::config::KvDtype;
use hearth::ops::kernel_args::{attention_shared_bytes, KernelArgs, LayerGeometry, THREADS};
use hearth::ops::test_util::rand_vec;
use hearth::ops::{Attend, BatchLayout, KvShape, KvStore, LayerKv, PagedKvBatch, PagedLayout, SeqChunk, Window};

/// Compiles the emulator with the kernels into `dir`; `None` when there is no C++ compiler.
fn build_emulator(dir: &Path) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let emu = root.join("tests/cuda_emu");
    let exe = dir.join("cuda-emulator");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        .args(["-std=c++17", "-O2", "-Wall", "-Wno-unknown-pragmas", "-include"])
        .arg(emu.join("shim.h"))
        .arg("-I")
        .arg(emu.join("include"))
        .arg(emu.join("harness.cpp"))
        .arg("-o")
        .arg(&exe)
        .output();
    match out {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("SKIPPED: no C++ compiler ({cxx}) to build the CUDA kernel emulator");
            None
        }
        Err(e) => panic!("could not run {cxx}: {e}"),
        Ok(o) => {
            assert!(
                o.status.success(),
                "the kernels do not compile for the emulator:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            Some(exe)
        }
    }
}

/// One emulator process holding one device pool.
struct Emulator {
    child: Child,
    layout: PagedLayout,
    heads: usize,
}

fn put_i32(buf: &mut Vec<u8>, xs: &[i32]) {
    xs.iter().for_each(|x| buf.extend(x.to_le_bytes()));
}
fn put_u32(buf: &mut Vec<u8>, xs: &[u32]) {
    xs.iter().for_each(|x| buf.extend(x.to_le_bytes()));
}
fn put_f32(buf: &mut Vec<u8>, xs: &[f32]) {
    xs.iter().for_each(|x| buf.extend(x.to_le_bytes()));
}

impl Emulator {
    fn start(exe: &Path, layout: PagedLayout, heads: usize, blocks: usize, threads: u32) -> Self {
        let mut child = Command::new(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the emulator starts");
        let dtype = match layout.dtype {
            KvDtype::F32 => 0,
            KvDtype::F16 => 1,
            KvDtype::Bf16 => 2,
            KvDtype::Q8_0 => unreachable!("the CUDA kernels store no q8_0"),
        };
        let mut head = Vec::new();
        let block_elems = LayerGeometry::of(&layout, 0).unwrap().block_elems;
        put_i32(&mut head, &[dtype, block_elems]);
        put_i32(&mut head, &[layout.block_size, heads, blocks].map(|x| x as i32));
        put_i32(&mut head, &[threads as i32]);
        child.stdin.as_mut().unwrap().write_all(&head).unwrap();
        Self { child, layout, heads }
    }

    fn read(&mut self, bytes: usize) -> Vec<u8> {
        let mut buf = vec![0u8; bytes];
        let read = self.child.stdout.as_mut().unwrap().read_exact(&mut buf);
        if read.is_err() {
            let status = self.child.wait();
            panic!("the emulator stopped: {status:?} (its message is above)");
        }
        buf
    }

    /// `write_kv` (where `kv` is given) then `paged_attention`, as `CudaPagedKvBatch::attend`
    /// (and `attend_shared`) launch them.
    fn attend(&mut self, layer: usize, q: &[f32], kv: Option<(&[f32], &[f32])>, args: &KernelArgs, how: Attend<'_>) -> Vec<f32> {
        let t = args.slots.len();
        let seqs = args.tables.len() / args.max_blocks;
        let g = LayerGeometry::of(&self.layout, layer).unwrap();
        let mut cmd = Vec::new();
        put_i32(&mut cmd, &[1, g.layer_offset, g.kv_heads, g.head_dim, g.v_plane, i32::from(kv.is_some())]);
        put_i32(&mut cmd, &[t as i32, seqs as i32, args.max_blocks as i32, args.window]);
        put_f32(&mut cmd, &[how.scale as f32, how.softcap.unwrap_or(0.0)]);
        for extra in [how.sinks, how.alibi] {
            put_i32(&mut cmd, &[i32::from(extra.is_some())]);
            put_f32(&mut cmd, extra.unwrap_or(&vec![0.0; self.heads]));
        }
        let head_dim = self.layout.layer(layer).head_dim;
        put_u32(&mut cmd, &[attention_shared_bytes(THREADS, head_dim)]);
        for xs in [&args.slots, &args.tables, &args.token_seq, &args.token_pos] {
            put_u32(&mut cmd, xs);
        }
        put_f32(&mut cmd, q);
        if let Some((k, v)) = kv {
            put_f32(&mut cmd, k);
            put_f32(&mut cmd, v);
        }
        self.child.stdin.as_mut().unwrap().write_all(&cmd).unwrap();
        let out = self.read(t * self.heads * head_dim * 4);
        out.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
    }

    fn pool(&mut self, bytes: usize) -> Vec<u8> {
        self.child.stdin.as_mut().unwrap().write_all(&2i32.to_le_bytes()).unwrap();
        self.read(bytes)
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(stdin) = self.child.stdin.as_mut() {
            let _ = stdin.write_all(&0i32.to_le_bytes());
        }
        let _ = self.child.wait();
    }
}

/// The emulated kernels' outputs: all finite, each within float rounding of the CPU store's.
fn same_outputs(got: &[f32], expect: &[f32], what: &str) {
    let bad = got.iter().filter(|x| !x.is_finite()).count();
    assert_eq!(bad, 0, "{what}: {bad} outputs not finite (a read of unwritten shared memory?)");
    let d = got.iter().zip(expect).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(d < 1e-5, "{what}: max |diff| {d}");
}

#[test]
fn the_kernels_emulated_on_the_cpu_match_the_cpu_store() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_emulator(dir.path()) else { return };
    // (block size, heads, each layer's K/V heads and head width, K/V type): GQA 4:1, 1:1, 6:1
    // and 2:1, heads of 64 and 256 (Gemma 3), every type the kernels store; and layers of
    // different shapes, the second's heads fewer and wider (Gemma 4's: 512); and DeepSeek-V2's
    // latent, one K/V head of 576 for every query head, kept as K only (V read from it: the
    // last flag).
    let layer = |kv_heads, head_dim| LayerKv { kv_heads, head_dim };
    let cases = [
        (4, 8, [layer(2, 64); 2], KvDtype::F16, false),
        (8, 4, [layer(4, 64); 2], KvDtype::F32, false),
        (4, 6, [layer(1, 64); 2], KvDtype::Bf16, false),
        (8, 2, [layer(1, 256); 2], KvDtype::F16, false),
        (4, 4, [layer(2, 64), layer(1, 512)], KvDtype::F16, false),
        (8, 4, [layer(4, 32), layer(1, 128)], KvDtype::F32, false),
        (4, 8, [layer(1, 576); 2], KvDtype::F16, true),
    ];
    for (block_size, heads, shapes, dtype, v_from_k) in cases {
        let shape = KvShape::per_layer(shapes.to_vec());
        let shape = if v_from_k { shape.with_v_from_k() } else { shape };
        let l = PagedLayout::new(shape, block_size, dtype);
        let blocks = 12;
        let mut cpu_pool = vec![0u8; blocks * l.block_len()];
        let mut emu = Emulator::start(&exe, l.clone(), heads, blocks, THREADS);
        // Scattered, non-monotonic tables; sequence 2 reaches 12 tokens: three blocks of 4.
        let tables = vec![vec![7u32, 3, 9], vec![5u32, 11], vec![8u32, 1, 10]];
        let sinks: Vec<f32> = (0..heads).map(|h| 1.5 - h as f32 * 0.8).collect();
        let slopes: Vec<f32> = (0..heads).map(|h| 0.5f32.powi(h as i32 + 1)).collect();
        let steps = [
            [(0, 9), (0, 2), (0, 7)],
            [(9, 1), (2, 5), (7, 1)],
            [(10, 1), (7, 1), (8, 4)],
        ];
        for (s, chunks) in steps.into_iter().enumerate() {
            let batch =
                BatchLayout::new(chunks.iter().map(|&(cached, new)| SeqChunk { cached, new }).collect()).unwrap();
            let t = batch.total_tokens();
            for (layer, &LayerKv { kv_heads, head_dim }) in shapes.iter().enumerate() {
                let seed = (s * 10 + layer) as u64;
                let (q, k) = (rand_vec(t * heads * head_dim, seed), rand_vec(t * kv_heads * head_dim, seed + 100));
                // Where V is read from K, the caller passes K as V.
                let v = if v_from_k { k.clone() } else { rand_vec(t * kv_heads * head_dim, seed + 200) };
                let tensor = |x: &[f32], h: usize| Tensor::from_vec(x.to_vec(), (t, h, head_dim), &Device::Cpu).unwrap();
                // Layer 0 is a sliding-window layer (Gemma's local layers; in the third step a
                // chunked one, Llama 4's), layer 1 global; from
                // the second step on, scores are soft-capped (Gemma 2) at a cap that bends them;
                // in the first and last steps layer 1 has attention sinks (gpt-oss); in the second,
                // ALiBi (BLOOM's, MPT's).
                let how = Attend {
                    scale: 1.0 / (head_dim as f64).sqrt(),
                    window: (layer == 0).then_some(if s == 2 { Window::Chunked(4) } else { Window::Sliding(5) }),
                    softcap: (s > 0).then_some(0.3),
                    sinks: (layer == 1 && s != 1).then_some(&sinks[..]),
                    alibi: (s == 1).then_some(&slopes[..]),
                };
                let expect: Vec<f32> = PagedKvBatch::new(&mut cpu_pool, l.clone(), tables.clone())
                    .attend(layer, &tensor(&q, heads), &tensor(&k, kv_heads), &tensor(&v, kv_heads), &batch, how)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1()
                    .unwrap();
                let args = KernelArgs::new(&l, &batch, &tables, blocks, how.window).unwrap();
                let got = emu.attend(layer, &q, Some((&k, &v)), &args, how);
                let what = format!("{dtype} bs {block_size} heads {heads}/{kv_heads}x{head_dim} step {s} layer {layer}");
                same_outputs(&got, &expect, &what);
                if layer == 1 {
                    // A later layer reading layer 1's K/V, just written, without writing (Gemma 4's
                    // layers that share K/V).
                    let q = rand_vec(t * heads * head_dim, seed + 300);
                    let how = Attend { sinks: None, ..how };
                    let expect: Vec<f32> = PagedKvBatch::new(&mut cpu_pool, l.clone(), tables.clone())
                        .attend_shared(layer, &tensor(&q, heads), &batch, how)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1()
                        .unwrap();
                    let got = emu.attend(layer, &q, None, &args, how);
                    same_outputs(&got, &expect, &format!("{what}, shared"));
                }
            }
        }
        // The pools hold the same K/V bytes afterwards: each value rounded once, the same way.
        assert!(emu.pool(cpu_pool.len()) == cpu_pool, "{dtype}: pool contents differ");
    }
}
