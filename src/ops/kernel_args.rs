//! What hearth's CUDA paged K/V kernels (`kernels/paged_attention.cu`) are given for one
//! [`KvStore::attend`](super::KvStore::attend): the flattened block tables, each new token's
//! pool slot, sequence and position, and the launch shape.
//!
//! Built on the host, and compiled on every build (not only with `cuda`): the CUDA store
//! (`super::cuda_paged`) launches with exactly these, and `tests/cuda_kernels_emulated.rs`
//! runs the kernels' own source on the CPU with the same arguments, so the argument building
//! and the kernels' logic are tested where there is no GPU.
//!
//! Invariant: every slot and every table entry lies inside the pool, and each sequence's table
//! covers its context; otherwise nothing is built ([`OpsError::CapacityExceeded`]).
//!
//! Counterpart: vLLM's `slot_mapping`, `block_tables` and `seq_lens` attention metadata.

use super::{BatchLayout, OpsError, PagedLayout, Window};

/// Threads per block of both kernels: whole warps (8).
pub const THREADS: u32 = 256;
/// The largest head the attention kernel holds in a warp's registers (`MAX_DPL` × 32:
/// DeepSeek-V2's latent, 512 values and 64 rotated ones).
pub const MAX_HEAD_DIM: usize = 576;

/// The kernels' arguments for one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelArgs {
    /// Each new token's slot: `block * block_size + row` (`write_kv`'s `slots`).
    pub slots: Vec<u32>,
    /// `[seqs, max_blocks]` block tables, each padded with block 0 past its end.
    pub tables: Vec<u32>,
    pub max_blocks: usize,
    /// Each new token's sequence and position.
    pub token_seq: Vec<u32>,
    pub token_pos: Vec<u32>,
    /// The window: 0 for none, `n > 0` a sliding window of `n` positions, `-n` chunks of `n`.
    pub window: i32,
}

impl KernelArgs {
    /// Builds the arguments of `batch` over `tables` in a pool of `blocks` blocks of `layout`.
    pub fn new(
        layout: &PagedLayout,
        batch: &BatchLayout,
        tables: &[Vec<u32>],
        blocks: usize,
        window: Option<Window>,
    ) -> Result<Self, OpsError> {
        let bad = || OpsError::Layout(format!("a window of {window:?} positions"));
        let window = match window.map(Window::causal) {
            None => 0,
            Some(Window::Sliding(w)) => i32::try_from(w).ok().filter(|&w| w > 0).ok_or_else(bad)?,
            Some(Window::Chunked(c)) => -i32::try_from(c).ok().filter(|&c| c > 0).ok_or_else(bad)?,
            Some(Window::Symmetric(_)) => return Err(bad()),
        };
        let max_blocks = tables.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut flat = vec![0u32; tables.len() * max_blocks];
        let t = batch.total_tokens();
        let (mut slots, mut token_seq, mut token_pos) =
            (Vec::with_capacity(t), Vec::with_capacity(t), Vec::with_capacity(t));
        let bs = layout.block_size;
        for (i, chunk) in batch.seqs().iter().enumerate() {
            let ctx = chunk.cached + chunk.new;
            let table = tables
                .get(i)
                .filter(|table| table.len() * bs >= ctx && table.iter().all(|&b| (b as usize) < blocks))
                .ok_or(OpsError::CapacityExceeded {
                    needed: ctx,
                    capacity: tables.get(i).map_or(0, |table| table.len() * bs),
                })?;
            flat[i * max_blocks..i * max_blocks + table.len()].copy_from_slice(table);
            for p in chunk.cached..ctx {
                slots.push(table[p / bs] * bs as u32 + (p % bs) as u32);
                token_seq.push(i as u32);
                token_pos.push(p as u32);
            }
        }
        Ok(Self {
            slots,
            tables: flat,
            max_blocks,
            token_seq,
            token_pos,
            window,
        })
    }
}

/// Where one layer lies in the pool, in the stored type's values as the kernels count: the
/// offset of its K plane in a block, a block's length, the block size in tokens, its K/V heads
/// and their width (the five arguments every kernel takes in that order). The
/// CUDA pool stores f32, f16 or bf16; q8_0, or a block too long for the kernels' `int`s, is an
/// error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerGeometry {
    pub layer_offset: i32,
    pub block_elems: i32,
    pub block_size: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    /// The plane V is read from: 1, or 0 where V is read from K ([`super::KvShape::v_from_k`]).
    pub v_plane: i32,
}

impl LayerGeometry {
    pub fn of(layout: &PagedLayout, layer: usize) -> Result<Self, OpsError> {
        let value = match layout.dtype {
            super::KvDtype::F32 => 4,
            super::KvDtype::F16 | super::KvDtype::Bf16 => 2,
            super::KvDtype::Q8_0 => return Err(OpsError::Layout("the CUDA kernels store no q8_0".into())),
        };
        if layer >= layout.layers() {
            return Err(OpsError::Layout(format!("layer {layer} of a {}-layer pool", layout.layers())));
        }
        let int = |n: usize, what: &str| {
            i32::try_from(n).map_err(|_| OpsError::Layout(format!("{what} of {n} values is too large for the CUDA kernels")))
        };
        let shape = layout.layer(layer);
        Ok(Self {
            layer_offset: int(layout.layer_offset(layer) / value, "a layer offset")?,
            block_elems: int(layout.block_len() / value, "a block")?,
            block_size: int(layout.block_size, "a block size")?,
            kv_heads: int(shape.kv_heads, "a head count")?,
            head_dim: int(shape.head_dim, "a head")?,
            v_plane: i32::from(!layout.shape().v_from_k()),
        })
    }
}

/// Dynamic shared memory of the attention kernel with `threads` threads and heads of
/// `head_dim`: each warp's running max, sum and weighted sum of V.
pub fn attention_shared_bytes(threads: u32, head_dim: usize) -> u32 {
    ((threads as usize / 32) * (2 + head_dim) * 4) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{KvDtype, SeqChunk};

    fn layout() -> PagedLayout {
        PagedLayout::uniform(1, 1, 4, 4, KvDtype::F32)
    }

    /// Each layer's offset and a block's length in values: f32 counts 4 bytes a value, f16 2.
    #[test]
    fn layer_geometry_counts_values() {
        use crate::ops::{KvShape, LayerKv};
        let layer = |kv_heads, head_dim| LayerKv { kv_heads, head_dim };
        let shape = KvShape::per_layer(vec![layer(2, 64), layer(1, 128), layer(2, 64)]);
        let l = PagedLayout::new(shape.clone(), 4, KvDtype::F16);
        let g = LayerGeometry::of(&l, 2).unwrap();
        assert_eq!((g.layer_offset, g.block_elems, g.kv_heads, g.head_dim, g.v_plane), (2 * 4 * (128 + 128), 3 * 2 * 4 * 128, 2, 64, 1));
        assert_eq!(LayerGeometry::of(&PagedLayout::new(shape.clone(), 4, KvDtype::F32), 2).unwrap(), g);
        assert!(LayerGeometry::of(&l, 3).is_err());
        assert!(LayerGeometry::of(&PagedLayout::new(shape, 8, KvDtype::Q8_0), 0).is_err());
    }

    #[test]
    fn slots_follow_the_tables_and_short_tables_are_refused() {
        let batch = BatchLayout::new(vec![SeqChunk { cached: 3, new: 2 }, SeqChunk { cached: 0, new: 1 }]).unwrap();
        let a = KernelArgs::new(&layout(), &batch, &[vec![7, 2], vec![5]], 8, Some(Window::Sliding(3))).unwrap();
        assert_eq!(a.slots, vec![7 * 4 + 3, 2 * 4, 5 * 4]);
        assert_eq!((a.token_seq, a.token_pos), (vec![0, 0, 1], vec![3, 4, 0]));
        assert_eq!((a.tables, a.max_blocks, a.window), (vec![7, 2, 5, 0], 2, 3));
        // Chunks go to the kernel negated; windows of nothing are refused.
        let chunked = |w| KernelArgs::new(&layout(), &batch, &[vec![7, 2], vec![5]], 8, Some(w));
        assert_eq!(chunked(Window::Chunked(8192)).unwrap().window, -8192);
        assert!(chunked(Window::Chunked(0)).is_err() && chunked(Window::Sliding(0)).is_err());
        // A table one block short, a block outside the pool, a missing table.
        for tables in [vec![vec![7], vec![5]], vec![vec![7, 8], vec![5]], vec![vec![7, 2]]] {
            assert!(matches!(
                KernelArgs::new(&layout(), &batch, &tables, 8, None),
                Err(OpsError::CapacityExceeded { .. })
            ));
        }
    }
}
