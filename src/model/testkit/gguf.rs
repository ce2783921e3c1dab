//! Random GGUF models of every supported family, written with candle's GGUF
//! writer, for tests and benchmarks.
//!
//! Weights are uniform with a variance that keeps activations near unit scale
//! (so logits are spread out and greedy choices are not near-ties); norms are
//! near 1. Tensor names and metadata keys are llama.cpp's.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};

use super::bert;
use super::deepseek2::{self, TinyMla};
use super::gemma4::{self, TinyGemma4};
use super::granite_hybrid::{self, TinyMamba2};
use super::jamba::{self, TinyJamba};
use super::lfm2;
use super::modern_bert;
use super::nemotron_h;
use super::layer_shapes::{self, LayerShape};
use super::qwen35::{self, TinyDeltaNet};
use super::vocab::{TinyVocab, VocabStyle};
use crate::model::hparams::{norm_kind, Family, NormKind};
use crate::model::ModelError;

/// The storage type of the 2-D weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightType {
    F32,
    F16,
    Q4_0,
    Q8_0,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
}

impl WeightType {
    pub fn ggml(self) -> GgmlDType {
        match self {
            Self::F32 => GgmlDType::F32,
            Self::F16 => GgmlDType::F16,
            Self::Q4_0 => GgmlDType::Q4_0,
            Self::Q8_0 => GgmlDType::Q8_0,
            Self::Q2K => GgmlDType::Q2K,
            Self::Q3K => GgmlDType::Q3K,
            Self::Q4K => GgmlDType::Q4K,
            Self::Q5K => GgmlDType::Q5K,
            Self::Q6K => GgmlDType::Q6K,
        }
    }
}

/// Mixture-of-experts MLPs in every layer (`qwen3moe`; with `Family::Llama`, Mixtral's
/// layout). Each expert is `spec.ffn` wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TinyMoe {
    pub experts: usize,
    pub used: usize,
    /// Every expert a copy of the dense MLP the same spec without `moe` would have (so the
    /// two files compute the same function, up to the weighted sum's rounding).
    pub identical: bool,
}

/// Phi-3's LongRoPE: per-pair divisors for short and long contexts
/// (`rope_factors_{short,long}.weight`), the original context that separates them and
/// `rope.scaling.attn_factor`.
#[derive(Debug, Clone, PartialEq)]
pub struct TinyLongRope {
    pub short: Vec<f32>,
    pub long: Vec<f32>,
    pub original_context: usize,
    pub attn_factor: f32,
}

/// Granite's multipliers (`embedding_scale`, `attention.scale`, `residual_scale`,
/// `logit_scale`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TinyGranite {
    pub embedding: f32,
    pub attention: f32,
    pub residual: f32,
    pub logit: f32,
}

/// `pooling_type` of a reranker's file (llama.cpp's rank).
const RANK: u32 = 4;

/// The tiny reranker's prompt template (`tokenizer.chat_template.rerank`).
pub const TINY_RERANK_TEMPLATE: &str = "Query: {query}\nDocument: {document}\nRelevant:";

/// What to write.
#[derive(Debug, Clone)]
pub struct TinyModelSpec {
    pub family: Family,
    /// The file's `general.architecture` (and key prefix) where it is not the family's own:
    /// `qwen3vl`, `qwen3vlmoe`, `qwen2vl` (the VL models' language models, which also get M-RoPE
    /// sections, and Qwen3-VL's a deepstack layer count); `mistral4` (a DeepSeek2 file);
    /// `ernie4_5-moe`.
    pub arch: Option<&'static str>,
    pub weight_type: WeightType,
    pub vocab: TinyVocab,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub context_length: usize,
    pub rope_base: f32,
    /// Llama 3.1-style per-frequency divisors (`rope_freqs.weight`).
    pub rope_freqs: Option<Vec<f32>>,
    /// `rope.scaling.type = linear` with this factor.
    pub rope_linear_factor: Option<f32>,
    /// `rope.scaling.type = yarn` with this factor and original context length.
    pub rope_yarn: Option<(f32, usize)>,
    /// `rope.scaling.alpha` (Hunyuan's NTK-aware alpha: the base × alpha^(d/(d−2))).
    pub rope_alpha: Option<f32>,
    /// Partial rotary: `rope.dimension_count` below `head_dim`.
    pub rope_dims: Option<usize>,
    /// GLM-4's M-RoPE sections (`rope.dimension_sections`): the file's Q and K rotate NeoX
    /// pairs.
    pub rope_sections: Option<[u32; 4]>,
    /// StableLM 2 12B's layout: Q/K LayerNorms per head with weights of each head's own
    /// (`attn_q_norm`, `attn_k_norm` of `[heads, head_dim]`) and no `ffn_norm` (parallel
    /// layers).
    pub qk_layer_norm: bool,
    /// Falcon 40B's and 180B's layout: each (parallel) layer's attention has a norm of its own
    /// (`attn_norm_2`), the MLP reading `attn_norm`'s output.
    pub attn_norm_2: bool,
    /// GPT-NeoX's `use_parallel_residual` (written for `gptneox` files only).
    pub parallel_residual: bool,
    /// Phi-3's LongRoPE factors.
    pub longrope: Option<TinyLongRope>,
    /// With `rope_yarn`: `rope.scaling.yarn_beta_fast`, `_slow` and `yarn_log_multiplier`.
    pub yarn_extra: Option<(f32, f32, f32)>,
    /// `attention.temperature_scale` (Ministral 3).
    pub attn_temperature_scale: Option<f32>,
    /// Granite's multipliers.
    pub granite: Option<TinyGranite>,
    /// Gemma 2: `attn_logit_softcapping` and `final_logit_softcapping`.
    pub softcaps: Option<(f32, f32)>,
    /// Leave out `output.weight` (the output projection is the embedding).
    pub tie_embeddings: bool,
    /// Gemma: `attention.sliding_window` and `attention.sliding_window_pattern` (a period:
    /// in every run of that many layers the last is global).
    pub sliding_window: Option<(usize, usize)>,
    /// Expert MLPs instead of the dense one (Gemma 4: beside it).
    pub moe: Option<TinyMoe>,
    /// Gemma 4's layers (required for that family).
    pub gemma4: Option<TinyGemma4>,
    /// DeepSeek-V2's latent attention (required for `deepseek2`).
    pub mla: Option<TinyMla>,
    /// Qwen3.5: its gated delta net layers (`qwen35`).
    pub delta_net: Option<TinyDeltaNet>,
    /// Granite 4.0's hybrids: the Mamba-2 mixer of their recurrent layers (Falcon-H1's: of
    /// every layer, beside its attention).
    pub mamba2: Option<TinyMamba2>,
    /// Experts in this many groups, of which this many are used (`expert_group_count`,
    /// `expert_group_used_count`).
    pub expert_groups: Option<(usize, usize)>,
    /// Deci's and OpenELM's layers, each of its own shape (`layers` and `heads` are then
    /// theirs; `arch` says which).
    pub layer_shapes: Option<Vec<LayerShape>>,
    /// Jamba's layers (required for `jamba`).
    pub jamba: Option<TinyJamba>,
    /// Nanbeige's passes over the layers (`num_loops`) and whether the final norm is skipped
    /// between them (`skip_loop_final_norm`).
    pub loops: Option<(usize, bool)>,
    /// An embedding model's `pooling_type` (1 mean, 2 cls, 3 last).
    pub pooling: Option<u32>,
    pub seed: u64,
}

impl TinyModelSpec {
    /// A model of a few hundred thousand parameters: hidden 256 (a multiple of
    /// the K-quant block), 2 layers, 4 heads sharing 2 K/V heads.
    pub fn tiny(family: Family, weight_type: WeightType) -> Self {
        let style = match family {
            Family::Llama => VocabStyle::Gpt2 { pre: "llama-bpe" },
            Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe => VocabStyle::Gpt2 { pre: "qwen2" },
            Family::Gemma2 | Family::Gemma3 => VocabStyle::LlamaSpm,
            // A byte-level vocabulary, as Phi-4's.
            Family::Phi3 => VocabStyle::Gpt2 { pre: "gpt-2" },
            Family::Mistral3 => VocabStyle::Gpt2 { pre: "tekken" },
            // Llama 3's tokenizer, as SmolLM3's; Granite 3's StarCoder-like one.
            Family::SmolLM3 => VocabStyle::Gpt2 { pre: "llama-bpe" },
            Family::Granite | Family::GraniteHybrid => VocabStyle::Gpt2 { pre: "refact" },
            Family::NemotronH => VocabStyle::Gpt2 { pre: "llama-bpe" },
            // ERNIE 4.5's is SentencePiece.
            Family::Ernie45 => VocabStyle::LlamaSpm,
            // OLMo's GPT-2-like pre-tokenizer.
            Family::Olmo2 => VocabStyle::Gpt2 { pre: "olmo" },
            Family::Exaone4 => VocabStyle::Gpt2 { pre: "exaone4" },
            // GLM-4.7-Flash is a `deepseek2` file with GLM's tokenizer.
            Family::Glm4 | Family::Glm4Moe | Family::DeepSeek2 => VocabStyle::Gpt2 { pre: "glm4" },
            // o200k with harmony's tokens and template, as gpt-oss's (`o200k_harmony`, which
            // llama.cpp names "gpt-4o").
            Family::GptOss => VocabStyle::Harmony,
            Family::SeedOss => VocabStyle::Gpt2 { pre: "seed-coder" },
            Family::Qwen35 => VocabStyle::Gpt2 { pre: "qwen35" },
            Family::Lfm2 => VocabStyle::Gpt2 { pre: "lfm2" },
            Family::Gemma4 => VocabStyle::Gemma4,
            Family::Cohere => VocabStyle::Gpt2 { pre: "command-r" },
        };
        let gpt_oss = family == Family::GptOss;
        let mistral3 = family == Family::Mistral3;
        Self {
            family,
            arch: None,
            weight_type,
            vocab: TinyVocab::new(style),
            hidden: 256,
            // SmolLM3: four layers, so that the last skips rope; GLM-4.5: a dense layer, then two of
            // experts.
            layers: match family {
                // Qwen3.5: recurrent, attention, recurrent, attention.
                // LFM2: convolution, convolution, attention, convolution.
                // Granite 4.0's hybrids: Mamba-2, Mamba-2, attention, Mamba-2.
                // Cohere (`cohere2`): three local layers, then a global one without rope.
                Family::SmolLM3 | Family::Qwen35 | Family::Lfm2 | Family::GraniteHybrid | Family::Cohere => 4,
                // Nemotron-H: Mamba-2, MLP, attention, MLP, Mamba-2, MLP.
                Family::NemotronH => 6,
                Family::Glm4Moe | Family::DeepSeek2 => 3,
                _ => 2,
            },
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            ffn: 512,
            context_length: 512,
            rope_base: 10_000.0,
            rope_freqs: None,
            rope_linear_factor: None,
            // Ministral 3: YaRN ×4 over an original context of 16 with its own betas and log
            // multiplier, and attention temperature stepping every 16 positions. gpt-oss: YaRN ×4
            // over 16 with the default betas (its files: ×32 over 4,096).
            rope_yarn: (mistral3 || gpt_oss).then_some((4.0, 16)),
            rope_alpha: None,
            // GLM-4 rotates half of each head, as its files say.
            // Qwen3.5 rotates a quarter of each head, in M-RoPE sections.
            rope_dims: match family {
                Family::Glm4 | Family::Glm4Moe => Some(32),
                Family::Qwen35 => Some(16),
                _ => None,
            },
            rope_sections: (family == Family::Qwen35).then_some([3, 3, 2, 0]),
            qk_layer_norm: false,
            attn_norm_2: false,
            parallel_residual: true,
            longrope: None,
            yarn_extra: mistral3.then_some((16.0, 2.0, 1.0)),
            attn_temperature_scale: mistral3.then_some(0.1),
            // Granite: each multiplier away from 1 and from the value it replaces (1/√64 for
            // the attention scale), so that leaving any one out changes the logits.
            granite: matches!(family, Family::Granite | Family::GraniteHybrid).then_some(TinyGranite {
                embedding: 2.0,
                attention: 0.02,
                residual: 0.5,
                logit: 2.5,
            }),
            // Gemma 2: caps low enough to bend this model's scores and logits (its own, 50 and
            // 30, would barely touch them), so that leaving either out changes the logits.
            softcaps: (family == Family::Gemma2).then_some((1.5, 8.0)),
            // (SmolLM3, Granite and Gemma 4 tie theirs too, but a random tied table makes the last
            // token win every position: logits of one-hot distributions, nothing to compare.)
            tie_embeddings: matches!(family, Family::Qwen2 | Family::Gemma2 | Family::Gemma3 | Family::Cohere),
            // Phi-3 writes its fused tensors (`attn_qkv`, `ffn_up` of gate and up) and, like
            // candle-transformers' quantized_phi3 needs, its own output projection.
            // Gemma, gpt-oss: layer 0 local with an 8-token window, layer 1 global.
            sliding_window: match family {
                Family::Gemma2 | Family::Gemma3 | Family::GptOss => Some((8, 2)),
                Family::Cohere => Some((8, 4)),
                _ => None,
            },
            // Qwen3 MoE, GLM-4.5, gpt-oss: 4 experts, 2 per token.
            moe: matches!(family, Family::Qwen3Moe | Family::Glm4Moe | Family::GptOss | Family::DeepSeek2).then_some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            // Gemma 4: the E models' layers (`gemma4_moe` for the 26B's).
            gemma4: (family == Family::Gemma4).then(TinyGemma4::e_model),
            // DeepSeek2: GLM-4.7-Flash's and DeepSeek-V3's layout (`deepseek2_lite` for V2-Lite's).
            mla: (family == Family::DeepSeek2).then(TinyMla::v3),
            delta_net: (family == Family::Qwen35).then(TinyDeltaNet::tiny),
            mamba2: matches!(family, Family::GraniteHybrid | Family::NemotronH).then(|| TinyMamba2::tiny(256)),
            expert_groups: None,
            layer_shapes: None,
            jamba: None,
            loops: None,
            pooling: None,
            seed: 7,
        }
    }

    /// Gemma 4 26B-A4B's layout: K as V in its global layer, a dense MLP beside 4 experts of
    /// 128, 2 per token.
    pub fn gemma4_moe(weight_type: WeightType) -> Self {
        Self {
            ffn: 128,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            gemma4: Some(TinyGemma4::moe_model()),
            seed: 8,
            ..Self::tiny(Family::Gemma4, weight_type)
        }
    }

    /// Gemma 3n's files (`gemma3n`) as llama.cpp runs them: [`TinyGemma4::gemma3n`]'s 25
    /// layers (the last five sharing K/V), hidden 64, 2 heads sharing one K/V head of 32, MLPs
    /// of 128; Gemma 3's SentencePiece vocabulary.
    pub fn gemma3n(weight_type: WeightType) -> Self {
        Self::gemma3n_of(25, 20, weight_type)
    }

    /// [`Self::gemma3n`] in 10 layers, the last three sharing K/V (two local layers reading
    /// layer 6's, a global one reading layer 4's; the file says so, which llama.cpp would not
    /// read): for the cache tests, where 25 random Q8_0 layers amplify an activation rounding
    /// that a cached prefix flips (0.07 of logits of 9, with f32 weights 7·10⁻⁶).
    pub fn gemma3n_short(weight_type: WeightType) -> Self {
        Self::gemma3n_of(10, 7, weight_type)
    }

    fn gemma3n_of(layers: usize, kv_layers: usize, weight_type: WeightType) -> Self {
        let (kv_heads, head_dim, ffn) = (1, 32, 128);
        Self {
            arch: Some("gemma3n"),
            vocab: TinyVocab::new(VocabStyle::LlamaSpm),
            hidden: 64,
            layers,
            heads: 2,
            kv_heads,
            head_dim,
            ffn,
            gemma4: Some(TinyGemma4::gemma3n(layers, kv_layers, [kv_heads, head_dim, ffn])),
            seed: if weight_type == WeightType::F32 { 124 } else { 125 },
            ..Self::tiny(Family::Gemma4, weight_type)
        }
    }

    /// BitNet b1.58's files (`bitnet`): the tiny Llama's layers with NeoX rope and the norms
    /// inside their blocks, the output projection the embedding's (llama.cpp's graph reads no
    /// other), SentencePiece's vocabulary; the MLP SiLU's (the files llama.cpp's converter
    /// writes say no `hidden_activation`).
    pub fn bitnet(weight_type: WeightType) -> Self {
        Self {
            arch: Some("bitnet"),
            vocab: TinyVocab::new(VocabStyle::LlamaSpm),
            tie_embeddings: true,
            seed: if weight_type == WeightType::F32 { 131 } else { 132 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// Nanbeige 4.2's files (`nanbeige`): the tiny Llama's two layers run over twice with the
    /// final norm between (f32), or three times without it (Q8_0); SentencePiece's vocabulary.
    /// A tiny embedding model as Qwen3-Embedding's files are: Qwen3's layer, the file's pooling
    /// type `pooling` (1 mean, 2 cls, 3 last), EOS added after raw text
    /// (`tokenizer.ggml.add_eos_token`).
    pub fn embedding(pooling: u32, weight_type: WeightType) -> Self {
        let mut spec = Self {
            pooling: Some(pooling),
            seed: 133,
            ..Self::tiny(Family::Qwen3, weight_type)
        };
        spec.vocab.metadata.retain(|(k, _)| k != "tokenizer.ggml.add_eos_token");
        spec.vocab
            .metadata
            .push(("tokenizer.ggml.add_eos_token".into(), Value::Bool(true)));
        spec
    }

    /// A tiny EmbeddingGemma (`gemma-embedding`): the tiny Gemma 3's layer attending both ways
    /// in two layers, the first local over a window of 8 (4 positions on either side), mean
    /// pooling, the pooled vector projected to twice the width and back (`dense_2`, `dense_3`);
    /// EOS added after the text, as EmbeddingGemma's file says.
    pub fn gemma_embedding(weight_type: WeightType) -> Self {
        let mut spec = Self {
            arch: Some("gemma-embedding"),
            pooling: Some(1),
            sliding_window: Some((8, 2)),
            seed: 139,
            ..Self::tiny(Family::Gemma3, weight_type)
        };
        spec.vocab.metadata.retain(|(k, _)| k != "tokenizer.ggml.add_eos_token");
        spec.vocab.metadata.push(("tokenizer.ggml.add_eos_token".into(), Value::Bool(true)));
        spec
    }

    /// [`Self::gemma_embedding`] at EmbeddingGemma-300M's size (24 layers of 768, 3 query heads
    /// sharing one K/V head of 256, an MLP of 1,152, 262,144 tokens: the SentencePiece
    /// vocabulary padded, a window of 512, five local layers then a global one, 2,048
    /// positions, projections to 3,072 and back); random weights, for the throughput benchmark
    /// against llama.cpp.
    pub fn gemma_embedding_base(weight_type: WeightType) -> Self {
        let mut spec = Self {
            vocab: TinyVocab::with_size(VocabStyle::LlamaSpm, 262_144),
            hidden: 768,
            layers: 24,
            heads: 3,
            kv_heads: 1,
            head_dim: 256,
            ffn: 1152,
            context_length: 2048,
            sliding_window: Some((512, 6)),
            ..Self::gemma_embedding(weight_type)
        };
        spec.vocab.metadata.retain(|(k, _)| k != "tokenizer.ggml.add_eos_token");
        spec.vocab.metadata.push(("tokenizer.ggml.add_eos_token".into(), Value::Bool(true)));
        spec
    }

    /// A tiny encoder embedding model (`arch`: `bert`, as BERT's, MiniLM's and BGE's files are;
    /// `nomic-bert`, as nomic-embed-text's), the file's pooling type `pooling` (1 mean, 2 cls):
    /// two layers of hidden 256 in 4 heads, a WordPiece vocabulary, 128 positions
    /// (`testkit::bert`).
    pub fn encoder(arch: &'static str, pooling: u32, weight_type: WeightType) -> Self {
        Self {
            arch: Some(arch),
            vocab: TinyVocab::new(VocabStyle::WordPiece),
            layers: 2,
            kv_heads: 4,
            context_length: 128,
            rope_base: 1000.0,
            pooling: Some(pooling),
            seed: if arch == "bert" { 136 } else { 137 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// [`Self::encoder`] as XLM-RoBERTa's files are (bge-m3's, multilingual-e5's): `bert` with a
    /// SentencePiece Unigram vocabulary ([`VocabStyle::Unigram`]) and one token type.
    pub fn encoder_xlmr(pooling: u32, weight_type: WeightType) -> Self {
        Self {
            vocab: TinyVocab::new(VocabStyle::Unigram),
            seed: 138,
            ..Self::encoder("bert", pooling, weight_type)
        }
    }

    /// A tiny nomic-embed-text-v2-moe (`nomic-bert-moe`): [`Self::encoder_xlmr`]'s vocabulary
    /// (its last token `<mask>`: [`TinyVocab::with_mask`]) and layer with NeoX rope for
    /// positions, a fused, biased QKV, and every other layer's MLP (from the second on) four
    /// experts of up, GELU, down, two per token, routed by softmax and weighted by it
    /// unrenormalized (llama.cpp's `nomic-bert-moe` graph).
    pub fn encoder_nomic_moe(pooling: u32, weight_type: WeightType) -> Self {
        Self {
            arch: Some("nomic-bert-moe"),
            layers: 4,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            seed: 141,
            vocab: TinyVocab::new(VocabStyle::Unigram).with_mask(),
            ..Self::encoder_xlmr(pooling, weight_type)
        }
    }

    /// A tiny jina-embeddings-v2 (`jina-bert-v2`): [`Self::encoder`]'s BERT with a WordPiece
    /// vocabulary, ALiBi for positions, and a GELU-gated MLP, its gate in `ffn_up`'s first half
    /// (the base and small models' layout); with `code`, the gate apart (`ffn_gate`), LayerNorms
    /// of all of Q and all of K, and a second norm after the attention's (the code model's).
    pub fn encoder_jina_v2(pooling: u32, weight_type: WeightType, code: bool) -> Self {
        Self {
            qk_layer_norm: code,
            attn_norm_2: code,
            seed: if code { 144 } else { 143 },
            ..Self::encoder("jina-bert-v2", pooling, weight_type)
        }
    }

    /// A tiny ModernBERT (`modern-bert`: `testkit::modern_bert`): [`Self::encoder`]'s sizes in
    /// four layers, a global one then two local ones over a window of 8 (4 positions on either
    /// side), ModernBERT's GPT-2 BPE vocabulary with `[CLS]`, `[SEP]` and `[MASK]`; GELU's MLP
    /// (F32) or SiLU's (Q8_0). Of pooling type rank, a reranker with ModernBERT's head
    /// (`testkit::modern_bert`) and weights of its own.
    pub fn encoder_modern_bert(pooling: u32, weight_type: WeightType) -> Self {
        let seed = if weight_type == WeightType::F32 { 145 } else { 146 };
        Self {
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "modern-bert" }),
            layers: 4,
            sliding_window: Some((8, 3)),
            seed: if pooling == RANK { seed + 10 } else { seed },
            ..Self::encoder("modern-bert", pooling, weight_type)
        }
    }

    /// [`Self::encoder_nomic_moe`] at nomic-embed-text-v2-moe's size: 12 layers of 768 in 12
    /// heads, an MLP (and each of 8 experts, 2 per token, in every other layer) of 3,072, the
    /// 250,048-token vocabulary (the Unigram fixture's padded), 512 positions; random weights,
    /// for the throughput benchmark against llama.cpp.
    pub fn encoder_nomic_moe_base(weight_type: WeightType) -> Self {
        Self {
            vocab: TinyVocab::with_size(VocabStyle::Unigram, 250_048).with_mask(),
            hidden: 768,
            layers: 12,
            heads: 12,
            kv_heads: 12,
            head_dim: 64,
            ffn: 3072,
            context_length: 512,
            moe: Some(TinyMoe {
                experts: 8,
                used: 2,
                identical: false,
            }),
            ..Self::encoder_nomic_moe(1, weight_type)
        }
    }

    /// A tiny jina-embeddings-v3 (`jina-bert-v3`): [`Self::encoder_xlmr`] (its last token
    /// `<mask>`) with NeoX rope for positions and a fused, biased QKV (its task LoRA adapters are files of their own).
    ///
    /// Its vocabulary keeps repeated and trailing whitespace (`remove_extra_whitespaces` false,
    /// where the others drop it), so the whitespace `<mask>` strips to its left shows.
    pub fn encoder_jina_v3(pooling: u32, weight_type: WeightType) -> Self {
        let mut vocab = TinyVocab::new(VocabStyle::Unigram).with_mask();
        const KEY: &str = "tokenizer.ggml.remove_extra_whitespaces";
        vocab.metadata.retain(|(k, _)| k != KEY);
        vocab.metadata.push((KEY.into(), Value::Bool(false)));
        Self {
            arch: Some("jina-bert-v3"),
            seed: 142,
            vocab,
            ..Self::encoder_xlmr(pooling, weight_type)
        }
    }

    /// A tiny cross-encoder (a reranker of pooling type rank, scoring its first row):
    /// [`Self::encoder_xlmr`]'s model with RoBERTa's classifier head (a dense layer, tanh, one
    /// logit), as bge-reranker-v2-m3's file, where `xlmr`; else [`Self::encoder`]'s BERT with
    /// its output projection alone, as ms-marco-MiniLM's.
    pub fn encoder_reranker(xlmr: bool, weight_type: WeightType) -> Self {
        let spec = match xlmr {
            true => Self::encoder_xlmr(RANK, weight_type),
            false => Self::encoder("bert", RANK, weight_type),
        };
        Self { seed: spec.seed + 10, ..spec }
    }

    /// [`Self::encoder`] at BERT-base's size (the shape of bge-base, e5-base and
    /// nomic-embed-text): 12 layers of hidden 768 in 12 heads, an MLP of 3,072, 30,522 tokens
    /// (the WordPiece vocabulary padded), 512 positions (`bert`) or 2,048 (`nomic-bert`); random
    /// weights, for the throughput benchmark against llama.cpp.
    pub fn encoder_base(arch: &'static str, weight_type: WeightType) -> Self {
        Self {
            vocab: TinyVocab::with_size(VocabStyle::WordPiece, 30_522),
            hidden: 768,
            layers: 12,
            heads: 12,
            kv_heads: 12,
            head_dim: 64,
            ffn: 3072,
            context_length: if arch == "bert" { 512 } else { 2048 },
            ..Self::encoder(arch, 1, weight_type)
        }
    }

    /// A tiny reranker as Qwen3-Reranker's files are: [`Self::embedding`]'s model with pooling
    /// type rank, a classifier head of two labels (`cls.output.weight`, "yes" and "no") and a
    /// rerank template ([`TINY_RERANK_TEMPLATE`]).
    pub fn reranker(weight_type: WeightType) -> Self {
        Self {
            seed: 134,
            ..Self::embedding(RANK, weight_type)
        }
    }

    /// A tiny code model as Qwen2.5-Coder's files are: Qwen2's layer over a vocabulary with
    /// its fill-in-the-middle tokens (`<|fim_prefix|>`, `<|fim_suffix|>`, `<|fim_middle|>`,
    /// `<|fim_pad|>`, `<|repo_name|>`, `<|file_sep|>`), found by their text as llama.cpp finds
    /// them. The vocabulary's pre-tokenizer is named `kormo` (Qwen2's split in hearth and in
    /// llama.cpp; no other tiny vocabulary uses it), so the FIM tokens change no other tiny model.
    pub fn coder(weight_type: WeightType) -> Self {
        Self {
            seed: 135,
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "kormo" }),
            ..Self::tiny(Family::Qwen2, weight_type)
        }
    }

    pub fn nanbeige(weight_type: WeightType) -> Self {
        let f32 = weight_type == WeightType::F32;
        Self {
            arch: Some("nanbeige"),
            vocab: TinyVocab::new(VocabStyle::LlamaSpm),
            loops: Some(if f32 { (2, false) } else { (3, true) }),
            seed: if f32 { 129 } else { 130 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// Mellum 2's files (`mellum`): the tiny Qwen3 MoE's layer in four layers, three local
    /// (an 8-token window) then a global one, YaRN ×4 over 16 positions in the global layer
    /// only; Mellum 2's pre-tokenizer (`mellum2`: digits one by one, then GPT-2's split).
    pub fn mellum(weight_type: WeightType) -> Self {
        Self {
            arch: Some("mellum"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "mellum2" }),
            layers: 4,
            sliding_window: Some((8, 4)),
            rope_yarn: Some((4.0, 16)),
            seed: if weight_type == WeightType::F32 { 126 } else { 128 },
            ..Self::tiny(Family::Qwen3Moe, weight_type)
        }
    }

    /// Qwen3-VL's language model (`qwen3vl`, with `moe` `qwen3vlmoe`): Qwen3's (or Qwen3 MoE's)
    /// layer under its own architecture, with M-RoPE sections (12, 10 and 10 of the head's 32
    /// pairs) and a deepstack layer, which a text token does not feel.
    pub fn qwen3vl(moe: bool, weight_type: WeightType) -> Self {
        let family = if moe { Family::Qwen3Moe } else { Family::Qwen3 };
        Self {
            arch: Some(if moe { "qwen3vlmoe" } else { "qwen3vl" }),
            rope_sections: Some([12, 10, 10, 0]),
            seed: 10,
            ..Self::tiny(family, weight_type)
        }
    }

    /// Qwen3.5's MoE files (`qwen35moe`): the tiny Qwen3.5's layers with 4 experts (2 per
    /// token) beside a gated shared expert of their width.
    pub fn qwen35_moe(weight_type: WeightType) -> Self {
        Self {
            arch: Some("qwen35moe"),
            ffn: 128,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            seed: 12,
            ..Self::tiny(Family::Qwen35, weight_type)
        }
    }

    /// Qwen3-Next (`qwen3next`): the tiny Qwen3.5 MoE layers with V heads grouped by Q/K head,
    /// `ssm_ba`, and (`ssm_in`) its older files' one `ssm_in`; NeoX rope without sections.
    pub fn qwen3next(ssm_in: bool, weight_type: WeightType) -> Self {
        Self {
            arch: Some("qwen3next"),
            rope_sections: None,
            delta_net: Some(TinyDeltaNet {
                grouped: true,
                ssm_in,
                ..TinyDeltaNet::tiny()
            }),
            seed: 13,
            ..Self::qwen35_moe(weight_type)
        }
    }

    /// Granite 4.0 H-Tiny's and H-Small's layout (`granitehybrid` with experts): the tiny
    /// hybrid's layers with 4 experts of 128 (2 per token) beside a shared expert of their
    /// width; with rope (`rope.scaling.finetuned` true), which IBM's files leave off.
    pub fn granite_hybrid_moe(weight_type: WeightType) -> Self {
        Self {
            ffn: 128,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            mamba2: Some(TinyMamba2 {
                no_rope: false,
                ..TinyMamba2::tiny(256)
            }),
            seed: 19,
            ..Self::tiny(Family::GraniteHybrid, weight_type)
        }
    }

    /// OLMoE's files (`olmoe`: OLMoE-1B-7B): the tiny Qwen3 MoE's layers with Q and K
    /// normalized whole and 4 experts of `feed_forward_length` (2 per token, softmax, not
    /// renormalized); its own output projection; as many K/V heads as query heads (llama.cpp
    /// reads `attn_k_norm` as wide as the embedding).
    pub fn olmoe(weight_type: WeightType) -> Self {
        Self {
            arch: Some("olmoe"),
            kv_heads: 4,
            ffn: 128,
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "olmo" }),
            seed: 28,
            ..Self::tiny(Family::Qwen3Moe, weight_type)
        }
    }

    /// Phi-2's files (`phi2`): biased LayerNorms, the attention (Q/K/V and output biases, NeoX
    /// pairs over a quarter of each head) and an MLP of up, GELU, down (biased) side by side
    /// after one norm, an output projection of its own with a bias per vocabulary entry;
    /// SentencePiece vocabulary.
    pub fn phi2(weight_type: WeightType) -> Self {
        Self {
            arch: Some("phi2"),
            vocab: TinyVocab::new(VocabStyle::LlamaSpm),
            rope_dims: Some(16),
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 45 } else { 46 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// Falcon's files (`falcon`): Phi-2's parallel layer (biased LayerNorms, NeoX pairs, an MLP
    /// of up, GELU, down) without any other bias and rotating whole heads, a fused `attn_qkv`
    /// of one K/V head (7B's multi-query attention), an output projection of its own; Falcon's
    /// pre-tokenizer. With `forty`: 40B's and 180B's layout, two K/V heads and the attention's
    /// own norm (`attn_norm_2`).
    pub fn falcon(weight_type: WeightType, forty: bool) -> Self {
        Self {
            arch: Some("falcon"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "falcon" }),
            kv_heads: if forty { 2 } else { 1 },
            attn_norm_2: forty,
            tie_embeddings: false,
            seed: match (forty, weight_type) {
                (false, WeightType::F32) => 52,
                (false, _) => 53,
                (true, _) => 54,
            },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// GPT-NeoX's files (`gptneox`: Pythia, GPT-NeoX-20B, RedPajama-INCITE): StarCoder2's layer
    /// (biased LayerNorms, NeoX pairs over a quarter of each head as Pythia's, biases on every
    /// projection, an MLP of up, GELU, down) with a fused `attn_qkv` and its bias, as many K/V
    /// heads as query heads, an output projection of its own; OLMo's (GPT-NeoX-20B's)
    /// pre-tokenizer. `parallel`: `use_parallel_residual`, each layer's attention and MLP
    /// reading their own norms side by side.
    pub fn gptneox(weight_type: WeightType, parallel: bool) -> Self {
        Self {
            arch: Some("gptneox"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "olmo" }),
            kv_heads: 4,
            rope_dims: Some(16),
            parallel_residual: parallel,
            tie_embeddings: false,
            seed: match (parallel, weight_type) {
                (true, WeightType::F32) => 55,
                (true, _) => 56,
                (false, _) => 57,
            },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// GPT-2's files (`gpt2`) and, with `starcoder`, StarCoder's (`starcoder`): GPT-NeoX's
    /// sequential layer (fused `attn_qkv` and its bias, biases on every projection, an MLP of
    /// up, GELU, down) without rope, each position's learned vector (`position_embd`, a row per
    /// position of the context) added to the token's, an output projection of its own (GPT-2's
    /// files tie theirs to the embedding, but this tiny table tied would have each token predict
    /// itself); GPT-2's pre-tokenizer, or StarCoder's one K/V head (multi-query) and its
    /// pre-tokenizer.
    pub fn gpt2(weight_type: WeightType, starcoder: bool) -> Self {
        Self {
            arch: Some(if starcoder { "starcoder" } else { "gpt2" }),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: if starcoder { "starcoder" } else { "gpt-2" } }),
            kv_heads: if starcoder { 1 } else { 4 },
            tie_embeddings: false,
            seed: match (starcoder, weight_type) {
                (false, WeightType::F32) => 58,
                (false, _) => 59,
                (true, _) => 60,
            },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// Refact's files (`refact`: Refact-1.6B): the tiny Llama's layer without rope, ALiBi's
    /// slopes biasing the scores instead; its StarCoder-like pre-tokenizer.
    pub fn refact(weight_type: WeightType) -> Self {
        Self {
            arch: Some("refact"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "refact" }),
            seed: if weight_type == WeightType::F32 { 61 } else { 62 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// BLOOM's files (`bloom`): GPT-2's layer (biased LayerNorms and projections, a fused
    /// `attn_qkv` and its bias, an MLP of up, GELU, down) with ALiBi instead of positions, the
    /// embedding LayerNorm-ed before the first layer (`token_embd_norm`), an output projection
    /// of its own (BLOOM's files tie theirs; see [`Self::gpt2`]); its pre-tokenizer.
    pub fn bloom(weight_type: WeightType) -> Self {
        Self {
            arch: Some("bloom"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "bloom" }),
            kv_heads: 4,
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 63 } else { 64 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// MPT's files (`mpt`): GPT-2's layer without a bias anywhere (its LayerNorms' too), a
    /// fused `attn_qkv`, ALiBi (`attention.max_alibi_bias` 8), Q, K and V clamped at ±1.5
    /// (`attention.clamp_kqv`: low enough to bite here), an output projection of its own (MPT's
    /// files tie theirs; see [`Self::gpt2`]); the GPT-NeoX tokenizer's pre-tokenizer (`mpt`).
    pub fn mpt(weight_type: WeightType) -> Self {
        Self {
            arch: Some("mpt"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "mpt" }),
            kv_heads: 4,
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 65 } else { 66 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// The first OLMo's files (`olmo`: OLMo 1B and 7B): the tiny Llama's layer whose
    /// LayerNorms have neither weight nor bias (none in the file), Q, K and V clamped at ±1.5
    /// (`attention.clamp_kqv`, as MPT's), an output projection of its own (OLMo-1B ties its
    /// own); the GPT-NeoX tokenizer's pre-tokenizer (`olmo`).
    pub fn olmo(weight_type: WeightType) -> Self {
        Self {
            arch: Some("olmo"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "olmo" }),
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 67 } else { 68 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// CodeShell's files (`codeshell`: CodeShell-7B): GPT-2's layer (biased LayerNorms and
    /// projections, a fused `attn_qkv` and its bias, an MLP of up, GELU, down) with NeoX rope
    /// for positions and two K/V heads for four; an output projection of its own; its
    /// StarCoder-like pre-tokenizer.
    pub fn codeshell(weight_type: WeightType) -> Self {
        Self {
            arch: Some("codeshell"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "codeshell" }),
            kv_heads: 2,
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 69 } else { 70 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// Jais's files (`jais`): GPT-2's layer with ALiBi for positions (`attention.max_alibi_bias`
    /// 8), its MLP gated SiLU with a bias on the gate, up and down projections, the scores
    /// scaled by 1/head_dim; an output projection of its own; GPT-2's pre-tokenizer (`jais`).
    pub fn jais(weight_type: WeightType) -> Self {
        Self {
            arch: Some("jais"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "jais" }),
            kv_heads: 4,
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 71 } else { 72 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// DBRX's files (`dbrx`): Mixtral's layer (here 4 experts, 2 per token, renormalized) with
    /// unbiased LayerNorms, NeoX rope, a fused `attn_qkv`, Q, K and V clamped at ±1.5
    /// (`attention.clamp_kqv`, required), the MLP's norm under DBRX's name (`attn_output_norm`);
    /// its cl100k pre-tokenizer (`dbrx`).
    pub fn dbrx(weight_type: WeightType) -> Self {
        Self {
            arch: Some("dbrx"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "dbrx" }),
            kv_heads: 2,
            tie_embeddings: false,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            seed: if weight_type == WeightType::F32 { 73 } else { 74 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// Baichuan's files (`baichuan`): Llama's layer with a SentencePiece vocabulary, rope in a
    /// 7B's 32 layers or, with `thirteen`, ALiBi in a 13B's 40 (the layer count is all that
    /// tells them apart), each layer narrow (64 wide, two heads of 32) so that 40 of them stay
    /// small; an output projection of its own.
    pub fn baichuan(weight_type: WeightType, thirteen: bool) -> Self {
        Self {
            arch: Some("baichuan"),
            vocab: TinyVocab::new(VocabStyle::LlamaSpm),
            hidden: 64,
            layers: if thirteen { 40 } else { 32 },
            heads: 2,
            kv_heads: 2,
            head_dim: 32,
            ffn: 128,
            tie_embeddings: false,
            seed: match (thirteen, weight_type) {
                (false, WeightType::F32) => 78,
                (false, _) => 75,
                (true, WeightType::F32) => 76,
                (true, _) => 77,
            },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// ChatGLM's files (`chatglm`: ChatGLM3-6B, GLM-4-9B and its chat model): the tiny GLM-4's
    /// layer (half of each head rotated in adjacent pairs, a fused gate/up) without its
    /// post-norms, Q, K and V in one `attn_qkv` with one bias; GLM-4-9B-chat's pre-tokenizer.
    pub fn chatglm(weight_type: WeightType) -> Self {
        Self {
            arch: Some("chatglm"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "chatglm-bpe" }),
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 79 } else { 80 },
            ..Self::tiny(Family::Glm4, weight_type)
        }
    }

    /// Nemotron's files (`nemotron`: Nemotron-Mini-4B, Minitron): biased LayerNorms, NeoX rope
    /// over half of each head, an MLP of up, squared ReLU, down without biases; a SentencePiece
    /// vocabulary, an output projection of its own.
    pub fn nemotron(weight_type: WeightType) -> Self {
        Self {
            arch: Some("nemotron"),
            vocab: TinyVocab::new(VocabStyle::LlamaSpm),
            rope_dims: Some(32),
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 81 } else { 82 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// DeepSeekMoE's files (`deepseek`): Llama's layer, the first of three dense, the others'
    /// 4 experts (2 per token) softmax-routed, not renormalized, scaled by 1.5, beside one
    /// shared expert; an output projection of its own; its pre-tokenizer (`deepseek-llm`).
    pub fn deepseek(weight_type: WeightType) -> Self {
        Self {
            arch: Some("deepseek"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "deepseek-llm" }),
            layers: 3,
            tie_embeddings: false,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            seed: if weight_type == WeightType::F32 { 83 } else { 84 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// Qwen (1)'s files (`qwen`): the tiny Qwen2's layer (NeoX rope) with one `attn_qkv` and
    /// its bias, as many K/V heads as query heads, `feed_forward_length` twice the MLP's width
    /// (as its files give it); an output projection of its own.
    pub fn qwen(weight_type: WeightType) -> Self {
        Self {
            arch: Some("qwen"),
            kv_heads: 4,
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 85 } else { 86 },
            ..Self::tiny(Family::Qwen2, weight_type)
        }
    }

    /// Phi-3.5-MoE's files (`phimoe`): the tiny Phi-3's attention (a fused `attn_qkv`, here with
    /// its bias, NeoX rope, an output bias) under RMSNorms with a bias each, 4 experts (2 per
    /// token, renormalized softmax weights) for its MLP, logit biases.
    pub fn phimoe(weight_type: WeightType) -> Self {
        Self {
            arch: Some("phimoe"),
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            seed: if weight_type == WeightType::F32 { 87 } else { 88 },
            ..Self::tiny(Family::Phi3, weight_type)
        }
    }

    /// Ling 2.0's files (`bailingmoe2`): GLM-4.5's tiny layout (a dense layer, then two of
    /// experts with a selection bias and a shared expert, sigmoid-routed, renormalized, scaled)
    /// with Q, K and V fused and unbiased, the MLP norm as `ffn_norm`, 8 experts in 4 groups of
    /// which 2 are used; its pre-tokenizer (`bailingmoe2`), an output projection of its own.
    pub fn bailingmoe2(weight_type: WeightType) -> Self {
        Self {
            arch: Some("bailingmoe2"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "bailingmoe2" }),
            tie_embeddings: false,
            moe: Some(TinyMoe {
                experts: 8,
                used: 2,
                identical: false,
            }),
            expert_groups: Some((4, 2)),
            seed: if weight_type == WeightType::F32 { 93 } else { 94 },
            ..Self::tiny(Family::Glm4Moe, weight_type)
        }
    }

    /// EXAONE's MoE files (`exaone-moe`): GLM-4.5's tiny layout (a dense layer, then experts
    /// with a selection bias and a shared expert, sigmoid-routed, renormalized, scaled) in four
    /// layers, three of them local with an 8-token window and rope, the fourth global without;
    /// Q, K and V apart and unbiased, whole heads rotated, the MLP norm as `ffn_norm`; EXAONE
    /// 4.0's pre-tokenizer, an output projection of its own.
    pub fn exaone_moe(weight_type: WeightType) -> Self {
        Self {
            arch: Some("exaone-moe"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "exaone4" }),
            layers: 4,
            rope_dims: None,
            sliding_window: Some((8, 4)),
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 101 } else { 102 },
            ..Self::tiny(Family::Glm4Moe, weight_type)
        }
    }

    /// MiniMax-M2's files (`minimax-m2`): GLM-4.5's tiny layer with Q, K and V apart and
    /// unbiased, Q and K normalized whole before half of each head is rotated, the MLP norm as
    /// `ffn_norm`, every layer's MLP experts with a selection bias (no shared expert, no dense
    /// layer), sigmoid-routed, renormalized, not scaled; its pre-tokenizer (`minimax-m2`), an
    /// output projection of its own.
    pub fn minimax_m2(weight_type: WeightType) -> Self {
        Self {
            arch: Some("minimax-m2"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "minimax-m2" }),
            tie_embeddings: false,
            // (On seed 104 the Q8_0 file differed from llama.cpp by 1.2 at one position while its
            // f32 twin matched exactly: a near-tied choice, most likely of an expert, that ggml's
            // quantized activations take the other way.)
            seed: if weight_type == WeightType::F32 { 103 } else { 105 },
            ..Self::tiny(Family::Glm4Moe, weight_type)
        }
    }

    /// Jais 2's files (`jais2`): biased LayerNorms, NeoX rope, Q/K/V biases, an MLP of up,
    /// squared ReLU, down with biases on every projection; its pre-tokenizer (`jais-2`), an
    /// output projection of its own.
    pub fn jais2(weight_type: WeightType) -> Self {
        Self {
            arch: Some("jais2"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "jais-2" }),
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 99 } else { 100 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// Falcon-H1's files (`falcon-h1`): Llama's layer with NeoX pairs and a Mamba-2 mixer
    /// (16 heads of 32 in 2 groups, a state of 16, 4 taps) beside every layer's attention; the
    /// Q8_0 file's mixers without their output norm (as files converted without
    /// `mamba_rms_norm`); Falcon-H1's pre-tokenizer, an output projection of its own.
    pub fn falcon_h1(weight_type: WeightType) -> Self {
        let f32 = weight_type == WeightType::F32;
        Self {
            arch: Some("falcon-h1"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "falcon-h1" }),
            tie_embeddings: false,
            mamba2: Some(TinyMamba2 {
                no_rope: false,
                ssm_norm: f32,
                ..TinyMamba2::tiny(256)
            }),
            seed: if f32 { 106 } else { 107 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// SmallThinker's files (`smallthinker`): Llama's layers with NeoX pairs, each MLP 4
    /// experts (2 per token) with a ReLU gate, routed on the layer's input; the f32 file eight
    /// layers, sigmoid-routed, with windows (`attention.sliding_window` 32, which llama.cpp and
    /// hearth run as 4,096: every fourth layer from the first global and without rope, the
    /// others local on a base of their own), the Q8_0 file four layers, softmax-routed, without;
    /// Qwen2's pre-tokenizer, an output projection of its own.
    pub fn smallthinker(weight_type: WeightType) -> Self {
        let f32 = weight_type == WeightType::F32;
        Self {
            arch: Some("smallthinker"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "qwen2" }),
            layers: if f32 { 8 } else { 4 },
            ffn: 128,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            sliding_window: f32.then_some((32, 4)),
            tie_embeddings: false,
            seed: if f32 { 108 } else { 109 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// Llama 4's files (`llama4`): four of Llama's layers, every second MLP 4 experts (2 per
    /// token, sigmoid-routed by raw score, each weight on its expert's input) beside a shared
    /// expert of an expert's width, the others dense; Llama 3.1-style rope divisors; each
    /// rotating layer's Q and K normalized without a weight after rope; the fourth layer global
    /// and without rope (its temperature 1 below position 8,191). The f32 file has no window
    /// keys: three layers of chunks (8,192 positions: within these prompts, causal attention);
    /// the Q8_0 file's pattern alternates, its chunked layers on a rope base of their own (so
    /// its second layer is global with rope). Llama 4's pre-tokenizer, an output projection of
    /// its own.
    pub fn llama4(weight_type: WeightType) -> Self {
        let f32 = weight_type == WeightType::F32;
        let tiny = Self::tiny(Family::Llama, weight_type);
        Self {
            arch: Some("llama4"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "llama4" }),
            layers: 4,
            ffn: 256,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            rope_freqs: Some(llama31_rope_divisors(tiny.head_dim / 2)),
            sliding_window: (!f32).then_some((8192, 2)),
            tie_embeddings: false,
            seed: if f32 { 112 } else { 111 },
            ..tiny
        }
    }

    /// Llama-3.1-Nemotron 51B's files (`deci`): the layers of [`layer_shapes::DECI`], each its own
    /// K/V heads and MLP width (attention with 2, 4 and 1 K/V heads, linear attention, an MLP
    /// alone, a layer with nothing), Llama 3.1's rope factors, Llama 3's pre-tokenizer, an
    /// output projection of its own.
    pub fn deci(weight_type: WeightType) -> Self {
        let tiny = Self::tiny(Family::Llama, weight_type);
        Self::deci_of(layer_shapes::DECI.to_vec(), weight_type == WeightType::F32, tiny)
    }

    /// A `deci` file of `layers`, from `tiny`'s other settings.
    pub fn deci_of(layers: Vec<LayerShape>, f32: bool, tiny: Self) -> Self {
        Self {
            arch: Some("deci"),
            layers: layers.len(),
            kv_heads: layers.iter().map(|l| l.kv_heads).find(|&k| k > 0).unwrap_or(tiny.kv_heads),
            rope_freqs: Some(llama31_rope_divisors(tiny.head_dim / 2)),
            tie_embeddings: false,
            layer_shapes: Some(layers),
            seed: if f32 { 113 } else { 114 },
            ..tiny
        }
    }

    /// OpenELM's files (`openelm`): the layers of [`layer_shapes::OPENELM`], each its own query
    /// heads, K/V heads and MLP width, with a fused QKV, each head's Q and K normalized, NeoX
    /// pairs, Llama 2's SentencePiece vocabulary, the output projection the embedding's.
    pub fn openelm(weight_type: WeightType) -> Self {
        let f32 = weight_type == WeightType::F32;
        let tiny = Self::tiny(Family::Llama, weight_type);
        let layers = layer_shapes::OPENELM.to_vec();
        Self {
            arch: Some("openelm"),
            vocab: TinyVocab::new(VocabStyle::LlamaSpm),
            layers: layers.len(),
            heads: layers[0].heads,
            kv_heads: layers[0].kv_heads,
            tie_embeddings: true,
            layer_shapes: Some(layers),
            seed: if f32 { 115 } else { 116 },
            ..tiny
        }
    }

    /// Apertus's files (`apertus`): Llama's layer with each head's Q and K normalized before
    /// NeoX rope, an MLP of up, xIELU (each layer's own), down; Tekken's pre-tokenizer, an
    /// output projection of its own.
    pub fn apertus(weight_type: WeightType) -> Self {
        Self {
            arch: Some("apertus"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "tekken" }),
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 97 } else { 98 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// dots.llm1's files (`dots1`): GLM-4.5's tiny layout (a dense layer, then two of experts
    /// with a selection bias and a shared expert, sigmoid-routed, renormalized, scaled) with
    /// Q, K and V apart, unbiased and of as many heads, whole heads rotated, the MLP norm as
    /// `ffn_norm`; Qwen2's
    /// pre-tokenizer, an output projection of its own.
    pub fn dots1(weight_type: WeightType) -> Self {
        Self {
            arch: Some("dots1"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "qwen2" }),
            // (llama.cpp reads dots.llm1's K and V as wide as Q: as many K/V heads as query
            // heads, as its files have.)
            kv_heads: 4,
            rope_dims: None,
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 95 } else { 96 },
            ..Self::tiny(Family::Glm4Moe, weight_type)
        }
    }

    /// Ling's files (`bailingmoe`): Llama's layer whose MLPs are 4 experts (2 per token),
    /// softmax-routed, renormalized, scaled by 1.5, beside one shared expert; an output
    /// projection of its own; its pre-tokenizer (`bailingmoe`).
    pub fn bailingmoe(weight_type: WeightType) -> Self {
        Self {
            arch: Some("bailingmoe"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "bailingmoe" }),
            tie_embeddings: false,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            seed: if weight_type == WeightType::F32 { 91 } else { 92 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// PLaMo's files (`plamo`: PLaMo-13B): Llama's layer in parallel form (the MLP reads the
    /// attention's RMSNorm), NeoX pairs, a SentencePiece vocabulary, an output projection of
    /// its own.
    pub fn plamo(weight_type: WeightType) -> Self {
        Self {
            arch: Some("plamo"),
            vocab: TinyVocab::new(VocabStyle::LlamaSpm),
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 89 } else { 90 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// Hunyuan's dense files (`hunyuan-dense`): the tiny Qwen3's layers with each head's Q and
    /// K normalized after rope rather than before, its DeepSeek-V3-style pre-tokenizer, and an
    /// NTK alpha of 4 (the 64-wide heads rotate on 10,000 × 4^(64/62)).
    pub fn hunyuan_dense(weight_type: WeightType) -> Self {
        Self {
            arch: Some("hunyuan-dense"),
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "hunyuan-dense" }),
            rope_alpha: Some(4.0),
            seed: if weight_type == WeightType::F32 { 32 } else { 33 },
            ..Self::tiny(Family::Qwen3, weight_type)
        }
    }

    /// Hunyuan's MoE files (`hunyuan-moe`: Hunyuan-A13B): the tiny Qwen3 MoE's layers with each
    /// head's Q and K normalized after rope, 4 experts of `feed_forward_length` (2 per token,
    /// softmax, renormalized) beside an ungated shared expert twice their width (no sigmoid);
    /// its own output projection.
    pub fn hunyuan_moe(weight_type: WeightType) -> Self {
        Self {
            arch: Some("hunyuan-moe"),
            ffn: 128,
            vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "hunyuan" }),
            tie_embeddings: false,
            seed: if weight_type == WeightType::F32 { 34 } else { 35 },
            ..Self::tiny(Family::Qwen3Moe, weight_type)
        }
    }

    /// Qwen2's MoE files (`qwen2moe`: Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): the tiny Qwen2's
    /// layers with 4 experts of 128 (2 per token, softmax, not renormalized) beside a shared
    /// expert twice their width whose output a sigmoid gates; its own output projection (the
    /// architecture requires one).
    pub fn qwen2_moe(weight_type: WeightType) -> Self {
        Self {
            arch: Some("qwen2moe"),
            ffn: 128,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            tie_embeddings: false,
            seed: 25,
            ..Self::tiny(Family::Qwen2, weight_type)
        }
    }

    /// LFM2-8B-A1B's layout (`lfm2moe`): the tiny LFM2's layers, each MLP after the first 4
    /// experts of 128 (2 per token, sigmoid-routed with a selection bias, renormalized).
    pub fn lfm2_moe(weight_type: WeightType) -> Self {
        Self {
            arch: Some("lfm2moe"),
            ffn: 128,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            seed: 23,
            ..Self::tiny(Family::Lfm2, weight_type)
        }
    }

    /// Nemotron 3 Nano's layout (`nemotron_h_moe`): the tiny Nemotron-H's layers with each
    /// MLP 4 ungated experts of 128 (2 per token, sigmoid-routed) beside a shared expert of
    /// their width; with `latent`, Nemotron 3 Super's latent projections of that width.
    /// (Routing decides by thresholds, so a Q8_0 file compared with llama.cpp needs choices
    /// clear of its rounding: seed 21's latent file had a routing near-tie (selection scores
    /// 0.0006 apart) that the two programs broke differently; 22's has none they break so.)
    pub fn nemotron_h_moe(weight_type: WeightType, latent: Option<usize>) -> Self {
        let tiny = Self::tiny(Family::NemotronH, weight_type);
        Self {
            arch: Some("nemotron_h_moe"),
            ffn: 128,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            mamba2: Some(TinyMamba2 {
                moe_latent: latent,
                ..TinyMamba2::tiny(tiny.hidden)
            }),
            seed: if latent.is_some() { 22 } else { 20 },
            ..tiny
        }
    }

    /// Qwen2-VL's and Qwen2.5-VL's language model (`qwen2vl`): Qwen2's layer under its own
    /// architecture, with M-RoPE sections (8, 12 and 12 of the head's 32 pairs).
    pub fn qwen2vl(weight_type: WeightType) -> Self {
        Self {
            arch: Some("qwen2vl"),
            rope_sections: Some([8, 12, 12, 0]),
            // Its own output projection: a random tied table gives one-hot distributions.
            tie_embeddings: false,
            seed: 10,
            ..Self::tiny(Family::Qwen2, weight_type)
        }
    }

    /// ERNIE 4.5's MoE layout (`ernie4_5-moe`, as the 21B-A3B): a dense first layer, then 4
    /// experts (2 per token) routed by softmax with a selection bias beside a shared one.
    pub fn ernie45_moe(weight_type: WeightType) -> Self {
        Self {
            arch: Some("ernie4_5-moe"),
            layers: 3,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            seed: 17,
            ..Self::tiny(Family::Ernie45, weight_type)
        }
    }

    /// DeepSeek-V2-Lite's layout: one Q projection, softmax routing, YaRN with
    /// `mscale_all_dim`; `kv_b`: one `attn_kv_b` per layer, as older files have.
    pub fn deepseek2_lite(weight_type: WeightType, kv_b: bool) -> Self {
        Self {
            mla: Some(TinyMla {
                kv_b,
                ..TinyMla::v2_lite()
            }),
            seed: 9,
            ..Self::tiny(Family::DeepSeek2, weight_type)
        }
    }

    /// MiniCPM3's files (`minicpm3`): DeepSeek-V2's latent attention (Q through a low-rank
    /// pair, one `attn_kv_b`, V heads of the hidden width over the heads, no `value_length`)
    /// over a dense MLP in each of three layers, NeoX pairs rotated by LongRoPE's short
    /// factors (the file's context is its original one, as the converter writes it), hidden
    /// 512 so that the logits' multiplier (256 over the hidden width) is not 1.
    pub fn minicpm3(weight_type: WeightType) -> Self {
        let f32 = weight_type == WeightType::F32;
        let mla = TinyMla {
            v_head: 64,
            kv_b: true,
            sigmoid: false,
            ..TinyMla::v3()
        };
        let pairs = mla.qk_rope / 2;
        Self {
            arch: Some("minicpm3"),
            vocab: TinyVocab::new(VocabStyle::LlamaSpm),
            hidden: 512,
            layers: 3,
            heads: 8,
            moe: None,
            longrope: Some(TinyLongRope {
                short: (0..pairs).map(|i| 1.0 + 0.3 * i as f32).collect(),
                long: (0..pairs).map(|i| 1.0 + 2.0 * i as f32).collect(),
                original_context: 512,
                attn_factor: 1.0,
            }),
            mla: Some(mla),
            seed: if f32 { 117 } else { 118 },
            ..Self::tiny(Family::DeepSeek2, weight_type)
        }
    }

    /// Jamba's files (`jamba`): [`TinyJamba::tiny`]'s four layers (Mamba, Mamba with experts,
    /// attention without rope, Mamba with experts; 4 experts, 2 per token, softmax-routed and
    /// not renormalized), SentencePiece's vocabulary, an output projection of its own.
    pub fn jamba(weight_type: WeightType) -> Self {
        let f32 = weight_type == WeightType::F32;
        let tiny = Self::tiny(Family::Llama, weight_type);
        let j = TinyJamba::tiny(tiny.hidden);
        Self {
            arch: Some("jamba"),
            vocab: TinyVocab::new(VocabStyle::LlamaSpm),
            layers: j.kv_heads.len(),
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            jamba: Some(j),
            seed: if f32 { 119 } else { 120 },
            ..tiny
        }
    }

    /// AFMoE's files (`afmoe`, Arcee's Trinity): four layers (the fourth global and without
    /// rope), the first dense, the others 4 experts (2 per token, sigmoid-routed with a
    /// selection bias, renormalized, scaled) beside a shared one; post-norms, per-head Q/K
    /// norms, the output gate; the first three layers local (a window of 8: llama.cpp's graph
    /// runs no file without one). (Routing decides by thresholds: seed 122's Q8_0 file had one
    /// position 0.735 off llama.cpp, the mean 0.033, where the same file with identical experts
    /// had none: an expert choice the two programs' rounding broke differently; 123's has none.)
    pub fn afmoe(weight_type: WeightType) -> Self {
        let f32 = weight_type == WeightType::F32;
        Self {
            arch: Some("afmoe"),
            layers: 4,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                identical: false,
            }),
            sliding_window: Some((8, 4)),
            seed: if f32 { 121 } else { 123 },
            ..Self::tiny(Family::Llama, weight_type)
        }
    }

    /// The benchmark model: Llama-shaped, ~50M parameters, Q8_0, 32k vocabulary, 8k context.
    pub fn bench_50m() -> Self {
        Self {
            family: Family::Llama,
            arch: None,
            weight_type: WeightType::Q8_0,
            vocab: TinyVocab::with_size(VocabStyle::Gpt2 { pre: "llama-bpe" }, 32_000),
            hidden: 512,
            layers: 8,
            heads: 8,
            kv_heads: 4,
            head_dim: 64,
            ffn: 1536,
            context_length: 8192,
            rope_base: 500_000.0,
            rope_freqs: None,
            rope_linear_factor: None,
            rope_yarn: None,
            rope_alpha: None,
            rope_dims: None,
            rope_sections: None,
            qk_layer_norm: false,
            attn_norm_2: false,
            parallel_residual: true,
            longrope: None,
            yarn_extra: None,
            attn_temperature_scale: None,
            granite: None,
            softcaps: None,
            tie_embeddings: false,
            sliding_window: None,
            moe: None,
            gemma4: None,
            mla: None,
            delta_net: None,
            mamba2: None,
            expert_groups: None,
            layer_shapes: None,
            jamba: None,
            loops: None,
            pooling: None,
            seed: 11,
        }
    }

    /// A random model shaped like Llama 3.2 1B (hidden 2048, 16 layers, 32 heads over 8 K/V
    /// heads of 64, FFN 8192, a 128,256-token vocabulary, tied embeddings), Q4_K: the GPU
    /// benchmarks' model, with room for a 16,384-token context.
    pub fn bench_1b() -> Self {
        Self {
            family: Family::Llama,
            arch: None,
            weight_type: WeightType::Q4K,
            vocab: TinyVocab::with_size(VocabStyle::Gpt2 { pre: "llama-bpe" }, 128_256),
            hidden: 2048,
            layers: 16,
            heads: 32,
            kv_heads: 8,
            head_dim: 64,
            ffn: 8192,
            context_length: 16_384,
            rope_base: 500_000.0,
            rope_freqs: None,
            rope_linear_factor: None,
            rope_yarn: None,
            rope_alpha: None,
            rope_dims: None,
            rope_sections: None,
            qk_layer_norm: false,
            attn_norm_2: false,
            parallel_residual: true,
            longrope: None,
            yarn_extra: None,
            attn_temperature_scale: None,
            granite: None,
            softcaps: None,
            tie_embeddings: true,
            sliding_window: None,
            moe: None,
            gemma4: None,
            mla: None,
            delta_net: None,
            mamba2: None,
            expert_groups: None,
            layer_shapes: None,
            jamba: None,
            loops: None,
            pooling: None,
            seed: 12,
        }
    }

    /// A random model with Qwen3-30B-A3B's layer shape (hidden 2048, 32 heads over 4 K/V heads
    /// of 128, 128 experts of 768 with 8 per token, a 151,936-token vocabulary) but 4 of its
    /// 48 layers, Q4_K (1.8 GB): the MoE benchmarks' model.
    pub fn bench_moe() -> Self {
        Self {
            family: Family::Qwen3Moe,
            arch: None,
            weight_type: WeightType::Q4K,
            vocab: TinyVocab::with_size(VocabStyle::Gpt2 { pre: "qwen2" }, 151_936),
            hidden: 2048,
            layers: 4,
            heads: 32,
            kv_heads: 4,
            head_dim: 128,
            ffn: 768,
            context_length: 8192,
            rope_base: 1_000_000.0,
            rope_freqs: None,
            rope_linear_factor: None,
            rope_yarn: None,
            rope_alpha: None,
            rope_dims: None,
            rope_sections: None,
            qk_layer_norm: false,
            attn_norm_2: false,
            parallel_residual: true,
            longrope: None,
            yarn_extra: None,
            attn_temperature_scale: None,
            granite: None,
            softcaps: None,
            tie_embeddings: false,
            sliding_window: None,
            moe: Some(TinyMoe {
                experts: 128,
                used: 8,
                identical: false,
            }),
            gemma4: None,
            mla: None,
            delta_net: None,
            mamba2: None,
            expert_groups: None,
            layer_shapes: None,
            jamba: None,
            loops: None,
            pooling: None,
            seed: 13,
        }
    }

    /// A random model with gpt-oss-20b's layer shape (hidden 2880, 64 heads over 8 K/V heads of
    /// 64, 32 experts of 2880 with 4 per token, sinks, biases, alternating 128-position
    /// sliding-window layers, YaRN ×32 over 4,096, a 201,088-token harmony vocabulary) but 4 of
    /// its 24 layers, Q8_0 (3.6 GB; `llama-quantize --allow-requantize … MXFP4_MOE` makes the
    /// published files' layout of it): the gpt-oss benchmarks' model.
    pub fn bench_gpt_oss() -> Self {
        Self {
            vocab: TinyVocab::with_size(VocabStyle::Harmony, 201_088),
            hidden: 2880,
            layers: 4,
            heads: 64,
            kv_heads: 8,
            head_dim: 64,
            ffn: 2880,
            context_length: 8192,
            rope_base: 150_000.0,
            rope_yarn: Some((32.0, 4096)),
            rope_alpha: None,
            sliding_window: Some((128, 2)),
            moe: Some(TinyMoe {
                experts: 32,
                used: 4,
                identical: false,
            }),
            seed: 14,
            ..Self::tiny(Family::GptOss, WeightType::Q8_0)
        }
    }

    /// A random model with Gemma 4 E2B's layer shape (hidden 1,536, 8 heads, per-layer
    /// inputs, K/V shared by the last layers) in 10 of its 35 layers, a 32,000-token vocabulary
    /// (E2B's: 262,144), Q8_0 (0.6 GB): the Gemma 4 benchmarks' model.
    pub fn bench_gemma4() -> Self {
        Self {
            vocab: TinyVocab::with_size(VocabStyle::Gemma4, 32_000),
            hidden: 1536,
            layers: 10,
            heads: 8,
            kv_heads: 1,
            head_dim: 256,
            ffn: 6144,
            context_length: 8192,
            rope_base: 1_000_000.0,
            sliding_window: Some((512, 5)),
            gemma4: Some(TinyGemma4::e2b_10_layers()),
            seed: 15,
            ..Self::tiny(Family::Gemma4, WeightType::Q8_0)
        }
    }

    /// A random model with GLM-4.7-Flash's layer shape (a `deepseek2` file: hidden 2,048, 20
    /// heads over a latent of 512 and 64 rotated values, Q through a rank-768 pair, heads of
    /// 192 + 64 and V of 256; a dense first layer of 10,240, then 64 experts of 1,536 with 4 per
    /// token beside a shared one; a 154,880-token vocabulary) in 4 of its 47 layers, Q4_K (the
    /// latent's maps Q8_0 where K-quant blocks do not fit, as its published files): the
    /// DeepSeek-V2 benchmarks' model.
    pub fn bench_glm47_flash() -> Self {
        Self {
            vocab: TinyVocab::with_size(VocabStyle::Gpt2 { pre: "glm4" }, 154_880),
            hidden: 2048,
            layers: 4,
            heads: 20,
            ffn: 1536,
            context_length: 8192,
            rope_base: 1_000_000.0,
            moe: Some(TinyMoe {
                experts: 64,
                used: 4,
                identical: false,
            }),
            mla: Some(TinyMla {
                q_lora_rank: 768,
                kv_lora_rank: 512,
                qk_nope: 192,
                qk_rope: 64,
                v_head: 256,
                dense_ffn: 10_240,
                ..TinyMla::v3()
            }),
            seed: 16,
            ..Self::tiny(Family::DeepSeek2, WeightType::Q4K)
        }
    }

    /// A random model of Qwen3.5 0.8B's shape (hidden 1,024, 24 layers: 18 gated delta nets of
    /// 16 Q/K and 16 V heads of 128 with a 4-tap convolution, 6 attention layers of 8 heads over
    /// 2 K/V heads of 256 with a quarter rotated; MLPs of 3,584), a 32,000-token vocabulary
    /// (its own: 248,320), Q8_0: the Qwen3.5 benchmarks' model.
    pub fn bench_qwen35() -> Self {
        Self {
            vocab: TinyVocab::with_size(VocabStyle::Gpt2 { pre: "qwen35" }, 32_000),
            hidden: 1024,
            layers: 24,
            heads: 8,
            kv_heads: 2,
            head_dim: 256,
            ffn: 3584,
            context_length: 8192,
            rope_base: 10_000_000.0,
            rope_dims: Some(64),
            rope_sections: Some([11, 11, 10, 0]),
            delta_net: Some(TinyDeltaNet {
                conv_kernel: 4,
                k_heads: 16,
                v_heads: 16,
                head: 128,
                attention_every: 4,
                grouped: false,
                ssm_in: false,
            }),
            seed: 17,
            ..Self::tiny(Family::Qwen35, WeightType::Q8_0)
        }
    }

    /// A random model of LFM2-8B-A1B's layer shapes with 4 of its 24 layers (hidden 2,048; layer
    /// 2 attends with 32 heads over 8 K/V heads of 64, the others are 3-tap convolutions; the
    /// first layer's MLP dense, each other's 32 experts of 1,792 with 4 per token, sigmoid-routed
    /// with a selection bias), a 32,000-token vocabulary (its own: 65,536), Q4_K: the LFM2 MoE
    /// benchmarks' model. (Its dense MLPs are 7,168 wide; here the experts' width, as the tiny
    /// files'.)
    pub fn bench_lfm2_moe() -> Self {
        Self {
            weight_type: WeightType::Q4K,
            vocab: TinyVocab::with_size(VocabStyle::Gpt2 { pre: "lfm2" }, 32_000),
            hidden: 2048,
            layers: 4,
            heads: 32,
            kv_heads: 8,
            head_dim: 64,
            ffn: 1792,
            context_length: 8192,
            rope_base: 1_000_000.0,
            moe: Some(TinyMoe {
                experts: 32,
                used: 4,
                identical: false,
            }),
            seed: 24,
            ..Self::lfm2_moe(WeightType::Q4K)
        }
    }

    /// A random model of Granite 4.0 H-350M's shape (hidden 768, 32 layers: 28 Mamba-2 layers of
    /// 48 heads of 32 with a state of 128 in one group and a 4-tap convolution, 4 attention
    /// layers of 12 heads over 4 K/V heads of 64 without rope; MLPs of 2,048), a 32,000-token
    /// vocabulary (its own: 100,352), Q8_0: the Granite 4.0 hybrid benchmarks' model.
    pub fn bench_granite_hybrid() -> Self {
        Self {
            vocab: TinyVocab::with_size(VocabStyle::Gpt2 { pre: "dbrx" }, 32_000),
            hidden: 768,
            layers: 32,
            heads: 12,
            kv_heads: 4,
            head_dim: 64,
            ffn: 2048,
            context_length: 8192,
            mamba2: Some(TinyMamba2 {
                conv_kernel: 4,
                inner: 1536,
                state: 128,
                heads: 48,
                groups: 1,
                no_rope: true,
                attention_every: 8,
                moe_latent: None,
                ssm_norm: true,
            }),
            seed: 21,
            ..Self::tiny(Family::GraniteHybrid, WeightType::Q8_0)
        }
    }
}

pub(super) struct Rand(rand::rngs::StdRng);

impl Rand {
    /// `rows x cols`, uniform in `[-a, a]` with `a = gain * sqrt(3 / cols)`.
    pub(super) fn matrix(&mut self, rows: usize, cols: usize, gain: f32) -> Vec<f32> {
        let a = gain * (3.0 / cols as f32).sqrt();
        (0..rows * cols).map(|_| self.0.random_range(-a..=a)).collect()
    }

    pub(super) fn around(&mut self, n: usize, center: f32, spread: f32) -> Vec<f32> {
        (0..n).map(|_| center + self.0.random_range(-spread..=spread)).collect()
    }
}

/// Layer `layer`'s MLP: dense (`ffn_{gate,up,down}`), or a router and experts whose first is
/// the dense MLP the same `rng` gives.
fn mlp_tensors(
    spec: &TinyModelSpec,
    layer: usize,
    rng: &mut Rand,
    moe_rng: &mut Rand,
) -> Result<Vec<(String, QTensor)>, ModelError> {
    let (d, f, wt) = (spec.hidden, spec.ffn, spec.weight_type.ggml());
    let shapes = [(f, d), (f, d), (d, f)];
    let dense: Vec<Vec<f32>> = shapes.iter().map(|&(rows, cols)| rng.matrix(rows, cols, 1.0)).collect();
    // Llama 4's dense layers between its layers of experts.
    let dense_between = spec.arch == Some("llama4") && !(layer + 1).is_multiple_of(LLAMA4_MOE_STEP);
    match spec.moe {
        // GLM-4.5's first layer is dense.
        Some(_) if dense_between || (leads_dense(spec) && layer < MOE_DENSE_LEADING) => {}
        Some(m) => {
            let mut t = moe_tensors(layer, d, f, m, dense, wt, moe_rng)?;
            match spec.arch {
                // DeepSeekMoE's, Ling's and Llama 4's shared experts have no selection bias
                // beside them.
                Some("deepseek" | "bailingmoe" | "llama4") => t.extend(shared_expert(layer, d, f, wt, moe_rng)?),
                _ if leads_dense(spec) => t.extend(glm4moe_extras(layer, d, f, m.experts, wt, moe_rng)?),
                // MiniMax-M2's selection bias, without a shared expert.
                Some("minimax-m2") => t.push(selection_bias(layer, m.experts, moe_rng)?),
                _ => {}
            }
            if spec.family == Family::GptOss {
                t.extend(gpt_oss_expert_biases(layer, d, f, m.experts, moe_rng)?);
            }
            if spec.family == Family::Qwen2 {
                t.extend(gated_shared_expert(layer, d, WIDE_SHARED * f, wt, moe_rng)?);
            }
            if spec.arch == Some("hunyuan-moe") {
                t.extend(shared_expert(layer, d, WIDE_SHARED * f, wt, moe_rng)?);
            }
            return Ok(t);
        }
        None => {}
    }
    let quantized = |name: &str, w: Vec<f32>, rows: usize, cols: usize| -> Result<(String, QTensor), ModelError> {
        let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu)?;
        Ok((format!("blk.{layer}.{name}.weight"), QTensor::quantize(&t, wt)?))
    };
    if let (Some(arch @ ("arcee" | "starcoder2" | "phi2" | "falcon" | "gptneox" | "gpt2" | "starcoder" | "bloom" | "mpt" | "codeshell" | "nemotron" | "apertus" | "jais2")), [_, up, down]) =
        (spec.arch, dense.as_slice())
    {
        // Arcee's, StarCoder2's, Phi-2's, Falcon's, GPT-NeoX's, GPT-2's, StarCoder's, BLOOM's,
        // MPT's, CodeShell's and Nemotron's MLPs have no gate (the gate's draw is left unused, so
        // the draws after it keep their order); all but Arcee's, Falcon's, MPT's and Nemotron's
        // projections have biases.
        let mut out = vec![quantized("ffn_up", up.clone(), f, d)?, quantized("ffn_down", down.clone(), d, f)?];
        if !matches!(arch, "arcee" | "falcon" | "mpt" | "nemotron" | "apertus") {
            for (name, len) in [("ffn_up", f), ("ffn_down", d)] {
                let b = Tensor::from_vec(rng.around(len, 0.0, 0.5), len, &Device::Cpu)?;
                out.push((format!("blk.{layer}.{name}.bias"), QTensor::quantize(&b, GgmlDType::F32)?));
            }
        }
        return Ok(out);
    }
    if let (Family::Phi3 | Family::Glm4, [gate, up, down]) = (spec.family, dense.as_slice()) {
        // One `ffn_up` of 2·ffn rows: the gate's, then the up projection's.
        return Ok(vec![
            quantized("ffn_up", [gate.as_slice(), up].concat(), 2 * f, d)?,
            quantized("ffn_down", down.clone(), d, f)?,
        ]);
    }
    let mut out = ["ffn_gate", "ffn_up", "ffn_down"]
        .into_iter()
        .zip(shapes)
        .zip(dense)
        .map(|((name, (rows, cols)), w)| quantized(name, w, rows, cols))
        .collect::<Result<Vec<_>, ModelError>>()?;
    if spec.arch == Some("jais") {
        // Jais's gated MLP has a bias on each projection.
        for (name, len) in [("ffn_gate", f), ("ffn_up", f), ("ffn_down", d)] {
            let b = Tensor::from_vec(rng.around(len, 0.0, 0.5), len, &Device::Cpu)?;
            out.push((format!("blk.{layer}.{name}.bias"), QTensor::quantize(&b, GgmlDType::F32)?));
        }
    }
    Ok(out)
}

/// Llama 3.1-style `rope_freqs` divisors for a head of `pairs` rotated pairs: 1 for the fast
/// frequencies, 8 for the slow ones, a ramp between (on 32 steps, whatever `pairs`).
pub fn llama31_rope_divisors(pairs: usize) -> Vec<f32> {
    (0..pairs)
        .map(|i| match i * 32 / pairs {
            0..=11 => 1.0,
            j @ 12..=19 => 1.0 + (j - 11) as f32 * 7.0 / 9.0,
            _ => 8.0,
        })
        .collect()
}

/// Llama 4's tiny files: every this-many-th layer has experts (`interleave_moe_layer_step`).
const LLAMA4_MOE_STEP: usize = 2;

/// Qwen2 MoE's and Hunyuan MoE's tiny files: the shared expert is this many experts wide.
const WIDE_SHARED: usize = 2;

/// Qwen2 MoE's shared expert of width `f` and its gate's scores (f32: one per token).
fn gated_shared_expert(layer: usize, d: usize, f: usize, wt: GgmlDType, rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
    let mut out = shared_expert(layer, d, f, wt, rng)?;
    let gate = Tensor::from_vec(rng.matrix(1, d, 1.0), d, &Device::Cpu)?;
    out.push((format!("blk.{layer}.ffn_gate_inp_shexp.weight"), QTensor::quantize(&gate, GgmlDType::F32)?));
    Ok(out)
}

/// GLM-4.5's and ERNIE 4.5 MoE's tiny files: the first this-many layers dense.
const MOE_DENSE_LEADING: usize = 1;

/// Whether the spec is of a file llama.cpp runs on a graph of its own and hearth on GLM-4.5's
/// layer (Ling 2.0's, dots.llm1's, EXAONE's MoE, MiniMax-M2's): the MLP norm as `ffn_norm`, Q, K
/// and V unbiased.
fn glm45_kin(spec: &TinyModelSpec) -> bool {
    spec.family == Family::Glm4Moe && spec.arch.is_some()
}

/// Whether `spec`'s first layers are dense, the others' experts beside a shared one with a
/// selection bias: GLM-4.5's layout (not MiniMax-M2's), ERNIE 4.5's MoE files' and AFMoE's.
fn leads_dense(spec: &TinyModelSpec) -> bool {
    (spec.family == Family::Glm4Moe && spec.arch != Some("minimax-m2")) || (spec.family == Family::Ernie45 && spec.moe.is_some()) || (matches!(spec.arch, Some("deepseek" | "afmoe")) && spec.moe.is_some())
}

/// GLM-4.5's per-layer extras beside the experts: the router's selection bias (f32, spread so
/// that it changes some choices) and a shared expert of one expert's width.
fn glm4moe_extras(
    layer: usize,
    d: usize,
    f: usize,
    experts: usize,
    wt: GgmlDType,
    rng: &mut Rand,
) -> Result<Vec<(String, QTensor)>, ModelError> {
    let mut out = vec![selection_bias(layer, experts, rng)?];
    out.extend(shared_expert(layer, d, f, wt, rng)?);
    Ok(out)
}

/// Layer `layer`'s router selection bias (`exp_probs_b`, f32, spread so that it changes some
/// choices).
fn selection_bias(layer: usize, experts: usize, rng: &mut Rand) -> Result<(String, QTensor), ModelError> {
    let bias = Tensor::from_vec(rng.around(experts, 0.0, 0.3), experts, &Device::Cpu)?;
    Ok((format!("blk.{layer}.exp_probs_b.bias"), QTensor::quantize(&bias, GgmlDType::F32)?))
}

/// Layer `layer`'s shared expert of width `f` (`ffn_{gate,up,down}_shexp`).
fn shared_expert(layer: usize, d: usize, f: usize, wt: GgmlDType, rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
    [("ffn_gate_shexp", (f, d)), ("ffn_up_shexp", (f, d)), ("ffn_down_shexp", (d, f))]
        .into_iter()
        .map(|(name, (rows, cols))| {
            let t = Tensor::from_vec(rng.matrix(rows, cols, 1.0), (rows, cols), &Device::Cpu)?;
            Ok((format!("blk.{layer}.{name}.weight"), QTensor::quantize(&t, wt)?))
        })
        .collect()
}

/// gpt-oss's router and expert biases (f32, as its files store them): spread so that they change
/// some choices, and so that some gate and up values pass the SwiGLU's clamp at 7.
fn gpt_oss_expert_biases(
    layer: usize,
    d: usize,
    f: usize,
    experts: usize,
    rng: &mut Rand,
) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let n = |s: &str| format!("blk.{layer}.{s}");
    let f32_tensor = |data: Vec<f32>, dims: &[usize]| -> Result<QTensor, ModelError> {
        Ok(QTensor::quantize(&Tensor::from_vec(data, dims, &cpu)?, GgmlDType::F32)?)
    };
    Ok(vec![
        (n("ffn_gate_inp.bias"), f32_tensor(rng.around(experts, 0.0, 1.0), &[experts])?),
        (n("ffn_gate_exps.bias"), f32_tensor(rng.around(experts * f, 0.0, 6.5), &[experts, f])?),
        (n("ffn_up_exps.bias"), f32_tensor(rng.around(experts * f, 0.0, 6.5), &[experts, f])?),
        (n("ffn_down_exps.bias"), f32_tensor(rng.around(experts * d, 0.0, 0.5), &[experts, d])?),
    ])
}

/// Layer `layer`'s router (f32, as real files store it) and stacked experts: expert 0 is
/// `dense` (gate, up, down), the others new or copies of it.
pub(super) fn moe_tensors(
    layer: usize,
    d: usize,
    f: usize,
    m: TinyMoe,
    dense: Vec<Vec<f32>>,
    wt: GgmlDType,
    rng: &mut Rand,
) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let n = |s: &str| format!("blk.{layer}.{s}");
    // Router logits of a few units: clear choices.
    let router = Tensor::from_vec(rng.matrix(m.experts, d, 3.0), (m.experts, d), &cpu)?;
    let mut out = vec![(n("ffn_gate_inp.weight"), QTensor::quantize(&router, GgmlDType::F32)?)];
    for (name, (rows, cols), first) in [("ffn_gate_exps", (f, d)), ("ffn_up_exps", (f, d)), ("ffn_down_exps", (d, f))]
        .into_iter()
        .zip(dense)
        .map(|((name, shape), w)| (name, shape, w))
    {
        let mut all = first.clone();
        for _ in 1..m.experts {
            let w = if m.identical { first.clone() } else { rng.matrix(rows, cols, 1.0) };
            all.extend(w);
        }
        let t = Tensor::from_vec(all, (m.experts, rows, cols), &cpu)?;
        out.push((n(&format!("{name}.weight")), QTensor::quantize(&t, wt)?));
    }
    Ok(out)
}

/// The file's metadata: `general.*`, the architecture's keys, the vocabulary.
fn metadata(spec: &TinyModelSpec) -> Vec<(String, Value)> {
    let (d, hd, v) = (spec.hidden, spec.head_dim, spec.vocab.size);
    let arch = spec.arch.unwrap_or(spec.family.arch());
    let u32v = |x: usize| Value::U32(x as u32);
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        // llama.cpp gives a model whose name says "phi3" Phi-3's SentencePiece token attributes,
        // and fails to load one without those tokens: the tiny Phi-3 is "hearth-tiny-phi".
        ("general.name".into(), Value::String(format!("hearth-tiny-{}", arch.replace("phi3", "phi")))),
        // candle's quantized_qwen3 computes in f16 unless this says f32 (0).
        ("general.dtype".into(), Value::U32(0)),
        (format!("{arch}.context_length"), u32v(spec.context_length)),
        (format!("{arch}.embedding_length"), u32v(d)),
        (format!("{arch}.block_count"), u32v(spec.layers)),
        // (Qwen (1)'s files give the width before the MLP's halving into gate and up.)
        (format!("{arch}.feed_forward_length"), u32v(if arch == "qwen" { 2 * spec.ffn } else { spec.ffn })),
        (format!("{arch}.attention.head_count"), u32v(spec.heads)),
        (format!("{arch}.attention.head_count_kv"), u32v(spec.kv_heads)),
        // (LayerNorms read their own key.)
        if norm_kind(spec.family, arch).is_layer() {
            (format!("{arch}.attention.layer_norm_epsilon"), Value::F32(1e-5))
        } else {
            (format!("{arch}.attention.layer_norm_rms_epsilon"), Value::F32(1e-6))
        },
        (format!("{arch}.rope.freq_base"), Value::F32(spec.rope_base)),
        (format!("{arch}.rope.dimension_count"), u32v(spec.rope_dims.unwrap_or(hd))),
        (format!("{arch}.attention.key_length"), u32v(hd)),
        (format!("{arch}.attention.value_length"), u32v(hd)),
        (format!("{arch}.vocab_size"), u32v(v)),
    ];
    if let Some(pooling) = spec.pooling {
        md.push((format!("{arch}.pooling_type"), Value::U32(pooling)));
    }
    // EmbeddingGemma's: attention both ways, the pooled vector projected up and back down.
    if arch == "gemma-embedding" {
        md.push((format!("{arch}.attention.causal"), Value::Bool(false)));
        let feat = if d == 768 { 3072 } else { 2 * d };
        for (k, v) in [("dense_2_feat_in", d), ("dense_2_feat_out", feat), ("dense_3_feat_in", feat), ("dense_3_feat_out", d)] {
            md.push((format!("{arch}.{k}"), u32v(v)));
        }
    }
    if spec.pooling == Some(RANK) {
        let labels = ["yes", "no"].map(|l| Value::String(l.into())).to_vec();
        md.push((format!("{arch}.classifier.output_labels"), Value::Array(labels)));
        md.push(("tokenizer.chat_template.rerank".into(), Value::String(TINY_RERANK_TEMPLATE.into())));
    }
    if let Some((loops, skip_norm)) = spec.loops {
        md.push((format!("{arch}.num_loops"), u32v(loops)));
        md.push((format!("{arch}.skip_loop_final_norm"), Value::Bool(skip_norm)));
    }
    if let Some((window, period)) = spec.sliding_window {
        md.push((format!("{arch}.attention.sliding_window"), u32v(window)));
        md.push((format!("{arch}.attention.sliding_window_pattern"), u32v(period)));
        md.push((format!("{arch}.rope.freq_base_swa"), Value::F32(spec.rope_base / 10.0)));
    }
    if let Some(m) = spec.moe {
        md.extend(moe_keys(spec, arch, m));
    }
    if arch.starts_with("qwen3vl") {
        // Its first layers' (3 of 28 and more; here the first of 2: llama.cpp adds them before
        // the last layer's row selection only).
        md.push((format!("{arch}.n_deepstack_layers"), u32v(1)));
    }
    if let Some(sections) = spec.rope_sections {
        let v = sections.iter().map(|&n| Value::I32(n as i32)).collect();
        md.push((format!("{arch}.rope.dimension_sections"), Value::Array(v)));
    }
    if let Some(f) = spec.rope_linear_factor {
        md.push((format!("{arch}.rope.scaling.type"), Value::String("linear".into())));
        md.push((format!("{arch}.rope.scaling.factor"), Value::F32(f)));
    }
    if let Some((f, original)) = spec.rope_yarn {
        md.push((format!("{arch}.rope.scaling.type"), Value::String("yarn".into())));
        md.push((format!("{arch}.rope.scaling.factor"), Value::F32(f)));
        md.push((format!("{arch}.rope.scaling.original_context_length"), u32v(original)));
    }
    if let Some(alpha) = spec.rope_alpha {
        md.push((format!("{arch}.rope.scaling.alpha"), Value::F32(alpha)));
    }
    if let Some((fast, slow, log_mul)) = spec.yarn_extra {
        md.push((format!("{arch}.rope.scaling.yarn_beta_fast"), Value::F32(fast)));
        md.push((format!("{arch}.rope.scaling.yarn_beta_slow"), Value::F32(slow)));
        md.push((format!("{arch}.rope.scaling.yarn_log_multiplier"), Value::F32(log_mul)));
    }
    if let Some(t) = spec.attn_temperature_scale {
        md.push((format!("{arch}.attention.temperature_scale"), Value::F32(t)));
    }
    if let Some(g) = spec.granite {
        md.push((format!("{arch}.embedding_scale"), Value::F32(g.embedding)));
        md.push((format!("{arch}.attention.scale"), Value::F32(g.attention)));
        md.push((format!("{arch}.residual_scale"), Value::F32(g.residual)));
        md.push((format!("{arch}.logit_scale"), Value::F32(g.logit)));
    }
    md.extend(layer_form_keys(spec, arch));
    if let Some((attn, last)) = spec.softcaps {
        md.push((format!("{arch}.attn_logit_softcapping"), Value::F32(attn)));
        md.push((format!("{arch}.final_logit_softcapping"), Value::F32(last)));
    }
    if let Some(l) = &spec.longrope {
        // (MiniCPM4's files name the scaling; llama.cpp reads their factors only then.)
        if arch == "minicpm" {
            md.push((format!("{arch}.rope.scaling.type"), Value::String("longrope".into())));
        }
        md.push((format!("{arch}.rope.scaling.original_context_length"), u32v(l.original_context)));
        md.push((format!("{arch}.rope.scaling.attn_factor"), Value::F32(l.attn_factor)));
    }
    // (A vocabulary that names its model, as Phi-3's, names the file.)
    if spec.vocab.metadata.iter().any(|(k, _)| k == "general.name") {
        md.retain(|(k, _)| k != "general.name");
    }
    md.extend(spec.vocab.metadata.iter().cloned());
    md
}

/// A MoE file's keys: the expert counts and widths, and each architecture's routing and
/// shared-expert keys.
fn moe_keys(spec: &TinyModelSpec, arch: &str, m: TinyMoe) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let mut md = vec![(format!("{arch}.expert_count"), u32v(m.experts)), (format!("{arch}.expert_used_count"), u32v(m.used))];
    // (Mixtral's and OLMoE's experts are `feed_forward_length` wide.)
    if (spec.family != Family::Llama || matches!(arch, "deepseek" | "bailingmoe" | "smallthinker" | "llama4" | "afmoe")) && arch != "olmoe" {
        md.push((format!("{arch}.expert_feed_forward_length"), u32v(spec.ffn)));
    }
    if arch == "deepseek" {
        // DeepSeekMoE's routing: softmax, not renormalized, scaled; one shared expert.
        md.push((format!("{arch}.expert_shared_count"), u32v(1)));
        md.push((format!("{arch}.leading_dense_block_count"), u32v(MOE_DENSE_LEADING)));
        md.push((format!("{arch}.expert_weights_scale"), Value::F32(1.5)));
    }
    if arch == "afmoe" {
        // AFMoE's (Trinity's): one shared expert after the dense layers, renormalized, scaled;
        // no gating key (llama.cpp's default for it: sigmoid).
        md.push((format!("{arch}.expert_shared_count"), u32v(1)));
        md.push((format!("{arch}.leading_dense_block_count"), u32v(MOE_DENSE_LEADING)));
        md.push((format!("{arch}.expert_weights_scale"), Value::F32(1.5)));
        md.push((format!("{arch}.expert_weights_norm"), Value::Bool(true)));
    }
    if arch == "bailingmoe" {
        // Ling's routing: softmax, renormalized, scaled; one shared expert; a leading dense
        // count its converter writes and llama.cpp's graph does not read.
        md.push((format!("{arch}.expert_shared_count"), u32v(1)));
        md.push((format!("{arch}.leading_dense_block_count"), u32v(0)));
        md.push((format!("{arch}.expert_weights_scale"), Value::F32(1.5)));
        md.push((format!("{arch}.expert_weights_norm"), Value::Bool(true)));
    }
    if let Some((count, used)) = spec.expert_groups {
        md.push((format!("{arch}.expert_group_count"), u32v(count)));
        md.push((format!("{arch}.expert_group_used_count"), u32v(used)));
    }
    if arch == "llama4" {
        md.push((format!("{arch}.interleave_moe_layer_step"), u32v(LLAMA4_MOE_STEP)));
    }
    if arch == "smallthinker" {
        // SmallThinker's: sigmoid in the windowed file, softmax in the other; renormalized.
        md.push((format!("{arch}.expert_gating_func"), u32v(if spec.sliding_window.is_some() { 2 } else { 1 })));
    }
    if arch == "minimax-m2" {
        // MiniMax-M2's: sigmoid; a scale and a flag its graph does not read (renormalized,
        // never scaled), no shared expert, no dense layer.
        md.push((format!("{arch}.expert_weights_scale"), Value::F32(1.5)));
        md.push((format!("{arch}.expert_weights_norm"), Value::Bool(false)));
        md.push((format!("{arch}.expert_gating_func"), u32v(2)));
    } else if spec.family == Family::Glm4Moe {
        // GLM-4.5's routing: sigmoid, renormalized, scaled; one shared expert.
        md.push((format!("{arch}.expert_shared_count"), u32v(1)));
        md.push((format!("{arch}.leading_dense_block_count"), u32v(MOE_DENSE_LEADING)));
        md.push((format!("{arch}.expert_weights_scale"), Value::F32(1.5)));
        md.push((format!("{arch}.expert_weights_norm"), Value::Bool(true)));
        md.push((format!("{arch}.expert_gating_func"), u32v(2)));
    }
    if spec.family == Family::Qwen2 || arch == "hunyuan-moe" {
        // Qwen2 MoE's and Hunyuan's: the shared expert's own width.
        md.push((format!("{arch}.expert_shared_feed_forward_length"), u32v(WIDE_SHARED * spec.ffn)));
    }
    if spec.family == Family::Ernie45 {
        // ERNIE 4.5's: softmax with a selection bias, renormalized; a shared expert of its
        // own width (here an expert's); every layer after the first with experts.
        md.push((format!("{arch}.expert_shared_feed_forward_length"), u32v(spec.ffn)));
        md.push((format!("{arch}.leading_dense_block_count"), u32v(MOE_DENSE_LEADING)));
        md.push((format!("{arch}.interleave_moe_layer_step"), u32v(1)));
    }
    md
}

/// Apertus's xIELU parameters, Falcon-H1's Mamba-2 sizes, GPT-NeoX's `use_parallel_residual`, MPT's and Jais's ALiBi bias, MPT's, OLMo's and DBRX's
/// Q/K/V clamp,
/// Cohere's logit scale.
fn layer_form_keys(spec: &TinyModelSpec, arch: &str) -> Vec<(String, Value)> {
    let mut md = Vec::new();
    if arch == "gptneox" {
        md.push((format!("{arch}.use_parallel_residual"), Value::Bool(spec.parallel_residual)));
    }
    if matches!(arch, "mpt" | "jais") {
        md.push((format!("{arch}.attention.max_alibi_bias"), Value::F32(8.0)));
    }
    if matches!(arch, "mpt" | "olmo" | "dbrx") {
        md.push((format!("{arch}.attention.clamp_kqv"), Value::F32(1.5)));
    }
    if arch == "apertus" {
        // Apertus's xIELU, each layer's own (its files' lie near alpha 0.8, beta 0.5): one layer
        // curving its negative side more than its positive, the other the reverse.
        let per_layer = |values: [f32; 2]| Value::Array((0..spec.layers).map(|i| Value::F32(values[i % 2])).collect());
        md.push(("xielu.alpha_n".to_string(), per_layer([0.3, 1.4])));
        md.push(("xielu.alpha_p".to_string(), per_layer([0.9, -0.4])));
        md.push(("xielu.beta".to_string(), Value::F32(0.5)));
        md.push(("xielu.eps".to_string(), Value::F32(-1e-6)));
    }
    if let (Some(t), "falcon-h1") = (spec.mamba2, arch) {
        for (k, v) in [("conv_kernel", t.conv_kernel), ("inner_size", t.inner), ("state_size", t.state), ("time_step_rank", t.heads), ("group_count", t.groups)] {
            md.push((format!("{arch}.ssm.{k}"), Value::U32(v as u32)));
        }
    }
    if spec.family == Family::Cohere {
        // Command R7B's is 0.25, Command R's 0.0625: here one that spreads the tied
        // projection's logits.
        md.push((format!("{arch}.logit_scale"), Value::F32(0.125)));
    }
    md
}

/// `rows × cols` values as a `wt` tensor. A large matrix is quantized a band of rows per
/// thread (the 1B-shaped benchmark model's 1.2 billion values take minutes on one core): the
/// same bytes, since every quantized block lies within one row.
fn quantize_rows(w: &[f32], rows: usize, cols: usize, wt: GgmlDType) -> Result<QTensor, ModelError> {
    quantize_bands(w, rows, cols, wt, 1 << 22)
}

/// [`quantize_rows`] in bands of about `band` values.
fn quantize_bands(w: &[f32], rows: usize, cols: usize, wt: GgmlDType, band: usize) -> Result<QTensor, ModelError> {
    use rayon::prelude::*;
    let cpu = Device::Cpu;
    let band_rows = (band / cols.max(1)).max(1);
    if rows * cols <= band || cols % wt.block_size() != 0 {
        return Ok(QTensor::quantize(&Tensor::from_slice(w, (rows, cols), &cpu)?, wt)?);
    }
    let bands = w
        .par_chunks(band_rows * cols)
        .map(|band| -> Result<Vec<u8>, ModelError> {
            let t = Tensor::from_slice(band, (band.len() / cols, cols), &cpu)?;
            Ok(QTensor::quantize(&t, wt)?.data()?.into_owned())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bytes = bands.concat();
    Ok(candle_core::quantized::ggml_file::qtensor_from_ggml(wt, &bytes, vec![rows, cols], &cpu)?)
}

/// Writes `spec` as a GGUF file at `path`.
// long: the layers of every family without a module of its own, each tensor drawn in the order
// the recorded references' files were (`tests/data/llama-cpp-tiny.json` holds their sizes).
pub fn write_model(spec: &TinyModelSpec, path: &Path) -> Result<(), ModelError> {
    let cpu = Device::Cpu;
    let mut rng = Rand(rand::rngs::StdRng::seed_from_u64(spec.seed));
    // The routers and the experts after the first come from a stream of their own, so a MoE
    // file's other weights are those of the same spec without experts.
    let mut moe_rng = Rand(rand::rngs::StdRng::seed_from_u64(spec.seed ^ 0x6d6f65));
    // The encoders' files have no final norm nor output projection: written whole there.
    if bert::is_encoder(spec) {
        let md = [bert::metadata(spec), spec.vocab.metadata.clone()].concat();
        return write_gguf_file(path, &md, &bert::tensors(spec, &mut rng)?);
    }
    if modern_bert::is_modern_bert(spec) {
        let md = [modern_bert::metadata(spec), spec.vocab.metadata.clone()].concat();
        return write_gguf_file(path, &md, &modern_bert::tensors(spec, &mut rng)?);
    }
    let wt = spec.weight_type.ggml();
    let (d, hd, v) = (spec.hidden, spec.head_dim, spec.vocab.size);
    let (q_dim, kv_dim) = (spec.heads * hd, spec.kv_heads * hd);

    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let quantize = |name: String, w: Vec<f32>, rows: usize, cols: usize| -> Result<(String, QTensor), ModelError> {
        Ok((name, quantize_rows(&w, rows, cols, wt)?))
    };
    let mat = |name: String, rows: usize, cols: usize, gain: f32, rng: &mut Rand| {
        quantize(name, rng.matrix(rows, cols, gain), rows, cols)
    };
    let vector = |name: String, data: Vec<f32>| -> Result<(String, QTensor), ModelError> {
        let n = data.len();
        Ok((
            name,
            QTensor::quantize(&Tensor::from_vec(data, n, &cpu)?, GgmlDType::F32)?,
        ))
    };

    // The embedding rows are read directly as hidden states: unit scale. Gemma 2 multiplies
    // them by √hidden, so its rows are that much smaller (as a trained Gemma's are), and its
    // final norm is larger (as a trained Gemma's is): the tied output projection then spreads
    // the logits without the last token's own row winning every position.
    // OpenELM's tied rows, read unscaled, the same way: small rows, a large final norm.
    // AFMoE's, multiplied by √hidden as Gemma 2's, small too (its output is its own).
    // BitNet's too (its graph reads no output projection).
    let tied_small = spec.family == Family::Gemma2 || matches!(spec.arch, Some("openelm" | "bitnet"));
    let small_rows = tied_small || spec.arch == Some("afmoe");
    let embd_gain = match spec.family {
        _ if small_rows => 0.4 / 3f32.sqrt(),
        // Gemma 4 multiplies them by √hidden too: unit scale after it.
        Family::Gemma4 => 1.0,
        _ => (d as f32 / 3.0).sqrt(),
    };
    tensors.push(mat("token_embd.weight".into(), v, d, embd_gain, &mut rng)?);
    tensors.extend(embedding_and_output_extras(spec, embd_gain, &mut rng)?);
    let final_norm = if tied_small { 6.0 } else { 1.0 };
    // (LFM2's is `token_embd_norm`, written with its layers.)
    // Orion's, StableLM's, StarCoder2's and Phi-2's LayerNorms have a bias each.
    let norm = norm_kind(spec.family, spec.arch.unwrap_or(spec.family.arch()));
    let norm_bias = norm.has_bias();
    // OLMo's LayerNorms have no weight either.
    let norm_weight = norm != NormKind::PlainLayer;
    if spec.family != Family::Lfm2 && norm_weight {
        tensors.push(vector("output_norm.weight".into(), rng.around(d, final_norm, 0.1))?);
    }
    if norm_bias {
        tensors.push(vector("output_norm.bias".into(), rng.around(d, 0.0, 0.2))?);
    }
    if let Some(f) = &spec.rope_freqs {
        tensors.push(vector("rope_freqs.weight".into(), f.clone())?);
    }
    if let Some(l) = &spec.longrope {
        tensors.push(vector("rope_factors_long.weight".into(), l.long.clone())?);
        tensors.push(vector("rope_factors_short.weight".into(), l.short.clone())?);
    }
    // The families with modules of their own write their layers and metadata there.
    if let Some(md) = family_layers(spec, &mut tensors, &mut rng, &mut moe_rng)? {
        return write_gguf_file(path, &[md, spec.vocab.metadata.clone()].concat(), &tensors);
    }
    // OLMo 2 and EXAONE 4.0 normalize after each block (post-norms below), not before.
    let pre_norms = !matches!(spec.family, Family::Olmo2 | Family::Exaone4);
    for i in 0..spec.layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        if pre_norms && norm_weight {
            tensors.push(vector(n("attn_norm.weight"), rng.around(d, 1.0, 0.1))?);
        }
        if norm_bias {
            tensors.push(vector(n("attn_norm.bias"), rng.around(d, 0.0, 0.2))?);
        }
        if spec.attn_norm_2 {
            tensors.push(vector(n("attn_norm_2.weight"), rng.around(d, 1.0, 0.1))?);
            tensors.push(vector(n("attn_norm_2.bias"), rng.around(d, 0.0, 0.2))?);
        }
        let q = rng.matrix(q_dim, d, 1.0);
        let k = rng.matrix(kv_dim, d, 1.0);
        let v = rng.matrix(kv_dim, d, 1.0);
        if spec.family == Family::Phi3 || matches!(spec.arch, Some("falcon" | "gptneox" | "gpt2" | "starcoder" | "bloom" | "mpt" | "codeshell" | "jais" | "dbrx" | "chatglm" | "qwen" | "bailingmoe2")) {
            tensors.push(quantize(n("attn_qkv.weight"), [q, k, v].concat(), q_dim + 2 * kv_dim, d)?);
        } else {
            tensors.push(quantize(n("attn_q.weight"), q, q_dim, d)?);
            tensors.push(quantize(n("attn_k.weight"), k, kv_dim, d)?);
            tensors.push(quantize(n("attn_v.weight"), v, kv_dim, d)?);
        }
        tensors.push(mat(n("attn_output.weight"), d, q_dim, 1.0, &mut rng)?);
        tensors.extend(attention_extras(spec, i, &mut rng)?);
        if let Some((q_len, k_len)) = qk_norm_widths(spec) {
            tensors.push(vector(n("attn_q_norm.weight"), rng.around(q_len, 1.0, 0.1))?);
            tensors.push(vector(n("attn_k_norm.weight"), rng.around(k_len, 1.0, 0.1))?);
        }
        let gemma1 = spec.arch == Some("gemma");
        // (ChatGLM's layer is GLM-4's without them.)
        let post_norms = matches!(spec.family, Family::Gemma2 | Family::Gemma3 | Family::Olmo2 | Family::Exaone4 | Family::Glm4) && !gemma1 && spec.arch != Some("chatglm");
        if post_norms || spec.arch == Some("afmoe") {
            tensors.push(vector(n("post_attention_norm.weight"), rng.around(d, 1.0, 0.1))?);
            tensors.push(vector(n("post_ffw_norm.weight"), rng.around(d, 1.0, 0.1))?);
        }
        // (Cohere's, Phi-2's, Falcon's, PLaMo's and StableLM 2 12B's MLPs read the attention
        // norm's output; GPT-NeoX's parallel layers have an MLP norm.)
        let parallel = spec.family == Family::Cohere || matches!(spec.arch, Some("phi2" | "falcon" | "plamo")) || spec.qk_layer_norm;
        if pre_norms && !parallel && norm_weight {
            // GLM-4.5 and gpt-oss store their MLP pre-norm under Hugging Face's name, DBRX
            // under its own.
            let name = match spec.family {
                Family::Glm4Moe | Family::GptOss | Family::SeedOss if !glm45_kin(spec) => "post_attention_norm.weight",
                _ if spec.arch == Some("dbrx") => "attn_output_norm.weight",
                _ if spec.arch == Some("falcon-h1") => "ffn_norm", // (its converter's name)
                _ => "ffn_norm.weight",
            };
            tensors.push(vector(n(name), rng.around(d, 1.0, 0.1))?);
            if norm_bias {
                tensors.push(vector(n("ffn_norm.bias"), rng.around(d, 0.0, 0.2))?);
            }
        }
        tensors.extend(mlp_tensors(spec, i, &mut rng, &mut moe_rng)?);
        if spec.arch == Some("bitnet") {
            // BitNet's norms inside the blocks: of the attention's output, of the gated product.
            tensors.push(vector(n("attn_sub_norm.weight"), rng.around(q_dim, 1.0, 0.1))?);
            tensors.push(vector(n("ffn_sub_norm.weight"), rng.around(spec.ffn, 1.0, 0.1))?);
        }
    }

    write_gguf_file(path, &metadata(spec), &tensors)
}

/// The output projection where the spec does not tie it, Phi-2's logit biases, GPT-2's and
/// StarCoder's learned positions (half as large as the tokens' rows, `embd_gain`), BLOOM's
/// embedding LayerNorm.
fn embedding_and_output_extras(spec: &TinyModelSpec, embd_gain: f32, rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
    let (d, v, wt) = (spec.hidden, spec.vocab.size, spec.weight_type.ggml());
    let mat = |name: &str, rows: usize, cols: usize, gain: f32, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let t = Tensor::from_vec(rng.matrix(rows, cols, gain), (rows, cols), &Device::Cpu)?;
        Ok((name.to_string(), QTensor::quantize(&t, wt)?))
    };
    let mut out = Vec::new();
    if !spec.tie_embeddings {
        out.push(mat("output.weight", v, d, 3.0, rng)?);
    }
    if matches!(spec.arch, Some("phi2" | "phimoe")) {
        let b = Tensor::from_vec(rng.around(v, 0.0, 1.0), v, &Device::Cpu)?;
        out.push(("output.bias".to_string(), QTensor::quantize(&b, GgmlDType::F32)?));
    }
    if matches!(spec.arch, Some("gpt2" | "starcoder")) {
        out.push(mat("position_embd.weight", spec.context_length, d, embd_gain / 2.0, rng)?);
    }
    if spec.arch == Some("bloom") {
        for (name, center, spread) in [("token_embd_norm.weight", 1.0, 0.1), ("token_embd_norm.bias", 0.0, 0.2)] {
            let t = Tensor::from_vec(rng.around(d, center, spread), d, &Device::Cpu)?;
            out.push((name.to_string(), QTensor::quantize(&t, GgmlDType::F32)?));
        }
    }
    if spec.arch == Some("gemma-embedding") {
        // (EmbeddingGemma's projections go to 3,072 and back; the tiny file's to twice its width.)
        let feat = if d == 768 { 3072 } else { 2 * d };
        out.push(mat("dense_2.weight", feat, d, 1.0, rng)?);
        out.push(mat("dense_3.weight", d, feat, 1.0, rng)?);
    }
    // A reranker's classifier head: one row per label ("yes", "no").
    if spec.pooling == Some(RANK) {
        out.push(mat("cls.output.weight", 2, d, 1.0, rng)?);
    }
    Ok(out)
}

/// Layer `i`'s attention biases, sinks and per-head LayerNorm weights where the spec has them:
/// Q/K/V biases (GPT-NeoX's one fused), gpt-oss's, StarCoder2's, Phi-2's and GPT-NeoX's output bias, gpt-oss's sinks, StableLM 2
/// 12B's Q/K norms; and Falcon-H1's Mamba-2 mixer beside the attention.
fn attention_extras(spec: &TinyModelSpec, i: usize, rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
    let (q_dim, kv_dim) = (spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim);
    let n = |s: &str| format!("blk.{i}.{s}");
    let vector = |name: String, data: Vec<f32>| -> Result<(String, QTensor), ModelError> {
        let len = data.len();
        Ok((name, QTensor::quantize(&Tensor::from_vec(data, len, &Device::Cpu)?, GgmlDType::F32)?))
    };
    let mut out = Vec::new();
    // (Ling 2.0's fused Q/K/V has none, nor dots.llm1's.)
    let qkv = matches!(spec.family, Family::Qwen2 | Family::Glm4 | Family::Glm4Moe | Family::GptOss | Family::SeedOss) && !glm45_kin(spec);
    let coder = matches!(spec.arch, Some("starcoder2" | "phi2" | "gptneox" | "gpt2" | "starcoder" | "bloom" | "codeshell" | "jais" | "phimoe" | "jais2"));
    if matches!(spec.arch, Some("gptneox" | "gpt2" | "starcoder" | "bloom" | "codeshell" | "jais" | "chatglm" | "qwen" | "phimoe")) {
        // One bias beside the fused `attn_qkv`.
        out.push(vector(n("attn_qkv.bias"), rng.around(q_dim + 2 * kv_dim, 0.0, 0.5))?);
    } else if qkv || coder || spec.arch == Some("stablelm") {
        out.push(vector(n("attn_q.bias"), rng.around(q_dim, 0.0, 0.5))?);
        out.push(vector(n("attn_k.bias"), rng.around(kv_dim, 0.0, 0.5))?);
        out.push(vector(n("attn_v.bias"), rng.around(kv_dim, 0.0, 0.5))?);
    }
    if spec.family == Family::GptOss || coder {
        out.push(vector(n("attn_output.bias"), rng.around(spec.hidden, 0.0, 0.5))?);
    }
    if spec.arch == Some("afmoe") {
        // AFMoE's output gate, a projection of the normed input.
        let w = Tensor::from_vec(rng.matrix(q_dim, spec.hidden, 1.0), (q_dim, spec.hidden), &Device::Cpu)?;
        out.push((n("attn_gate.weight"), QTensor::quantize(&w, spec.weight_type.ggml())?));
    }
    if spec.family == Family::GptOss {
        // Sink logits about as large as the scores: each takes a real share of its head.
        out.push(vector(n("attn_sinks.weight"), rng.around(spec.heads, 0.0, 2.0))?);
    }
    if spec.qk_layer_norm {
        for (name, heads) in [("attn_q_norm.weight", spec.heads), ("attn_k_norm.weight", spec.kv_heads)] {
            let w = Tensor::from_vec(rng.around(heads * spec.head_dim, 1.0, 0.3), (heads, spec.head_dim), &Device::Cpu)?;
            out.push((n(name), QTensor::quantize(&w, GgmlDType::F32)?));
        }
    }
    if spec.arch == Some("falcon-h1") {
        let t = spec.mamba2.unwrap_or_else(|| TinyMamba2::tiny(spec.hidden));
        out.extend(granite_hybrid::mamba2_tensors(i, spec.hidden, &t, spec.weight_type.ggml(), rng)?);
    }
    Ok(out)
}

/// The widths of a layer's Q and K norms where the spec's layer has them: one head's, or all
/// of Q and all of K (OLMo 2's and OLMoE's).
fn qk_norm_widths(spec: &TinyModelSpec) -> Option<(usize, usize)> {
    let hd = spec.head_dim;
    // (Maincoder's: Llama's layer with per-head norms, after rope.)
    let per_head = matches!(spec.family, Family::Qwen3 | Family::Qwen3Moe | Family::Gemma3 | Family::Exaone4 | Family::Glm4Moe);
    if spec.family == Family::Olmo2 || matches!(spec.arch, Some("olmoe" | "minimax-m2")) {
        Some((spec.heads * hd, spec.kv_heads * hd))
    } else if per_head || matches!(spec.arch, Some("maincoder" | "apertus" | "afmoe")) {
        Some((hd, hd))
    } else {
        None
    }
}

/// Gemma 4's, LFM2's, Qwen3.5's, DeepSeek-V2's, the Mamba-2 hybrids' and Deci's layers (into
/// `tensors`) and metadata (the vocabulary's aside), from their modules; `None` for the others.
fn family_layers(
    spec: &TinyModelSpec,
    tensors: &mut Vec<(String, QTensor)>,
    rng: &mut Rand,
    moe_rng: &mut Rand,
) -> Result<Option<Vec<(String, Value)>>, ModelError> {
    Ok(match (spec.family, &spec.gemma4, &spec.delta_net, &spec.mla) {
        (Family::Gemma4, Some(g), _, _) => {
            tensors.extend(gemma4::tensors(spec, g, rng, moe_rng)?);
            Some(gemma4::metadata(spec, g))
        }
        (Family::GraniteHybrid, _, _, _) => {
            let t = spec.mamba2.unwrap_or_else(|| TinyMamba2::tiny(spec.hidden));
            tensors.extend(granite_hybrid::tensors(spec, &t, rng, moe_rng)?);
            Some(granite_hybrid::metadata(spec, &t))
        }
        (Family::NemotronH, _, _, _) => {
            let t = spec.mamba2.unwrap_or_else(|| TinyMamba2::tiny(spec.hidden));
            tensors.extend(nemotron_h::tensors(spec, &t, rng, moe_rng)?);
            Some(nemotron_h::metadata(spec, &t))
        }
        (Family::Lfm2, _, _, _) => {
            tensors.extend(lfm2::tensors(spec, rng, moe_rng)?);
            Some(lfm2::metadata(spec))
        }
        (Family::Qwen35, _, Some(t), _) => {
            tensors.extend(qwen35::tensors(spec, t, rng, moe_rng)?);
            Some(qwen35::metadata(spec, t))
        }
        (Family::DeepSeek2, _, _, Some(m)) => {
            tensors.extend(deepseek2::tensors(spec, m, rng, moe_rng)?);
            Some(deepseek2::metadata(spec, m))
        }
        _ => match (&spec.layer_shapes, &spec.jamba) {
            (Some(layers), _) => {
                tensors.extend(layer_shapes::tensors(spec, layers, rng)?);
                Some(layer_shapes::metadata(spec, layers))
            }
            (None, Some(j)) => {
                tensors.extend(jamba::tensors(spec, j, rng, moe_rng)?);
                Some(jamba::metadata(spec, j))
            }
            (None, None) => None,
        },
    })
}

/// Writes `md` and `tensors` as a GGUF file at `path`.
fn write_gguf_file(path: &Path, md: &[(String, Value)], tensors: &[(String, QTensor)]) -> Result<(), ModelError> {
    let file = File::create(path).map_err(|source| ModelError::Io {
        path: path.into(),
        source,
    })?;
    let mut w = BufWriter::new(file);
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    gguf_file::write(&mut w, &md_refs, &t_refs)?;
    std::io::Write::flush(&mut w).map_err(|source| ModelError::Io {
        path: path.into(),
        source,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quantized a band of rows per thread, a matrix has the bytes of one quantized whole.
    #[test]
    fn banded_quantization_gives_the_same_bytes() {
        let mut rng = Rand(rand::rngs::StdRng::seed_from_u64(7));
        let (rows, cols) = (37, 512);
        let w = rng.matrix(rows, cols, 1.0);
        for wt in [GgmlDType::Q4K, GgmlDType::Q8_0] {
            let whole = QTensor::quantize(&Tensor::from_slice(&w, (rows, cols), &Device::Cpu).unwrap(), wt).unwrap();
            let banded = quantize_bands(&w, rows, cols, wt, 3 * cols).unwrap();
            assert_eq!(banded.shape(), whole.shape());
            assert_eq!(banded.data().unwrap(), whole.data().unwrap(), "{wt:?}");
        }
    }
}
