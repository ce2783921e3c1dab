//! Random files whose layers each have their own shape, as llama.cpp's converters write them
//! (`attention.head_count`, `attention.head_count_kv` and `feed_forward_length` one per layer):
//! Deci's (`deci`: Llama-3.1-Nemotron 51B's layers, Super 49B's, Ultra 253B's, from the
//! checkpoint's `block_configs`) and OpenELM's (`openelm`).
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose `layer_shapes` is set with the
//! tensors and metadata here, one layer per [`LayerShape`], under the spec's `arch`. A Deci
//! layer with query and K/V heads has Llama's attention with that many K/V heads; with query
//! heads alone, "linear attention" (`attn_norm` and an `attn_output` of `hidden × hidden`);
//! with neither, no attention (no `attn_norm`); an MLP of the layer's width after `ffn_norm`,
//! or none where the width is 0. An OpenELM layer has a fused `attn_qkv` of its own heads,
//! each head's Q and K norms (`attn_q_norm`, `attn_k_norm` of one head's width) and its MLP.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::gguf::{Rand, TinyModelSpec};
use crate::model::ModelError;

/// One layer's shape: its query heads, K/V heads and MLP width, each 0 where it has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub ffn: usize,
}

impl LayerShape {
    const fn new(heads: usize, kv_heads: usize, ffn: usize) -> Self {
        Self { heads, kv_heads, ffn }
    }
}

/// Deci's tiny layout, for 4 query heads: attention with 2 K/V heads; linear attention; an MLP
/// alone; attention with 4 K/V heads; a layer with nothing (Ultra 253B's); attention with one
/// K/V head. Every MLP of its own width. (Nothing is last but attention: llama.cpp's graph
/// picks the output rows inside the last layer and skips that in a layer without an MLP.)
pub const DECI: [LayerShape; 6] = [
    LayerShape::new(4, 2, 512),
    LayerShape::new(4, 0, 384),
    LayerShape::new(0, 0, 256),
    LayerShape::new(4, 4, 512),
    LayerShape::new(0, 0, 0),
    LayerShape::new(4, 1, 640),
];

/// OpenELM's tiny layout: query and K/V heads growing with depth as OpenELM's do (its 270M's
/// from 12 and 3 to 20 and 5), the MLP widening too; one layer's Q wider than the hidden width.
pub const OPENELM: [LayerShape; 4] = [
    LayerShape::new(2, 1, 256),
    LayerShape::new(4, 2, 384),
    LayerShape::new(6, 3, 512),
    LayerShape::new(8, 2, 640),
];

/// The file's metadata (the vocabulary's aside).
pub(super) fn metadata(spec: &TinyModelSpec, layers: &[LayerShape]) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let arch = spec.arch.unwrap_or("deci");
    let k = |s: &str| format!("{arch}.{s}");
    let per_layer = |f: &dyn Fn(&LayerShape) -> usize| Value::Array(layers.iter().map(|l| u32v(f(l))).collect());
    vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("hearth-tiny-{arch}"))),
        (k("context_length"), u32v(spec.context_length)),
        (k("embedding_length"), u32v(spec.hidden)),
        (k("block_count"), u32v(layers.len())),
        (k("feed_forward_length"), per_layer(&|l| l.ffn)),
        (k("attention.head_count"), per_layer(&|l| l.heads)),
        (k("attention.head_count_kv"), per_layer(&|l| l.kv_heads)),
        (k("attention.key_length"), u32v(spec.head_dim)),
        (k("attention.value_length"), u32v(spec.head_dim)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(if arch == "openelm" { 1e-6 } else { 1e-5 })),
        (k("rope.freq_base"), Value::F32(spec.rope_base)),
        (k("rope.dimension_count"), u32v(spec.head_dim)),
        (k("vocab_size"), u32v(spec.vocab.size)),
    ]
}

/// Every layer's tensors (the embedding, output, final norm and rope factors aside).
pub(super) fn tensors(spec: &TinyModelSpec, layers: &[LayerShape], rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
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
    let head_norm = |name: String, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let w = Tensor::from_vec(rng.around(hd, 1.0, 0.3), hd, &cpu)?;
        Ok((name, QTensor::quantize(&w, GgmlDType::F32)?))
    };
    let openelm = spec.arch == Some("openelm");
    let mut out = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let n = |s: &str| format!("blk.{i}.{s}");
        if l.heads > 0 {
            out.push(norm(n("attn_norm.weight"), rng)?);
        }
        match (l.heads, l.kv_heads) {
            (0, _) => {}
            (_, 0) => out.push(mat(n("attn_output.weight"), d, d, rng)?),
            (h, kv) if openelm => {
                out.push(mat(n("attn_qkv.weight"), (h + 2 * kv) * hd, d, rng)?);
                out.push(head_norm(n("attn_q_norm.weight"), rng)?);
                out.push(head_norm(n("attn_k_norm.weight"), rng)?);
                out.push(mat(n("attn_output.weight"), d, h * hd, rng)?);
            }
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
