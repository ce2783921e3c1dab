//! The host tier on CUDA: page-locked RAM, and the stream its blocks move on.
//!
//! Invariants:
//! - Demotions and promotions run asynchronously on `copy`, a stream of their own. Before
//!   them the copy stream waits for the compute stream's work so far (a demoted block was
//!   written by the forward); after them the pool is handed an event
//!   ([`CudaPool::arriving`]) that the compute stream waits on before it next touches the
//!   pool. So compute never reads a block still arriving nor overwrites one still leaving,
//!   and what the forward does before its first attention overlaps the copies.
//! - The CPU touches the pinned bytes only once `done` (recorded after the last copies) has
//!   completed: a host block is never read while arriving nor rewritten while leaving.
//! - Consecutive blocks move as one copy ([`super::runs`]).
//!
//! Counterpart: vLLM's `CacheEngine.swap_in` / `swap_out` on its own CUDA stream; SGLang's
//! HiCache `HostKVCache` with its load and write streams and events; LMCache's pinned buffers.

use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{CudaEvent, CudaStream, DriverError, PinnedHostSlice};
use candle_core::CudaDevice;

use super::runs::copy_runs;
use super::RuntimeError;
use crate::kv::CopyPlan;
use crate::ops::cuda_paged::CudaPool;

fn device_error(e: DriverError) -> RuntimeError {
    RuntimeError::Device(e.to_string())
}

/// Pinned host blocks and the copy stream.
pub struct PinnedHost {
    buf: PinnedHostSlice<u8>,
    copy: Arc<CudaStream>,
    /// Recorded on `copy` after the last copies issued.
    done: Option<CudaEvent>,
}

impl PinnedHost {
    /// Pins `bytes` of host RAM (all of it now, zeroed) and creates the copy stream.
    pub fn new(device: &CudaDevice, bytes: usize) -> Result<Self, RuntimeError> {
        let compute = device.cuda_stream();
        let ctx = compute.context();
        // SAFETY: the memory is zeroed below before anything reads it. Flags 0: plain
        // page-locked memory, not write-combined (the CPU reads host blocks back for cache files).
        let mut buf = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }.map_err(|e| {
            RuntimeError::Device(format!(
                "could not pin {bytes} bytes of host RAM for the host tier ({e}); lower cache.host_cache_gib"
            ))
        })?;
        buf.as_mut_slice().map_err(device_error)?.fill(0);
        let copy = ctx.new_stream().map_err(device_error)?;
        Ok(Self { buf, copy, done: None })
    }

    pub fn len_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Blocks the calling thread until the copies issued so far are done.
    fn wait(&self) -> Result<(), RuntimeError> {
        if let Some(done) = &self.done {
            done.synchronize().map_err(device_error)?;
        }
        Ok(())
    }

    /// The pinned bytes, once no copy is writing them.
    pub fn bytes(&self) -> Result<&[u8], RuntimeError> {
        self.wait()?;
        self.buf.as_slice().map_err(device_error)
    }

    /// The pinned bytes, once no copy is reading or writing them.
    pub fn bytes_mut(&mut self) -> Result<&mut [u8], RuntimeError> {
        self.wait()?;
        self.buf.as_mut_slice().map_err(device_error)
    }

    /// Issues `plan`'s copies (ids already checked) on the copy stream: every demotion, then
    /// every promotion, each run of consecutive blocks as one copy. Returns once they are
    /// queued, not done.
    pub fn execute(&mut self, pool: &mut CudaPool, plan: &CopyPlan) -> Result<(), RuntimeError> {
        if plan.demote.is_empty() && plan.promote.is_empty() {
            return Ok(());
        }
        let bl = pool.layout.block_len();
        let written = pool.device.cuda_stream().record_event(None).map_err(device_error)?;
        self.copy.wait(&written).map_err(device_error)?;
        // The previous plan's copies are on the same stream, so ordered before these; the CPU
        // is not using the bytes (`&mut self`), and `as_mut_slice` returns at once.
        let host = self.buf.as_mut_slice().map_err(device_error)?;
        for run in copy_runs(&plan.demote) {
            let (src, dst) = run.bytes(bl);
            self.copy
                .memcpy_dtoh(&pool.data.slice(src), &mut host[dst])
                .map_err(device_error)?;
        }
        for run in copy_runs(&plan.promote) {
            let (src, dst) = run.bytes(bl);
            self.copy
                .memcpy_htod(&host[src], &mut pool.data.slice_mut(dst))
                .map_err(device_error)?;
        }
        pool.arriving(self.copy.record_event(None).map_err(device_error)?);
        self.done = Some(self.copy.record_event(None).map_err(device_error)?);
        Ok(())
    }
}

impl Drop for PinnedHost {
    /// The pinned buffer is freed only once no copy reads or writes it (cudarc's own event on
    /// the buffer never sees our copies: they take sub-slices of it).
    fn drop(&mut self) {
        if let Some(done) = &self.done {
            let _ = done.synchronize();
        }
    }
}

/// Seconds of the fastest of `repeats` copies of `bytes` from pinned RAM to VRAM, each one
/// plain `cuMemcpyHtoDAsync` on a stream of its own, timed to completion.
pub fn plain_copy_secs(device: &CudaDevice, bytes: usize, repeats: usize) -> Result<f64, RuntimeError> {
    let ctx = device.cuda_stream().context().clone();
    // SAFETY: filled below before it is read.
    let mut src = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }.map_err(device_error)?;
    src.as_mut_slice().map_err(device_error)?.fill(1);
    let stream = ctx.new_stream().map_err(device_error)?;
    let mut dst = stream.alloc_zeros::<u8>(bytes).map_err(device_error)?;
    stream.synchronize().map_err(device_error)?;
    let host = src.as_slice().map_err(device_error)?;
    let mut best = f64::MAX;
    for _ in 0..repeats.max(1) {
        let t = std::time::Instant::now();
        stream.memcpy_htod(host, &mut dst).map_err(device_error)?;
        stream.synchronize().map_err(device_error)?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}
