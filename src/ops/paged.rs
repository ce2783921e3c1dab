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
//! Decode (one new token) reads K/V in place, block by block, without
//! gathering the history; the decode rows of a batch of several sequences
//! run in parallel, one sequence per worker (alone, one row would not pay for
//! waking the workers). A prefill chunk (several new tokens) gathers its
//! sequence's rows once per layer and uses the matmul attention of
//! [`super::attention`], where the gather is small next to the matmuls.
//!
//! Counterpart: vLLM's `reshape_and_cache` and `paged_attention_v1` kernels,
//! and its CPU attention backend.

use candle_core::{Device, Tensor};
use rayon::prelude::*;

use super::{attention, BatchLayout, KvStore, OpsError};

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

    /// Rows `0 .. ctx` of K (or V), gathered into `[ctx, row_elems]`.
    pub fn gather_rows(&self, pool: &[f32], kv: usize, ctx: usize) -> Vec<f32> {
        let l = self.layout;
        let re = l.row_elems();
        let mut out = Vec::with_capacity(ctx * re);
        for (i, &b) in self.table.iter().enumerate() {
            let p = i * l.block_size;
            if p >= ctx {
                break;
            }
            let at = l.plane_offset(b, self.layer, kv);
            out.extend_from_slice(&pool[at..at + (ctx - p).min(l.block_size) * re]);
        }
        out
    }

    /// Attention of one query token (`q`: `[heads * head_dim]`) over
    /// positions `0 .. ctx`, read in place from the blocks; writes
    /// `[heads * head_dim]` into `out`.
    ///
    /// The heads that share a K/V head (GQA) are done together, so each K
    /// and V row is read once per group rather than once per head; each
    /// head's arithmetic is the same, in the same order, as done alone.
    ///
    /// On x86-64 with AVX2 the same code runs compiled for AVX2 (the same
    /// operations in the same order: no fused multiply-adds, so the results
    /// are the same bits).
    pub fn decode_attention(&self, pool: &[f32], ctx: usize, q: &[f32], heads: usize, scale: f32, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { self.decode_attention_avx2(pool, ctx, q, heads, scale, out) };
            return;
        }
        self.decode_attention_impl(pool, ctx, q, heads, scale, out)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn decode_attention_avx2(
        &self,
        pool: &[f32],
        ctx: usize,
        q: &[f32],
        heads: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        self.decode_attention_impl(pool, ctx, q, heads, scale, out)
    }

    #[inline(always)]
    fn decode_attention_impl(&self, pool: &[f32], ctx: usize, q: &[f32], heads: usize, scale: f32, out: &mut [f32]) {
        let l = self.layout;
        let (d, bs, re) = (l.head_dim, l.block_size, l.row_elems());
        let group = heads / l.kv_heads;
        let blocks = &self.table[..ctx.div_ceil(bs)];
        // scores[g * ctx + p]: head `first + g` of the group at position p.
        let mut scores = vec![0f32; group * ctx];
        let mut sums = vec![0f32; group];
        for kvh in 0..l.kv_heads {
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
            sums.fill(0.0);
            for (g, sum) in sums.iter_mut().enumerate() {
                let sg = &mut scores[g * ctx..(g + 1) * ctx];
                let max = sg.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                for s in sg.iter_mut() {
                    *s = (*s - max).exp();
                    *sum += *s;
                }
            }
            out[first * d..(first + group) * d].fill(0.0);
            let mut p = 0;
            for (i, &b) in blocks.iter().enumerate() {
                let base = l.plane_offset(b, self.layer, 1) + kv_off;
                for r in 0..(ctx - i * bs).min(bs) {
                    let v_row = &pool[base + r * re..][..d];
                    for (g, sum) in sums.iter().enumerate() {
                        let w = scores[g * ctx + p] / sum;
                        out[(first + g) * d..(first + g + 1) * d]
                            .iter_mut()
                            .zip(v_row)
                            .for_each(|(o, v)| *o += w * v);
                    }
                    p += 1;
                }
            }
        }
    }
}

/// A dot product written so the compiler vectorizes it (eight independent
/// partial sums instead of one serial chain).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    acc.iter().sum::<f32>() + tail
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
                view.decode_attention(self.pool, ctx, qs, heads, scale as f32, os);
            } else if chunk.cached == 0 {
                // Nothing cached: the new rows are the whole context, no gather needed.
                let rows_of = |x: &Tensor| x.narrow(0, o, chunk.new);
                let a = attention::attend(&rows_of(q)?, &rows_of(k)?, &rows_of(v)?, 0, scale)?;
                out[rows.start * qe..rows.end * qe].copy_from_slice(&a.flatten_all()?.to_vec1::<f32>()?);
            } else {
                let cpu = Device::Cpu;
                let kt = Tensor::from_vec(view.gather_rows(self.pool, 0, ctx), (ctx, l.kv_heads, d), &cpu)?;
                let vt = Tensor::from_vec(view.gather_rows(self.pool, 1, ctx), (ctx, l.kv_heads, d), &cpu)?;
                let qt = Tensor::from_vec(qv[rows.start * qe..rows.end * qe].to_vec(), (chunk.new, heads, d), &cpu)?;
                let a = attention::attend(&qt, &kt, &vt, chunk.cached, scale)?;
                out[rows.start * qe..rows.end * qe].copy_from_slice(&a.flatten_all()?.to_vec1::<f32>()?);
            }
        }
        if decodes_together {
            // Every K/V row is written: the pool is only read from here on.
            let pool: &[f32] = &*self.pool;
            let tables = &self.tables;
            out.par_chunks_mut(qe)
                .zip(decode_rows.par_iter())
                .enumerate()
                .for_each(|(row, (os, seq))| {
                    if let Some(i) = *seq {
                        let view = SeqLayer {
                            layout: &l,
                            table: &tables[i],
                            layer,
                        };
                        let chunk = batch.seqs()[i];
                        let qs = &qv[row * qe..(row + 1) * qe];
                        view.decode_attention(pool, chunk.cached + 1, qs, heads, scale as f32, os);
                    }
                });
        }
        Ok(Tensor::from_vec(out, (t, qe), q.device())?.to_dtype(q.dtype())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
