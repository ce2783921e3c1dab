//! Random `nemotron_h` files: Nemotron-H's layers of three kinds, as llama.cpp's converter
//! writes them (per-layer `attention.head_count_kv` and `feed_forward_length`, both 0 in a
//! Mamba-2 layer; an MLP layer's `ffn_up` and `ffn_down` without a gate; every layer's one
//! norm `attn_norm`).
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose family is NemotronH with the
//! tensors and metadata here: the layers follow [`PATTERN`] (Nemotron-H's hybrid override
//! pattern: `M` Mamba-2, `*` attention, `-` MLP) over the spec's `layers`; the Mamba-2 layers'
//! sizes are the spec's [`TinyMamba2`].
//!
//! With `spec.moe` (and `spec.arch` `nemotron_h_moe`), Nemotron 3's layout: each MLP layer is
//! experts without a gate (up, squared ReLU, down) routed by sigmoid with a selection bias
//! (`exp_probs_b`), their weights renormalized and scaled, beside a shared expert of the same
//! kind; with [`TinyMamba2::moe_latent`], Nemotron 3 Super's latent projections around the
//! experts.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::gguf::{Rand, TinyModelSpec, TinyMoe};
use super::granite_hybrid::{mamba2_tensors, TinyMamba2};
use crate::model::ModelError;

/// The layers' kinds, repeated: Mamba-2, MLP, attention, MLP, Mamba-2, MLP (the 9B's starts
/// `M-M-M-M*-`).
pub const PATTERN: &[u8] = b"M-*-M-";

/// Layer `i`'s kind in [`PATTERN`].
pub fn kind(i: usize) -> u8 {
    PATTERN[i % PATTERN.len()]
}

/// The file's metadata (the vocabulary's aside).
pub(super) fn metadata(spec: &TinyModelSpec, t: &TinyMamba2) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let arch = spec.arch.unwrap_or("nemotron_h");
    let k = |s: &str| format!("{arch}.{s}");
    let per_layer = |f: &dyn Fn(u8) -> usize| Value::Array((0..spec.layers).map(|i| u32v(f(kind(i)))).collect());
    let mut md = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("hearth-tiny-{arch}"))),
        (k("context_length"), u32v(spec.context_length)),
        (k("embedding_length"), u32v(spec.hidden)),
        (k("block_count"), u32v(spec.layers)),
        (k("feed_forward_length"), per_layer(&|c| if c == b'-' { spec.ffn } else { 0 })),
        (k("attention.head_count"), u32v(spec.heads)),
        (k("attention.head_count_kv"), per_layer(&|c| if c == b'*' { spec.kv_heads } else { 0 })),
        (k("attention.key_length"), u32v(spec.head_dim)),
        (k("attention.value_length"), u32v(spec.head_dim)),
        (k("attention.layer_norm_epsilon"), Value::F32(1e-5)),
        (k("rope.freq_base"), Value::F32(spec.rope_base)),
        (k("ssm.conv_kernel"), u32v(t.conv_kernel)),
        (k("ssm.inner_size"), u32v(t.inner)),
        (k("ssm.state_size"), u32v(t.state)),
        (k("ssm.time_step_rank"), u32v(t.heads)),
        (k("ssm.group_count"), u32v(t.groups)),
        (k("vocab_size"), u32v(spec.vocab.size)),
    ];
    if let Some(m) = spec.moe {
        md.push((k("expert_count"), u32v(m.experts)));
        md.push((k("expert_used_count"), u32v(m.used)));
        md.push((k("expert_feed_forward_length"), u32v(spec.ffn)));
        md.push((k("expert_shared_feed_forward_length"), u32v(spec.ffn)));
        md.push((k("expert_weights_norm"), Value::Bool(true)));
        md.push((k("expert_weights_scale"), Value::F32(2.5)));
        md.push((k("expert_gating_func"), u32v(2)));
        if let Some(l) = t.moe_latent {
            md.push((k("moe_latent_size"), u32v(l)));
        }
    }
    md
}

/// Every layer's tensors (the embedding, output and final norm aside).
pub(super) fn tensors(
    spec: &TinyModelSpec,
    t: &TinyMamba2,
    rng: &mut Rand,
    moe_rng: &mut Rand,
) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let wt = spec.weight_type.ggml();
    let (d, hd) = (spec.hidden, spec.head_dim);
    let (q_dim, kv_dim) = (spec.heads * hd, spec.kv_heads * hd);
    let mat = |name: String, rows: usize, cols: usize, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let w = Tensor::from_vec(rng.matrix(rows, cols, 1.0), (rows, cols), &cpu)?;
        Ok((name, QTensor::quantize(&w, wt)?))
    };
    let mut out = Vec::new();
    for i in 0..spec.layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        let norm = Tensor::from_vec(rng.around(d, 1.0, 0.1), d, &cpu)?;
        out.push((n("attn_norm.weight"), QTensor::quantize(&norm, GgmlDType::F32)?));
        match kind(i) {
            b'M' => out.extend(mamba2_tensors(i, d, t, wt, rng)?),
            b'*' => {
                out.push(mat(n("attn_q.weight"), q_dim, d, rng)?);
                out.push(mat(n("attn_k.weight"), kv_dim, d, rng)?);
                out.push(mat(n("attn_v.weight"), kv_dim, d, rng)?);
                out.push(mat(n("attn_output.weight"), d, q_dim, rng)?);
            }
            _ => match spec.moe {
                Some(m) => out.extend(experts(i, spec, m, t.moe_latent, moe_rng)?),
                None => {
                    out.push(mat(n("ffn_up.weight"), spec.ffn, d, rng)?);
                    out.push(mat(n("ffn_down.weight"), d, spec.ffn, rng)?);
                }
            },
        }
    }
    Ok(out)
}

/// Layer `i`'s router (`ffn_gate_inp`, f32, with its selection bias `exp_probs_b`), ungated
/// experts (`ffn_{up,down}_exps`, in the latent width where there is one, with
/// `ffn_latent_{down,up}`) and shared expert (`ffn_{up,down}_shexp`).
fn experts(
    i: usize,
    spec: &TinyModelSpec,
    m: TinyMoe,
    latent: Option<usize>,
    rng: &mut Rand,
) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let wt = spec.weight_type.ggml();
    let (d, f, e) = (spec.hidden, spec.ffn, m.experts);
    let w = latent.unwrap_or(d);
    let n = |s: &str| format!("blk.{i}.{s}");
    let q = |name: String, dims: &[usize], data: Vec<f32>, dtype: GgmlDType| -> Result<(String, QTensor), ModelError> {
        Ok((name, QTensor::quantize(&Tensor::from_vec(data, dims, &cpu)?, dtype)?))
    };
    // Router logits of a few units and biases of a few tenths: clear choices.
    let mut out = vec![
        q(n("ffn_gate_inp.weight"), &[e, d], rng.matrix(e, d, 3.0), GgmlDType::F32)?,
        q(n("exp_probs_b.bias"), &[e], rng.around(e, 0.0, 0.3), GgmlDType::F32)?,
    ];
    let stacked = |rows: usize, cols: usize, rng: &mut Rand| (0..e).flat_map(|_| rng.matrix(rows, cols, 1.0)).collect();
    out.push(q(n("ffn_up_exps.weight"), &[e, f, w], stacked(f, w, rng), wt)?);
    out.push(q(n("ffn_down_exps.weight"), &[e, w, f], stacked(w, f, rng), wt)?);
    out.push(q(n("ffn_up_shexp.weight"), &[f, d], rng.matrix(f, d, 1.0), wt)?);
    out.push(q(n("ffn_down_shexp.weight"), &[d, f], rng.matrix(d, f, 1.0), wt)?);
    if let Some(l) = latent {
        out.push(q(n("ffn_latent_down.weight"), &[l, d], rng.matrix(l, d, 1.0), wt)?);
        out.push(q(n("ffn_latent_up.weight"), &[d, l], rng.matrix(d, l, 1.0), wt)?);
    }
    Ok(out)
}
