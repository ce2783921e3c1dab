//! Activations quantized once per row for the integer kernels.
//!
//! The forms ggml quantizes activations to, value for value, so our integer
//! dot products are the ones llama.cpp computes on the same file: per 32
//! values with an f16 scale (`Q8_0`, for Q4_0, Q5_0 and Q8_0 weights; `Q8_1`,
//! which adds the f16 `d·Σq`, for Q4_1 and Q5_1), and per 256 values with an f32 scale and
//! sums of each sub-block (`Q8_K`, for the K-quants, whose min terms need
//! `Σ a` per sub-block). Quantizing is scalar and the same code on every SIMD
//! path, so every path sees the same integers.

use std::ops::Range;

use half::f16;

use super::format::QuantKind;
use crate::ops::par::{for_ranges, SharedMut};

/// `t` rows of `k` activations as int8 with their scales.
#[derive(Debug, Default)]
pub struct QuantActs {
    pub(super) t: usize,
    pub(super) k: usize,
    /// `t × k` quants.
    pub(super) q: Vec<i8>,
    /// The scale of each block: `t × k/32` (32-value form) or `t × k/256`.
    pub(super) d: Vec<f32>,
    /// 32-value form: each block's `(d · Σ q, Σ q)`, `t × k/32`. The first is the min terms'
    /// (for Q4_1/Q5_1, Q8_1's f16 `s`); the second the VNNI kernels' (signed weights are
    /// multiplied as `w + 128`, then `128 · Σ q` taken off).
    pub(super) sums: Vec<(f32, i32)>,
    /// 256-value form: sums of sub-blocks in pairs, `(s₀ as u16) | (s₁ as u16) << 16`,
    /// `t × k/256 × subs/2`.
    pub(super) sum_pairs: Vec<i32>,
}

/// ggml's `quantize_row_q8_0` / `q8_1` for one block: the quants, and the
/// scale before its rounding to f16.
fn quantize_q8_0(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (v * id).round().clamp(-127.0, 127.0) as i8;
    }
    d
}

/// `x` as ggml's matmul reads it against a weight of `kind`, for a product on the host in
/// f32 (a reranker's head, `model::pooling::Affine`): each block quantized as the kernels
/// quantize the activations of that kind and multiplied back by its scale. The 32-value
/// forms (Q8_0, Q4_0/1, Q5_0/1 and the table kinds): [`quantize_q8_0`], the scale rounded to
/// f16; the K-quants: [`quantize_q8_k`] per 256 values, the scale in f32 (ggml's `Q8_K`).
/// A last block shorter than the form's is quantized alone.
pub fn round_acts(kind: QuantKind, x: &[f32]) -> Vec<f32> {
    let mut q = [0i8; 256];
    let mut out = Vec::with_capacity(x.len());
    let block = if kind.is_super() { 256 } else { 32 };
    for xb in x.chunks(block) {
        let q = &mut q[..xb.len()];
        let d = match kind.is_super() {
            true => quantize_q8_k(xb, q),
            false => f16::from_f32(quantize_q8_0(xb, q)).to_f32(),
        };
        out.extend(q.iter().map(|&q| f32::from(q) * d));
    }
    out
}

/// ggml's `quantize_row_q8_K` for one 256-value block: the scale `1/iscale`
/// with `iscale = −127/max` (`max` the value of largest magnitude, so the
/// scale may be negative), quants rounded half to even and capped at 127.
fn quantize_q8_k(x: &[f32], q: &mut [i8]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        q.fill(0);
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (iscale * v).round_ties_even().min(127.0) as i8;
    }
    1.0 / iscale
}

/// The 256-value form of the blocks of `x`: quants, scales and sub-block sums in pairs.
fn quantize_super(kind: QuantKind, x: &[f32], q: &mut [i8], d: &mut [f32], sum_pairs: &mut [i32]) {
    let (block, sub, pairs) = (kind.block_elems(), kind.sub_elems(), kind.subs() / 2);
    for ((xb, qb), (d, sp)) in x
        .chunks_exact(block)
        .zip(q.chunks_exact_mut(block))
        .zip(d.iter_mut().zip(sum_pairs.chunks_exact_mut(pairs)))
    {
        *d = quantize_q8_k(xb, qb);
        for (p, s) in sp.iter_mut().enumerate() {
            let sum = |j: usize| -> i32 { qb[j * sub..(j + 1) * sub].iter().map(|&v| v as i32).sum() };
            let (s0, s1) = (sum(2 * p), sum(2 * p + 1));
            *s = ((s0 as u16 as u32) | ((s1 as u16 as u32) << 16)) as i32;
        }
    }
}

/// The 32-value form of the blocks of `x`: quants, f16 scales, `d · Σq` (Q8_1's `s`) and `Σq`.
fn quantize_plain(kind: QuantKind, x: &[f32], q: &mut [i8], d: &mut [f32], sums: &mut [(f32, i32)]) {
    let block = kind.block_elems();
    for ((xb, qb), (d, (ds, qs))) in x
        .chunks_exact(block)
        .zip(q.chunks_exact_mut(block))
        .zip(d.iter_mut().zip(sums.iter_mut()))
    {
        let unrounded = quantize_q8_0(xb, qb);
        *d = to_f16(unrounded);
        let s: i32 = qb.iter().map(|&v| v as i32).sum();
        *qs = s;
        *ds = if matches!(kind, QuantKind::Q4_1 | QuantKind::Q5_1) {
            // Q8_1's `s`: rounded to f16 from the unrounded scale, as ggml stores it.
            to_f16(unrounded * s as f32)
        } else {
            *d * s as f32
        };
    }
}

/// Runs `f` over the blocks `0..d.len()` (each with `block` quants in `q`, its scale in `d`
/// and `per` values in `extra`): at once for a few blocks, else in ranges across the pool.
fn by_blocks<E: Send>(
    block: usize,
    per: usize,
    q: &mut [i8],
    d: &mut [f32],
    extra: &mut [E],
    f: impl Fn(Range<usize>, &mut [i8], &mut [f32], &mut [E]) + Sync,
) {
    // Blocks per unit of work on the pool, and the fewest values worth splitting.
    const UNIT: usize = 64;
    const PARALLEL_FROM: usize = 1 << 15;
    let n = d.len();
    if q.len() < PARALLEL_FROM {
        f(0..n, q, d, extra);
        return;
    }
    let (q, d, extra) = (SharedMut::new(q), SharedMut::new(d), SharedMut::new(extra));
    for_ranges(n.div_ceil(UNIT), |units| {
        let b = units.start * UNIT..(units.end * UNIT).min(n);
        // SAFETY: `for_ranges` hands out disjoint ranges, and a block's parts are its own.
        let parts = unsafe {
            (
                q.part(b.start * block, b.len() * block),
                d.part(b.start, b.len()),
                extra.part(b.start * per, b.len() * per),
            )
        };
        f(b, parts.0, parts.1, parts.2)
    });
}

fn to_f16(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

impl QuantActs {
    /// Quantizes `x` (`t × k`, row-major) in the form `kind`'s kernel reads,
    /// reusing this buffer's memory. Many rows (a prompt chunk) are split
    /// over the thread pool by blocks; each block's numbers are its own, so
    /// the result is the same however it is split.
    pub fn quantize(&mut self, kind: QuantKind, x: &[f32], t: usize, k: usize) {
        debug_assert_eq!(x.len(), t * k);
        self.t = t;
        self.k = k;
        self.q.resize(t * k, 0);
        let block = kind.block_elems();
        let n = t * (k / block);
        self.d.resize(n, 0.0);
        if kind.is_super() {
            self.sums.clear();
            let pairs = kind.subs() / 2;
            self.sum_pairs.resize(n * pairs, 0);
            by_blocks(
                block,
                pairs,
                &mut self.q,
                &mut self.d,
                &mut self.sum_pairs,
                |b, q, d, sp| quantize_super(kind, &x[b.start * block..b.end * block], q, d, sp),
            );
        } else {
            self.sum_pairs.clear();
            self.sums.resize(n, (0.0, 0));
            by_blocks(block, 1, &mut self.q, &mut self.d, &mut self.sums, |b, q, d, s| {
                quantize_plain(kind, &x[b.start * block..b.end * block], q, d, s)
            });
        }
    }

    /// Row `i`'s quants.
    pub(super) fn row_q(&self, i: usize) -> &[i8] {
        &self.q[i * self.k..(i + 1) * self.k]
    }
}
