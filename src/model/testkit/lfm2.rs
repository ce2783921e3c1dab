//! Random `lfm2` files: LFM2's short convolution layers beside its attention layers, as
//! llama.cpp's converter writes them (`shortconv.{conv,in_proj,out_proj}`; per-layer
//! `attention.head_count_kv`, 0 in a convolution layer; the final norm as `token_embd_norm`).
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose family is Lfm2 with the tensors
//! and metadata here: every layer a convolution of [`L_CACHE`] taps except each fourth from
//! the third ([`attends`]), which attends with the spec's heads and q/k norms. With `spec.moe`
//! (and `spec.arch` `lfm2moe`), LFM2-8B-A1B's layout: after the first [`DENSE_LEADING`] layers,
//! each MLP is experts of the spec's width, sigmoid-routed with a selection bias, as llama.cpp's
//! converter writes them.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::gguf::{moe_tensors, Rand, TinyModelSpec};
use crate::model::ModelError;

/// The convolution's taps (LFM2's: 3).
pub const L_CACHE: usize = 3;

/// The MoE files' dense layers before the experts (LFM2-8B-A1B has 2).
pub const DENSE_LEADING: usize = 1;

/// Whether layer `i` attends (LFM2 1.2B's pattern is irregular; here layers 2, 6, …).
pub fn attends(i: usize) -> bool {
    i % 4 == 2
}

/// The file's metadata (the vocabulary's aside).
pub(super) fn metadata(spec: &TinyModelSpec) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let arch = spec.arch.unwrap_or("lfm2");
    let k = |s: &str| format!("{arch}.{s}");
    let kv: Vec<Value> = (0..spec.layers).map(|i| u32v(if attends(i) { spec.kv_heads } else { 0 })).collect();
    let mut md = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("hearth-tiny-{arch}"))),
        (k("context_length"), u32v(spec.context_length)),
        (k("embedding_length"), u32v(spec.hidden)),
        (k("block_count"), u32v(spec.layers)),
        (k("feed_forward_length"), u32v(spec.ffn)),
        (k("attention.head_count"), u32v(spec.heads)),
        (k("attention.head_count_kv"), Value::Array(kv)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        (k("rope.freq_base"), Value::F32(spec.rope_base)),
        (k("shortconv.l_cache"), u32v(L_CACHE)),
        (k("vocab_size"), u32v(spec.vocab.size)),
    ];
    if let Some(m) = spec.moe {
        md.extend([
            (k("expert_count"), u32v(m.experts)),
            (k("expert_used_count"), u32v(m.used)),
            (k("expert_feed_forward_length"), u32v(spec.ffn)),
            (k("leading_dense_block_count"), u32v(DENSE_LEADING)),
            (k("expert_gating_func"), u32v(2)),
        ]);
    }
    md
}

/// Every layer's tensors and the final norm (the embedding and output aside).
pub(super) fn tensors(spec: &TinyModelSpec, rng: &mut Rand, moe_rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let wt = spec.weight_type.ggml();
    let (d, hd) = (spec.hidden, spec.head_dim);
    let (q_dim, kv_dim) = (spec.heads * hd, spec.kv_heads * hd);
    let mat = |name: String, rows: usize, cols: usize, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let w = Tensor::from_vec(rng.matrix(rows, cols, 1.0), (rows, cols), &cpu)?;
        Ok((name, QTensor::quantize(&w, wt)?))
    };
    let f32s = |name: String, data: Vec<f32>, dims: &[usize]| -> Result<(String, QTensor), ModelError> {
        Ok((name, QTensor::quantize(&Tensor::from_vec(data, dims, &cpu)?, GgmlDType::F32)?))
    };
    let mut out = vec![f32s("token_embd_norm.weight".into(), rng.around(d, 1.0, 0.1), &[d])?];
    for i in 0..spec.layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        out.push(f32s(n("attn_norm.weight"), rng.around(d, 1.0, 0.1), &[d])?);
        if attends(i) {
            out.push(mat(n("attn_q.weight"), q_dim, d, rng)?);
            out.push(mat(n("attn_k.weight"), kv_dim, d, rng)?);
            out.push(mat(n("attn_v.weight"), kv_dim, d, rng)?);
            out.push(mat(n("attn_output.weight"), d, q_dim, rng)?);
            out.push(f32s(n("attn_q_norm.weight"), rng.around(hd, 1.0, 0.1), &[hd])?);
            out.push(f32s(n("attn_k_norm.weight"), rng.around(hd, 1.0, 0.1), &[hd])?);
        } else {
            out.push(mat(n("shortconv.in_proj.weight"), 3 * d, d, rng)?);
            // Taps of about one: the convolution carries the tokens before into each.
            out.push(f32s(n("shortconv.conv.weight"), rng.around(d * L_CACHE, 0.0, 1.0), &[d, L_CACHE])?);
            out.push(mat(n("shortconv.out_proj.weight"), d, d, rng)?);
        }
        out.push(f32s(n("ffn_norm.weight"), rng.around(d, 1.0, 0.1), &[d])?);
        let shapes = [(spec.ffn, d), (spec.ffn, d), (d, spec.ffn)];
        match spec.moe {
            // A router, experts (the first the dense MLP the same stream gives) and a selection
            // bias spread so that it changes some choices.
            Some(m) if i >= DENSE_LEADING => {
                let dense = shapes.iter().map(|&(rows, cols)| rng.matrix(rows, cols, 1.0)).collect();
                out.extend(moe_tensors(i, d, spec.ffn, m, dense, wt, moe_rng)?);
                out.push(f32s(n("exp_probs_b.bias"), moe_rng.around(m.experts, 0.0, 0.3), &[m.experts])?);
            }
            _ => {
                for (name, (rows, cols)) in ["ffn_gate", "ffn_up", "ffn_down"].into_iter().zip(shapes) {
                    out.push(mat(n(&format!("{name}.weight")), rows, cols, rng)?);
                }
            }
        }
    }
    Ok(out)
}
