//! The paged K/V store on a CUDA device: hearth's own kernels in
//! `kernels/paged_attention.cu` (compiled to PTX by `build.rs`) write new K/V
//! rows into the block pool and attend through each sequence's block table.
//!
//! Same pool layout, K/V types (f32, f16, bf16; not q8_0) and block-table contract as the
//! CPU store ([`super::paged`]), so a block's bytes are the same in VRAM, in RAM and in a
//! cache file; the CPU store is the reference the GPU tests compare against.
//!
//! A prefill (a sequence with at least [`GATHERED_FROM`] new tokens) is attended by matrix
//! products instead: its K/V gathered out of the pool as f32 (`gather_kv_*`), then
//! [`super::attention::attend`] on cuBLAS, its queries in chunks; decode steps and short
//! chunks keep the one-pass kernel (vLLM likewise runs prefills through a flash-attention
//! kernel and decodes through paged attention).
//!
//! Invariant: the forward never reads a block still arriving. Copies into the pool that run
//! on another stream (the host tier's promotions, `runtime`) hand the pool an event with
//! [`CudaPool::arriving`]; the next [`KvStore::attend`] makes the compute stream wait on it
//! before its first kernel, so the forward's work before attention (embeddings, norms, the
//! first projections) overlaps the copy.
//!
//! Counterpart: vLLM's `reshape_and_cache` + `paged_attention_v1` launchers;
//! mistral.rs's paged-attention wrappers.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaEvent, CudaSlice, LaunchArgs, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorage, WrapErr};
use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, DType, Shape, Storage, Tensor};

use super::kernel_args::{attention_shared_bytes, KernelArgs, LayerGeometry, MAX_HEAD_DIM, THREADS};
use super::{Attend, BatchLayout, KvDtype, KvStore, OpsError, PagedLayout, SeqChunk};

const MODULE: &str = "hearth_paged_attention";
/// New tokens of one sequence from which its attention is computed by matrix products over its
/// gathered K/V rather than by the one-pass kernel (which reads every K/V row once per query
/// and head: an 8,192-token prefill of a 1B model took 8.8 s on an H200, 2026-12-04).
const GATHERED_FROM: usize = 64;
/// Most attention scores (heads × queries × keys) one gathered product makes: 128 MiB of f32,
/// with the mask, softmax and products beside it well under a desktop GPU's spare memory.
const MAX_SCORES: usize = 1 << 25;
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/paged_attention.ptx"));

/// The kernels' name suffix for `dtype`, or why the CUDA store cannot hold it.
fn kernel_suffix(dtype: KvDtype) -> Result<&'static str, OpsError> {
    match dtype {
        KvDtype::F32 => Ok("f32"),
        KvDtype::F16 => Ok("f16"),
        KvDtype::Bf16 => Ok("bf16"),
        KvDtype::Q8_0 => Err(OpsError::Layout(
            "K/V type q8_0 is not supported on CUDA (its kernels store f16, bf16 or f32); \
             set cache.kv_dtype to f16 or bf16"
                .into(),
        )),
    }
}

/// Pushes the arguments every kernel takes after its buffers, in their order: where the layer
/// starts in a block, a block's values, the block size, the K/V heads, a head's width.
fn push_geometry<'a>(b: &mut LaunchArgs<'a>, g: &'a LayerGeometry) {
    b.arg(&g.layer_offset);
    b.arg(&g.block_elems);
    b.arg(&g.block_size);
    b.arg(&g.kv_heads);
    b.arg(&g.head_dim);
}

/// `slice` on `dev` as an f32 tensor of `shape`.
fn tensor_of(slice: CudaSlice<f32>, dev: &CudaDevice, shape: impl Into<Shape>) -> Tensor {
    let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev.clone()));
    Tensor::from_storage(storage, shape, BackpropOp::none(), false)
}

/// A device pool of blocks, as bytes in the layout's K/V type.
pub struct CudaPool {
    pub data: CudaSlice<u8>,
    pub layout: PagedLayout,
    pub device: CudaDevice,
    /// Recorded after the last copies into the pool issued on another stream; the compute
    /// stream waits on it before it next touches the pool.
    arriving: Option<CudaEvent>,
    /// New tokens from which a sequence is attended by gathered products: [`GATHERED_FROM`],
    /// or never where `HEARTH_CUDA_ATTENTION=kernel` (read once, here: a diagnostic, so that
    /// one run on a GPU can set the two paths side by side).
    gathered_from: usize,
}

impl CudaPool {
    /// Allocates `blocks` zeroed blocks on `device`. K/V in f32, f16 or bf16; q8_0, or a head
    /// larger than the kernel holds, is an error naming it.
    pub fn new(device: &CudaDevice, layout: PagedLayout, blocks: usize) -> Result<Self, OpsError> {
        kernel_suffix(layout.dtype)?;
        let widest = layout.shape().max_head_dim();
        if widest > MAX_HEAD_DIM {
            return Err(OpsError::Layout(format!(
                "a head of {widest} values is larger than the CUDA attention kernel holds ({MAX_HEAD_DIM})"
            )));
        }
        // Every layer's offset and the block's length must fit the kernels' ints.
        for layer in 0..layout.layers() {
            LayerGeometry::of(&layout, layer)?;
        }
        let data = device.alloc_zeros::<u8>(blocks * layout.block_len())?;
        let gathered_from = match std::env::var("HEARTH_CUDA_ATTENTION").as_deref() {
            Ok("kernel") => usize::MAX,
            _ => GATHERED_FROM,
        };
        Ok(Self {
            data,
            layout,
            device: device.clone(),
            arriving: None,
            gathered_from,
        })
    }

    pub fn blocks(&self) -> usize {
        self.data.len() / self.layout.block_len().max(1)
    }

    /// Marks copies into the pool issued on another stream: `done` is recorded after them.
    pub fn arriving(&mut self, done: CudaEvent) {
        self.arriving = Some(done);
    }

    /// Makes the compute stream wait for the copies last handed to [`Self::arriving`] (once
    /// they are done, waiting again costs nothing). Everything that touches the pool on the
    /// compute stream calls it first.
    pub fn settle(&self) -> Result<(), OpsError> {
        if let Some(done) = &self.arriving {
            self.device.cuda_stream().wait(done).w()?;
        }
        Ok(())
    }
}

/// A [`KvStore`] over a [`CudaPool`]: sequence `i` of the batch uses `tables[i]`.
pub struct CudaPagedKvBatch<'a> {
    pool: &'a mut CudaPool,
    tables: Vec<Vec<u32>>,
}

impl<'a> CudaPagedKvBatch<'a> {
    pub fn new(pool: &'a mut CudaPool, tables: Vec<Vec<u32>>) -> Self {
        Self { pool, tables }
    }
}

/// The contiguous f32 device slice behind `t`.
fn slice_of(t: &Tensor) -> Result<CudaSlice<f32>, OpsError> {
    let t = t.to_dtype(DType::F32)?.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(s) = &*storage else {
        return Err(OpsError::Layout(
            "the CUDA K/V store got a tensor that is not on a CUDA device".into(),
        ));
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        return Err(OpsError::Layout("expected a contiguous tensor".into()));
    };
    let dev = s.device().clone();
    let src = s.as_cuda_slice::<f32>()?.slice(start..end);
    // SAFETY: every element is written by the copy below before any read.
    let mut dst = unsafe { dev.alloc::<f32>(end - start)? };
    dev.cuda_stream().memcpy_dtod(&src, &mut dst).w()?;
    Ok(dst)
}

impl KvStore for CudaPagedKvBatch<'_> {
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

impl CudaPagedKvBatch<'_> {
    /// [`KvStore::attend`], writing `kv`'s rows first where given. A sequence with many new
    /// tokens (a prefill) is attended by matrix products over its gathered K/V
    /// ([`Self::gathered`]); the others, and every sequence of a batch with none such, by the
    /// one-pass kernel.
    fn attend_rows(
        &mut self,
        layer: usize,
        q: &Tensor,
        kv: Option<(&Tensor, &Tensor)>,
        batch: &BatchLayout,
        how: Attend<'_>,
    ) -> Result<Tensor, OpsError> {
        let l = self.pool.layout.clone();
        let (t, _, _) = super::paged::check_batch(&l, layer, q, kv.map(|(k, _)| k), batch, &self.tables)?;
        let args = KernelArgs::new(&l, batch, &self.tables, self.pool.blocks(), how.window)?;
        how.check_per_head(q.dim(1)?)?;
        self.pool.settle()?;
        if let Some((k, v)) = kv {
            self.write(layer, k, v, &args, t)?;
        }
        // ALiBi's biases are built on the host, one per head, query and key: the kernel adds them itself.
        let gathered_from = self.pool.gathered_from;
        let long = |s: &SeqChunk| s.new >= gathered_from && how.alibi.is_none();
        if !batch.seqs().iter().any(long) {
            return self.kernel_attention(layer, q, &args, how);
        }
        let mut outs = Vec::with_capacity(batch.len());
        for (i, s) in batch.seqs().iter().enumerate() {
            let rows = q.narrow(0, batch.offset(i), s.new)?;
            if long(s) {
                outs.push(self.gathered(layer, &rows, i, *s, how)?.to_dtype(q.dtype())?);
            } else {
                let one = BatchLayout::single(s.cached, s.new)?;
                let args = KernelArgs::new(&l, &one, &self.tables[i..=i], self.pool.blocks(), how.window)?;
                outs.push(self.kernel_attention(layer, &rows, &args, how)?);
            }
        }
        Ok(Tensor::cat(&outs, 0)?)
    }

    /// Writes the new K/V rows (`[t, kv_heads, head_dim]`) into their slots.
    fn write(&mut self, layer: usize, k: &Tensor, v: &Tensor, args: &KernelArgs, t: usize) -> Result<(), OpsError> {
        let l = &self.pool.layout;
        let g = LayerGeometry::of(l, layer)?;
        let suffix = kernel_suffix(l.dtype)?;
        let dev = self.pool.device.clone();
        let stream = dev.cuda_stream();
        let (ks, vs) = (slice_of(k)?, slice_of(v)?);
        let slots = stream.clone_htod(&args.slots).w()?;
        let write = dev.get_or_load_custom_func(&format!("write_kv_{suffix}"), MODULE, PTX)?;
        let mut b = write.builder();
        b.arg(&mut self.pool.data);
        b.arg(&ks);
        b.arg(&vs);
        b.arg(&slots);
        push_geometry(&mut b, &g);
        b.arg(&g.v_plane);
        let cfg = LaunchConfig {
            grid_dim: (t as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: argument types and order match `write_kv_*` (the pool's bytes are the
        // kernel's `T *`, in the type its suffix names); every slot
        // was checked to lie inside the pool.
        unsafe { b.launch(cfg) }.w()?;
        Ok(())
    }

    /// The one-pass kernel's attention of `q` (`[t, heads, head_dim]`, the tokens `args` lists)
    /// over the pool: `[t, heads * head_dim]`.
    fn kernel_attention(&mut self, layer: usize, q: &Tensor, args: &KernelArgs, how: Attend<'_>) -> Result<Tensor, OpsError> {
        let l = &self.pool.layout;
        let (t, heads, d) = q.dims3()?;
        let g = LayerGeometry::of(l, layer)?;
        let suffix = kernel_suffix(l.dtype)?;
        let dev = self.pool.device.clone();
        let stream = dev.cuda_stream();
        let qs = slice_of(q)?;
        let tables = stream.clone_htod(&args.tables).w()?;
        let token_seq = stream.clone_htod(&args.token_seq).w()?;
        let token_pos = stream.clone_htod(&args.token_pos).w()?;
        let heads_i = heads as i32;
        let mut out = dev.alloc_zeros::<f32>(t * heads * d)?;
        let attn = dev.get_or_load_custom_func(&format!("paged_attention_{suffix}"), MODULE, PTX)?;
        let mut b = attn.builder();
        let (max_blocks_i, scale_f, window_i) = (args.max_blocks as i32, how.scale as f32, args.window);
        // 0: no soft cap (the kernel's convention). Without sinks the kernel reads none: one 0.
        let softcap_f = how.softcap.unwrap_or(0.0);
        let sinks = stream.clone_htod(how.sinks.unwrap_or(&[0f32])).w()?;
        let has_sinks_i = i32::from(how.sinks.is_some());
        let alibi = stream.clone_htod(how.alibi.unwrap_or(&[0f32])).w()?;
        let has_alibi_i = i32::from(how.alibi.is_some());
        b.arg(&mut out);
        b.arg(&qs);
        b.arg(&self.pool.data);
        b.arg(&tables);
        b.arg(&token_seq);
        b.arg(&token_pos);
        b.arg(&max_blocks_i);
        push_geometry(&mut b, &g);
        b.arg(&heads_i);
        b.arg(&scale_f);
        b.arg(&window_i);
        b.arg(&softcap_f);
        b.arg(&sinks);
        b.arg(&has_sinks_i);
        b.arg(&alibi);
        b.arg(&has_alibi_i);
        b.arg(&g.v_plane);
        let cfg = LaunchConfig {
            grid_dim: (t as u32, heads as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: attention_shared_bytes(THREADS, d),
        };
        // SAFETY: argument types and order match `paged_attention_*`; the
        // tables, positions and output sizes were built above.
        unsafe { b.launch(cfg) }.w()?;
        Ok(tensor_of(out, &dev, (t, heads * d)).to_dtype(q.dtype())?)
    }

    /// Sequence `seq`'s attention (its new queries `q`, `[s.new, heads, head_dim]`) by matrix
    /// products: its K/V gathered out of the pool as f32 (`gather_kv_*`), then the queries in
    /// chunks of at most [`MAX_SCORES`] scores through [`super::attention::attend`] (cuBLAS
    /// products, the mask built on the device). A prefill's queries share every K/V row, which
    /// the one-pass kernel reads again for each query and head. Returns f32
    /// `[s.new, heads * head_dim]`.
    fn gathered(&mut self, layer: usize, q: &Tensor, seq: usize, s: SeqChunk, how: Attend<'_>) -> Result<Tensor, OpsError> {
        let ctx = s.cached + s.new;
        let (k, v) = self.gather(layer, seq, ctx)?;
        let q = q.to_dtype(DType::F32)?;
        let heads = q.dim(1)?;
        let chunk = (MAX_SCORES / (heads * ctx).max(1)).max(1);
        let mut outs = Vec::with_capacity(s.new.div_ceil(chunk));
        let mut a = 0;
        while a < s.new {
            let b = (a + chunk).min(s.new);
            let end = s.cached + b;
            let (kc, vc) = (k.narrow(0, 0, end)?, v.narrow(0, 0, end)?);
            outs.push(super::attention::attend(&q.narrow(0, a, b - a)?, &kc, &vc, s.cached + a, how)?);
            a = b;
        }
        Ok(Tensor::cat(&outs, 0)?)
    }

    /// Sequence `seq`'s K and V at positions `0 .. ctx` as f32 `[ctx, kv_heads, head_dim]`
    /// views of `[kv_heads, ctx, head_dim]` tensors (each head's rows together, as the
    /// products read them). Where the layer keeps K only, V is K.
    fn gather(&mut self, layer: usize, seq: usize, ctx: usize) -> Result<(Tensor, Tensor), OpsError> {
        let l = &self.pool.layout;
        let g = LayerGeometry::of(l, layer)?;
        let suffix = kernel_suffix(l.dtype)?;
        let dev = self.pool.device.clone();
        let stream = dev.cuda_stream();
        let (kv_heads, d) = (g.kv_heads as usize, g.head_dim as usize);
        let table = self.tables.get(seq).ok_or_else(|| OpsError::Layout(format!("no block table for sequence {seq}")))?;
        let table = stream.clone_htod(table).w()?;
        let n = kv_heads * ctx * d;
        // SAFETY: the kernel writes every value of both (V only where the layer has a V plane,
        // and only then is `v_out` read).
        let mut k_out = unsafe { dev.alloc::<f32>(n)? };
        let mut v_out = unsafe { dev.alloc::<f32>(if g.v_plane == 1 { n } else { 1 })? };
        let ctx_i = i32::try_from(ctx).map_err(|_| OpsError::Layout(format!("a context of {ctx} tokens")))?;
        let gather = dev.get_or_load_custom_func(&format!("gather_kv_{suffix}"), MODULE, PTX)?;
        let mut b = gather.builder();
        b.arg(&mut k_out);
        b.arg(&mut v_out);
        b.arg(&self.pool.data);
        b.arg(&table);
        b.arg(&ctx_i);
        push_geometry(&mut b, &g);
        b.arg(&g.v_plane);
        let cfg = LaunchConfig {
            grid_dim: (ctx as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: argument types and order match `gather_kv_*`; `check_batch` and
        // `KernelArgs::new` checked that the table covers `ctx` positions inside the pool.
        unsafe { b.launch(cfg) }.w()?;
        let tensor = |slice| -> Result<Tensor, OpsError> { Ok(tensor_of(slice, &dev, (kv_heads, ctx, d)).transpose(0, 1)?) };
        let k = tensor(k_out)?;
        let v = if g.v_plane == 1 { tensor(v_out)? } else { k.clone() };
        Ok((k, v))
    }
}
