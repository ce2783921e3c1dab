//! The interface between the forward and wherever K/V lives.

use candle_core::Tensor;

use super::{BatchLayout, KvDtype, OpsError};

/// One layer's K (and V) per token: `kv_heads` heads of `head_dim` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerKv {
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl LayerKv {
    /// Values of one token's K (or V).
    pub fn row_elems(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}

/// The K/V geometry of a model: what a store must hold per token, one [`LayerKv`] per layer
/// that keeps K/V. Most models give every layer the same; Gemma 4's global layers have fewer,
/// wider heads than its local ones.
///
/// Where `v_from_k` (DeepSeek-V2's latent attention: V is the latent K already holds), a
/// store keeps each layer's K only and reads V from it; the caller then passes V equal to K.
///
/// Invariant: at least one layer, and no layer without heads or values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvShape {
    layers: Vec<LayerKv>,
    v_from_k: bool,
}

impl KvShape {
    /// `layers` layers of `kv_heads` heads of `head_dim`.
    pub fn uniform(layers: usize, kv_heads: usize, head_dim: usize) -> Self {
        Self {
            layers: vec![LayerKv { kv_heads, head_dim }; layers],
            v_from_k: false,
        }
    }

    /// One entry per layer, in order.
    pub fn per_layer(layers: Vec<LayerKv>) -> Self {
        Self { layers, v_from_k: false }
    }

    /// The same layers, each keeping K only: V is read from K's rows.
    pub fn with_v_from_k(self) -> Self {
        Self { v_from_k: true, ..self }
    }

    /// Whether V is read from K's rows (one plane per layer, not two).
    pub fn v_from_k(&self) -> bool {
        self.v_from_k
    }

    /// Planes each layer keeps per block: K and V, or K alone.
    pub fn planes(&self) -> usize {
        if self.v_from_k {
            1
        } else {
            2
        }
    }

    /// How many layers keep K/V.
    pub fn layers(&self) -> usize {
        self.layers.len()
    }

    /// Layer `layer`'s shape (`layer` must be below [`Self::layers`]).
    pub fn layer(&self, layer: usize) -> LayerKv {
        self.layers[layer]
    }

    /// Every layer's shape, in order.
    pub fn iter(&self) -> impl Iterator<Item = LayerKv> + '_ {
        self.layers.iter().copied()
    }

    /// The one shape every layer has, if they all have the same.
    pub fn uniform_layer(&self) -> Option<LayerKv> {
        let first = *self.layers.first()?;
        self.layers.iter().all(|l| *l == first).then_some(first)
    }

    /// Whether every layer's heads can be stored as `dtype` (q8_0 needs whole 32-value groups);
    /// the reason when not.
    pub fn check_dtype(&self, dtype: KvDtype) -> Result<(), String> {
        self.iter().try_for_each(|l| dtype.check_head_dim(l.head_dim))
    }

    /// The widest head of any layer.
    pub fn max_head_dim(&self) -> usize {
        self.iter().map(|l| l.head_dim).max().unwrap_or(0)
    }
}

/// How one layer attends: the scale of `q · k`, for a sliding-window layer its window, for a
/// soft-capped model its cap, and for a model with attention sinks its sink logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attend<'a> {
    pub scale: f64,
    /// `Some(w)`: a query at position `p` sees the positions `w` leaves it only (a sliding
    /// window, Gemma's local layers; a chunk, Llama 4's). `None`: all of `0 ..= p`.
    pub window: Option<Window>,
    /// `Some(c)`: each scaled score `s` becomes `c · tanh(s / c)` before the softmax (Gemma 2's
    /// `attn_logit_softcapping`; llama.cpp's `attn_soft_cap`). `None`: scores as they are.
    pub softcap: Option<f32>,
    /// `Some(s)`, one logit per query head (gpt-oss's `attn_sinks`): head `h`'s softmax also
    /// counts a virtual key of score `s[h]` and no value, so its weights sum to
    /// `1 − e^{s[h]}/(e^{s[h]} + Σ e^{score})` instead of 1 (llama.cpp's `ggml_soft_max_add_sinks`;
    /// the maximum taken over the scores and the sink). `None`: a plain softmax.
    pub sinks: Option<&'a [f32]>,
    /// `Some(m)`, one slope per query head (ALiBi: BLOOM's, MPT's, Refact's): head `h`'s
    /// score of the key at position `k` from a query at position `p` gains `m[h] · (k − p)`
    /// after the soft cap, before the softmax (llama.cpp's softmax with `max_bias`, its mask
    /// holding `−|p − k|`). `None`: no position bias.
    pub alibi: Option<&'a [f32]>,
}

impl Attend<'_> {
    /// Plain causal attention with `scale`.
    pub fn causal(scale: f64) -> Self {
        Self {
            scale,
            window: None,
            softcap: None,
            sinks: None,
            alibi: None,
        }
    }

    /// An error unless the sinks and the ALiBi slopes, where there are any, are one per query
    /// head (`heads`): every store checks this before it reads them.
    pub fn check_per_head(&self, heads: usize) -> Result<(), OpsError> {
        for (what, v) in [("attention sinks", self.sinks), ("ALiBi slopes", self.alibi)] {
            if let Some(s) = v.filter(|s| s.len() != heads) {
                return Err(OpsError::Layout(format!("{} {what} for {heads} query heads", s.len())));
            }
        }
        Ok(())
    }

    /// ALiBi's bias of query head `h` at position `pos` for the key at `key` (0 without ALiBi).
    pub fn alibi_bias(&self, h: usize, pos: usize, key: usize) -> f32 {
        match self.alibi {
            Some(m) => alibi_bias(m[h], pos.abs_diff(key)),
            None => 0.0,
        }
    }

    /// The first position a query at `pos` attends to.
    pub fn first_visible(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| w.first_visible(pos))
    }
}

/// The positions a local layer's query sees, up to its own (llama.cpp's `llama_swa_type`): a
/// mask over the same keys, so every token's K/V is stored whatever the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The last `n`: a query at `p` sees `p - n + 1 ..= p` (Gemma's local layers;
    /// `LLAMA_SWA_TYPE_STANDARD`).
    Sliding(usize),
    /// Its own chunk of `n`: a query at `p` sees `⌊p / n⌋ · n ..= p`, so the first query of
    /// each chunk sees itself alone (Llama 4's local layers; `LLAMA_SWA_TYPE_CHUNKED`).
    Chunked(usize),
    /// Half of `n` on either side: a query at `p` sees `p - n/2 ..= p + n/2` (EmbeddingGemma's
    /// local layers, which attend both ways; `LLAMA_SWA_TYPE_SYMMETRIC`). Causally, the last
    /// `n/2 + 1`.
    Symmetric(usize),
}

impl Window {
    /// The first position a query at `pos` attends to (a chunk of 0 taken as 1).
    pub fn first_visible(self, pos: usize) -> usize {
        match self {
            Self::Sliding(n) => (pos + 1).saturating_sub(n),
            Self::Chunked(n) => pos - pos % n.max(1),
            Self::Symmetric(n) => pos.saturating_sub(n / 2),
        }
    }

    /// The last position a query at `pos` attends to where it may see keys after it (an
    /// encoder's): `None` for no bound.
    pub fn last_visible(self, pos: usize) -> Option<usize> {
        match self {
            Self::Symmetric(n) => Some(pos + n / 2),
            Self::Sliding(_) | Self::Chunked(_) => None,
        }
    }

    /// The same positions seen causally as a window of the last `n` (the kernels' form).
    pub fn causal(self) -> Self {
        match self {
            Self::Symmetric(n) => Self::Sliding(n / 2 + 1),
            w => w,
        }
    }
}

/// ALiBi's bias of a head of slope `slope` for a key `distance` positions from its query:
/// `slope · −distance` (llama.cpp's mask holds `−|p − k|`, its softmax multiplies it by the
/// head's slope). The one formula every attention path uses.
#[inline(always)]
pub fn alibi_bias(slope: f32, distance: usize) -> f32 {
    slope * -(distance as f32)
}

/// A store seen with its layers shifted by `offset`: layer `l` here is the inner store's
/// `offset + l`. Nanbeige's looped layers run the same weights again over store layers of their
/// own (each pass's K/V at `pass × kv_layers` on).
pub struct ShiftedLayers<'a> {
    pub inner: &'a mut dyn KvStore,
    pub offset: usize,
}

impl KvStore for ShiftedLayers<'_> {
    fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        batch: &BatchLayout,
        how: Attend<'_>,
    ) -> Result<Tensor, OpsError> {
        self.inner.attend(self.offset + layer, q, k, v, batch, how)
    }

    fn attend_shared(&mut self, layer: usize, q: &Tensor, batch: &BatchLayout, how: Attend<'_>) -> Result<Tensor, OpsError> {
        self.inner.attend_shared(self.offset + layer, q, batch, how)
    }
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
    /// tokens (the last `window` of them, with one), scaled by `how.scale` (soft-capped by
    /// `how.softcap`, biased by `how.alibi`, beside `how.sinks`' virtual keys):
    /// `[tokens, heads * head_dim]`. Every token's K/V is stored whatever the window: the
    /// window is a mask, so a cached prefix serves local and global layers alike.
    fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        batch: &BatchLayout,
        how: Attend<'_>,
    ) -> Result<Tensor, OpsError>;

    /// [`Self::attend`] over the K/V that `layer` already holds for this batch's tokens (an
    /// earlier layer of the same forward wrote them: Gemma 4's layers that share K/V), writing
    /// nothing. A store that cannot says so.
    fn attend_shared(&mut self, layer: usize, q: &Tensor, batch: &BatchLayout, how: Attend<'_>) -> Result<Tensor, OpsError> {
        let _ = (q, batch, how);
        Err(OpsError::Layout(format!(
            "this K/V store cannot read layer {layer}'s K/V for another layer"
        )))
    }
}
