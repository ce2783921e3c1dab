//! Random encoder files as llama.cpp's converter writes them: BERT's (`bert`: learned positions,
//! Q, K and V apart with their biases, biased output and MLP projections, an up-GELU-down MLP),
//! nomic-embed-text's (`nomic-bert`: NeoX rope, a fused QKV, a gated SiLU MLP, no biases but
//! the norms'), nomic-embed-text-v2-moe's (`nomic-bert-moe`: NeoX rope, a fused QKV, BERT's
//! biases and MLP, every other layer's MLP experts without biases, [`MOE_EVERY`]) and
//! jina-embeddings-v3's (`jina-bert-v3`: the same without experts); all with a token-type table, the embedding's LayerNorm and two LayerNorms per
//! layer after its residual adds (`attn_output_norm`, `layer_output_norm`), no final norm and
//! no output projection; `attention.causal` false, the spec's pooling type, a WordPiece
//! vocabulary ([`VocabStyle::WordPiece`]) or XLM-RoBERTa's Unigram one ([`VocabStyle::Unigram`]:
//! one token type). A rank file (a cross-encoder) has a classifier head: RoBERTa's dense layer
//! and output where the vocabulary is XLM-RoBERTa's, the output alone where it is BERT's.
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose `arch` is one of
//! [`ENCODER_ARCHS`] with the tensors and metadata here: the spec's `hidden`, `layers`, `heads`,
//! `head_dim` (hidden over heads), `ffn`, `context_length`, `rope_base`, `pooling` and (for
//! `nomic-bert-moe`) `moe` are read.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::gguf::{Rand, TinyModelSpec};
use super::VocabStyle;
use crate::model::hparams::ENCODER_ARCHS;
use crate::model::ModelError;

/// BERT's LayerNorm epsilon (its checkpoints' and nomic's `layer_norm_eps`).
const EPS: f32 = 1e-12;
/// `pooling_type` of a cross-encoder's file (llama.cpp's rank).
const RANK: u32 = 4;
/// The token types BERT's checkpoints have (sentence A and B).
const TOKEN_TYPES: usize = 2;
/// `moe_every_n_layers` of the `nomic-bert-moe` files (nomic-embed-text-v2-moe's): layers 1, 3, …
/// have experts.
pub const MOE_EVERY: usize = 2;

/// Whether `spec` is an encoder's (one of [`ENCODER_ARCHS`]).
pub(super) fn is_encoder(spec: &TinyModelSpec) -> bool {
    spec.arch.is_some_and(|a| ENCODER_ARCHS.contains(&a))
}

/// The architecture's metadata (the vocabulary's is added by the caller).
pub(super) fn metadata(spec: &TinyModelSpec) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let arch = spec.arch.unwrap_or("bert");
    let k = |s: &str| format!("{arch}.{s}");
    let mut md = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("hearth-tiny-{arch}"))),
        (k("context_length"), u32v(spec.context_length)),
        (k("embedding_length"), u32v(spec.hidden)),
        (k("feed_forward_length"), u32v(spec.ffn)),
        (k("block_count"), u32v(spec.layers)),
        (k("attention.head_count"), u32v(spec.heads)),
        (k("attention.layer_norm_epsilon"), Value::F32(EPS)),
        (k("attention.causal"), Value::Bool(false)),
        (k("pooling_type"), Value::U32(spec.pooling.unwrap_or(1))),
    ];
    if !matches!(arch, "bert" | "jina-bert-v2") {
        md.push((k("rope.freq_base"), Value::F32(spec.rope_base)));
    }
    if let (Some(m), "nomic-bert-moe") = (spec.moe, arch) {
        md.push((k("moe_every_n_layers"), u32v(MOE_EVERY)));
        md.push((k("expert_count"), u32v(m.experts)));
        md.push((k("expert_used_count"), u32v(m.used)));
    }
    if spec.pooling == Some(RANK) {
        md.push((k("classifier.output_labels"), Value::Array(vec![Value::String("LABEL_0".into())])));
    }
    md
}

/// Every tensor of the file.
pub(super) fn tensors(spec: &TinyModelSpec, rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let wt = spec.weight_type.ggml();
    let (d, f, v) = (spec.hidden, spec.ffn, spec.vocab.size);
    let arch = spec.arch.unwrap_or("bert");
    // nomic's and jina-v3's rotate (no learned positions) and fuse Q, K and V; nomic-bert's
    // alone has no biases and a gated MLP. jina-v2's take ALiBi (neither positions nor rope),
    // Q, K and V apart with BERT's biases, a GELU-gated MLP whose up has no bias.
    let jina_v2 = arch == "jina-bert-v2";
    let (rope, biased, gated) = (!matches!(arch, "bert" | "jina-bert-v2"), arch != "nomic-bert", arch == "nomic-bert");
    let mat =
        |name: String, rows: usize, cols: usize, gain: f32, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
            let w = Tensor::from_vec(rng.matrix(rows, cols, gain), (rows, cols), &cpu)?;
            Ok((name, QTensor::quantize(&w, wt)?))
        };
    let f32s = |name: String, data: Vec<f32>| -> Result<(String, QTensor), ModelError> {
        let n = data.len();
        Ok((
            name,
            QTensor::quantize(&Tensor::from_vec(data, n, &cpu)?, GgmlDType::F32)?,
        ))
    };
    // A LayerNorm's weight and bias.
    let norm = |stem: String, rng: &mut Rand| -> Result<[(String, QTensor); 2], ModelError> {
        Ok([
            f32s(format!("{stem}.weight"), rng.around(d, 1.0, 0.2))?,
            f32s(format!("{stem}.bias"), rng.around(d, 0.0, 0.2))?,
        ])
    };
    let mut out = vec![mat("token_embd.weight".into(), v, d, 1.0, rng)?];
    // XLM-RoBERTa has one token type, BERT two.
    let n_types = if spec.vocab.style == VocabStyle::Unigram { 1 } else { TOKEN_TYPES };
    let types = Tensor::from_vec(rng.matrix(n_types, d, 0.5), (n_types, d), &cpu)?;
    out.push(("token_types.weight".into(), QTensor::quantize(&types, GgmlDType::F32)?));
    if !rope && !jina_v2 {
        out.push(mat("position_embd.weight".into(), spec.context_length, d, 0.5, rng)?);
    }
    out.extend(norm("token_embd_norm".into(), rng)?);
    for i in 0..spec.layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        if rope {
            out.push(mat(n("attn_qkv.weight"), 3 * d, d, 1.0, rng)?);
            if biased {
                out.push(f32s(n("attn_qkv.bias"), rng.around(3 * d, 0.0, 0.2))?);
            }
        } else {
            for m in ["attn_q", "attn_k", "attn_v"] {
                out.push(mat(n(&format!("{m}.weight")), d, d, 1.0, rng)?);
                out.push(f32s(n(&format!("{m}.bias")), rng.around(d, 0.0, 0.2))?);
            }
        }
        // jina-embeddings-v2-base-code's LayerNorms of all of Q and all of K.
        if jina_v2 && spec.qk_layer_norm {
            out.extend(norm(n("attn_q_norm"), rng)?);
            out.extend(norm(n("attn_k_norm"), rng)?);
        }
        out.push(mat(n("attn_output.weight"), d, d, 1.0, rng)?);
        if biased {
            out.push(f32s(n("attn_output.bias"), rng.around(d, 0.0, 0.2))?);
        }
        out.extend(norm(n("attn_output_norm"), rng)?);
        if jina_v2 && spec.attn_norm_2 {
            out.extend(norm(n("attn_norm_2"), rng)?);
        }
        match spec.moe {
            // llama.cpp's `il % n == 1`: a router (F32, as llama-quantize leaves it; logits of a
            // few units, so the choices are clear) and experts of up, GELU, down, unbiased.
            Some(m) if arch == "nomic-bert-moe" && i % MOE_EVERY == 1 => {
                let router = Tensor::from_vec(rng.matrix(m.experts, d, 3.0), (m.experts, d), &cpu)?;
                out.push((n("ffn_gate_inp.weight"), QTensor::quantize(&router, GgmlDType::F32)?));
                for (name, rows, cols) in [("ffn_up_exps", f, d), ("ffn_down_exps", d, f)] {
                    let w = Tensor::from_vec(rng.matrix(m.experts * rows, cols, 1.0), (m.experts, rows, cols), &cpu)?;
                    out.push((n(&format!("{name}.weight")), QTensor::quantize(&w, wt)?));
                }
            }
            // jina-v2's gate: apart (`ffn_gate`) with `attn_norm_2`'s layout, else `ffn_up`'s
            // first half; only down biased.
            _ if jina_v2 => {
                match spec.attn_norm_2 {
                    true => {
                        out.push(mat(n("ffn_gate.weight"), f, d, 1.0, rng)?);
                        out.push(mat(n("ffn_up.weight"), f, d, 1.0, rng)?);
                    }
                    false => out.push(mat(n("ffn_up.weight"), 2 * f, d, 1.0, rng)?),
                }
                out.push(mat(n("ffn_down.weight"), d, f, 1.0, rng)?);
                out.push(f32s(n("ffn_down.bias"), rng.around(d, 0.0, 0.2))?);
            }
            _ => {
                out.push(mat(n("ffn_up.weight"), f, d, 1.0, rng)?);
                if gated {
                    out.push(mat(n("ffn_gate.weight"), f, d, 1.0, rng)?);
                } else {
                    out.push(f32s(n("ffn_up.bias"), rng.around(f, 0.0, 0.2))?);
                }
                out.push(mat(n("ffn_down.weight"), d, f, 1.0, rng)?);
                if biased {
                    out.push(f32s(n("ffn_down.bias"), rng.around(d, 0.0, 0.2))?);
                }
            }
        }
        out.extend(norm(n("layer_output_norm"), rng)?);
    }
    // A cross-encoder's head (pooling type rank): XLM-RoBERTa's dense layer (tanh after it)
    // then its one-logit output, as bge-reranker's; BERT's output alone, as ms-marco-MiniLM's.
    if spec.pooling == Some(RANK) && spec.arch == Some("jina-bert-v2") {
        // jina-reranker-v1's: one row (tanh after it, in llama.cpp's graph), no output.
        // (A bias that brings its pooled rows near tanh's middle, where scores differ most.)
        out.push(mat("cls.weight".into(), 1, d, 1.0, rng)?);
        out.push(f32s("cls.bias".into(), rng.around(1, 1.7, 0.05))?);
    } else if spec.pooling == Some(RANK) {
        if spec.vocab.style == VocabStyle::Unigram {
            out.push(mat("cls.weight".into(), d, d, 1.0, rng)?);
            out.push(f32s("cls.bias".into(), rng.around(d, 0.0, 0.2))?);
        }
        out.push(mat("cls.output.weight".into(), 1, d, 1.0, rng)?);
        out.push(f32s("cls.output.bias".into(), rng.around(1, 0.0, 0.5))?);
    }
    Ok(out)
}
