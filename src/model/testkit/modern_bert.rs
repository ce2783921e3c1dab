//! Random ModernBERT files (`modern-bert`) as llama.cpp's converter writes them: a pre-norm
//! encoder of unbiased LayerNorms (the embedding's `token_embd_norm`; no attention norm in the
//! first layer), a fused QKV and an output projection without biases, NeoX rope, a gated MLP
//! whose `ffn_up` holds the gate then up, and a final norm; no positions, token types or
//! output projection. Metadata: `attention.causal` false, the spec's pooling type, a window
//! (`attention.sliding_window`, period `attention.sliding_window_pattern`: the first layer of
//! each period global) and the local layers' base (`rope.freq_base_swa`), and, for a Q8_0
//! file, `hidden_activation` `swiglu` (Granite Embedding R2's; an F32 file names none, so
//! GELU); a GPT-2 BPE vocabulary with `[CLS]` and `[SEP]` added around the text.
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose `arch` is `modern-bert` with
//! the tensors and metadata here: the spec's `hidden`, `layers`, `heads`, `ffn`,
//! `context_length`, `rope_base`, `sliding_window` and `pooling` are read.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::gguf::{Rand, TinyModelSpec, WeightType};
use crate::model::ModelError;

/// The architecture name.
pub const ARCH: &str = "modern-bert";
/// ModernBERT's LayerNorm epsilon (its checkpoints' `norm_eps`).
const EPS: f32 = 1e-5;
/// The local layers' rope base (ModernBERT's `local_rope_theta`).
const LOCAL_ROPE_BASE: f32 = 10_000.0;

/// Whether `spec` is a ModernBERT's.
pub(super) fn is_modern_bert(spec: &TinyModelSpec) -> bool {
    spec.arch == Some(ARCH)
}

/// The architecture's metadata (the vocabulary's is added by the caller).
pub(super) fn metadata(spec: &TinyModelSpec) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let k = |s: &str| format!("{ARCH}.{s}");
    let (window, period) = spec.sliding_window.unwrap_or((0, 3));
    let mut md = vec![
        ("general.architecture".into(), Value::String(ARCH.into())),
        // (Lowercased, the name says `modern-bert`: llama.cpp's `[MASK]` strips to its left.)
        ("general.name".into(), Value::String(format!("hearth-tiny-{ARCH}"))),
        (k("context_length"), u32v(spec.context_length)),
        (k("embedding_length"), u32v(spec.hidden)),
        (k("feed_forward_length"), u32v(spec.ffn)),
        (k("block_count"), u32v(spec.layers)),
        (k("attention.head_count"), u32v(spec.heads)),
        (k("attention.head_count_kv"), u32v(spec.heads)),
        (k("attention.layer_norm_epsilon"), Value::F32(EPS)),
        (k("attention.causal"), Value::Bool(false)),
        (k("attention.sliding_window"), u32v(window)),
        (k("attention.sliding_window_pattern"), u32v(period)),
        (k("rope.freq_base"), Value::F32(spec.rope_base)),
        (k("rope.freq_base_swa"), Value::F32(LOCAL_ROPE_BASE)),
        (k("pooling_type"), Value::U32(spec.pooling.unwrap_or(1))),
        ("tokenizer.ggml.add_eos_token".into(), Value::Bool(true)),
        ("tokenizer.ggml.add_sep_token".into(), Value::Bool(true)),
    ];
    if spec.weight_type != WeightType::F32 {
        md.push((k("hidden_activation"), Value::String("swiglu".into())));
    }
    md
}

/// Every tensor of the file.
pub(super) fn tensors(spec: &TinyModelSpec, rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let wt = spec.weight_type.ggml();
    let (d, f, v) = (spec.hidden, spec.ffn, spec.vocab.size);
    let mat = |name: String, rows: usize, cols: usize, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let w = Tensor::from_vec(rng.matrix(rows, cols, 1.0), (rows, cols), &cpu)?;
        Ok((name, QTensor::quantize(&w, wt)?))
    };
    // An unbiased LayerNorm's weight.
    let norm = |name: String, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let w = Tensor::from_vec(rng.around(d, 1.0, 0.2), d, &cpu)?;
        Ok((name, QTensor::quantize(&w, GgmlDType::F32)?))
    };
    let mut out = vec![
        mat("token_embd.weight".into(), v, d, rng)?,
        norm("token_embd_norm.weight".into(), rng)?,
    ];
    for i in 0..spec.layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        if i > 0 {
            out.push(norm(n("attn_norm.weight"), rng)?);
        }
        out.push(mat(n("attn_qkv.weight"), 3 * d, d, rng)?);
        out.push(mat(n("attn_output.weight"), d, d, rng)?);
        out.push(norm(n("ffn_norm.weight"), rng)?);
        out.push(mat(n("ffn_up.weight"), 2 * f, d, rng)?);
        out.push(mat(n("ffn_down.weight"), d, f, rng)?);
    }
    out.push(norm("output_norm.weight".into(), rng)?);
    Ok(out)
}
