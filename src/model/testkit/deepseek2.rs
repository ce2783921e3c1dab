//! Random `deepseek2` files: DeepSeek-V2's multi-head latent attention and its experts, as
//! llama.cpp's converter writes them (`attn_k_b`/`attn_v_b` with the latent's widths as
//! `key_length`/`value_length` and the heads' as the `_mla` keys; or, as older files, one
//! `attn_kv_b`).
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose family is DeepSeek2 with the
//! tensors and metadata here: the spec's `heads`, `ffn` (each expert's width, the shared
//! expert's too) and `moe` are read; [`TinyMla`] says the rest. The first layer is dense, the
//! others have experts and a shared one (every layer dense without `moe`). A `minicpm3` file
//! (MiniCPM3's) has that attention over dense layers, with its converter's keys.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::gguf::{Rand, TinyModelSpec};
use crate::model::ModelError;

/// What a `deepseek2` file has beyond the spec's common fields.
#[derive(Debug, Clone, PartialEq)]
pub struct TinyMla {
    /// Q's low-rank width (0: one `attn_q`, as DeepSeek-V2-Lite's).
    pub q_lora_rank: usize,
    pub kv_lora_rank: usize,
    pub qk_nope: usize,
    pub qk_rope: usize,
    pub v_head: usize,
    /// The leading dense layer's MLP width.
    pub dense_ffn: usize,
    /// One `attn_kv_b` per layer instead of `attn_k_b` and `attn_v_b` (older files).
    pub kv_b: bool,
    /// GLM-4.7-Flash's and DeepSeek-V3's routing (sigmoid with a selection bias, renormalized,
    /// scaled) instead of DeepSeek-V2's (softmax).
    pub sigmoid: bool,
    /// YaRN: factor, original context and `yarn_log_multiplier` (the file's: 0.1 times
    /// DeepSeek's `mscale_all_dim`).
    pub yarn: Option<(f32, usize, f32)>,
}

impl TinyMla {
    /// GLM-4.7-Flash's and DeepSeek-V3's layout: Q through a low-rank pair, sigmoid routing.
    pub fn v3() -> Self {
        Self {
            q_lora_rank: 64,
            kv_lora_rank: 64,
            qk_nope: 32,
            qk_rope: 32,
            v_head: 32,
            dense_ffn: 512,
            kv_b: false,
            sigmoid: true,
            yarn: None,
        }
    }

    /// DeepSeek-V2-Lite's layout: one `attn_q`, softmax routing, YaRN ×4 over 16 positions
    /// with `mscale_all_dim` 0.707 (its files': ×40 over 4,096).
    pub fn v2_lite() -> Self {
        Self {
            q_lora_rank: 0,
            sigmoid: false,
            yarn: Some((4.0, 16, 0.0707)),
            ..Self::v3()
        }
    }
}

/// The architecture's metadata (the vocabulary's is added by the caller).
pub(super) fn metadata(spec: &TinyModelSpec, m: &TinyMla) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    // `mistral4` files are the same under another name.
    let arch = spec.arch.unwrap_or("deepseek2");
    let k = |s: &str| format!("{arch}.{s}");
    let (k_len, v_len) = (m.qk_nope + m.qk_rope, m.v_head);
    let mut md = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("hearth-tiny-{arch}"))),
        (k("context_length"), u32v(spec.context_length)),
        (k("embedding_length"), u32v(spec.hidden)),
        (k("block_count"), u32v(spec.layers)),
        (k("feed_forward_length"), u32v(m.dense_ffn)),
        (k("attention.head_count"), u32v(spec.heads)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("attention.q_lora_rank"), u32v(m.q_lora_rank)),
        (k("attention.kv_lora_rank"), u32v(m.kv_lora_rank)),
        (k("rope.freq_base"), Value::F32(spec.rope_base)),
        (k("rope.dimension_count"), u32v(m.qk_rope)),
        (k("vocab_size"), u32v(spec.vocab.size)),
    ];
    if arch == "minicpm3" {
        // Its converter's keys: the heads' K width alone (V's is the hidden width over the
        // heads), no experts.
        md.push((k("attention.head_count_kv"), u32v(spec.heads)));
        md.push((k("attention.key_length"), u32v(k_len)));
        return md;
    }
    md.push((k("leading_dense_block_count"), u32v(1)));
    md.push((k("expert_feed_forward_length"), u32v(spec.ffn)));
    md.push((k("expert_shared_count"), u32v(1)));
    if m.kv_b {
        md.push((k("attention.head_count_kv"), u32v(spec.heads)));
        md.push((k("attention.key_length"), u32v(k_len)));
        md.push((k("attention.value_length"), u32v(v_len)));
    } else {
        md.push((k("attention.head_count_kv"), u32v(1)));
        md.push((k("attention.key_length"), u32v(m.kv_lora_rank + m.qk_rope)));
        md.push((k("attention.value_length"), u32v(m.kv_lora_rank)));
        md.push((k("attention.key_length_mla"), u32v(k_len)));
        md.push((k("attention.value_length_mla"), u32v(v_len)));
    }
    if let Some(moe) = spec.moe {
        md.push((k("expert_count"), u32v(moe.experts)));
        md.push((k("expert_used_count"), u32v(moe.used)));
        if m.sigmoid {
            md.push((k("expert_gating_func"), u32v(2)));
            md.push((k("expert_weights_norm"), Value::Bool(true)));
            md.push((k("expert_weights_scale"), Value::F32(1.5)));
        } else {
            md.push((k("expert_gating_func"), u32v(1)));
        }
    }
    if let Some((factor, original, log_mul)) = m.yarn {
        md.push((k("rope.scaling.type"), Value::String("yarn".into())));
        md.push((k("rope.scaling.factor"), Value::F32(factor)));
        md.push((k("rope.scaling.original_context_length"), u32v(original)));
        md.push((k("rope.scaling.yarn_log_multiplier"), Value::F32(log_mul)));
    }
    md
}

/// `wt`, or where its blocks do not divide `cols` (K-quants on the latent's narrow matrices),
/// Q8_0 as llama.cpp's quantizer falls back to, or f32.
pub(super) fn fitting(wt: GgmlDType, cols: usize) -> GgmlDType {
    if cols.is_multiple_of(wt.block_size()) {
        wt
    } else if cols.is_multiple_of(GgmlDType::Q8_0.block_size()) {
        GgmlDType::Q8_0
    } else {
        GgmlDType::F32
    }
}

/// Every tensor but the token embedding, the output projection and the final norm (which the
/// caller writes as for every family).
pub(super) fn tensors(
    spec: &TinyModelSpec,
    m: &TinyMla,
    rng: &mut Rand,
    moe_rng: &mut Rand,
) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let wt = spec.weight_type.ggml();
    let (d, heads, f) = (spec.hidden, spec.heads, spec.ffn);
    let (lora, nope, rope, v) = (m.kv_lora_rank, m.qk_nope, m.qk_rope, m.v_head);
    let q_width = heads * (nope + rope);
    let stack = |name: String, dims: &[usize], gain: f32, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let (rows, cols) = (dims[..dims.len() - 1].iter().product(), dims[dims.len() - 1]);
        let t = Tensor::from_vec(rng.matrix(rows, cols, gain), dims, &cpu)?;
        Ok((name, QTensor::quantize(&t, fitting(wt, cols))?))
    };
    let vector = |name: String, data: Vec<f32>| -> Result<(String, QTensor), ModelError> {
        let n = data.len();
        Ok((name, QTensor::quantize(&Tensor::from_vec(data, n, &cpu)?, GgmlDType::F32)?))
    };
    let mut out = Vec::new();
    for i in 0..spec.layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        out.push(vector(n("attn_norm.weight"), rng.around(d, 1.0, 0.1))?);
        if m.q_lora_rank > 0 {
            out.push(stack(n("attn_q_a.weight"), &[m.q_lora_rank, d], 1.0, rng)?);
            out.push(vector(n("attn_q_a_norm.weight"), rng.around(m.q_lora_rank, 1.0, 0.1))?);
            out.push(stack(n("attn_q_b.weight"), &[q_width, m.q_lora_rank], 1.0, rng)?);
        } else {
            out.push(stack(n("attn_q.weight"), &[q_width, d], 1.0, rng)?);
        }
        out.push(stack(n("attn_kv_a_mqa.weight"), &[lora + rope, d], 1.0, rng)?);
        out.push(vector(n("attn_kv_a_norm.weight"), rng.around(lora, 1.0, 0.1))?);
        if m.kv_b {
            out.push(stack(n("attn_kv_b.weight"), &[heads * (nope + v), lora], 1.0, rng)?);
        } else {
            // ggml's `{qk_nope, kv_lora_rank, heads}` and `{kv_lora_rank, v_head, heads}`.
            out.push(stack(n("attn_k_b.weight"), &[heads, lora, nope], 1.0, rng)?);
            out.push(stack(n("attn_v_b.weight"), &[heads, v, lora], 1.0, rng)?);
        }
        out.push(stack(n("attn_output.weight"), &[d, heads * v], 1.0, rng)?);
        out.push(vector(n("ffn_norm.weight"), rng.around(d, 1.0, 0.1))?);
        let Some(moe) = spec.moe.filter(|_| i > 0) else {
            out.push(stack(n("ffn_gate.weight"), &[m.dense_ffn, d], 1.0, rng)?);
            out.push(stack(n("ffn_up.weight"), &[m.dense_ffn, d], 1.0, rng)?);
            out.push(stack(n("ffn_down.weight"), &[d, m.dense_ffn], 1.0, rng)?);
            continue;
        };
        // Router logits of a few units: clear choices.
        let router = Tensor::from_vec(moe_rng.matrix(moe.experts, d, 3.0), (moe.experts, d), &cpu)?;
        out.push((n("ffn_gate_inp.weight"), QTensor::quantize(&router, GgmlDType::F32)?));
        if m.sigmoid {
            out.push(vector(n("exp_probs_b.bias"), moe_rng.around(moe.experts, 0.0, 0.3))?);
        }
        out.push(stack(n("ffn_gate_exps.weight"), &[moe.experts, f, d], 1.0, moe_rng)?);
        out.push(stack(n("ffn_up_exps.weight"), &[moe.experts, f, d], 1.0, moe_rng)?);
        out.push(stack(n("ffn_down_exps.weight"), &[moe.experts, d, f], 1.0, moe_rng)?);
        out.push(stack(n("ffn_gate_shexp.weight"), &[f, d], 1.0, moe_rng)?);
        out.push(stack(n("ffn_up_shexp.weight"), &[f, d], 1.0, moe_rng)?);
        out.push(stack(n("ffn_down_shexp.weight"), &[d, f], 1.0, moe_rng)?);
    }
    Ok(out)
}
