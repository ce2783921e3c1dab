//! K/V in fixed-size blocks: writing new rows into blocks and attention that
//! reads them through each sequence's block table (CPU implementation).
//!
//! One pool is one flat `f32` buffer of blocks. A block holds `block_size`
//! tokens of every layer, K and V:
//!
//! ```text
//! block b: [layer 0: K rows, V rows][layer 1: K rows, V rows] ...
//!          each "rows" plane is [block_size, kv_heads, head_dim]
//! ```
//!
//! so one block is one contiguous range and moves between tiers in one copy.
//! Token `p` of a sequence lives in block `table[p / block_size]`, row
//! `p % block_size`.
//!
//! Attention reads K/V in place, block by block, without gathering the
//! history. Every query row, decoded or prefilled, runs the same per-row
//! arithmetic (`SeqLayer::decode_attention`), so a token's numbers do not
//! depend on how its prompt was chunked, batched or taken from the cache:
//! the engine's "same tokens alone as batched, with the cache as without"
//! holds bit for bit, not by luck of rounding. (An earlier version used
//! matmul attention for prompt chunks; its rounding depended on the chunk's
//! length, which our int8 matmul's activation rounding could then amplify.)
//! The decode rows of a batch of several sequences run in parallel, one
//! sequence per worker; a single decoding row spreads its K/V heads over the
//! threads; prompt rows spread rows × K/V heads; all on [`super::par`]'s
//! pool, the matmuls' own.
//!
//! Counterpart: vLLM's `reshape_and_cache` and `paged_attention_v1` kernels,
//! and its CPU attention backend.

use candle_core::Tensor;

use super::par::{self, SharedMut};
use super::{BatchLayout, KvStore, OpsError};

/// The geometry of a block pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedLayout {
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
}

impl PagedLayout {
    /// Floats of one token's K (or V) in one layer.
    pub fn row_elems(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Floats of one layer's K (or V) plane in one block.
    pub fn plane_elems(&self) -> usize {
        self.block_size * self.row_elems()
    }

    /// Floats of one whole block.
    pub fn block_elems(&self) -> usize {
        self.layers * 2 * self.plane_elems()
    }

    /// Bytes of one whole block.
    pub fn block_bytes(&self) -> u64 {
        (self.block_elems() * std::mem::size_of::<f32>()) as u64
    }

    /// Offset of the plane (`kv`: 0 = K, 1 = V) of `layer` in `block`.
    pub fn plane_offset(&self, block: u32, layer: usize, kv: usize) -> usize {
        block as usize * self.block_elems() + (layer * 2 + kv) * self.plane_elems()
    }
}

/// One sequence's view of one layer of a pool: where its tokens' rows are.
#[derive(Clone, Copy)]
pub struct SeqLayer<'a> {
    pub layout: &'a PagedLayout,
    /// The sequence's block table.
    pub table: &'a [u32],
    pub layer: usize,
}

impl SeqLayer<'_> {
    /// Offset in the pool of row `p` of the K (`kv` = 0) or V (1) plane.
    fn row_offset(&self, p: usize, kv: usize) -> usize {
        let l = self.layout;
        l.plane_offset(self.table[p / l.block_size], self.layer, kv) + (p % l.block_size) * l.row_elems()
    }

    /// Copies rows of `new` tokens (`src`: `[new, row_elems]`) into the pool
    /// at positions `start .. start + new`.
    pub fn write_rows(&self, pool: &mut [f32], kv: usize, start: usize, src: &[f32]) {
        let re = self.layout.row_elems();
        for (j, row) in src.chunks_exact(re).enumerate() {
            let at = self.row_offset(start + j, kv);
            pool[at..at + re].copy_from_slice(row);
        }
    }

    /// Attention of one query token (`q`: `[heads * head_dim]`) over
    /// positions `0 .. ctx`, read in place from the blocks; writes
    /// `[heads * head_dim]` into `out`.
    ///
    /// The heads that share a K/V head (GQA) are done together, so each K
    /// and V row is read once per group rather than once per head; each
    /// head's arithmetic is the same, in the same order, as done alone.
    ///
    /// Dot products and the weighted sum of V are fused multiply-adds in a
    /// fixed order ([`dot`], [`axpy`]; AVX2+FMA or the same arithmetic in plain
    /// Rust, the same bits), the softmax's `exp` a polynomial ([`exp`]).
    /// Prompt rows use this same code ([`prefill_attention`](Self::prefill_attention)),
    /// so a token's numbers do not depend on whether it was decoded,
    /// prefilled, or prefilled in another chunking.
    ///
    /// With `parallel`, the K/V heads are spread over the threads
    /// ([`crate::ops::par`]).
    #[allow(clippy::too_many_arguments)]
    pub fn decode_attention(
        &self,
        pool: &[f32],
        ctx: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        out: &mut [f32],
        parallel: bool,
    ) {
        let l = self.layout;
        let width = heads / l.kv_heads * l.head_dim;
        // One K/V head and its group of query heads at a time, each with its own scores.
        let one = |kvh: usize, out: &mut [f32]| {
            par::with_scratch(&SCORES, |scores| {
                self.kv_head_attention(pool, ctx, q, heads, scale, kvh, out, scores)
            })
        };
        if parallel && l.kv_heads > 1 {
            // K/V heads are independent: spread them over the threads.
            let shared = SharedMut::new(out);
            par::for_ranges(l.kv_heads, |range| {
                for kvh in range {
                    // SAFETY: each K/V head writes only its own group's `width` outputs.
                    one(kvh, unsafe { shared.part(kvh * width, width) });
                }
            });
        } else {
            for (kvh, out) in out.chunks_mut(width).enumerate().take(l.kv_heads) {
                one(kvh, out);
            }
        }
    }

    /// `new` prompt rows at positions `cached ..`: row `r` attends over
    /// `cached + r + 1` positions with [`decode_attention`](Self::decode_attention)'s
    /// arithmetic; rows and K/V heads are spread over the threads.
    #[allow(clippy::too_many_arguments)]
    pub fn prefill_attention(
        &self,
        pool: &[f32],
        cached: usize,
        new: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        let l = self.layout;
        let kvh = l.kv_heads;
        let qe = heads * l.head_dim;
        let width = heads / kvh * l.head_dim;
        let shared = SharedMut::new(out);
        par::for_ranges(new * kvh, |units| {
            par::with_scratch(&SCORES, |scores| {
                for u in units {
                    let (r, h) = (u / kvh, u % kvh);
                    // SAFETY: unit (r, h) writes only row r's outputs of K/V head h.
                    let o = unsafe { shared.part(r * qe + h * width, width) };
                    let qr = &q[r * qe..(r + 1) * qe];
                    self.kv_head_attention(pool, cached + r + 1, qr, heads, scale, h, o, scores);
                }
            })
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn kv_head_attention(
        &self,
        pool: &[f32],
        ctx: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        kvh: usize,
        out: &mut [f32],
        scores: &mut Vec<f32>,
    ) {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { self.kv_head_attention_avx2(pool, ctx, q, heads, scale, kvh, out, scores) };
            return;
        }
        self.kv_head_attention_impl(pool, ctx, q, heads, scale, kvh, out, scores)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn kv_head_attention_avx2(
        &self,
        pool: &[f32],
        ctx: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        kvh: usize,
        out: &mut [f32],
        scores: &mut Vec<f32>,
    ) {
        self.kv_head_attention_impl(pool, ctx, q, heads, scale, kvh, out, scores)
    }

    /// K/V head `kvh` and its query heads; `out`: their `group · head_dim` outputs.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn kv_head_attention_impl(
        &self,
        pool: &[f32],
        ctx: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        kvh: usize,
        out: &mut [f32],
        scores: &mut Vec<f32>,
    ) {
        let l = self.layout;
        let (d, bs, re) = (l.head_dim, l.block_size, l.row_elems());
        let group = heads / l.kv_heads;
        let blocks = &self.table[..ctx.div_ceil(bs)];
        // scores[g * ctx + p]: head `first + g` of the group at position p.
        // then each head's softmax denominator.
        scores.clear();
        scores.resize(group * ctx + group, 0.0);
        let (scores, sums) = scores.split_at_mut(group * ctx);
        let first = kvh * group;
        let kv_off = kvh * d;
        let mut p = 0;
        for (i, &b) in blocks.iter().enumerate() {
            let base = l.plane_offset(b, self.layer, 0) + kv_off;
            for r in 0..(ctx - i * bs).min(bs) {
                let k_row = &pool[base + r * re..][..d];
                for g in 0..group {
                    let qh = &q[(first + g) * d..(first + g + 1) * d];
                    scores[g * ctx + p] = dot(qh, k_row) * scale;
                }
                p += 1;
            }
        }
        for (g, sum) in sums.iter_mut().enumerate() {
            let sg = &mut scores[g * ctx..(g + 1) * ctx];
            let max = sg.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for s in sg.iter_mut() {
                *s = exp(*s - max);
            }
            *sum = self::sum(sg);
        }
        out.fill(0.0);
        let mut p = 0;
        for (i, &b) in blocks.iter().enumerate() {
            let base = l.plane_offset(b, self.layer, 1) + kv_off;
            for r in 0..(ctx - i * bs).min(bs) {
                let v_row = &pool[base + r * re..][..d];
                for (g, sum) in sums.iter().enumerate() {
                    axpy(&mut out[g * d..(g + 1) * d], scores[g * ctx + p] / sum, v_row);
                }
                p += 1;
            }
        }
    }
}

thread_local! {
    /// Decode attention's scores, per thread, reused from call to call.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether the AVX2+FMA forms of [`dot`] and [`axpy`] run here.
#[inline(always)]
fn simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        cfg!(all(target_feature = "avx2", target_feature = "fma"))
            || (std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// A dot product: four 8-lane partial sums of fused multiply-adds (chains
/// the CPU overlaps), folded in a fixed order; AVX2+FMA where the CPU has
/// them, else the same arithmetic in plain Rust ([`dot_portable`]), so both
/// give the same bits.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX2 and FMA are present (compiled in or detected).
        return unsafe { dot_avx2(a, b) };
    }
    dot_portable(a, b)
}

fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let chunks = n / 32;
    let mut acc = [[0f32; 8]; 4];
    for c in 0..chunks {
        for (m, acc) in acc.iter_mut().enumerate() {
            for (l, acc) in acc.iter_mut().enumerate() {
                let at = 32 * c + 8 * m + l;
                *acc = a[at].mul_add(b[at], *acc);
            }
        }
    }
    let tail = (32 * chunks..n).fold(0f32, |t, i| a[i].mul_add(b[i], t));
    let lane = |l: usize| (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
    let h: [f32; 4] = std::array::from_fn(|i| lane(i) + lane(i + 4));
    ((h[0] + h[2]) + (h[1] + h[3])) + tail
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let chunks = n / 32;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    for c in 0..chunks {
        for (m, acc) in acc.iter_mut().enumerate() {
            let at = 32 * c + 8 * m;
            *acc = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(at)), _mm256_loadu_ps(pb.add(at)), *acc);
        }
    }
    let tail = (32 * chunks..n).fold(0f32, |t, i| a[i].mul_add(b[i], t));
    let lanes = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    // h[i] = lane i + lane i+4; then (h0 + h2) + (h1 + h3).
    let h = _mm_add_ps(_mm256_castps256_ps128(lanes), _mm256_extractf128_ps::<1>(lanes));
    let h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
    _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps::<1>(h2, h2))) + tail
}

/// `out += w · v`, one fused multiply-add per element (AVX2+FMA or `mul_add`: the same bits).
#[inline(always)]
fn axpy(out: &mut [f32], w: f32, v: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX2 and FMA are present (compiled in or detected).
        unsafe { axpy_avx2(out, w, v) };
        return;
    }
    for (o, v) in out.iter_mut().zip(v) {
        *o = w.mul_add(*v, *o);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx2(out: &mut [f32], w: f32, v: &[f32]) {
    use std::arch::x86_64::*;
    let n = out.len().min(v.len());
    let wv = _mm256_set1_ps(w);
    let (po, pv) = (out.as_mut_ptr(), v.as_ptr());
    for c in 0..n / 8 {
        let o = po.add(8 * c);
        _mm256_storeu_ps(
            o,
            _mm256_fmadd_ps(wv, _mm256_loadu_ps(pv.add(8 * c)), _mm256_loadu_ps(o)),
        );
    }
    for i in (n / 8) * 8..n {
        out[i] = w.mul_add(v[i], out[i]);
    }
}

/// A sum in eight lanes folded in a fixed order (vectorizes; a plain
/// sequential sum is one long chain of dependent adds).
#[inline(always)]
fn sum(v: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let c = v.chunks_exact(8);
    let tail: f32 = c.remainder().iter().sum();
    for x in c {
        for l in 0..8 {
            acc[l] += x[l];
        }
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7])) + tail
}

/// `e^x` for the softmax (`x ≤ 0`), in plain arithmetic the compiler
/// vectorizes (the libm call it replaces was a fifth of prefill attention):
/// `x = n·ln2 + r` with `|r| ≤ ln2/2`, a degree-6 polynomial for `e^r`
/// (Cephes' `expf` coefficients, within 2 ulp), times `2^n` built in the
/// exponent bits. Below −87 (where `e^x` is under f32's normal range) it is 0.
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.max(-87.0);
    let n = (x * std::f32::consts::LOG2_E).round();
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.987_569_1e-4_f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 5e-1;
    let e_r = p * r * r + r + 1.0;
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if x <= -87.0 {
        0.0
    } else {
        e_r * scale
    }
}

/// A [`KvStore`] over a block pool: sequence `i` of the batch uses block
/// table `tables[i]`, which must already cover its cached and new tokens.
pub struct PagedKvBatch<'a> {
    pool: &'a mut [f32],
    layout: PagedLayout,
    tables: Vec<Vec<u32>>,
}

impl<'a> PagedKvBatch<'a> {
    pub fn new(pool: &'a mut [f32], layout: PagedLayout, tables: Vec<Vec<u32>>) -> Self {
        Self { pool, layout, tables }
    }
}

/// Checks that `q`/`k` fit the pool and `batch` fits the block tables;
/// returns `(tokens, heads, head_dim)`. Shared by the CPU and CUDA stores.
pub(crate) fn check_batch(
    l: &PagedLayout,
    layer: usize,
    q: &Tensor,
    k: &Tensor,
    batch: &BatchLayout,
    tables: &[Vec<u32>],
) -> Result<(usize, usize, usize), OpsError> {
    let (t, heads, d) = q.dims3()?;
    if d != l.head_dim || k.dims3()? != (t, l.kv_heads, d) || layer >= l.layers || heads % l.kv_heads != 0 {
        return Err(OpsError::Layout(format!(
            "q {:?} / k {:?} at layer {layer} do not fit the pool ({l:?})",
            q.dims(),
            k.dims()
        )));
    }
    if batch.len() != tables.len() || batch.total_tokens() != t {
        return Err(OpsError::Layout(format!(
            "batch of {} sequences / {} tokens, {} block tables / {t} rows",
            batch.len(),
            batch.total_tokens(),
            tables.len()
        )));
    }
    Ok((t, heads, d))
}

fn to_host_vec(t: &Tensor) -> Result<Vec<f32>, OpsError> {
    Ok(t.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

impl KvStore for PagedKvBatch<'_> {
    fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        batch: &BatchLayout,
        scale: f64,
    ) -> Result<Tensor, OpsError> {
        let l = self.layout;
        let (t, heads, d) = check_batch(&l, layer, q, k, batch, &self.tables)?;
        let blocks_in_pool = self.pool.len() / l.block_elems();
        let (qv, kv_, vv) = (to_host_vec(q)?, to_host_vec(k)?, to_host_vec(v)?);
        let (re, qe) = (l.row_elems(), heads * d);
        let mut out = vec![0f32; t * qe];
        // Decode rows of a batch of several sequences are attended together
        // after the loop, one sequence per worker; alone, in the loop.
        let decodes_together = batch.seqs().iter().filter(|c| c.new == 1).count() > 1;
        let mut decode_rows: Vec<Option<usize>> = vec![None; if decodes_together { t } else { 0 }];
        for (i, chunk) in batch.seqs().iter().enumerate() {
            let table = &self.tables[i];
            let ctx = chunk.cached + chunk.new;
            if table.len() * l.block_size < ctx || table.iter().any(|&b| b as usize >= blocks_in_pool) {
                return Err(OpsError::CapacityExceeded {
                    needed: ctx,
                    capacity: table.len() * l.block_size,
                });
            }
            let o = batch.offset(i);
            let rows = o..o + chunk.new;
            let view = SeqLayer {
                layout: &l,
                table,
                layer,
            };
            view.write_rows(self.pool, 0, chunk.cached, &kv_[rows.start * re..rows.end * re]);
            view.write_rows(self.pool, 1, chunk.cached, &vv[rows.start * re..rows.end * re]);
            if chunk.new == 1 && decodes_together {
                decode_rows[o] = Some(i);
            } else if chunk.new == 1 {
                let (qs, os) = (&qv[o * qe..(o + 1) * qe], &mut out[o * qe..(o + 1) * qe]);
                view.decode_attention(self.pool, ctx, qs, heads, scale as f32, os, true);
            } else {
                // Prompt rows: each attends exactly as a decode step at its position would,
                // so its numbers do not depend on how the prompt was cut into chunks, on
                // what it was batched with, or on which of its tokens came from the cache.
                let (qs, os) = (
                    &qv[rows.start * qe..rows.end * qe],
                    &mut out[rows.start * qe..rows.end * qe],
                );
                view.prefill_attention(self.pool, chunk.cached, chunk.new, qs, heads, scale as f32, os);
            }
        }
        if decodes_together {
            // Every K/V row is written: the pool is only read from here on.
            let pool: &[f32] = &*self.pool;
            let tables = &self.tables;
            // On the same pool as the matmuls: a second pool's workers would compete
            // with its spinning ones for the cores.
            let shared = SharedMut::new(&mut out);
            par::for_ranges(t, |rows| {
                for row in rows {
                    if let Some(i) = decode_rows[row] {
                        let view = SeqLayer {
                            layout: &l,
                            table: &tables[i],
                            layer,
                        };
                        let chunk = batch.seqs()[i];
                        let qs = &qv[row * qe..(row + 1) * qe];
                        // SAFETY: each row writes only its own outputs.
                        let os = unsafe { shared.part(row * qe, qe) };
                        view.decode_attention(pool, chunk.cached + 1, qs, heads, scale as f32, os, false);
                    }
                }
            });
        }
        Ok(Tensor::from_vec(out, (t, qe), q.device())?.to_dtype(q.dtype())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn dot_paths_agree_bit_for_bit() {
        for n in [8usize, 31, 32, 64, 80, 128] {
            let a = rand_vec(n, 3);
            let b = rand_vec(n, 4);
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            let p = dot_portable(&a, &b);
            assert!((p as f64 - exact).abs() < 1e-4, "{n}: {p} vs {exact}");
            assert_eq!(dot(&a, &b).to_bits(), p.to_bits(), "{n}");
            let (mut o1, mut o2) = (a.clone(), a.clone());
            axpy(&mut o1, 0.37, &b);
            for (o, v) in o2.iter_mut().zip(&b) {
                *o = 0.37f32.mul_add(*v, *o);
            }
            assert!(o1.iter().zip(&o2).all(|(x, y)| x.to_bits() == y.to_bits()), "{n}");
        }
    }

    #[test]
    fn exp_is_within_a_few_ulp_of_libm() {
        let mut x = -90.0f32;
        while x <= 0.0 {
            let (ours, libm) = (exp(x), x.exp());
            if x > -87.0 {
                assert!(
                    (ours - libm).abs() <= 4.0 * f32::EPSILON * libm,
                    "exp({x}) = {ours}, libm {libm}"
                );
            } else {
                assert!(ours == 0.0 && libm < 1.7e-38, "exp({x}) = {ours}, libm {libm}");
            }
            x += 0.0137;
        }
        assert_eq!(exp(0.0), 1.0);
    }
    use crate::ops::{ContiguousBatch, ContiguousKv, KvShape, SeqChunk};

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

    /// Runs the same layer-0 attention through a paged pool (with scattered,
    /// non-monotonic block tables) and through the contiguous store.
    #[test]
    fn paged_equals_contiguous_for_prefill_then_decode() {
        let l = PagedLayout {
            layers: 2,
            kv_heads: 2,
            head_dim: 8,
            block_size: 4,
        };
        let heads = 4;
        let mut pool = vec![0f32; 16 * l.block_elems()];
        let tables = vec![vec![9u32, 2, 14, 5], vec![0u32, 11, 3]];
        let shape = KvShape {
            layers: 2,
            kv_heads: 2,
            head_dim: 8,
        };
        let mut c0 = ContiguousKv::new(shape, candle_core::DType::F32, &Device::Cpu, 64);
        let mut c1 = ContiguousKv::new(shape, candle_core::DType::F32, &Device::Cpu, 64);
        // Step 1: prefill 6 and 9 tokens; step 2..: decode one each.
        let steps: Vec<Vec<SeqChunk>> = vec![
            vec![SeqChunk { cached: 0, new: 6 }, SeqChunk { cached: 0, new: 9 }],
            vec![SeqChunk { cached: 6, new: 1 }, SeqChunk { cached: 9, new: 1 }],
            vec![SeqChunk { cached: 7, new: 1 }, SeqChunk { cached: 10, new: 2 }],
        ];
        for (s, chunks) in steps.into_iter().enumerate() {
            let batch = BatchLayout::new(chunks).unwrap();
            let t = batch.total_tokens();
            for layer in 0..2 {
                let seed = (s * 10 + layer) as u64;
                let q = Tensor::from_vec(rand_vec(t * heads * 8, seed), (t, heads, 8), &Device::Cpu).unwrap();
                let k = Tensor::from_vec(rand_vec(t * 16, seed + 100), (t, 2, 8), &Device::Cpu).unwrap();
                let v = Tensor::from_vec(rand_vec(t * 16, seed + 200), (t, 2, 8), &Device::Cpu).unwrap();
                let a = PagedKvBatch::new(&mut pool, l, tables.clone())
                    .attend(layer, &q, &k, &v, &batch, 0.35)
                    .unwrap();
                let b = ContiguousBatch::new(vec![&mut c0, &mut c1])
                    .attend(layer, &q, &k, &v, &batch, 0.35)
                    .unwrap();
                let d: f32 = (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar().unwrap();
                assert!(d < 1e-5, "step {s} layer {layer}: {d}");
            }
        }
    }

    #[test]
    fn a_table_too_short_is_an_error() {
        let l = PagedLayout {
            layers: 1,
            kv_heads: 1,
            head_dim: 4,
            block_size: 4,
        };
        let mut pool = vec![0f32; 2 * l.block_elems()];
        let batch = BatchLayout::single(3, 2).unwrap();
        let x = Tensor::zeros((2, 1, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
        let r = PagedKvBatch::new(&mut pool, l, vec![vec![0]]).attend(0, &x, &x, &x, &batch, 1.0);
        assert!(matches!(r, Err(OpsError::CapacityExceeded { .. })));
        let r = PagedKvBatch::new(&mut pool, l, vec![vec![0, 7]]).attend(0, &x, &x, &x, &batch, 1.0);
        assert!(r.is_err(), "block 7 is outside a 2-block pool");
    }
}
