//! DeepSeek-V2's multi-head latent attention (MLA), as `deepseek2` files run it: DeepSeek-V2
//! and V2-Lite, DeepSeek-V3 and R1, GLM-4.7-Flash, Moonlight, Kimi K2; and MiniCPM3 (`minicpm3`),
//! whose one `attn_kv_b` llama.cpp runs unabsorbed (K and V per head), the same scores.
//!
//! Each token's K and V come from one latent per layer: `attn_kv_a_mqa` projects the normed
//! input to `kv_lora_rank` values (normalized by `attn_kv_a_norm`) and `qk_rope` more, which
//! rope rotates. The cache keeps only that latent (one K/V head of `kv_lora_rank + qk_rope`
//! values, [`MlaParams::latent_width`]), which every query head attends over: K is the latent,
//! V its first `kv_lora_rank` values. ("Absorbed" MLA, llama.cpp's default for these files.)
//!
//! - Q: `attn_q` (V2-Lite), or `attn_q_a`, RMSNorm `attn_q_a_norm`, `attn_q_b`; per head
//!   `qk_nope` values then `qk_rope` rotated ones. Each head's first part is taken into the
//!   latent's space by its slice of `attn_k_b` (`[qk_nope] → [kv_lora_rank]`), so that its dot
//!   product with the latent is the head's `q_nope · k_nope`; its rotated part meets the
//!   latent's rotated part. Scores are scaled by [`MlaParams::score_scale`].
//! - Output: each head's weighted sum of latents (the store returns the whole latent width; the
//!   rotated tail is dropped) is taken out of the latent's space by its slice of `attn_v_b`
//!   (`[kv_lora_rank] → [v_head]`), then `attn_output`.
//! - Older files have one `attn_kv_b` (`[heads · (qk_nope + v_head), kv_lora_rank]`) in place
//!   of `attn_k_b` and `attn_v_b`: it is split into them at load.
//!
//! On the CPU, `attn_k_b` and `attn_v_b` stay quantized, one matmul per head ([`HeadMaps`]), as
//! llama.cpp runs them (its activations quantized as for every other matmul of their type: f32
//! maps would drift from it by more than the other families' tolerance on Q8_0 files); on a
//! GPU, and from an older file's `attn_kv_b`, they are held as f32 and applied as one batched
//! matmul each. The store's V is the whole latent, the values K holds: the K/V shape is
//! [`KvShape::with_v_from_k`](crate::ops::KvShape::with_v_from_k), so the cache holds each
//! token's latent once, as llama.cpp's MLA cache does.
//!
//! Counterpart: llama.cpp's `src/models/deepseek2.cpp` (its `is_mla` branch); vLLM's
//! `MLAAttention`, SGLang's `DeepseekV2AttentionMLA` (`forward_absorb`).

use candle_core::{DType, Device, Tensor};

use super::gguf::GgufFile;
use super::hparams::{HParams, MlaParams};
use super::linear::{FusedLinear, QLinear};
use super::rope::RopeTables;
use super::transformer::{check_shape, load_2d, load_vec};
use super::ModelError;
use crate::ops::norm;
use crate::ops::{Attend, BatchLayout, KvStore, OpsError};

/// One layer's latent attention, its output projection included.
pub struct LatentAttention {
    p: MlaParams,
    heads: usize,
    /// Q's projection (`attn_q`, or `attn_q_a`) and the latent's (`attn_kv_a_mqa`), fused when
    /// their weights share a type.
    q_and_latent: FusedLinear,
    /// With `attn_q_a`: its norm and `attn_q_b`.
    q_b: Option<(Tensor, QLinear)>,
    latent_norm: Tensor,
    maps: HeadMaps,
    wo: QLinear,
    /// Bytes the per-head maps take beyond what the file stores them in (held as f32).
    extra_bytes: u64,
}

impl LatentAttention {
    /// Layer `i`'s tensors (`blk.{i}.attn_*`).
    pub fn load(file: &mut GgufFile, hp: &HParams, i: usize, device: &Device) -> Result<Self, ModelError> {
        let p = hp.mla.ok_or_else(|| OpsError::Layout("latent attention in a model without MLA".into()))?;
        let (d, heads) = (hp.hidden, hp.heads);
        let n = |s: &str| format!("blk.{i}.{s}");
        let q_width = heads * (p.qk_nope + p.qk_rope);
        let latent = load_2d(file, &n("attn_kv_a_mqa.weight"), [p.latent_width(), d], device)?;
        let (q, q_b) = if p.q_lora_rank > 0 {
            let q_a = load_2d(file, &n("attn_q_a.weight"), [p.q_lora_rank, d], device)?;
            let norm = load_vec(file, &n("attn_q_a_norm.weight"), p.q_lora_rank, device)?;
            let q_b = load_2d(file, &n("attn_q_b.weight"), [q_width, p.q_lora_rank], device)?;
            (q_a, Some((norm, QLinear::new(q_b, device)?)))
        } else {
            (load_2d(file, &n("attn_q.weight"), [q_width, d], device)?, None)
        };
        let (maps, extra_bytes) = HeadMaps::load(file, &p, heads, i, device)?;
        Ok(Self {
            p,
            heads,
            q_and_latent: FusedLinear::new(vec![q, latent], device)?,
            q_b,
            latent_norm: load_vec(file, &n("attn_kv_a_norm.weight"), p.kv_lora_rank, device)?,
            maps,
            wo: QLinear::new(load_2d(file, &n("attn_output.weight"), [d, heads * p.v_head], device)?, device)?,
            extra_bytes,
        })
    }

    /// Bytes this layer's weights take in memory beyond the file's (per-head maps held as f32).
    pub fn extra_bytes(&self) -> u64 {
        self.extra_bytes
    }

    /// The attention block's output (`[t, hidden]`, after `attn_output`) for the normed rows
    /// `h` (`[t, hidden]`); the latents go to store layer `layer` of `kv`. `rope`: the tables
    /// and their cos/sin at the batch's positions; `q_scale`: each query's attention
    /// temperature (`[t, 1, 1]`), where the model has one.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        layer: usize,
        h: &Tensor,
        (rope, (cos, sin)): (&RopeTables, &(Tensor, Tensor)),
        q_scale: Option<&Tensor>,
        how: Attend,
        batch: &BatchLayout,
        kv: &mut dyn KvStore,
        eps: f32,
    ) -> Result<Tensor, ModelError> {
        let MlaParams {
            kv_lora_rank: lora,
            qk_nope: nope,
            qk_rope,
            v_head,
            ..
        } = self.p;
        let (t, heads) = (h.dim(0)?, self.heads);
        let mut parts = self.q_and_latent.forward(h)?.into_iter();
        let (Some(q), Some(latent)) = (parts.next(), parts.next()) else {
            return Err(OpsError::Layout("the Q and latent projection gave fewer than two parts".into()).into());
        };
        let q = match &self.q_b {
            Some((n, q_b)) => q_b.forward(&norm::rms_norm(&q.contiguous()?, n, eps)?)?,
            None => q,
        };
        let q = q.reshape((t, heads, nope + qk_rope))?;
        let q_pe = rope.apply(&q.narrow(2, nope, qk_rope)?, cos, sin)?;
        let q_latent = self.maps.to_latent(&q.narrow(2, 0, nope)?)?;
        let mut q = Tensor::cat(&[&q_latent, &q_pe], 2)?.contiguous()?;
        if let Some(s) = q_scale {
            q = q.broadcast_mul(s)?;
        }
        let c = norm::rms_norm(&latent.narrow(1, 0, lora)?.contiguous()?, &self.latent_norm, eps)?;
        let k_pe = rope.apply(&latent.narrow(1, lora, qk_rope)?.reshape((t, 1, qk_rope))?, cos, sin)?;
        let k = Tensor::cat(&[&c.reshape((t, 1, lora))?, &k_pe], 2)?.contiguous()?;
        let out = kv.attend(layer, &q, &k, &k, batch, how)?;
        // Each head's weighted latent, less its rotated tail, out of the latent's space.
        let out = self.maps.out_of_latent(&out.reshape((t, heads, lora + qk_rope))?.narrow(2, 0, lora)?)?;
        self.wo.forward(&out.reshape((t, heads * v_head))?)
    }
}

/// Each head's `q_nope → latent` map (its slice of `attn_k_b`) and `latent → v` map (of
/// `attn_v_b`).
enum HeadMaps {
    /// Per head, quantized as the file stores them: `[kv_lora_rank, qk_nope]` and `[v_head,
    /// kv_lora_rank]` weights (the CPU, with `attn_k_b`/`attn_v_b`).
    PerHead { k_b: Vec<QLinear>, v_b: Vec<QLinear> },
    /// f32, `[heads, qk_nope, kv_lora_rank]` and `[heads, kv_lora_rank, v_head]`: one batched
    /// matmul each (a GPU, or an older file's `attn_kv_b`).
    Batched { k_b: Tensor, v_b: Tensor },
}

impl HeadMaps {
    /// Layer `i`'s maps for `device`, and the bytes they take beyond the file's.
    fn load(file: &mut GgufFile, p: &MlaParams, heads: usize, i: usize, device: &Device) -> Result<(Self, u64), ModelError> {
        let (lora, nope, v) = (p.kv_lora_rank, p.qk_nope, p.v_head);
        let n = |s: &str| format!("blk.{i}.{s}");
        let (k_name, v_name) = (n("attn_k_b.weight"), n("attn_v_b.weight"));
        let split = file.has_tensor(&k_name);
        if split {
            // ggml's `{qk_nope, kv_lora_rank, heads}` and `{kv_lora_rank, v_head, heads}`.
            for (name, dims) in [(&k_name, [heads, lora, nope]), (&v_name, [heads, v, lora])] {
                if let Some(actual) = file.tensor_shape(name) {
                    check_shape(name, &actual, &dims)?;
                }
            }
        }
        if split && device.is_cpu() {
            let per_head = |file: &mut GgufFile, name: &str, rows: usize, cols: usize| -> Result<Vec<QLinear>, ModelError> {
                let parts = file.tensor_row_split(name, &vec![rows; heads], cols, device)?;
                parts.into_iter().map(|w| QLinear::new(w, device)).collect()
            };
            let k_b = per_head(file, &k_name, lora, nope)?;
            let v_b = per_head(file, &v_name, v, lora)?;
            return Ok((Self::PerHead { k_b, v_b }, 0));
        }
        let cpu = Device::Cpu;
        let f32_of = |file: &mut GgufFile, name: &str, shape: &[usize]| -> Result<(Tensor, u64), ModelError> {
            let t = file.tensor(name, &cpu)?;
            check_shape(name, t.shape().dims(), shape)?;
            let stored = file.tensor_bytes(name, device.is_cpu()).unwrap_or(0);
            Ok((t.dequantize(&cpu)?.to_dtype(DType::F32)?, stored))
        };
        let (k_b, v_b, stored) = if split {
            let (k_b, k_bytes) = f32_of(file, &k_name, &[heads, lora, nope])?;
            let (v_b, v_bytes) = f32_of(file, &v_name, &[heads, v, lora])?;
            (k_b.transpose(1, 2)?, v_b.transpose(1, 2)?, k_bytes + v_bytes)
        } else {
            // Each head's `qk_nope` K rows, then its `v_head` V rows.
            let (kv_b, bytes) = f32_of(file, &n("attn_kv_b.weight"), &[heads * (nope + v), lora])?;
            let kv_b = kv_b.reshape((heads, nope + v, lora))?;
            (kv_b.narrow(1, 0, nope)?, kv_b.narrow(1, nope, v)?.transpose(1, 2)?, bytes)
        };
        let held = (heads * lora * (nope + v) * 4) as u64;
        let maps = Self::Batched {
            k_b: k_b.contiguous()?.to_device(device)?,
            v_b: v_b.contiguous()?.to_device(device)?,
        };
        Ok((maps, held.saturating_sub(stored)))
    }

    /// `[t, heads, qk_nope]` → `[t, heads, kv_lora_rank]`.
    fn to_latent(&self, q_nope: &Tensor) -> Result<Tensor, ModelError> {
        match self {
            Self::PerHead { k_b, .. } => per_head(k_b, q_nope),
            Self::Batched { k_b, .. } => batched(k_b, q_nope),
        }
    }

    /// `[t, heads, kv_lora_rank]` → `[t, heads, v_head]`.
    fn out_of_latent(&self, latent: &Tensor) -> Result<Tensor, ModelError> {
        match self {
            Self::PerHead { v_b, .. } => per_head(v_b, latent),
            Self::Batched { v_b, .. } => batched(v_b, latent),
        }
    }
}

/// Head `h` of `x` (`[t, heads, in]`) through `maps[h]`: `[t, heads, out]`.
fn per_head(maps: &[QLinear], x: &Tensor) -> Result<Tensor, ModelError> {
    let outs = maps
        .iter()
        .enumerate()
        .map(|(h, m)| m.forward(&x.narrow(1, h, 1)?.squeeze(1)?))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Tensor::stack(&outs, 1)?)
}

/// `x` (`[t, heads, in]`) times `maps` (`[heads, in, out]`): `[t, heads, out]`.
fn batched(maps: &Tensor, x: &Tensor) -> Result<Tensor, ModelError> {
    Ok(x.transpose(0, 1)?.contiguous()?.matmul(maps)?.transpose(0, 1)?)
}
