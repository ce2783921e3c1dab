//! Random `jamba` files: Jamba's Mamba layers among attention layers without rope, experts in
//! some layers, as llama.cpp's converter writes them (`attention.head_count_kv` one per layer,
//! 0 in a Mamba layer; a layer's experts where it has a router, `ffn_gate_inp`).
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose `jamba` is set with the
//! tensors and metadata here: the spec's `hidden`, `heads`, `head_dim` (hidden over heads, as
//! Jamba's files imply), `ffn` and `moe` are read; [`TinyJamba`] says the rest.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::deepseek2::fitting;
use super::gguf::{Rand, TinyModelSpec};
use crate::model::ModelError;

/// What a `jamba` file has beyond the spec's common fields.
#[derive(Debug, Clone, PartialEq)]
pub struct TinyJamba {
    /// Each layer's K/V heads: 0 in a Mamba layer.
    pub kv_heads: Vec<usize>,
    /// Each layer: `true` where its MLP is experts (the others dense).
    pub experts: Vec<bool>,
    pub conv_kernel: usize,
    /// The channels: twice the hidden width, as llama.cpp requires.
    pub inner: usize,
    pub state: usize,
    pub dt_rank: usize,
}

impl TinyJamba {
    /// Four layers for hidden 256: Mamba with a dense MLP, Mamba with experts, attention (2 K/V
    /// heads) with a dense MLP, Mamba with experts (Jamba's own: attention every eighth layer
    /// from the fifth, experts every second from the second).
    pub fn tiny(hidden: usize) -> Self {
        Self {
            kv_heads: vec![0, 0, 2, 0],
            experts: vec![false, true, false, true],
            conv_kernel: 4,
            inner: 2 * hidden,
            state: 16,
            dt_rank: hidden.div_ceil(16),
        }
    }
}

/// The architecture's metadata (the vocabulary's is added by the caller).
pub(super) fn metadata(spec: &TinyModelSpec, j: &TinyJamba) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let k = |s: &str| format!("jamba.{s}");
    let mut md = vec![
        ("general.architecture".into(), Value::String("jamba".into())),
        ("general.name".into(), Value::String("hearth-tiny-jamba".into())),
        (k("context_length"), u32v(spec.context_length)),
        (k("embedding_length"), u32v(spec.hidden)),
        (k("block_count"), u32v(j.kv_heads.len())),
        (k("feed_forward_length"), u32v(spec.ffn)),
        (k("attention.head_count"), u32v(spec.heads)),
        (k("attention.head_count_kv"), Value::Array(j.kv_heads.iter().map(|&h| u32v(h)).collect())),
        (k("ssm.conv_kernel"), u32v(j.conv_kernel)),
        (k("ssm.inner_size"), u32v(j.inner)),
        (k("ssm.state_size"), u32v(j.state)),
        (k("ssm.time_step_rank"), u32v(j.dt_rank)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("vocab_size"), u32v(spec.vocab.size)),
    ];
    if let Some(m) = spec.moe {
        md.push((k("expert_count"), u32v(m.experts)));
        md.push((k("expert_used_count"), u32v(m.used)));
    }
    md
}

/// Every layer's tensors (the embedding, output and final norm aside).
pub(super) fn tensors(spec: &TinyModelSpec, j: &TinyJamba, rng: &mut Rand, moe_rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let wt = spec.weight_type.ggml();
    let (d, f, hd) = (spec.hidden, spec.ffn, spec.hidden / spec.heads);
    // The spec's type where its blocks fit a row (f32 for the step's narrow `ssm_dt`).
    let mat = |name: String, dims: &[usize], rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let (rows, cols) = (dims[..dims.len() - 1].iter().product(), dims[dims.len() - 1]);
        let w = Tensor::from_vec(rng.matrix(rows, cols, 1.0), dims, &cpu)?;
        Ok((name, QTensor::quantize(&w, fitting(wt, cols))?))
    };
    let f32s = |name: String, data: Vec<f32>, dims: &[usize]| -> Result<(String, QTensor), ModelError> {
        Ok((name, QTensor::quantize(&Tensor::from_vec(data, dims, &cpu)?, GgmlDType::F32)?))
    };
    let (inner, ds, r) = (j.inner, j.state, j.dt_rank);
    let mut out = Vec::new();
    for (i, &kv) in j.kv_heads.iter().enumerate() {
        let n = |s: &str| format!("blk.{i}.{s}");
        out.push(f32s(n("attn_norm.weight"), rng.around(d, 1.0, 0.1), &[d])?);
        if kv > 0 {
            out.push(mat(n("attn_q.weight"), &[spec.heads * hd, d], rng)?);
            out.push(mat(n("attn_k.weight"), &[kv * hd, d], rng)?);
            out.push(mat(n("attn_v.weight"), &[kv * hd, d], rng)?);
            out.push(mat(n("attn_output.weight"), &[d, spec.heads * hd], rng)?);
        } else {
            out.push(mat(n("ssm_in.weight"), &[2 * inner, d], rng)?);
            // Taps that mix the tokens without cancelling them.
            out.push(f32s(n("ssm_conv1d.weight"), rng.around(inner * j.conv_kernel, 0.3, 0.4), &[inner, j.conv_kernel])?);
            out.push(f32s(n("ssm_conv1d.bias"), rng.around(inner, 0.0, 0.2), &[inner])?);
            out.push(mat(n("ssm_x.weight"), &[r + 2 * ds, inner], rng)?);
            out.push(f32s(n("ssm_dt_norm.weight"), rng.around(r, 1.0, 0.1), &[r])?);
            out.push(f32s(n("ssm_b_norm.weight"), rng.around(ds, 1.0, 0.1), &[ds])?);
            out.push(f32s(n("ssm_c_norm.weight"), rng.around(ds, 1.0, 0.1), &[ds])?);
            out.push(mat(n("ssm_dt.weight"), &[inner, r], rng)?);
            out.push(f32s(n("ssm_dt.bias"), rng.around(inner, -1.0, 1.0), &[inner])?);
            // `-exp(A_log)`, one per channel and state value: decays of about 0.3 to 0.9 a token.
            let a: Vec<f32> = rng.around(inner * ds, -0.5, 0.4).into_iter().map(|x| -x.exp()).collect();
            out.push(f32s(n("ssm_a"), a, &[inner, ds])?);
            out.push(f32s(n("ssm_d"), rng.around(inner, 1.0, 0.5), &[inner])?);
            out.push(mat(n("ssm_out.weight"), &[d, inner], rng)?);
        }
        out.push(f32s(n("ffn_norm.weight"), rng.around(d, 1.0, 0.1), &[d])?);
        match spec.moe.filter(|_| j.experts.get(i).copied().unwrap_or(false)) {
            Some(m) => {
                // Router logits of a few units: clear choices.
                let router = Tensor::from_vec(moe_rng.matrix(m.experts, d, 3.0), (m.experts, d), &cpu)?;
                out.push((n("ffn_gate_inp.weight"), QTensor::quantize(&router, GgmlDType::F32)?));
                out.push(mat(n("ffn_gate_exps.weight"), &[m.experts, f, d], moe_rng)?);
                out.push(mat(n("ffn_up_exps.weight"), &[m.experts, f, d], moe_rng)?);
                out.push(mat(n("ffn_down_exps.weight"), &[m.experts, d, f], moe_rng)?);
            }
            None => {
                out.push(mat(n("ffn_gate.weight"), &[f, d], rng)?);
                out.push(mat(n("ffn_up.weight"), &[f, d], rng)?);
                out.push(mat(n("ffn_down.weight"), &[d, f], rng)?);
            }
        }
    }
    Ok(out)
}
