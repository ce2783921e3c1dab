//! The SIMD kernels' body, written once over a vector type ([`Vector`]) and compiled for
//! each instruction set inside its `#[target_feature]` entry point (`avx512`, `avx2`).
//!
//! A tile is `T` activation rows against `G` strips: `H` vectors of sums per row (a strip
//! is [`Vector::PER_STRIP`] vectors). For each column, the strips' values are loaded
//! (and widened), the row's activation value is broadcast, and every sum gets one fused
//! multiply-add: the column-by-column chain the portable kernel computes.

#![allow(clippy::needless_range_loop)]

use super::{Panel, Source, STRIP};

/// A SIMD register of f32 lanes and the operations the kernels need.
pub(super) trait Vector: Copy {
    /// Vectors in a strip's sixteen lanes.
    const PER_STRIP: usize;
    unsafe fn zero() -> Self;
    unsafe fn splat(v: f32) -> Self;
    /// `a · b + c`, fused.
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    unsafe fn store(self, p: *mut f32);
    unsafe fn f16(p: *const u16) -> Self;
    unsafe fn bf16(p: *const u16) -> Self;
    unsafe fn f32(p: *const f32) -> Self;
}

/// How a stored value becomes f32 lanes.
pub(super) trait Widen {
    type E;
    unsafe fn load<V: Vector>(p: *const Self::E) -> V;
}

pub(super) struct F16;
pub(super) struct Bf16;
pub(super) struct F32;

impl Widen for F16 {
    type E = u16;
    #[inline(always)]
    unsafe fn load<V: Vector>(p: *const u16) -> V {
        V::f16(p)
    }
}

impl Widen for Bf16 {
    type E = u16;
    #[inline(always)]
    unsafe fn load<V: Vector>(p: *const u16) -> V {
        V::bf16(p)
    }
}

impl Widen for F32 {
    type E = f32;
    #[inline(always)]
    unsafe fn load<V: Vector>(p: *const f32) -> V {
        V::f32(p)
    }
}

/// Rows `row .. row + T` against strips `s .. s + G` of the panel, read from `w` (those
/// strips, `k × 16` values each); `H` is `G · PER_STRIP`.
#[inline(always)]
unsafe fn tile<V: Vector, W: Widen, const T: usize, const G: usize, const H: usize>(
    p: &Panel<'_>,
    w: *const W::E,
    s: usize,
    row: usize,
) {
    let (k, per) = (p.m.k, V::PER_STRIP);
    let lanes = STRIP / per;
    let x = p.x.as_ptr().add(row * k);
    let mut acc = [[V::zero(); H]; T];
    for c in 0..k {
        let mut wv = [V::zero(); H];
        for h in 0..H {
            wv[h] = W::load::<V>(w.add(((h / per) * k + c) * STRIP + (h % per) * lanes));
        }
        for i in 0..T {
            let b = V::splat(*x.add(i * k + c));
            for h in 0..H {
                acc[i][h] = V::fma(b, wv[h], acc[i][h]);
            }
        }
    }
    let mut sums = [[[0f32; STRIP]; G]; T];
    for i in 0..T {
        for h in 0..H {
            acc[i][h].store(sums[i][h / per].as_mut_ptr().add((h % per) * lanes));
        }
    }
    p.store(row, s, &sums);
}

/// Every row against strips `s .. s + G`, in tiles of `MAX_T`, 4, 2 and 1 rows.
#[inline(always)]
pub(super) unsafe fn rows<V: Vector, W: Widen, const G: usize, const H: usize, const MAX_T: usize>(
    p: &Panel<'_>,
    w: *const W::E,
    s: usize,
) {
    let mut row = 0;
    while row < p.t {
        let left = p.t - row;
        if MAX_T > 4 && left >= MAX_T {
            tile::<V, W, MAX_T, G, H>(p, w, s, row);
            row += MAX_T;
        } else if MAX_T >= 4 && left >= 4 {
            tile::<V, W, 4, G, H>(p, w, s, row);
            row += 4;
        } else if left >= 2 {
            tile::<V, W, 2, G, H>(p, w, s, row);
            row += 2;
        } else {
            tile::<V, W, 1, G, H>(p, w, s, row);
            row += 1;
        }
    }
}

/// Strips `s .. s + G` as stored, widened as they are read, in tiles of up to `MAX_T` rows.
#[inline(always)]
pub(super) unsafe fn stored<V: Vector, const G: usize, const H: usize, const MAX_T: usize>(p: &Panel<'_>, s: usize) {
    match p.stored(s, G) {
        Source::F16(v) => rows::<V, F16, G, H, MAX_T>(p, v.as_ptr(), s),
        Source::Bf16(v) => rows::<V, Bf16, G, H, MAX_T>(p, v.as_ptr(), s),
        Source::F32(v) => rows::<V, F32, G, H, MAX_T>(p, v.as_ptr(), s),
    }
}
