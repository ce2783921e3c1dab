//! Random `deci` files: Llama-3.1-Nemotron 51B's layers (and Super 49B's, Ultra 253B's), each of
//! its own shape, as llama.cpp's converter writes them from the checkpoint's `block_configs`:
//! `attention.head_count`, `attention.head_count_kv` and `feed_forward_length` one per layer.
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose `deci` is set with the tensors
//! and metadata here, one layer per [`DeciLayer`]: with query and K/V heads, Llama's attention
//! with that many K/V heads; with query heads alone, "linear attention" (`attn_norm` and an
//! `attn_output` of `hidden × hidden`); with neither, no attention (no `attn_norm`); an MLP of
//! the layer's width after `ffn_norm`, or none where the width is 0.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::gguf::{Rand, TinyModelSpec};
use crate::model::ModelError;

/// One layer's shape: its query heads, K/V heads and MLP width, each 0 where it has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeciLayer {
    pub heads: usize,
    pub kv_heads: usize,
    pub ffn: usize,
}

impl DeciLayer {
    const fn new(heads: usize, kv_heads: usize, ffn: usize) -> Self {
        Self { heads, kv_heads, ffn }
    }
}

/// The tiny layout, for 4 query heads: attention with 2 K/V heads; linear attention; an MLP
/// alone; attention with 4 K/V heads; a layer with nothing (Ultra 253B's); attention with one
/// K/V head. Every MLP of its own width. (Nothing is last but attention: llama.cpp's graph
/// picks the output rows inside the last layer and skips that in a layer without an MLP.)
pub const LAYERS: [DeciLayer; 6] = [
    DeciLayer::new(4, 2, 512),
    DeciLayer::new(4, 0, 384),
    DeciLayer::new(0, 0, 256),
    DeciLayer::new(4, 4, 512),
    DeciLayer::new(0, 0, 0),
    DeciLayer::new(4, 1, 640),
];

/// The file's metadata (the vocabulary's aside).
pub(super) fn metadata(spec: &TinyModelSpec, layers: &[DeciLayer]) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let k = |s: &str| format!("deci.{s}");
    let per_layer = |f: &dyn Fn(&DeciLayer) -> usize| Value::Array(layers.iter().map(|l| u32v(f(l))).collect());
    vec![
        ("general.architecture".into(), Value::String("deci".into())),
        ("general.name".into(), Value::String("hearth-tiny-deci".into())),
        (k("context_length"), u32v(spec.context_length)),
        (k("embedding_length"), u32v(spec.hidden)),
        (k("block_count"), u32v(layers.len())),
        (k("feed_forward_length"), per_layer(&|l| l.ffn)),
        (k("attention.head_count"), per_layer(&|l| l.heads)),
        (k("attention.head_count_kv"), per_layer(&|l| l.kv_heads)),
        (k("attention.key_length"), u32v(spec.head_dim)),
        (k("attention.value_length"), u32v(spec.head_dim)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        (k("rope.freq_base"), Value::F32(spec.rope_base)),
        (k("rope.dimension_count"), u32v(spec.head_dim)),
        (k("vocab_size"), u32v(spec.vocab.size)),
    ]
}

/// Every layer's tensors (the embedding, output, final norm and rope factors aside).
pub(super) fn tensors(spec: &TinyModelSpec, layers: &[DeciLayer], rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let wt = spec.weight_type.ggml();
    let (d, hd) = (spec.hidden, spec.head_dim);
    let mat = |name: String, rows: usize, cols: usize, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let w = Tensor::from_vec(rng.matrix(rows, cols, 1.0), (rows, cols), &cpu)?;
        Ok((name, QTensor::quantize(&w, wt)?))
    };
    let norm = |name: String, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let w = Tensor::from_vec(rng.around(d, 1.0, 0.1), d, &cpu)?;
        Ok((name, QTensor::quantize(&w, GgmlDType::F32)?))
    };
    let mut out = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let n = |s: &str| format!("blk.{i}.{s}");
        if l.heads > 0 {
            out.push(norm(n("attn_norm.weight"), rng)?);
        }
        match (l.heads, l.kv_heads) {
            (0, _) => {}
            (_, 0) => out.push(mat(n("attn_output.weight"), d, d, rng)?),
            (h, kv) => {
                out.push(mat(n("attn_q.weight"), h * hd, d, rng)?);
                out.push(mat(n("attn_k.weight"), kv * hd, d, rng)?);
                out.push(mat(n("attn_v.weight"), kv * hd, d, rng)?);
                out.push(mat(n("attn_output.weight"), d, h * hd, rng)?);
            }
        }
        if l.ffn > 0 {
            out.push(norm(n("ffn_norm.weight"), rng)?);
            out.push(mat(n("ffn_gate.weight"), l.ffn, d, rng)?);
            out.push(mat(n("ffn_up.weight"), l.ffn, d, rng)?);
            out.push(mat(n("ffn_down.weight"), d, l.ffn, rng)?);
        }
    }
    Ok(out)
}
