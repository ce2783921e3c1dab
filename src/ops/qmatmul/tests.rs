//! Each kernel against candle's `QMatMul` and an f32 matmul of the dequantized
//! weights, on every path this CPU has; the paths against each other (bit-equal).

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

use super::*;

const KINDS: [(QuantKind, GgmlDType); 16] = [
    (QuantKind::Q4_0, GgmlDType::Q4_0),
    (QuantKind::Q4_1, GgmlDType::Q4_1),
    (QuantKind::Q5_0, GgmlDType::Q5_0),
    (QuantKind::Q5_1, GgmlDType::Q5_1),
    (QuantKind::Q8_0, GgmlDType::Q8_0),
    (QuantKind::Q4K, GgmlDType::Q4K),
    (QuantKind::Q5K, GgmlDType::Q5K),
    (QuantKind::Q6K, GgmlDType::Q6K),
    (QuantKind::Q3K, GgmlDType::Q3K),
    (QuantKind::Q2K, GgmlDType::Q2K),
    // Q8_0 blocks of a table's values (`weights`).
    (QuantKind::Q8Iq4nl, GgmlDType::Q8_0),
    (QuantKind::Q8Fp4, GgmlDType::Q8_0),
    (QuantKind::Q8Iq3xxs, GgmlDType::Q8_0),
    (QuantKind::Q8Iq3s, GgmlDType::Q8_0),
    (QuantKind::Q8Iq2, GgmlDType::Q8_0),
    // IQ4_XS blocks, against candle's Q8_0 of the same values (`weights`).
    (QuantKind::Iq4Xs, GgmlDType::Q8_0),
];

fn values(len: usize, seed: u32, scale: f32) -> Vec<f32> {
    // A deterministic spread with an occasional outlier (as real activations have).
    (0..len as u32)
        .map(|i| {
            let h = (i.wrapping_mul(2654435761) ^ seed.wrapping_mul(0x9E3779B9)).wrapping_mul(0x85EBCA6B);
            let v = (h >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0;
            if h.is_multiple_of(97) {
                v * 6.0 * scale
            } else {
                v * scale
            }
        })
        .collect()
}

struct Case {
    packed: PackedMatrix,
    candle: QMatMul,
    /// The dequantized weights, `[n, k]`.
    w: Vec<f32>,
    n: usize,
    k: usize,
}

fn case(kind: QuantKind, dtype: GgmlDType, n: usize, k: usize, seed: u32) -> Case {
    case_as(kind, dtype, n, k, seed, Layout::for_isa(Isa::detect()))
}

/// The GGUF bytes to pack as `kind`, and candle's tensor of the same values: `src` quantized
/// to `dtype`; for a table kind, Q8_0 blocks with candle's scales whose values are the table's
/// (as an IQ4_NL or MXFP4 tensor becomes at load); for IQ4_XS, blocks of a pattern
/// ([`iq4_xs`]) and the Q8_0 blocks that hold their values exactly.
fn weights(kind: QuantKind, dtype: GgmlDType, src: &Tensor) -> (Vec<u8>, QTensor) {
    if kind == QuantKind::Iq4Xs {
        let (raw, q8) = iq4_xs(src.elem_count(), src.elem_count() as u32);
        let q = candle_core::quantized::ggml_file::qtensor_from_ggml(dtype, &q8, src.dims().to_vec(), &Device::Cpu);
        return (raw, q.unwrap());
    }
    let q = QTensor::quantize(src, dtype).unwrap();
    let Some(table) = kind.table() else { return (q.data().unwrap().into_owned(), q) };
    let mut raw = q.data().unwrap().into_owned();
    for (i, block) in raw.chunks_exact_mut(34).enumerate() {
        for (j, v) in block[2..].iter_mut().enumerate() {
            *v = table[(i * 7 + j * 5 + (j * j + i) % 3) % 16] as u8;
        }
    }
    let q = candle_core::quantized::ggml_file::qtensor_from_ggml(dtype, &raw, src.dims().to_vec(), &Device::Cpu);
    (raw, q.unwrap())
}

/// `len` values of IQ4_XS (a pattern of `seed`: every index, every sub-scale from −32 to 31),
/// and Q8_0 blocks of the same values: `d` a multiple of 2^−12 of at most five bits, so that
/// each `d·(ls − 32)` is exact in f16.
fn iq4_xs(len: usize, seed: u32) -> (Vec<u8>, Vec<u8>) {
    let (mut raw, mut q8) = (Vec::new(), Vec::new());
    let mut x = seed.wrapping_mul(0x9E37_79B9) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    };
    for _ in 0..len / 256 {
        let d = half::f16::from_f32((next() % 31 + 1) as f32 / 4096.0);
        let dec = format::Decoded {
            q: std::array::from_fn(|_| (next() % 16) as u8),
            d,
            m: half::f16::ZERO,
            sc: std::array::from_fn(|j| if j < 8 { (next() % 64) as i8 - 32 } else { 0 }),
            mn: [0; 16],
        };
        let mut b = [0u8; 136];
        format::encode(QuantKind::Iq4Xs, &dec, &mut b);
        raw.extend_from_slice(&b);
        for j in 0..8 {
            let scale = half::f16::from_f32(d.to_f32() * f32::from(dec.sc[j]));
            assert_eq!(scale.to_f32(), d.to_f32() * f32::from(dec.sc[j]), "exact in f16");
            q8.extend_from_slice(&scale.to_bits().to_le_bytes());
            q8.extend(dec.q[32 * j..32 * j + 32].iter().map(|&i| IQ4NL[usize::from(i)] as u8));
        }
    }
    (raw, q8)
}

fn case_as(kind: QuantKind, dtype: GgmlDType, n: usize, k: usize, seed: u32, layout: Layout) -> Case {
    let cpu = Device::Cpu;
    let src = Tensor::from_vec(values(n * k, seed, 0.5), (n, k), &cpu).unwrap();
    let (raw, q) = weights(kind, dtype, &src);
    let w = q
        .dequantize(&cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let packed = PackedMatrix::pack_as(kind, &raw, n, k, layout).unwrap();
    assert_eq!(packed.kind(), kind, "a Q8_0 tensor of a table's values is packed as that table");
    Case {
        packed,
        candle: QMatMul::from_qtensor(q).unwrap(),
        w,
        n,
        k,
    }
}

fn check(c: &Case, t: usize, seed: u32) {
    let x = values(t * c.k, seed ^ 0xABCD, 2.0);
    let xt = Tensor::from_vec(x.clone(), (t, c.k), &Device::Cpu).unwrap();
    let theirs = c
        .candle
        .forward(&xt)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let mut base: Option<Vec<f32>> = None;
    for isa in Isa::available() {
        let mut ours = vec![f32::NAN; t * c.n];
        c.packed.matmul_with(isa, &x, t, &mut ours);
        for i in 0..t {
            for j in 0..c.n {
                let (xr, wr) = (&x[i * c.k..(i + 1) * c.k], &c.w[j * c.k..(j + 1) * c.k]);
                let exact: f32 = xr.iter().zip(wr).map(|(a, b)| a * b).sum();
                // int8 activations: each value is off by at most half a step, amax/254
                // of its block (32 values, or 256 for the K-quants), as in candle.
                let ab = c.packed.kind().block_elems();
                let bound: f32 = xr
                    .chunks(ab)
                    .zip(wr.chunks(ab))
                    .map(|(xb, wb)| {
                        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                        wb.iter().map(|w| w.abs()).sum::<f32>() * amax / 254.0
                    })
                    .sum();
                let tol = 1.01 * bound + 1e-4;
                let (o, th) = (ours[i * c.n + j], theirs[i * c.n + j]);
                let what = format!(
                    "{:?} {} n={} k={} t={t} at ({i},{j})",
                    c.packed.kind(),
                    isa.name(),
                    c.n,
                    c.k
                );
                assert!(
                    (o - exact).abs() <= tol,
                    "{what}: ours {o} vs exact {exact} (tol {tol})"
                );
                assert!(
                    (o - th).abs() <= 2.0 * tol,
                    "{what}: ours {o} vs candle {th} (tol {})",
                    2.0 * tol
                );
            }
        }
        match &base {
            None => base = Some(ours),
            Some(b) => assert!(
                b.iter().zip(&ours).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{:?}: {} differs from the portable path",
                c.packed.kind(),
                isa.name()
            ),
        }
    }
    // What the forward calls: this CPU's path for `t` rows (one group at a time for decode).
    let mut ours = vec![f32::NAN; t * c.n];
    c.packed.matmul(&x, t, &mut ours);
    let same = base.is_some_and(|b| b.iter().zip(&ours).all(|(a, b)| a.to_bits() == b.to_bits()));
    assert!(same, "{:?} t={t}: matmul differs from the portable path", c.packed.kind());
}

#[test]
fn every_kind_matches_candle_on_every_path() {
    for (kind, dtype) in KINDS {
        // (An even number of 32-value blocks: candle's portable Q4_1 dot, which debug builds
        // check, takes blocks two at a time.)
        let ks: &[usize] = if kind.is_super() { &[256, 768] } else { &[64, 192, 576] };
        for &k in ks {
            // Rows: one group, not a multiple of the group, several groups.
            for (s, &n) in [8usize, 13, 40].iter().enumerate() {
                let c = case(kind, dtype, n, k, s as u32 + 1);
                // Activation rows: decode, partial tiles, several tiles plus a remainder.
                for t in [1, 2, 3, 4, 5, 9] {
                    check(&c, t, t as u32);
                }
            }
        }
    }
}

#[test]
fn many_rows_use_the_thread_pool_and_agree() {
    // Enough groups and rows to split across tasks and threads.
    for (kind, dtype) in KINDS {
        let c = case(kind, dtype, 8 * 37 + 3, 512, 7);
        check(&c, 1, 1);
        check(&c, 19, 2);
    }
}

#[test]
fn many_rows_quantize_across_threads_as_one_at_a_time() {
    // A prompt chunk's activations are quantized by blocks on the pool (past 2^15 values);
    // every block must come out as it does alone, in each form.
    for (kind, _) in KINDS {
        let (t, k) = (90, 512);
        let x = values(t * k, 31, 2.0);
        let mut all = QuantActs::default();
        all.quantize(kind, &x, t, k);
        let mut one = QuantActs::default();
        for i in 0..t {
            one.quantize(kind, &x[i * k..(i + 1) * k], 1, k);
            let (b, s) = (k / kind.block_elems(), kind.subs() / 2);
            assert_eq!(all.row_q(i), one.row_q(0), "{kind:?} row {i} quants");
            assert_eq!(all.d[i * b..(i + 1) * b], one.d[..], "{kind:?} row {i} scales");
            if kind.is_super() {
                assert_eq!(all.sum_pairs[i * b * s..(i + 1) * b * s], one.sum_pairs[..], "{kind:?} row {i} sums");
            } else {
                assert_eq!(all.sums[i * b..(i + 1) * b], one.sums[..], "{kind:?} row {i} sums");
            }
        }
    }
}

#[test]
fn zero_activations_give_zero() {
    for (kind, dtype) in KINDS {
        let k = kind.block_elems();
        let c = case(kind, dtype, 16, k, 3);
        for isa in Isa::available() {
            let mut out = vec![1.0; 2 * 16];
            c.packed.matmul_with(isa, &vec![0.0; 2 * k], 2, &mut out);
            assert!(out.iter().all(|&v| v == 0.0), "{kind:?} {}", isa.name());
        }
    }
}

#[test]
fn pack_refuses_bad_shapes() {
    let raw = vec![0u8; 18 * 2];
    assert!(matches!(
        PackedMatrix::pack(QuantKind::Q4_0, &raw, 1, 48),
        Err(PackError::Columns { .. })
    ));
    assert!(matches!(
        PackedMatrix::pack(QuantKind::Q4_0, &raw, 1, 32),
        Err(PackError::Bytes { .. })
    ));
    assert!(PackedMatrix::pack(QuantKind::Q4_0, &raw, 2, 32).is_ok());
    assert!(matches!(
        PackedMatrix::pack(QuantKind::Q4K, &[0u8; 144], 1, 128),
        Err(PackError::Columns { .. })
    ));
}

#[test]
fn packed_memory_is_close_to_the_file() {
    for (kind, dtype) in KINDS {
        let c = case(kind, dtype, 64, 512, 9);
        let file = 64 * 512 / kind.block_elems() * kind.block_bytes();
        let ratio = c.packed.bytes() as f64 / file as f64;
        // Q3_K's 3-bit quants are kept in 4 bits (the nibble layout the kernels unpack).
        // Q2_K's 4-bit sub-scales and sub-mins are kept as bytes.
        let most = match kind {
            QuantKind::Q3K => 1.35,
            QuantKind::Q2K => 1.25,
            _ => 1.05,
        };
        assert!(ratio <= most, "{kind:?}: {ratio}");
        if kind.table().is_some() && !kind.is_super() {
            // 4-bit indices and the f16 scale: 4.5 bits a value against Q8_0's 8.5.
            assert!(ratio < 0.55, "{kind:?}: {ratio}");
        }
    }
}

#[test]
fn a_row_gets_the_same_bits_in_any_batch() {
    // The engine packs many sequences' rows into one matmul: each row's result
    // must not depend on which rows it is multiplied with (nor on the tile it
    // lands in, nor on decode's fused unpacking against prefill's).
    for (kind, dtype) in KINDS {
        let k = if kind.is_super() { 512 } else { 96 };
        for n in [40, 534] {
            let c = case(kind, dtype, n, k, 5);
            for t in [2, 5, 11, 15, 29, 45] {
                let x = values(t * k, 77, 2.0);
                // Each path, and what the forward calls (whose path depends on the rows).
                let isas = Isa::available().into_iter().map(Some).chain([None]);
                for isa in isas {
                    let run = |x: &[f32], t: usize, out: &mut [f32]| match isa {
                        Some(isa) => c.packed.matmul_with(isa, x, t, out),
                        None => c.packed.matmul(x, t, out),
                    };
                    let mut all = vec![0f32; t * n];
                    run(&x, t, &mut all);
                    for i in 0..t {
                        let mut one = vec![0f32; n];
                        run(&x[i * k..(i + 1) * k], 1, &mut one);
                        let same = one
                            .iter()
                            .zip(&all[i * n..(i + 1) * n])
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(
                            same,
                            "{kind:?} {} n={n} t={t}: row {i} alone differs from the batch",
                            isa.map_or("matmul", Isa::name)
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_kernels_this_cpu_lacks_emulated_equal_the_portable_path() {
    // The AVX-512 body over plain-Rust stand-ins for its intrinsics (pairs of groups,
    // an odd last group, every tile size, decode's fused unpacking and prefill's), and
    // the AVX-VNNI kernel with its one VNNI instruction done by two AVX2 ones, each on
    // both layouts, against the portable kernel on the plain one.
    use super::avx512::PairKernel;
    for (kind, dtype) in KINDS {
        let k = if kind.is_super() { 512 } else { 96 };
        for (s, n) in [8usize, 16, 13, 40, 64, 72].into_iter().enumerate() {
            let seed = 11 + s as u32;
            let plain = case_as(kind, dtype, n, k, seed, Layout::Groups);
            let paired = case_as(kind, dtype, n, k, seed, Layout::Pairs);
            for (t, c) in [1, 2, 3, 4, 5, 9].into_iter().flat_map(|t| [(t, &plain), (t, &paired)]) {
                let x = values(t * k, 31 + t as u32, 2.0);
                let mut want = vec![f32::NAN; t * n];
                plain.packed.matmul_on(Path::Portable, &x, t, &mut want);
                let mut paths = vec![
                    Path::Portable,
                    Path::Pairs(PairKernel::Emulated { vnni: false }),
                    Path::Pairs(PairKernel::Emulated { vnni: true }),
                ];
                // And this CPU's own kernels.
                paths.extend(Isa::available().into_iter().map(Path::of));
                paths.push(Path::of(Isa::detect()).for_kind(kind));
                #[cfg(target_arch = "x86_64")]
                if Isa::Avx2.supported() {
                    // The AVX-VNNI kernel's shape, `vpdpbusd` done with AVX2.
                    paths.push(Path::Avx2(super::avx2::Dot::VnniOnAvx2));
                }
                #[cfg(target_arch = "x86_64")]
                if Isa::Avx512Vnni.supported() {
                    // The odd last group's path beside the VNNI pair kernel, at every tile size.
                    paths.push(Path::Avx2(super::avx2::Dot::Vnni512));
                }
                for path in paths {
                    let mut got = vec![f32::NAN; t * n];
                    c.packed.matmul_on(path, &x, t, &mut got);
                    let same = want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits());
                    let layout = c.packed.layout();
                    assert!(same, "{kind:?} {layout:?} n={n} t={t} {path:?}: {:?} vs {:?}", &got[..8], &want[..8]);
                }
            }
        }
    }
}

/// `matmul_many` gives each job the bits `matmul` gives it alone: every kind, decode (one
/// row, `out` written directly) and prefill rows (staged), widths that are and are not whole
/// groups, an empty job among them.
#[test]
fn many_jobs_at_once_equal_each_alone() {
    let shapes = [(64, 256, 1), (40, 256, 3), (72, 512, 1), (16, 256, 0), (24, 256, 5)];
    let cases: Vec<Case> = KINDS
        .iter()
        .zip(shapes.iter().cycle())
        .enumerate()
        .map(|(i, (&(kind, dtype), &(n, k, _)))| case(kind, dtype, n, k, 40 + i as u32))
        .collect();
    let ts: Vec<usize> = shapes.iter().cycle().take(cases.len()).map(|s| s.2).collect();
    let xs: Vec<Vec<f32>> = cases
        .iter()
        .zip(&ts)
        .enumerate()
        .map(|(i, (c, &t))| values(t * c.k, 90 + i as u32, 1.0))
        .collect();
    let alone: Vec<Vec<f32>> = cases
        .iter()
        .zip(&ts)
        .zip(&xs)
        .map(|((c, &t), x)| {
            let mut out = vec![0f32; t * c.n];
            c.packed.matmul(x, t, &mut out);
            out
        })
        .collect();
    let mut outs: Vec<Vec<f32>> = cases.iter().zip(&ts).map(|(c, &t)| vec![f32::NAN; t * c.n]).collect();
    let mut jobs: Vec<MatmulJob<'_>> = cases
        .iter()
        .zip(&ts)
        .zip(&xs)
        .zip(outs.iter_mut())
        .map(|(((c, &t), x), out)| MatmulJob {
            matrix: &c.packed,
            x,
            t,
            out,
        })
        .collect();
    matmul_many(&mut jobs);
    for (i, (a, b)) in outs.iter().zip(&alone).enumerate() {
        assert_eq!(a.len(), b.len());
        assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "job {i} ({:?})", cases[i].packed.kind());
    }
}

/// Every row read back from a packed matrix is the GGUF bytes it was packed from, for every
/// kind, in both layouts, the last group partial.
#[test]
fn rows_read_back_are_the_packed_bytes() {
    let (n, k) = (21, 512);
    for (i, &(kind, dtype)) in KINDS.iter().enumerate() {
        let src = Tensor::from_vec(values(n * k, 70 + i as u32, 0.5), (n, k), &Device::Cpu).unwrap();
        let (raw, _) = weights(kind, dtype, &src);
        let row_bytes = raw.len() / n;
        for layout in [Layout::Groups, Layout::Pairs] {
            let packed = PackedMatrix::pack_as(kind, &raw, n, k, layout).unwrap();
            for r in 0..n {
                let mut got = Vec::new();
                packed.row_gguf(r, &mut got);
                assert_eq!(got, raw[r * row_bytes..(r + 1) * row_bytes], "{kind:?} {layout:?} row {r}");
            }
        }
    }
}
