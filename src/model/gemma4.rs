//! Gemma 4's blocks that no other family has: the per-layer token embedding of its E models
//! (E2B, E4B), its per-layer input into each layer, and the 26B-A4B's feed-forward of a dense
//! MLP beside routed experts.
//!
//! - [`PerLayerEmbedding`]: each token's `layers × width` inputs, one slice per layer: its row
//!   of `per_layer_token_embd` times `√width`, plus the scaled embedding projected by
//!   `per_layer_model_proj` times `1/√hidden` and normalized per layer slice
//!   (`per_layer_proj_norm`), the sum times `1/√2` (llama.cpp's `project_per_layer_inputs`).
//!   The table is the E models' bulk (E4B: 262,144 × 42 × 256): it stays in host memory,
//!   quantized, as the token embedding does.
//! - [`PerLayerInput`]: after a layer's MLP, `x + norm(proj(gelu(gate(x)) · input))`
//!   (`inp_gate`, `proj`, `post_norm`).
//! - [`DenseAndExperts`]: `norm₁(mlp(ffn_norm(x))) + norm₂(experts(pre_norm₂(x)))`, the
//!   router scoring `rms(x) / √hidden · ffn_gate_inp.scale` (softmax, top k, renormalized,
//!   each expert's output scaled by `ffn_down_exps.scale`).
//!
//! Counterpart: llama.cpp's `src/models/gemma4.cpp`; Hugging Face's `Gemma4TextModel`.

use candle_core::{Device, Tensor};

use super::block_norm::BlockNorm;
use super::embedding::TokenEmbedding;
use super::gguf::GgufFile;
use super::hparams::HParams;
use super::linear::QLinear;
use super::moe::MoeMlp;
use super::transformer::{load_2d, load_vec};
use super::ModelError;
use crate::ops::glu::{self, Gate};
use crate::ops::norm;

/// The per-layer token embedding and its projection of the hidden state.
pub struct PerLayerEmbedding {
    table: TokenEmbedding,
    proj: QLinear,
    norm: Tensor,
    layers: usize,
    width: usize,
}

impl PerLayerEmbedding {
    /// `per_layer_token_embd` (host), `per_layer_model_proj` and `per_layer_proj_norm`, when
    /// `hp` has a per-layer input.
    pub fn load(file: &mut GgufFile, hp: &HParams, device: &Device) -> Result<Option<Self>, ModelError> {
        let (layers, width) = (hp.layers, hp.per_layer_input);
        if width == 0 {
            return Ok(None);
        }
        let table = load_2d(file, "per_layer_token_embd.weight", [hp.vocab_size, layers * width], &Device::Cpu)?;
        let proj = load_2d(file, "per_layer_model_proj.weight", [layers * width, hp.hidden], device)?;
        Ok(Some(Self {
            table: TokenEmbedding::new(&table)?,
            proj: QLinear::new(proj, device)?,
            norm: load_vec(file, "per_layer_proj_norm.weight", width, device)?,
            layers,
            width,
        }))
    }

    /// Bytes of the table, which stays in host memory.
    pub fn table_bytes(&self) -> u64 {
        self.table.file_bytes()
    }

    /// Every layer's input for `tokens`, whose scaled embeddings are `x` (`[t, hidden]`):
    /// `[t, layers, width]`.
    pub fn inputs(&self, tokens: &[u32], x: &Tensor, eps: f64) -> Result<Tensor, ModelError> {
        let t = tokens.len();
        let (l, w) = (self.layers, self.width);
        let own = self
            .table
            .lookup(tokens, x.device())?
            .affine((w as f64).sqrt(), 0.0)?
            .reshape((t, l, w))?;
        let hidden = x.dim(1)?;
        let projected = self.proj.forward(x)?.affine(1.0 / (hidden as f64).sqrt(), 0.0)?.reshape((t, l, w))?;
        let projected = norm::rms_norm(&projected.contiguous()?, &self.norm, eps as f32)?;
        Ok((projected + own)?.affine(std::f64::consts::FRAC_1_SQRT_2, 0.0)?)
    }
}

/// Layer `layer`'s slice (`[t, width]`) of every layer's inputs (`[t, layers, width]`, as
/// [`PerLayerEmbedding::inputs`] gives them).
pub fn layer_input(inputs: &Tensor, layer: usize) -> Result<Tensor, ModelError> {
    Ok(inputs.narrow(1, layer, 1)?.squeeze(1)?.contiguous()?)
}

/// A layer's gate into and projection out of its per-layer input.
pub struct PerLayerInput {
    gate: QLinear,
    proj: QLinear,
    post_norm: Tensor,
}

impl PerLayerInput {
    /// Layer `i`'s `inp_gate`, `proj` and `post_norm`, when `hp` has a per-layer input.
    pub fn load(file: &mut GgufFile, hp: &HParams, i: usize, device: &Device) -> Result<Option<Self>, ModelError> {
        let (d, w) = (hp.hidden, hp.per_layer_input);
        if w == 0 {
            return Ok(None);
        }
        let n = |s: &str| format!("blk.{i}.{s}");
        Ok(Some(Self {
            gate: QLinear::new(load_2d(file, &n("inp_gate.weight"), [w, d], device)?, device)?,
            proj: QLinear::new(load_2d(file, &n("proj.weight"), [d, w], device)?, device)?,
            post_norm: load_vec(file, &n("post_norm.weight"), d, device)?,
        }))
    }

    /// `x` (`[t, hidden]`) plus what its input (`[t, width]`) adds.
    pub fn forward(&self, x: &Tensor, input: &Tensor, eps: f64) -> Result<Tensor, ModelError> {
        Ok((x + self.added(x, input, eps)?)?)
    }

    /// What the layer's input (`[t, width]`), gated by `x` (`[t, hidden]`), adds:
    /// `norm(proj(gelu(gate(x)) · input))` (Gemma 3n adds it to AltUp's other streams).
    pub fn added(&self, x: &Tensor, input: &Tensor, eps: f64) -> Result<Tensor, ModelError> {
        let gated = glu::gated(&self.gate.forward(x)?, input, Gate::GeluTanh)?;
        Ok(norm::rms_norm(&self.proj.forward(&gated)?, &self.post_norm, eps as f32)?)
    }
}

/// The 26B-A4B's feed-forward: a dense MLP beside routed experts, each normalized.
pub struct DenseAndExperts {
    dense: super::transformer::Mlp,
    experts: MoeMlp,
    /// Of the dense MLP's output, and of the experts'.
    post_norms: [Tensor; 2],
    /// The experts' input norm.
    pre_norm: Tensor,
    /// Multiplies the router's normalized input.
    router_scale: Tensor,
}

impl DenseAndExperts {
    pub fn load(
        file: &mut GgufFile,
        hp: &HParams,
        i: usize,
        dense: super::transformer::Mlp,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let d = hp.hidden;
        let n = |s: &str| format!("blk.{i}.{s}");
        let p = hp.moe.as_ref().ok_or_else(|| ModelError::MissingMetadata {
            key: "gemma4.expert_count".into(),
        })?;
        Ok(Self {
            dense,
            experts: MoeMlp::load(file, i, d, p, device)?,
            post_norms: [
                load_vec(file, &n("post_ffw_norm_1.weight"), d, device)?,
                load_vec(file, &n("post_ffw_norm_2.weight"), d, device)?,
            ],
            pre_norm: load_vec(file, &n("pre_ffw_norm_2.weight"), d, device)?,
            router_scale: load_vec(file, &n("ffn_gate_inp.scale"), d, device)?,
        })
    }

    /// `x`: the layer's residual stream after attention; `ffn_norm`: the dense MLP's input norm.
    pub(super) fn forward(&self, x: &Tensor, ffn_norm: &BlockNorm, eps: f64, act: Gate) -> Result<Tensor, ModelError> {
        let eps32 = eps as f32;
        let dense = self.dense.forward(&ffn_norm.forward(x)?, act)?;
        let dense = norm::rms_norm(&dense, &self.post_norms[0], eps32)?;
        let hidden = x.dim(1)?;
        let scale = self.router_scale.affine(1.0 / (hidden as f64).sqrt(), 0.0)?;
        let router_in = norm::rms_norm(x, &scale, eps32)?;
        let h = norm::rms_norm(x, &self.pre_norm, eps32)?;
        let routed = self.experts.forward_routed(&h, &router_in, act)?;
        Ok((dense + norm::rms_norm(&routed, &self.post_norms[1], eps32)?)?)
    }
}
