//! Attention and the K/V interface the transformer forward runs on.
//!
//! `ops` owns the boundary between the model and wherever K/V lives:
//!
//! - [`BatchLayout`] describes one forward call: several sequences packed along
//!   the token axis (vLLM's "varlen" layout), each with the number of tokens
//!   already in its cache and the number of new tokens in this call.
//! - [`KvStore`] is what the forward calls once per layer: write the new K/V of
//!   every sequence, then attend each sequence's queries over its cached plus new
//!   tokens. The forward never owns a cache; it only holds a `&mut dyn KvStore`.
//! - [`ContiguousKv`] is the simple store: one growable token-major buffer per
//!   sequence and layer. The paged block pool implements the same trait.
//! - [`PagedKvBatch`] is the store over a block pool ([`paged`]): new rows are
//!   written into blocks through each sequence's block table, and decode
//!   attention reads the blocks in place.
//! - [`attention::attend`] is [`ContiguousKv`]'s attention (matmuls over a
//!   whole sequence); the paged store attends row by row (see [`paged`]).
//!
//! Counterpart: vLLM's `AttentionBackend` / `AttentionMetadata`
//! (`query_start_loc`, `seq_lens`), and candle's `candle_nn::kv_cache` without
//! its `Tensor::cat` growth.
//!
//! Invariant: K/V buffers are token-major (`[tokens, kv_heads, head_dim]`), the
//! layout a block of the paged pool has, so moving to blocks changes where the
//! rows live, not how they are read.

pub mod attention;
mod batch;
mod contiguous;
#[cfg(feature = "cuda")]
pub mod cuda_paged;
mod error;
mod fast_math;
pub mod fmatmul;
pub mod glu;
pub mod kernel_args;
mod kv_dtype;
mod kv_store;
pub mod norm;
pub mod paged;
pub mod par;
pub mod qmatmul;
mod row_kernels;

pub use batch::{BatchLayout, SeqChunk};
pub use contiguous::{ContiguousBatch, ContiguousKv};
pub use error::OpsError;
pub use kv_dtype::{KvDtype, Q8_0_GROUP, Q8_0_GROUP_BYTES};
pub use kv_store::{alibi_bias, Attend, KvShape, KvStore, LayerKv, ShiftedLayers, Window};
pub use paged::{PagedKvBatch, PagedLayout};

/// Deterministic test inputs, shared by the unit tests here and the integration tests
/// (`tests/common`), which cannot see a `cfg(test)` module of the library.
#[doc(hidden)]
pub mod test_util {
    /// `n` deterministic values in `[-1, 1)` (xorshift from `seed`).
    pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
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
}
