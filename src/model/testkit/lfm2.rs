//! Random `lfm2` files: LFM2's short convolution layers beside its attention layers, as
//! llama.cpp's converter writes them (`shortconv.{conv,in_proj,out_proj}`; per-layer
//! `attention.head_count_kv`, 0 in a convolution layer; the final norm as `token_embd_norm`).
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose family is Lfm2 with the tensors
//! and metadata here: every layer a convolution of [`L_CACHE`] taps except each fourth from
//! the third ([`attends`]), which attends with the spec's heads and q/k norms.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::gguf::{Rand, TinyModelSpec};
use crate::model::ModelError;

/// The convolution's taps (LFM2's: 3).
pub const L_CACHE: usize = 3;

/// Whether layer `i` attends (LFM2 1.2B's pattern is irregular; here layers 2, 6, …).
pub fn attends(i: usize) -> bool {
    i % 4 == 2
}

/// The file's metadata (the vocabulary's aside).
pub(super) fn metadata(spec: &TinyModelSpec) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let k = |s: &str| format!("lfm2.{s}");
    let kv: Vec<Value> = (0..spec.layers).map(|i| u32v(if attends(i) { spec.kv_heads } else { 0 })).collect();
    vec![
        ("general.architecture".into(), Value::String("lfm2".into())),
        ("general.name".into(), Value::String("hearth-tiny-lfm2".into())),
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
    ]
}

/// Every layer's tensors and the final norm (the embedding and output aside).
pub(super) fn tensors(spec: &TinyModelSpec, rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
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
        for (name, rows, cols) in [("ffn_gate", spec.ffn, d), ("ffn_up", spec.ffn, d), ("ffn_down", d, spec.ffn)] {
            out.push(mat(n(&format!("{name}.weight")), rows, cols, rng)?);
        }
    }
    Ok(out)
}
