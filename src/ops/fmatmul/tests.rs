//! Each path against an f64 matmul of the same weights, against each other (bit-equal),
//! and across batch sizes (a row's outputs do not depend on the rows beside it).

use half::{bf16, f16};

use super::*;
use crate::ops::test_util::rand_vec;

const KINDS: [FloatKind; 3] = [FloatKind::F32, FloatKind::F16, FloatKind::Bf16];

/// `values` as `kind`'s GGUF bytes, and the values those bytes hold.
fn encode(kind: FloatKind, values: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let mut raw = Vec::new();
    let mut held = Vec::new();
    for &v in values {
        match kind {
            FloatKind::F32 => {
                raw.extend_from_slice(&v.to_le_bytes());
                held.push(v);
            }
            FloatKind::F16 => {
                let h = f16::from_f32(v);
                raw.extend_from_slice(&h.to_bits().to_le_bytes());
                held.push(h.to_f32());
            }
            FloatKind::Bf16 => {
                let h = bf16::from_f32(v);
                raw.extend_from_slice(&h.to_bits().to_le_bytes());
                held.push(h.to_f32());
            }
        }
    }
    (raw, held)
}

struct Case {
    m: FloatMatrix,
    /// The weights' values, `[n, k]`.
    w: Vec<f32>,
    raw: Vec<u8>,
}

fn case(kind: FloatKind, n: usize, k: usize, seed: u64) -> Case {
    let (raw, w) = encode(kind, &rand_vec(n * k, seed));
    Case {
        m: FloatMatrix::new(kind, &raw, n, k).unwrap(),
        w,
        raw,
    }
}

fn run(c: &Case, isa: Isa, x: &[f32], t: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; t * c.m.rows()];
    c.m.matmul_with(isa, x, t, &mut out);
    out
}

/// Every path gives the portable path's bits, which are within rounding of the exact sums.
#[test]
fn every_path_equals_the_portable_one_and_the_exact_sums() {
    for kind in KINDS {
        for (n, k) in [(16, 16), (37, 33), (70, 100), (64, 256), (130, 64)] {
            let c = case(kind, n, k, n as u64 * 31 + k as u64);
            for t in [1, 2, 3, 4, 5, 7, 8, 9, 13, 20] {
                let x = rand_vec(t * k, 7 + t as u64);
                let reference = run(&c, Isa::Portable, &x, t);
                for (i, &got) in reference.iter().enumerate() {
                    let (row, col) = (i / n, i % n);
                    let exact: f64 = (0..k).map(|j| x[row * k + j] as f64 * c.w[col * k + j] as f64).sum();
                    let bound: f64 = (0..k)
                        .map(|j| (x[row * k + j] * c.w[col * k + j]).abs() as f64)
                        .sum::<f64>();
                    assert!(
                        (got as f64 - exact).abs() <= bound * k as f64 * 1.2e-7 + 1e-30,
                        "{kind:?} {n}×{k} t={t} [{row},{col}]: {got} against {exact}"
                    );
                }
                for isa in Isa::available() {
                    let got = run(&c, isa, &x, t);
                    assert!(
                        got.iter().zip(&reference).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{kind:?} {n}×{k} t={t}: {} differs from the portable path",
                        isa.name()
                    );
                }
            }
        }
    }
}

/// A row's outputs are the same bits alone as among others, whichever tile it lands in.
#[test]
fn a_row_gets_the_same_bits_in_any_batch() {
    let (n, k, t) = (100, 96, 23);
    for kind in KINDS {
        let c = case(kind, n, k, 5);
        let x = rand_vec(t * k, 11);
        let all = run(&c, Isa::detect(), &x, t);
        for i in 0..t {
            let one = run(&c, Isa::detect(), &x[i * k..(i + 1) * k], 1);
            assert_eq!(one, all[i * n..(i + 1) * n], "{kind:?} row {i}");
        }
    }
}

/// Rows read back are the bytes given; the memory is the file's (up to the last strip).
#[test]
fn rows_read_back_are_the_bytes_given() {
    for kind in KINDS {
        let (n, k) = (21, 40);
        let c = case(kind, n, k, 3);
        let row = k * kind.size();
        for r in 0..n {
            let mut got = Vec::new();
            c.m.row_gguf(r, &mut got);
            assert_eq!(got, c.raw[r * row..(r + 1) * row], "{kind:?} row {r}");
        }
        assert_eq!(c.m.bytes(), 32 * k * kind.size());
    }
}

#[test]
fn bad_shapes_are_refused() {
    let raw = vec![0u8; 64];
    assert_eq!(
        FloatMatrix::new(FloatKind::F16, &raw, 4, 4).unwrap_err(),
        FloatPackError::Bytes {
            kind: FloatKind::F16,
            n: 4,
            k: 4,
            got: 64,
            want: 32
        }
    );
    assert!(matches!(
        FloatMatrix::new(FloatKind::F32, &[], 0, 4),
        Err(FloatPackError::Empty { .. })
    ));
}

/// Large enough that the pool's threads take several panels, and a prefill's tiles widen.
#[test]
fn many_panels_across_threads_agree_with_one_row_at_a_time() {
    let (n, k, t) = (300, 64, 12);
    let c = case(FloatKind::F16, n, k, 9);
    let x = rand_vec(t * k, 4);
    let all = run(&c, Isa::detect(), &x, t);
    let rows: Vec<f32> = (0..t)
        .flat_map(|i| run(&c, Isa::Portable, &x[i * k..(i + 1) * k], 1))
        .collect();
    assert_eq!(all, rows);
}
