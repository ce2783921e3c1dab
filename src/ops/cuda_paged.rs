//! The paged K/V store on a CUDA device: hearth's own kernels in
//! `kernels/paged_attention.cu` (compiled to PTX by `build.rs`) write new K/V
//! rows into the block pool and attend through each sequence's block table.
//!
//! Same pool layout, K/V types (f32, f16, bf16; not q8_0) and block-table contract as the
//! CPU store ([`super::paged`]), so a block's bytes are the same in VRAM, in RAM and in a
//! cache file; the CPU store is the reference the GPU tests compare against.
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
use candle_core::cuda_backend::cudarc::driver::{CudaEvent, CudaSlice, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorage, WrapErr};
use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, DType, Storage, Tensor};

use super::kernel_args::{attention_shared_bytes, KernelArgs, LayerGeometry, MAX_HEAD_DIM, THREADS};
use super::{Attend, BatchLayout, KvDtype, KvStore, OpsError, PagedLayout};

const MODULE: &str = "hearth_paged_attention";
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

/// A device pool of blocks, as bytes in the layout's K/V type.
pub struct CudaPool {
    pub data: CudaSlice<u8>,
    pub layout: PagedLayout,
    pub device: CudaDevice,
    /// Recorded after the last copies into the pool issued on another stream; the compute
    /// stream waits on it before it next touches the pool.
    arriving: Option<CudaEvent>,
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
        Ok(Self {
            data,
            layout,
            device: device.clone(),
            arriving: None,
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
        let l = self.pool.layout.clone();
        let (t, heads, d) = super::paged::check_batch(&l, layer, q, kv.map(|(k, _)| k), batch, &self.tables)?;
        let g = LayerGeometry::of(&l, layer)?;
        let args = KernelArgs::new(&l, batch, &self.tables, self.pool.blocks(), how.window)?;
        let suffix = kernel_suffix(l.dtype)?;
        self.pool.settle()?;
        let dev = self.pool.device.clone();
        let stream = dev.cuda_stream();
        let qs = slice_of(q)?;
        let tables = stream.clone_htod(&args.tables).w()?;
        let token_seq = stream.clone_htod(&args.token_seq).w()?;
        let token_pos = stream.clone_htod(&args.token_pos).w()?;
        let (layer_i, block_i, bs_i, kvh_i, d_i, heads_i, v_plane_i) =
            (g.layer_offset, g.block_elems, l.block_size as i32, g.kv_heads, g.head_dim, heads as i32, g.v_plane);

        if let Some((k, v)) = kv {
            let (ks, vs) = (slice_of(k)?, slice_of(v)?);
            let slots = stream.clone_htod(&args.slots).w()?;
            let write = dev.get_or_load_custom_func(&format!("write_kv_{suffix}"), MODULE, PTX)?;
            let mut b = write.builder();
            b.arg(&mut self.pool.data);
            b.arg(&ks);
            b.arg(&vs);
            b.arg(&slots);
            b.arg(&layer_i);
            b.arg(&block_i);
            b.arg(&bs_i);
            b.arg(&kvh_i);
            b.arg(&d_i);
            b.arg(&v_plane_i);
            let cfg = LaunchConfig {
                grid_dim: (t as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: argument types and order match `write_kv_*` (the pool's bytes are the
            // kernel's `T *`, in the type its suffix names); every slot
            // was checked to lie inside the pool.
            unsafe { b.launch(cfg) }.w()?;
        }

        let mut out = dev.alloc_zeros::<f32>(t * heads * d)?;
        let attn = dev.get_or_load_custom_func(&format!("paged_attention_{suffix}"), MODULE, PTX)?;
        let mut b = attn.builder();
        let (max_blocks_i, scale_f, window_i) = (args.max_blocks as i32, scale as f32, args.window);
        // 0: no soft cap (the kernel's convention). Without sinks the kernel reads none: one 0.
        let softcap_f = how.softcap.unwrap_or(0.0);
        how.check_per_head(heads)?;
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
        b.arg(&layer_i);
        b.arg(&block_i);
        b.arg(&bs_i);
        b.arg(&kvh_i);
        b.arg(&d_i);
        b.arg(&heads_i);
        b.arg(&scale_f);
        b.arg(&window_i);
        b.arg(&softcap_f);
        b.arg(&sinks);
        b.arg(&has_sinks_i);
        b.arg(&alibi);
        b.arg(&has_alibi_i);
        b.arg(&v_plane_i);
        let cfg = LaunchConfig {
            grid_dim: (t as u32, heads as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: attention_shared_bytes(THREADS, d),
        };
        // SAFETY: argument types and order match `paged_attention_*`; the
        // tables, positions and output sizes were built above.
        unsafe { b.launch(cfg) }.w()?;
        let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(out, dev));
        Ok(Tensor::from_storage(storage, (t, heads * d), BackpropOp::none(), false).to_dtype(q.dtype())?)
    }
}
