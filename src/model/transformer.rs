//! Our transformer forward: one implementation for every supported family.
//!
//! `forward` takes a packed batch (several sequences of different lengths,
//! see [`BatchLayout`]) and a [`KvStore`]; it never owns a cache. Per layer it
//! computes Q/K/V for all packed rows with one matmul each, applies the
//! family's small differences (bias, q/k norm, rope pairing), and hands Q/K/V
//! to the store, which appends K/V and attends. Only the rows whose logits
//! are wanted go through the output projection.
//!
//! A mixture-of-experts model (Qwen3 MoE, Mixtral, GLM-4.5, gpt-oss) has a router and expert
//! MLPs in place of each MLP ([`MoeMlp`]); everything else is the same forward.
//!
//! Weights stay quantized ([`QLinear`]: our CPU kernels for the hot GGUF
//! types, candle's `QMatMul` otherwise), the token embedding table too
//! ([`TokenEmbedding`]: host memory, rows dequantized per forward); norms and
//! biases are f32. Activations are f32; the MLP's gate is [`glu::gated`].
//!
//! Counterpart: candle-transformers' `quantized_llama.rs` / `quantized_qwen2.rs` /
//! `quantized_qwen3.rs` (same tensors and math, one file instead of three),
//! vLLM's `LlamaModel.forward` over flattened tokens.

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Tensor};

use super::gguf::GgufFile;
use super::hparams::{Family, HParams, LocalRope, RopeScaling};
use super::embedding::TokenEmbedding;
use super::linear::{FusedLinear, QLinear};
use super::moe::MoeMlp;
use super::rope::{positions_tensor, RopeSpec, RopeTables};
use super::ModelError;
use crate::ops::glu::{self, Gate};
use crate::ops::norm;
use crate::ops::{Attend, BatchLayout, KvShape, KvStore, OpsError};

/// Which rows get logits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logits {
    /// The last new token of each sequence: `[sequences, vocab]`.
    LastPerSequence,
    /// Every packed row: `[tokens, vocab]`.
    All,
    /// These packed rows, in this order: `[rows, vocab]`.
    Rows(Vec<u32>),
}

struct Attention {
    /// Q, K and V projections (fused when their weights share a type).
    qkv: FusedLinear,
    wo: QLinear,
    /// Qwen2: biases of the Q/K/V projections.
    bias: Option<[Tensor; 3]>,
    /// Qwen3: RMSNorm over each head's Q and K before rope; OLMo 2 (`qk_norm_whole`): over all
    /// of Q and all of K.
    qk_norm: Option<[Tensor; 2]>,
    qk_norm_whole: bool,
    /// gpt-oss: the output projection's bias.
    out_bias: Option<Tensor>,
    /// gpt-oss: one sink logit per query head ([`Attend::sinks`]), on the host.
    sinks: Option<Vec<f32>>,
}

struct Mlp {
    /// Gate and up projections (fused when their weights share a type).
    gate_up: FusedLinear,
    down: QLinear,
}

/// A layer's feed-forward block.
enum Ffn {
    Dense(Mlp),
    /// Qwen3 MoE, Mixtral: a router over expert MLPs.
    Moe(MoeMlp),
}

impl Ffn {
    fn forward(&self, h: &Tensor, act: Gate) -> Result<Tensor, ModelError> {
        match self {
            Self::Dense(m) => {
                let gu = m.gate_up.forward(h)?;
                m.down.forward(&glu::gated(&gu[0], &gu[1], act)?)
            }
            Self::Moe(m) => m.forward(h, act),
        }
    }
}

struct Layer {
    /// RMSNorm before attention (none in OLMo 2 and EXAONE 4.0, which normalize after).
    attn_norm: Option<Tensor>,
    attn: Attention,
    /// Gemma, OLMo 2, EXAONE 4.0, GLM-4: RMSNorm of the attention output before the residual add.
    post_attn_norm: Option<Tensor>,
    /// RMSNorm before the MLP (none in OLMo 2 and EXAONE 4.0).
    ffn_norm: Option<Tensor>,
    ffn: Ffn,
    /// Gemma, OLMo 2, EXAONE 4.0, GLM-4: RMSNorm of the MLP output before the residual add.
    post_ffn_norm: Option<Tensor>,
}

/// A loaded model: quantized weights and the forward over them.
pub struct Transformer {
    hp: HParams,
    embedding: TokenEmbedding,
    layers: Vec<Layer>,
    norm: Tensor,
    output: QLinear,
    rope: RopeTables,
    /// Gemma: the sliding-window layers' tables (their own base), when they differ from `rope`.
    rope_local: Option<RopeTables>,
    activation: Gate,
    device: Device,
    /// Bytes the weights take in the device's memory (quantized tensors as
    /// stored; on a GPU, without the host-side embedding table).
    weight_bytes: u64,
}

impl std::fmt::Debug for Transformer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transformer")
            .field("hparams", &self.hp)
            .finish_non_exhaustive()
    }
}

impl Transformer {
    /// Loads the weights of `file` onto `device`. `max_positions` sizes the
    /// rope tables (the context length hearth will use).
    pub fn from_gguf(file: &mut GgufFile, device: &Device, max_positions: usize) -> Result<Self, ModelError> {
        let embd_shape = file.tensor_shape("token_embd.weight");
        let hp = HParams::from_metadata(file.metadata(), embd_shape.as_ref().map(|s| s[0]))?;
        let d = hp.hidden;

        // The table stays in host memory, quantized (see `embedding`).
        let embedding_q = load_2d(file, "token_embd.weight", [hp.vocab_size, d], &Device::Cpu)?;
        let cpu = device.is_cpu();
        let file_bytes = file.total_tensor_bytes(cpu);
        let rope_bytes: u64 = ROPE_FACTOR_TENSORS.iter().filter_map(|n| file.tensor_bytes(n, cpu)).sum();
        // Multi-token-prediction blocks stay in the file, unread.
        let mtp_bytes: u64 = (hp.layers..hp.layers + hp.mtp_layers)
            .map(|i| file.tensor_bytes_where(cpu, |name| name.starts_with(&format!("blk.{i}."))))
            .sum();
        let tied = !file.has_tensor("output.weight");
        let (embedding, output) = load_embedding_and_output(file, embedding_q, tied, [hp.vocab_size, d], device)?;
        let embd_bytes = embedding.file_bytes();
        // The rope factors only feed the tables. On the CPU a tied table our kernels do not run
        // is held twice (the rows to look up, candle's copy); on a GPU the lookup table is not
        // in VRAM.
        let weight_bytes = match (device.is_cpu(), tied) {
            (true, true) if !embedding.is_shared() => file_bytes + embd_bytes,
            (false, false) => file_bytes.saturating_sub(embd_bytes),
            _ => file_bytes,
        }
        .saturating_sub(rope_bytes + mtp_bytes);
        let freq_factors = match rope_factors_name(file, &hp, max_positions) {
            Some(name) => {
                let t = file.tensor(name, &Device::Cpu)?;
                check_shape(name, t.shape().dims(), &[hp.rope_dims / 2])?;
                Some(t.dequantize(&Device::Cpu)?.to_dtype(DType::F32)?.to_vec1::<f32>()?)
            }
            None => None,
        };
        let tables = |base: f64, scaling: RopeScaling, attn_factor: f64| {
            let spec = RopeSpec {
                base,
                scaling,
                attn_factor,
                style: hp.rope_style,
            };
            RopeTables::new(hp.rope_dims, spec, freq_factors.as_deref(), max_positions, device)
        };
        let rope = tables(hp.rope_base, hp.rope_scaling, hp.rope_attn_factor)?;
        // Gemma 3's local layers rotate unscaled: the file's scaling (linear ×8 on 4B and up) is
        // the global layers' (llama.cpp's `rope_freq_scale_train_swa` = 1, HF's
        // `rotary_emb_local`); OLMo 3's without the attention factor too. Gemma 2's take the
        // global scaling, and its base unless the file gives them one of their own: then the
        // global tables serve them.
        let rope_local = match &hp.sliding {
            Some(s) if s.rope == LocalRope::Scaled && s.rope_base == hp.rope_base => None,
            Some(s) => Some(match s.rope {
                LocalRope::Scaled => tables(s.rope_base, hp.rope_scaling, hp.rope_attn_factor)?,
                LocalRope::Unscaled => tables(s.rope_base, RopeScaling::None, hp.rope_attn_factor)?,
                LocalRope::Plain => tables(s.rope_base, RopeScaling::None, 1.0)?,
            }),
            None => None,
        };
        let layers = (0..hp.layers)
            .map(|i| load_layer(file, &hp, i, device))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            norm: load_vec(file, "output_norm.weight", d, device)?,
            output,
            embedding,
            layers,
            rope,
            rope_local,
            activation: match hp.family {
                Family::Gemma2 | Family::Gemma3 => Gate::GeluTanh,
                Family::GptOss => Gate::SwigluOai,
                _ => Gate::Silu,
            },
            device: device.clone(),
            weight_bytes,
            hp,
        })
    }

    pub fn hparams(&self) -> &HParams {
        &self.hp
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The K/V geometry a store must provide for this model.
    pub fn kv_shape(&self) -> KvShape {
        self.hp.kv_shape()
    }

    /// Bytes the weights take in memory.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// The longest sequence the rope tables cover.
    pub fn max_positions(&self) -> usize {
        self.rope.max_positions()
    }

    /// Runs `tokens` (packed per `batch`) through the model, appending their
    /// K/V to `kv`, and returns f32 logits for the rows `which` selects.
    pub fn forward(
        &self,
        tokens: &[u32],
        batch: &BatchLayout,
        kv: &mut dyn KvStore,
        which: Logits,
    ) -> Result<Tensor, ModelError> {
        if tokens.len() != batch.total_tokens() {
            return Err(crate::ops::OpsError::Layout(format!(
                "{} tokens for a batch of {}",
                tokens.len(),
                batch.total_tokens()
            ))
            .into());
        }
        ModelError::check_token_ids(tokens, self.hp.vocab_size)?;
        for s in batch.seqs() {
            if s.cached + s.new > self.rope.max_positions() {
                return Err(ModelError::PromptTooLong {
                    tokens: s.cached + s.new,
                    context: self.rope.max_positions(),
                });
            }
        }
        let hp = &self.hp;
        let t = tokens.len();
        let pos = batch.positions();
        let positions = positions_tensor(&pos, &self.device)?;
        // Ministral 3: each query scaled by its position's attention temperature.
        let q_scale = match hp.attn_temperature {
            Some(temp) => {
                let s: Vec<f32> = pos.iter().map(|&p| temp.at(p as usize)).collect();
                Some(Tensor::from_vec(s, (t, 1, 1), &self.device)?)
            }
            None => None,
        };
        let global = self.rope.gather(&positions)?;
        let local = match &self.rope_local {
            Some(r) => Some(r.gather(&positions)?),
            None => None,
        };

        let mut x = self.embedding.lookup(tokens, &self.device)?; // [t, hidden]
        if let Some(s) = hp.embedding_scale {
            x = x.affine(s, 0.0)?;
        }
        for (li, layer) in self.layers.iter().enumerate() {
            let window = hp.window(li);
            let (cos, sin) = match (&local, window) {
                (Some(l), Some(_)) => l,
                _ => &global,
            };
            let h = pre_norm(&x, layer.attn_norm.as_ref(), hp.rms_eps)?;
            let a = &layer.attn;
            let [mut q, mut k, mut v]: [Tensor; 3] = a.qkv.forward(&h)?.try_into().map_err(|_| {
                ModelError::from(OpsError::Layout("the QKV projection did not give three outputs".into()))
            })?;
            if let Some([bq, bk, bv]) = &a.bias {
                q = q.broadcast_add(bq)?;
                k = k.broadcast_add(bk)?;
                v = v.broadcast_add(bv)?;
            }
            if let (Some([qn, kn]), true) = (&a.qk_norm, a.qk_norm_whole) {
                q = norm::rms_norm(&q.contiguous()?, qn, hp.rms_eps as f32)?;
                k = norm::rms_norm(&k.contiguous()?, kn, hp.rms_eps as f32)?;
            }
            let mut q = q.reshape((t, hp.heads, hp.head_dim))?;
            let mut k = k.reshape((t, hp.kv_heads, hp.head_dim))?;
            let v = v.reshape((t, hp.kv_heads, hp.head_dim))?;
            if let (Some([qn, kn]), false) = (&a.qk_norm, a.qk_norm_whole) {
                q = norm::rms_norm(&q.contiguous()?, qn, hp.rms_eps as f32)?;
                k = norm::rms_norm(&k.contiguous()?, kn, hp.rms_eps as f32)?;
            }
            // SmolLM3's NoPE layers (and Granite without rope) take Q and K as they are.
            let rotates = hp.rotates(li);
            if rotates {
                q = self.rope.apply(&q, cos, sin)?;
            }
            if let Some(s) = &q_scale {
                q = q.broadcast_mul(s)?;
            }
            let k = if rotates { self.rope.apply(&k, cos, sin)? } else { k };
            let attn = kv.attend(
                li,
                &q,
                &k,
                &v,
                batch,
                Attend {
                    scale: hp.attention_scale,
                    window,
                    softcap: hp.attn_softcap.map(|c| c as f32),
                    sinks: a.sinks.as_deref(),
                },
            )?;
            let mut attn = a.wo.forward(&attn)?;
            if let Some(b) = &a.out_bias {
                attn = attn.broadcast_add(b)?;
            }
            if let Some(n) = &layer.post_attn_norm {
                attn = norm::rms_norm(&attn, n, hp.rms_eps as f32)?;
            }
            if let Some(s) = hp.residual_scale {
                attn = attn.affine(s, 0.0)?;
            }
            x = (x + attn)?;

            let h = pre_norm(&x, layer.ffn_norm.as_ref(), hp.rms_eps)?;
            let mut mlp = layer.ffn.forward(&h, self.activation)?;
            if let Some(n) = &layer.post_ffn_norm {
                mlp = norm::rms_norm(&mlp, n, hp.rms_eps as f32)?;
            }
            if let Some(s) = hp.residual_scale {
                mlp = mlp.affine(s, 0.0)?;
            }
            x = (x + mlp)?;
        }
        self.logits(x, batch, which)
    }

    /// The logits of the rows of `x` (the last layer's output) that `which` selects.
    fn logits(&self, x: Tensor, batch: &BatchLayout, which: Logits) -> Result<Tensor, ModelError> {
        let x = match which {
            Logits::All => x,
            Logits::LastPerSequence => {
                let rows = Tensor::new(batch.last_rows().as_slice(), &self.device)?;
                x.index_select(&rows, 0)?
            }
            Logits::Rows(rows) => {
                let rows = Tensor::new(rows.as_slice(), &self.device)?;
                x.index_select(&rows, 0)?
            }
        };
        let x = norm::rms_norm(&x, &self.norm, self.hp.rms_eps as f32)?;
        let logits = self.output.forward(&x)?.to_dtype(DType::F32)?;
        // Granite divides its logits by `logit_scale`; Gemma 2 soft-caps them.
        let logits = match self.hp.logit_scale {
            Some(s) => logits.affine(1.0 / s, 0.0)?,
            None => logits,
        };
        Ok(match self.hp.final_softcap {
            Some(c) => crate::ops::attention::soft_cap(&logits, c)?,
            None => logits,
        })
    }
}

/// A block's input: `x` through its RMSNorm `n`, or `x` itself where the family has none
/// (OLMo 2).
fn pre_norm(x: &Tensor, n: Option<&Tensor>, eps: f64) -> Result<Tensor, ModelError> {
    Ok(match n {
        Some(n) => norm::rms_norm(x, n, eps as f32)?,
        None => x.clone(),
    })
}

/// The tensors that hold per-frequency rope divisors: Llama 3.1's, Phi-3's LongRoPE pair.
const ROPE_FACTOR_TENSORS: [&str; 3] = ["rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"];

/// Which rope divisors apply when running `max_positions` positions: `rope_freqs` when the file
/// has it; else Phi-3's long factors beyond `rope.scaling.original_context_length` and its
/// short ones within it (llama.cpp's `get_rope_factors`, by the context it runs).
pub fn rope_factors_name(file: &GgufFile, hp: &HParams, max_positions: usize) -> Option<&'static str> {
    let [freqs, long, short] = ROPE_FACTOR_TENSORS;
    if file.has_tensor(freqs) {
        Some(freqs)
    } else if max_positions > hp.rope_original_context && file.has_tensor(long) {
        Some(long)
    } else {
        file.has_tensor(short).then_some(short)
    }
}

/// The token embedding and the output projection. A tied table on the CPU that our kernels
/// run is held once: packed for the output, and the lookup reads its rows back from there.
fn load_embedding_and_output(
    file: &mut GgufFile,
    embedding_q: QTensor,
    tied: bool,
    shape: [usize; 2],
    device: &Device,
) -> Result<(TokenEmbedding, QLinear), ModelError> {
    if !tied {
        let output = load_2d(file, "output.weight", shape, device)?;
        return Ok((TokenEmbedding::new(&embedding_q)?, QLinear::new(output, device)?));
    }
    if !device.is_cpu() {
        // On a GPU the output projection is the table copied to the device from the bytes
        // already read; the lookup stays on the host.
        let on_device = qtensor_from_ggml(embedding_q.dtype(), &embedding_q.data()?, shape.to_vec(), device)?;
        return Ok((TokenEmbedding::new(&embedding_q)?, QLinear::new(on_device, device)?));
    }
    let dtype = embedding_q.dtype();
    let output = QLinear::new(embedding_q, device)?;
    let embedding = match output.shared_packed() {
        Some(p) => TokenEmbedding::packed(dtype, p)?,
        // A type our kernels do not take: candle keeps its copy, the lookup its own.
        None => TokenEmbedding::new(&load_2d(file, "token_embd.weight", shape, &Device::Cpu)?)?,
    };
    Ok((embedding, output))
}

/// Layer `i`'s weights: the tensors `blk.{i}.*`; optional ones by family (biases, q/k
/// norms, Gemma's post-norms) when the file has them.
fn load_layer(file: &mut GgufFile, hp: &HParams, i: usize, device: &Device) -> Result<Layer, ModelError> {
    let (d, hd) = (hp.hidden, hp.head_dim);
    let q_dim = hp.heads * hd;
    let kv_dim = hp.kv_heads * hd;
    let n = |s: &str| format!("blk.{i}.{s}");
    let bias = load_qkv_bias(file, &n, [q_dim, kv_dim], device)?;
    // OLMo 2 normalizes Q and K whole (over every head), the others per head.
    let qk_norm_whole = hp.family == Family::Olmo2;
    let (q_norm_len, k_norm_len) = if qk_norm_whole { (q_dim, kv_dim) } else { (hd, hd) };
    let qk_norm = if file.has_tensor(&n("attn_q_norm.weight")) {
        Some([
            load_vec(file, &n("attn_q_norm.weight"), q_norm_len, device)?,
            load_vec(file, &n("attn_k_norm.weight"), k_norm_len, device)?,
        ])
    } else {
        None
    };
    // OLMo 2 and EXAONE 4.0 normalize after each block only; the others before.
    let pre_norm = |file: &mut GgufFile, name: &str| -> Result<Option<Tensor>, ModelError> {
        match hp.family {
            Family::Olmo2 | Family::Exaone4 => Ok(None),
            _ => load_vec(file, &n(name), d, device).map(Some),
        }
    };
    // Gemma's, OLMo 2's, EXAONE 4.0's and GLM-4's post-norms are part of their architecture:
    // required there, absent elsewhere.
    let post_norm = |file: &mut GgufFile, name: &str| -> Result<Option<Tensor>, ModelError> {
        match hp.family {
            Family::Gemma2 | Family::Gemma3 | Family::Olmo2 | Family::Exaone4 | Family::Glm4 => {
                load_vec(file, &n(name), d, device).map(Some)
            }
            _ => Ok(None),
        }
    };
    // Output and MLP biases: no other supported family's files have them (llama.cpp reads them
    // as optional for Granite and Ministral 3, whose files have none) and the forward does not
    // add them, so a file that has one is refused rather than run without it. gpt-oss's output
    // bias and sinks are required.
    let gpt_oss = hp.family == Family::GptOss;
    let out_bias = if gpt_oss { Some(load_vec(file, &n("attn_output.bias"), d, device)?) } else { None };
    let sinks = if gpt_oss { Some(load_vec(file, &n("attn_sinks.weight"), hp.heads, &Device::Cpu)?.to_vec1::<f32>()?) } else { None };
    for name in ["attn_output.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"] {
        if file.has_tensor(&n(name)) && !(gpt_oss && name == "attn_output.bias") {
            return Err(ModelError::UnsupportedTensor {
                name: n(name),
                reason: "output and MLP biases are not supported".into(),
            });
        }
    }
    Ok(Layer {
        attn_norm: pre_norm(file, "attn_norm.weight")?,
        attn: Attention {
            qkv: FusedLinear::new(load_qkv(file, &n, [q_dim, kv_dim, d], device)?, device)?,
            wo: QLinear::new(load_2d(file, &n("attn_output.weight"), [d, q_dim], device)?, device)?,
            bias,
            qk_norm,
            qk_norm_whole,
            out_bias,
            sinks,
        },
        post_attn_norm: post_norm(file, "post_attention_norm.weight")?,
        // GLM-4.5's and gpt-oss's MLP pre-norm is stored under Hugging Face's name for it.
        ffn_norm: pre_norm(
            file,
            match hp.family {
                Family::Glm4Moe | Family::GptOss => "post_attention_norm.weight",
                _ => "ffn_norm.weight",
            },
        )?,
        ffn: match &hp.moe {
            // GLM-4.5's first layers are dense.
            Some(p) if i >= p.dense_leading => Ffn::Moe(MoeMlp::load(file, i, d, p, device)?),
            _ => Ffn::Dense(Mlp {
                gate_up: FusedLinear::new(load_gate_up(file, &n, hp, device)?, device)?,
                down: QLinear::new(load_2d(file, &n("ffn_down.weight"), [d, hp.ffn], device)?, device)?,
            }),
        },
        post_ffn_norm: post_norm(file, "post_ffw_norm.weight")?,
    })
}

/// Q, K and V's weights: `attn_q`, `attn_k`, `attn_v`, or a fused `attn_qkv` (Phi-3's; GLM-4
/// files may have one) split into its `q`, `kv`, `kv` rows. `dims`: `[q_dim, kv_dim, hidden]`.
fn load_qkv(
    file: &mut GgufFile,
    n: &dyn Fn(&str) -> String,
    [q_dim, kv_dim, d]: [usize; 3],
    device: &Device,
) -> Result<Vec<QTensor>, ModelError> {
    if file.has_tensor(&n("attn_qkv.weight")) {
        return file.tensor_row_split(&n("attn_qkv.weight"), &[q_dim, kv_dim, kv_dim], d, device);
    }
    Ok(vec![
        load_2d(file, &n("attn_q.weight"), [q_dim, d], device)?,
        load_2d(file, &n("attn_k.weight"), [kv_dim, d], device)?,
        load_2d(file, &n("attn_v.weight"), [kv_dim, d], device)?,
    ])
}

/// Q, K and V's biases, when the file has them: `attn_q.bias`, `attn_k.bias`, `attn_v.bias`, or
/// one `attn_qkv.bias` beside a fused `attn_qkv` (llama.cpp's `create_tensor_qkv` reads both
/// layouts), split as its weight is. `dims`: `[q_dim, kv_dim]`.
fn load_qkv_bias(
    file: &mut GgufFile,
    n: &dyn Fn(&str) -> String,
    [q_dim, kv_dim]: [usize; 2],
    device: &Device,
) -> Result<Option<[Tensor; 3]>, ModelError> {
    if file.has_tensor(&n("attn_qkv.bias")) {
        let all = load_vec(file, &n("attn_qkv.bias"), q_dim + 2 * kv_dim, device)?;
        return Ok(Some([all.narrow(0, 0, q_dim)?, all.narrow(0, q_dim, kv_dim)?, all.narrow(0, q_dim + kv_dim, kv_dim)?]));
    }
    if !file.has_tensor(&n("attn_q.bias")) {
        return Ok(None);
    }
    Ok(Some([
        load_vec(file, &n("attn_q.bias"), q_dim, device)?,
        load_vec(file, &n("attn_k.bias"), kv_dim, device)?,
        load_vec(file, &n("attn_v.bias"), kv_dim, device)?,
    ]))
}

/// The MLP's gate and up weights: `ffn_gate` and `ffn_up`, or Phi-3's and GLM-4's `ffn_up` of
/// twice the width whose first half is the gate (llama.cpp's `LLM_FFN_SWIGLU` on one tensor).
fn load_gate_up(
    file: &mut GgufFile,
    n: &dyn Fn(&str) -> String,
    hp: &HParams,
    device: &Device,
) -> Result<Vec<QTensor>, ModelError> {
    let (d, f) = (hp.hidden, hp.ffn);
    if matches!(hp.family, Family::Phi3 | Family::Glm4) {
        return file.tensor_row_split(&n("ffn_up.weight"), &[f, f], d, device);
    }
    Ok(vec![
        load_2d(file, &n("ffn_gate.weight"), [f, d], device)?,
        load_2d(file, &n("ffn_up.weight"), [f, d], device)?,
    ])
}

pub(super) fn check_shape(name: &str, actual: &[usize], expected: &[usize]) -> Result<(), ModelError> {
    if actual != expected {
        return Err(ModelError::BadTensor {
            name: name.into(),
            actual: actual.to_vec(),
            expected: expected.to_vec(),
        });
    }
    Ok(())
}

pub(super) fn load_2d(file: &mut GgufFile, name: &str, shape: [usize; 2], device: &Device) -> Result<QTensor, ModelError> {
    let t = file.tensor(name, device)?;
    check_shape(name, t.shape().dims(), &shape)?;
    Ok(t)
}

fn load_vec(file: &mut GgufFile, name: &str, len: usize, device: &Device) -> Result<Tensor, ModelError> {
    let t = file.tensor(name, device)?;
    check_shape(name, t.shape().dims(), &[len])?;
    Ok(t.dequantize(device)?.to_dtype(DType::F32)?)
}
