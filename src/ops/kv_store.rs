//! The interface between the forward and wherever K/V lives.

use candle_core::Tensor;

use super::{BatchLayout, OpsError};

/// The K/V geometry of a model: what a store must hold per token and layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

/// Where the forward writes new K/V and reads past K/V.
///
/// The forward calls [`KvStore::attend`] once per layer, in layer order, with
/// the same [`BatchLayout`] for every layer of one call. Sequence `i` of the
/// layout is the store's sequence `i`.
pub trait KvStore {
    /// Appends `k` and `v` (`[tokens, kv_heads, head_dim]`, packed per `batch`)
    /// at each sequence's position `cached`, then returns causal attention of
    /// `q` (`[tokens, heads, head_dim]`) over that sequence's cached and new
    /// tokens, scaled by `scale`: `[tokens, heads * head_dim]`.
    fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        batch: &BatchLayout,
        scale: f64,
    ) -> Result<Tensor, OpsError>;
}
