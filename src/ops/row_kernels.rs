//! The arithmetic of one attention row on the CPU: scores of a query head
//! against a run of K rows, and the probability-weighted sum of a run of V
//! rows, each in an AVX2+FMA form and a portable form that give the same bits,
//! for K/V stored in any [`KvDtype`]: a stored row is widened to f32 exactly
//! (F16C for f16, a shift for bf16, `q · d` for q8_0) in registers as it is
//! read, then the same f32 arithmetic runs, so every type gets the same order
//! of operations on every path.
//!
//! Invariant: a score depends only on the query and its K row, and an output
//! element only on the probabilities and V elements in position order — never
//! on how many rows a call covers or where a run starts. So
//! [`super::paged`]'s "a token's numbers do not depend on chunking, batching
//! or the cache" holds for any block size and prompt split.
//!
//! - A score is eight lanes of fused multiply-adds over the head dimension
//!   (lane `l` takes elements `l, l+8, …`), folded
//!   `((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7))`, plus the elements past the last
//!   multiple of 8 (a fused chain from 0), times the scale. The AVX2 form
//!   scores eight K rows at once and folds their eight accumulators together
//!   with horizontal adds, which is that same tree for every row.
//! - An output element is a fused chain `o = p_j · v_j + o` from 0 over the
//!   positions in order. The AVX2 form keeps up to 64 outputs in registers
//!   across a run of rows.
//!
//! Counterpart: the inner loops of vLLM's CPU attention backend
//! (`cpu_attn`'s `reduceQKBlockKernel` / `reduceValueBlockKernel`).

use super::kv_dtype::KvDtype;

/// How a stored row is read: the type, and (AVX2) eight values widened to f32.
pub(super) trait Codec {
    const DTYPE: KvDtype;
    /// Values `8c .. 8c + 8` of the row at `row`, as f32.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available, and the row holds those values.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(row: *const u8, c: usize) -> std::arch::x86_64::__m256;
}

pub(super) struct F32;
pub(super) struct F16;
pub(super) struct Bf16;
pub(super) struct Q8_0;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

impl Codec for F32 {
    const DTYPE: KvDtype = KvDtype::F32;
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(row: *const u8, c: usize) -> __m256 {
        _mm256_loadu_ps(row.add(32 * c).cast())
    }
}

impl Codec for F16 {
    const DTYPE: KvDtype = KvDtype::F16;
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(row: *const u8, c: usize) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(row.add(16 * c).cast()))
    }
}

impl Codec for Bf16 {
    const DTYPE: KvDtype = KvDtype::Bf16;
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(row: *const u8, c: usize) -> __m256 {
        let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(row.add(16 * c).cast()));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
    }
}

impl Codec for Q8_0 {
    const DTYPE: KvDtype = KvDtype::Q8_0;
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(row: *const u8, c: usize) -> __m256 {
        use super::kv_dtype::{Q8_0_GROUP, Q8_0_GROUP_BYTES};
        let g = row.add(8 * c / Q8_0_GROUP * Q8_0_GROUP_BYTES);
        let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(u16::from_le_bytes([
            *g,
            *g.add(1),
        ])))));
        let q = _mm_loadl_epi64(g.add(2 + 8 * c % Q8_0_GROUP).cast());
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(d))
    }
}

/// Where a run of K (or V) rows of one head lies in the pool (bytes): row `p` at
/// `pool[bases[p / block] + (p % block) · stride ..]`, `n` rows in all. (The
/// AVX2 form scores eight rows of one block at a time and a block's last
/// `block % 8` rows one by one: the same bits either way.)
#[derive(Clone, Copy)]
pub(super) struct Rows<'a> {
    pub bases: &'a [usize],
    pub block: usize,
    pub stride: usize,
    pub n: usize,
}

impl Rows<'_> {
    /// Panics unless every row of `d` bytes lies inside a pool of `len`.
    fn check(&self, len: usize, d: usize) {
        assert!(
            self.block > 0 && self.n <= self.bases.len() * self.block,
            "{} K/V rows in {} blocks of {}",
            self.n,
            self.bases.len(),
            self.block
        );
        for (i, base) in self.bases.iter().enumerate() {
            let m = self.n.saturating_sub(i * self.block).min(self.block);
            if m > 0 {
                let end = base + (m - 1) * self.stride + d;
                assert!(end <= len, "K/V rows end at {end}, past the pool's {len}");
            }
        }
    }

    /// The `(first row, rows, base)` of each block holding some of the rows.
    fn segments(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let (n, bs) = (self.n, self.block);
        self.bases
            .iter()
            .enumerate()
            .take(n.div_ceil(bs))
            .map(move |(i, &b)| (i * bs, (n - i * bs).min(bs), b))
    }
}

/// `scores[p] = (q · K_p) · scale` for the K rows `k`, stored as `C`.
///
/// Panics if a row lies outside `pool` or `scores` is shorter than `k.n`.
#[inline(always)]
pub(super) fn scores<const SIMD: bool, C: Codec>(q: &[f32], pool: &[u8], k: Rows<'_>, scale: f32, scores: &mut [f32]) {
    let rb = C::DTYPE.row_bytes(q.len());
    k.check(pool.len(), rb);
    assert!(scores.len() >= k.n, "{} scores for {} rows", scores.len(), k.n);
    #[cfg(target_arch = "x86_64")]
    if SIMD {
        // SAFETY: `SIMD` is set only by callers that checked AVX2, FMA and F16C
        // (`simd()`); the rows and `scores` were bounds-checked above.
        unsafe { avx2::scores::<C>(q, pool, k, scale, scores) };
        return;
    }
    for (first, m, base) in k.segments() {
        for (j, s) in scores[first..first + m].iter_mut().enumerate() {
            *s = dot_portable::<C>(q, &pool[base + j * k.stride..][..rb]) * scale;
        }
    }
}

/// `out[e] = p_j · V_j[e] + out[e]` for the V rows `v` stored as `C`, `j` in order.
///
/// Panics if a row lies outside `pool` or `probs` is shorter than `v.n`.
#[inline(always)]
pub(super) fn weighted_sum<const SIMD: bool, C: Codec>(probs: &[f32], pool: &[u8], v: Rows<'_>, out: &mut [f32]) {
    let rb = C::DTYPE.row_bytes(out.len());
    v.check(pool.len(), rb);
    assert!(probs.len() >= v.n, "{} probabilities for {} rows", probs.len(), v.n);
    #[cfg(target_arch = "x86_64")]
    if SIMD {
        // SAFETY: as in `scores`.
        unsafe { avx2::weighted_sum::<C>(probs, pool, v, out) };
        return;
    }
    for (first, m, base) in v.segments() {
        for (j, &p) in probs[first..first + m].iter().enumerate() {
            let row = &pool[base + j * v.stride..][..rb];
            for (i, o) in out.iter_mut().enumerate() {
                *o = p.mul_add(C::DTYPE.get(row, i), *o);
            }
        }
    }
}

/// Most queries one call of [`scores_n`] or [`weighted_sum_n`] serves (a
/// GQA group, or prompt rows with the same positions): each K or V vector read
/// from the pool feeds this many queries' fused multiply-adds.
pub(super) const MAX_QUERIES: usize = 3;

/// [`scores`] for up to [`MAX_QUERIES`] queries over the same K rows: query
/// `i`'s scores go to `out[i · stride ..][.. k.n]`, the same bits as one
/// [`scores`] call per query.
///
/// Panics if `qs` is empty or longer than [`MAX_QUERIES`], the queries differ
/// in length, a row lies outside `pool`, or `out` is too short.
#[inline(always)]
pub(super) fn scores_n<const SIMD: bool, C: Codec>(
    qs: &[&[f32]],
    pool: &[u8],
    k: Rows<'_>,
    scale: f32,
    out: &mut [f32],
    stride: usize,
) {
    let nq = qs.len();
    assert!((1..=MAX_QUERIES).contains(&nq), "{nq} queries in one call");
    let d = qs[0].len();
    assert!(qs.iter().all(|q| q.len() == d), "queries of different lengths");
    assert!(
        k.n == 0 || out.len() >= (nq - 1) * stride + k.n,
        "{} scores for {nq} queries of {} rows at stride {stride}",
        out.len(),
        k.n
    );
    assert!(nq == 1 || stride >= k.n, "stride {stride} under {} rows", k.n);
    #[cfg(target_arch = "x86_64")]
    if SIMD && nq > 1 {
        k.check(pool.len(), C::DTYPE.row_bytes(d));
        // SAFETY: as in `scores`; rows and `out` were bounds-checked above.
        unsafe {
            match nq {
                2 => avx2::scores_multi::<C, 2>(qs, pool, k, scale, out, stride),
                _ => avx2::scores_multi::<C, 3>(qs, pool, k, scale, out, stride),
            }
        }
        return;
    }
    for (i, q) in qs.iter().enumerate() {
        scores::<SIMD, C>(q, pool, k, scale, &mut out[i * stride..]);
    }
}

/// [`weighted_sum`] for up to [`MAX_QUERIES`] queries over the same V rows:
/// query `i`'s probabilities are `probs[i · stride ..]`, its outputs
/// `out[i · d .. (i + 1) · d]`; the same bits as one call per query.
///
/// Panics as [`weighted_sum`] does, or if `out` is not `qs · d` long.
#[inline(always)]
pub(super) fn weighted_sum_n<const SIMD: bool, C: Codec>(
    nq: usize,
    probs: &[f32],
    stride: usize,
    pool: &[u8],
    v: Rows<'_>,
    out: &mut [f32],
) {
    assert!((1..=MAX_QUERIES).contains(&nq), "{nq} queries in one call");
    assert!(out.len().is_multiple_of(nq), "{} outputs for {nq} queries", out.len());
    let d = out.len() / nq;
    assert!(
        v.n == 0 || probs.len() >= (nq - 1) * stride + v.n,
        "{} probabilities for {nq} queries of {} rows at stride {stride}",
        probs.len(),
        v.n
    );
    #[cfg(target_arch = "x86_64")]
    if SIMD && nq > 1 {
        v.check(pool.len(), C::DTYPE.row_bytes(d));
        // SAFETY: as in `weighted_sum`; rows and `probs` were bounds-checked above.
        unsafe {
            match nq {
                2 => avx2::weighted_sum_multi::<C, 2>(probs, stride, pool, v, out),
                _ => avx2::weighted_sum_multi::<C, 3>(probs, stride, pool, v, out),
            }
        }
        return;
    }
    for (i, o) in out.chunks_exact_mut(d).enumerate() {
        weighted_sum::<SIMD, C>(&probs[i * stride..], pool, v, o);
    }
}

/// The rows `rows` (stored as `C`, `d` values each) widened to f32, row `p`
/// at `out[p · d ..]`: the exact values every kernel reads from the pool, so
/// kernels over `out` as [`F32`] rows give the bits they give over the pool.
/// A prefill tile widens each pass of K/V once for all its (row, head) runs,
/// which otherwise each widened every vector again (F16C's convert costs
/// about as much as the multiply-adds it feeds).
///
/// Panics if a row lies outside `pool`.
#[inline(always)]
pub(super) fn widen<const SIMD: bool, C: Codec>(pool: &[u8], rows: Rows<'_>, d: usize, out: &mut Vec<f32>) {
    rows.check(pool.len(), C::DTYPE.row_bytes(d));
    // Every value is overwritten below: grow without clearing what is there.
    if out.len() < rows.n * d {
        out.resize(rows.n * d, 0.0);
    }
    let out = &mut out[..rows.n * d];
    #[cfg(target_arch = "x86_64")]
    if SIMD {
        // SAFETY: as in `scores`; the rows were bounds-checked above and `out` holds `n · d`.
        unsafe { avx2::widen::<C>(pool, rows, d, out) };
        return;
    }
    let rb = C::DTYPE.row_bytes(d);
    for (first, m, base) in rows.segments() {
        for j in 0..m {
            let row = &pool[base + j * rows.stride..][..rb];
            C::DTYPE.decode(row, &mut out[(first + j) * d..][..d]);
        }
    }
}

/// Whether the AVX2+FMA (and F16C) forms run here.
#[inline(always)]
pub(super) fn simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        cfg!(all(
            target_feature = "avx2",
            target_feature = "fma",
            target_feature = "f16c"
        )) || (std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// One score's dot product in plain Rust (see the module docs for its order), over a K row
/// stored as `C`.
pub(super) fn dot_portable<C: Codec>(q: &[f32], k: &[u8]) -> f32 {
    let d = q.len();
    let mut acc = [0f32; 8];
    for c in 0..d / 8 {
        for (l, acc) in acc.iter_mut().enumerate() {
            *acc = q[8 * c + l].mul_add(C::DTYPE.get(k, 8 * c + l), *acc);
        }
    }
    fold8(&acc) + tail::<C>(q, k, d)
}

/// The fixed fold of eight lanes.
#[inline(always)]
fn fold8(a: &[f32; 8]) -> f32 {
    ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

/// The elements past the last multiple of 8, a fused chain from 0.
#[inline(always)]
fn tail<C: Codec>(q: &[f32], k: &[u8], d: usize) -> f32 {
    (d / 8 * 8..d).fold(0f32, |t, i| q[i].mul_add(C::DTYPE.get(k, i), t))
}

#[cfg(target_arch = "x86_64")]
// Index loops over register arrays keep each accumulator in its own register.
#[allow(clippy::needless_range_loop)]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Codec, Rows};

    /// See [`super::scores`]; rows and `scores` are bounds-checked by the caller.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn scores<C: Codec>(q: &[f32], pool: &[u8], k: Rows<'_>, scale: f32, scores: &mut [f32]) {
        let rb = C::DTYPE.row_bytes(q.len());
        let d = q.len();
        let pq = q.as_ptr();
        let vscale = _mm256_set1_ps(scale);
        for (first, m, base) in k.segments() {
            let (pk, stride) = (pool.as_ptr().add(base), k.stride);
            let mut j = 0;
            while j + 8 <= m {
                let mut acc = [_mm256_setzero_ps(); 8];
                for c in 0..d / 8 {
                    let qc = _mm256_loadu_ps(pq.add(8 * c));
                    for (r, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm256_fmadd_ps(qc, C::load8(pk.add((j + r) * stride), c), *acc);
                    }
                }
                // Lane r of `s`: row j + r's ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
                let a01 = _mm256_hadd_ps(acc[0], acc[1]);
                let a23 = _mm256_hadd_ps(acc[2], acc[3]);
                let a45 = _mm256_hadd_ps(acc[4], acc[5]);
                let a67 = _mm256_hadd_ps(acc[6], acc[7]);
                let b0 = _mm256_hadd_ps(a01, a23); // rows 0-3: (01+23) | (45+67)
                let b1 = _mm256_hadd_ps(a45, a67); // rows 4-7
                let lo = _mm256_permute2f128_ps::<0x20>(b0, b1);
                let hi = _mm256_permute2f128_ps::<0x31>(b0, b1);
                let tail: [f32; 8] = if !d.is_multiple_of(8) {
                    std::array::from_fn(|r| {
                        super::tail::<C>(q, std::slice::from_raw_parts(pk.add((j + r) * stride), rb), d)
                    })
                } else {
                    [0.0; 8]
                };
                let s = _mm256_add_ps(_mm256_add_ps(lo, hi), _mm256_loadu_ps(tail.as_ptr()));
                _mm256_storeu_ps(scores.as_mut_ptr().add(first + j), _mm256_mul_ps(s, vscale));
                j += 8;
            }
            for j in j..m {
                scores[first + j] = dot1::<C>(q, std::slice::from_raw_parts(pk.add(j * stride), rb)) * scale;
            }
        }
    }

    /// One row's score, the same bits as a lane of the eight-row form.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot1<C: Codec>(q: &[f32], k: &[u8]) -> f32 {
        let d = q.len();
        let (pq, pk) = (q.as_ptr(), k.as_ptr());
        let mut acc = _mm256_setzero_ps();
        for c in 0..d / 8 {
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(pq.add(8 * c)), C::load8(pk, c), acc);
        }
        let h = _mm256_hadd_ps(acc, acc); // 01, 23, 01, 23 | 45, 67, 45, 67
        let h = _mm256_hadd_ps(h, h); // (01+23) ... | (45+67) ...
        let s = _mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
        _mm_cvtss_f32(s) + super::tail::<C>(q, k, d)
    }

    /// See [`super::scores_n`]: `NQ` queries against four K rows at a time,
    /// each K vector read once for all of them; each row's lanes folded by
    /// the same horizontal-add tree as [`scores`], so the bits are the same.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn scores_multi<C: Codec, const NQ: usize>(
        qs: &[&[f32]],
        pool: &[u8],
        k: Rows<'_>,
        scale: f32,
        out: &mut [f32],
        stride: usize,
    ) {
        let d = qs[0].len();
        let rb = C::DTYPE.row_bytes(d);
        let pq: [*const f32; NQ] = std::array::from_fn(|i| qs[i].as_ptr());
        let po = out.as_mut_ptr();
        let vscale = _mm_set1_ps(scale);
        for (first, m, base) in k.segments() {
            let (pk, kstride) = (pool.as_ptr().add(base), k.stride);
            let mut j = 0;
            while j + 4 <= m {
                let mut acc = [[_mm256_setzero_ps(); 4]; NQ];
                for c in 0..d / 8 {
                    for r in 0..4 {
                        let kv = C::load8(pk.add((j + r) * kstride), c);
                        for i in 0..NQ {
                            acc[i][r] = _mm256_fmadd_ps(_mm256_loadu_ps(pq[i].add(8 * c)), kv, acc[i][r]);
                        }
                    }
                }
                for i in 0..NQ {
                    // Lane r: row j + r's (l0+l1)+(l2+l3) (low half) and (l4+l5)+(l6+l7) (high).
                    let a01 = _mm256_hadd_ps(acc[i][0], acc[i][1]);
                    let a23 = _mm256_hadd_ps(acc[i][2], acc[i][3]);
                    let b = _mm256_hadd_ps(a01, a23);
                    let mut s = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps::<1>(b));
                    if !d.is_multiple_of(8) {
                        let tail: [f32; 4] = std::array::from_fn(|r| {
                            super::tail::<C>(qs[i], std::slice::from_raw_parts(pk.add((j + r) * kstride), rb), d)
                        });
                        s = _mm_add_ps(s, _mm_loadu_ps(tail.as_ptr()));
                    }
                    _mm_storeu_ps(po.add(i * stride + first + j), _mm_mul_ps(s, vscale));
                }
                j += 4;
            }
            for j in j..m {
                let row = std::slice::from_raw_parts(pk.add(j * kstride), rb);
                for (i, q) in qs.iter().enumerate().take(NQ) {
                    *po.add(i * stride + first + j) = dot1::<C>(q, row) * scale;
                }
            }
        }
    }

    /// See [`super::weighted_sum_n`]: `NQ` queries' outputs in registers, 32
    /// at a time, each V vector read once for all of them.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn weighted_sum_multi<C: Codec, const NQ: usize>(
        probs: &[f32],
        stride: usize,
        pool: &[u8],
        v: Rows<'_>,
        out: &mut [f32],
    ) {
        let d = out.len() / NQ;
        let mut e = 0;
        while e + 32 <= d {
            strip_multi::<4, NQ, C>(probs, stride, pool, v, e, out, d);
            e += 32;
        }
        while e + 8 <= d {
            strip_multi::<1, NQ, C>(probs, stride, pool, v, e, out, d);
            e += 8;
        }
        if e < d {
            let rb = C::DTYPE.row_bytes(d);
            for (i, o) in out.chunks_exact_mut(d).enumerate() {
                for (first, m, base) in v.segments() {
                    for (j, &p) in probs[i * stride + first..][..m].iter().enumerate() {
                        let row = pool.get_unchecked(base + j * v.stride..base + j * v.stride + rb);
                        for (x, o) in o.iter_mut().enumerate().skip(e) {
                            *o = p.mul_add(C::DTYPE.get(row, x), *o);
                        }
                    }
                }
            }
        }
    }

    /// Outputs `e .. e + 8·W` of each of `NQ` queries held in registers over all the rows.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn strip_multi<const W: usize, const NQ: usize, C: Codec>(
        probs: &[f32],
        stride: usize,
        pool: &[u8],
        v: Rows<'_>,
        e: usize,
        out: &mut [f32],
        d: usize,
    ) {
        let po = out.as_mut_ptr();
        let pp = probs.as_ptr();
        let mut o: [[__m256; W]; NQ] =
            std::array::from_fn(|i| std::array::from_fn(|c| _mm256_loadu_ps(po.add(i * d + e + 8 * c))));
        for (first, m, base) in v.segments() {
            let pv = pool.as_ptr().add(base);
            for j in 0..m {
                let row = pv.add(j * v.stride);
                for c in 0..W {
                    let vv = C::load8(row, e / 8 + c);
                    for i in 0..NQ {
                        let w = _mm256_broadcast_ss(&*pp.add(i * stride + first + j));
                        o[i][c] = _mm256_fmadd_ps(w, vv, o[i][c]);
                    }
                }
            }
        }
        for i in 0..NQ {
            for c in 0..W {
                _mm256_storeu_ps(po.add(i * d + e + 8 * c), o[i][c]);
            }
        }
    }

    /// See [`super::widen`]; rows and `out` are bounds-checked by the caller.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn widen<C: Codec>(pool: &[u8], rows: Rows<'_>, d: usize, out: &mut [f32]) {
        let rb = C::DTYPE.row_bytes(d);
        let po = out.as_mut_ptr();
        for (first, m, base) in rows.segments() {
            for j in 0..m {
                let row = pool.as_ptr().add(base + j * rows.stride);
                let o = po.add((first + j) * d);
                for c in 0..d / 8 {
                    _mm256_storeu_ps(o.add(8 * c), C::load8(row, c));
                }
                for i in d / 8 * 8..d {
                    *o.add(i) = C::DTYPE.get(std::slice::from_raw_parts(row, rb), i);
                }
            }
        }
    }

    /// See [`super::weighted_sum`]; rows and `probs` are bounds-checked by the caller.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn weighted_sum<C: Codec>(probs: &[f32], pool: &[u8], v: Rows<'_>, out: &mut [f32]) {
        let d = out.len();
        let rb = C::DTYPE.row_bytes(d);
        let mut e = 0;
        while e + 64 <= d {
            strip::<8, C>(probs, pool, v, e, out.as_mut_ptr().add(e));
            e += 64;
        }
        while e + 8 <= d {
            strip::<1, C>(probs, pool, v, e, out.as_mut_ptr().add(e));
            e += 8;
        }
        if e < d {
            for (first, m, base) in v.segments() {
                for (j, &p) in probs[first..first + m].iter().enumerate() {
                    let row = pool.get_unchecked(base + j * v.stride..base + j * v.stride + rb);
                    for (i, o) in out.iter_mut().enumerate().skip(e) {
                        *o = p.mul_add(C::DTYPE.get(row, i), *o);
                    }
                }
            }
        }
    }

    /// Outputs `e .. e + 8·N` held in registers over all the rows.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn strip<const N: usize, C: Codec>(probs: &[f32], pool: &[u8], v: Rows<'_>, e: usize, out: *mut f32) {
        let mut o: [__m256; N] = std::array::from_fn(|c| _mm256_loadu_ps(out.add(8 * c)));
        for (first, m, base) in v.segments() {
            let pv = pool.as_ptr().add(base);
            for (j, &p) in probs[first..first + m].iter().enumerate() {
                let w = _mm256_set1_ps(p);
                let row = pv.add(j * v.stride);
                for (c, o) in o.iter_mut().enumerate() {
                    *o = _mm256_fmadd_ps(w, C::load8(row, e / 8 + c), *o);
                }
            }
        }
        for (c, o) in o.iter().enumerate() {
            _mm256_storeu_ps(out.add(8 * c), *o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::rand_vec;

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// `f::<C>(d)` for each stored type `C` and each head size in `ds` it allows.
    macro_rules! every_type {
        ($f:ident, $ds:expr) => {
            for dtype in KvDtype::ALL {
                for d in $ds {
                    if dtype.check_head_dim(d).is_ok() {
                        match dtype {
                            KvDtype::F32 => $f::<F32>(d),
                            KvDtype::F16 => $f::<F16>(d),
                            KvDtype::Bf16 => $f::<Bf16>(d),
                            KvDtype::Q8_0 => $f::<Q8_0>(d),
                        }
                    }
                }
            }
        };
    }

    /// A pool holding the rows of `data` (`d` values each) stored as `C`, in
    /// blocks of `block` rows `stride` bytes apart, block `i` at slot
    /// `blocks − 1 − i` (reversed) after `lead` bytes; `tail` bytes past the
    /// blocks (counting the lead); every byte no row covers is 0x5a. Returns
    /// the pool and each block's base.
    fn reversed_pool<C: Codec>(
        data: &[f32],
        d: usize,
        block: usize,
        stride: usize,
        lead: usize,
        tail: usize,
    ) -> (Vec<u8>, Vec<usize>) {
        let (rb, n) = (C::DTYPE.row_bytes(d), data.len() / d);
        let blocks = n.div_ceil(block);
        let bases: Vec<usize> = (0..blocks).map(|i| lead + (blocks - 1 - i) * block * stride).collect();
        let mut pool = vec![0x5au8; blocks * block * stride + tail];
        for p in 0..n {
            let at = bases[p / block] + (p % block) * stride;
            C::DTYPE.encode(&data[p * d..][..d], &mut pool[at..at + rb]);
        }
        (pool, bases)
    }

    /// Every path, block size and split of the rows gives the same bits,
    /// and the scores are dot products, for every stored type.
    #[test]
    fn paths_and_splits_agree_bit_for_bit() {
        every_type!(check, [8usize, 20, 64, 80, 128, 136]);
    }

    fn check<C: Codec>(d: usize) {
        let dtype = C::DTYPE;
        let rb = dtype.row_bytes(d);
        let stride = rb + 24;
        let n = 37;
        let data = rand_vec(n * d, d as u64);
        let q = rand_vec(d, 7);
        let probs = rand_vec(n, 9);
        let mut paths = vec![false];
        if simd() {
            paths.push(true);
        }
        let mut seen: Option<(Vec<u32>, Vec<u32>)> = None;
        for simd in paths {
            for (block, per_call) in [(8usize, 1usize), (8, 5), (16, 1), (16, 3), (48, 1), (4, 2), (12, 1)] {
                let (pool, bases) = reversed_pool::<C>(&data, d, block, stride, 3, 5);
                let (mut s, mut o) = (vec![0f32; n], vec![0f32; d]);
                for (c, bases) in bases.chunks(per_call).enumerate() {
                    let first = c * per_call * block;
                    let rows = Rows {
                        bases,
                        block,
                        stride,
                        n: (n - first).min(per_call * block),
                    };
                    if simd {
                        scores::<true, C>(&q, &pool, rows, 0.3, &mut s[first..]);
                        weighted_sum::<true, C>(&probs[first..], &pool, rows, &mut o);
                    } else {
                        scores::<false, C>(&q, &pool, rows, 0.3, &mut s[first..]);
                        weighted_sum::<false, C>(&probs[first..], &pool, rows, &mut o);
                    }
                }
                let row = |p: usize| {
                    let mut v = vec![0f32; d];
                    dtype.decode(&pool[bases[p / block] + (p % block) * stride..][..rb], &mut v);
                    v
                };
                let mut want_o = vec![0f64; d];
                for (p, s) in s.iter().enumerate() {
                    let r = row(p);
                    let exact: f64 = q.iter().zip(&r).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>() * 0.3;
                    assert!(
                        (*s as f64 - exact).abs() < 1e-5,
                        "{dtype} d {d} row {p}: {s} vs {exact}"
                    );
                    for (w, x) in want_o.iter_mut().zip(&r) {
                        *w += probs[p] as f64 * *x as f64;
                    }
                }
                for (o, w) in o.iter().zip(&want_o) {
                    assert!((*o as f64 - w).abs() < 1e-4, "{dtype} d {d}: {o} vs {w}");
                }
                let got = (bits(&s), bits(&o));
                match &seen {
                    None => seen = Some(got),
                    Some(first) => assert!(
                        *first == got,
                        "{dtype} d {d}, simd {simd}, block {block}, per call {per_call}"
                    ),
                }
            }
        }
    }

    /// Two or three queries in one call give each query the bits of its own
    /// call, on every path, type and head size (with rows in a partial block).
    #[test]
    fn several_queries_equal_one_at_a_time() {
        every_type!(multi, [8usize, 20, 64, 136]);
    }

    fn multi<C: Codec>(d: usize) {
        let dtype = C::DTYPE;
        let rb = dtype.row_bytes(d);
        let (block, n, stride) = (16usize, 37usize, 41usize);
        let (pool, bases) = reversed_pool::<C>(&rand_vec(n * d, 3 + d as u64), d, block, rb, 0, 0);
        let rows = Rows {
            bases: &bases,
            block,
            stride: rb,
            n,
        };
        let qs: Vec<Vec<f32>> = (0..MAX_QUERIES).map(|i| rand_vec(d, 20 + i as u64)).collect();
        let probs = rand_vec(MAX_QUERIES * stride, 5);
        let mut paths = vec![false];
        if simd() {
            paths.push(true);
        }
        for simd in paths {
            for nq in 1..=MAX_QUERIES {
                let q: Vec<&[f32]> = qs[..nq].iter().map(|q| q.as_slice()).collect();
                let mut s = vec![0f32; nq * stride];
                let mut o = rand_vec(nq * d, 11);
                let o0 = o.clone();
                if simd {
                    scores_n::<true, C>(&q, &pool, rows, 0.7, &mut s, stride);
                    weighted_sum_n::<true, C>(nq, &probs, stride, &pool, rows, &mut o);
                } else {
                    scores_n::<false, C>(&q, &pool, rows, 0.7, &mut s, stride);
                    weighted_sum_n::<false, C>(nq, &probs, stride, &pool, rows, &mut o);
                }
                for i in 0..nq {
                    let mut one = vec![0f32; n];
                    scores::<false, C>(q[i], &pool, rows, 0.7, &mut one);
                    assert_eq!(
                        bits(&s[i * stride..][..n]),
                        bits(&one),
                        "{dtype} d {d} nq {nq} query {i} scores"
                    );
                    let mut w = o0[i * d..(i + 1) * d].to_vec();
                    weighted_sum::<false, C>(&probs[i * stride..], &pool, rows, &mut w);
                    assert_eq!(
                        bits(&o[i * d..(i + 1) * d]),
                        bits(&w),
                        "{dtype} d {d} nq {nq} query {i} sums"
                    );
                }
            }
        }
    }

    /// Widened rows are the stored values, on every path, type and head
    /// size, for rows spread over blocks in any order.
    #[test]
    fn widened_rows_are_the_stored_values() {
        every_type!(widened, [8usize, 20, 64, 136]);
    }

    fn widened<C: Codec>(d: usize) {
        let dtype = C::DTYPE;
        let rb = dtype.row_bytes(d);
        let (block, n, stride) = (8usize, 21usize, rb + 6);
        let (pool, bases) = reversed_pool::<C>(&rand_vec(n * d, 40 + d as u64), d, block, stride, 1, 1);
        let rows = Rows {
            bases: &bases,
            block,
            stride,
            n,
        };
        let mut want = vec![0f32; n * d];
        for p in 0..n {
            let at = bases[p / block] + (p % block) * stride;
            dtype.decode(&pool[at..at + rb], &mut want[p * d..][..d]);
        }
        // A longer buffer than needed, holding old values: only the first n · d count.
        let mut got = vec![7f32; (n + 3) * d];
        widen::<false, C>(&pool, rows, d, &mut got);
        assert_eq!(bits(&got[..n * d]), bits(&want), "{dtype} d {d} portable");
        if simd() {
            let mut got = Vec::new();
            widen::<true, C>(&pool, rows, d, &mut got);
            assert_eq!(bits(&got[..n * d]), bits(&want), "{dtype} d {d} avx2");
        }
    }

    #[test]
    #[should_panic(expected = "past the pool")]
    fn rows_outside_the_pool_panic() {
        let pool = vec![0u8; 400];
        let mut s = vec![0f32; 4];
        let rows = Rows {
            bases: &[200],
            block: 8,
            stride: 80,
            n: 4,
        };
        scores::<false, F32>(&[0f32; 16], &pool, rows, 1.0, &mut s);
    }
}
