//! K/V in fixed-size blocks: writing new rows into blocks and attention that
//! reads them through each sequence's block table (CPU implementation).
//!
//! One pool is one flat byte buffer of blocks. A block holds `block_size`
//! tokens of every layer, K and V, in the layout's [`KvDtype`]:
//!
//! ```text
//! block b: [layer 0: K rows, V rows][layer 1: K rows, V rows] ...
//!          each "rows" plane is [block_size, kv_heads, head_dim] values
//!          (a head's row of q8_0 is head_dim / 32 groups of scale + 32 i8)
//! ```
//!
//! New K/V is converted into the stored type once, as it is written; every
//! query row then reads the stored rows (never the fresh f32 ones), widening
//! them in registers, so a token's numbers are the same whether its K/V was
//! just computed or came from the cache.
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

use std::sync::Arc;

use candle_core::Tensor;

use super::fast_math::{self, exp};
use super::par::{self, SharedMut};
use super::row_kernels::{self, Codec, Rows, F32, MAX_QUERIES};
use super::{alibi_bias, Attend, BatchLayout, KvDtype, KvShape, KvStore, LayerKv, OpsError, Window};

/// The geometry of a block pool: the model's [`KvShape`], the block size and the stored type.
///
/// Cloning is cheap (the per-layer offsets are shared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagedLayout {
    pub block_size: usize,
    /// How K/V values are stored.
    pub dtype: KvDtype,
    shape: Arc<KvShape>,
    /// Byte offset of each layer's K plane inside a block; one more entry, the block's length.
    offsets: Arc<[usize]>,
}

impl PagedLayout {
    /// The layout of `block_size`-token blocks of a model of `shape`, K/V stored as `dtype`.
    pub fn new(shape: KvShape, block_size: usize, dtype: KvDtype) -> Self {
        let mut offsets = Vec::with_capacity(shape.layers() + 1);
        let mut at = 0;
        for l in shape.iter() {
            offsets.push(at);
            at += shape.planes() * block_size * l.kv_heads * dtype.row_bytes(l.head_dim);
        }
        offsets.push(at);
        Self {
            block_size,
            dtype,
            shape: Arc::new(shape),
            offsets: offsets.into(),
        }
    }

    /// Every layer alike: `layers` layers of `kv_heads` heads of `head_dim`.
    pub fn uniform(layers: usize, kv_heads: usize, head_dim: usize, block_size: usize, dtype: KvDtype) -> Self {
        Self::new(KvShape::uniform(layers, kv_heads, head_dim), block_size, dtype)
    }

    /// The model's K/V geometry.
    pub fn shape(&self) -> &KvShape {
        &self.shape
    }

    /// Layers that keep K/V.
    pub fn layers(&self) -> usize {
        self.shape.layers()
    }

    /// Layer `layer`'s heads.
    pub fn layer(&self, layer: usize) -> LayerKv {
        self.shape.layer(layer)
    }

    /// The one shape every layer has, if they all have the same (what the CUDA kernels take).
    pub fn uniform_layer(&self) -> Option<LayerKv> {
        self.shape.uniform_layer()
    }

    /// Values of one token's K (or V) in `layer`.
    pub fn row_elems(&self, layer: usize) -> usize {
        self.layer(layer).row_elems()
    }

    /// Bytes of one head's row of K (or V) in `layer`.
    pub fn head_bytes(&self, layer: usize) -> usize {
        self.dtype.row_bytes(self.layer(layer).head_dim)
    }

    /// Bytes of one token's K (or V) in `layer`.
    pub fn row_bytes(&self, layer: usize) -> usize {
        self.layer(layer).kv_heads * self.head_bytes(layer)
    }

    /// Bytes of `layer`'s K (or V) plane in one block.
    pub fn plane_bytes(&self, layer: usize) -> usize {
        self.block_size * self.row_bytes(layer)
    }

    /// Bytes of one whole block (a multiple of 4: block sizes are at least 8).
    pub fn block_len(&self) -> usize {
        self.offsets[self.offsets.len() - 1]
    }

    /// 4-byte words of one whole block (how RAM tiers are allocated, so every block is
    /// 4-aligned, and f32 blocks are f32 arrays).
    pub fn block_words(&self) -> usize {
        self.block_len() / 4
    }

    /// Bytes of one whole block.
    pub fn block_bytes(&self) -> u64 {
        self.block_len() as u64
    }

    /// Bytes a cached token takes (every layer's K and V).
    pub fn token_bytes(&self) -> usize {
        self.block_len() / self.block_size.max(1)
    }

    /// Byte offset of `layer`'s K plane inside a block.
    pub fn layer_offset(&self, layer: usize) -> usize {
        self.offsets[layer]
    }

    /// Byte offset of the plane (`kv`: 0 = K, 1 = V) of `layer` in `block`; V's is K's where V
    /// is read from K ([`KvShape::v_from_k`]).
    pub fn plane_offset(&self, block: u32, layer: usize, kv: usize) -> usize {
        let kv = if self.shape.v_from_k() { 0 } else { kv };
        block as usize * self.block_len() + self.layer_offset(layer) + kv * self.plane_bytes(layer)
    }
}

/// One sequence's view of one layer of a pool: where its tokens' rows are.
#[derive(Clone, Copy)]
pub struct SeqLayer<'a> {
    pub layout: &'a PagedLayout,
    /// The sequence's block table.
    pub table: &'a [u32],
    pub layer: usize,
    /// The layer's window, if it has one ([`Attend::window`]).
    pub window: Option<Window>,
    /// The model's soft cap on scores, if it has one ([`Attend::softcap`]).
    pub softcap: Option<f32>,
    /// The layer's sink logits, one per query head, if it has them ([`Attend::sinks`]).
    pub sinks: Option<&'a [f32]>,
    /// ALiBi's slopes, one per query head, if the model has them ([`Attend::alibi`]).
    pub alibi: Option<&'a [f32]>,
}

impl SeqLayer<'_> {
    /// Byte offset in the pool of row `p` of the K (`kv` = 0) or V (1) plane.
    fn row_offset(&self, p: usize, kv: usize) -> usize {
        let l = self.layout;
        l.plane_offset(self.table[p / l.block_size], self.layer, kv) + (p % l.block_size) * l.row_bytes(self.layer)
    }

    /// Stores rows of `new` tokens (`src`: `[new, row_elems]` f32) into the
    /// pool at positions `start .. start + new`, converted to the layout's type.
    pub fn write_rows(&self, pool: &mut [u8], kv: usize, start: usize, src: &[f32]) {
        let (re, rb) = (self.layout.row_elems(self.layer), self.layout.row_bytes(self.layer));
        for (j, row) in src.chunks_exact(re).enumerate() {
            let at = self.row_offset(start + j, kv);
            self.layout.dtype.encode(row, &mut pool[at..at + rb]);
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
    /// fixed order (`row_kernels`: AVX2+FMA or the same arithmetic in plain
    /// Rust, the same bits), the softmax's `exp` a polynomial (`exp`).
    /// Prompt rows use this same code ([`prefill_attention`](Self::prefill_attention)),
    /// so a token's numbers do not depend on whether it was decoded,
    /// prefilled, or prefilled in another chunking.
    ///
    /// With `parallel`, the K/V heads are spread over the threads
    /// ([`crate::ops::par`]).
    #[allow(clippy::too_many_arguments)]
    pub fn decode_attention(
        &self,
        pool: &[u8],
        ctx: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        out: &mut [f32],
        parallel: bool,
    ) {
        let l = self.layout.layer(self.layer);
        let width = heads / l.kv_heads * l.head_dim;
        // One K/V head and its group of query heads at a time, each with its own scores.
        let one = |kvh: usize, out: &mut [f32]| {
            par::with_scratch(&SCORES, |scores| {
                self.kv_head_attention(pool, ctx, 1, q, heads, scale, kvh, out, scores)
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
    /// arithmetic. Work is cut into tiles of up to `ROW_TILE` rows × one
    /// K/V head, spread over the threads: a tile reads each block of K and V
    /// once from memory for all its rows (each row's numbers are still its
    /// own, as if decoded alone).
    #[allow(clippy::too_many_arguments)]
    pub fn prefill_attention(
        &self,
        pool: &[u8],
        cached: usize,
        new: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        let l = self.layout.layer(self.layer);
        let kvh = l.kv_heads;
        let qe = heads * l.head_dim;
        let width = heads / kvh * l.head_dim;
        let tiles = new.div_ceil(ROW_TILE);
        let shared = SharedMut::new(out);
        par::for_ranges(tiles * kvh, |units| {
            par::with_scratch(&SCORES, |scores| {
                par::with_scratch(&TILE_OUT, |tile_out| {
                    for u in units {
                        let (tile, h) = (u / kvh, u % kvh);
                        let first = tile * ROW_TILE;
                        let rows = ROW_TILE.min(new - first);
                        tile_out.clear();
                        tile_out.resize(rows * width, 0.0);
                        let qt = &q[first * qe..(first + rows) * qe];
                        let ctx = cached + first + rows;
                        self.kv_head_attention(pool, ctx, rows, qt, heads, scale, h, tile_out, scores);
                        for (r, o) in tile_out.chunks_exact(width).enumerate() {
                            // SAFETY: unit (tile, h) writes only its rows' outputs of K/V head h.
                            unsafe { shared.part((first + r) * qe + h * width, width) }.copy_from_slice(o);
                        }
                    }
                })
            })
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn kv_head_attention(
        &self,
        pool: &[u8],
        ctx: usize,
        rows: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        kvh: usize,
        out: &mut [f32],
        scores: &mut Vec<f32>,
    ) {
        use row_kernels::{Bf16, F16, Q8_0};
        match self.layout.dtype {
            KvDtype::F32 => self.kv_head_attention_as::<F32>(pool, ctx, rows, q, heads, scale, kvh, out, scores),
            KvDtype::F16 => self.kv_head_attention_as::<F16>(pool, ctx, rows, q, heads, scale, kvh, out, scores),
            KvDtype::Bf16 => self.kv_head_attention_as::<Bf16>(pool, ctx, rows, q, heads, scale, kvh, out, scores),
            KvDtype::Q8_0 => self.kv_head_attention_as::<Q8_0>(pool, ctx, rows, q, heads, scale, kvh, out, scores),
        }
    }

    /// [`Self::kv_head_attention`] for K/V stored as `C`: the AVX2 form where the CPU has it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn kv_head_attention_as<C: Codec>(
        &self,
        pool: &[u8],
        ctx: usize,
        rows: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        kvh: usize,
        out: &mut [f32],
        scores: &mut Vec<f32>,
    ) {
        #[cfg(target_arch = "x86_64")]
        if row_kernels::simd() {
            // SAFETY: the CPU supports AVX2, FMA and F16C, checked just above.
            unsafe { self.kv_head_attention_avx2::<C>(pool, ctx, rows, q, heads, scale, kvh, out, scores) };
            return;
        }
        self.kv_head_attention_impl::<false, C>(pool, ctx, rows, q, heads, scale, kvh, out, scores)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn kv_head_attention_avx2<C: Codec>(
        &self,
        pool: &[u8],
        ctx: usize,
        rows: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        kvh: usize,
        out: &mut [f32],
        scores: &mut Vec<f32>,
    ) {
        self.kv_head_attention_impl::<true, C>(pool, ctx, rows, q, heads, scale, kvh, out, scores)
    }

    /// K/V head `kvh` and its query heads for `rows` consecutive query rows
    /// (`q`: `rows × heads · head_dim`), the last of which attends over `ctx`
    /// positions and each earlier one over one fewer; `out`: each row's
    /// `group · head_dim` outputs, row after row.
    ///
    /// Block by block: every (row, query head) scores the block's K rows
    /// (read once into L1 for all of them), then a softmax per (row, head),
    /// then every (row, head) sums the block's V rows weighted by `e^(s - max)`
    /// and divides by their sum at the end. The arithmetic is
    /// [`row_kernels`]'s and depends on nothing but the row's own query and
    /// positions, so a row gets the same bits in any tile, alone or decoded.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn kv_head_attention_impl<const SIMD: bool, C: Codec>(
        &self,
        pool: &[u8],
        ctx: usize,
        rows: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        kvh: usize,
        out: &mut [f32],
        scores: &mut Vec<f32>,
    ) {
        let l = self.layout;
        let (d, bs) = (l.layer(self.layer).head_dim, l.block_size);
        let (rb, hb) = (l.row_bytes(self.layer), l.head_bytes(self.layer));
        let group = heads / l.layer(self.layer).kv_heads;
        let qe = heads * d;
        let ctx_of = |t: usize| ctx + 1 + t - rows;
        // Row t sees positions `lo_of(t) .. ctx_of(t)`; blocks wholly before the first row's
        // window are skipped, and in the rest a row's earlier positions weigh exactly 0 (so
        // the row's bits do not depend on its tile).
        let lo_of = |t: usize| self.window.map_or(0, |w| w.first_visible(ctx_of(t) - 1));
        let first_block = lo_of(0) / bs;
        let blocks = &self.table[first_block..ctx.div_ceil(bs)];
        // scores[(t * group + g) * ctx + p]: row t, head `kvh · group + g`, position p;
        // then each (row, head)'s softmax denominator.
        let units = rows * group;
        scores.clear();
        scores.resize(units * ctx + units, 0.0);
        let (scores, sums) = scores.split_at_mut(units * ctx);
        let q_of = |t: usize, g: usize| &q[t * qe + (kvh * group + g) * d..][..d];
        // A pass covers a few blocks (about `PASS_ROWS` positions): their K
        // (or V) rows stay in L1 while every (row, head) of the tile reads
        // them, and each kernel call runs over all of them. When more than one
        // run of queries reads a pass, its rows are widened to f32 once
        // (`row_kernels::widen`) and the runs read those: the same values.
        let per_pass = (PASS_ROWS / bs).clamp(1, MAX_PASS_BLOCKS);
        let widen = units > MAX_QUERIES;
        let mut bases = [0usize; MAX_PASS_BLOCKS];
        // Each pass of `plane` (0: K, 1: V): its first position and, for each run of up to
        // `MAX_QUERIES` consecutive (row, head) units that attend to the same K/V rows in it
        // (a row's GQA group; consecutive rows whose positions all lie before the pass's
        // end), the first unit, the run's length and those rows, in the pool as `C` or
        // widened as f32.
        let mut passes = |plane: usize, f: &mut dyn FnMut(usize, usize, usize, Kv<'_>)| {
            par::with_scratch(&WIDE, |wide| {
                for (pass, chunk) in blocks.chunks(per_pass).enumerate() {
                    for (base, &b) in bases.iter_mut().zip(chunk) {
                        *base = l.plane_offset(b, self.layer, plane) + kvh * hb;
                    }
                    let start = (first_block + pass * per_pass) * bs;
                    let span = (ctx - start).min(chunk.len() * bs);
                    let in_pool = |n: usize| Rows {
                        bases: &bases[..chunk.len()],
                        block: bs,
                        stride: rb,
                        n,
                    };
                    if widen {
                        row_kernels::widen::<SIMD, C>(pool, in_pool(span), d, wide);
                    }
                    let n_of = |u: usize| ctx_of(u / group).saturating_sub(start).min(span);
                    let mut u = 0;
                    while u < units {
                        let n = n_of(u);
                        let mut run = 1;
                        while run < MAX_QUERIES && u + run < units && n_of(u + run) == n {
                            run += 1;
                        }
                        if n > 0 {
                            let kv = if widen {
                                Kv::Wide(
                                    Rows {
                                        bases: &[0],
                                        block: span,
                                        stride: 4 * d,
                                        n,
                                    },
                                    bytemuck::cast_slice(wide),
                                )
                            } else {
                                Kv::Pool(in_pool(n))
                            };
                            f(start, u, run, kv);
                        }
                        u += run;
                    }
                }
            })
        };
        passes(0, &mut |start, u, run, k| {
            let qs: [&[f32]; MAX_QUERIES] =
                std::array::from_fn(|i| q_of((u + i.min(run - 1)) / group, (u + i.min(run - 1)) % group));
            let s = &mut scores[u * ctx + start..];
            match k {
                Kv::Pool(k) => row_kernels::scores_n::<SIMD, C>(&qs[..run], pool, k, scale, s, ctx),
                Kv::Wide(k, wide) => row_kernels::scores_n::<SIMD, F32>(&qs[..run], wide, k, scale, s, ctx),
            }
        });
        for (u, sum) in sums.iter_mut().enumerate() {
            let (lo, hi, h) = (lo_of(u / group), ctx_of(u / group), kvh * group + u % group);
            let row = &mut scores[u * ctx..][..hi];
            // ALiBi: the row's query sits at `hi - 1`, its first visible key at `lo`.
            *sum = softmax_numerators(&mut row[lo..], self.softcap, self.alibi.map(|m| (m[h], hi - 1 - lo)), self.sinks.map(|s| s[h]));
            row[first_block * bs..lo].fill(0.0);
        }
        out.fill(0.0);
        passes(1, &mut |start, u, run, v| {
            let (o, p) = (&mut out[u * d..(u + run) * d], &scores[u * ctx + start..]);
            match v {
                Kv::Pool(v) => row_kernels::weighted_sum_n::<SIMD, C>(run, p, ctx, pool, v, o),
                Kv::Wide(v, wide) => row_kernels::weighted_sum_n::<SIMD, F32>(run, p, ctx, wide, v, o),
            }
        });
        for (o, sum) in out.chunks_exact_mut(d).zip(sums.iter()) {
            for o in o.iter_mut() {
                *o /= sum;
            }
        }
    }
}

/// Prompt rows per unit of prefill attention: enough that a pass of K/V
/// read into L1 (and widened once) serves many rows, few enough that the
/// units still spread over the threads. (16 rather than 8: 4.5% more prefill
/// tokens/s at 3,400 tokens on the 50M bench model, 2 threads; the tile's
/// scores, 16 × group × context floats, then outgrow L2 past about 2,000
/// tokens with a GQA group of 3, without showing in that figure.)
const ROW_TILE: usize = 16;

/// Positions one pass of [`SeqLayer::kv_head_attention_impl`] covers (64
/// rows of a 64-wide head: 16 KiB of K or V, half an L1).
const PASS_ROWS: usize = 64;
/// Blocks in one pass at most (8-token blocks).
const MAX_PASS_BLOCKS: usize = 8;

/// Where a pass's K (or V) rows are read from: the pool (stored as the
/// layout's type), or widened to f32 in a scratch buffer.
enum Kv<'a> {
    Pool(Rows<'a>),
    Wide(Rows<'a>, &'a [u8]),
}

thread_local! {
    /// A pass of K or V rows widened to f32, per thread.
    static WIDE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Decode attention's scores, per thread, reused from call to call.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A prefill tile's outputs before they go to their rows, per thread.
    static TILE_OUT: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Scores `v` → `e^(s − max)` in place, each soft-capped first (`c · tanh(s / c)`) when
/// `softcap` is `Some(c)`, then biased by ALiBi where `alibi` is `Some((m, d))` (`v[j]`'s key
/// `d − j` positions before the query: `+` [`alibi_bias`]`(m, d − j)`); returns their sum (the
/// softmax's denominator, divided out once at the end), plus `e^(sink − max)` for a sink logit, the maximum then taken over it too (as
/// llama.cpp's softmax with sinks).
#[inline(always)]
fn softmax_numerators(v: &mut [f32], softcap: Option<f32>, alibi: Option<(f32, usize)>, sink: Option<f32>) -> f32 {
    if let Some(c) = softcap {
        fast_math::softcap(v, c);
    }
    if let Some((m, d)) = alibi {
        for (j, s) in v.iter_mut().enumerate() {
            *s += alibi_bias(m, d.abs_diff(j));
        }
    }
    let max = match sink {
        Some(s) => self::max(v).max(s),
        None => self::max(v),
    };
    for s in v.iter_mut() {
        *s = exp(*s - max);
    }
    match sink {
        Some(s) => self::sum(v) + exp(s - max),
        None => self::sum(v),
    }
}

/// The largest of `v` (−∞ when empty), in eight lanes: a maximum does not depend on the order
/// it is taken in, and one long chain of dependent `max` instructions was as slow as the
/// softmax's `exp`.
#[inline(always)]
fn max(v: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let c = v.chunks_exact(8);
    let tail = c.remainder().iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for x in c {
        for l in 0..8 {
            acc[l] = if x[l] > acc[l] { x[l] } else { acc[l] };
        }
    }
    acc.iter().copied().fold(tail, f32::max)
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

/// A [`KvStore`] over a block pool: sequence `i` of the batch uses block
/// table `tables[i]`, which must already cover its cached and new tokens.
pub struct PagedKvBatch<'a> {
    pool: &'a mut [u8],
    layout: PagedLayout,
    tables: Vec<Vec<u32>>,
}

impl<'a> PagedKvBatch<'a> {
    pub fn new(pool: &'a mut [u8], layout: PagedLayout, tables: Vec<Vec<u32>>) -> Self {
        Self { pool, layout, tables }
    }
}

/// Checks that `q`/`k` (none when the layer's K/V is already written) fit the pool and
/// `batch` fits the block tables; returns `(tokens, heads, head_dim)`. Shared by the CPU and
/// CUDA stores.
pub(crate) fn check_batch(
    l: &PagedLayout,
    layer: usize,
    q: &Tensor,
    k: Option<&Tensor>,
    batch: &BatchLayout,
    tables: &[Vec<u32>],
) -> Result<(usize, usize, usize), OpsError> {
    let (t, heads, d) = q.dims3()?;
    let fits = layer < l.layers() && {
        let s = l.layer(layer);
        let k_fits = match k {
            Some(k) => k.dims3()? == (t, s.kv_heads, d),
            None => true,
        };
        d == s.head_dim && k_fits && heads % s.kv_heads == 0
    };
    if !fits {
        return Err(OpsError::Layout(format!(
            "q {:?} / k {:?} at layer {layer} do not fit the pool ({l:?})",
            q.dims(),
            k.map(|k| k.dims())
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
        how: Attend<'_>,
    ) -> Result<Tensor, OpsError> {
        self.attend_rows(layer, q, Some((k, v)), batch, how)
    }

    fn attend_shared(&mut self, layer: usize, q: &Tensor, batch: &BatchLayout, how: Attend<'_>) -> Result<Tensor, OpsError> {
        self.attend_rows(layer, q, None, batch, how)
    }
}

impl PagedKvBatch<'_> {
    /// [`KvStore::attend`], writing `kv`'s rows first where given.
    fn attend_rows(
        &mut self,
        layer: usize,
        q: &Tensor,
        kv: Option<(&Tensor, &Tensor)>,
        batch: &BatchLayout,
        how: Attend<'_>,
    ) -> Result<Tensor, OpsError> {
        let scale = how.scale;
        let l = &self.layout;
        let (t, heads, d) = check_batch(l, layer, q, kv.map(|(k, _)| k), batch, &self.tables)?;
        how.check_per_head(heads)?;
        let blocks_in_pool = self.pool.len() / l.block_len().max(1);
        let qv = to_host_vec(q)?;
        let new_rows = match kv {
            Some((k, v)) => Some((to_host_vec(k)?, to_host_vec(v)?)),
            None => None,
        };
        let (re, qe) = (l.row_elems(layer), heads * d);
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
                layout: l,
                table,
                layer,
                window: how.window,
                softcap: how.softcap,
                sinks: how.sinks,
                alibi: how.alibi,
            };
            if let Some((kv_, vv)) = &new_rows {
                view.write_rows(self.pool, 0, chunk.cached, &kv_[rows.start * re..rows.end * re]);
                // Where V is read from K, K's rows are its rows.
                if !l.shape().v_from_k() {
                    view.write_rows(self.pool, 1, chunk.cached, &vv[rows.start * re..rows.end * re]);
                }
            }
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
            let pool: &[u8] = &*self.pool;
            let tables = &self.tables;
            // On the same pool as the matmuls: a second pool's workers would compete
            // with its spinning ones for the cores.
            let shared = SharedMut::new(&mut out);
            par::for_ranges(t, |rows| {
                for row in rows {
                    if let Some(i) = decode_rows[row] {
                        let view = SeqLayer {
                            layout: l,
                            table: &tables[i],
                            layer,
                            window: how.window,
                            softcap: how.softcap,
                            sinks: how.sinks,
                            alibi: how.alibi,
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

    use crate::ops::test_util::rand_vec;
    use crate::ops::{ContiguousBatch, ContiguousKv, KvShape, SeqChunk};

    /// Runs the same attention through a paged pool (with scattered,
    /// non-monotonic block tables) and through the contiguous store, for every
    /// stored type: exact for f32, within the type's rounding otherwise; with and
    /// without a sliding window or chunks (layer 0 local, layer 1 global), a soft cap, sinks and
    /// ALiBi;
    /// with both layers alike, with the global layer's heads fewer and twice as wide
    /// (Gemma 4's), and with K kept alone and V read from it (DeepSeek-V2's latent).
    #[test]
    fn paged_equals_contiguous_for_prefill_then_decode() {
        for (dtype, d, tol) in [
            (KvDtype::F32, 8, 1e-5),
            (KvDtype::F16, 8, 5e-3),
            (KvDtype::Bf16, 8, 4e-2),
            (KvDtype::Q8_0, 32, 4e-2),
        ] {
            let (sliding, chunked) = (Window::Sliding, Window::Chunked);
            for window in [None, Some(sliding(1)), Some(sliding(3)), Some(sliding(5)), Some(chunked(1)), Some(chunked(4)), Some(chunked(6))] {
                for softcap in [None, Some(0.3)] {
                    paged_against_contiguous(dtype, d, tol, window, softcap, (None, None), Layers::Alike);
                }
                paged_against_contiguous(dtype, d, tol, window, None, (Some(&[0.5, -1.0, 2.5, 0.0]), None), Layers::Alike);
                paged_against_contiguous(dtype, d, tol, window, Some(0.3), (None, Some(&[0.5, 0.25, 0.125, 0.0625])), Layers::Alike);
                paged_against_contiguous(dtype, d, tol, window, None, (None, None), Layers::Mixed);
                paged_against_contiguous(dtype, d, tol, window, None, (None, None), Layers::VFromK);
            }
        }
    }

    /// The layers of [`paged_against_contiguous`]'s model.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Layers {
        /// Two alike.
        Alike,
        /// The second's heads fewer and twice as wide.
        Mixed,
        /// Two alike, K kept alone and V read from it (the caller passes K as V).
        VFromK,
    }

    fn paged_against_contiguous(
        dtype: KvDtype,
        d: usize,
        tol: f32,
        window: Option<Window>,
        softcap: Option<f32>,
        (sinks, alibi): (Option<&[f32]>, Option<&[f32]>),
        layers: Layers,
    ) {
        let layer = |kv_heads, head_dim| LayerKv { kv_heads, head_dim };
        let shape = match layers {
            Layers::Alike => KvShape::uniform(2, 2, d),
            Layers::Mixed => KvShape::per_layer(vec![layer(2, d), layer(1, 2 * d)]),
            Layers::VFromK => KvShape::uniform(2, 2, d).with_v_from_k(),
        };
        let l = PagedLayout::new(shape.clone(), 4, dtype);
        let heads = 4;
        let mut pool = vec![0u8; 16 * l.block_len()];
        let tables = vec![vec![9u32, 2, 14, 5], vec![0u32, 11, 3]];
        let mut c0 = ContiguousKv::new(shape.clone(), candle_core::DType::F32, &Device::Cpu, 64);
        let mut c1 = ContiguousKv::new(shape.clone(), candle_core::DType::F32, &Device::Cpu, 64);
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
                let LayerKv { kv_heads: kvh, head_dim: d } = shape.layer(layer);
                let q = Tensor::from_vec(rand_vec(t * heads * d, seed), (t, heads, d), &Device::Cpu).unwrap();
                let k = Tensor::from_vec(rand_vec(t * kvh * d, seed + 100), (t, kvh, d), &Device::Cpu).unwrap();
                let v = match layers {
                    Layers::VFromK => k.clone(),
                    _ => Tensor::from_vec(rand_vec(t * kvh * d, seed + 200), (t, kvh, d), &Device::Cpu).unwrap(),
                };
                let how = Attend {
                    scale: 0.35,
                    window: if layer == 0 { window } else { None },
                    softcap,
                    sinks,
                    alibi,
                };
                let a = PagedKvBatch::new(&mut pool, l.clone(), tables.clone())
                    .attend(layer, &q, &k, &v, &batch, how)
                    .unwrap();
                let b = ContiguousBatch::new(vec![&mut c0, &mut c1])
                    .attend(layer, &q, &k, &v, &batch, how)
                    .unwrap();
                let diff: f32 = (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar().unwrap();
                assert!(
                    diff < tol,
                    "{dtype} window {window:?} softcap {softcap:?} sinks {sinks:?} alibi {alibi:?} {layers:?} step {s} layer {layer}: {diff}"
                );
            }
        }
    }

    /// Layers of different shapes lie one after another in a block, each plane its own size,
    /// no two overlapping; a uniform layout is laid out as before shapes could differ.
    #[test]
    fn mixed_layers_have_their_own_planes() {
        let layer = |kv_heads, head_dim| LayerKv { kv_heads, head_dim };
        let l = PagedLayout::new(KvShape::per_layer(vec![layer(1, 8), layer(2, 16)]), 4, KvDtype::F32);
        assert_eq!((l.plane_bytes(0), l.plane_bytes(1)), (4 * 8 * 4, 4 * 32 * 4));
        let planes: Vec<usize> = [(0, 0), (0, 1), (1, 0), (1, 1)].map(|(y, kv)| l.plane_offset(2, y, kv)).into();
        let b = 2 * l.block_len();
        assert_eq!(planes, vec![b, b + 128, b + 256, b + 768]);
        assert_eq!((l.block_len(), l.token_bytes()), (1280, 320));
        assert_eq!(l.uniform_layer(), None);
        let u = PagedLayout::uniform(3, 2, 8, 16, KvDtype::F16);
        assert_eq!(u.block_len(), 3 * 2 * 16 * 2 * 8 * 2);
        assert_eq!(u.plane_offset(1, 2, 1), u.block_len() + 5 * u.plane_bytes(2));
        assert_eq!(u.uniform_layer(), Some(layer(2, 8)));
        // K alone: one plane per layer, V's offset K's, half the bytes.
        let k = PagedLayout::new(KvShape::uniform(3, 2, 8).with_v_from_k(), 16, KvDtype::F16);
        assert_eq!(k.block_len() * 2, u.block_len());
        assert_eq!(k.plane_offset(1, 2, 1), k.plane_offset(1, 2, 0));
        assert_eq!(k.plane_offset(1, 2, 0), k.block_len() + 2 * k.plane_bytes(2));
    }

    /// Prompt rows, attended in tiles of several rows on the thread pool,
    /// get the same bits as each row decoded alone at its position, for every
    /// stored type, with windows and chunks shorter than a tile, than a block, and none, and with
    /// a soft cap.
    #[test]
    fn prefill_tiles_equal_rows_decoded_alone() {
        for dtype in KvDtype::ALL {
            let (sliding, chunked) = (Window::Sliding, Window::Chunked);
            for window in [None, Some(sliding(3)), Some(sliding(11)), Some(sliding(17)), Some(chunked(3)), Some(chunked(8)), Some(chunked(13))] {
                tiles_against_rows(dtype, window, None, (None, None));
            }
            tiles_against_rows(dtype, Some(sliding(11)), Some(0.2), (None, None));
            tiles_against_rows(dtype, Some(chunked(8)), Some(0.2), (None, None));
            tiles_against_rows(dtype, Some(sliding(3)), None, (Some(&[1.0, -2.0, 0.5, 3.0, 0.0, -0.5]), None));
            tiles_against_rows(dtype, None, Some(0.2), (None, Some(&[0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625])));
        }
    }

    fn tiles_against_rows(dtype: KvDtype, window: Option<Window>, softcap: Option<f32>, (sinks, alibi): (Option<&[f32]>, Option<&[f32]>)) {
        let l = PagedLayout::uniform(1, 2, 32, 8, dtype);
        let heads = 6;
        let (cached, new) = (5, 2 * ROW_TILE + 3);
        let ctx = cached + new;
        let table: Vec<u32> = vec![3, 0, 4, 1, 2];
        let mut pool = vec![0u8; 5 * l.block_len()];
        let view = SeqLayer {
            layout: &l,
            table: &table,
            layer: 0,
            window,
            softcap,
            sinks,
            alibi,
        };
        view.write_rows(&mut pool, 0, 0, &rand_vec(ctx * l.row_elems(0), 12));
        view.write_rows(&mut pool, 1, 0, &rand_vec(ctx * l.row_elems(0), 13));
        let qe = heads * l.layer(0).head_dim;
        let q = rand_vec(new * qe, 14);
        let mut tiled = vec![0f32; new * qe];
        view.prefill_attention(&pool, cached, new, &q, heads, 0.25, &mut tiled);
        for r in 0..new {
            let mut alone = vec![0f32; qe];
            let parallel = r % 2 == 0;
            view.decode_attention(
                &pool,
                cached + r + 1,
                &q[r * qe..][..qe],
                heads,
                0.25,
                &mut alone,
                parallel,
            );
            let t = &tiled[r * qe..][..qe];
            assert!(
                t.iter().zip(&alone).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{dtype} window {window:?} softcap {softcap:?} sinks {sinks:?} alibi {alibi:?} row {r}"
            );
        }
    }

    #[test]
    fn a_table_too_short_is_an_error() {
        let l = PagedLayout::uniform(1, 1, 4, 4, KvDtype::F32);
        let mut pool = vec![0u8; 2 * l.block_len()];
        let batch = BatchLayout::single(3, 2).unwrap();
        let x = Tensor::zeros((2, 1, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
        let r = PagedKvBatch::new(&mut pool, l.clone(), vec![vec![0]]).attend(0, &x, &x, &x, &batch, Attend::causal(1.0));
        assert!(matches!(r, Err(OpsError::CapacityExceeded { .. })));
        let r = PagedKvBatch::new(&mut pool, l.clone(), vec![vec![0, 7]]).attend(0, &x, &x, &x, &batch, Attend::causal(1.0));
        assert!(r.is_err(), "block 7 is outside a 2-block pool");
    }
}
