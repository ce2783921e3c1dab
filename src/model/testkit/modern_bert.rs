//! Random ModernBERT files (`modern-bert`) as llama.cpp's converter writes them: a pre-norm
//! encoder of unbiased LayerNorms (the embedding's `token_embd_norm`; no attention norm in the
//! first layer), a fused QKV and an output projection without biases, NeoX rope, a gated MLP
//! whose `ffn_up` holds the gate then up, and a final norm; no positions, token types or
//! output projection. Metadata: `attention.causal` false, the spec's pooling type, a window
//! (`attention.sliding_window`, period `attention.sliding_window_pattern`: the first layer of
//! each period global) and the local layers' base (`rope.freq_base_swa`), and, for a Q8_0
//! file, `hidden_activation` `swiglu` (Granite Embedding R2's; an F32 file names none, so
//! GELU); a GPT-2 BPE vocabulary with `[CLS]` and `[SEP]` added around the text (named the
//! class and separator tokens too, as the converter names them).
//!
//! A rank file (pooling type 4: gte-reranker-modernbert's shape) has ModernBERT's
//! classification head: `cls.weight` (dense, no bias; GELU after it), `cls.norm.weight`,
//! `cls.output.weight` and its bias (one label, `LABEL_0`), and `classifier.pooling_type` mean
//! in an F32 file, cls in a Q8_0 one.
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
/// `pooling_type` of a reranker's file (llama.cpp's rank), and the classifier's pooling
/// types (mean, cls).
const RANK: u32 = 4;
const CLASSIFIER_MEAN: u32 = 1;
const CLASSIFIER_CLS: u32 = 2;

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
    // The converter's `SpecialVocab` also names the separator and the class token (`[SEP]`
    // and `[CLS]`, the vocabulary's EOS and BOS): a reranker's pair is joined by the separator.
    let vocab_id = |key: &str| spec.vocab.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    if let Some(sep) = vocab_id("tokenizer.ggml.eos_token_id") {
        md.push(("tokenizer.ggml.seperator_token_id".into(), sep));
    }
    if let Some(cls) = vocab_id("tokenizer.ggml.bos_token_id") {
        md.push(("tokenizer.ggml.cls_token_id".into(), cls));
    }
    if spec.weight_type != WeightType::F32 {
        md.push((k("hidden_activation"), Value::String("swiglu".into())));
    }
    if spec.pooling == Some(RANK) {
        md.push((k("classifier.output_labels"), Value::Array(vec![Value::String("LABEL_0".into())])));
        let pooling = if spec.weight_type == WeightType::F32 { CLASSIFIER_MEAN } else { CLASSIFIER_CLS };
        md.push((k("classifier.pooling_type"), Value::U32(pooling)));
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
    if spec.pooling == Some(RANK) {
        out.push(mat("cls.weight".into(), d, d, rng)?);
        out.push(norm("cls.norm.weight".into(), rng)?);
        out.push(mat("cls.output.weight".into(), 1, d, rng)?);
        let bias = Tensor::from_vec(rng.around(1, 0.0, 0.5), 1, &cpu)?;
        out.push(("cls.output.bias".into(), QTensor::quantize(&bias, GgmlDType::F32)?));
    }
    Ok(out)
}
