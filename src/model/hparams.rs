//! The architecture families hearth runs and their hyper-parameters.
//!
//! One forward serves every family; the differences are a few flags, read from
//! GGUF metadata (`{arch}.*` keys) and from which tensors exist:
//!
//! | family | GGUF `general.architecture` | rope pairs | q/k/v bias | q/k RMSNorm |
//! |--------|------------------------------|------------|------------|-------------|
//! | Llama (2, 3.x, Mistral, SmolLM2, TinyLlama) | `llama` | interleaved | no | no |
//! | InternLM2, InternLM2.5 | `internlm2` | interleaved | no | no |
//! | XVERSE (7B, 13B, 65B) | `xverse` | interleaved | no | no |
//! | EXAONE 3.5, EXAONE Deep | `exaone` | NeoX (halves) | no | no |
//! | Arcee AFM (4.5B; its MLP up, squared ReLU, down) | `arcee` | interleaved | no | no |
//! | Maincoder (1B) | `maincoder` | interleaved | no | yes (after rope) |
//! | Qwen2 / Qwen2.5 | `qwen2` | NeoX (halves) | yes | no |
//! | Qwen1.5-MoE, Qwen2-57B-A14B | `qwen2moe` | NeoX (halves) | yes | no |
//! | Qwen3 | `qwen3` | NeoX (halves) | no | yes |
//! | Hunyuan dense (0.5B–7B; rope base × alpha^(d/(d−2))) | `hunyuan-dense` | NeoX (halves) | no | yes (after rope) |
//! | Gemma 2 | `gemma2` | NeoX (halves) | no | no |
//! | Gemma 3 | `gemma3` | NeoX (halves) | no | yes |
//! | Qwen3 MoE | `qwen3moe` | NeoX (halves) | no | yes |
//! | Mellum 2 (MoE, local layers) | `mellum` | NeoX (halves) | no | yes |
//! | Hunyuan-A13B (MoE, a shared expert) | `hunyuan-moe` | NeoX (halves) | no | yes (after rope) |
//! | OLMoE | `olmoe` | NeoX (halves) | no | yes (whole Q and K) |
//! | Phi-3, Phi-3.5, Phi-4 | `phi3` | NeoX (halves) | no | no |
//! | Ministral 3 | `mistral3` | interleaved | no | no |
//! | SmolLM3 | `smollm3` | interleaved (every fourth layer none) | no | no |
//! | Granite 3.x (dense) | `granite` | interleaved | no | no |
//! | MiniCPM (1B, 2B, MiniCPM4; Granite's multipliers) | `minicpm` | interleaved | no | no |
//! | ERNIE 4.5 (dense) | `ernie4_5` | interleaved | no | no |
//! | OLMo 2, OLMo 3 | `olmo2` | NeoX (halves) | no | yes (whole Q and K) |
//! | EXAONE 4.0 | `exaone4` | NeoX (halves; none in the 32B's global layers) | no | yes |
//! | GLM-4.5, GLM-4.6 (MoE) | `glm4moe` | NeoX, first half of each head | yes | optional |
//! | GLM-4 (0414), GLM-Z1 | `glm4` | interleaved, first half of each head (NeoX with M-RoPE sections) | yes | no |
//! | gpt-oss (20B, 120B) | `gpt-oss` | NeoX (halves) | yes | no |
//! | Gemma 4 (E2B, E4B, 26B-A4B, 31B) | `gemma4` | NeoX (halves; a quarter of each global head) | no | yes (and V, unweighted) |
//! | Gemma 3n (E2B, E4B) | `gemma3n` | NeoX (halves) | no | yes (and V, unweighted) |
//!
//! Phi-3 stores Q, K and V as one `attn_qkv` tensor and the MLP's gate and up as one `ffn_up`
//! (gate rows first); they are split at load. Its 128k-context files carry per-frequency
//! divisors for short and long contexts (`rope_factors_short`, `rope_factors_long`, "LongRoPE"):
//! as llama.cpp, the long ones apply when the context hearth runs is longer than
//! `rope.scaling.original_context_length`, and `rope.scaling.attn_factor` scales cos and sin.
//! Phi-4-mini rotates only the first `rope.dimension_count` dimensions of each head
//! (`rope_dims`, partial rotary); the others pass through.
//!
//! Ministral 3 (`mistral3`) is Llama's layer with YaRN whose ramp bounds
//! (`rope.scaling.yarn_beta_fast`/`_slow`) and magnitude (`rope.scaling.yarn_log_multiplier`)
//! the file sets, and Llama 4's attention temperature: beyond the original context each query
//! is multiplied by `1 + scale·ln(⌊pos / original_context⌋ + 1)`
//! (`attention.temperature_scale`; llama.cpp's `build_inp_attn_scale`).
//!
//! Llama 4 (`llama4`) runs three of every four layers over chunks of 8,192 positions (a query
//! sees its own chunk up to itself: [`Window::Chunked`]) and the fourth globally without rope,
//! its queries multiplied by `1 + 0.1·ln(⌊(pos + 1) / 8192⌋ + 1)` (llama.cpp's fixed values).
//!
//! SmolLM3 (`smollm3`) is Llama's layer, except that every fourth layer (the 4th, 8th, …)
//! skips rope ("NoPE": llama.cpp's `n_no_rope_layer_step`, fixed at 4 for this architecture);
//! its K there carries no position.
//!
//! Granite (`granite`, IBM's dense Granite 3.x) is Llama's layer with four multipliers from the
//! file: the embedding is multiplied by `embedding_scale`, attention scores by
//! `attention.scale` (in place of `1/√head_dim`), each attention and MLP output by
//! `residual_scale` before its residual add, and the logits are divided by `logit_scale`
//! (required, as llama.cpp requires it). `rope.scaling.finetuned = false` turns rope off in
//! every layer, as in llama.cpp. Granite's mixture-of-experts and hybrid files have
//! architectures of their own (`granitemoe`: Granite's layer with experts; `granitehybrid`:
//! below).
//!
//! Mixture-of-experts layers (Qwen3 MoE, and Mixtral, which llama.cpp writes as `llama`
//! with `llama.expert_count`) replace the MLP with a router and `expert_count` expert MLPs,
//! `expert_used_count` of them per token ([`MoeParams`], `super::moe`). Qwen2's MoE files
//! (`qwen2moe`, as llama.cpp's `src/models/qwen2moe.cpp`) weight the chosen experts by the
//! softmax over all of them, not renormalized, and add a shared expert whose output is
//! multiplied by the sigmoid of one score per token (`ffn_gate_inp_shexp`).
//!
//! Gemma 3 also scales the embedding by √hidden, uses a GELU (tanh) gated MLP, normalizes
//! each block's attention and MLP outputs again (`post_attention_norm`, `post_ffw_norm`), and
//! interleaves sliding-window ("local") layers with global ones: a local layer attends to the
//! last `attention.sliding_window` positions only and uses its own rope base. Which layers are
//! local, the local rope base and the query scale follow llama.cpp (`src/models/gemma3.cpp`):
//! `attention.sliding_window_pattern` when the file has it (a period, or one flag per layer),
//! else Gemma 3's period of 6 (five local layers, then a global one); `rope.freq_base_swa`,
//! else 10 000; queries scaled by `1/√head_dim`, except the 62-layer 27B
//! (`query_pre_attn_scalar` = hidden / heads). `attention.sliding_window` itself is required.
//!
//! Gemma 2 (`gemma2`) is Gemma 3's layer without the q/k norms, with local and global layers
//! alternating (`attention.sliding_window_pattern`, else a period of 2: even layers local;
//! `attention.sliding_window`, else 4,096; local layers on `rope.freq_base_swa`, else the
//! global base and scaling, as llama.cpp's `src/models/gemma2.cpp`), and two soft caps: every
//! attention score `s` becomes `c · tanh(s / c)` with `c = attn_logit_softcapping` (else 50)
//! before the softmax, and every logit likewise with `final_logit_softcapping` (else 30). Its
//! 27B (46 layers) scales queries by `1/√(hidden / heads)`.
//!
//! OLMo 2 (`olmo2`) normalizes after each block instead of before it: no `attn_norm` or
//! `ffn_norm`, each attention and MLP output normalized (`post_attention_norm`,
//! `post_ffw_norm`) before its residual add, and Q and K normalized whole (one RMSNorm over
//! all heads' values, before they are cut into heads). OLMo 3, written as `olmo2` with
//! `attention.sliding_window`, has local layers too (`attention.sliding_window_pattern`, else
//! every fourth layer global), rotated on the global base (`rope.freq_base_swa` is not used)
//! without scaling or attention factor (llama.cpp's `src/models/olmo2.cpp`).
//!
//! EXAONE 4.0 (`exaone4`) is OLMo 2's block (norms after, none before) with Qwen3's per-head
//! q/k norms. As in llama.cpp's `src/models/exaone4.cpp`, a 64-layer file (the 32B) has local
//! layers (`attention.sliding_window`, else 4,096; the pattern, else every fourth layer
//! global) rotated as the global ones would be, and its global layers take no rope at all;
//! other files have neither, whatever their keys say.
//!
//! Multi-token-prediction blocks (`nextn_predict_layers`, any family) follow the others in a
//! file; they are not run (`HParams::mtp_layers`), as llama.cpp runs them only to draft.
//!
//! GLM-4 (`glm4`: GLM-4-0414, GLM-Z1) normalizes before and after each block (Gemma's four
//! norms without Gemma's embedding scale or GELU), has q/k/v biases, stores the MLP's gate and
//! up as one `ffn_up` (gate rows first, as Phi-3), and rotates the first `rope.dimension_count`
//! dimensions of each head (half) in adjacent pairs, as llama.cpp's `src/models/glm4.cpp`
//! (`LLAMA_ROPE_TYPE_NORM`, its converter does not permute). A file with M-RoPE sections
//! (`rope.dimension_sections`: the vision models' text part) was converted with Q and K
//! permuted for NeoX pairs, and its text positions are the same in every section, so it
//! rotates as NeoX ([`HParams::rope_style`]).
//!
//! GLM-4.5 and 4.6 (`glm4moe`) are Llama's pre-norm layer with q/k/v biases, per-head q/k norms
//! where the file has them, half of each head rotated (NeoX), and, after the first
//! `leading_dense_block_count` dense layers, mixture-of-experts MLPs routed by sigmoid with a
//! selection bias, plus a shared expert ([`MoeParams`]). Its MLP's pre-norm is stored as
//! `post_attention_norm` (Hugging Face's name for it), as llama.cpp's
//! `src/models/glm4-moe.cpp` reads it.
//!
//! gpt-oss (`gpt-oss`, OpenAI's open-weight MoE models) is, as llama.cpp's
//! `src/models/openai-moe.cpp`, a pre-norm layer whose MLP's pre-norm is stored as
//! `post_attention_norm`, with q/k/v and output biases, YaRN rope (NeoX pairs), and:
//! - attention sinks: one learned logit per query head (`attn_sinks`) that each softmax counts
//!   as a key with no value ([`crate::ops::Attend::sinks`]);
//! - sliding-window layers alternating with global ones (`attention.sliding_window`, 128 in the
//!   published files; `attention.sliding_window_pattern`, else even layers local), rotated as
//!   the global ones unless the file gives them a base (`rope.freq_base_swa`);
//! - mixture-of-experts MLPs in every layer: the router has a bias, the top `k` experts are
//!   chosen by raw score and weighted by a softmax over those `k` scores only
//!   ([`MoeGating::SoftmaxWeight`]), each expert's gate, up and down projections have biases,
//!   and the activation is the clamped SwiGLU of OpenAI's reference
//!   ([`crate::ops::glu::Gate::SwigluOai`]).
//!
//! Gemma 4 (`gemma4`) is Gemma 3's layer, as llama.cpp's `src/models/gemma4.cpp`, with:
//! - local and global layers of different heads: `attention.key_length`,
//!   `rope.dimension_count` and the global entries of `attention.head_count_kv` (one per
//!   layer) are the global layers', the `_swa` keys and local entries the local layers'
//!   ([`HParams::attn_shape`]); the global layers' rope covers the whole head, `rope_freqs`
//!   turning all but its first quarter into no rotation ("proportional" rope), the local
//!   layers' their own width on `rope.freq_base_swa` without those factors; the pattern is one
//!   flag per layer (`attention.sliding_window_pattern`, required);
//! - V normalized per head (RMS, no weights), Q and K by their norms, the scores unscaled
//!   (`attention_scale` 1); where a global layer has no `attn_v`, V is K's projection;
//! - the E models' K/V sharing: the last `attention.shared_kv_layers` layers compute no K/V
//!   and attend over that of the last earlier layer of their kind ([`HParams::kv_layer`]), so
//!   the cache holds only the others ([`HParams::kv_layers`]); their MLPs may be wider
//!   (`feed_forward_length` per layer);
//! - the E models' per-layer token embedding (`embedding_length_per_layer_input`,
//!   `super::gemma4`), and each layer's output scaled by `layer_output_scale`;
//! - the 26B-A4B's dense MLP beside experts routed by a softmax (renormalized, each expert's
//!   output scaled by `ffn_down_exps.scale`);
//! - logits soft-capped at `final_logit_softcapping`, 30 where the file leaves it out.
//!
//! BitNet b1.58 (`bitnet`) is Llama's layer with NeoX rope and RMSNorms inside its blocks (of
//! the attention's output, of the MLP's gated product: [`HParams::sub_norms`]); its MLP's gate is
//! SiLU, as llama.cpp's graph runs it, unless `hidden_activation` says `relu2`.
//!
//! Nanbeige 4.2 (`nanbeige`) is Llama's layer with the whole stack run `num_loops` times over
//! the same weights ([`HParams::loops`]), each pass with store layers of its own (the K/V shape
//! repeats the stack's), the final norm between passes unless `skip_loop_final_norm`.
//!
//! Gemma 3n (`gemma3n`) is Gemma 4's E models' layer with one head shape for every layer,
//! inside AltUp's streams ([`AltUpParams`], `super::gemma3n`), as llama.cpp's
//! `src/models/gemma3n.cpp`; what llama.cpp fixes for it (20 layers keeping K/V, per-layer
//! inputs of 256, four local layers then a global one, ten layers of sparse MLP gates) is read
//! from the file where it says, those values otherwise; logits soft-capped at 30.
//!
//! Qwen3.5 (`qwen35`, `qwen35moe`) and Qwen3-Next (`qwen3next`), as llama.cpp's
//! `src/models/qwen35.cpp` and `qwen3next.cpp`: three of every four layers (`full_attention_interval`,
//! or one flag per layer in `attention.recurrent_layers`) are gated delta nets
//! ([`DeltaNetParams`], `super::delta_net`) that keep no K/V, the others Qwen3's attention
//! whose Q projection gives each head a gate beside its Q, rotating a quarter of each head
//! (M-RoPE sections, one rotation for text); the MLP's pre-norm is `post_attention_norm`; the
//! MoE files' shared expert is gated by the sigmoid of `ffn_gate_inp_shexp`. Only the
//! attention layers are store layers ([`HParams::kv_layer`]).
//!
//! LFM2 (`lfm2`), as llama.cpp's `src/models/lfm2.cpp`: the layers whose
//! `attention.head_count_kv` entry is 0 are gated short convolutions ([`ShortConvParams`],
//! `super::short_conv`), the others attention with per-head q/k norms and NeoX rope; its final
//! norm is stored as `token_embd_norm`. Its MoE files (`lfm2moe`, LFM2-8B-A1B, as
//! `src/models/lfm2moe.cpp`) have the same layers, with experts ([`MoeParams`]) after the first
//! `leading_dense_block_count`: routed by the file's gating (its converter writes sigmoid) with
//! a selection bias, renormalized, no shared expert, no weight scale.
//!
//! ERNIE 4.5 (`ernie4_5`, Baidu's dense 0.3B) is Llama's layer; its mixture-of-experts files
//! (`ernie4_5-moe`: 21B-A3B, 300B-A47B) add softmax-routed experts beside a shared one after a
//! dense first layer.
//!
//! The LayerNorm families run on `Family::Llama`'s forward with flags of their own: Orion's,
//! StableLM's, StarCoder2's, Phi-2's, Falcon's, GPT-NeoX's, GPT-2's, StarCoder's and BLOOM's
//! norms are LayerNorms with a bias each ([`NormKind::BiasedLayer`]); the coder models'
//! projections carry biases ([`HParams::out_biases`]) and their MLPs are up, GELU, down
//! ([`MlpKind::UpGelu`]); Phi-2's, Falcon's and (where its file says) GPT-NeoX's layers run
//! attention and MLP side by side ([`HParams::parallel_block`]). Where rope is, Falcon and
//! GPT-NeoX rotate NeoX pairs; GPT-2 and StarCoder learn a vector per position instead
//! ([`HParams::learned_positions`]), Refact, BLOOM and MPT bias each head's scores by its
//! distance to each key, ALiBi ([`HParams::alibi_max_bias`], [`crate::ops::Attend::alibi`]);
//! MPT's LayerNorms have no bias ([`NormKind::Layer`], as Cohere's) and its Q, K and V may be
//! clamped ([`HParams::clamp_kqv`]). The first OLMo (`olmo`) is Llama's layer whose
//! LayerNorms have neither weight nor bias ([`NormKind::PlainLayer`]), its Q, K and V clamped
//! where its file says, as MPT's.
//!
//! The rope pairing follows llama.cpp's `llama_model_rope_type`: its converter
//! permutes Llama's Q/K rows so that rotation pairs are adjacent (`LLAMA_ROPE_TYPE_NORM`),
//! while Qwen checkpoints are stored unpermuted and rotate halves (`NEOX`).

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use super::gguf::{
    md_opt_bool, md_opt_f64, md_opt_f64_per_layer, md_opt_per_layer_usize, md_opt_str, md_opt_usize, md_opt_usize_array, md_opt_usize_per_layer,
    md_str, md_usize,
};
use super::ModelError;
use crate::ops::glu::Gate;
use crate::ops::Window;

/// The architecture names hearth accepts in `general.architecture`.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &[
    "llama", "qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3", "mistral3", "smollm3", "granite",
    "ernie4_5", "olmo2", "exaone4", "glm4", "glm4moe", "gpt-oss", "gemma4", "deepseek2", "seed_oss", "qwen35", "lfm2", "granitehybrid", "nemotron_h", "cohere2", "qwen35moe", "qwen3next", "qwen3vl", "qwen3vlmoe", "qwen2vl", "mistral4", "ernie4_5-moe", "granitemoe", "nemotron_h_moe", "lfm2moe", "command-r", "qwen2moe", "internlm2", "exaone", "olmoe", "arcee", "minicpm", "hunyuan-dense", "hunyuan-moe", "maincoder", "xverse", "orion", "stablelm", "starcoder2", "phi2", "gemma", "falcon", "gptneox", "gpt2", "starcoder", "refact", "bloom", "mpt", "olmo", "codeshell", "jais", "dbrx", "baichuan", "chatglm", "nemotron", "deepseek", "qwen", "phimoe", "plamo", "bailingmoe", "bailingmoe2", "dots1", "apertus", "jais2", "exaone-moe", "minimax-m2", "falcon-h1", "smallthinker", "llama4", "deci", "openelm", "minicpm3", "jamba", "afmoe", "gemma3n", "mellum", "nanbeige", "bitnet", "bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v3", "jina-bert-v2", "gemma-embedding", "modern-bert",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Llama,
    /// Qwen2 and Qwen2.5 (and Qwen2-VL's language model, `qwen2vl`); its MoE files
    /// (`qwen2moe`: Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B) with softmax-routed experts, not
    /// renormalized, beside a shared expert whose output a sigmoid gates.
    Qwen2,
    /// Qwen3 (dense), and Qwen3-VL's language model (`qwen3vl`: its M-RoPE sections rotate a
    /// text token as plain NeoX rope does, its deepstack adds only to image tokens).
    Qwen3,
    /// Qwen3's attention with mixture-of-experts MLPs (Qwen3-30B-A3B, 235B-A22B; Qwen3-VL's MoE
    /// language models, `qwen3vlmoe`).
    Qwen3Moe,
    /// Gemma 2: Gemma 3's layer without q/k norms; soft-capped attention scores and logits.
    Gemma2,
    Gemma3,
    /// Phi-3, Phi-3.5 and Phi-4 (dense): fused QKV and gate/up tensors, LongRoPE factors.
    Phi3,
    /// Ministral 3 (dense): Llama's layer, YaRN with the file's parameters, attention
    /// temperature.
    Mistral3,
    /// SmolLM3: Llama's layer; every fourth layer skips rope.
    SmolLM3,
    /// Granite 3.x: Llama's layer with embedding, attention, residual and logit multipliers;
    /// its MoE files (`granitemoe`: 1B-A400M, 3B-A800M) with softmax-routed experts, and a
    /// shared expert where the file gives one.
    Granite,
    /// ERNIE 4.5: Llama's layer; its MoE files (`ernie4_5-moe`: 21B-A3B, 300B-A47B) with
    /// softmax-routed experts beside a shared one after a dense first layer.
    Ernie45,
    /// OLMo 2 and 3: norms after each block, not before; Q and K normalized whole.
    Olmo2,
    /// EXAONE 4.0: OLMo 2's block with per-head q/k norms; the 32B's global layers without rope.
    Exaone4,
    /// GLM-4 (0414) and GLM-Z1: norms before and after each block, q/k/v biases, a fused gate/up
    /// tensor, half of each head rotated.
    Glm4,
    /// GLM-4.5 and 4.6: GLM's attention, sigmoid-routed experts with a shared one.
    Glm4Moe,
    /// gpt-oss: attention sinks, alternating sliding-window layers, biased experts with a
    /// clamped SwiGLU, weighted by a softmax over the chosen ones.
    GptOss,
    /// Gemma 4: Gemma 3's layer with normalized V, unscaled scores, global layers of fewer and
    /// wider heads (some with K as V), per-layer token embeddings and K/V shared by the last
    /// layers (E2B, E4B), and a dense MLP beside routed experts (26B-A4B).
    Gemma4,
    /// DeepSeek-V2/V3's layer (`deepseek2`: DeepSeek-V2-Lite, GLM-4.7-Flash, Moonlight, Kimi
    /// K2): multi-head latent attention ([`MlaParams`]), experts with shared ones after the
    /// leading dense layers.
    DeepSeek2,
    /// Seed-OSS (36B): Llama's layer with q/k/v biases, NeoX rope; the MLP's norm stored under
    /// Hugging Face's name for it (`post_attention_norm`).
    SeedOss,
    /// Qwen3.5 and Qwen3.6 (dense: 0.8B to 27B; `qwen35moe`: 35B-A3B to 397B-A17B): three of
    /// every four layers a gated delta net ([`DeltaNetParams`]: linear attention whose state the
    /// cache keeps per sequence), the fourth Qwen3's attention with an output gate and a quarter
    /// of each head rotated; the MoE files' experts beside a shared expert whose output a
    /// sigmoid gates.
    Qwen35,
    /// LFM2 (Liquid: 350M to 2.6B): most layers a gated short convolution over the last few
    /// tokens ([`ShortConvParams`]: its last inputs are the state the cache keeps), the others
    /// attention with q/k norms; NeoX rope.
    Lfm2,
    /// Granite 4.0's hybrids (`granitehybrid`: H-350M to H-Small 32B-A9B): most layers a
    /// Mamba-2 selective state space mixer ([`Mamba2Params`]: its state the cache keeps per
    /// sequence), the others Granite's attention (without rope in IBM's files); Granite's
    /// multipliers; dense MLPs, or softmax-routed experts beside a shared expert.
    GraniteHybrid,
    /// NVIDIA's Nemotron-H (`nemotron_h`: Nemotron Nano 9B v2 and 12B v2; `nemotron_h_moe`:
    /// Nemotron 3 Nano 30B-A3B, Super): each layer one block of one kind, Mamba-2
    /// ([`Mamba2Params`]), attention without rope, or an MLP alone (up, squared ReLU, down;
    /// [`HParams::mlp_only`]), in the MoE files experts of that MLP routed by sigmoid with a
    /// selection bias, beside a shared one, optionally through a latent projection
    /// ([`MoeParams::latent`]).
    NemotronH,
    /// Cohere's Command models (`cohere2`: Command R7B, Command A; `command-r`: Command R,
    /// Aya Expanse): one LayerNorm (no bias) before each layer, whose output both the attention
    /// and the MLP read, both added to the residual ([`HParams::parallel_block`]); logits
    /// multiplied by `logit_scale`; tied embeddings; interleaved rope. `cohere2`'s layers
    /// slide but every fourth, whose attention skips rope.
    Cohere,
}

impl Family {
    /// Every family, in `SUPPORTED_ARCHITECTURES`' order.
    pub const ALL: [Family; 24] = [
        Self::Llama,
        Self::Qwen2,
        Self::Qwen3,
        Self::Qwen3Moe,
        Self::Gemma2,
        Self::Gemma3,
        Self::Phi3,
        Self::Mistral3,
        Self::SmolLM3,
        Self::Granite,
        Self::Ernie45,
        Self::Olmo2,
        Self::Exaone4,
        Self::Glm4,
        Self::Glm4Moe,
        Self::GptOss,
        Self::Gemma4,
        Self::DeepSeek2,
        Self::SeedOss,
        Self::Qwen35,
        Self::Lfm2,
        Self::GraniteHybrid,
        Self::NemotronH,
        Self::Cohere,
    ];

    // long: one arm per family, each saying which architectures' files it runs and how they differ.
    pub fn from_arch(arch: &str) -> Result<Self, ModelError> {
        match arch {
            // InternLM2 and EXAONE 3.5 (and EXAONE Deep): Llama's layer under names of their own
            // (EXAONE's rotates NeoX pairs: `HParams::rope_style`).
            // Arcee's AFM (`arcee`): Llama's layer whose MLP has no gate (`HParams::mlp`).
            // Maincoder (`maincoder`): Llama's layer with each head's Q and K normalized after
            // rope (`HParams::qk_norm_after_rope`).
            // XVERSE (`xverse`): Llama's layer under its own name.
            // Orion (`orion`): Llama's layer with biased LayerNorms (`HParams::norm`) and NeoX
            // pairs. StableLM (`stablelm`): the same, partly rotated, with Q/K/V biases where
            // the file has them. StarCoder2 (`starcoder2`): Orion's norms and pairs, biases on
            // every projection, an MLP of up, GELU, down (`HParams::mlp`, `HParams::out_biases`).
            // Phi-2 (`phi2`): StarCoder2's layer in parallel form (`HParams::parallel_block`),
            // partly rotated, its logits biased (`HParams::output_bias`). Falcon (`falcon`: 7B,
            // 40B, 180B): Phi-2's parallel layer without biases but the norms', a fused QKV
            // (multi-query in 7B's), the attention's own norm in 40B's and 180B's. GPT-NeoX
            // (`gptneox`: Pythia, GPT-NeoX-20B, RedPajama-INCITE): StarCoder2's layer with a
            // fused QKV, parallel where the file says (`use_parallel_residual`), the MLP then
            // reading its own norm (`HParams::parallel_mlp_norm`). GPT-2 (`gpt2`) and StarCoder
            // (`starcoder`: StarCoder, StarCoderBase, SantaCoder's layout; multi-query):
            // GPT-NeoX's sequential layer without rope, positions learned
            // (`HParams::learned_positions`). Refact (`refact`: Refact-1.6B): Llama's layer
            // without rope, ALiBi in its place (`HParams::alibi_max_bias`). BLOOM (`bloom`):
            // GPT-2's layer with ALiBi for positions and a LayerNorm of the embedding
            // (`HParams::embedding_norm`). MPT (`mpt`: MPT-7B, MPT-30B and their chat and
            // instruct models): GPT-2's layer without biases (its LayerNorms too) with ALiBi, Q,
            // K and V clamped where the file says (`HParams::clamp_kqv`). OLMo (`olmo`: the
            // first OLMo 1B and 7B): Llama's layer, its LayerNorms without weights, Q, K and V
            // clamped as MPT's. CodeShell (`codeshell`: CodeShell-7B): GPT-2's layer with NeoX
            // rope for positions, grouped K/V heads. Jais (`jais`: the Jais family): GPT-2's
            // layer with ALiBi for positions, its MLP gated SiLU with a bias on each projection,
            // scores scaled by 1/head_dim. DBRX (`dbrx`: DBRX Base and Instruct): Mixtral's
            // layer (16 experts, 4 per token) with unbiased LayerNorms, NeoX rope, a fused
            // `attn_qkv`, Q, K and V clamped (`attention.clamp_kqv`, required), the MLP's norm
            // stored as `attn_output_norm` (`HParams::ffn_norm_stem`). Baichuan (`baichuan`:
            // Baichuan and Baichuan 2, 7B and 13B): Llama's layer, rope in the 7Bs' 32 layers,
            // ALiBi in the 13Bs' 40 (as llama.cpp tells them apart). Nemotron (`nemotron`:
            // Nemotron-4 and Minitron, Nemotron-Mini-4B): biased LayerNorms (their converter adds
            // layernorm1p's 1 to the weights), NeoX rope over part of each head, an MLP of up,
            // squared ReLU, down (as Arcee's). DeepSeek's first MoE (`deepseek`: DeepSeekMoE
            // 16B): Llama's layer, its first `leading_dense_block_count` layers dense, the others'
            // experts softmax-routed, not renormalized, scaled by `expert_weights_scale`, beside
            // `expert_shared_count` shared experts. PLaMo (`plamo`: PLaMo-13B and its instruct
            // model): Llama's layer in parallel form, its MLP reading the attention's norm, NeoX
            // pairs. Apertus (`apertus`: Apertus 8B and 70B, base and instruct): Llama's layer with
            // each head's Q and K normalized before NeoX rope, an MLP of up, xIELU (its
            // parameters per layer, `HParams::xielu`), down. Jais 2 (`jais2`): Nemotron's layer
            // (biased LayerNorms, NeoX rope, up, squared ReLU, down) with biases on the output
            // and MLP projections. Ling (`bailingmoe`: Ling-lite, Ling-plus, Ling-Coder-lite): Llama's layer
            // whose every MLP is experts (softmax-routed, renormalized where
            // `expert_weights_norm` says, scaled) beside `expert_shared_count` shared experts.
            // Falcon-H1 (`falcon-h1`: 0.5B to 34B, Falcon-H1R): Llama's layer with NeoX pairs
            // and a Mamba-2 mixer beside its attention in every layer, both reading the
            // attention norm's output, their outputs added ([`HParams::ssm_beside_attention`];
            // the model's multipliers are in its weights, as its converter writes them).
            // SmallThinker (`smallthinker`: 4B-A0.6B, 21B-A3B): Llama's layer with NeoX pairs
            // whose every MLP is experts with a ReLU gate ([`HParams::relu_gate`]), routed on
            // the layer's input before its attention ([`HParams::route_on_layer_input`]) by the
            // file's gating, renormalized; where the file has a window, three local layers of
            // 4,096 positions then a global one without rope. Llama 4 (`llama4`: Scout, Maverick,
            // MobileLLM-R1): Llama's layer, every `interleave_moe_layer_step`-th MLP experts
            // (sigmoid-routed by raw score, each weight multiplying its expert's input, beside a
            // shared expert of an expert's width), three layers of 8,192-position chunks then a
            // global one without rope whose queries take Llama 4's temperature, each head's Q
            // and K RMS-normalized without a weight after rope in the rotating layers (all but
            // Maverick's); a file whose window is 0 (MobileLLM-R1's) has no chunks, no
            // temperature, and rope in every layer. Deci (`deci`: Llama-3.1-Nemotron 51B,
            // Super 49B, Ultra 253B, DeciLM-7B): Llama's layer, each of its own K/V heads and
            // MLP width, some with "linear attention", some without attention or MLP
            // ([`LayerHeads`]). OpenELM (`openelm`: OpenELM 270M to 3B and their instruct
            // models): Llama's layer with each layer's own query heads, K/V heads and MLP
            // width, a fused QKV, each head's Q and K normalized before NeoX rope. Jamba
            // (`jamba`: Jamba v0.1, 1.5 Mini and Large, Jamba Reasoning 3B): Mamba layers
            // ([`MambaParams`]) with an attention layer without rope every so often (its
            // `attention.head_count_kv` not 0), experts where the file has a layer's router.
            // AFMoE (`afmoe`: Arcee's Trinity Nano, Mini, Large): Llama's layer with Gemma 2's
            // post-norms, the embedding × √hidden, each head's Q and K normalized before NeoX
            // rope, the attention's output gated by a sigmoid of its own projection
            // (`HParams::attn_gate`), three local layers then a global one without rope,
            // sigmoid-routed experts with a selection bias beside shared ones after the
            // leading dense layers. Nanbeige 4.2 (`nanbeige`): Llama's layer, the whole stack
            // run `num_loops` times over the same weights (`HParams::loops`). BitNet b1.58
            // (`bitnet`): Llama's layer with NeoX rope, RMSNorms of the attention's output and of
            // the MLP's gated product (`HParams::sub_norms`).
            "llama" | "internlm2" | "exaone" | "arcee" | "maincoder" | "xverse" | "orion" | "stablelm" | "starcoder2"
            | "phi2" | "falcon" | "gptneox" | "gpt2" | "starcoder" | "refact" | "bloom" | "mpt" | "olmo" | "codeshell" | "jais" | "dbrx" | "baichuan" | "nemotron" | "deepseek" | "plamo" | "bailingmoe" | "apertus" | "jais2" | "falcon-h1" | "smallthinker" | "llama4" | "deci" | "openelm" | JAMBA | AFMOE | NANBEIGE | BITNET => Ok(Self::Llama),
            // BERT (`bert`: BERT, MiniLM, BGE, E5, mxbai-embed, Snowflake Arctic Embed) and
            // nomic-embed-text (`nomic-bert`): encoders whose layer is GPT-2's reordered, each
            // residual add followed by its LayerNorm, attending over the whole input both ways
            // (`HParams::encoder`); BERT's with learned positions and an up-GELU-down MLP,
            // nomic's with NeoX rope and a gated SiLU MLP. Embeddings only.
            // nomic-embed-text-v2-moe (`nomic-bert-moe`): nomic's layer with biases and BERT's
            // up-GELU-down MLP, every `moe_every_n_layers`-th of them (llama.cpp's
            // `il % n == 1`) experts of the same MLP without biases (`MoeParams::expert_mlp`).
            // jina-embeddings-v3 (`jina-bert-v3`): the same layer without experts.
            // jina-embeddings-v2 (`jina-bert-v2`): BERT's biased layer with ALiBi for positions
            // and a GELU-gated MLP (`HParams::gate_optional`), Q/K LayerNorms and a second
            // attention norm where the file has them (the code model's).
            BERT | NOMIC_BERT | NOMIC_BERT_MOE | JINA_BERT_V3 | JINA_BERT_V2 => Ok(Self::Llama),
            // ModernBERT (`modern-bert`: ModernBERT base and large, gte-modernbert,
            // modernbert-embed, Granite Embedding R2): a pre-norm encoder (`HParams::encoder`,
            // not BERT's post-norm layout) of unbiased LayerNorms (none before the first layer's
            // attention), a fused QKV, NeoX rope, a gated MLP of the file's activation
            // (`HParams::gate_act`), two local layers of a symmetric window then a global one.
            MODERN_BERT => Ok(Self::Llama),
            // Qwen2-VL's and Qwen2.5-VL's language model: Qwen2's layer, as `qwen3vl` below.
            // Qwen's first models (`qwen`: Qwen-7B, Qwen-14B and their chat models): Qwen2's
            // layer with Q, K and V fused (`attn_qkv` and its bias), its MLP half as wide as
            // `feed_forward_length` says (llama.cpp's `qwen` graph).
            "qwen2" | "qwen2vl" | "qwen" => Ok(Self::Qwen2),
            // Qwen1.5-MoE and Qwen2-57B-A14B: Qwen2's attention, experts beside a gated shared
            // one (`HParams::moe`).
            "qwen2moe" => Ok(Self::Qwen2),
            // Qwen3-VL's language model: Qwen3's layer, its M-RoPE the same rotation for text.
            // Hunyuan's dense models (`hunyuan-dense`): Qwen3's layer with Q and K normalized after
            // rope (`HParams::qk_norm_after_rope`), the base scaled by `rope.scaling.alpha`.
            "qwen3" | "qwen3vl" | "hunyuan-dense" => Ok(Self::Qwen3),
            // OLMoE (`olmoe`): the same layer with Q and K normalized whole, its experts' weights
            // not renormalized (`HParams::qk_norm_whole`, `MoeParams::normalize`). Hunyuan's MoE
            // files (`hunyuan-moe`): with Q and K normalized after rope, as its dense ones, and a
            // shared expert beside the experts. JetBrains' Mellum 2 (`mellum`): the same layer,
            // three local layers (the file's window, where it has one) then a global one, the
            // local ones rotated on the global base without its scaling.
            "qwen3moe" | "qwen3vlmoe" | "olmoe" | "hunyuan-moe" | "mellum" => Ok(Self::Qwen3Moe),
            // Gemma 1 (`gemma`: Gemma, Gemma 1.1, CodeGemma): Gemma 2's layer without its
            // post-norms, soft caps and sliding windows (`HParams::post_norms`).
            "gemma2" | "gemma" => Ok(Self::Gemma2),
            // EmbeddingGemma's (`gemma-embedding`): Gemma 3's layer attending both ways
            // (`HParams::encoder`), its local layers over a window on either side.
            "gemma3" | GEMMA_EMBEDDING => Ok(Self::Gemma3),
            // Phi-3.5-MoE's (`phimoe`): Phi-3's attention (LongRoPE, an output bias) under RMSNorms
            // with a bias, experts for its MLP, logit biases.
            "phi3" | "phimoe" => Ok(Self::Phi3),
            "mistral3" => Ok(Self::Mistral3),
            "smollm3" => Ok(Self::SmolLM3),
            // Granite 3.x's MoE files: the same layer with experts (`HParams::moe`).
            // MiniCPM's (`minicpm`): Granite's layer and multipliers (llama.cpp runs it on
            // Granite's graph), with defaults for its older files and rope always on.
            "granite" | "granitemoe" | "minicpm" => Ok(Self::Granite),
            // ERNIE 4.5's MoE files: the same layer with experts (`HParams::moe`).
            "ernie4_5" | "ernie4_5-moe" => Ok(Self::Ernie45),
            "olmo2" => Ok(Self::Olmo2),
            "exaone4" => Ok(Self::Exaone4),
            // ChatGLM3's and GLM-4-9B's (`chatglm`): GLM-4-0414's layer without its post-norms
            // (llama.cpp's `chatglm` graph: half of each head rotated in adjacent pairs, a fused
            // gate/up, Q/K/V biases).
            "glm4" | "chatglm" => Ok(Self::Glm4),
            // Ling 2.0's (`bailingmoe2`: Ling-mini-2.0, Ling-flash-2.0, Ring-mini-2.0): GLM-4.5's
            // layer with Q, K and V fused and unbiased, the MLP's norm as `ffn_norm`, a shared
            // expert `expert_shared_feed_forward_length` (else an expert's) wide per shared
            // count, the gating the file's (required), its experts in groups. dots.llm1's
            // (`dots1`): GLM-4.5's layer with Q, K and V apart and unbiased, rotated whole, the
            // MLP's norm as `ffn_norm`, the gating the file's (required).
            // EXAONE's MoE files (`exaone-moe`: K-EXAONE): GLM-4.5's layer with per-head Q/K
            // norms, three sliding-window layers rotated then a global one without rope (as
            // EXAONE 4.0 32B's, but normalized before each block), a shared expert
            // `expert_shared_feed_forward_length` (else an expert's) wide whatever the count,
            // the gating the file's (required). MiniMax-M2's (`minimax-m2`: M2, M2.1, M2.5):
            // GLM-4.5's layer with Q, K and V apart and unbiased, Q and K normalized whole
            // (over every head, `HParams::qk_norm_whole`) before partial NeoX rope, the MLP's
            // norm as `ffn_norm`, every layer's MLP experts (no shared expert, no dense layer),
            // their weights renormalized and never scaled, the gating the file's (required).
            "glm4moe" | "bailingmoe2" | "dots1" | "exaone-moe" | "minimax-m2" => Ok(Self::Glm4Moe),
            "gpt-oss" => Ok(Self::GptOss),
            // Gemma 3n (`gemma3n`): Gemma 4's E models' layer (its local and global layers of one
            // shape) inside AltUp's streams, with Laurel's residual (`HParams::altup`).
            "gemma4" | "gemma3n" => Ok(Self::Gemma4),
            // Mistral 4's files are `deepseek2`'s under another name (llama.cpp runs them so),
            // YaRN's magnitude aside.
            // MiniCPM3 (`minicpm3`: MiniCPM3-4B): DeepSeek-V2's latent attention (Q through a
            // low-rank pair, one `attn_kv_b`) with NeoX pairs over a dense Llama MLP, MiniCPM's
            // multipliers fixed (`Scales::minicpm3`), LongRoPE factors.
            "deepseek2" | "mistral4" | MINICPM3 => Ok(Self::DeepSeek2),
            "seed_oss" => Ok(Self::SeedOss),
            // Qwen3-Next (80B-A3B, Qwen3-Coder-Next): the same layers, its V heads grouped by
            // Q/K head (`DeltaNetParams::grouped`).
            "qwen35" | "qwen35moe" | "qwen3next" => Ok(Self::Qwen35),
            // LFM2's MoE files (LFM2-8B-A1B): the same layers, experts after the first ones.
            "lfm2" | "lfm2moe" => Ok(Self::Lfm2),
            "granitehybrid" => Ok(Self::GraniteHybrid),
            "nemotron_h" | "nemotron_h_moe" => Ok(Self::NemotronH),
            // Command R's older layer: the same without sliding windows, every layer rotated.
            "cohere2" | "command-r" => Ok(Self::Cohere),
            other => Err(ModelError::UnsupportedArchitecture {
                arch: other.to_string(),
                supported: SUPPORTED_ARCHITECTURES.join(", "),
            }),
        }
    }

    /// The family's own `general.architecture` string (the metadata key prefix of its files;
    /// a file may name another that maps to it, [`Family::from_arch`]).
    pub fn arch(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Qwen3Moe => "qwen3moe",
            Self::Gemma2 => "gemma2",
            Self::Gemma3 => "gemma3",
            Self::Phi3 => "phi3",
            Self::Mistral3 => "mistral3",
            Self::SmolLM3 => "smollm3",
            Self::Granite => "granite",
            Self::Ernie45 => "ernie4_5",
            Self::Olmo2 => "olmo2",
            Self::Exaone4 => "exaone4",
            Self::Glm4 => "glm4",
            Self::Glm4Moe => "glm4moe",
            Self::GptOss => "gpt-oss",
            Self::Gemma4 => "gemma4",
            Self::DeepSeek2 => "deepseek2",
            Self::SeedOss => "seed_oss",
            Self::Qwen35 => "qwen35",
            Self::Lfm2 => "lfm2",
            Self::GraniteHybrid => "granitehybrid",
            Self::NemotronH => "nemotron_h",
            Self::Cohere => "cohere2",
        }
    }

    /// The family's rope pairing; a file may differ ([`HParams::rope_style`]).
    pub fn rope_style(self) -> RopeStyle {
        match self {
            Self::Llama
            | Self::Mistral3
            | Self::SmolLM3
            | Self::Granite
            | Self::GraniteHybrid
            | Self::NemotronH
            | Self::Ernie45
            | Self::Glm4
            | Self::DeepSeek2
            | Self::Cohere => RopeStyle::Interleaved,
            Self::Qwen2
            | Self::Qwen3
            | Self::Qwen3Moe
            | Self::Gemma2
            | Self::Gemma3
            | Self::Phi3
            | Self::Olmo2
            | Self::Exaone4
            | Self::Glm4Moe
            | Self::GptOss
            | Self::Gemma4
            | Self::SeedOss
            | Self::Qwen35
            | Self::Lfm2 => RopeStyle::Neox,
        }
    }
}

/// What a dense MLP computes between its input projections and `down`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpKind {
    /// `act(gate) · up` with the family's activation (SwiGLU, GeGLU): `ffn_gate`, `ffn_up`.
    Gated,
    /// Nemotron-H's and Arcee's AFM's: `relu(up)²`, no `ffn_gate`.
    UpReluSquared,
    /// StarCoder2's and Phi-2's: `gelu(up)` (tanh's approximation, as llama.cpp's
    /// `LLM_FFN_GELU`), no `ffn_gate`.
    UpGelu,
    /// Apertus's: `xielu(up)` with each layer's parameters ([`Xielu`]), no `ffn_gate`.
    UpXielu,
}

/// One layer's xIELU (Apertus's activation), its parameters as ggml's `ggml_xielu` keeps them:
/// `a_p·x² + β·x` for `x > 0`, else `(expm1(min(x, ε)) − x)·a_n + β·x`, where the file's
/// `xielu.alpha_p` and `xielu.alpha_n` give `a_p = softplus(alpha_p)` and
/// `a_n = β + softplus(alpha_n)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Xielu {
    pub a_p: f32,
    pub a_n: f32,
    pub beta: f32,
    pub eps: f32,
}

impl Xielu {
    /// The activation of one value.
    pub fn apply(&self, x: f32) -> f32 {
        if x > 0.0 {
            self.a_p * x * x + self.beta * x
        } else {
            (x.min(self.eps).exp_m1() - x) * self.a_n + self.beta * x
        }
    }
}

/// What a layer's input norm and the final norm compute over a row `x` with weight `α`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// `x / √(mean(x²) + ε) · α` (llama.cpp's `LLM_NORM_RMS`): every family but Cohere's.
    Rms,
    /// `(x − mean(x)) / √(var(x) + ε) · α`, no bias (llama.cpp's `LLM_NORM`): Cohere's.
    Layer,
    /// The same plus a bias `β` per column (`LLM_NORM` with a bias): Orion's.
    BiasedLayer,
    /// RMSNorm plus a bias `β` per column (`LLM_NORM_RMS` with a bias): Phi-3.5-MoE's.
    BiasedRms,
    /// `(x − mean(x)) / √(var(x) + ε)`, neither weight nor bias (llama.cpp's `LLM_NORM` with
    /// no tensors): OLMo's (the first OLMo, `olmo`) non-parametric LayerNorm.
    PlainLayer,
}

impl NormKind {
    /// Whether it is a LayerNorm (mean subtracted), not an RMSNorm.
    pub fn is_layer(self) -> bool {
        matches!(self, Self::Layer | Self::BiasedLayer | Self::PlainLayer)
    }

    /// Whether it adds a bias `β` (`{stem}.bias`, required).
    pub fn has_bias(self) -> bool {
        matches!(self, Self::BiasedLayer | Self::BiasedRms)
    }
}

/// Which dimensions rotary embeddings rotate together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i+1)`: llama.cpp's `LLAMA_ROPE_TYPE_NORM`.
    Interleaved,
    /// Pairs `(i, i + d/2)`: llama.cpp's `LLAMA_ROPE_TYPE_NEOX`.
    Neox,
}

/// Rope frequency scaling from `{arch}.rope.scaling.*`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (`rope.scaling.type = "linear"`).
    Linear {
        factor: f64,
    },
    /// YaRN (`rope.scaling.type = "yarn"`): the frequencies that turn fewer than `beta_slow`
    /// times over `original_context` positions are divided by `factor`, those that turn more
    /// than `beta_fast` times are kept, a linear ramp between, and every cos and sin is
    /// multiplied by `1 + 0.1·ln(factor)`, divided by `1 + 0.1·log_multiplier·ln(factor)`
    /// when the file sets `rope.scaling.yarn_log_multiplier`. As llama.cpp's `ggml_rope_ext`
    /// with `ext_factor` 1: the Qwen2.5/Qwen3 long-context files (betas 32 and 1, no
    /// multiplier) and Ministral 3 (its own).
    Yarn {
        factor: f64,
        original_context: usize,
        beta_fast: f64,
        beta_slow: f64,
        /// 0 when absent.
        log_multiplier: f64,
    },
}

impl RopeScaling {
    /// The magnitude YaRN gives every rope cos and sin (before `rope.scaling.attn_factor`):
    /// `1 + 0.1·ln(factor)`, divided by `1 + 0.1·log_multiplier·ln(factor)` where the file sets
    /// a multiplier, for a factor above 1; else 1 (and 1 for the other scalings).
    pub fn yarn_magnitude(self) -> f64 {
        match self {
            Self::Yarn { factor, log_multiplier, .. } if factor > 1.0 => {
                let m = 1.0 + 0.1 * factor.ln();
                if log_multiplier != 0.0 {
                    m / (1.0 + 0.1 * log_multiplier * factor.ln())
                } else {
                    m
                }
            }
            _ => 1.0,
        }
    }
}

/// Hyper-parameters of one model, as the forward needs them.
#[derive(Debug, Clone, PartialEq)]
pub struct HParams {
    pub family: Family,
    pub vocab_size: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    /// Per-head dimension of Q and K (and V): `attention.key_length`, else `hidden / heads`.
    pub head_dim: usize,
    /// How many of each head's first dimensions rope rotates (`rope.dimension_count`, else
    /// `head_dim`; fewer on Phi-4-mini and GLM-4).
    pub rope_dims: usize,
    /// Which dimensions rotate together: the family's, except a GLM-4 file with M-RoPE
    /// sections (NeoX).
    pub rope_style: RopeStyle,
    /// The dense MLP's width (`feed_forward_length`; 0 when a MoE file leaves it out).
    pub ffn: usize,
    /// Mixture-of-experts MLPs in every layer, when the model has them.
    pub moe: Option<MoeParams>,
    /// Multi-token-prediction blocks the file has after `layers` (`nextn_predict_layers`):
    /// never loaded or run.
    pub mtp_layers: usize,
    /// The context length the model was trained for.
    pub context_length: usize,
    /// `rope.scaling.original_context_length`, else `context_length`: Phi-3's LongRoPE uses its
    /// long factors for contexts beyond this.
    pub rope_original_context: usize,
    /// The norms' epsilon (`attention.layer_norm_rms_epsilon`; LayerNorm's
    /// `attention.layer_norm_epsilon`).
    pub rms_eps: f64,
    /// Which norm the layers' input norms and the final norm are ([`NormKind`]).
    pub norm: NormKind,
    /// Gemma 2, 3 and 4, OLMo 2, EXAONE 4.0, GLM-4: each block's output is normalized
    /// (`post_attention_norm`, `post_ffw_norm`, required) before its residual add; not Gemma 1's.
    pub post_norms: bool,
    /// StableLM: a file whose layers have no `ffn_norm` (StableLM 2 12B's) runs them as
    /// `parallel_block` says.
    pub ffn_norm_optional: bool,
    /// Cohere, Phi-2, Falcon: the attention and the MLP both read the attention norm's output
    /// (Falcon 40B's and 180B's attention its own, `attn_norm_2`), and both add to the residual
    /// (`x + mlp(n(x)) + attn(n(x))`); the layer has no MLP norm but GPT-NeoX's
    /// (`parallel_mlp_norm`). GPT-NeoX: where its file says so.
    pub parallel_block: bool,
    /// GPT-NeoX: a parallel layer's MLP reads its own norm (`ffn_norm`, required), as a
    /// sequential layer's does: `x + attn(n1(x)) + mlp(n2(x))`.
    pub parallel_mlp_norm: bool,
    /// OLMo 2 and OLMoE: the Q and K norms (`attn_q_norm`, `attn_k_norm`) run over all the
    /// heads' values of a token at once, not over each head's.
    pub qk_norm_whole: bool,
    /// Hunyuan's dense and MoE files, Maincoder's: each head's Q and K are normalized after
    /// rope, not before.
    pub qk_norm_after_rope: bool,
    /// Llama 4: each head's Q and K RMS-normalized without a weight, after rope, in the layers
    /// that rotate (llama.cpp's `use_kq_norm`: every file but the 128-expert one's).
    pub qk_norm_unweighted: bool,
    /// SmallThinker: the experts' gate is `max(x, 0)` (llama.cpp's gated `LLM_FFN_RELU`).
    pub relu_gate: bool,
    /// BitNet b1.58 where its file says `hidden_activation` `relu2`: the MLP's gate is
    /// `max(x, 0)²` (else SiLU, as llama.cpp's graph runs every BitNet file).
    pub relu_squared_gate: bool,
    /// BitNet b1.58: RMSNorms inside the blocks, of the attention's output before `attn_output`
    /// (`attn_sub_norm`) and of the MLP's gated product before `ffn_down` (`ffn_sub_norm`).
    pub sub_norms: bool,
    /// SmallThinker: the router scores the layer's input itself, before the attention and
    /// its norm (llama.cpp's `probs_in`).
    pub route_on_layer_input: bool,
    /// What a dense MLP computes between its input projections and `down` ([`MlpKind`]).
    pub mlp: MlpKind,
    /// StarCoder2, Phi-2, GPT-NeoX, GPT-2, StarCoder, BLOOM, CodeShell, Jais, Phi-3.5-MoE: the
    /// attention's output projection and the dense MLP's projections add biases
    /// (`attn_output.bias`, `ffn_up.bias`, `ffn_down.bias`, and a gated MLP's `ffn_gate.bias`
    /// (Jais's); required; Phi-3.5-MoE's layers have experts, not a dense MLP).
    pub out_biases: bool,
    /// Phi-2, Phi-3.5-MoE: the output projection adds a bias, one per vocabulary entry (`output.bias`,
    /// required).
    pub output_bias: bool,
    /// GPT-2, StarCoder: each position adds its own learned vector to the token's embedding
    /// (`position_embd`, a row per position of the trained context, required); no layer
    /// rotates (`no_rope`).
    pub learned_positions: bool,
    /// Refact, BLOOM, MPT: ALiBi's maximum bias (llama.cpp's `f_max_alibi_bias`), from which each
    /// query head's slope follows ([`HParams::alibi_slopes`]); no layer rotates.
    pub alibi_max_bias: Option<f32>,
    /// BLOOM: the embedding is LayerNorm-ed (`token_embd_norm`, with its bias) before the first
    /// layer.
    pub embedding_norm: bool,
    /// ModernBERT: a layer's attention norm may be absent (its first layer's is: the embedding's
    /// norm serves), the attention then reading the residual stream as it is.
    pub attn_norm_optional: bool,
    /// ModernBERT: the gated MLP's activation from the file's `hidden_activation` (GELU where
    /// absent or unknown, as llama.cpp falls back); `None`: the family's.
    pub gate_act: Option<Gate>,
    /// jina-embeddings-v2 (`jina-bert-v2`): the MLP is GELU-gated where the file has a gate
    /// (`ffn_gate`, or `ffn_up` twice the MLP's width, the gate its first half), else up and
    /// GELU alone; of its biases only down's is required, and a gate's is not read (as
    /// llama.cpp's graph). Its layers' Q/K LayerNorms (`attn_q_norm`, `attn_k_norm`: all of Q
    /// and all of K, weight and bias) and second attention norm (`attn_norm_2`) are read where
    /// the file has them.
    pub gate_optional: bool,
    /// BERT and nomic-embed-text (`bert`, `nomic-bert`): an encoder. Every token attends to
    /// every other of its input, before and after it (`{arch}.attention.causal` false), so no
    /// token's K/V is a prefix's and nothing is cached: an input runs whole, in one forward,
    /// for its embedding (the only thing such a model serves). Each layer is post-norm: the
    /// attention's output added to the layer's input, then LayerNorm-ed (`attn_output_norm`);
    /// the MLP's output added to that, then LayerNorm-ed (`layer_output_norm`); the
    /// embedding gains the first token type's row (`token_types`, "sentence A") and is
    /// LayerNorm-ed (`token_embd_norm`); there is no final norm and no output projection
    /// ([`Self::bert_layers`]). EmbeddingGemma (`gemma-embedding`) is an encoder of Gemma 3's
    /// layers, its local layers' window symmetric ([`Window::Symmetric`]).
    pub encoder: bool,
    /// BERT's post-norm layer and embedding (`bert`, `nomic-bert`: [`ENCODER_ARCHS`]).
    pub bert_layers: bool,
    /// EmbeddingGemma's projections of the pooled vector (`dense_2.weight`, `[dense_2_feat_out,
    /// hidden]`, then `dense_3.weight`, back to `hidden`), where the file was converted with
    /// them: `dense_2_feat_out`.
    pub dense_out: Option<usize>,
    /// MPT, OLMo and DBRX: Q, K and V are clamped to `±c` after their projections
    /// (`attention.clamp_kqv`, where the file gives one above 0; llama.cpp's `f_clamp_kqv`).
    pub clamp_kqv: Option<f32>,
    /// The stem of each layer's MLP pre-norm tensor: `ffn_norm`; GLM-4.5's, gpt-oss's,
    /// Seed-OSS's and Qwen3.5's `post_attention_norm`; DBRX's `attn_output_norm`.
    pub ffn_norm_stem: &'static str,
    pub rope_base: f64,
    pub rope_scaling: RopeScaling,
    /// `rope.scaling.attn_factor`: multiplies every rope cos and sin (llama.cpp's
    /// `rope_attn_factor`, any scaling type; 1 when absent).
    pub rope_attn_factor: f64,
    /// What multiplies `q · k` in attention (`1/√head_dim` unless the family says otherwise).
    pub attention_scale: f64,
    /// Gemma: the token embedding is multiplied by this (√hidden).
    pub embedding_scale: Option<f64>,
    /// Sliding-window attention: which layers are local, their window and rope base.
    pub sliding: Option<SlidingWindow>,
    /// Ministral 3: queries scaled by position beyond the original context.
    pub attn_temperature: Option<AttnTemperature>,
    /// One flag per layer, `true` where the layer skips rope (SmolLM3's every fourth; every
    /// layer of a Granite file with `rope.scaling.finetuned = false`); empty when every layer
    /// rotates.
    pub no_rope: Vec<bool>,
    /// Granite: each attention and MLP output is multiplied by this before its residual add.
    pub residual_scale: Option<f64>,
    /// Granite: the logits are divided by this.
    pub logit_scale: Option<f64>,
    /// Cohere: the logits are multiplied by this (its `logit_scale`).
    pub logit_multiplier: Option<f64>,
    /// Gemma 2: attention scores are soft-capped at this ([`crate::ops::Attend::softcap`]).
    pub attn_softcap: Option<f64>,
    /// Gemma 2 and 4: each logit `z` becomes `c · tanh(z / c)` with this `c`.
    pub final_softcap: Option<f64>,
    /// Gemma 4: the global (non-sliding) layers' heads, where they differ from the local
    /// layers' (`kv_heads`, `head_dim` and `rope_dims` are then the local layers').
    pub global_attn: Option<AttnShape>,
    /// The layers that keep K/V: all of them, except Gemma 4's E models, whose last
    /// `shared_kv_layers` read the K/V of the last earlier layer of their kind
    /// ([`HParams::kv_layer`]).
    pub kv_layers: usize,
    /// Gemma 4's E models: the width of each layer's slice of the per-layer token embedding
    /// (`embedding_length_per_layer_input`); 0 without one.
    pub per_layer_input: usize,
    /// Each layer's dense MLP width where they differ (Gemma 4's E models double it in their
    /// K/V-sharing layers); empty when every layer's is `ffn`.
    pub ffn_per_layer: Vec<usize>,
    /// Apertus: each layer's xIELU ([`MlpKind::UpXielu`]); empty for the other files.
    pub xielu: Vec<Xielu>,
    /// DeepSeek-V2/V3: multi-head latent attention. The cache then keeps one K/V head per layer
    /// (`kv_heads` 1) of the latent and its rotated part (`head_dim` = `kv_lora_rank +
    /// qk_rope`, `rope_dims` = `qk_rope`), which every query head attends over.
    pub mla: Option<MlaParams>,
    /// Qwen3.5: the gated delta net of its recurrent layers and which layers those are; the
    /// others attend, and only they keep K/V (`kv_layers` counts them, [`HParams::kv_layer`]).
    pub recurrent: Option<DeltaNetParams>,
    /// LFM2: its short convolution layers (the others attend, and only they keep K/V).
    pub short_conv: Option<ShortConvParams>,
    /// Granite 4.0's hybrids, Nemotron-H: their Mamba-2 layers (the others attend, and only
    /// they keep K/V; Nemotron-H's MLP layers aside). Falcon-H1: every layer's, beside its
    /// attention ([`HParams::ssm_beside_attention`]).
    pub mamba2: Option<Mamba2Params>,
    /// Jamba: its Mamba layers (the others attend, and only they keep K/V).
    pub mamba: Option<MambaParams>,
    /// Gemma 3n: AltUp's streams and the MLPs' activation sparsity.
    pub altup: Option<AltUpParams>,
    /// Falcon-H1: every layer both attends (keeping K/V) and runs its Mamba-2 mixer over the
    /// same normed rows (keeping a state), the two outputs added before the residual.
    pub ssm_beside_attention: bool,
    /// Nemotron-H, Deci: one flag per layer, `true` where the layer is an MLP alone (no mixer,
    /// no K/V; Nemotron-H's `attn_norm` the MLP's, Deci's `ffn_norm`); empty for the other
    /// families, whose every layer has a mixer.
    pub mlp_only: Vec<bool>,
    /// Deci, OpenELM: each layer's query heads, 0 in a layer without attention; empty for the
    /// other families, whose layers all have `heads` (Gemma 4's global ones aside).
    pub layer_heads: Vec<usize>,
    /// Deci, OpenELM: each layer's K/V heads, 0 in a layer without K/V (Deci's "linear
    /// attention" and attention-free layers); empty for the other families, whose attending
    /// layers all have `kv_heads` (Gemma 4's global ones aside).
    pub layer_kv_heads: Vec<usize>,
    /// AFMoE: each attending layer's output (before `attn_output`) is multiplied by the sigmoid
    /// of its own projection of the layer's normed input (`attn_gate`, required).
    pub attn_gate: bool,
    /// Nanbeige's looped layers: the whole stack runs this many times over the same weights
    /// (`num_loops`; 1 for every other file), each pass with store layers of its own
    /// ([`HParams::kv_shape`] repeats the stack's).
    pub loops: usize,
    /// Nanbeige: between passes the state goes through the final norm (`output_norm`), unless
    /// the file says `skip_loop_final_norm`.
    pub loop_norm: bool,
    /// How a sentence embedding pools the final rows (`{arch}.pooling_type`: an embedding
    /// model's, such as Qwen3-Embedding's last token); `None` for a generative model.
    pub pooling: Option<super::pooling::Pooling>,
    /// A reranker's head (`pooling_type` rank: Qwen3-Reranker's, a cross-encoder's): its labels,
    /// the row it scores ([`Self::rank_pooling`]) and its layers' shape
    /// ([`super::pooling::rank_head`]).
    pub rank: Option<super::pooling::RankHead>,
    /// Deci (Nemotron 51B): one flag per layer, `true` where the layer's attention is its output
    /// projection alone over its normed input (`attn_output` of `hidden × hidden`, no heads, no
    /// K/V: the checkpoint's `replace_with_linear`); empty for the other families.
    pub linear_attn: Vec<bool>,
}

/// Mamba-2's selective state space mixer (llama.cpp's `ssm.*` keys, its `build_mamba2_layer`):
/// one projection gives each token's gate `z`, the convolution's input (`x`, then `B` and `C`
/// of `state` values per group) and one step size per head; `x`, `B` and `C` run through a
/// causal convolution of `conv_kernel` taps and SiLU; each head then keeps a
/// `head_dim × state` state that decays by `exp(softplus(dt) · A)` and takes `B ⊗ x · dt`,
/// read at `C`. What a sequence carries is that state and the convolution's last inputs
/// ([`Self::state_floats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mamba2Params {
    /// `ssm.conv_kernel`: the convolution's taps.
    pub conv_kernel: usize,
    /// `ssm.inner_size`: the width of `x` (and `z`): every head's values.
    pub inner: usize,
    /// `ssm.state_size`: the width of `B` and `C` in each group.
    pub state: usize,
    /// `ssm.time_step_rank`: heads, each with its own step size, decay and skip.
    pub heads: usize,
    /// `ssm.group_count`: groups of heads sharing one `B` and `C` (and one norm).
    pub groups: usize,
    /// One flag per layer: `true` for a Mamba-2 layer (`attention.head_count_kv` 0 there).
    pub layers: Vec<bool>,
}

impl Mamba2Params {
    /// Each head's width.
    pub fn head_dim(&self) -> usize {
        self.inner / self.heads
    }

    /// The convolution's channels: `x`, `B` and `C`.
    pub fn conv_channels(&self) -> usize {
        self.inner + 2 * self.groups * self.state
    }

    /// The input projection's width: `z`, the convolution's input, a step size per head.
    pub fn proj_width(&self) -> usize {
        self.inner + self.conv_channels() + self.heads
    }

    /// The floats one layer carries per sequence: the convolution's last `conv_kernel - 1`
    /// inputs and every head's state.
    pub fn state_floats(&self) -> [usize; 2] {
        [(self.conv_kernel - 1) * self.conv_channels(), self.inner * self.state]
    }

    /// Reads them (`key` prefixes the architecture) for the Mamba-2 layers `layers`.
    fn read(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, layers: Vec<bool>) -> Result<Self, ModelError> {
        let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
        let conv_kernel = md_usize(md, &key("ssm.conv_kernel"))?;
        let inner = md_usize(md, &key("ssm.inner_size"))?;
        let state = md_usize(md, &key("ssm.state_size"))?;
        let heads = md_usize(md, &key("ssm.time_step_rank"))?;
        let groups = md_usize(md, &key("ssm.group_count"))?;
        if conv_kernel == 0 {
            return Err(bad("ssm.conv_kernel", "a convolution of 0 taps".into()));
        }
        if state == 0 {
            return Err(bad("ssm.state_size", "a state of width 0".into()));
        }
        if heads == 0 || inner == 0 || !inner.is_multiple_of(heads) {
            return Err(bad("ssm.time_step_rank", format!("{inner} values in {heads} heads")));
        }
        if groups == 0 || !heads.is_multiple_of(groups) {
            return Err(bad("ssm.group_count", format!("{heads} heads in {groups} groups")));
        }
        Ok(Self {
            conv_kernel,
            inner,
            state,
            heads,
            groups,
            layers,
        })
    }
}

/// Mamba's selective state space mixer, its first form (llama.cpp's `build_mamba_layer`, as
/// Jamba's Mamba layers run it): `ssm_in` gives each token's `x` and gate `z`; `x` runs through
/// a causal convolution of `conv_kernel` taps and SiLU; `ssm_x` then gives a low-rank step
/// (`time_step_rank` values, taken up to one per channel by `ssm_dt`), `B` and `C` (`state`
/// values each; Jamba's three RMS-normalized first); each channel keeps `state` values that
/// decay by `exp(softplus(dt) · A)` (`A` per channel and state value) and take `B · x · dt`,
/// read at `C`. What a sequence carries is that state and the convolution's last inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MambaParams {
    /// `ssm.conv_kernel`: the convolution's taps.
    pub conv_kernel: usize,
    /// `ssm.inner_size`: the channels (`x`'s and `z`'s width).
    pub inner: usize,
    /// `ssm.state_size`: the state values per channel (`B`'s and `C`'s width).
    pub state: usize,
    /// `ssm.time_step_rank`: the step's low rank.
    pub dt_rank: usize,
    /// One flag per layer: `true` for a Mamba layer (`attention.head_count_kv` 0 there).
    pub layers: Vec<bool>,
}

impl MambaParams {
    /// The floats one layer carries per sequence: the convolution's last `conv_kernel - 1`
    /// inputs and every channel's state.
    pub fn state_floats(&self) -> [usize; 2] {
        [(self.conv_kernel - 1) * self.inner, self.inner * self.state]
    }

    /// Reads them (`key` prefixes the architecture) for the Mamba layers `layers`.
    fn read(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, layers: Vec<bool>) -> Result<Self, ModelError> {
        let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
        let p = Self {
            conv_kernel: md_usize(md, &key("ssm.conv_kernel"))?,
            inner: md_usize(md, &key("ssm.inner_size"))?,
            state: md_usize(md, &key("ssm.state_size"))?,
            dt_rank: md_usize(md, &key("ssm.time_step_rank"))?,
            layers,
        };
        for (k, v) in [("ssm.conv_kernel", p.conv_kernel), ("ssm.inner_size", p.inner), ("ssm.state_size", p.state), ("ssm.time_step_rank", p.dt_rank)] {
            if v == 0 {
                return Err(bad(k, "0".into()));
            }
        }
        Ok(p)
    }
}

/// Gemma 3n's alternating updates ([`super::gemma3n`]): each token's hidden state is
/// `inputs` streams, of which the layers run on the first (the "active" one: the file's
/// `altup.active_idx`, which must be 0, as llama.cpp reads none other) and correct the
/// others by what they did; and its MLPs' activation sparsity.
#[derive(Debug, Clone, PartialEq)]
pub struct AltUpParams {
    /// `altup.num_inputs` (4 in the published files; llama.cpp's default).
    pub inputs: usize,
    /// Each layer's Gaussian top-k on its MLP gate: the gate less its mean and this many
    /// standard deviations, floored at 0 (`activation_sparsity_scale`, the normal quantile of
    /// the checkpoint's sparsity); `None` where the layer keeps every value (a quantile of
    /// −∞, from a sparsity of 0).
    pub sparsity: Vec<Option<f32>>,
}

impl AltUpParams {
    /// Reads them (`key` prefixes the architecture) for `layers` layers. Without
    /// `activation_sparsity_scale`, llama.cpp's constants: the first
    /// [`GEMMA3N_SPARSE_LAYERS`] layers at the 95th percentile.
    fn read(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, layers: usize) -> Result<Self, ModelError> {
        let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
        let inputs = md_opt_usize(md, &key("altup.num_inputs"))?.unwrap_or(4);
        if inputs < 2 {
            return Err(bad("altup.num_inputs", format!("{inputs}: AltUp needs two streams or more")));
        }
        let active = md_opt_usize(md, &key("altup.active_idx"))?.unwrap_or(0);
        if active != 0 {
            return Err(bad("altup.active_idx", format!("{active}: hearth runs the first stream, as llama.cpp does")));
        }
        let sparsity = match md_opt_f64_per_layer(md, &key("activation_sparsity_scale"), layers)? {
            Some(scales) => scales
                .iter()
                .enumerate()
                .map(|(i, &s)| match s {
                    s if s == f64::NEG_INFINITY => Ok(None),
                    s if s.is_finite() => Ok(Some(s as f32)),
                    s => Err(bad("activation_sparsity_scale", format!("layer {i}'s is {s}"))),
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => (0..layers).map(|i| (i < GEMMA3N_SPARSE_LAYERS).then_some(GEMMA3N_SPARSITY)).collect(),
        };
        Ok(Self { inputs, sparsity })
    }
}

/// LFM2's gated short convolution (llama.cpp's `shortconv`): each token's `B`, `C` and `x`
/// from one projection; `B·x` through a causal convolution of `l_cache` taps per channel, times
/// `C`, projected back. A sequence carries the last `l_cache - 1` values of `B·x`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShortConvParams {
    /// `shortconv.l_cache`: the convolution's taps (at least 2).
    pub l_cache: usize,
    /// One flag per layer: `true` for a convolution (`attention.head_count_kv` 0 there).
    pub layers: Vec<bool>,
}

/// Qwen3.5's gated delta net (llama.cpp's `ssm.*` keys): each token's Q, K and V come from
/// one projection through a short causal convolution (`conv_kernel` taps over the token and
/// those before it); each V head keeps a `head_k × head_v` state that decays by a per-token
/// gate and learns each token's V at its K by the delta rule, and is read at its Q. What a
/// sequence carries from token to token is that state and the convolution's last inputs
/// ([`Self::state_floats`]), not K/V per token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaNetParams {
    /// `ssm.conv_kernel`: the convolution's taps.
    pub conv_kernel: usize,
    /// `ssm.group_count`: Q/K heads (shared by V heads as K/V heads are by query heads).
    pub k_heads: usize,
    /// `ssm.time_step_rank`: V heads, each with its own state, gate and beta.
    pub v_heads: usize,
    /// `ssm.state_size`: each Q/K head's width.
    pub head_k: usize,
    /// `ssm.inner_size / v_heads`: each V head's width.
    pub head_v: usize,
    /// One flag per layer: `true` for a gated delta net, `false` for attention
    /// (`attention.recurrent_layers`, else every `full_attention_interval`-th layer attends).
    pub layers: Vec<bool>,
    /// Qwen3-Next (`qwen3next`): V head `h` reads Q/K head `h / (v_heads / k_heads)` (each Q/K
    /// head's V heads side by side), and a layer's projections may be stored grouped by Q/K
    /// head (`ssm_in`, `ssm_ba`). Qwen3.5: head `h mod k_heads`.
    pub grouped: bool,
}

impl DeltaNetParams {
    /// The convolution's channels: Q, K and V.
    pub fn conv_channels(&self) -> usize {
        2 * self.k_heads * self.head_k + self.v_heads * self.head_v
    }

    /// The floats one recurrent layer carries per sequence: the convolution's last
    /// `conv_kernel - 1` inputs and every V head's state.
    pub fn state_floats(&self) -> [usize; 2] {
        [
            (self.conv_kernel - 1) * self.conv_channels(),
            self.v_heads * self.head_v * self.head_k,
        ]
    }

    /// How many layers are recurrent.
    pub fn recurrent_layers(&self) -> usize {
        self.layers.iter().filter(|&&r| r).count()
    }

    /// Reads them (`key` prefixes the architecture) for a model of `layers` layers.
    fn read(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, layers: usize) -> Result<Self, ModelError> {
        let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
        let conv_kernel = md_usize(md, &key("ssm.conv_kernel"))?;
        let inner = md_usize(md, &key("ssm.inner_size"))?;
        let head_k = md_usize(md, &key("ssm.state_size"))?;
        let v_heads = md_usize(md, &key("ssm.time_step_rank"))?;
        let k_heads = md_usize(md, &key("ssm.group_count"))?;
        if conv_kernel == 0 {
            return Err(bad("ssm.conv_kernel", "a convolution of 0 taps".into()));
        }
        if head_k == 0 || k_heads == 0 || v_heads == 0 || !v_heads.is_multiple_of(k_heads) {
            return Err(bad(
                "ssm.time_step_rank",
                format!("{v_heads} V heads cannot share {k_heads} Q/K heads of {head_k}"),
            ));
        }
        if inner == 0 || !inner.is_multiple_of(v_heads) {
            return Err(bad("ssm.inner_size", format!("{inner} values in {v_heads} V heads")));
        }
        let flags = match md.get(&key("attention.recurrent_layers")) {
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::Bool(b) => Ok(*b),
                    other => Err(bad("attention.recurrent_layers", format!("{:?} is not a flag", other.value_type()))),
                })
                .collect::<Result<Vec<bool>, _>>()?,
            Some(_) => return Err(bad("attention.recurrent_layers", "not an array of flags".into())),
            None => {
                let every = md_opt_usize(md, &key("full_attention_interval"))?.unwrap_or(4);
                if every == 0 {
                    return Err(bad("full_attention_interval", "0".into()));
                }
                (0..layers).map(|i| !(i + 1).is_multiple_of(every)).collect()
            }
        };
        // The file's flags may cover its multi-token-prediction blocks too (never recurrent).
        if flags.len() < layers {
            return Err(bad("attention.recurrent_layers", format!("{} flags for {layers} layers", flags.len())));
        }
        let flags = flags[..layers].to_vec();
        if flags.iter().all(|&r| r) {
            return Err(bad("attention.recurrent_layers", "no layer attends".into()));
        }
        Ok(Self {
            conv_kernel,
            k_heads,
            v_heads,
            head_k,
            head_v: inner / v_heads,
            layers: flags,
            grouped: md_str(md, "general.architecture")? == "qwen3next",
        })
    }
}

/// One layer's attention heads: how many, how many K/V heads, their width, and how many of
/// each head's first dimensions rope rotates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rope_dims: usize,
}

/// DeepSeek-V2's multi-head latent attention (llama.cpp's `deepseek2` graph with its "absorbed"
/// MLA): each token's K and V come from one latent of `kv_lora_rank` values (normalized) and
/// `qk_rope` values rope rotates, shared by every head; each head's Q is its `qk_nope` values
/// taken into the latent's space by `attn_k_b`, then its `qk_rope` rotated ones, and its
/// output is taken out of the latent's space by `attn_v_b` into `v_head` values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MlaParams {
    /// `attention.q_lora_rank`: the width of Q's low-rank pair (`attn_q_a`, `attn_q_b`); 0
    /// where Q is one projection (`attn_q`: DeepSeek-V2-Lite).
    pub q_lora_rank: usize,
    /// `attention.kv_lora_rank`: the latent's width.
    pub kv_lora_rank: usize,
    /// Each head's Q/K values without rope (`attention.key_length_mla` less `qk_rope`).
    pub qk_nope: usize,
    /// Each head's Q/K values rope rotates (`rope.dimension_count`).
    pub qk_rope: usize,
    /// Each head's V width (`attention.value_length_mla`).
    pub v_head: usize,
    /// `rope.scaling.yarn_log_multiplier` over 0.1, as llama.cpp takes it for this
    /// architecture (the converter multiplied DeepSeek's `mscale_all_dim` by 0.1); 0 when absent.
    pub mscale_all_dims: f64,
    /// The YaRN log multiplier of the rope tables (`RopeScaling::Yarn::log_multiplier`):
    /// llama.cpp's `deepseek2` takes `mscale_all_dims` as the rope's own `mscale` too, so that
    /// the tables' magnitude `get_mscale(f, m) / get_mscale(f, m)` is 1, which a multiplier of 1
    /// gives; `mistral4`'s own `mscale` is 1, its multiplier `mscale_all_dims` itself. 0 where
    /// the file has none.
    pub tables_log_multiplier: f64,
}

impl MlaParams {
    /// The width of what the cache keeps per token and layer: the latent, then its rotated part.
    pub fn latent_width(&self) -> usize {
        self.kv_lora_rank + self.qk_rope
    }

    /// What multiplies `q · k`, as llama.cpp's `deepseek2` graph: `mscale² / √(qk_nope +
    /// qk_rope)`, where `mscale` is `1 + 0.1 · mscale_all_dims · ln f` times the rope's
    /// attention factor with YaRN's own magnitude undone: with YaRN, the tables' magnitude
    /// (`rope_attn_factor ·` [`RopeScaling::yarn_magnitude`]), else
    /// `rope_attn_factor · (1 + 0.1·ln f)`.
    pub fn score_scale(&self, scaling: RopeScaling, rope_attn_factor: f64) -> f64 {
        let (ln_f, attn_factor) = match scaling {
            RopeScaling::None => (0.0, rope_attn_factor),
            RopeScaling::Linear { factor } => (factor.ln(), rope_attn_factor * (1.0 + 0.1 * factor.ln())),
            RopeScaling::Yarn { factor, .. } => (factor.ln(), rope_attn_factor * scaling.yarn_magnitude()),
        };
        let mscale = attn_factor * (1.0 + 0.1 * self.mscale_all_dims * ln_f);
        mscale * mscale / ((self.qk_nope + self.qk_rope) as f64).sqrt()
    }

    /// Reads them (`key` prefixes the architecture). The head widths are the `_mla` keys where
    /// the file has them (files whose K/B and V/B are split, `attn_k_b`/`attn_v_b`: their
    /// `key_length`/`value_length` are the latent's), else `key_length`/`value_length` (older
    /// files with one `attn_kv_b`); without a V width, `default_width` (the hidden width over
    /// the heads, llama.cpp's default: MiniCPM3's files give none).
    fn read(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, default_width: usize) -> Result<Self, ModelError> {
        let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
        let kv_lora_rank = md_usize(md, &key("attention.kv_lora_rank"))?;
        let q_lora_rank = md_opt_usize(md, &key("attention.q_lora_rank"))?.unwrap_or(0);
        let qk_rope = md_usize(md, &key("rope.dimension_count"))?;
        let width = |mla: &'static str, plain: &'static str, default: Option<usize>| -> Result<(&'static str, usize), ModelError> {
            match (md_opt_usize(md, &key(mla))?, default) {
                (Some(w), _) => Ok((mla, w)),
                (None, Some(d)) => Ok((plain, md_opt_usize(md, &key(plain))?.unwrap_or(d))),
                (None, None) => Ok((plain, md_usize(md, &key(plain))?)),
            }
        };
        let (k_key, qk) = width("attention.key_length_mla", "attention.key_length", None)?;
        let (v_key, v_head) = width("attention.value_length_mla", "attention.value_length", Some(default_width))?;
        if kv_lora_rank == 0 {
            return Err(bad("attention.kv_lora_rank", "a latent of width 0".into()));
        }
        if qk_rope == 0 || qk_rope % 2 != 0 || qk_rope >= qk {
            return Err(bad(k_key, format!("{qk}-value heads, {qk_rope} of them rotated (rope.dimension_count)")));
        }
        if v_head == 0 {
            return Err(bad(v_key, "heads of width 0".into()));
        }
        let log_mul = md_opt_f64(md, &key("rope.scaling.yarn_log_multiplier"))?.unwrap_or(0.0);
        if !log_mul.is_finite() {
            return Err(bad("rope.scaling.yarn_log_multiplier", format!("{log_mul} is not a number")));
        }
        let mscale_all_dims = log_mul / 0.1;
        Ok(Self {
            q_lora_rank,
            kv_lora_rank,
            qk_nope: qk - qk_rope,
            qk_rope,
            v_head,
            mscale_all_dims,
            tables_log_multiplier: match (log_mul, md_str(md, "general.architecture")?) {
                (0.0, _) => 0.0,
                (_, "deepseek2") => 1.0,
                _ => mscale_all_dims,
            },
        })
    }
}

/// Llama 4's attention temperature (Ministral 3's, Mistral Large 3's): the query at position
/// `p` is multiplied by `1 + scale·ln(⌊(p + offset) / floor⌋ + 1)`; K and V are untouched, so
/// cached K/V are unaffected.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnTemperature {
    /// `attention.temperature_scale` (Llama 4's: 0.1).
    pub scale: f64,
    /// Positions per step: `rope.scaling.original_context_length` (Llama 4's: 8,192).
    pub floor: usize,
    /// Added to the position (Llama 4's: 1; llama.cpp's `f_attn_temp_offset`).
    pub offset: usize,
    /// Only the layers without rope scale their queries (Llama 4's); else every layer.
    pub no_rope_only: bool,
}

impl AttnTemperature {
    /// Ministral 3's and Mistral Large 3's: every layer's queries, steps of `floor` from 0.
    fn every_layer(scale: f64, floor: usize) -> Self {
        Self {
            scale,
            floor,
            offset: 0,
            no_rope_only: false,
        }
    }

    /// The factor for the query at `pos`.
    pub fn at(&self, pos: usize) -> f32 {
        (((((pos + self.offset) / self.floor) + 1) as f64).ln() * self.scale + 1.0) as f32
    }
}

/// A mixture-of-experts MLP's shape and routing (llama.cpp's `build_moe_ffn` with softmax
/// gating, as Qwen3 MoE and Mixtral use it; sigmoid with a selection bias, as GLM-4.5's).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeParams {
    /// `expert_count`: expert MLPs per layer.
    pub experts: usize,
    /// `expert_used_count`: how many of them each token runs (top-k of the router).
    pub experts_used: usize,
    /// Each expert's MLP width: `expert_feed_forward_length`, else (Mixtral)
    /// `feed_forward_length`, else (llama.cpp's fallback for Qwen3 MoE) that over `experts_used`.
    pub expert_ffn: usize,
    /// How router scores become probabilities (`expert_gating_func` where llama.cpp reads it:
    /// [`moe_gating`]).
    pub gating: MoeGating,
    /// Whether the chosen experts' weights are renormalized to sum to 1 (Qwen3 MoE and Mixtral:
    /// always; GLM-4.5: `expert_weights_norm`).
    pub normalize: bool,
    /// Multiplies the chosen weights (`expert_weights_scale`, where llama.cpp's graph reads it:
    /// GLM-4.5's, DeepSeek-V2's, Nemotron-H's; 1 when absent or 0, and elsewhere).
    pub weights_scale: f32,
    /// The shared expert's width (`expert_shared_count` × `expert_ffn`; 0: none).
    pub shared_ffn: usize,
    /// The first this-many layers have a dense MLP (`leading_dense_block_count`).
    pub dense_leading: usize,
    /// After those, every this-many-th layer has experts, the others a dense MLP (ERNIE 4.5's
    /// `interleave_moe_layer_step`; 1 elsewhere): layer `i` where `i + layer_offset` is a
    /// multiple of it ([`Self::routes`]).
    pub layer_step: usize,
    /// 1 (llama.cpp's `(il + 1) % step == 0`), but `step − 1` for nomic-embed-text-v2-moe's
    /// `moe_every_n_layers` (llama.cpp's `il % n == 1`: the odd layers where it is 2).
    pub layer_offset: usize,
    /// Jamba: a layer has experts where the file has its router (`ffn_gate_inp`), as llama.cpp
    /// reads its files (the checkpoint's `expert_layer_offset` and `_period` are not in them);
    /// `dense_leading` and `layer_step` then say nothing.
    pub where_routed: bool,
    /// gpt-oss: the router and every expert have biases (required).
    pub biases: bool,
    /// Qwen3.5 and Qwen2 MoE: the shared expert's output is multiplied by the sigmoid of one
    /// score per token (`ffn_gate_inp_shexp`, required).
    pub shared_gate: bool,
    /// What an expert (and the shared expert) computes between its projections: gate and up
    /// ([`MlpKind::Gated`], the layer's activation), or up alone: Nemotron-H's squared ReLU
    /// ([`MlpKind::UpReluSquared`]), nomic-embed-text-v2-moe's GELU ([`MlpKind::UpGelu`]).
    pub expert_mlp: MlpKind,
    /// Llama 4: the experts are chosen by raw score and each one's weight multiplies its input,
    /// not its output (llama.cpp's `weight_before_ffn`); their outputs are summed as they are.
    pub weigh_inputs: bool,
    /// Nemotron 3 Super: the experts work in a narrower space (`moe_latent_size`): the token
    /// goes down to it (`ffn_latent_down`) before them and their weighted sum back up
    /// (`ffn_latent_up`) after; the router and the shared expert see the token itself.
    pub latent: Option<usize>,
    /// `expert_group_count` groups of experts, of which a token chooses among the best
    /// `expert_group_used_count` only (DeepSeek-V3's, Ling 2.0's); none for a file without
    /// groups or with one.
    pub groups: Option<ExpertGroups>,
}

impl MoeParams {
    /// Whether layer `i`'s MLP is experts (for files whose layers say so by their router,
    /// [`Self::where_routed`], the file decides): past the leading dense layers, every
    /// `layer_step`-th from `layer_step − layer_offset` on.
    pub fn routes(&self, i: usize) -> bool {
        i >= self.dense_leading && (i + self.layer_offset).is_multiple_of(self.layer_step)
    }

    /// Whether the experts have no gate (up, an activation, down).
    pub fn ungated(&self) -> bool {
        self.expert_mlp != MlpKind::Gated
    }
}

/// Experts in `count` equal groups, a token choosing among the best `used` of them (llama.cpp's
/// `n_expert_groups`, `n_group_used`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertGroups {
    pub count: usize,
    pub used: usize,
}

/// A router's gating function (llama.cpp's `llama_expert_gating_func_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeGating {
    /// Softmax over the experts (1).
    Softmax,
    /// Each expert's sigmoid (2).
    Sigmoid,
    /// The raw scores choose; the weights are a softmax over the chosen experts' scores
    /// (3: gpt-oss's).
    SoftmaxWeight,
}


/// Gemma's local layers.
#[derive(Debug, Clone, PartialEq)]
pub struct SlidingWindow {
    /// A local layer's query at position `p` attends to positions `p - window + 1 ..= p`
    /// (llama.cpp's `LLAMA_SWA_TYPE_STANDARD`), or where `chunked` to its chunk of `window`.
    pub window: usize,
    /// Llama 4's: chunks, not a sliding window ([`Window::Chunked`]).
    pub chunked: bool,
    /// One flag per layer: `true` for a local (sliding-window) layer.
    pub local: Vec<bool>,
    /// The rope base of the local layers.
    pub rope_base: f64,
    /// How the local layers' rope differs from the global layers' beyond its base.
    pub rope: LocalRope,
}

/// The local layers' rope beside their base (llama.cpp's `rope_freq_scale_train_swa` and the
/// factors each family's graph passes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalRope {
    /// The file's scaling, as the global layers (Gemma 2).
    Scaled,
    /// No scaling; the file's `rope.scaling.attn_factor` still (Gemma 3).
    Unscaled,
    /// No scaling and no attention factor (OLMo 3: llama.cpp passes 1 for both).
    Plain,
}

/// What a family assumes where its GGUFs leave the sliding window's keys out (as llama.cpp
/// does).
struct SlidingDefaults {
    /// `attention.sliding_window`; `None`: the key is required.
    window: Option<usize>,
    /// `attention.sliding_window_pattern`.
    period: usize,
    /// In each period the first layer is global (llama.cpp's `dense_first`: SmallThinker's),
    /// else the last.
    dense_first: bool,
    /// The local layers' rope base: `rope.freq_base_swa` replaces it where `swa_base_key`.
    rope_base: f64,
    /// Whether the family's graph reads `rope.freq_base_swa` (Gemma's; OLMo 3's and EXAONE
    /// 4.0's rotate local layers on the global base whatever the key says).
    swa_base_key: bool,
    rope: LocalRope,
}

/// Gemma 3's published values: five local layers then a global one, local rope base 10 000.
const GEMMA3_SLIDING: SlidingDefaults = SlidingDefaults {
    window: None,
    period: 6,
    dense_first: false,
    rope_base: 10_000.0,
    swa_base_key: true,
    rope: LocalRope::Unscaled,
};

/// Gemma 4's, as llama.cpp's: the file's window and pattern (required: llama.cpp reads the
/// pattern as an array), local layers on `rope.freq_base_swa` (10 000 when absent), unscaled.
const GEMMA4_SLIDING: SlidingDefaults = SlidingDefaults {
    window: None,
    period: 6,
    dense_first: false,
    rope_base: 10_000.0,
    swa_base_key: true,
    rope: LocalRope::Unscaled,
};

/// Gemma 3n's, as llama.cpp's: the file's window (required), its pattern (an array in the
/// published files) else four local layers then a global one, local layers on
/// `rope.freq_base_swa` (10 000 when absent), unscaled.
const GEMMA3N_SLIDING: SlidingDefaults = SlidingDefaults {
    period: 5,
    ..GEMMA4_SLIDING
};

/// Gemma 2's defaults, as llama.cpp's: a window of 4,096, even layers local, the global rope
/// base (`rope_base`) and scaling.
fn gemma2_sliding(rope_base: f64) -> SlidingDefaults {
    SlidingDefaults {
        window: Some(4096),
        period: 2,
        dense_first: false,
        rope_base,
        swa_base_key: true,
        rope: LocalRope::Scaled,
    }
}

/// OLMo 3's (an `olmo2` file with `attention.sliding_window`), as llama.cpp's: every fourth
/// layer global unless the file's pattern says, local layers on the global base (llama.cpp's
/// olmo2 graph does not read `rope.freq_base_swa`), unscaled.
fn olmo3_sliding(rope_base: f64) -> SlidingDefaults {
    SlidingDefaults {
        window: None,
        period: 4,
        dense_first: false,
        rope_base,
        swa_base_key: false,
        rope: LocalRope::Plain,
    }
}

/// EXAONE 4.0 32B's, as llama.cpp's: a window of 4,096, every fourth layer global, local layers
/// rotated as the global ones (its graph uses the global base and scaling for them).
fn exaone4_sliding(rope_base: f64) -> SlidingDefaults {
    SlidingDefaults {
        window: Some(4096),
        period: 4,
        dense_first: false,
        rope_base,
        swa_base_key: false,
        rope: LocalRope::Scaled,
    }
}

/// Command R7B's and Command A's (`cohere2`), as llama.cpp's: the file's window (required),
/// three local layers then a global one, the local layers rotated on the global base (llama.cpp
/// reads `rope.freq_base_swa` but its graph rotates on the global base).
fn cohere2_sliding(rope_base: f64) -> SlidingDefaults {
    SlidingDefaults {
        window: None,
        period: 4,
        dense_first: false,
        rope_base,
        swa_base_key: false,
        rope: LocalRope::Scaled,
    }
}

/// gpt-oss's, as llama.cpp's: the file's window (required), even layers local (a period of 2),
/// rotated on the global base and scaling unless the file gives them a base of their own.
fn gpt_oss_sliding(rope_base: f64) -> SlidingDefaults {
    SlidingDefaults {
        window: None,
        period: 2,
        dense_first: false,
        rope_base,
        swa_base_key: true,
        rope: LocalRope::Scaled,
    }
}

/// The layers the forward runs: `block_count` less the multi-token-prediction blocks at its end
/// (`nextn_predict_layers`: GLM-4.5's, GLM-OCR's), which hearth, as llama.cpp without its
/// speculative decoding, keeps in the file and never loads (llama.cpp's `n_layer()`). A file all
/// of whose blocks are such is refused.
fn trunk_layers(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String) -> Result<(usize, usize), ModelError> {
    let blocks = md_usize(md, &key("block_count"))?;
    let mtp = md_opt_usize(md, &key("nextn_predict_layers"))?.unwrap_or(0);
    if mtp >= blocks {
        return Err(ModelError::BadMetadata {
            key: key("nextn_predict_layers"),
            reason: format!("{mtp} multi-token-prediction layers of {blocks} blocks leave none to run"),
        });
    }
    Ok((blocks - mtp, mtp))
}

/// GLM-4.7-Flash's vocabulary (a `deepseek2` file): llama.cpp routes its experts by sigmoid when
/// the file does not say.
const GLM47_FLASH_VOCAB: usize = 154_880;

/// EXAONE 4.0 32B's layer count: llama.cpp gives local layers to such files only.
const EXAONE4_32B_LAYERS: usize = 64;

/// Gemma 2's soft caps where its GGUFs leave them out (llama.cpp's defaults; the final one
/// Gemma 4's too).
const GEMMA2_ATTN_SOFTCAP: f64 = 50.0;
const GEMMA2_FINAL_SOFTCAP: f64 = 30.0;

impl HParams {
    /// The row a reranker's head scores: the rows' mean where the file says so (ModernBERT's
    /// `classifier.pooling_type` mean), else an encoder's first (its `[CLS]` or `<s>`), a causal
    /// model's last, as llama.cpp's rank pooling picks it.
    pub fn rank_pooling(&self) -> super::pooling::Pooling {
        use super::pooling::Pooling;
        match (self.rank.is_some_and(|r| r.mean), self.encoder) {
            (true, _) => Pooling::Mean,
            (false, true) => Pooling::Cls,
            (false, false) => Pooling::Last,
        }
    }

    /// ALiBi's slope of each query head, as ggml's softmax computes them from the maximum bias
    /// `b` (in f32): with `n` the largest power of two not above the head count, head `h < n`
    /// takes `(2^(−b/n))^(h+1)`, the others `(2^(−b/2/n))^(2(h−n)+1)`. `None` without ALiBi.
    pub fn alibi_slopes(&self) -> Option<Vec<f32>> {
        let max_bias = self.alibi_max_bias?;
        let n = 1usize << self.heads.max(1).ilog2();
        let m0 = 2f32.powf(-max_bias / n as f32);
        let m1 = 2f32.powf(-(max_bias / 2.0) / n as f32);
        Some((0..self.heads).map(|h| if h < n { m0.powf((h + 1) as f32) } else { m1.powf((2 * (h - n) + 1) as f32) }).collect())
    }

    /// The attention window of `layer`: `Some` for a local layer, `None` for a global one.
    pub fn window(&self, layer: usize) -> Option<Window> {
        let s = self.sliding.as_ref()?;
        let w = match (s.chunked, self.encoder) {
            (true, _) => Window::Chunked(s.window),
            // EmbeddingGemma's local layers see half the window on either side.
            (false, true) => Window::Symmetric(s.window),
            (false, false) => Window::Sliding(s.window),
        };
        s.local.get(layer).copied().unwrap_or(false).then_some(w)
    }

    /// The K/V geometry a store must provide: the heads of every layer that keeps K/V (with
    /// latent attention, K alone: V is the latent K holds).
    pub fn kv_shape(&self) -> crate::ops::KvShape {
        // An encoder stores no K/V: one narrow layer, so that the blocks the engine still
        // reserves for each input's tokens take next to no memory.
        if self.encoder {
            return crate::ops::KvShape::per_layer(vec![crate::ops::LayerKv {
                kv_heads: 1,
                head_dim: self.head_dim,
            }]);
        }
        // Nanbeige's passes each have the stack's store layers.
        let shape = crate::ops::KvShape::per_layer(
            (0..self.kv_layers * self.loops)
                .map(|s| s % self.kv_layers)
                .map(|s| {
                    // Its heads are those of the layer that writes it.
                    let a = self.attn_shape(self.store_writer(s).unwrap_or(s));
                    crate::ops::LayerKv {
                        kv_heads: a.kv_heads,
                        head_dim: a.head_dim,
                    }
                })
                .collect(),
        );
        match self.mla {
            Some(_) => shape.with_v_from_k(),
            None => shape,
        }
    }

    /// `layer`'s attention heads: the global ones on Gemma 4's global layers, the layer's own
    /// in Deci's and OpenELM's files, else the model's.
    pub fn attn_shape(&self, layer: usize) -> AttnShape {
        match (&self.global_attn, self.window(layer)) {
            (Some(g), None) => *g,
            _ => AttnShape {
                heads: self.layer_heads.get(layer).copied().filter(|&h| h > 0).unwrap_or(self.heads),
                kv_heads: self.layer_kv_heads.get(layer).copied().filter(|&k| k > 0).unwrap_or(self.kv_heads),
                head_dim: self.head_dim,
                rope_dims: self.rope_dims,
            },
        }
    }

    /// The K/V store layer `layer` writes and reads: itself, or for a layer past `kv_layers`
    /// the last layer before them of its kind (local or global), as llama.cpp's Gemma 4
    /// `layer_reuse_cb`.
    pub fn kv_layer(&self, layer: usize) -> usize {
        // Qwen3.5, LFM2, the Mamba-2 hybrids, Deci: the attention layers' store layers, in order.
        if self.recurrent_flags().is_some() || !self.layer_kv_heads.is_empty() {
            return (0..layer).filter(|&l| self.attends(l)).count();
        }
        if layer < self.kv_layers {
            return layer;
        }
        let local = self.window(layer).is_some();
        (0..self.kv_layers)
            .rev()
            .find(|&l| self.window(l).is_some() == local)
            .unwrap_or(self.kv_layers - 1)
    }

    /// Whether attending `layer` writes the K/V of its store layer ([`Self::kv_layer`]) rather
    /// than reading an earlier layer's: the first attending layer of each store layer writes
    /// it (every attending layer but Gemma 4's E models' last ones).
    pub fn writes_kv(&self, layer: usize) -> bool {
        self.store_writer(self.kv_layer(layer)) == Some(layer)
    }

    /// The layer that writes store layer `store`: the first attending layer whose store layer
    /// it is.
    fn store_writer(&self, store: usize) -> Option<usize> {
        (0..self.layers).find(|&l| self.attends(l) && self.kv_layer(l) == store)
    }

    /// Whether `layer` has attention that keeps K/V (none in recurrent layers, but
    /// Falcon-H1's, in Nemotron-H's and Deci's MLP layers, nor in Deci's linear ones).
    pub fn attends(&self, layer: usize) -> bool {
        (self.ssm_beside_attention || !self.is_recurrent(layer)) && !self.is_mlp_only(layer) && !self.is_linear_attn(layer)
    }

    /// Whether `layer`'s attention is its output projection alone (Deci's "linear attention").
    pub fn is_linear_attn(&self, layer: usize) -> bool {
        self.linear_attn.get(layer).copied().unwrap_or(false)
    }

    /// Whether `layer` is an MLP alone (Nemotron-H's).
    pub fn is_mlp_only(&self, layer: usize) -> bool {
        self.mlp_only.get(layer).copied().unwrap_or(false)
    }

    /// Whether `layer` has an MLP: all but those whose width is 0 (Nemotron-H's mixer layers,
    /// Deci's layers without one).
    pub fn has_mlp(&self, layer: usize) -> bool {
        self.ffn_per_layer.get(layer).is_none_or(|&f| f > 0)
    }

    /// Whether `layer` is recurrent (Qwen3.5's gated delta nets, LFM2's short convolutions)
    /// rather than attention.
    pub fn is_recurrent(&self, layer: usize) -> bool {
        self.recurrent_flags().is_some_and(|f| f.get(layer).copied().unwrap_or(false))
    }

    /// One flag per layer, `true` where it is recurrent; `None` for a model without such layers.
    pub fn recurrent_flags(&self) -> Option<&[bool]> {
        match (&self.recurrent, &self.short_conv, &self.mamba2, &self.mamba) {
            (Some(r), _, _, _) => Some(&r.layers),
            (None, Some(c), _, _) => Some(&c.layers),
            (None, None, Some(m), _) => Some(&m.layers),
            (None, None, None, Some(m)) => Some(&m.layers),
            (None, None, None, None) => None,
        }
    }

    /// The floats each recurrent layer carries per sequence, in layer order (two buffers each:
    /// see `RecurrentState`); `None` for a model without recurrent layers.
    pub fn state_shape(&self) -> Option<Vec<[usize; 2]>> {
        let flags = self.recurrent_flags()?;
        let per_layer = match (&self.recurrent, &self.short_conv, &self.mamba2, &self.mamba) {
            (Some(r), _, _, _) => r.state_floats(),
            (None, Some(c), _, _) => [(c.l_cache - 1) * self.hidden, 0],
            (None, None, Some(m), _) => m.state_floats(),
            (None, None, None, Some(m)) => m.state_floats(),
            (None, None, None, None) => return None,
        };
        Some(flags.iter().filter(|&&r| r).map(|_| per_layer).collect())
    }

    /// `layer`'s dense MLP width.
    pub fn ffn_of(&self, layer: usize) -> usize {
        self.ffn_per_layer.get(layer).copied().unwrap_or(self.ffn)
    }

    /// Whether `layer` applies rope to its queries and keys.
    pub fn rotates(&self, layer: usize) -> bool {
        !self.no_rope.get(layer).copied().unwrap_or(false)
    }
}

/// Refact's and BLOOM's ALiBi maximum bias, as llama.cpp sets it for them (not a key of their
/// files).
const ALIBI_MAX_BIAS: f32 = 8.0;

/// SmolLM3: every this-many-th layer skips rope (llama.cpp's `n_no_rope_layer_step`).
const SMOLLM3_NO_ROPE_STEP: usize = 4;

/// Falcon-H1's architecture name: Llama's family with a Mamba-2 mixer beside every layer's
/// attention ([`HParams::ssm_beside_attention`]).
const FALCON_H1: &str = "falcon-h1";

/// Deci's layers of their own shapes ([`LayerHeads`]).
const DECI: &str = "deci";

/// OpenELM's layers, each with its own query heads, K/V heads and MLP width ([`LayerHeads`]).
const OPENELM: &str = "openelm";

/// AFMoE's architecture name (Arcee's Trinity models).
const AFMOE: &str = "afmoe";

/// AFMoE: every this-many-th layer is global and skips rope (llama.cpp's default pattern and
/// `n_no_rope_layer_step`).
const AFMOE_PERIOD: usize = 4;

/// Gemma 3n's architecture name (E2B, E4B): Gemma 4's E models' layer (per-layer inputs,
/// K/V shared by the last layers) around AltUp's streams and Laurel's low-rank residual
/// ([`AltUpParams`]).
const GEMMA3N: &str = "gemma3n";

/// Gemma 3n: the layers from this one on read an earlier layer's K/V where the file does not
/// say (`attention.shared_kv_layers`; llama.cpp's `n_layer_kv_from_start`, fixed there).
const GEMMA3N_KV_LAYERS: usize = 20;

/// Gemma 3n: the per-layer inputs' width where the file does not say
/// (`embedding_length_per_layer_input`; llama.cpp's `n_embd_altup`, fixed there).
const GEMMA3N_PER_LAYER_INPUT: usize = 256;

/// Gemma 3n: the layers with sparse MLP gates where the file does not say, and their
/// multiplier (the normal distribution's 95th percentile, as llama.cpp's `n_layer_sparsity`
/// and `f_sparsity_std_mul`).
const GEMMA3N_SPARSE_LAYERS: usize = 10;
const GEMMA3N_SPARSITY: f32 = 1.644_853_4;

/// Mellum 2's architecture name (JetBrains' code models): Qwen3 MoE's layer with optional
/// sliding-window layers.
const MELLUM: &str = "mellum";

/// BitNet b1.58's architecture name (1bitLLM's bitnet_b1_58 models, Microsoft's 2B-4T): Llama's
/// layer with NeoX rope and RMSNorms inside its blocks (`HParams::sub_norms`).
const BITNET: &str = "bitnet";

/// Whether a BitNet file's `hidden_activation` says `relu2` (squared ReLU, as the 2B-4T's
/// checkpoint); `silu` or none: SiLU, as llama.cpp's graph runs every BitNet file; another
/// refused.
fn bitnet_relu_squared(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String) -> Result<bool, ModelError> {
    match md_opt_str(md, &key("hidden_activation"))? {
        None | Some("silu") => Ok(false),
        Some("relu2") => Ok(true),
        Some(other) => Err(ModelError::BadMetadata {
            key: key("hidden_activation"),
            reason: format!("\"{other}\": BitNet's MLP runs silu or relu2"),
        }),
    }
}

/// Nanbeige's architecture name (Nanbeige 4.2): Llama's layer, the stack looped
/// (`HParams::loops`).
const NANBEIGE: &str = "nanbeige";

/// Nanbeige's `num_loops` (1 where absent): passes of the layer stack.
fn nanbeige_loops(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String) -> Result<usize, ModelError> {
    match md_opt_usize(md, &key("num_loops"))?.unwrap_or(1) {
        0 => Err(ModelError::BadMetadata {
            key: key("num_loops"),
            reason: "0 passes of the layers".into(),
        }),
        n => Ok(n),
    }
}

/// BERT's architecture name (and its MiniLM, BGE, E5, mxbai-embed and Arctic Embed kin):
/// an encoder with learned positions (`HParams::encoder`).
pub(crate) const BERT: &str = "bert";

/// nomic-embed-text's architecture name (v1, v1.5): BERT's encoder layer with NeoX rope, a
/// fused QKV and a gated SiLU MLP, without biases (`HParams::encoder`).
pub(crate) const NOMIC_BERT: &str = "nomic-bert";

/// nomic-embed-text-v2-moe's architecture name: BERT's encoder layer with NeoX rope, a fused,
/// biased QKV, biased projections and an up-GELU-down MLP, every other layer's MLP experts
/// (`MoeParams::layer_offset`); XLM-RoBERTa's Unigram vocabulary.
pub(crate) const NOMIC_BERT_MOE: &str = "nomic-bert-moe";

/// jina-embeddings-v3's architecture name: XLM-RoBERTa's encoder with NeoX rope in place of
/// learned positions (its task LoRA adapters are separate files, not read).
pub(crate) const JINA_BERT_V3: &str = "jina-bert-v3";

/// jina-embeddings-v2's architecture name (its base, small and code models and the
/// jina-reranker-v1 cross-encoders): BERT's encoder layer with ALiBi (llama.cpp's fixed
/// maximum bias of 8) in place of positions, a GELU-gated MLP (the gate in `ffn_up`'s first
/// half or apart in `ffn_gate`; none where `ffn_up` is the MLP's width), and where the file
/// has them LayerNorms of all of Q and all of K and a second norm after the attention's.
pub(crate) const JINA_BERT_V2: &str = "jina-bert-v2";

/// The BERT-layered encoders hearth runs (`HParams::bert_layers`).
pub const ENCODER_ARCHS: [&str; 5] = [BERT, NOMIC_BERT, NOMIC_BERT_MOE, JINA_BERT_V3, JINA_BERT_V2];

/// EmbeddingGemma's architecture name: Gemma 3's layer as an encoder.
pub(crate) const GEMMA_EMBEDDING: &str = "gemma-embedding";

/// ModernBERT's architecture name: a pre-norm encoder of unbiased LayerNorms, NeoX rope, a
/// fused QKV and a gated MLP, its local layers over a symmetric window.
pub(crate) const MODERN_BERT: &str = "modern-bert";

/// The architectures whose attention is bidirectional (`HParams::encoder`): the BERT-layered
/// encoders, EmbeddingGemma and ModernBERT.
pub const BIDIRECTIONAL_ARCHS: [&str; 7] = [BERT, NOMIC_BERT, NOMIC_BERT_MOE, JINA_BERT_V3, JINA_BERT_V2, GEMMA_EMBEDDING, MODERN_BERT];

/// Jamba's architecture name: Mamba layers ([`MambaParams`]) among attention layers without
/// rope, experts where the file has a layer's router.
const JAMBA: &str = "jamba";

/// MiniCPM3's architecture name: DeepSeek-V2's latent attention over a dense MLP, MiniCPM's
/// multipliers.
const MINICPM3: &str = "minicpm3";

/// Llama 4's architecture name (its chunks, its rope-less layers' temperature, its
/// unweighted Q/K norms, its routing).
const LLAMA4: &str = "llama4";

/// Llama 4's local layers attend within chunks of this many positions, whatever the file says
/// (llama.cpp's `n_swa` for it).
const LLAMA4_CHUNK: usize = 8192;

/// Llama 4's chunked files: three chunked layers, then a global one without rope (llama.cpp's
/// default pattern and `n_no_rope_layer_step`).
const LLAMA4_PERIOD: usize = 4;

/// Llama 4's temperature on its layers without rope (llama.cpp's `f_attn_temp_scale`,
/// `n_attn_temp_floor_scale`, `f_attn_temp_offset`).
const LLAMA4_TEMPERATURE: AttnTemperature = AttnTemperature {
    scale: 0.1,
    floor: 8192,
    offset: 1,
    no_rope_only: true,
};

/// Llama 4 Maverick's expert count: llama.cpp leaves its Q and K unnormalized.
const LLAMA4_MAVERICK_EXPERTS: usize = 128;

/// SmallThinker's architecture name (its experts' ReLU gate, its router on the layer's input,
/// its windows).
const SMALLTHINKER: &str = "smallthinker";

/// SmallThinker's window, whatever its file's `attention.sliding_window` says (llama.cpp's).
const SMALLTHINKER_WINDOW: usize = 4096;

/// SmallThinker's windowed files: every this-many-th layer, from the first, is global and
/// skips rope (llama.cpp's default pattern and `n_no_rope_layer_step`).
const SMALLTHINKER_PERIOD: usize = 4;

/// ModernBERT's period of layers: one global, then two local.
const MODERN_BERT_PERIOD: usize = 3;

impl HParams {
    /// Reads the hyper-parameters; `vocab_size` comes from the embedding tensor
    /// when the metadata does not say.
    // long: one line per field of `HParams`, each read (or its reader called) where it is set.
    pub fn from_metadata(md: &HashMap<String, Value>, embedding_rows: Option<usize>) -> Result<Self, ModelError> {
        // The keys are under the file's architecture (`qwen3vl.*` for a Qwen3 family file).
        let a = md_str(md, "general.architecture")?;
        let family = Family::from_arch(a)?;
        let key = |k: &str| format!("{a}.{k}");
        let hidden = md_usize(md, &key("embedding_length"))?;
        let (layers, mtp_layers) = trunk_layers(md, &key)?;
        // Deci's and OpenELM's layers each have their own heads (and some of Deci's none).
        let own_heads = match a {
            DECI | OPENELM => Some(LayerHeads::read(md, &key, layers, a)?),
            _ => None,
        };
        let (heads, (kv_heads, by_kv)) = match &own_heads {
            Some(d) => (d.first_heads(), (d.first_kv_heads(), None)),
            None => {
                let heads = md_opt_per_layer_usize(md, &key("attention.head_count"))?.ok_or_else(|| ModelError::MissingMetadata {
                    key: key("attention.head_count"),
                })?;
                (heads, kv_heads_of(md, &key, (family, a), heads)?)
            }
        };
        let LayerKinds {
            ffn,
            ffn_per_layer,
            mlp_only,
            short_conv,
            mamba2,
            mamba,
        } = LayerKinds::read(md, &key, family, layers, by_kv, own_heads.as_ref())?;
        let linear_attn = own_heads.as_ref().map(LayerHeads::linear).unwrap_or_default();
        // Qwen (1)'s files give the MLP's width before its halving into gate and up.
        let ffn = if a == "qwen" { ffn / 2 } else { ffn };
        // DeepSeek-V2's heads attend over one latent K/V head.
        let mla = match family {
            Family::DeepSeek2 => Some(MlaParams::read(md, &key, hidden / heads.max(1))?),
            _ => None,
        };
        let (kv_heads, head_dim, rope_dims) = match &mla {
            Some(m) => (1, m.latent_width(), m.qk_rope),
            None => {
                let (head_dim, rope_dims) = head_dims(md, &key, hidden, heads)?;
                (kv_heads, head_dim, rope_dims)
            }
        };
        let vocab_size = match (md_opt_usize(md, &key("vocab_size"))?, embedding_rows) {
            (Some(v), _) | (None, Some(v)) => v,
            (None, None) => return Err(ModelError::MissingTensor { name: "token_embd.weight".into() }),
        };
        let context_length = md_opt_usize(md, &key("context_length"))?.unwrap_or(4096);
        let rope_original_context =
            md_opt_usize(md, &key("rope.scaling.original_context_length"))?.unwrap_or(context_length);
        let rope_scaling = rope_scaling(md, &key, rope_original_context, family, mla.as_ref())?;
        let moe = moe_params(md, &key, (family, a), [layers, vocab_size])?;
        let rope_base = rope_base(md, &key, a, head_dim)?;
        let norm = norm_kind(family, a);
        let rope_attn_factor = md_opt_f64(md, &key("rope.scaling.attn_factor"))?.unwrap_or(1.0);
        let sliding = family_sliding(md, &key, (family, a), layers, rope_base)?;
        // llama.cpp's `use_kq_norm`: every Llama 4 file but the 128-expert one (Maverick's).
        let qk_norm_unweighted = a == LLAMA4 && moe.as_ref().is_none_or(|m| m.experts != LLAMA4_MAVERICK_EXPERTS);
        // Llama 4's temperature goes with its chunks (llama.cpp sets both or neither).
        let attn_temperature = match a {
            LLAMA4 => sliding.as_ref().map(|_| LLAMA4_TEMPERATURE),
            _ => attn_temperature(md, &key, family, rope_original_context)?,
        };
        let [attn_softcap, final_softcap] = softcaps(md, &key, (family, a))?;
        let scales = Scales::read(md, &key, (family, a), [hidden, heads, head_dim, layers])?;
        let learned_positions = matches!(a, "gpt2" | "starcoder" | BERT);
        let alibi_max_bias = alibi_max_bias(md, &key, a, layers)?;
        // Positions learned or given by ALiBi: no layer rotates.
        // (Jamba's attention layers have no positions at all: its Mamba layers give order.)
        let rope_replaced = learned_positions || alibi_max_bias.is_some() || a == JAMBA;
        let no_rope = no_rope_layers(md, &key, (family, a), layers, sliding.as_ref(), rope_replaced)?;
        let global = AttnShape {
            heads,
            kv_heads,
            head_dim,
            rope_dims,
        };
        let recurrent = match family {
            Family::Qwen35 => Some(DeltaNetParams::read(md, &key, layers)?),
            _ => None,
        };
        let (local, global_attn, kv_layers, per_layer_input) = match (family, &sliding, &recurrent) {
            (Family::Gemma4, Some(s), _) => gemma4_attention(md, &key, global, &s.local, a == GEMMA3N)?,
            (_, _, Some(r)) => (global, None, layers - r.recurrent_layers(), 0),
            _ => {
                let flags = short_conv.as_ref().map(|c| &c.layers).or(mamba2.as_ref().map(|m| &m.layers)).or(mamba.as_ref().map(|m| &m.layers));
                let recurrent_only = flags.map_or(0, |f| f.iter().filter(|&&r| r).count()) * usize::from(a != FALCON_H1);
                let mixer_free = recurrent_only + mlp_only.iter().chain(&linear_attn).filter(|&&m| m).count();
                (global, None, layers - mixer_free, 0)
            }
        };
        Ok(Self {
            family,
            vocab_size,
            hidden,
            layers,
            heads,
            kv_heads: local.kv_heads,
            head_dim: local.head_dim,
            rope_dims: local.rope_dims,
            rope_style: rope_style(md, &key, (family, a))?,
            ffn,
            moe,
            mtp_layers,
            context_length,
            rope_original_context,
            rms_eps: norm_eps(md, &key, norm)?,
            norm,
            post_norms: post_norms(family, a),
            parallel_block: parallel_block(md, &key, (family, a))?,
            parallel_mlp_norm: a == "gptneox",
            ffn_norm_optional: a == "stablelm",
            qk_norm_whole: family == Family::Olmo2 || matches!(a, "olmoe" | "minimax-m2"),
            qk_norm_after_rope: matches!(a, "hunyuan-dense" | "hunyuan-moe" | "maincoder"),
            qk_norm_unweighted,
            relu_gate: a == SMALLTHINKER,
            relu_squared_gate: a == BITNET && bitnet_relu_squared(md, &key)?,
            sub_norms: a == BITNET,
            route_on_layer_input: a == SMALLTHINKER,
            mlp: mlp_kind(family, a),
            out_biases: matches!(a, "starcoder2" | "phi2" | "gptneox" | "gpt2" | "starcoder" | "bloom" | "codeshell" | "jais" | "phimoe" | "jais2" | BERT | NOMIC_BERT_MOE | JINA_BERT_V3 | JINA_BERT_V2),
            learned_positions,
            alibi_max_bias,
            clamp_kqv: clamp_kqv(md, &key, a)?,
            ffn_norm_stem: match (family, a) {
                // GLM-4.5's, gpt-oss's, Seed-OSS's and Qwen3.5's under Hugging Face's name for it
                // (not those of the files run on GLM-4.5's layer under other names).
                _ if glm45_kin((family, a)) => "ffn_norm",
                (Family::Glm4Moe | Family::GptOss | Family::SeedOss | Family::Qwen35, _) => "post_attention_norm",
                (_, "dbrx") => "attn_output_norm",
                _ => "ffn_norm",
            },
            embedding_norm: matches!(a, "bloom" | BERT | NOMIC_BERT | NOMIC_BERT_MOE | JINA_BERT_V3 | JINA_BERT_V2 | MODERN_BERT),
            attn_norm_optional: a == MODERN_BERT,
            gate_act: match a {
                MODERN_BERT => Some(modern_bert_act(md, &key)?),
                _ => None,
            },
            gate_optional: a == JINA_BERT_V2,
            encoder: BIDIRECTIONAL_ARCHS.contains(&a),
            bert_layers: ENCODER_ARCHS.contains(&a),
            dense_out: match a {
                GEMMA_EMBEDDING => md_opt_usize(md, &format!("{a}.dense_2_feat_out"))?,
                _ => None,
            },
            output_bias: matches!(a, "phi2" | "phimoe"),
            rope_base,
            rope_scaling,
            rope_attn_factor,
            attention_scale: match &mla {
                Some(m) => m.score_scale(rope_scaling, rope_attn_factor),
                None => scales.attention,
            },
            embedding_scale: scales.embedding,
            sliding,
            attn_temperature,
            no_rope,
            residual_scale: scales.residual,
            logit_scale: scales.logit,
            logit_multiplier: if family == Family::Cohere { granite_scale(md, &key, "logit_scale")? } else { None },
            attn_softcap,
            final_softcap,
            global_attn,
            kv_layers,
            per_layer_input,
            ffn_per_layer,
            xielu: xielu_params(md, a, layers)?,
            mla,
            recurrent,
            short_conv,
            mamba2,
            mamba,
            ssm_beside_attention: a == FALCON_H1,
            altup: match a {
                GEMMA3N => Some(AltUpParams::read(md, &key, layers)?),
                _ => None,
            },
            mlp_only,
            layer_heads: own_heads.as_ref().map(|d| d.query_heads.clone()).unwrap_or_default(),
            layer_kv_heads: own_heads.map(|d| d.kv_heads).unwrap_or_default(),
            linear_attn,
            attn_gate: a == AFMOE,
            loops: match a {
                NANBEIGE => nanbeige_loops(md, &key)?,
                _ => 1,
            },
            loop_norm: a == NANBEIGE && !md_opt_bool(md, &key("skip_loop_final_norm"))?.unwrap_or(false),
            pooling: super::pooling::Pooling::read(md, a)?,
            rank: super::pooling::rank_head(md, a)?,
        })
    }
}

/// The K/V heads (one count for every attending layer) and, for LFM2, Granite 4.0's hybrids,
/// Nemotron-H and Jamba, which layers are recurrent (their `attention.head_count_kv` entries
/// are 0); Gemma 4's counts differ by layer kind and are read with its sliding pattern
/// (`gemma4_attention`: here the query heads').
fn kv_heads_of(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    (family, arch): (Family, &str),
    heads: usize,
) -> Result<(usize, Option<Vec<bool>>), ModelError> {
    let (kv_heads, recurrent) = match family {
        _ if arch == JAMBA || matches!(family, Family::Lfm2 | Family::GraniteHybrid | Family::NemotronH) => {
            let (flags, kv) = recurrent_by_kv(md, key)?;
            (Some(kv), Some(flags))
        }
        Family::Gemma4 => (None, None),
        _ => (md_opt_per_layer_usize(md, &key("attention.head_count_kv"))?, None),
    };
    let kv_heads = kv_heads.unwrap_or(heads);
    if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(ModelError::BadMetadata {
            key: key("attention.head_count_kv"),
            reason: format!("{heads} heads cannot share {kv_heads} K/V heads"),
        });
    }
    Ok((kv_heads, recurrent))
}

/// `attention.head_count_kv`, one per layer, 0 for a recurrent layer (llama.cpp's
/// `is_recr_impl` for LFM2 and Granite's hybrids): one flag per layer, `true` where it is
/// recurrent, and the attention layers' count (every one's the same).
fn recurrent_by_kv(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String) -> Result<(Vec<bool>, usize), ModelError> {
    let bad = |reason: String| ModelError::BadMetadata {
        key: key("attention.head_count_kv"),
        reason,
    };
    let layers = md_usize(md, &key("block_count"))?;
    let kv = md_opt_usize_per_layer(md, &key("attention.head_count_kv"), layers)?
        .ok_or_else(|| ModelError::MissingMetadata { key: key("attention.head_count_kv") })?;
    let mut attending = kv.iter().copied().filter(|&k| k > 0);
    let kv_heads = attending.next().ok_or_else(|| bad("no layer attends".into()))?;
    if let Some(other) = attending.find(|&k| k != kv_heads) {
        return Err(bad(format!("attention layers with {kv_heads} and {other} K/V heads")));
    }
    Ok((kv.iter().map(|&k| k == 0).collect(), kv_heads))
}

/// Files whose layers each have their own heads, as llama.cpp's converters write them
/// (`attention.head_count` and `attention.head_count_kv`, one each per layer, or one for every
/// layer): Deci's (`deci`: Llama-3.1-Nemotron 51B, -Super 49B and -Ultra 253B, DeciLM-7B, from
/// the checkpoint's `block_configs`) and OpenELM's (`openelm`, from its `num_query_heads` and
/// `num_kv_heads`, both growing with depth). A layer with query and K/V heads attends (with
/// its own of both); in Deci's files one with query heads and no K/V heads is "linear
/// attention" ([`HParams::linear_attn`]), and one with neither has no attention
/// ([`HParams::mlp_only`]); every OpenELM layer attends.
struct LayerHeads {
    /// Each layer's query heads: 0 in an attention-free layer.
    query_heads: Vec<usize>,
    /// Each layer's K/V heads: 0 where it keeps no K/V.
    kv_heads: Vec<usize>,
}

impl LayerHeads {
    fn read(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, layers: usize, arch: &str) -> Result<Self, ModelError> {
        let (q_key, kv_key) = (key("attention.head_count"), key("attention.head_count_kv"));
        let query_heads = md_opt_usize_per_layer(md, &q_key, layers)?.ok_or_else(|| ModelError::MissingMetadata { key: q_key.clone() })?;
        let kv_heads = md_opt_usize_per_layer(md, &kv_key, layers)?.unwrap_or_else(|| query_heads.clone());
        let bad = |key: &str, reason: String| ModelError::BadMetadata { key: key.into(), reason };
        for (l, (&q, &kv)) in query_heads.iter().zip(&kv_heads).enumerate() {
            if kv > 0 && (q == 0 || !q.is_multiple_of(kv)) {
                return Err(bad(&kv_key, format!("layer {l}: {q} query heads cannot share {kv} K/V heads")));
            }
            if arch == OPENELM && kv == 0 {
                return Err(bad(&kv_key, format!("layer {l} has no attention: every OpenELM layer attends")));
            }
        }
        if kv_heads.iter().all(|&kv| kv == 0) {
            return Err(bad(&kv_key, "no layer keeps K/V".into()));
        }
        // Without a head width, the hidden width over the heads, which only one count gives.
        let mut with_heads = query_heads.iter().copied().filter(|&h| h > 0);
        let first = with_heads.next().unwrap_or(1);
        if with_heads.any(|h| h != first) && md_opt_usize(md, &key("attention.key_length"))?.is_none() {
            return Err(ModelError::MissingMetadata { key: key("attention.key_length") });
        }
        Ok(Self { query_heads, kv_heads })
    }

    /// The query heads of the first layer that has any (the model's `heads`).
    fn first_heads(&self) -> usize {
        self.query_heads.iter().copied().find(|&h| h > 0).unwrap_or(1)
    }

    /// The first attending layer's K/V heads (the model's `kv_heads`).
    fn first_kv_heads(&self) -> usize {
        self.kv_heads.iter().copied().find(|&kv| kv > 0).unwrap_or(1)
    }

    /// One flag per layer: `true` where its attention is "linear" (query heads, no K/V heads).
    fn linear(&self) -> Vec<bool> {
        self.query_heads.iter().zip(&self.kv_heads).map(|(&q, &kv)| q > 0 && kv == 0).collect()
    }
}

impl ShortConvParams {
    /// LFM2's short convolution (`shortconv.l_cache`) in the layers `layers`. Its
    /// sliding-window files are refused.
    fn read(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, layers: Vec<bool>) -> Result<Self, ModelError> {
        let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
        let l_cache = md_usize(md, &key("shortconv.l_cache"))?;
        if l_cache < 2 {
            return Err(bad("shortconv.l_cache", format!("{l_cache} taps")));
        }
        if md_opt_usize(md, &key("attention.sliding_window"))?.unwrap_or(0) > 0 {
            return Err(bad("attention.sliding_window", "LFM2 files with sliding-window layers are not supported".into()));
        }
        Ok(Self { l_cache, layers })
    }
}

/// Llama 4's attention temperature, where the file asks for it: Ministral 3's, stepping by
/// `rope.scaling.original_context_length`; Mistral Large 3's (a `deepseek2` file), by
/// `attention.temperature_length`.
fn attn_temperature(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    family: Family,
    rope_original_context: usize,
) -> Result<Option<AttnTemperature>, ModelError> {
    let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
    Ok(match (family, md_opt_f64(md, &key("attention.temperature_scale"))?) {
        (Family::Mistral3, Some(scale)) if scale != 0.0 => {
            if rope_original_context == 0 {
                return Err(bad(
                    "rope.scaling.original_context_length",
                    "0, but attention temperature steps by it".into(),
                ));
            }
            Some(AttnTemperature::every_layer(scale, rope_original_context))
        }
        // Mistral Large 3's (a `deepseek2` file): steps of `attention.temperature_length`.
        (Family::DeepSeek2, Some(scale)) if scale != 0.0 => match md_opt_usize(md, &key("attention.temperature_length"))? {
            Some(floor) if floor > 0 => Some(AttnTemperature::every_layer(scale, floor)),
            _ => {
                return Err(bad(
                    "attention.temperature_length",
                    "absent or 0, but attention temperature steps by it".into(),
                ))
            }
        },
        _ => None,
    })
}

/// The head width (`attention.key_length`, else `hidden / heads`; `attention.value_length`
/// must match) and how many of its dimensions rope rotates (`rope.dimension_count`, else all).
fn head_dims(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    hidden: usize,
    heads: usize,
) -> Result<(usize, usize), ModelError> {
    let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
    let head_dim = match md_opt_usize(md, &key("attention.key_length"))? {
        Some(d) => d,
        None if hidden.is_multiple_of(heads) => hidden / heads,
        None => {
            return Err(bad(
                "attention.head_count",
                format!("{hidden} is not divisible by {heads} heads"),
            ))
        }
    };
    if let Some(v) = md_opt_usize(md, &key("attention.value_length"))? {
        if v != head_dim {
            return Err(bad(
                "attention.value_length",
                format!("{v} differs from key_length {head_dim}; not supported"),
            ));
        }
    }
    if head_dim % 2 != 0 {
        return Err(bad("attention.key_length", format!("head dimension {head_dim} is odd")));
    }
    let rope_dims = md_opt_usize(md, &key("rope.dimension_count"))?.unwrap_or(head_dim);
    if rope_dims == 0 || rope_dims % 2 != 0 || rope_dims > head_dim {
        return Err(bad(
            "rope.dimension_count",
            format!("{rope_dims} rotated dimensions of a {head_dim}-dimension head"),
        ));
    }
    Ok((head_dim, rope_dims))
}

/// Gemma 4's attention, as llama.cpp reads it: `attention.key_length` and
/// `rope.dimension_count` are the global layers' (`global`, read as every family's), their
/// `_swa` keys the local layers' (defaulting to the global ones), `attention.head_count_kv` one
/// count per layer or one for all; the last `attention.shared_kv_layers` layers keep no K/V
/// (at least one layer of each kind must); `embedding_length_per_layer_input` the per-layer
/// embedding's width. Gemma 3n's files (`gemma3n`) default these two to llama.cpp's constants
/// for it. Returns the local shape, the global one where it differs, the layers that keep K/V
/// and that width.
fn gemma4_attention(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    global: AttnShape,
    local_layers: &[bool],
    gemma3n: bool,
) -> Result<(AttnShape, Option<AttnShape>, usize, usize), ModelError> {
    let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
    let layers = local_layers.len();
    let kv_counts =
        md_opt_usize_per_layer(md, &key("attention.head_count_kv"), layers)?.unwrap_or_else(|| vec![global.heads; layers]);
    // Every layer of a kind must have the same count; the kind's count is its first layer's.
    let count_of = |local: bool| -> Result<Option<usize>, ModelError> {
        let mut of_kind = kv_counts.iter().zip(local_layers).filter(|(_, &l)| l == local).map(|(&c, _)| c);
        let Some(first) = of_kind.next() else { return Ok(None) };
        match of_kind.find(|&c| c != first) {
            Some(other) => Err(bad(
                "attention.head_count_kv",
                format!("{} layers with {first} and {other} K/V heads", if local { "local" } else { "global" }),
            )),
            None => Ok(Some(first)),
        }
    };
    let head_dim = md_opt_usize(md, &key("attention.key_length_swa"))?.unwrap_or(global.head_dim);
    if let Some(v) = md_opt_usize(md, &key("attention.value_length_swa"))? {
        if v != head_dim {
            return Err(bad("attention.value_length_swa", format!("{v} differs from key_length_swa {head_dim}")));
        }
    }
    let rope_dims = md_opt_usize(md, &key("rope.dimension_count_swa"))?.unwrap_or(global.rope_dims);
    if head_dim == 0 || head_dim % 2 != 0 || rope_dims == 0 || rope_dims % 2 != 0 || rope_dims > head_dim {
        return Err(bad(
            "rope.dimension_count_swa",
            format!("{rope_dims} rotated dimensions of a {head_dim}-dimension head"),
        ));
    }
    let heads = global.heads;
    let with_kv = |kv_heads: usize| -> Result<usize, ModelError> {
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(bad("attention.head_count_kv", format!("{heads} heads cannot share {kv_heads} K/V heads")));
        }
        Ok(kv_heads)
    };
    let local = AttnShape {
        heads,
        kv_heads: with_kv(count_of(true)?.unwrap_or(global.heads))?,
        head_dim,
        rope_dims,
    };
    let global = AttnShape {
        kv_heads: with_kv(count_of(false)?.unwrap_or(local.kv_heads))?,
        ..global
    };
    let shared_default = if gemma3n { layers.saturating_sub(GEMMA3N_KV_LAYERS) } else { 0 };
    let shared = md_opt_usize(md, &key("attention.shared_kv_layers"))?.unwrap_or(shared_default);
    let kv_layers = layers.saturating_sub(shared);
    // Each sharing layer reads the last earlier layer of its kind that keeps K/V.
    let kinds_kept: Vec<bool> = local_layers[..kv_layers].to_vec();
    if let Some(l) = (kv_layers..layers).find(|&l| !kinds_kept.contains(&local_layers[l])) {
        return Err(bad(
            "attention.shared_kv_layers",
            format!("{shared} of {layers} layers share K/V, but no earlier layer of layer {l}'s kind keeps any"),
        ));
    }
    let per_layer_default = if gemma3n { GEMMA3N_PER_LAYER_INPUT } else { 0 };
    let per_layer_input = md_opt_usize(md, &key("embedding_length_per_layer_input"))?.unwrap_or(per_layer_default);
    let global_attn = (global != local).then_some(global);
    Ok((local, global_attn, kv_layers, per_layer_input))
}

/// Gemma 4's MLP widths: `feed_forward_length`, one for all layers or one per layer (the E
/// models double it in their K/V-sharing layers). Returns the first layer's and, where they
/// differ, every layer's.
fn gemma4_ffn(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, layers: usize) -> Result<(usize, Vec<usize>), ModelError> {
    let k = key("feed_forward_length");
    let widths = md_opt_usize_per_layer(md, &k, layers)?.ok_or(ModelError::MissingMetadata { key: k })?;
    let first = widths.first().copied().unwrap_or(0);
    Ok((first, if widths.iter().all(|&f| f == first) { Vec::new() } else { widths }))
}

/// What each layer holds beyond attention: its MLP's width, and the recurrent mixers of LFM2,
/// Granite 4.0's hybrids, Nemotron-H and Jamba (whose layers without K/V heads, `by_kv`, are
/// the recurrent ones, or Nemotron-H's MLPs).
struct LayerKinds {
    ffn: usize,
    ffn_per_layer: Vec<usize>,
    mlp_only: Vec<bool>,
    short_conv: Option<ShortConvParams>,
    mamba2: Option<Mamba2Params>,
    mamba: Option<MambaParams>,
}

impl LayerKinds {
    fn read(
        md: &HashMap<String, Value>,
        key: &dyn Fn(&str) -> String,
        family: Family,
        layers: usize,
        by_kv: Option<Vec<bool>>,
        own_heads: Option<&LayerHeads>,
    ) -> Result<Self, ModelError> {
        let (ffn, ffn_per_layer) = match family {
            Family::Gemma4 => gemma4_ffn(md, key, layers)?,
            Family::NemotronH => ffn_widths(md, key, layers)?,
            _ if own_heads.is_some() => ffn_widths(md, key, layers)?,
            _ => match (md_opt_usize(md, &key("expert_count"))?.unwrap_or(0) > 0, md_opt_per_layer_usize(md, &key("feed_forward_length"))?) {
                (_, Some(f)) => (f, Vec::new()),
                (true, None) => (0, Vec::new()),
                (false, None) => (md_usize(md, &key("feed_forward_length"))?, Vec::new()),
            },
        };
        // Nemotron-H: a layer without K/V heads is an MLP where it has a width, else Mamba-2.
        // Deci: a layer without query heads is its MLP alone (if it has one).
        let mlp_only: Vec<bool> = match (family, own_heads) {
            (Family::NemotronH, _) => ffn_per_layer.iter().map(|&f| f > 0).collect(),
            (_, Some(d)) => d.query_heads.iter().map(|&h| h == 0).collect(),
            _ => Vec::new(),
        };
        // Jamba: Mamba in the layers without K/V heads.
        let (mamba, by_kv) = match by_kv {
            Some(l) if md_str(md, "general.architecture")? == JAMBA => (Some(MambaParams::read(md, key, l)?), None),
            other => (None, other),
        };
        let (short_conv, mamba2) = match (family, by_kv) {
            (Family::Lfm2, Some(l)) => (Some(ShortConvParams::read(md, key, l)?), None),
            (Family::GraniteHybrid, Some(l)) => (None, Some(Mamba2Params::read(md, key, l)?)),
            (Family::Llama, None) if md_str(md, "general.architecture")? == FALCON_H1 => (None, Some(Mamba2Params::read(md, key, vec![true; layers])?)),
            (Family::NemotronH, Some(l)) => {
                let l = l.iter().zip(&mlp_only).map(|(&no_kv, &mlp)| no_kv && !mlp).collect();
                (None, Some(Mamba2Params::read(md, key, l)?))
            }
            _ => (None, None),
        };
        Ok(Self {
            ffn,
            ffn_per_layer,
            mlp_only,
            short_conv,
            mamba2,
            mamba,
        })
    }
}

/// Nemotron-H's, Deci's and OpenELM's MLP widths, one per layer (`feed_forward_length`, 0
/// where a layer has no MLP): the widest, and the widths.
fn ffn_widths(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, layers: usize) -> Result<(usize, Vec<usize>), ModelError> {
    let k = key("feed_forward_length");
    let widths = md_opt_usize_per_layer(md, &k, layers)?.ok_or(ModelError::MissingMetadata { key: k })?;
    Ok((widths.iter().copied().max().unwrap_or(0), widths))
}

/// The file's rope pairing: the family's, except that a GLM-4 file with M-RoPE sections
/// (`rope.dimension_sections`, not all 0) rotates NeoX pairs, as llama.cpp's
/// `llama_model_rope_type` decides (`LLAMA_ROPE_TYPE_MROPE`; its converter permuted Q and K
/// for it, and a text token's position is the same in every section), and that EXAONE 3.5's
/// Llama layer (`exaone`) rotates NeoX pairs (its converter does not permute Q and K).
fn rope_style(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, (family, arch): (Family, &str)) -> Result<RopeStyle, ModelError> {
    if matches!(arch, "exaone" | "orion" | "stablelm" | "starcoder2" | "phi2" | "falcon" | "gptneox" | "codeshell" | "dbrx" | "nemotron" | "plamo" | "apertus" | "jais2" | "falcon-h1" | "smallthinker" | "openelm" | MINICPM3 | AFMOE | BITNET | NOMIC_BERT | NOMIC_BERT_MOE | JINA_BERT_V3 | MODERN_BERT) {
        return Ok(RopeStyle::Neox);
    }
    if family != Family::Glm4 || arch == "chatglm" {
        // Only GLM-4's pairing depends on the file (glm4moe's is NeoX with or without sections;
        // llama.cpp's `chatglm` graph rotates adjacent pairs whatever its file says).
        return Ok(family.rope_style());
    }
    let sections = md_opt_usize_array(md, &key("rope.dimension_sections"))?.unwrap_or_default();
    let nonzero = sections.iter().any(|&n| n != 0);
    Ok(if nonzero { RopeStyle::Neox } else { family.rope_style() })
}

/// The family's multipliers: of the attention scores, the embedding, each block's output
/// before its residual add, and (a divisor) of the logits.
struct Scales {
    attention: f64,
    embedding: Option<f64>,
    residual: Option<f64>,
    logit: Option<f64>,
}

impl Scales {
    fn read(
        md: &HashMap<String, Value>,
        key: &dyn Fn(&str) -> String,
        (family, arch): (Family, &str),
        [hidden, heads, head_dim, layers]: [usize; 4],
    ) -> Result<Self, ModelError> {
        let plain = Self {
            attention: 1.0 / (head_dim as f64).sqrt(),
            embedding: None,
            residual: None,
            logit: None,
        };
        if arch == "minicpm" {
            return Self::minicpm(md, key, plain, [hidden, layers]);
        }
        if arch == AFMOE {
            // llama.cpp's `afmoe` graph: muP's embedding multiplier.
            return Ok(Self {
                embedding: Some((hidden as f64).sqrt()),
                ..plain
            });
        }
        if arch == MINICPM3 {
            // llama.cpp's `minicpm3` graph: MiniCPM's multipliers, whatever the file says; the
            // logits multiplied by the base width over the hidden one.
            return Ok(Self {
                embedding: Some(MINICPM_EMBEDDING_SCALE),
                residual: Some(MINICPM_DEPTH_SCALE / (layers.max(1) as f64).sqrt()),
                logit: Some(hidden as f64 / MINICPM_BASE_WIDTH),
                ..plain
            });
        }
        if arch == DECI {
            // llama.cpp's `deci` graph: the file's `attention.scale` where it is not 0.
            return Ok(Self {
                attention: granite_scale(md, key, "attention.scale")?.unwrap_or(plain.attention),
                ..plain
            });
        }
        if arch == "jais" {
            // llama.cpp's `jais` graph scales the scores by 1/head_dim (muP's), not its root.
            return Ok(Self {
                attention: 1.0 / head_dim as f64,
                ..plain
            });
        }
        Ok(match family {
            Family::Gemma2 | Family::Gemma3 => {
                // llama.cpp: the 27Bs (Gemma 2's 46 layers, Gemma 3's 62) scale by hidden / heads
                // (query_pre_attn_scalar).
                let big = if family == Family::Gemma2 { 46 } else { 62 };
                let pre_attn = if layers == big { hidden / heads } else { head_dim };
                Self {
                    attention: 1.0 / (pre_attn as f64).sqrt(),
                    embedding: Some((hidden as f64).sqrt()),
                    ..plain
                }
            }
            // Gemma 4: Q and K are normalized per head, the scores taken as they are.
            Family::Gemma4 => Self {
                attention: 1.0,
                embedding: Some((hidden as f64).sqrt()),
                ..plain
            },
            // llama.cpp requires Granite 3's logit scale; the hybrids' is optional.
            Family::Granite | Family::GraniteHybrid => Self {
                attention: granite_scale(md, key, "attention.scale")?.unwrap_or(plain.attention),
                embedding: granite_scale(md, key, "embedding_scale")?,
                residual: granite_scale(md, key, "residual_scale")?,
                logit: match granite_scale(md, key, "logit_scale")? {
                    None if family == Family::Granite => {
                        return Err(ModelError::BadMetadata {
                            key: key("logit_scale"),
                            reason: "absent or 0, but Granite's logits are divided by it".into(),
                        })
                    }
                    l => l,
                },
            },
            _ => plain,
        })
    }
}

impl Scales {
    /// MiniCPM's, as llama.cpp's `minicpm` reads them: the embedding, residual and logit
    /// multipliers from the file, else its older files' values (embedding × 12, residual ×
    /// 1.4/√layers, logits ÷ 256/hidden), a key of 0 turning its multiplier off; attention
    /// scores by 1/√head_dim whatever `attention.scale` says.
    fn minicpm(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, plain: Self, [hidden, layers]: [usize; 2]) -> Result<Self, ModelError> {
        let read = |name: &str, default: f64| -> Result<Option<f64>, ModelError> {
            Ok(match md_opt_f64(md, &key(name))? {
                None => Some(default),
                Some(_) => granite_scale(md, key, name)?,
            })
        };
        Ok(Self {
            embedding: read("embedding_scale", MINICPM_EMBEDDING_SCALE)?,
            residual: read("residual_scale", MINICPM_DEPTH_SCALE / (layers.max(1) as f64).sqrt())?,
            logit: read("logit_scale", MINICPM_BASE_WIDTH / hidden.max(1) as f64)?,
            ..plain
        })
    }
}

/// MiniCPM's older files (without the multiplier keys): the embedding's multiplier, the depth
/// scale (the residual multiplier is it over √layers) and the base width (the logits are
/// divided by it over the hidden width), as llama.cpp assumes them.
const MINICPM_EMBEDDING_SCALE: f64 = 12.0;
const MINICPM_DEPTH_SCALE: f64 = 1.4;
const MINICPM_BASE_WIDTH: f64 = 256.0;

/// One flag per layer, `true` where it skips rope: SmolLM3's every fourth layer; every layer of
/// a Granite file whose `rope.scaling.finetuned` is false (llama.cpp: Granite's rope is on
/// unless the file says so; MiniCPM's always); EXAONE 4.0's global layers where it has local ones;
/// every layer of Nemotron-H, and of a file whose positions are learned or ALiBi's
/// (`rope_replaced`). Empty when every layer rotates.
fn no_rope_layers(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    (family, arch): (Family, &str),
    layers: usize,
    sliding: Option<&SlidingWindow>,
    rope_replaced: bool,
) -> Result<Vec<bool>, ModelError> {
    Ok(match (family, sliding) {
        // MiniCPM's rope is always on (llama.cpp sets `rope_finetuned` for it).
        _ if arch == "minicpm" => Vec::new(),
        // (GLM-4.5's family has windows in EXAONE's MoE files only.)
        (Family::Exaone4 | Family::Cohere | Family::Glm4Moe, Some(s)) => s.local.iter().map(|local| !local).collect(),
        (Family::SmolLM3, _) => (0..layers).map(|l| (l + 1) % SMOLLM3_NO_ROPE_STEP == 0).collect(),
        // Llama 4's chunked files: every fourth layer, whatever the pattern. Its files with a
        // window of 0 rotate every layer, as llama.cpp's loader says it means to (its graph
        // skips rope in the last layer and then aborts on the temperature it has not set).
        (Family::Llama, Some(_)) if arch == LLAMA4 => (0..layers).map(|l| (l + 1) % LLAMA4_PERIOD == 0).collect(),
        // SmallThinker's windowed files: every fourth layer from the first (whatever the
        // pattern), as llama.cpp's graph, which rotates every layer of a file of exactly four
        // layers (its step equal to the layer count); without windows every layer rotates.
        (Family::Llama, Some(_)) if arch == SMALLTHINKER && layers != SMALLTHINKER_PERIOD => {
            (0..layers).map(|l| l % SMALLTHINKER_PERIOD == 0).collect()
        }
        // AFMoE: every fourth layer, with windows or without (llama.cpp's graph).
        (Family::Llama, _) if arch == AFMOE => (0..layers).map(|l| (l + 1) % AFMOE_PERIOD == 0).collect(),
        // Nemotron-H's attention never rotates (llama.cpp's graph has no rope); GPT-2's and
        // StarCoder's learn their positions instead, Refact's, BLOOM's, MPT's, Jais's and
        // Baichuan 13B's bias by ALiBi (`rope_replaced`).
        (Family::NemotronH, _) => vec![true; layers],
        _ if rope_replaced => vec![true; layers],
        (Family::Granite | Family::GraniteHybrid, _) if md_opt_bool(md, &key("rope.scaling.finetuned"))? == Some(false) => vec![true; layers],
        _ => Vec::new(),
    })
}

/// What a dense MLP of a file of `arch` computes between its projections.
fn mlp_kind(family: Family, arch: &str) -> MlpKind {
    match (family, arch) {
        (Family::NemotronH, _) | (_, "arcee" | "nemotron" | "jais2") => MlpKind::UpReluSquared,
        (_, "apertus") => MlpKind::UpXielu,
        (_, "starcoder2" | "phi2" | "falcon" | "gptneox" | "gpt2" | "starcoder" | "bloom" | "mpt" | "codeshell" | BERT | NOMIC_BERT_MOE | JINA_BERT_V3) => MlpKind::UpGelu,
        _ => MlpKind::Gated,
    }
}

/// Apertus's per-layer xIELU (`xielu.alpha_n`, `xielu.alpha_p`, `xielu.beta`, `xielu.eps`, not
/// under the architecture's prefix: each required, one value or one per layer, as llama.cpp
/// reads them); none for other files.
fn xielu_params(md: &HashMap<String, Value>, arch: &str, layers: usize) -> Result<Vec<Xielu>, ModelError> {
    if arch != "apertus" {
        return Ok(Vec::new());
    }
    // (Not under the architecture: llama.cpp names these keys bare.)
    let read = |k: &str| -> Result<Vec<f64>, ModelError> {
        md_opt_f64_per_layer(md, k, layers)?.ok_or(ModelError::MissingMetadata { key: k.to_string() })
    };
    let [alpha_n, alpha_p, beta, eps] = [read("xielu.alpha_n")?, read("xielu.alpha_p")?, read("xielu.beta")?, read("xielu.eps")?];
    // ggml's softplus, linear above 20.
    let softplus = |x: f64| if x > 20.0 { x } else { x.exp().ln_1p() };
    (0..layers)
        .map(|i| {
            let x = Xielu {
                a_p: softplus(alpha_p[i]) as f32,
                a_n: (beta[i] + softplus(alpha_n[i])) as f32,
                beta: beta[i] as f32,
                eps: eps[i] as f32,
            };
            match [x.a_p, x.a_n, x.beta, x.eps].iter().all(|v| v.is_finite()) {
                true => Ok(x),
                false => Err(ModelError::BadMetadata {
                    key: "xielu.alpha_p".into(),
                    reason: format!("layer {i}'s xIELU parameters are not finite numbers"),
                }),
            }
        })
        .collect()
}

/// Whether a file of `arch` runs its layers in parallel form (`HParams::parallel_block`):
/// Cohere's, Phi-2's, Falcon's and PLaMo's always; GPT-NeoX's where `use_parallel_residual` says so
/// (llama.cpp requires the key; Pythia's and GPT-NeoX-20B's say true, RedPajama-INCITE's false).
fn parallel_block(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, (family, arch): (Family, &str)) -> Result<bool, ModelError> {
    if arch == "gptneox" {
        let k = key("use_parallel_residual");
        return md_opt_bool(md, &k)?.ok_or(ModelError::MissingMetadata { key: k });
    }
    Ok(family == Family::Cohere || matches!(arch, "phi2" | "falcon" | "plamo"))
}

/// The Q/K/V clamp of a file of `arch` (`HParams::clamp_kqv`): MPT's and OLMo's where the file
/// gives one above 0; DBRX's required (as llama.cpp requires it), 0 meaning none there too.
fn clamp_kqv(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, arch: &str) -> Result<Option<f32>, ModelError> {
    let k = key("attention.clamp_kqv");
    Ok(match md_opt_f64(md, &k)? {
        None if arch == "dbrx" => return Err(ModelError::MissingMetadata { key: k }),
        Some(c) if matches!(arch, "mpt" | "olmo" | "dbrx") && c > 0.0 => Some(c as f32),
        _ => None,
    })
}

/// Baichuan's 7Bs have this many layers and rotate; its 13Bs have [`BAICHUAN_ALIBI_LAYERS`]
/// and bias by ALiBi (llama.cpp tells them apart so: its files say nothing else of it).
const BAICHUAN_ROPE_LAYERS: usize = 32;
/// See [`BAICHUAN_ROPE_LAYERS`].
const BAICHUAN_ALIBI_LAYERS: usize = 40;

/// ALiBi's maximum bias of a file of `arch` with `layers` layers: Refact's, BLOOM's and
/// Baichuan 13B's 8, as llama.cpp sets it; MPT's and Jais's from `attention.max_alibi_bias` (an
/// MPT file without it, whose positions would be learned, is refused; so is a Jais file without
/// it, which would have no positions at all: llama.cpp's converter always writes it); none for
/// the others. A Baichuan file of neither 32 nor 40 layers is refused: llama.cpp would run it
/// with neither rope nor ALiBi, without positions.
fn alibi_max_bias(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, arch: &str, layers: usize) -> Result<Option<f32>, ModelError> {
    match arch {
        "refact" | "bloom" | JINA_BERT_V2 => Ok(Some(ALIBI_MAX_BIAS)),
        "baichuan" => match layers {
            BAICHUAN_ROPE_LAYERS => Ok(None),
            BAICHUAN_ALIBI_LAYERS => Ok(Some(ALIBI_MAX_BIAS)),
            n => Err(ModelError::BadMetadata {
                key: key("block_count"),
                reason: format!(
                    "{n} layers: Baichuan's positions are told apart by the layer count, rope for {BAICHUAN_ROPE_LAYERS} (7B), ALiBi for {BAICHUAN_ALIBI_LAYERS} (13B)"
                ),
            }),
        },
        "mpt" | "jais" => match md_opt_f64(md, &key("attention.max_alibi_bias"))? {
            Some(b) if b > 0.0 && b.is_finite() => Ok(Some(b as f32)),
            _ => Err(ModelError::BadMetadata {
                key: key("attention.max_alibi_bias"),
                reason: match arch {
                    "mpt" => "absent or not positive: MPT files without ALiBi (with learned positions) are not supported",
                    _ => "absent or not positive: Jais's positions are ALiBi's alone",
                }
                .into(),
            }),
        },
        _ => Ok(None),
    }
}

/// Whether a file of `arch` normalizes each block's output (`HParams::post_norms`): not Gemma
/// 1's (`gemma`) or ChatGLM's (`chatglm`), though their families' later files do.
fn post_norms(family: Family, arch: &str) -> bool {
    let family_has = matches!(family, Family::Gemma2 | Family::Gemma3 | Family::Gemma4 | Family::Olmo2 | Family::Exaone4 | Family::Glm4);
    (family_has && !matches!(arch, "gemma" | "chatglm")) || arch == AFMOE
}

/// The kind of the blocks' input norms and the final norm of a file of `arch` (the testkit
/// writes its files' norms by it too).
pub(crate) fn norm_kind(family: Family, arch: &str) -> NormKind {
    match (family, arch) {
        (Family::Cohere, _) | (_, "mpt" | "dbrx" | MODERN_BERT) => NormKind::Layer,
        (_, "olmo") => NormKind::PlainLayer,
        (_, "phimoe") => NormKind::BiasedRms,
        (_, "orion" | "stablelm" | "starcoder2" | "phi2" | "falcon" | "gptneox" | "gpt2" | "starcoder" | "bloom" | "codeshell" | "jais" | "nemotron" | "jais2" | BERT | NOMIC_BERT | NOMIC_BERT_MOE | JINA_BERT_V3 | JINA_BERT_V2) => {
            NormKind::BiasedLayer
        }
        _ => NormKind::Rms,
    }
}

/// The norms' epsilon. LayerNorm families (Cohere's, MPT's, DBRX's, OLMo's, Orion's, StableLM's, StarCoder2's, Phi-2's, Falcon's, GPT-NeoX's,
/// GPT-2's, StarCoder's, BLOOM's, CodeShell's, Jais's, Nemotron's) read `attention.layer_norm_epsilon`,
/// which llama.cpp requires of them; the others `attention.layer_norm_rms_epsilon`, else
/// `attention.layer_norm_epsilon` (Nemotron-H's files may give only that: llama.cpp's
/// fallback), else 1e-5.
fn norm_eps(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, norm: NormKind) -> Result<f64, ModelError> {
    let layer = md_opt_f64(md, &key("attention.layer_norm_epsilon"))?;
    if norm.is_layer() {
        return layer.ok_or_else(|| ModelError::MissingMetadata {
            key: key("attention.layer_norm_epsilon"),
        });
    }
    Ok(match md_opt_f64(md, &key("attention.layer_norm_rms_epsilon"))? {
        Some(e) => e,
        None => layer.unwrap_or(1e-5),
    })
}

/// One of Granite's multipliers (`{arch}.{name}`): `None` when absent or 0 (llama.cpp's "not
/// set"); an error when it is not a finite positive number.
fn granite_scale(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, name: &str) -> Result<Option<f64>, ModelError> {
    match md_opt_f64(md, &key(name))? {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
        Some(v) => Err(ModelError::BadMetadata {
            key: key(name),
            reason: format!("{v} must be a positive number"),
        }),
    }
}

/// `rope.scaling.*`. As llama.cpp reads them: no `type` with a `factor` is linear (its
/// default type); YaRN's original context is `original_context` (the file's, else the
/// context length); its betas and log multiplier are read for `mistral3` only (llama.cpp reads
/// them for that architecture and not for the others here), else 32, 1 and none.
fn rope_scaling(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    original_context: usize,
    family: Family,
    mla: Option<&MlaParams>,
) -> Result<RopeScaling, ModelError> {
    let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
    let factor = md_opt_f64(md, &key("rope.scaling.factor"))?;
    if let Some(f) = factor {
        if f <= 0.0 || !f.is_finite() {
            return Err(bad("rope.scaling.factor", format!("{f} must be positive")));
        }
    }
    Ok(match (md_opt_str(md, &key("rope.scaling.type"))?, factor) {
        (Some("none"), _) | (None, None) => RopeScaling::None,
        // LongRoPE (MiniCPM4's files say so): its per-frequency divisors are tensors
        // (`rope_factors_long`/`_short`, picked by the context run, as Phi-3's); a factor, if
        // the file gives one, scales positions as linear's does (llama.cpp's `freq_scale`).
        (Some("linear") | Some("longrope") | None, f) => RopeScaling::Linear { factor: f.unwrap_or(1.0) },
        (Some("yarn"), f) => {
            let own = |k: &str, default: f64| -> Result<f64, ModelError> {
                Ok(match family {
                    Family::Mistral3 => md_opt_f64(md, &key(k))?.unwrap_or(default),
                    _ => default,
                })
            };
            RopeScaling::Yarn {
                factor: f.unwrap_or(1.0),
                original_context,
                beta_fast: own("rope.scaling.yarn_beta_fast", 32.0)?,
                beta_slow: own("rope.scaling.yarn_beta_slow", 1.0)?,
                log_multiplier: match mla {
                    Some(m) => m.tables_log_multiplier,
                    None => own("rope.scaling.yarn_log_multiplier", 0.0)?,
                },
            }
        }
        (Some(other), _) => {
            return Err(bad(
                "rope.scaling.type",
                format!("\"{other}\" is not supported (none, linear, yarn, longrope)"),
            ))
        }
    })
}

/// Whether the architecture is a mixture of experts by name: `expert_count` is then required
/// and must not be 0 (not MiniCPM3's, DeepSeek-V2's attention over a dense MLP).
fn experts_required(family: Family, arch: &str) -> bool {
    let by_family = matches!(family, Family::Qwen3Moe | Family::Glm4Moe | Family::GptOss | Family::DeepSeek2);
    matches!(arch, "dbrx" | "deepseek" | "phimoe" | "bailingmoe" | SMALLTHINKER | LLAMA4) || (by_family && arch != MINICPM3)
}

/// The MoE parameters: required for `qwen3moe` and `qwen2moe`; for `llama` when
/// `llama.expert_count` is above 0 (Mixtral); none for the other families.
fn moe_params(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    (family, arch): (Family, &str),
    [layers, vocab]: [usize; 2],
) -> Result<Option<MoeParams>, ModelError> {
    let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
    // Qwen2's MoE files (`qwen2moe`); a `qwen2` file's experts, if it named any, llama.cpp
    // would not read either.
    let qwen2moe = family == Family::Qwen2 && arch == "qwen2moe";
    // OLMoE: Qwen3 MoE's layer whose router's softmax weights are not renormalized, and whose
    // experts are `feed_forward_length` wide (llama.cpp's `olmoe` graph).
    let olmoe = arch == "olmoe";
    // Hunyuan-A13B: Qwen3 MoE's routing beside a shared expert.
    let hunyuan = arch == "hunyuan-moe";
    // nomic-embed-text-v2-moe's: experts in layer `i` where `i % moe_every_n_layers == 1`, as
    // llama.cpp reads it; none where that is below 2 (no layer index leaves 1 then), and its
    // `expert_count` then not read.
    if arch == NOMIC_BERT_MOE && md_opt_usize(md, &key("moe_every_n_layers"))?.unwrap_or(0) < 2 {
        return Ok(None);
    }
    let required = qwen2moe || arch == NOMIC_BERT_MOE || experts_required(family, arch);
    let experts = match family {
        _ if required => md_usize(md, &key("expert_count"))?,
        // Mixtral; Gemma 4's 26B-A4B; ERNIE 4.5's, Qwen3.5's, Granite 3's and 4's MoE files.
        Family::Llama
        | Family::Gemma4
        | Family::Ernie45
        | Family::Qwen35
        | Family::Granite
        | Family::GraniteHybrid
        | Family::NemotronH
        | Family::Lfm2 => {
            md_opt_usize(md, &key("expert_count"))?.unwrap_or(0)
        }
        Family::Mistral3
        | Family::SmolLM3
        | Family::Olmo2
        | Family::Exaone4
        | Family::Glm4 => match md_opt_usize(md, &key("expert_count"))? {
            Some(n) if n > 0 => {
                return Err(bad(
                    "expert_count",
                    format!("{n} experts: mixture-of-experts {} files are not supported", family.arch()),
                ))
            }
            _ => 0,
        },
        _ => 0,
    };
    if experts == 0 {
        return if required { Err(bad("expert_count", "a MoE model with 0 experts".into())) } else { Ok(None) };
    }
    let experts_used = md_usize(md, &key("expert_used_count"))?;
    if experts_used == 0 || experts_used > experts {
        return Err(bad(
            "expert_used_count",
            format!("{experts_used} experts per token out of {experts}"),
        ));
    }
    let expert_ffn = match md_opt_usize(md, &key("expert_feed_forward_length"))? {
        Some(f) => f,
        // llama.cpp's fallback: a MoE layer's `feed_forward_length` (one per layer) over
        // `expert_used_count`.
        None if family == Family::NemotronH => ffn_widths(md, key, layers)?.0 / experts_used,
        // llama.cpp requires it of `lfm2moe`, `hunyuan-moe`, `deepseek` and Ling's files.
        None if family == Family::Lfm2 || hunyuan || matches!(arch, "deepseek" | "bailingmoe" | SMALLTHINKER | LLAMA4 | AFMOE | MELLUM) || glm45_kin((family, arch)) => md_usize(md, &key("expert_feed_forward_length"))?,
        None => {
            let ffn = md_usize(md, &key("feed_forward_length"))?;
            match family {
                _ if olmoe => ffn,
                Family::Qwen3Moe | Family::Glm4Moe | Family::Qwen35 | Family::Qwen2 => ffn / experts_used,
                _ => ffn,
            }
        }
    };
    if expert_ffn == 0 {
        return Err(bad("expert_feed_forward_length", "experts of width 0".into()));
    }
    let groups = expert_groups(md, key, experts, experts_used)?;
    let gating = moe_gating(md, key, (family, arch), [layers, vocab])?;
    let weights_scale = match md_opt_f64(md, &key("expert_weights_scale"))? {
        // Only llama.cpp's GLM-4.5, DeepSeek (V1 and V2), Nemotron-H and Ling graphs read the
        // scale (its other graphs, MiniMax-M2's among them, pass a scale that stays 0: none).
        _ if !matches!(family, Family::Glm4Moe | Family::DeepSeek2 | Family::NemotronH) && !matches!(arch, "deepseek" | "bailingmoe" | AFMOE) => 1.0,
        _ if arch == "minimax-m2" => 1.0,
        None | Some(0.0) => 1.0,
        Some(s) if s.is_finite() && s > 0.0 => s as f32,
        Some(s) => return Err(bad("expert_weights_scale", format!("{s} must be a positive number"))),
    };
    let (shared_ffn, dense_leading, layer_step) = moe_layers(md, key, (family, arch), expert_ffn)?;
    Ok(Some(MoeParams {
        experts,
        experts_used,
        expert_ffn,
        gating,
        normalize: moe_normalize(md, key, (family, arch))?,
        weights_scale,
        shared_ffn,
        dense_leading,
        layer_step,
        layer_offset: match arch {
            NOMIC_BERT_MOE => layer_step - 1,
            _ => 1,
        },
        where_routed: arch == JAMBA,
        biases: family == Family::GptOss,
        shared_gate: matches!(family, Family::Qwen35 | Family::Qwen2),
        expert_mlp: match family {
            Family::NemotronH => MlpKind::UpReluSquared,
            _ if arch == NOMIC_BERT_MOE => MlpKind::UpGelu,
            _ => MlpKind::Gated,
        },
        weigh_inputs: arch == LLAMA4,
        latent: md_opt_usize(md, &key("moe_latent_size"))?.filter(|&l| l > 0),
        groups,
    }))
}

/// Whether a MoE file's chosen experts' weights are renormalized to sum to 1: llama.cpp passes
/// `true` for Qwen3 MoE and Mixtral, the file's flag for GLM-4.5, `false` for gpt-oss (its
/// softmax over the chosen already sums to 1).
fn moe_normalize(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, (family, arch): (Family, &str)) -> Result<bool, ModelError> {
    Ok(match family {
        // MiniMax-M2's graph renormalizes whatever the file says.
        _ if arch == "minimax-m2" => true,
        Family::Glm4Moe | Family::DeepSeek2 | Family::NemotronH => {
            md_opt_bool(md, &key("expert_weights_norm"))?.unwrap_or(false)
        }
        _ if matches!(arch, "bailingmoe" | AFMOE) => md_opt_bool(md, &key("expert_weights_norm"))?.unwrap_or(false),
        // gpt-oss's softmax over the chosen already sums to 1; Qwen2 MoE's and OLMoE's
        // weights are the softmax over all experts (`norm_topk_prob` false); DeepSeekMoE's,
        // Llama 4's and nomic-embed-text-v2-moe's too.
        _ if matches!(arch, "olmoe" | "deepseek" | LLAMA4 | JAMBA | NOMIC_BERT_MOE) => false,
        Family::GptOss | Family::Qwen2 => false,
        _ => true,
    })
}

/// A MoE file's expert groups (`expert_group_count`, above 1, and `expert_group_used_count`),
/// which llama.cpp's `build_moe_ffn` routes by in any architecture. Refused where llama.cpp
/// would route nonsense: groups that do not split the experts evenly, or of fewer than the two
/// experts a group's score sums, or too few groups used to hold the experts a token runs.
fn expert_groups(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, experts: usize, experts_used: usize) -> Result<Option<ExpertGroups>, ModelError> {
    let count = match md_opt_usize(md, &key("expert_group_count"))? {
        Some(c) if c > 1 => c,
        _ => return Ok(None),
    };
    let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
    if !experts.is_multiple_of(count) || experts / count < 2 {
        return Err(bad("expert_group_count", format!("{count} groups of {experts} experts: each group needs an equal share of two or more")));
    }
    let used = md_opt_usize(md, &key("expert_group_used_count"))?.unwrap_or(0);
    if used == 0 || used > count || used * (experts / count) < experts_used {
        return Err(bad(
            "expert_group_used_count",
            format!("{used} of {count} groups of {} experts cannot hold the {experts_used} experts a token runs", experts / count),
        ));
    }
    Ok(Some(ExpertGroups { count, used }))
}

/// `rope.freq_base` (10,000 when absent); Hunyuan's dense files' scaled by NTK-aware alpha
/// (`rope.scaling.alpha`, where above 0) as llama.cpp does for them: `base * alpha^(d/(d-2))`
/// for a head of `d` dimensions. (Their converter scales the base itself and writes no alpha.)
fn rope_base(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, arch: &str, head_dim: usize) -> Result<f64, ModelError> {
    let base = md_opt_f64(md, &key("rope.freq_base"))?.unwrap_or(10_000.0);
    if arch != "hunyuan-dense" {
        return Ok(base);
    }
    match md_opt_f64(md, &key("rope.scaling.alpha"))? {
        Some(alpha) if alpha > 0.0 && head_dim > 2 => {
            let d = head_dim as f64;
            let scaled = base * alpha.powf(d / (d - 2.0));
            if !(scaled.is_finite() && scaled <= f64::from(f32::MAX)) {
                return Err(ModelError::BadMetadata {
                    key: key("rope.scaling.alpha"),
                    reason: format!("{alpha} scales the rope base {base} past any number"),
                });
            }
            Ok(scaled)
        }
        _ => Ok(base),
    }
}

/// Whether a file is one llama.cpp runs on a graph of its own and hearth on GLM-4.5's layer (Ling
/// 2.0's, dots.llm1's, EXAONE's MoE files, MiniMax-M2's): unlike `glm4moe` files they name the
/// MLP's norm `ffn_norm`, and llama.cpp requires their gating and their experts' width.
fn glm45_kin((family, arch): (Family, &str)) -> bool {
    family == Family::Glm4Moe && arch != "glm4moe"
}

/// A MoE file's router gating: `expert_gating_func` where llama.cpp's graph reads it (GLM-4.5's,
/// DeepSeek-V2's, LFM2's, Ling 2.0's, dots.llm1's and SmallThinker's, with their defaults); the others' graphs fix it whatever the file
/// says: gpt-oss's a softmax over the chosen, Nemotron-H's a sigmoid, every other one's
/// (Mixtral's, Qwen3 MoE's, Qwen2 MoE's, Granite's, ERNIE 4.5's, Gemma 4's, Qwen3.5's) a
/// softmax.
fn moe_gating(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    (family, arch): (Family, &str),
    [layers, vocab]: [usize; 2],
) -> Result<MoeGating, ModelError> {
    let reads_key = matches!(family, Family::Glm4Moe | Family::DeepSeek2 | Family::Lfm2) || arch == SMALLTHINKER;
    Ok(match md_opt_usize(md, &key("expert_gating_func"))? {
        _ if family == Family::GptOss => MoeGating::SoftmaxWeight,
        _ if family == Family::NemotronH || arch == LLAMA4 => MoeGating::Sigmoid,
        // AFMoE's: the file's, sigmoid without it (llama.cpp's default for it).
        None | Some(0) if arch == AFMOE => MoeGating::Sigmoid,
        _ if !reads_key && arch != AFMOE => MoeGating::Softmax,
        // llama.cpp requires it of `lfm2moe` files (its converter writes sigmoid) and of
        // `bailingmoe2` and `exaone-moe` ones; `dots1` and `minimax-m2` ones without it, or with
        // 0, it fails to run (their graphs have no default gating).
        None if family == Family::Lfm2 || glm45_kin((family, arch)) || arch == SMALLTHINKER => {
            return Err(ModelError::MissingMetadata {
                key: key("expert_gating_func"),
            })
        }
        Some(0) if glm45_kin((family, arch)) || arch == SMALLTHINKER => {
            return Err(ModelError::BadMetadata {
                key: key("expert_gating_func"),
                reason: "0 names no gating (1 softmax, 2 sigmoid, 3 softmax over the chosen)".into(),
            })
        }
        None | Some(0) if family == Family::Glm4Moe => MoeGating::Sigmoid,
        // llama.cpp's default for `deepseek2` files without the key: sigmoid for GLM-4.7-Flash
        // (47 layers and a 154,880-token vocabulary), softmax (DeepSeek-V2's) for the others.
        None | Some(0) if family == Family::DeepSeek2 && matches!(layers, 47 | 48) && vocab == GLM47_FLASH_VOCAB => MoeGating::Sigmoid,
        None | Some(0) | Some(1) => MoeGating::Softmax,
        Some(2) => MoeGating::Sigmoid,
        Some(3) => MoeGating::SoftmaxWeight,
        Some(other) => {
            return Err(ModelError::BadMetadata {
                key: key("expert_gating_func"),
                reason: format!("{other} is not supported (1 softmax, 2 sigmoid, 3 softmax over the chosen)"),
            })
        }
    })
}

/// A MoE model's shared expert width, leading dense layers and MoE layer step: GLM-4.5's and
/// DeepSeek-V2's `expert_shared_count` shared experts of `expert_ffn` (required, as llama.cpp
/// does) and `leading_dense_block_count`; ERNIE 4.5's `expert_shared_feed_forward_length`,
/// `leading_dense_block_count` and `interleave_moe_layer_step` (required); none, none and 1
/// for the others.
fn moe_layers(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    (family, arch): (Family, &str),
    expert_ffn: usize,
) -> Result<(usize, usize, usize), ModelError> {
    let leading = || -> Result<usize, ModelError> { Ok(md_opt_usize(md, &key("leading_dense_block_count"))?.unwrap_or(0)) };
    let shared_count = || md_usize(md, &key("expert_shared_count"));
    // `expert_shared_feed_forward_length` where the file gives it, else an expert's width.
    let shared_width = || -> Result<usize, ModelError> {
        Ok(md_opt_usize(md, &key("expert_shared_feed_forward_length"))?.filter(|&w| w > 0).unwrap_or(expert_ffn))
    };
    Ok(match family {
        // Ling 2.0's: `expert_shared_count` shared experts of `shared_width` (llama.cpp
        // multiplies either).
        _ if arch == "bailingmoe2" => (shared_count()? * shared_width()?, leading()?, 1),
        // EXAONE's MoE files: one shared expert of `shared_width`, whatever
        // `expert_shared_count` says (llama.cpp reads it, then builds one).
        _ if arch == "exaone-moe" => (shared_width()?, leading()?, 1),
        // MiniMax-M2's: experts alone in every layer (llama.cpp's graph reads neither key).
        _ if arch == "minimax-m2" => (0, 0, 1),
        // nomic-embed-text-v2-moe's: every `moe_every_n_layers`-th (2 or more: `moe_params`).
        _ if arch == NOMIC_BERT_MOE => (0, 0, md_usize(md, &key("moe_every_n_layers"))?),
        // Llama 4's: a shared expert of an expert's width beside the experts of every
        // `interleave_moe_layer_step`-th layer (required), the others dense.
        _ if arch == LLAMA4 => (expert_ffn, 0, moe_layer_step(md, key)?),
        _ if matches!(family, Family::Glm4Moe | Family::DeepSeek2) || matches!(arch, "deepseek" | AFMOE) => (shared_count()? * expert_ffn, leading()?, 1),
        // Ling's: the same shared experts in every layer (llama.cpp's graph gives each layer
        // experts whatever `leading_dense_block_count` says).
        _ if arch == "bailingmoe" => (shared_count()? * expert_ffn, 0, 1),
        // Qwen3.5's, Qwen2's and Hunyuan's MoE files: a shared expert of
        // `expert_shared_feed_forward_length`, else of `feed_forward_length` (llama.cpp's
        // fallback), in every layer.
        _ if matches!(family, Family::Qwen35 | Family::Qwen2) || arch == "hunyuan-moe" => shared_or_ffn(md, key)?,
        // LFM2's MoE files: no shared expert; the first `leading_dense_block_count` dense.
        Family::Lfm2 => (0, leading()?, 1),
        // Nemotron-H's MoE files: a shared expert of `expert_shared_feed_forward_length` (required).
        Family::NemotronH => (md_usize(md, &key("expert_shared_feed_forward_length"))?, 0, 1),
        // Granite's: a shared expert where `expert_shared_feed_forward_length` gives one.
        Family::Granite | Family::GraniteHybrid => (md_opt_usize(md, &key("expert_shared_feed_forward_length"))?.unwrap_or(0), 0, 1),
        Family::Ernie45 => {
            let shared = md_opt_usize(md, &key("expert_shared_feed_forward_length"))?.unwrap_or(0);
            (shared, leading()?, moe_layer_step(md, key)?)
        }
        _ => (0, 0, 1),
    })
}

/// `interleave_moe_layer_step` (required, above 0): every this-many-th layer has experts.
fn moe_layer_step(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String) -> Result<usize, ModelError> {
    let step = md_usize(md, &key("interleave_moe_layer_step"))?;
    if step == 0 {
        return Err(ModelError::BadMetadata {
            key: key("interleave_moe_layer_step"),
            reason: "0: no layer would have experts".into(),
        });
    }
    Ok(step)
}

/// A shared expert in every layer, of `expert_shared_feed_forward_length`, else of
/// `feed_forward_length` (llama.cpp's fallback); no leading dense layers.
fn shared_or_ffn(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String) -> Result<(usize, usize, usize), ModelError> {
    let shared = match md_opt_usize(md, &key("expert_shared_feed_forward_length"))? {
        Some(f) => f,
        None => md_usize(md, &key("feed_forward_length"))?,
    };
    Ok((shared, 0, 1))
}

/// The family's sliding-window layers, if it has them (`rope_base`: the global layers').
fn family_sliding(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    (family, arch): (Family, &str),
    layers: usize,
    rope_base: f64,
) -> Result<Option<SlidingWindow>, ModelError> {
    Ok(match family {
        // `cohere2` only (`command-r` has no windows); its window is required.
        Family::Cohere if arch == "cohere2" => Some(sliding_window(md, key, layers, cohere2_sliding(rope_base))?),
        Family::Gemma3 => Some(sliding_window(md, key, layers, GEMMA3_SLIDING)?),
        // (Gemma 1's layers are all global.)
        Family::Gemma2 if arch != "gemma" => Some(sliding_window(md, key, layers, gemma2_sliding(rope_base))?),
        // OLMo 3: only when the file has a window (OLMo 2's have none).
        Family::Olmo2 if md_opt_usize(md, &key("attention.sliding_window"))?.unwrap_or(0) > 0 => {
            Some(sliding_window(md, key, layers, olmo3_sliding(rope_base))?)
        }
        // llama.cpp gives EXAONE 4.0 local layers by its layer count (the 32B's 64).
        Family::Exaone4 if layers == EXAONE4_32B_LAYERS => {
            Some(sliding_window(md, key, layers, exaone4_sliding(rope_base))?)
        }
        Family::GptOss => Some(sliding_window(md, key, layers, gpt_oss_sliding(rope_base))?),
        // EXAONE's MoE files: Command R7B's (the file's window, required; three local layers,
        // then a global one; the local ones on the global base and scaling, as its graph).
        Family::Glm4Moe if arch == "exaone-moe" => Some(sliding_window(md, key, layers, cohere2_sliding(rope_base))?),
        // Gemma 3n's: the file's pattern, else four local layers then a global one.
        Family::Gemma4 if arch == GEMMA3N => Some(sliding_window(md, key, layers, GEMMA3N_SLIDING)?),
        // llama.cpp requires Gemma 4's pattern (one flag per layer).
        Family::Gemma4 if !md.contains_key(&key("attention.sliding_window_pattern")) => {
            return Err(ModelError::MissingMetadata {
                key: key("attention.sliding_window_pattern"),
            })
        }
        Family::Gemma4 => Some(sliding_window(md, key, layers, GEMMA4_SLIDING)?),
        Family::Llama if arch == SMALLTHINKER => smallthinker_sliding(md, key, layers, rope_base)?,
        // ModernBERT: where the file has a window, a global layer then two local ones (or the
        // file's period or flags), the local ones on `rope.freq_base_swa` (else the global base).
        Family::Llama if arch == MODERN_BERT && md_opt_usize(md, &key("attention.sliding_window"))?.unwrap_or(0) > 0 => {
            Some(sliding_window(md, key, layers, modern_bert_sliding(rope_base))?)
        }
        // Mellum 2: where the file has a window, OLMo 3's defaults (its pattern, else three
        // local layers then a global one, the local layers on the global base, unscaled: its
        // graph passes a scale and attention factor of 1 and reads no `rope.freq_base_swa`).
        Family::Qwen3Moe if arch == MELLUM && md_opt_usize(md, &key("attention.sliding_window"))?.unwrap_or(0) > 0 => {
            Some(sliding_window(md, key, layers, olmo3_sliding(rope_base))?)
        }
        Family::Llama if arch == LLAMA4 => llama4_chunks(md, key, layers, rope_base)?,
        // AFMoE: where the file has a window, three local layers then a global one (or the
        // file's pattern), the local ones on `rope.freq_base_swa` where it gives one.
        Family::Llama if arch == AFMOE && md_opt_usize(md, &key("attention.sliding_window"))?.unwrap_or(0) > 0 => Some(sliding_window(
            md,
            key,
            layers,
            SlidingDefaults {
                window: None,
                period: AFMOE_PERIOD,
                dense_first: false,
                rope_base,
                swa_base_key: true,
                rope: LocalRope::Scaled,
            },
        )?),
        _ => None,
    })
}

/// ModernBERT's windows (its `global_attn_every_n_layers` of 3, the first of each period
/// global: llama.cpp's `load_swa_pattern(ml, 3, true)`), the local layers on their own base.
fn modern_bert_sliding(rope_base: f64) -> SlidingDefaults {
    SlidingDefaults {
        window: None,
        period: MODERN_BERT_PERIOD,
        dense_first: true,
        rope_base,
        swa_base_key: true,
        rope: LocalRope::Scaled,
    }
}

/// ModernBERT's gated MLP's activation, `{arch}.hidden_activation` as llama.cpp maps it: GELU
/// (`gelu`, `geglu`, absent or unknown), SiLU (`silu`, `swish`, `swiglu`: Granite Embedding
/// R2's), ReLU (`reglu`). A plain `relu` (llama.cpp's ungated ReLU, which its graph cannot run
/// over ModernBERT's fused gate and up) is refused.
fn modern_bert_act(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String) -> Result<Gate, ModelError> {
    Ok(match md_opt_str(md, &key("hidden_activation"))? {
        Some("silu" | "swish" | "swiglu") => Gate::Silu,
        Some("reglu") => Gate::Relu,
        Some("relu") => {
            return Err(ModelError::BadMetadata {
                key: key("hidden_activation"),
                reason: "an ungated ReLU over ModernBERT's gated MLP (llama.cpp cannot run it either)".into(),
            })
        }
        _ => Gate::GeluTanh,
    })
}

/// SmallThinker's windows, as llama.cpp's graph runs them: only where the file has a window
/// (above 0), then one of [`SMALLTHINKER_WINDOW`] positions whatever its value; local layers
/// by the file's pattern (one flag per layer, or a period whose first layer is global; 4 when
/// absent); the local layers rotated on `rope.freq_base_swa` (else the global base) with the
/// global scaling.
fn smallthinker_sliding(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, layers: usize, rope_base: f64) -> Result<Option<SlidingWindow>, ModelError> {
    if md_opt_usize(md, &key("attention.sliding_window"))?.unwrap_or(0) == 0 {
        return Ok(None);
    }
    let defaults = SlidingDefaults {
        window: None,
        period: SMALLTHINKER_PERIOD,
        dense_first: true,
        rope_base,
        swa_base_key: true,
        rope: LocalRope::Scaled,
    };
    let s = sliding_window(md, key, layers, defaults)?;
    Ok(Some(SlidingWindow {
        window: SMALLTHINKER_WINDOW,
        ..s
    }))
}

/// Llama 4's chunked layers, as llama.cpp runs them: none where the file's window is 0 (its
/// converter writes 0 for files whose every layer is global); else chunks of [`LLAMA4_CHUNK`]
/// positions whatever the file's window, local layers by the file's pattern (one flag per
/// layer, or a period whose last layer is global; [`LLAMA4_PERIOD`] when absent), rotated on
/// `rope.freq_base_swa` (else the global base) with the global scaling.
fn llama4_chunks(md: &HashMap<String, Value>, key: &dyn Fn(&str) -> String, layers: usize, rope_base: f64) -> Result<Option<SlidingWindow>, ModelError> {
    if md_opt_usize(md, &key("attention.sliding_window"))? == Some(0) {
        return Ok(None);
    }
    let defaults = SlidingDefaults {
        window: Some(LLAMA4_CHUNK),
        period: LLAMA4_PERIOD,
        dense_first: false,
        rope_base,
        swa_base_key: true,
        rope: LocalRope::Scaled,
    };
    let s = sliding_window(md, key, layers, defaults)?;
    Ok(Some(SlidingWindow {
        window: LLAMA4_CHUNK,
        chunked: true,
        ..s
    }))
}

/// Sliding-window layers (Gemma, OLMo 3) from `{arch}.attention.sliding_window`, the pattern and the
/// local rope base, each the family's default where the file leaves it out (see the module
/// docs).
fn sliding_window(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    layers: usize,
    defaults: SlidingDefaults,
) -> Result<SlidingWindow, ModelError> {
    let bad = |k: &str, reason: String| ModelError::BadMetadata { key: key(k), reason };
    let window = match defaults.window {
        None => md_usize(md, &key("attention.sliding_window"))?,
        Some(w) => md_opt_usize(md, &key("attention.sliding_window"))?.unwrap_or(w),
    };
    if window == 0 {
        return Err(bad("attention.sliding_window", "a window of 0 positions".into()));
    }
    let local = match md.get(&key("attention.sliding_window_pattern")) {
        None => period_pattern(defaults.period, layers, defaults.dense_first),
        Some(Value::Array(flags)) => {
            let flags: Option<Vec<bool>> = flags
                .iter()
                .map(|v| match v {
                    Value::Bool(b) => Some(*b),
                    _ => None,
                })
                .collect();
            match flags {
                Some(f) if f.len() == layers => f,
                Some(f) => {
                    return Err(bad(
                        "attention.sliding_window_pattern",
                        format!("{} flags for {layers} layers", f.len()),
                    ))
                }
                None => {
                    return Err(bad(
                        "attention.sliding_window_pattern",
                        "an array of non-booleans".into(),
                    ))
                }
            }
        }
        Some(_) => {
            let period = md_usize(md, &key("attention.sliding_window_pattern"))?;
            period_pattern(period, layers, defaults.dense_first)
        }
    };
    let rope_base = match defaults.swa_base_key {
        true => md_opt_f64(md, &key("rope.freq_base_swa"))?.unwrap_or(defaults.rope_base),
        false => defaults.rope_base,
    };
    Ok(SlidingWindow {
        window,
        chunked: false,
        local,
        rope_base,
        rope: defaults.rope,
    })
}

/// Gemma 2's soft caps on attention scores and on logits: the file's
/// `attn_logit_softcapping` and `final_logit_softcapping`, else llama.cpp's 50 and 30; an
/// error naming the key when one is not a positive number. None for the other families.
fn softcaps(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
    (family, arch): (Family, &str),
) -> Result<[Option<f64>; 2], ModelError> {
    if family == Family::Gemma4 {
        // Gemma 4: the logits only; as llama.cpp, 30 where the file says nothing (Gemma 4's
        // own), none where it says 0.
        return match md_opt_f64(md, &key("final_logit_softcapping"))?.unwrap_or(GEMMA2_FINAL_SOFTCAP) {
            0.0 => Ok([None, None]),
            c if c.is_finite() && c > 0.0 => Ok([None, Some(c)]),
            c => Err(ModelError::BadMetadata {
                key: key("final_logit_softcapping"),
                reason: format!("{c} must be a positive number"),
            }),
        };
    }
    // (Gemma 1's files have none.)
    if family != Family::Gemma2 || arch == "gemma" {
        return Ok([None, None]);
    }
    let cap = |name: &str, default: f64| -> Result<Option<f64>, ModelError> {
        match md_opt_f64(md, &key(name))?.unwrap_or(default) {
            c if c.is_finite() && c > 0.0 => Ok(Some(c)),
            c => Err(ModelError::BadMetadata {
                key: key(name),
                reason: format!("{c} must be a positive number"),
            }),
        }
    };
    Ok([
        cap("attn_logit_softcapping", GEMMA2_ATTN_SOFTCAP)?,
        cap("final_logit_softcapping", GEMMA2_FINAL_SOFTCAP)?,
    ])
}

/// llama.cpp's `set_swa_pattern(n, dense_first)`: in every run of `n` layers the last (the
/// first, `dense_first`) is global; `n = 0` makes every layer local.
fn period_pattern(n: usize, layers: usize, dense_first: bool) -> Vec<bool> {
    (0..layers)
        .map(|il| match (n, dense_first) {
            (0, _) => true,
            (_, true) => il % n != 0,
            (_, false) => il % n < n - 1,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal `arch` file's metadata with `extra` keys (without the arch prefix) added.
    fn md(arch: &str, extra: &[(&str, Value)]) -> HashMap<String, Value> {
        let mut m: HashMap<String, Value> = [
            ("embedding_length", Value::U32(256)),
            ("attention.head_count", Value::U32(4)),
            ("block_count", Value::U32(2)),
            ("feed_forward_length", Value::U32(512)),
            ("context_length", Value::U32(4096)),
        ]
        .into_iter()
        .chain(extra.iter().cloned())
        .map(|(k, v)| (format!("{arch}.{k}"), v))
        .collect();
        m.insert("general.architecture".into(), Value::String(arch.into()));
        m
    }

    fn bad_key(m: &HashMap<String, Value>) -> String {
        match HParams::from_metadata(m, Some(100)) {
            Err(ModelError::BadMetadata { key, .. }) => key,
            other => panic!("expected bad metadata, got {other:?}"),
        }
    }

    #[test]
    fn rope_dims_default_to_the_head_and_may_be_fewer() {
        let hp = HParams::from_metadata(&md("phi3", &[]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.head_dim, hp.rope_dims), (Family::Phi3, 64, 64));
        assert_eq!(hp.rope_original_context, 4096);
        let hp = HParams::from_metadata(
            &md(
                "phi3",
                &[
                    ("rope.dimension_count", Value::U32(48)),
                    ("rope.scaling.original_context_length", Value::U32(1024)),
                ],
            ),
            Some(100),
        )
        .unwrap();
        assert_eq!((hp.rope_dims, hp.rope_original_context), (48, 1024));
        for bad in [0, 47, 66] {
            let m = md("phi3", &[("rope.dimension_count", Value::U32(bad))]);
            assert_eq!(bad_key(&m), "phi3.rope.dimension_count", "{bad}");
        }
    }

    /// AFMoE: post-norms, the embedding × √hidden, NeoX pairs, the output gate; windows where
    /// the file has one (three local layers, then a global one), every fourth layer without
    /// rope either way; sigmoid routing by default, the file's scale and renormalization, one
    /// shared expert's width per `expert_shared_count`, the leading dense layers.
    #[test]
    fn afmoe_reads_trinitys_layers() {
        let keys = [
            ("block_count", Value::U32(8)),
            ("attention.head_count_kv", Value::U32(2)),
            ("attention.sliding_window", Value::U32(2048)),
            ("expert_count", Value::U32(8)),
            ("expert_used_count", Value::U32(2)),
            ("expert_feed_forward_length", Value::U32(128)),
            ("expert_shared_count", Value::U32(1)),
            ("leading_dense_block_count", Value::U32(2)),
            ("expert_weights_scale", Value::F32(2.5)),
            ("expert_weights_norm", Value::Bool(true)),
        ];
        let hp = HParams::from_metadata(&md("afmoe", &keys), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.post_norms, hp.attn_gate), (Family::Llama, RopeStyle::Neox, true, true));
        assert_eq!(hp.embedding_scale, Some(16.0));
        let s = hp.sliding.as_ref().unwrap();
        assert_eq!((s.window, s.local.clone()), (2048, vec![true, true, true, false, true, true, true, false]));
        assert_eq!((0..8).filter(|&l| !hp.rotates(l)).collect::<Vec<_>>(), [3, 7]);
        let m = hp.moe.clone().unwrap();
        assert_eq!((m.gating, m.normalize, m.weights_scale, m.shared_ffn, m.dense_leading), (MoeGating::Sigmoid, true, 2.5, 128, 2));
        // Without a window every layer is global, every fourth still without rope.
        let plain: Vec<_> = keys.iter().filter(|(k, _)| *k != "attention.sliding_window").cloned().collect();
        let hp = HParams::from_metadata(&md("afmoe", &plain), Some(100)).unwrap();
        assert!(hp.sliding.is_none() && !hp.rotates(3) && hp.rotates(4));
        // The experts' width and the shared count are required.
        for k in ["expert_feed_forward_length", "expert_shared_count"] {
            let without: Vec<_> = keys.iter().filter(|(key, _)| *key != k).cloned().collect();
            assert!(HParams::from_metadata(&md("afmoe", &without), Some(100)).is_err(), "{k}");
        }
    }

    /// Jamba: Mamba in the layers without K/V heads (only the others keep K/V), no layer
    /// rotating, softmax-routed experts not renormalized, found where the file has a router.
    #[test]
    fn jamba_reads_mamba_layers_among_attention_without_rope() {
        let per_layer = |v: &[u32]| Value::Array(v.iter().map(|&x| Value::U32(x)).collect());
        let keys = [
            ("block_count", Value::U32(4)),
            ("attention.head_count_kv", per_layer(&[0, 0, 2, 0])),
            ("ssm.conv_kernel", Value::U32(4)),
            ("ssm.inner_size", Value::U32(512)),
            ("ssm.state_size", Value::U32(16)),
            ("ssm.time_step_rank", Value::U32(16)),
            ("expert_count", Value::U32(16)),
            ("expert_used_count", Value::U32(2)),
        ];
        let hp = HParams::from_metadata(&md("jamba", &keys), Some(100)).unwrap();
        let m = hp.mamba.clone().unwrap();
        assert_eq!((hp.family, m.layers.clone(), m.dt_rank), (Family::Llama, vec![true, true, false, true], 16));
        assert_eq!((hp.kv_heads, hp.kv_layers, hp.kv_layer(2)), (2, 1, 0));
        assert_eq!(hp.state_shape(), Some(vec![[3 * 512, 512 * 16]; 3]));
        assert!((0..4).all(|l| !hp.rotates(l)));
        let moe = hp.moe.unwrap();
        assert_eq!((moe.gating, moe.normalize, moe.where_routed, moe.expert_ffn), (MoeGating::Softmax, false, true, 512));
        // Every Mamba key is required, none may be 0.
        for k in ["ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank"] {
            let without: Vec<_> = keys.iter().filter(|(key, _)| *key != k).cloned().collect();
            assert!(HParams::from_metadata(&md("jamba", &without), Some(100)).is_err(), "{k}");
            let mut zero = keys.to_vec();
            zero.retain(|(key, _)| *key != k);
            zero.push((k, Value::U32(0)));
            assert!(HParams::from_metadata(&md("jamba", &zero), Some(100)).is_err(), "{k} 0");
        }
    }

    /// MiniCPM3: DeepSeek-V2's latent attention with NeoX pairs, V heads of the hidden width
    /// over the heads (its files give no `value_length`), no experts, MiniCPM's multipliers
    /// whatever the file says (the logits multiplied by 256 over the hidden width).
    #[test]
    fn minicpm3_reads_latent_attention_over_dense_layers() {
        let u = Value::U32;
        let keys = [
            ("embedding_length", u(2560)),
            ("attention.head_count", u(40)),
            ("attention.head_count_kv", u(40)),
            ("block_count", u(62)),
            ("attention.q_lora_rank", u(768)),
            ("attention.kv_lora_rank", u(256)),
            ("attention.key_length", u(96)),
            ("rope.dimension_count", u(32)),
            ("logit_scale", Value::F32(3.0)),
        ];
        let hp = HParams::from_metadata(&md("minicpm3", &keys), Some(100)).unwrap();
        let m = hp.mla.unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.moe.is_none()), (Family::DeepSeek2, RopeStyle::Neox, true));
        assert_eq!((m.q_lora_rank, m.kv_lora_rank, m.qk_nope, m.qk_rope, m.v_head), (768, 256, 64, 32, 64));
        assert_eq!((hp.kv_heads, hp.head_dim), (1, 288));
        assert!((hp.attention_scale - 1.0 / 96f64.sqrt()).abs() < 1e-12);
        assert_eq!((hp.embedding_scale, hp.logit_scale), (Some(12.0), Some(10.0)));
        assert!((hp.residual_scale.unwrap() - 1.4 / 62f64.sqrt()).abs() < 1e-12);
        // A K width is required.
        let no_k: Vec<_> = keys.iter().filter(|(k, _)| *k != "attention.key_length").cloned().collect();
        assert!(HParams::from_metadata(&md("minicpm3", &no_k), Some(100)).is_err());
    }

    /// DeepSeek-V2's latent attention: one K/V head of the latent and its rotated part, the
    /// heads' widths from the `_mla` keys (else the plain ones, in older files), the score scale
    /// with YaRN's `mscale_all_dim` (the file's multiplier over 0.1) and the rope tables'
    /// magnitude cancelled; experts required, GLM-4.7-Flash's sigmoid default.
    #[test]
    fn deepseek2_reads_its_latent_attention() {
        let u = |x: u32| Value::U32(x);
        let base = [
            ("expert_count", u(64)),
            ("expert_used_count", u(4)),
            ("expert_shared_count", u(1)),
            ("expert_feed_forward_length", u(128)),
            ("leading_dense_block_count", u(1)),
            ("attention.kv_lora_rank", u(512)),
            ("attention.key_length", u(576)),
            ("attention.value_length", u(512)),
            ("attention.key_length_mla", u(192)),
            ("attention.value_length_mla", u(128)),
            ("attention.head_count_kv", u(1)),
            ("rope.dimension_count", u(64)),
        ];
        let hp = HParams::from_metadata(&md("deepseek2", &base), Some(100)).unwrap();
        let m = hp.mla.unwrap();
        assert_eq!((m.q_lora_rank, m.kv_lora_rank, m.qk_nope, m.qk_rope, m.v_head), (0, 512, 128, 64, 128));
        assert_eq!((hp.kv_heads, hp.head_dim, hp.rope_dims), (1, 576, 64));
        assert_eq!(hp.kv_shape(), crate::ops::KvShape::uniform(2, 1, 576).with_v_from_k());
        assert_eq!(hp.rope_style, RopeStyle::Interleaved);
        assert!((hp.attention_scale - 1.0 / 192f64.sqrt()).abs() < 1e-12);
        let moe = hp.moe.as_ref().unwrap();
        assert_eq!((moe.gating, moe.shared_ffn, moe.dense_leading, moe.normalize), (MoeGating::Softmax, 128, 1, false));

        // V2-Lite's YaRN: ×40, mscale_all_dim 0.707 (the file's 0.0707).
        let mut yarn = base.to_vec();
        yarn.extend([
            ("rope.scaling.type", Value::String("yarn".into())),
            ("rope.scaling.factor", Value::F32(40.0)),
            ("rope.scaling.original_context_length", u(4096)),
            ("rope.scaling.yarn_log_multiplier", Value::F32(0.0707)),
        ]);
        let hp = HParams::from_metadata(&md("deepseek2", &yarn), Some(100)).unwrap();
        let mscale = 1.0 + 0.1 * 0.707 * 40f64.ln();
        assert!((hp.attention_scale - mscale * mscale / 192f64.sqrt()).abs() < 1e-6, "{}", hp.attention_scale);
        assert!(matches!(hp.rope_scaling, RopeScaling::Yarn { log_multiplier, .. } if log_multiplier == 1.0));
        // The same as a `mistral4` file: its tables keep their magnitude (multiplier 0.707), the
        // scores then the rope's factor undone.
        let hp = HParams::from_metadata(&md("mistral4", &yarn), Some(100)).unwrap();
        assert_eq!(hp.family, Family::DeepSeek2);
        assert!(matches!(hp.rope_scaling, RopeScaling::Yarn { log_multiplier, .. } if (log_multiplier - 0.707).abs() < 1e-6));
        let tables = (1.0 + 0.1 * 40f64.ln()) / mscale;
        let expected = (tables * mscale).powi(2) / 192f64.sqrt();
        assert!((hp.attention_scale - expected).abs() < 1e-6, "{}", hp.attention_scale);

        // An older file: the heads' widths under the plain keys.
        let old: Vec<_> = base
            .iter()
            .filter(|(k, _)| !k.ends_with("_mla"))
            .map(|(k, v)| match *k {
                "attention.key_length" => (*k, u(192)),
                "attention.value_length" => (*k, u(128)),
                _ => (*k, v.clone()),
            })
            .collect();
        let hp = HParams::from_metadata(&md("deepseek2", &old), Some(100)).unwrap();
        assert_eq!(hp.mla, Some(m));

        // GLM-4.7-Flash without a gating key: 47 layers and its vocabulary route by sigmoid.
        let mut glm = base.to_vec();
        glm.extend([("block_count", u(48)), ("nextn_predict_layers", u(1))]);
        let hp = HParams::from_metadata(&md("deepseek2", &glm), Some(GLM47_FLASH_VOCAB)).unwrap();
        assert_eq!((hp.layers, hp.moe.unwrap().gating), (47, MoeGating::Sigmoid));

        // Mistral Large 3's attention temperature: steps of `attention.temperature_length`,
        // which it then requires.
        let mut temp = base.to_vec();
        temp.push(("attention.temperature_scale", Value::F32(0.1)));
        assert!(HParams::from_metadata(&md("deepseek2", &temp), Some(100)).is_err());
        temp.push(("attention.temperature_length", u(8192)));
        let t = HParams::from_metadata(&md("deepseek2", &temp), Some(100)).unwrap().attn_temperature.unwrap();
        assert_eq!(t.floor, 8192);
        assert!((t.at(8192) - (1.0 + 0.1 * 2f32.ln())).abs() < 1e-6);

        let without = |key: &str| -> Vec<(&str, Value)> { base.iter().filter(|(k, _)| *k != key).cloned().collect() };
        for key in ["attention.kv_lora_rank", "expert_count", "expert_shared_count", "rope.dimension_count"] {
            assert!(HParams::from_metadata(&md("deepseek2", &without(key)), Some(100)).is_err(), "{key}");
        }
        let mut bad = base.to_vec();
        bad.push(("rope.dimension_count", u(192)));
        let err = HParams::from_metadata(&md("deepseek2", &bad), Some(100)).unwrap_err().to_string();
        assert!(err.contains("key_length_mla"), "{err}");
    }

    /// ERNIE 4.5's MoE files: softmax routing whatever the file says, renormalized; a shared
    /// expert of its own width, leading dense layers, the MoE layer step required.
    #[test]
    fn ernie45_moe_reads_its_layout() {
        let u = |x: u32| Value::U32(x);
        let base = [
            ("expert_count", u(64)),
            ("expert_used_count", u(6)),
            ("expert_feed_forward_length", u(1536)),
            ("expert_shared_feed_forward_length", u(3072)),
            ("leading_dense_block_count", u(1)),
            ("interleave_moe_layer_step", u(1)),
            ("expert_gating_func", u(2)),
        ];
        let hp = HParams::from_metadata(&md("ernie4_5-moe", &base), Some(100)).unwrap();
        assert_eq!(hp.family, Family::Ernie45);
        let m = hp.moe.unwrap();
        assert_eq!((m.gating, m.normalize, m.shared_ffn, m.dense_leading, m.layer_step), (MoeGating::Softmax, true, 3072, 1, 1));
        let without_step: Vec<_> = base.iter().filter(|(k, _)| *k != "interleave_moe_layer_step").cloned().collect();
        assert!(HParams::from_metadata(&md("ernie4_5-moe", &without_step), Some(100)).is_err());
        let mut zero = base.to_vec();
        zero.push(("interleave_moe_layer_step", u(0)));
        assert!(HParams::from_metadata(&md("ernie4_5-moe", &zero), Some(100)).is_err());
        // A dense ERNIE file has none.
        assert_eq!(HParams::from_metadata(&md("ernie4_5", &[]), Some(100)).unwrap().moe, None);
    }

    /// MiniCPM's files: Granite's multipliers from the file, else its older files' values; a
    /// key of 0 turns one off; `attention.scale` is not read; rope on whatever
    /// `rope.scaling.finetuned` says.
    #[test]
    fn minicpm_reads_granite_multipliers_with_its_defaults() {
        let f = Value::F32;
        let keys = [
            ("embedding_scale", f(2.0)),
            ("residual_scale", f(0.5)),
            ("logit_scale", f(4.0)),
            ("attention.scale", f(0.02)),
            ("rope.scaling.finetuned", Value::Bool(false)),
        ];
        let hp = HParams::from_metadata(&md("minicpm", &keys), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.no_rope.is_empty()), (Family::Granite, RopeStyle::Interleaved, true));
        assert_eq!((hp.embedding_scale, hp.residual_scale, hp.logit_scale), (Some(2.0), Some(0.5), Some(4.0)));
        assert_eq!(hp.attention_scale, 1.0 / 64f64.sqrt());
        // The older files: embedding × 12, residual × 1.4/√2 (two layers), logits ÷ 256/256.
        let older = HParams::from_metadata(&md("minicpm", &[]), Some(100)).unwrap();
        assert_eq!((older.embedding_scale, older.logit_scale), (Some(12.0), Some(1.0)));
        assert!((older.residual_scale.unwrap() - 1.4 / 2f64.sqrt()).abs() < 1e-12);
        let off = HParams::from_metadata(&md("minicpm", &[("residual_scale", f(0.0))]), Some(100)).unwrap();
        assert_eq!(off.residual_scale, None);
        assert_eq!(bad_key(&md("minicpm", &[("logit_scale", f(-1.0))])), "minicpm.logit_scale");
    }

    /// OLMoE's files: Qwen3 MoE's layer with Q and K normalized whole, experts required and of
    /// `feed_forward_length` (not divided by the experts used), weights neither renormalized nor
    /// scaled; a `qwen3moe` file keeps its per-head norms and renormalized weights.
    #[test]
    fn olmoe_reads_whole_qk_norms_and_unnormalized_experts() {
        let u = |x: u32| Value::U32(x);
        let experts = [("expert_count", u(64)), ("expert_used_count", u(8)), ("expert_weights_scale", Value::F32(2.0))];
        let hp = HParams::from_metadata(&md("olmoe", &experts), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.qk_norm_whole), (Family::Qwen3Moe, RopeStyle::Neox, true));
        let m = hp.moe.unwrap();
        assert_eq!((m.experts, m.experts_used, m.expert_ffn), (64, 8, 512));
        assert_eq!((m.gating, m.normalize, m.weights_scale, m.shared_ffn), (MoeGating::Softmax, false, 1.0, 0));
        assert!(matches!(
            HParams::from_metadata(&md("olmoe", &[]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "olmoe.expert_count"
        ));
        let qwen = HParams::from_metadata(&md("qwen3moe", &experts), Some(100)).unwrap();
        let m = qwen.moe.unwrap();
        assert_eq!((qwen.qk_norm_whole, m.expert_ffn, m.normalize), (false, 512 / 8, true));
        assert!(HParams::from_metadata(&md("olmo2", &[]), Some(100)).unwrap().qk_norm_whole);
    }

    /// `expert_gating_func` is read only where llama.cpp's graph reads it (GLM-4.5's,
    /// DeepSeek-V2's, LFM2's), and `expert_weights_scale` (GLM-4.5's, DeepSeek-V2's,
    /// Nemotron-H's): Mixtral's, Qwen3 MoE's, OLMoE's and Granite's route by an unscaled softmax
    /// whatever the file says, as llama.cpp's graphs do.
    #[test]
    fn only_some_graphs_read_the_gating_function() {
        let u = |x: u32| Value::U32(x);
        let experts = [("expert_count", u(8)), ("expert_used_count", u(2)), ("expert_gating_func", u(2))];
        let granite = [&experts[..], &[("logit_scale", Value::F32(8.0))]].concat();
        for (arch, keys) in [("llama", &experts[..]), ("qwen3moe", &experts), ("olmoe", &experts), ("granitemoe", &granite)] {
            let scaled = [keys, &[("expert_weights_scale", Value::F32(2.0))]].concat();
            let m = HParams::from_metadata(&md(arch, &scaled), Some(100)).unwrap().moe.unwrap();
            assert_eq!((m.gating, m.weights_scale), (MoeGating::Softmax, 1.0), "{arch}");
        }
        let glm = [&experts[..], &[("expert_shared_count", u(1))]].concat();
        let m = HParams::from_metadata(&md("glm4moe", &glm), Some(100)).unwrap().moe.unwrap();
        assert_eq!(m.gating, MoeGating::Sigmoid);
    }

    /// Hunyuan's dense files: Qwen3's layer with Q and K normalized after rope, the base scaled
    /// by NTK alpha (`base * alpha^(d/(d-2))`, d = 64 here) where the file gives one above 0;
    /// other architectures do not read the key; a single "expert" is no MoE.
    #[test]
    fn hunyuan_dense_scales_its_base_by_alpha_and_norms_after_rope() {
        let f = Value::F32;
        let alpha = [("rope.scaling.alpha", f(1000.0)), ("expert_count", Value::U32(1))];
        let hp = HParams::from_metadata(&md("hunyuan-dense", &alpha), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.qk_norm_after_rope, hp.qk_norm_whole), (Family::Qwen3, RopeStyle::Neox, true, false));
        assert!((hp.rope_base / (10_000.0 * 1000f64.powf(64.0 / 62.0)) - 1.0).abs() < 1e-9, "{}", hp.rope_base);
        assert!(hp.moe.is_none());
        let plain = HParams::from_metadata(&md("hunyuan-dense", &[("rope.scaling.alpha", f(0.0))]), Some(100)).unwrap();
        assert_eq!(plain.rope_base, 10_000.0);
        let qwen = HParams::from_metadata(&md("qwen3", &alpha), Some(100)).unwrap();
        assert_eq!((qwen.rope_base, qwen.qk_norm_after_rope), (10_000.0, false));
        assert_eq!(bad_key(&md("hunyuan-dense", &[("rope.scaling.alpha", f(1e35))])), "hunyuan-dense.rope.scaling.alpha");
    }

    /// Hunyuan-A13B's files: Qwen3 MoE's layer with Q and K normalized after rope, routed by
    /// a softmax, renormalized and unscaled whatever the file says, beside a shared expert of
    /// `expert_shared_feed_forward_length`; `expert_feed_forward_length` required and alpha
    /// not read (as llama.cpp's `hunyuan-moe`).
    #[test]
    fn hunyuan_moe_reads_a_shared_expert_and_norms_after_rope() {
        let u = |x: u32| Value::U32(x);
        let keys = [
            ("expert_count", u(64)),
            ("expert_used_count", u(8)),
            ("expert_feed_forward_length", u(512)),
            ("expert_shared_feed_forward_length", u(1024)),
            ("expert_weights_scale", Value::F32(2.0)),
            ("expert_gating_func", u(2)),
            ("rope.scaling.alpha", Value::F32(1000.0)),
        ];
        let hp = HParams::from_metadata(&md("hunyuan-moe", &keys), Some(100)).unwrap();
        assert_eq!((hp.family, hp.qk_norm_after_rope, hp.rope_base), (Family::Qwen3Moe, true, 10_000.0));
        let m = hp.moe.unwrap();
        assert_eq!((m.experts, m.experts_used, m.expert_ffn, m.shared_ffn), (64, 8, 512, 1024));
        assert_eq!((m.gating, m.normalize, m.weights_scale, m.shared_gate), (MoeGating::Softmax, true, 1.0, false));
        let without: Vec<_> = keys.iter().filter(|(k, _)| *k != "expert_feed_forward_length").cloned().collect();
        assert!(matches!(
            HParams::from_metadata(&md("hunyuan-moe", &without), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "hunyuan-moe.expert_feed_forward_length"
        ));
        let qwen = HParams::from_metadata(&md("qwen3moe", &keys), Some(100)).unwrap();
        assert_eq!((qwen.qk_norm_after_rope, qwen.moe.unwrap().shared_ffn), (false, 0));
    }

    /// Maincoder's files: Llama's layer (interleaved pairs) with Q and K normalized after rope.
    #[test]
    fn maincoder_is_llama_with_norms_after_rope() {
        let hp = HParams::from_metadata(&md("maincoder", &[]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.qk_norm_after_rope), (Family::Llama, RopeStyle::Interleaved, true));
        assert!(!HParams::from_metadata(&md("llama", &[]), Some(100)).unwrap().qk_norm_after_rope);
    }

    /// InternLM2's, EXAONE 3.5's, Arcee's and XVERSE's files are Llama's layer; EXAONE's
    /// rotates NeoX pairs, Arcee's MLP has no gate.
    #[test]
    fn internlm2_exaone_and_arcee_read_as_llama() {
        for (arch, style, mlp) in [
            ("internlm2", RopeStyle::Interleaved, MlpKind::Gated),
            ("exaone", RopeStyle::Neox, MlpKind::Gated),
            ("arcee", RopeStyle::Interleaved, MlpKind::UpReluSquared),
            ("xverse", RopeStyle::Interleaved, MlpKind::Gated),
            ("llama", RopeStyle::Interleaved, MlpKind::Gated),
        ] {
            let hp = HParams::from_metadata(&md(arch, &[]), Some(100)).unwrap();
            assert_eq!((hp.family, hp.rope_style, hp.moe, hp.mlp, hp.out_biases), (Family::Llama, style, None, mlp, false), "{arch}");
        }
    }

    /// Qwen2's MoE files: experts required, softmax routing whatever the file says, the
    /// chosen weights neither renormalized nor scaled, a gated shared expert of its own width
    /// (else `feed_forward_length`), the experts' width else `feed_forward_length / used`. A
    /// `qwen2` file's experts are not read, as llama.cpp's `qwen2` graph reads none.
    #[test]
    fn qwen2moe_reads_its_experts_and_gated_shared_expert() {
        let u = |x: u32| Value::U32(x);
        let base = [
            ("expert_count", u(60)),
            ("expert_used_count", u(4)),
            ("expert_feed_forward_length", u(1408)),
            ("expert_shared_feed_forward_length", u(5632)),
            ("expert_gating_func", u(2)),
            ("expert_weights_scale", Value::F32(2.0)),
        ];
        let hp = HParams::from_metadata(&md("qwen2moe", &base), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style), (Family::Qwen2, RopeStyle::Neox));
        let m = hp.moe.unwrap();
        assert_eq!((m.experts, m.experts_used, m.expert_ffn, m.shared_ffn), (60, 4, 1408, 5632));
        assert_eq!((m.gating, m.normalize, m.weights_scale, m.shared_gate), (MoeGating::Softmax, false, 1.0, true));
        assert_eq!((m.dense_leading, m.layer_step, m.biases, m.ungated()), (0, 1, false, false));
        let fallback = HParams::from_metadata(&md("qwen2moe", &base[..2]), Some(100)).unwrap().moe.unwrap();
        assert_eq!((fallback.expert_ffn, fallback.shared_ffn), (512 / 4, 512));
        assert!(matches!(
            HParams::from_metadata(&md("qwen2moe", &[]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "qwen2moe.expert_count"
        ));
        assert_eq!(bad_key(&md("qwen2moe", &[("expert_count", u(0)), ("expert_used_count", u(0))])), "qwen2moe.expert_count");
        assert_eq!(HParams::from_metadata(&md("qwen2", &base), Some(100)).unwrap().moe, None);
    }

    #[test]
    fn mistral3_reads_its_yarn_parameters_and_attention_temperature() {
        let yarn = |arch: &str| {
            md(
                arch,
                &[
                    ("rope.scaling.type", Value::String("yarn".into())),
                    ("rope.scaling.factor", Value::F32(16.0)),
                    ("rope.scaling.original_context_length", Value::U32(1024)),
                    ("rope.scaling.yarn_beta_fast", Value::F32(8.0)),
                    ("rope.scaling.yarn_beta_slow", Value::F32(2.0)),
                    ("rope.scaling.yarn_log_multiplier", Value::F32(1.0)),
                    ("attention.temperature_scale", Value::F32(0.1)),
                ],
            )
        };
        let hp = HParams::from_metadata(&yarn("mistral3"), Some(100)).unwrap();
        assert_eq!(hp.family.rope_style(), RopeStyle::Interleaved);
        assert_eq!(
            hp.rope_scaling,
            RopeScaling::Yarn {
                factor: 16.0,
                original_context: 1024,
                beta_fast: 8.0,
                beta_slow: 2.0,
                log_multiplier: 1.0
            }
        );
        let t = hp.attn_temperature.unwrap();
        assert_eq!((t.at(0), t.at(1023)), (1.0, 1.0));
        assert!((t.at(1024) - (1.0 + 0.1 * 2f32.ln())).abs() < 1e-6);
        assert!((t.at(5000) - (1.0 + 0.1 * 5f32.ln())).abs() < 1e-6);
        // Other families keep llama.cpp's defaults and no temperature, as llama.cpp reads them.
        let hp = HParams::from_metadata(&yarn("qwen3"), Some(100)).unwrap();
        assert!(matches!(
            hp.rope_scaling,
            RopeScaling::Yarn { beta_fast: 32.0, beta_slow: 1.0, log_multiplier: 0.0, .. }
        ));
        assert_eq!(hp.attn_temperature, None);
        // Mixture-of-experts mistral3 files are refused with the key named.
        assert_eq!(bad_key(&md("mistral3", &[("expert_count", Value::U32(8))])), "mistral3.expert_count");
    }
    /// GLM-4 rotates adjacent pairs unless its file has M-RoPE sections (NeoX pairs then, as
    /// llama.cpp's converter permuted Q and K for them); all-zero sections are none; its MoE
    /// files are refused.
    #[test]
    fn glm4_rotates_adjacent_pairs_unless_its_file_has_mrope_sections() {
        let sections = |v: [i32; 4]| ("rope.dimension_sections", Value::Array(v.iter().map(|&n| Value::I32(n)).collect()));
        let hp = HParams::from_metadata(&md("glm4", &[("rope.dimension_count", Value::U32(32))]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_dims, hp.rope_style), (Family::Glm4, 32, RopeStyle::Interleaved));
        let hp = HParams::from_metadata(&md("glm4", &[sections([8, 12, 12, 0])]), Some(100)).unwrap();
        assert_eq!(hp.rope_style, RopeStyle::Neox);
        let hp = HParams::from_metadata(&md("glm4", &[sections([0; 4])]), Some(100)).unwrap();
        assert_eq!(hp.rope_style, RopeStyle::Interleaved);
        // Other families keep theirs whatever the key says.
        let hp = HParams::from_metadata(&md("llama", &[sections([8, 12, 12, 0])]), Some(100)).unwrap();
        assert_eq!(hp.rope_style, RopeStyle::Interleaved);
        let bad = md("glm4", &[("rope.dimension_sections", Value::String("8,12,12".into()))]);
        assert_eq!(bad_key(&bad), "glm4.rope.dimension_sections");
        assert_eq!(bad_key(&md("glm4", &[("expert_count", Value::U32(8))])), "glm4.expert_count");
    }

    /// gpt-oss as its files write it: the window on even layers, softmax over the chosen experts
    /// without renormalization, biases, YaRN; the window required.
    #[test]
    fn gpt_oss_reads_its_window_and_routing() {
        // As the published files: no gating key (llama.cpp's graph fixes it), 128-position windows
        // on even layers, YaRN ×32 over 4,096.
        let keys = [
            ("expert_count", Value::U32(32)),
            ("expert_used_count", Value::U32(4)),
            ("expert_feed_forward_length", Value::U32(2880)),
            ("attention.sliding_window", Value::U32(128)),
            ("rope.scaling.type", Value::String("yarn".into())),
            ("rope.scaling.factor", Value::F32(32.0)),
            ("rope.scaling.original_context_length", Value::U32(4096)),
            ("block_count", Value::U32(4)),
        ];
        let hp = HParams::from_metadata(&md("gpt-oss", &keys), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style), (Family::GptOss, RopeStyle::Neox));
        let m = hp.moe.clone().unwrap();
        assert_eq!((m.gating, m.normalize, m.biases, m.experts_used, m.expert_ffn), (MoeGating::SoftmaxWeight, false, true, 4, 2880));
        assert_eq!((0..4).map(|l| hp.window(l)).collect::<Vec<_>>(), [Some(Window::Sliding(128)), None, Some(Window::Sliding(128)), None]);
        assert!(matches!(hp.rope_scaling, RopeScaling::Yarn { factor, original_context: 4096, .. } if factor == 32.0));
        // The window is required, as llama.cpp requires it.
        let no_window: Vec<(&str, Value)> = keys.iter().filter(|(k, _)| *k != "attention.sliding_window").cloned().collect();
        assert!(HParams::from_metadata(&md("gpt-oss", &no_window), Some(100)).is_err());
    }

    /// BitNet b1.58's files: Llama's layer with NeoX rope and its norms inside the blocks; the
    /// MLP's gate SiLU unless `hidden_activation` says `relu2`, another activation refused.
    #[test]
    fn bitnet_reads_its_activation() {
        let hp = HParams::from_metadata(&md("bitnet", &[]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.sub_norms, hp.relu_squared_gate), (Family::Llama, RopeStyle::Neox, true, false));
        let relu2 = HParams::from_metadata(&md("bitnet", &[("hidden_activation", Value::String("relu2".into()))]), Some(100)).unwrap();
        assert!(relu2.relu_squared_gate);
        assert_eq!(bad_key(&md("bitnet", &[("hidden_activation", Value::String("gelu".into()))])), "bitnet.hidden_activation");
        let llama = HParams::from_metadata(&md("llama", &[("hidden_activation", Value::String("relu2".into()))]), Some(100)).unwrap();
        assert!(!llama.sub_norms && !llama.relu_squared_gate);
    }

    /// Nanbeige 4.2's files: Llama's layer looped `num_loops` times, each pass with store
    /// layers of its own; the final norm between passes unless the file skips it; no passes
    /// refused.
    #[test]
    fn nanbeige_loops_its_layers() {
        let hp = HParams::from_metadata(&md("nanbeige", &[("num_loops", Value::U32(3))]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.loops, hp.loop_norm), (Family::Llama, RopeStyle::Interleaved, 3, true));
        assert_eq!((hp.kv_layers, hp.kv_shape().layers()), (2, 6));
        let skip = HParams::from_metadata(&md("nanbeige", &[("skip_loop_final_norm", Value::Bool(true))]), Some(100)).unwrap();
        assert_eq!((skip.loops, skip.loop_norm, skip.kv_shape().layers()), (1, false, 2));
        assert_eq!(bad_key(&md("nanbeige", &[("num_loops", Value::U32(0))])), "nanbeige.num_loops");
        let llama = HParams::from_metadata(&md("llama", &[("num_loops", Value::U32(3))]), Some(100)).unwrap();
        assert_eq!((llama.loops, llama.kv_shape().layers()), (1, 2));
    }

    /// Mellum 2's files: Qwen3 MoE's layer; where the file has a window, three local layers
    /// then a global one, the local ones on the global base without its scaling (whatever
    /// `rope.freq_base_swa` says); the experts' width required, as llama.cpp requires it.
    #[test]
    fn mellum_reads_its_windows() {
        let keys = vec![
            ("block_count", Value::U32(8)),
            ("expert_count", Value::U32(8)),
            ("expert_used_count", Value::U32(2)),
            ("expert_feed_forward_length", Value::U32(128)),
            ("rope.freq_base", Value::F32(5e5)),
            ("rope.freq_base_swa", Value::F32(1e4)),
            ("attention.sliding_window", Value::U32(1024)),
        ];
        let hp = HParams::from_metadata(&md("mellum", &keys), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style), (Family::Qwen3Moe, RopeStyle::Neox));
        assert_eq!((0..4).map(|l| hp.window(l)).collect::<Vec<_>>(), [Some(Window::Sliding(1024)), Some(Window::Sliding(1024)), Some(Window::Sliding(1024)), None]);
        let s = hp.sliding.clone().unwrap();
        assert_eq!((s.rope_base, s.rope), (5e5, LocalRope::Plain));
        assert_eq!(hp.moe.as_ref().map(|m| (m.expert_ffn, m.normalize)), Some((128, true)));
        let no_window: Vec<(&str, Value)> = keys.iter().filter(|(k, _)| *k != "attention.sliding_window").cloned().collect();
        assert!(HParams::from_metadata(&md("mellum", &no_window), Some(100)).unwrap().sliding.is_none());
        let no_width: Vec<(&str, Value)> = keys.iter().filter(|(k, _)| *k != "expert_feed_forward_length").cloned().collect();
        assert!(matches!(HParams::from_metadata(&md("mellum", &no_width), Some(100)), Err(ModelError::MissingMetadata { .. })));
    }

    /// Gemma 3n's files: Gemma 4's E models' layer of one head shape, AltUp's streams and
    /// the MLPs' sparsity read from the file (−∞: a dense layer); without the keys, llama.cpp's
    /// constants (20 layers keeping K/V, per-layer inputs of 256, four local layers then a
    /// global one, the first ten layers sparse); a stream other than the first as the active
    /// one refused.
    #[test]
    fn gemma3n_reads_its_layers() {
        let layers = 30;
        let sparsity: Vec<Value> = (0..layers).map(|l| Value::F32(if l < 10 { 1.644_853_4 } else { f32::NEG_INFINITY })).collect();
        let keys = vec![
            ("block_count", Value::U32(layers as u32)),
            ("attention.head_count", Value::U32(8)),
            ("attention.head_count_kv", Value::U32(2)),
            ("attention.key_length", Value::U32(256)),
            ("attention.value_length", Value::U32(256)),
            ("attention.sliding_window", Value::U32(512)),
            ("attention.sliding_window_pattern", Value::Array((0..layers).map(|l| Value::Bool(l % 5 != 4)).collect())),
            ("attention.shared_kv_layers", Value::U32(10)),
            ("embedding_length_per_layer_input", Value::U32(256)),
            ("altup.active_idx", Value::U32(0)),
            ("altup.num_inputs", Value::U32(4)),
            ("activation_sparsity_scale", Value::Array(sparsity)),
        ];
        let hp = HParams::from_metadata(&md("gemma3n", &keys), Some(100)).unwrap();
        assert_eq!((hp.family, hp.attention_scale, hp.final_softcap, hp.rope_style), (Family::Gemma4, 1.0, Some(30.0), RopeStyle::Neox));
        let a = hp.altup.clone().unwrap();
        assert_eq!(a.inputs, 4);
        assert_eq!((a.sparsity[9], a.sparsity[10]), (Some(1.644_853_4), None));
        assert_eq!((hp.kv_layers, hp.kv_layer(20), hp.kv_layer(24), hp.per_layer_input), (20, 18, 19, 256));
        assert_eq!(hp.attn_shape(4), hp.attn_shape(0));
        // Without the keys: llama.cpp's constants.
        let bare: Vec<(&str, Value)> = keys
            .iter()
            .filter(|(k, _)| !matches!(*k, "attention.sliding_window_pattern" | "attention.shared_kv_layers" | "embedding_length_per_layer_input" | "activation_sparsity_scale" | "altup.num_inputs"))
            .cloned()
            .collect();
        let hp = HParams::from_metadata(&md("gemma3n", &bare), Some(100)).unwrap();
        assert_eq!((hp.kv_layers, hp.per_layer_input), (20, 256));
        assert_eq!((0..6).map(|l| hp.window(l).is_some()).collect::<Vec<_>>(), [true, true, true, true, false, true]);
        let a = hp.altup.unwrap();
        assert_eq!((a.inputs, a.sparsity.iter().filter(|s| s.is_some()).count(), a.sparsity[0]), (4, 10, Some(GEMMA3N_SPARSITY)));
        let with = |k: &'static str, v: Value| {
            let mut all = keys.clone();
            all.retain(|(key, _)| *key != k);
            all.push((k, v));
            all
        };
        assert_eq!(bad_key(&md("gemma3n", &with("altup.active_idx", Value::U32(1)))), "gemma3n.altup.active_idx");
        assert_eq!(bad_key(&md("gemma3n", &with("altup.num_inputs", Value::U32(1)))), "gemma3n.altup.num_inputs");
        let nan = Value::Array((0..layers).map(|_| Value::F32(f32::NAN)).collect());
        assert_eq!(bad_key(&md("gemma3n", &with("activation_sparsity_scale", nan))), "gemma3n.activation_sparsity_scale");
    }

    /// Gemma 4's E models as their files write them: local and global layers of different
    /// heads (K/V heads per layer), the last layers sharing the K/V of the last earlier layer
    /// of their kind, MLP widths per layer, per-layer input width; the cap on logits 30 when
    /// absent, none at 0.
    #[test]
    fn gemma4_reads_its_layers() {
        let u = |v: &[u32]| Value::Array(v.iter().map(|&x| Value::U32(x)).collect());
        let pattern = [true, true, false, true, true, false, true, false];
        let keys = vec![
            ("block_count", Value::U32(8)),
            ("attention.head_count", Value::U32(8)),
            ("attention.head_count_kv", u(&pattern.map(|l| if l { 2 } else { 1 }))),
            ("attention.key_length", Value::U32(512)),
            ("attention.value_length", Value::U32(512)),
            ("attention.key_length_swa", Value::U32(256)),
            ("attention.value_length_swa", Value::U32(256)),
            ("rope.dimension_count", Value::U32(512)),
            ("rope.dimension_count_swa", Value::U32(256)),
            ("rope.freq_base", Value::F32(1e6)),
            ("rope.freq_base_swa", Value::F32(1e4)),
            ("attention.sliding_window", Value::U32(512)),
            ("attention.sliding_window_pattern", Value::Array(pattern.iter().map(|&b| Value::Bool(b)).collect())),
            ("attention.shared_kv_layers", Value::U32(3)),
            ("embedding_length_per_layer_input", Value::U32(64)),
            ("feed_forward_length", u(&[512, 512, 512, 512, 512, 1024, 1024, 1024])),
        ];
        let hp = HParams::from_metadata(&md("gemma4", &keys), Some(100)).unwrap();
        assert_eq!((hp.family, hp.attention_scale, hp.final_softcap), (Family::Gemma4, 1.0, Some(30.0)));
        let local = AttnShape { heads: 8, kv_heads: 2, head_dim: 256, rope_dims: 256 };
        let global = AttnShape { heads: 8, kv_heads: 1, head_dim: 512, rope_dims: 512 };
        assert_eq!(hp.attn_shape(0), local);
        assert_eq!(hp.attn_shape(2), global);
        // Layers 0..5 keep K/V; 5 (global) reads 2, 6 (local) reads 4, 7 (global) reads 2.
        assert_eq!(hp.kv_layers, 5);
        assert_eq!((0..8).map(|l| hp.kv_layer(l)).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 2, 4, 2]);
        let shape = hp.kv_shape();
        assert_eq!(shape.layers(), 5);
        assert_eq!((shape.layer(1).head_dim, shape.layer(2).head_dim, shape.layer(2).kv_heads), (256, 512, 1));
        assert_eq!((hp.ffn_of(0), hp.ffn_of(6), hp.per_layer_input), (512, 1024, 64));
        assert_eq!(hp.sliding.as_ref().map(|s| s.rope_base), Some(1e4));
        let with = |k: &'static str, v: Value| {
            let mut all = keys.clone();
            all.retain(|(key, _)| *key != k);
            all.push((k, v));
            all
        };
        let capped = HParams::from_metadata(&md("gemma4", &with("final_logit_softcapping", Value::F32(0.0))), Some(100));
        assert_eq!(capped.unwrap().final_softcap, None);
        // Local layers of two K/V counts; sharing that leaves a kind without a K/V layer.
        let mixed = u(&[2, 4, 1, 2, 2, 1, 2, 1]);
        assert_eq!(bad_key(&md("gemma4", &with("attention.head_count_kv", mixed))), "gemma4.attention.head_count_kv");
        assert_eq!(bad_key(&md("gemma4", &with("attention.shared_kv_layers", Value::U32(6)))), "gemma4.attention.shared_kv_layers");
        // The pattern is required.
        let no_pattern: Vec<(&str, Value)> =
            keys.iter().filter(|(k, _)| *k != "attention.sliding_window_pattern").cloned().collect();
        assert!(matches!(
            HParams::from_metadata(&md("gemma4", &no_pattern), Some(100)),
            Err(ModelError::MissingMetadata { .. })
        ));
    }

    /// GLM-4.5's routing as llama.cpp reads it: sigmoid unless the file says, weights not
    /// renormalized unless it says, its scale, the shared expert's width, the leading dense
    /// layers; Qwen3 MoE keeps softmax, renormalized. Expert groups are read where they make sense.
    #[test]
    fn glm4moe_reads_its_routing() {
        fn base(extra: &[(&'static str, Value)]) -> Vec<(&'static str, Value)> {
            let mut all = vec![
                ("expert_count", Value::U32(8)),
                ("expert_used_count", Value::U32(2)),
                ("expert_feed_forward_length", Value::U32(64)),
                ("expert_shared_count", Value::U32(1)),
            ];
            all.extend(extra.iter().cloned());
            all
        }
        let hp = HParams::from_metadata(&md("glm4moe", &base(&[])), Some(100)).unwrap();
        let m = hp.moe.unwrap();
        assert_eq!((m.gating, m.normalize, m.weights_scale, m.shared_ffn, m.dense_leading), (MoeGating::Sigmoid, false, 1.0, 64, 0));
        assert_eq!(hp.rope_style, RopeStyle::Neox);
        let extra = [
            ("expert_weights_norm", Value::Bool(true)),
            ("expert_weights_scale", Value::F32(2.5)),
            ("leading_dense_block_count", Value::U32(1)),
            ("expert_gating_func", Value::U32(2)),
        ];
        let m = HParams::from_metadata(&md("glm4moe", &base(&extra)), Some(100)).unwrap().moe.unwrap();
        assert_eq!((m.normalize, m.weights_scale, m.dense_leading), (true, 2.5, 1));
        let q = HParams::from_metadata(&md("qwen3moe", &base(&[])), Some(100)).unwrap().moe.unwrap();
        assert_eq!((q.gating, q.normalize, q.shared_ffn), (MoeGating::Softmax, true, 0));
        // Groups: 4 of 2 experts, the best 2 used; groups of one expert, or too few used to
        // hold a token's experts, refused.
        let grouped = [("expert_group_count", Value::U32(4)), ("expert_group_used_count", Value::U32(2))];
        let m = HParams::from_metadata(&md("glm4moe", &base(&grouped)), Some(100)).unwrap().moe.unwrap();
        assert_eq!(m.groups, Some(ExpertGroups { count: 4, used: 2 }));
        let groups = md("glm4moe", &base(&[("expert_group_count", Value::U32(8)), ("expert_group_used_count", Value::U32(4))]));
        assert_eq!(bad_key(&groups), "glm4moe.expert_group_count");
        let groups = md("glm4moe", &base(&[("expert_group_count", Value::U32(4))]));
        assert_eq!(bad_key(&groups), "glm4moe.expert_group_used_count");
        let one = md("glm4moe", &base(&[("expert_group_count", Value::U32(1))]));
        assert_eq!(HParams::from_metadata(&one, Some(100)).unwrap().moe.unwrap().groups, None);
        let gating = md("glm4moe", &base(&[("expert_gating_func", Value::U32(4))]));
        assert_eq!(bad_key(&gating), "glm4moe.expert_gating_func");
        let no_shared: Vec<(&str, Value)> = base(&[]).into_iter().filter(|(k, _)| *k != "expert_shared_count").collect();
        assert!(matches!(
            HParams::from_metadata(&md("glm4moe", &no_shared), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "glm4moe.expert_shared_count"
        ));
    }

    /// Each family's own architecture comes first in the list, in `Family::ALL`'s order; the
    /// others (Qwen3-VL's) name a family too.
    #[test]
    fn every_family_is_one_supported_architecture() {
        let arches: Vec<&str> = Family::ALL.iter().map(|f| f.arch()).collect();
        assert_eq!(arches, SUPPORTED_ARCHITECTURES[..Family::ALL.len()]);
        for f in Family::ALL {
            assert_eq!(Family::from_arch(f.arch()).unwrap(), f);
        }
        assert_eq!(Family::from_arch("qwen3vl").unwrap(), Family::Qwen3);
        assert_eq!(Family::from_arch("qwen3vlmoe").unwrap(), Family::Qwen3Moe);
        assert_eq!(Family::from_arch("qwen2vl").unwrap(), Family::Qwen2);
        assert!(SUPPORTED_ARCHITECTURES.iter().all(|a| Family::from_arch(a).is_ok()));
    }

    /// Gemma 2 as llama.cpp reads it: without the sliding-window keys, a window of 4,096 with
    /// even layers local on the global rope base and scaling; soft caps 50 and 30 unless the
    /// file says; the 27B's query scale; bad caps refused with the key named.
    #[test]
    fn gemma2_reads_its_window_and_soft_caps() {
        let hp = HParams::from_metadata(&md("gemma2", &[("block_count", Value::U32(4))]), Some(100)).unwrap();
        assert_eq!(hp.family.rope_style(), RopeStyle::Neox);
        let s = hp.sliding.as_ref().unwrap();
        assert_eq!((s.window, s.rope_base, s.rope), (4096, 10_000.0, LocalRope::Scaled));
        assert_eq!(s.local, [true, false, true, false]);
        assert_eq!((hp.window(0), hp.window(1)), (Some(Window::Sliding(4096)), None));
        assert_eq!((hp.attn_softcap, hp.final_softcap), (Some(50.0), Some(30.0)));
        assert_eq!(hp.embedding_scale, Some(16.0));
        assert_eq!(hp.attention_scale, 1.0 / 8.0);

        let hp = HParams::from_metadata(
            &md(
                "gemma2",
                &[
                    ("attention.sliding_window", Value::U32(512)),
                    ("attention.sliding_window_pattern", Value::U32(3)),
                    ("rope.freq_base", Value::F32(20_000.0)),
                    ("attn_logit_softcapping", Value::F32(25.0)),
                    ("final_logit_softcapping", Value::F32(12.0)),
                    ("block_count", Value::U32(3)),
                ],
            ),
            Some(100),
        )
        .unwrap();
        let s = hp.sliding.as_ref().unwrap();
        assert_eq!((s.window, s.rope_base, s.local.as_slice()), (512, 20_000.0, &[true, true, false][..]));
        assert_eq!((hp.attn_softcap, hp.final_softcap), (Some(25.0), Some(12.0)));

        // The 27B (46 layers): queries scaled by hidden / heads, not the head dimension.
        let big = md(
            "gemma2",
            &[("block_count", Value::U32(46)), ("attention.key_length", Value::U32(128))],
        );
        assert_eq!(HParams::from_metadata(&big, Some(100)).unwrap().attention_scale, 1.0 / 8.0);
        for (key, v) in [("attn_logit_softcapping", 0.0), ("final_logit_softcapping", -1.0)] {
            assert_eq!(bad_key(&md("gemma2", &[(key, Value::F32(v))])), format!("gemma2.{key}"));
        }
        // No other family soft-caps anything.
        let hp = HParams::from_metadata(&md("gemma3", &[("attention.sliding_window", Value::U32(512))]), Some(100)).unwrap();
        assert_eq!((hp.attn_softcap, hp.final_softcap), (None, None));
        assert_eq!(hp.sliding.unwrap().rope, LocalRope::Unscaled);
    }

    /// nomic-embed-text-v2-moe (`nomic-bert-moe`): BERT's layer, biased, over NeoX rope, its
    /// experts in the layers llama.cpp gives them (`il % moe_every_n_layers == 1`: the odd ones
    /// of 2, every third from 1 of 3), GELU without a gate, softmax weights unrenormalized; none
    /// where `moe_every_n_layers` is absent or 1. jina-embeddings-v3 (`jina-bert-v3`): the
    /// same layer, no experts. jina-embeddings-v2 (`jina-bert-v2`): ALiBi, the gate optional.
    #[test]
    fn nomic_bert_moe_routes_the_layers_llama_cpp_routes() {
        let eps = ("attention.layer_norm_epsilon", Value::F32(1e-12));
        let file = |every: Option<u32>| {
            let mut extra = vec![eps.clone(), ("block_count", Value::U32(12)), ("expert_count", Value::U32(8)), ("expert_used_count", Value::U32(2))];
            extra.extend(every.map(|n| ("moe_every_n_layers", Value::U32(n))));
            HParams::from_metadata(&md("nomic-bert-moe", &extra), Some(100)).unwrap()
        };
        let hp = file(Some(2));
        assert_eq!((hp.family, hp.encoder, hp.bert_layers, hp.rope_style, hp.mlp, hp.out_biases, hp.learned_positions), (Family::Llama, true, true, RopeStyle::Neox, MlpKind::UpGelu, true, false));
        let m = hp.moe.unwrap();
        assert_eq!((m.experts, m.experts_used, m.expert_ffn, m.gating, m.normalize, m.expert_mlp), (8, 2, 512, MoeGating::Softmax, false, MlpKind::UpGelu));
        assert_eq!((0..12).filter(|&i| m.routes(i)).collect::<Vec<_>>(), vec![1, 3, 5, 7, 9, 11]);
        let three = file(Some(3)).moe.unwrap();
        assert_eq!((0..12).filter(|&i| three.routes(i)).collect::<Vec<_>>(), vec![1, 4, 7, 10]);
        assert_eq!((file(Some(1)).moe, file(None).moe), (None, None));
        // jina-embeddings-v2: ALiBi's slopes in place of any position, its MLP's gate optional.
        let v2 = HParams::from_metadata(&md("jina-bert-v2", std::slice::from_ref(&eps)), Some(100)).unwrap();
        assert_eq!((v2.encoder, v2.bert_layers, v2.gate_optional, v2.learned_positions, v2.out_biases), (true, true, true, false, true));
        assert_eq!(v2.alibi_slopes(), Some(vec![0.25, 0.0625, 0.015625, 0.00390625]));
        let jina = HParams::from_metadata(&md("jina-bert-v3", &[eps]), Some(100)).unwrap();
        assert_eq!((jina.encoder, jina.bert_layers, jina.rope_style, jina.mlp, jina.out_biases, jina.moe), (true, true, RopeStyle::Neox, MlpKind::UpGelu, true, None));
    }

    /// EmbeddingGemma (`gemma-embedding`): Gemma 3's layer as an encoder (not BERT's), its
    /// local layers' window symmetric, its projections' width read; without `attention.causal`
    /// false a Gemma 3 file stays causal.
    #[test]
    fn embedding_gemma_is_a_gemma3_encoder_with_a_symmetric_window() {
        let hp = HParams::from_metadata(
            &md(
                "gemma-embedding",
                &[
                    ("attention.sliding_window", Value::U32(512)),
                    ("attention.causal", Value::Bool(false)),
                    ("pooling_type", Value::U32(1)),
                    ("dense_2_feat_out", Value::U32(3072)),
                ],
            ),
            Some(100),
        )
        .unwrap();
        assert_eq!((hp.family, hp.encoder, hp.bert_layers, hp.dense_out), (Family::Gemma3, true, false, Some(3072)));
        assert_eq!(hp.window(0), Some(Window::Symmetric(512)));
        assert_eq!(hp.window(1), Some(Window::Symmetric(512)));
        let w = Window::Symmetric(8);
        assert_eq!((w.first_visible(10), w.last_visible(10)), (6, Some(14)));
        assert_eq!((w.first_visible(2), w.causal()), (0, Window::Sliding(5)));
        assert_eq!(Window::Sliding(8).last_visible(10), None);
        let gemma3 = HParams::from_metadata(&md("gemma3", &[("attention.sliding_window", Value::U32(512))]), Some(100)).unwrap();
        assert_eq!((gemma3.encoder, gemma3.window(0)), (false, Some(Window::Sliding(512))));
    }

    /// ModernBERT as llama.cpp reads it: a pre-norm encoder (not BERT's layers) of unbiased
    /// LayerNorms, NeoX rope, a global layer then two local ones over a symmetric window on
    /// `rope.freq_base_swa`, and the gated MLP's activation from `hidden_activation`.
    #[test]
    fn modern_bert_is_a_pre_norm_encoder_with_a_symmetric_window() {
        let keys = |act: Option<&str>| {
            let mut kv = vec![
                ("attention.sliding_window", Value::U32(128)),
                ("rope.freq_base", Value::F32(160_000.0)),
                ("rope.freq_base_swa", Value::F32(10_000.0)),
                ("block_count", Value::U32(6)),
                ("attention.layer_norm_epsilon", Value::F32(1e-5)),
                ("attention.causal", Value::Bool(false)),
                ("pooling_type", Value::U32(1)),
            ];
            if let Some(a) = act {
                kv.push(("hidden_activation", Value::String(a.into())));
            }
            md("modern-bert", &kv)
        };
        let hp = HParams::from_metadata(&keys(None), Some(100)).unwrap();
        assert_eq!((hp.family, hp.encoder, hp.bert_layers, hp.embedding_norm), (Family::Llama, true, false, true));
        assert_eq!((hp.norm, hp.rope_style, hp.attn_norm_optional), (NormKind::Layer, RopeStyle::Neox, true));
        assert_eq!(hp.gate_act, Some(Gate::GeluTanh));
        let s = hp.sliding.as_ref().unwrap();
        assert_eq!((s.window, s.rope_base, s.local.as_slice()), (128, 10_000.0, &[false, true, true, false, true, true][..]));
        assert_eq!((hp.window(0), hp.window(1), hp.window(3)), (None, Some(Window::Symmetric(128)), None));
        for (act, gate) in [("geglu", Gate::GeluTanh), ("swiglu", Gate::Silu), ("reglu", Gate::Relu), ("mish", Gate::GeluTanh)] {
            assert_eq!(HParams::from_metadata(&keys(Some(act)), Some(100)).unwrap().gate_act, Some(gate), "{act}");
        }
        assert!(matches!(HParams::from_metadata(&keys(Some("relu")), Some(100)), Err(ModelError::BadMetadata { .. })));
        let dense = md("modern-bert", &[("attention.sliding_window", Value::U32(0)), ("attention.layer_norm_epsilon", Value::F32(1e-5))]);
        assert_eq!(HParams::from_metadata(&dense, Some(100)).unwrap().sliding, None);
    }

    /// OLMo 2 has no window; OLMo 3 (an `olmo2` file with a window) has every fourth layer
    /// global unless the file says, its local layers on the global base (not
    /// `rope.freq_base_swa`, as llama.cpp's graph) without scaling or attention factor.
    #[test]
    fn olmo2_has_local_layers_only_with_a_window() {
        let hp = HParams::from_metadata(&md("olmo2", &[]), Some(100)).unwrap();
        assert_eq!((hp.family.rope_style(), hp.sliding), (RopeStyle::Neox, None));
        let olmo3 = md(
            "olmo2",
            &[
                ("attention.sliding_window", Value::U32(4096)),
                ("rope.freq_base_swa", Value::F32(1000.0)),
                ("rope.freq_base", Value::F32(500_000.0)),
                ("block_count", Value::U32(8)),
            ],
        );
        let s = HParams::from_metadata(&olmo3, Some(100)).unwrap().sliding.unwrap();
        assert_eq!((s.window, s.rope_base, s.rope), (4096, 500_000.0, LocalRope::Plain));
        assert_eq!(s.local, [true, true, true, false, true, true, true, false]);
        let zero = md("olmo2", &[("attention.sliding_window", Value::U32(0))]);
        assert_eq!(HParams::from_metadata(&zero, Some(100)).unwrap().sliding, None);
    }

    /// EXAONE 4.0 as llama.cpp reads it: local layers only in a 64-layer file (every fourth
    /// global, without rope; a window of 4,096 unless the file says), whatever a smaller
    /// file's keys say; multi-token-prediction blocks not run, for any family.
    #[test]
    fn exaone4_has_local_layers_only_with_the_32bs_layer_count() {
        let small = md("exaone4", &[("attention.sliding_window", Value::U32(128))]);
        let hp = HParams::from_metadata(&small, Some(100)).unwrap();
        assert_eq!((hp.sliding, hp.no_rope.is_empty()), (None, true));
        let big = md(
            "exaone4",
            &[("block_count", Value::U32(64)), ("rope.freq_base_swa", Value::F32(10.0))],
        );
        let hp = HParams::from_metadata(&big, Some(100)).unwrap();
        let s = hp.sliding.as_ref().unwrap();
        assert_eq!((s.window, s.rope_base, s.rope), (4096, hp.rope_base, LocalRope::Scaled));
        assert_eq!(&s.local[..8], [true, true, true, false, true, true, true, false]);
        assert!((0..64).all(|l| hp.rotates(l) == s.local[l]), "global layers take no rope");
        // Multi-token-prediction blocks (any family) are counted in block_count and not run;
        // a file of nothing else is refused.
        for arch in ["exaone4", "qwen3"] {
            let mtp = md(arch, &[("block_count", Value::U32(3)), ("nextn_predict_layers", Value::U32(1))]);
            let hp = HParams::from_metadata(&mtp, Some(100)).unwrap();
            assert_eq!((hp.layers, hp.mtp_layers), (2, 1));
            let all = md(arch, &[("block_count", Value::U32(1)), ("nextn_predict_layers", Value::U32(1))]);
            assert_eq!(bad_key(&all), format!("{arch}.nextn_predict_layers"));
        }
    }

    /// Cohere's files: a LayerNorm's epsilon (required), logits multiplied by `logit_scale`,
    /// a parallel layer; `cohere2`'s windows (required) with every fourth layer global and
    /// without rope, on the global base whatever `rope.freq_base_swa` says; `command-r`'s none.
    #[test]
    fn cohere_files_read_their_norm_windows_and_logit_scale() {
        let eps = ("attention.layer_norm_epsilon", Value::F32(1e-5));
        let scale = ("logit_scale", Value::F32(0.25));
        let base = ("rope.freq_base_swa", Value::F32(10.0));
        let m = md("cohere2", &[eps.clone(), scale.clone(), base, ("block_count", Value::U32(8)), ("attention.sliding_window", Value::U32(4096))]);
        let hp = HParams::from_metadata(&m, Some(100)).unwrap();
        assert_eq!((hp.family, hp.norm, hp.parallel_block), (Family::Cohere, NormKind::Layer, true));
        assert_eq!((hp.logit_multiplier, hp.logit_scale, hp.rope_style), (Some(0.25), None, RopeStyle::Interleaved));
        assert!((hp.rms_eps - 1e-5).abs() < 1e-12);
        let s = hp.sliding.as_ref().unwrap();
        assert_eq!((s.window, s.rope_base), (4096, hp.rope_base));
        assert_eq!(s.local, [true, true, true, false, true, true, true, false]);
        assert!((0..8).all(|l| hp.rotates(l) == s.local[l]), "global layers take no rope");
        let older = HParams::from_metadata(&md("command-r", &[eps.clone(), scale.clone()]), Some(100)).unwrap();
        assert_eq!((older.family, older.sliding.is_none(), older.no_rope.is_empty()), (Family::Cohere, true, true));
        assert!(matches!(
            HParams::from_metadata(&md("cohere2", &[eps.clone(), scale.clone()]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "cohere2.attention.sliding_window"
        ));
        assert!(matches!(
            HParams::from_metadata(&md("command-r", &[scale]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "command-r.attention.layer_norm_epsilon"
        ));
        assert_eq!(bad_key(&md("command-r", &[eps, ("logit_scale", Value::F32(-1.0))])), "command-r.logit_scale");
        // Every other family keeps RMSNorm and sequential blocks.
        let hp = HParams::from_metadata(&md("llama", &[]), Some(100)).unwrap();
        assert_eq!((hp.norm, hp.parallel_block, hp.logit_multiplier), (NormKind::Rms, false, None));
    }

    /// Orion's, StableLM's, StarCoder2's, Phi-2's and Falcon's files: Llama's layer with biased
    /// LayerNorms, whose epsilon is required, and NeoX pairs (StableLM's over
    /// `rope.dimension_count` of each head); StarCoder2's, Phi-2's and Falcon's ungated GELU
    /// MLPs, the first two's biases, Phi-2's and Falcon's parallel layers, Phi-2's logit biases.
    #[test]
    fn orion_stablelm_starcoder2_phi2_and_falcon_files_read_biased_layer_norms() {
        for (arch, mlp) in [
            ("orion", MlpKind::Gated),
            ("stablelm", MlpKind::Gated),
            ("starcoder2", MlpKind::UpGelu),
            ("phi2", MlpKind::UpGelu),
            ("falcon", MlpKind::UpGelu),
        ] {
            let m = md(arch, &[("attention.layer_norm_epsilon", Value::F32(1e-5)), ("rope.dimension_count", Value::U32(16))]);
            let hp = HParams::from_metadata(&m, Some(100)).unwrap();
            assert_eq!((hp.family, hp.norm, hp.rope_style), (Family::Llama, NormKind::BiasedLayer, RopeStyle::Neox));
            // StarCoder2's and Phi-2's MLPs are up, GELU, down, and their projections carry
            // biases; Phi-2's layers are parallel, its logits biased.
            let coder = matches!(arch, "starcoder2" | "phi2");
            assert_eq!((hp.mlp, hp.out_biases), (mlp, coder));
            assert_eq!((hp.parallel_block, hp.output_bias), (matches!(arch, "phi2" | "falcon"), arch == "phi2"));
            // StableLM 2 12B's files have no MLP norm: their layers are parallel.
            assert_eq!(hp.ffn_norm_optional, arch == "stablelm");
            assert!((hp.rms_eps - 1e-5).abs() < 1e-12);
            assert_eq!((hp.head_dim, hp.rope_dims), (64, 16));
            assert!(matches!(
                HParams::from_metadata(&md(arch, &[]), Some(100)),
                Err(ModelError::MissingMetadata { key }) if key == format!("{arch}.attention.layer_norm_epsilon")
            ));
        }
    }

    /// GPT-NeoX's files: StarCoder2's biased layer, parallel as `use_parallel_residual` says
    /// (required, as llama.cpp requires it) with the MLP reading its own norm.
    #[test]
    fn gptneox_files_say_whether_their_layers_are_parallel() {
        let eps = ("attention.layer_norm_epsilon", Value::F32(1e-5));
        for parallel in [true, false] {
            let hp = HParams::from_metadata(&md("gptneox", &[eps.clone(), ("use_parallel_residual", Value::Bool(parallel))]), Some(100)).unwrap();
            assert_eq!((hp.family, hp.norm, hp.rope_style, hp.mlp), (Family::Llama, NormKind::BiasedLayer, RopeStyle::Neox, MlpKind::UpGelu));
            assert_eq!((hp.parallel_block, hp.parallel_mlp_norm, hp.out_biases, hp.output_bias), (parallel, true, true, false));
        }
        assert!(matches!(
            HParams::from_metadata(&md("gptneox", &[eps]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "gptneox.use_parallel_residual"
        ));
    }

    /// GPT-2's and StarCoder's files: biased LayerNorms and projections, an ungated GELU MLP,
    /// sequential layers, no rope in any layer but learned positions.
    #[test]
    fn gpt2_and_starcoder_files_learn_their_positions() {
        for arch in ["gpt2", "starcoder"] {
            let hp = HParams::from_metadata(&md(arch, &[("attention.layer_norm_epsilon", Value::F32(1e-5))]), Some(100)).unwrap();
            assert_eq!((hp.family, hp.norm, hp.mlp, hp.out_biases), (Family::Llama, NormKind::BiasedLayer, MlpKind::UpGelu, true));
            assert_eq!((hp.learned_positions, hp.parallel_block, hp.no_rope), (true, false, vec![true; 2]));
        }
        let hp = HParams::from_metadata(&md("starcoder2", &[("attention.layer_norm_epsilon", Value::F32(1e-5))]), Some(100)).unwrap();
        assert!(!hp.learned_positions && hp.no_rope.is_empty());
    }

    /// Refact's and BLOOM's files: no layer rotates, ALiBi of maximum bias 8 (llama.cpp's) in
    /// its place, each head's slope as ggml's softmax computes it; BLOOM's embedding normalized.
    #[test]
    fn refact_and_bloom_files_bias_scores_by_alibi() {
        let refact = HParams::from_metadata(&md("refact", &[]), Some(100)).unwrap();
        assert_eq!((refact.norm, refact.mlp, refact.no_rope.clone(), refact.embedding_norm), (NormKind::Rms, MlpKind::Gated, vec![true; 2], false));
        // 4 heads: 2^(−8/4) = 1/4 to the powers 1..4.
        assert_eq!(refact.alibi_slopes(), Some(vec![0.25, 0.0625, 0.015625, 0.00390625]));
        // 6 heads: the first 4 as above, then (2^(−4/4))^1 and ^3.
        let six = HParams::from_metadata(&md("refact", &[("attention.head_count", Value::U32(6)), ("embedding_length", Value::U32(384))]), Some(100)).unwrap();
        assert_eq!(six.alibi_slopes(), Some(vec![0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]));
        let bloom = HParams::from_metadata(&md("bloom", &[("attention.layer_norm_epsilon", Value::F32(1e-5))]), Some(100)).unwrap();
        assert_eq!((bloom.norm, bloom.mlp, bloom.out_biases, bloom.embedding_norm), (NormKind::BiasedLayer, MlpKind::UpGelu, true, true));
        assert_eq!((bloom.alibi_max_bias, bloom.learned_positions), (Some(8.0), false));
        assert_eq!(HParams::from_metadata(&md("llama", &[]), Some(100)).unwrap().alibi_slopes(), None);
    }

    /// MPT's files: unbiased LayerNorms, an ungated GELU MLP, no rope; ALiBi's maximum bias and
    /// the Q/K/V clamp from the file, the first required (its learned-position files are
    /// refused), the second only where above 0.
    #[test]
    fn mpt_files_read_alibi_and_the_clamp_from_the_file() {
        let eps = ("attention.layer_norm_epsilon", Value::F32(1e-5));
        let alibi = ("attention.max_alibi_bias", Value::F32(8.0));
        let hp = HParams::from_metadata(&md("mpt", &[eps.clone(), alibi.clone(), ("attention.clamp_kqv", Value::F32(6.0))]), Some(100)).unwrap();
        assert_eq!((hp.norm, hp.mlp, hp.out_biases, hp.no_rope.clone()), (NormKind::Layer, MlpKind::UpGelu, false, vec![true; 2]));
        assert_eq!((hp.alibi_max_bias, hp.clamp_kqv), (Some(8.0), Some(6.0)));
        let unclamped = HParams::from_metadata(&md("mpt", &[eps.clone(), alibi, ("attention.clamp_kqv", Value::F32(0.0))]), Some(100)).unwrap();
        assert_eq!(unclamped.clamp_kqv, None);
        assert!(matches!(
            HParams::from_metadata(&md("mpt", &[eps]), Some(100)),
            Err(ModelError::BadMetadata { key, .. }) if key == "mpt.attention.max_alibi_bias"
        ));
    }

    /// The first OLMo's files: Llama's layer and rope pairs, weightless LayerNorms (their
    /// epsilon required), Q/K/V clamped only where the file says.
    #[test]
    fn olmo_files_have_weightless_layer_norms_and_an_optional_clamp() {
        let eps = ("attention.layer_norm_epsilon", Value::F32(1e-5));
        let hp = HParams::from_metadata(&md("olmo", &[eps.clone(), ("attention.clamp_kqv", Value::F32(8.0))]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.norm, hp.mlp, hp.rope_style), (Family::Llama, NormKind::PlainLayer, MlpKind::Gated, RopeStyle::Interleaved));
        assert_eq!((hp.clamp_kqv, hp.out_biases, hp.alibi_max_bias, hp.no_rope.clone()), (Some(8.0), false, None, Vec::new()));
        assert_eq!(HParams::from_metadata(&md("olmo", &[eps]), Some(100)).unwrap().clamp_kqv, None);
        assert!(matches!(
            HParams::from_metadata(&md("olmo", &[]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "olmo.attention.layer_norm_epsilon"
        ));
    }

    /// CodeShell's files: GPT-2's biased layer with NeoX rope. Jais's: GPT-2's biased layer
    /// with a gated MLP, ALiBi of the file's bias (required: no positions without it), scores
    /// by 1/head_dim.
    #[test]
    fn codeshell_rotates_and_jais_biases_by_alibi() {
        let eps = ("attention.layer_norm_epsilon", Value::F32(1e-5));
        let cs = HParams::from_metadata(&md("codeshell", std::slice::from_ref(&eps)), Some(100)).unwrap();
        assert_eq!((cs.norm, cs.mlp, cs.out_biases, cs.rope_style), (NormKind::BiasedLayer, MlpKind::UpGelu, true, RopeStyle::Neox));
        assert_eq!((cs.no_rope.clone(), cs.alibi_max_bias, cs.learned_positions), (Vec::new(), None, false));
        let jais = HParams::from_metadata(&md("jais", &[eps.clone(), ("attention.max_alibi_bias", Value::F32(8.0))]), Some(100)).unwrap();
        assert_eq!((jais.norm, jais.mlp, jais.out_biases, jais.no_rope.clone()), (NormKind::BiasedLayer, MlpKind::Gated, true, vec![true; 2]));
        assert_eq!((jais.alibi_max_bias, jais.attention_scale), (Some(8.0), 1.0 / 64.0));
        assert!(matches!(
            HParams::from_metadata(&md("jais", &[eps]), Some(100)),
            Err(ModelError::BadMetadata { key, .. }) if key == "jais.attention.max_alibi_bias"
        ));
    }

    /// DBRX's files: Mixtral's renormalized softmax routing over experts as wide as
    /// `feed_forward_length`, unbiased LayerNorms, NeoX rope, its MLP norm under its own name;
    /// the clamp and the experts required.
    #[test]
    fn dbrx_files_need_their_clamp_and_experts() {
        let eps = ("attention.layer_norm_epsilon", Value::F32(1e-5));
        let clamp = ("attention.clamp_kqv", Value::F32(8.0));
        let experts = [("expert_count", Value::U32(16)), ("expert_used_count", Value::U32(4))];
        let hp = HParams::from_metadata(&md("dbrx", &[eps.clone(), clamp.clone(), experts[0].clone(), experts[1].clone()]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.norm, hp.rope_style, hp.clamp_kqv, hp.ffn_norm_stem), (Family::Llama, NormKind::Layer, RopeStyle::Neox, Some(8.0), "attn_output_norm"));
        let moe = hp.moe.unwrap();
        assert_eq!((moe.experts, moe.experts_used, moe.expert_ffn, moe.gating, moe.normalize, moe.weights_scale), (16, 4, 512, MoeGating::Softmax, true, 1.0));
        assert!(matches!(
            HParams::from_metadata(&md("dbrx", &[eps.clone(), experts[0].clone(), experts[1].clone()]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "dbrx.attention.clamp_kqv"
        ));
        assert!(matches!(
            HParams::from_metadata(&md("dbrx", &[eps, clamp]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "dbrx.expert_count"
        ));
    }

    /// Baichuan's files: rope in 32 layers, ALiBi (8) in 40, any other count refused.
    #[test]
    fn baichuan_positions_follow_the_layer_count() {
        let of = |layers: u32| HParams::from_metadata(&md("baichuan", &[("block_count", Value::U32(layers))]), Some(100));
        let seven = of(32).unwrap();
        assert_eq!((seven.norm, seven.rope_style, seven.alibi_max_bias, seven.no_rope.clone()), (NormKind::Rms, RopeStyle::Interleaved, None, Vec::new()));
        let thirteen = of(40).unwrap();
        assert_eq!((thirteen.alibi_max_bias, thirteen.no_rope.clone()), (Some(8.0), vec![true; 40]));
        assert!(matches!(of(2), Err(ModelError::BadMetadata { key, .. }) if key == "baichuan.block_count"));
    }

    /// ChatGLM's files: GLM-4's layer without post-norms, adjacent pairs whatever sections the
    /// file names.
    #[test]
    fn chatglm_is_glm4_without_post_norms() {
        let sections = ("rope.dimension_sections", Value::Array([8, 12, 12, 0].iter().map(|&n| Value::I32(n)).collect()));
        let hp = HParams::from_metadata(&md("chatglm", &[("rope.dimension_count", Value::U32(32)), sections]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_dims, hp.rope_style, hp.post_norms), (Family::Glm4, 32, RopeStyle::Interleaved, false));
        assert!(HParams::from_metadata(&md("glm4", &[]), Some(100)).unwrap().post_norms);
    }

    /// Ling 2.0's files: GLM-4.5's family with the MLP norm as `ffn_norm`, the gating required,
    /// shared experts of their own width per shared count, experts in groups.
    #[test]
    fn bailingmoe2_files_read_their_gating_groups_and_shared_width() {
        let moe = [
            ("expert_count", Value::U32(8)),
            ("expert_used_count", Value::U32(2)),
            ("expert_feed_forward_length", Value::U32(64)),
            ("expert_shared_count", Value::U32(2)),
            ("leading_dense_block_count", Value::U32(1)),
            ("expert_group_count", Value::U32(4)),
            ("expert_group_used_count", Value::U32(2)),
            ("expert_shared_feed_forward_length", Value::U32(96)),
            ("expert_gating_func", Value::U32(2)),
        ];
        let hp = HParams::from_metadata(&md("bailingmoe2", &moe), Some(100)).unwrap();
        assert_eq!((hp.family, hp.ffn_norm_stem, hp.rope_style), (Family::Glm4Moe, "ffn_norm", RopeStyle::Neox));
        let m = hp.moe.unwrap();
        assert_eq!((m.gating, m.shared_ffn, m.dense_leading, m.groups), (MoeGating::Sigmoid, 192, 1, Some(ExpertGroups { count: 4, used: 2 })));
        let mut no_width = moe.to_vec();
        no_width.retain(|(k, _)| *k != "expert_shared_feed_forward_length");
        assert_eq!(HParams::from_metadata(&md("bailingmoe2", &no_width), Some(100)).unwrap().moe.unwrap().shared_ffn, 128);
        assert!(matches!(
            HParams::from_metadata(&md("bailingmoe2", &moe[..8]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "bailingmoe2.expert_gating_func"
        ));
    }

    /// EXAONE's MoE files: GLM-4.5's family with pre-norms, three local layers then a global
    /// one without rope, on the global base; one shared expert of its own width whatever the
    /// count; window and gating required.
    #[test]
    fn exaone_moe_files_have_windows_and_one_shared_expert() {
        let keys = [
            ("expert_count", Value::U32(8)),
            ("expert_used_count", Value::U32(2)),
            ("expert_feed_forward_length", Value::U32(64)),
            ("expert_gating_func", Value::U32(2)),
            ("expert_shared_count", Value::U32(2)),
            ("expert_shared_feed_forward_length", Value::U32(96)),
            ("rope.freq_base_swa", Value::F32(1000.0)),
            ("block_count", Value::U32(8)),
            ("attention.sliding_window", Value::U32(128)),
        ];
        let hp = HParams::from_metadata(&md("exaone-moe", &keys), Some(100)).unwrap();
        assert_eq!((hp.family, hp.post_norms, hp.ffn_norm_stem), (Family::Glm4Moe, false, "ffn_norm"));
        let s = hp.sliding.clone().unwrap();
        assert_eq!((s.window, s.local.clone(), s.rope_base), (128, vec![true, true, true, false, true, true, true, false], hp.rope_base));
        assert_eq!(hp.no_rope, vec![false, false, false, true, false, false, false, true]);
        assert_eq!(hp.moe.unwrap().shared_ffn, 96);
        for missing in ["attention.sliding_window", "expert_gating_func"] {
            let partial: Vec<_> = keys.iter().filter(|(k, _)| *k != missing).cloned().collect();
            assert!(matches!(
                HParams::from_metadata(&md("exaone-moe", &partial), Some(100)),
                Err(ModelError::MissingMetadata { key }) if key == format!("exaone-moe.{missing}")
            ));
        }
    }

    /// Jais 2's files: biased LayerNorms, NeoX pairs, up, squared ReLU, down, the output and
    /// MLP projections biased.
    #[test]
    fn jais2_files_run_nemotrons_layer_with_biases() {
        let hp = HParams::from_metadata(&md("jais2", &[("attention.layer_norm_epsilon", Value::F32(1e-5))]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.norm, hp.rope_style), (Family::Llama, NormKind::BiasedLayer, RopeStyle::Neox));
        assert_eq!((hp.mlp, hp.out_biases, hp.no_rope.clone()), (MlpKind::UpReluSquared, true, Vec::new()));
    }

    /// Apertus's files: per-head Q/K norms by presence, NeoX pairs, up, xIELU, down; the four
    /// xIELU keys (bare, not under `apertus.`) required, one value or one per layer, turned into
    /// ggml's parameters.
    #[test]
    fn apertus_files_read_each_layers_xielu() {
        let xielu = [
            ("xielu.alpha_n", Value::Array(vec![Value::F32(0.3), Value::F32(1.4)])),
            ("xielu.alpha_p", Value::F32(0.9)),
            ("xielu.beta", Value::F32(0.5)),
            ("xielu.eps", Value::F32(-1e-6)),
        ];
        let mut m = md("apertus", &[]);
        m.extend(xielu.iter().map(|(k, v)| (k.to_string(), v.clone())));
        let hp = HParams::from_metadata(&m, Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.mlp, hp.xielu.len()), (Family::Llama, RopeStyle::Neox, MlpKind::UpXielu, 2));
        let softplus = |x: f32| x.exp().ln_1p();
        let x = hp.xielu[1];
        assert!((x.a_p - softplus(0.9)).abs() < 1e-6 && (x.a_n - (0.5 + softplus(1.4))).abs() < 1e-6);
        assert_eq!((x.beta, x.eps), (0.5, -1e-6));
        // The activation: quadratic above 0; below, `(expm1(min(x, ε)) − x)·a_n + β·x`.
        assert!((x.apply(2.0) - (4.0 * x.a_p + 1.0)).abs() < 1e-6);
        assert!((x.apply(-1.0) - (((-1f32).exp_m1() + 1.0) * x.a_n - 0.5)).abs() < 1e-6);
        assert_eq!(x.apply(0.0), x.eps.exp_m1() * x.a_n);
        // Missing, or one value too few.
        let mut missing = m.clone();
        missing.remove("xielu.eps");
        assert!(matches!(HParams::from_metadata(&missing, Some(100)), Err(ModelError::MissingMetadata { key }) if key == "xielu.eps"));
        m.insert("xielu.alpha_n".into(), Value::Array(vec![Value::F32(0.3)]));
        assert!(matches!(HParams::from_metadata(&m, Some(100)), Err(ModelError::BadMetadata { key, .. }) if key == "xielu.alpha_n"));
        assert!(HParams::from_metadata(&md("llama", &[]), Some(100)).unwrap().xielu.is_empty());
    }

    /// dots.llm1's files: GLM-4.5's family with the MLP norm as `ffn_norm`, experts (and their
    /// width) and the gating required.
    #[test]
    fn dots1_files_require_their_gating() {
        let moe = [
            ("expert_count", Value::U32(8)),
            ("expert_used_count", Value::U32(2)),
            ("expert_shared_count", Value::U32(2)),
            ("expert_feed_forward_length", Value::U32(64)),
            ("expert_gating_func", Value::U32(2)),
        ];
        let hp = HParams::from_metadata(&md("dots1", &moe), Some(100)).unwrap();
        assert_eq!((hp.family, hp.ffn_norm_stem, hp.rope_dims, hp.head_dim), (Family::Glm4Moe, "ffn_norm", 64, 64));
        let m = hp.moe.unwrap();
        assert_eq!((m.gating, m.shared_ffn, m.groups), (MoeGating::Sigmoid, 128, None));
        for gating in [&moe[..4], &[&moe[..4], &[("expert_gating_func", Value::U32(0))]].concat()] {
            assert!(HParams::from_metadata(&md("dots1", gating), Some(100)).is_err());
        }
        assert!(matches!(
            HParams::from_metadata(&md("dots1", &moe[..3]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "dots1.expert_feed_forward_length"
        ));
    }

    /// MiniMax-M2's files: Q and K normalized whole, the MLP norm as `ffn_norm`, experts alone
    /// in every layer whatever the shared and leading keys say, renormalized and never scaled
    /// whatever the flag and scale say (llama.cpp's graph reads neither), the gating and the
    /// experts' width required.
    #[test]
    fn minimax_m2_files_route_every_layer_to_experts_alone() {
        let moe = [
            ("expert_count", Value::U32(8)),
            ("expert_used_count", Value::U32(2)),
            ("expert_feed_forward_length", Value::U32(64)),
            ("expert_gating_func", Value::U32(2)),
            ("expert_shared_count", Value::U32(2)),
            ("leading_dense_block_count", Value::U32(1)),
            ("expert_weights_scale", Value::F32(2.5)),
            ("expert_weights_norm", Value::Bool(false)),
        ];
        let hp = HParams::from_metadata(&md("minimax-m2", &moe), Some(100)).unwrap();
        assert_eq!((hp.family, hp.ffn_norm_stem, hp.qk_norm_whole, hp.rope_style), (Family::Glm4Moe, "ffn_norm", true, RopeStyle::Neox));
        let m = hp.moe.unwrap();
        assert_eq!((m.gating, m.normalize, m.weights_scale), (MoeGating::Sigmoid, true, 1.0));
        assert_eq!((m.shared_ffn, m.dense_leading, m.layer_step, m.expert_ffn), (0, 0, 1, 64));
        for missing in ["expert_gating_func", "expert_feed_forward_length"] {
            let partial: Vec<_> = moe.iter().filter(|(k, _)| *k != missing).cloned().collect();
            assert!(matches!(
                HParams::from_metadata(&md("minimax-m2", &partial), Some(100)),
                Err(ModelError::MissingMetadata { key }) if key == format!("minimax-m2.{missing}")
            ));
        }
    }

    /// Ling's files: every layer's experts (their width and the shared count required),
    /// renormalized as `expert_weights_norm` says, scaled; no dense leading layer whatever the
    /// file says (llama.cpp's graph has none).
    #[test]
    fn bailingmoe_files_route_every_layer_beside_shared_experts() {
        let moe = [
            ("expert_count", Value::U32(64)),
            ("expert_used_count", Value::U32(6)),
            ("expert_feed_forward_length", Value::U32(128)),
            ("expert_shared_count", Value::U32(2)),
            ("leading_dense_block_count", Value::U32(1)),
            ("expert_weights_scale", Value::F32(1.5)),
            ("expert_weights_norm", Value::Bool(true)),
        ];
        let hp = HParams::from_metadata(&md("bailingmoe", &moe), Some(100)).unwrap();
        let m = hp.moe.unwrap();
        assert_eq!((m.experts, m.experts_used, m.expert_ffn, m.shared_ffn, m.dense_leading), (64, 6, 128, 256, 0));
        assert_eq!((m.gating, m.normalize, m.weights_scale, hp.rope_style), (MoeGating::Softmax, true, 1.5, RopeStyle::Interleaved));
        let unnormalized = HParams::from_metadata(&md("bailingmoe", &moe[..5]), Some(100)).unwrap();
        assert!(!unnormalized.moe.unwrap().normalize);
        assert!(matches!(
            HParams::from_metadata(&md("bailingmoe", &moe[..3]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "bailingmoe.expert_shared_count"
        ));
    }

    /// PLaMo's files: Llama's layer in parallel form (one RMSNorm read by attention and MLP
    /// both), NeoX pairs, a gated SiLU MLP.
    #[test]
    fn plamo_files_run_llama_layers_in_parallel_form() {
        let hp = HParams::from_metadata(&md("plamo", &[]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.norm, hp.rope_style, hp.parallel_block), (Family::Llama, NormKind::Rms, RopeStyle::Neox, true));
        assert_eq!((hp.mlp, hp.out_biases, hp.parallel_mlp_norm), (MlpKind::Gated, false, false));
    }

    /// Nemotron's files: biased LayerNorms, NeoX pairs over the file's rotary width, up,
    /// squared ReLU, down, no projection biases.
    #[test]
    fn nemotron_files_rotate_part_of_each_head_in_neox_pairs() {
        let extra = [("attention.layer_norm_epsilon", Value::F32(1e-5)), ("rope.dimension_count", Value::U32(32))];
        let hp = HParams::from_metadata(&md("nemotron", &extra), Some(100)).unwrap();
        assert_eq!((hp.family, hp.norm, hp.rope_style, hp.rope_dims), (Family::Llama, NormKind::BiasedLayer, RopeStyle::Neox, 32));
        assert_eq!((hp.mlp, hp.out_biases), (MlpKind::UpReluSquared, false));
    }

    /// DeepSeekMoE's files: experts (and their width, and the shared count) required, softmax
    /// weights not renormalized, scaled by the file's scale, dense leading layers.
    #[test]
    fn deepseek_moe_files_read_their_shared_experts_and_scale() {
        let moe = [
            ("expert_count", Value::U32(64)),
            ("expert_used_count", Value::U32(6)),
            ("expert_feed_forward_length", Value::U32(128)),
            ("expert_shared_count", Value::U32(2)),
            ("leading_dense_block_count", Value::U32(1)),
            ("expert_weights_scale", Value::F32(1.5)),
        ];
        let hp = HParams::from_metadata(&md("deepseek", &moe), Some(100)).unwrap();
        let m = hp.moe.unwrap();
        assert_eq!((m.experts, m.experts_used, m.expert_ffn, m.shared_ffn, m.dense_leading), (64, 6, 128, 256, 1));
        assert_eq!((m.gating, m.normalize, m.weights_scale, hp.rope_style), (MoeGating::Softmax, false, 1.5, RopeStyle::Interleaved));
        assert!(matches!(
            HParams::from_metadata(&md("deepseek", &moe[..2]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "deepseek.expert_feed_forward_length"
        ));
        assert!(matches!(
            HParams::from_metadata(&md("deepseek", &moe[..3]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "deepseek.expert_shared_count"
        ));
    }

    /// Qwen (1)'s files: Qwen2's layer, the MLP half the width the file gives.
    #[test]
    fn qwen_files_halve_their_mlp_width() {
        let hp = HParams::from_metadata(&md("qwen", &[]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.ffn, hp.rope_style, hp.moe), (Family::Qwen2, 256, RopeStyle::Neox, None));
    }

    /// Phi-3.5-MoE's files: Phi-3's layer with biased RMSNorms (their RMS epsilon), output and
    /// logit biases, experts required and renormalized.
    #[test]
    fn phimoe_files_have_biased_rms_norms_and_experts() {
        let experts = [("expert_count", Value::U32(16)), ("expert_used_count", Value::U32(2)), ("attention.layer_norm_rms_epsilon", Value::F32(1e-5))];
        let hp = HParams::from_metadata(&md("phimoe", &experts), Some(100)).unwrap();
        assert_eq!((hp.family, hp.norm, hp.out_biases, hp.output_bias), (Family::Phi3, NormKind::BiasedRms, true, true));
        let m = hp.moe.unwrap();
        assert_eq!((m.experts, m.experts_used, m.gating, m.normalize, m.weights_scale), (16, 2, MoeGating::Softmax, true, 1.0));
        assert!(matches!(
            HParams::from_metadata(&md("phimoe", &experts[2..]), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "phimoe.expert_count"
        ));
    }

    /// Gemma 1's files (`gemma`) are Gemma 2's layer without post-norms, soft caps or local
    /// layers (whatever keys the file has for them, as llama.cpp's `gemma` graph reads none).
    #[test]
    fn gemma1_is_gemma2_without_post_norms_soft_caps_or_local_layers() {
        let keys = [("attention.sliding_window", Value::U32(8)), ("attn_logit_softcapping", Value::F32(50.0))];
        let hp = HParams::from_metadata(&md("gemma", &keys), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.post_norms), (Family::Gemma2, RopeStyle::Neox, false));
        assert_eq!((hp.attn_softcap, hp.final_softcap, hp.sliding.is_some()), (None, None, false));
        assert_eq!(hp.embedding_scale, Some((hp.hidden as f64).sqrt()));
        let hp = HParams::from_metadata(&md("gemma2", &keys), Some(100)).unwrap();
        assert!(hp.post_norms && hp.attn_softcap == Some(50.0) && hp.sliding.is_some());
    }

    #[test]
    fn smollm3_skips_rope_in_every_fourth_layer() {
        let hp = HParams::from_metadata(&md("smollm3", &[("block_count", Value::U32(9))]), Some(100)).unwrap();
        let rotating: Vec<bool> = (0..9).map(|l| hp.rotates(l)).collect();
        assert_eq!(rotating, [true, true, true, false, true, true, true, false, true]);
        assert_eq!((hp.residual_scale, hp.logit_scale, hp.embedding_scale), (None, None, None));
        // The other families rotate in every layer.
        let hp = HParams::from_metadata(&md("llama", &[("block_count", Value::U32(9))]), Some(100)).unwrap();
        assert!((0..9).all(|l| hp.rotates(l)));
    }

    #[test]
    fn granite_reads_its_multipliers() {
        let scales = [
            ("logit_scale", Value::F32(8.0)),
            ("embedding_scale", Value::F32(12.0)),
            ("residual_scale", Value::F32(0.25)),
            ("attention.scale", Value::F32(0.0078125)),
        ];
        let hp = HParams::from_metadata(&md("granite", &scales), Some(100)).unwrap();
        assert_eq!(hp.family, Family::Granite);
        assert_eq!(
            (hp.logit_scale, hp.embedding_scale, hp.residual_scale, hp.attention_scale),
            (Some(8.0), Some(12.0), Some(0.25), 0.0078125)
        );
        assert!((0..2).all(|l| hp.rotates(l)));
        // Only the logit scale is required; 0 is llama.cpp's "not set".
        let hp = HParams::from_metadata(
            &md("granite", &[("logit_scale", Value::F32(8.0)), ("residual_scale", Value::F32(0.0))]),
            Some(100),
        )
        .unwrap();
        assert_eq!((hp.embedding_scale, hp.residual_scale, hp.attention_scale), (None, None, 1.0 / 8.0));
        assert_eq!(bad_key(&md("granite", &[])), "granite.logit_scale");
        assert_eq!(bad_key(&md("granite", &[("logit_scale", Value::F32(0.0))])), "granite.logit_scale");
        assert_eq!(
            bad_key(&md("granite", &[("logit_scale", Value::F32(8.0)), ("residual_scale", Value::F32(-1.0))])),
            "granite.residual_scale"
        );
        assert_eq!(
            bad_key(&md("granite", &[("logit_scale", Value::F32(f32::NAN))])),
            "granite.logit_scale"
        );
        // `rope.scaling.finetuned = false` turns rope off everywhere.
        let hp = HParams::from_metadata(
            &md("granite", &[("logit_scale", Value::F32(8.0)), ("rope.scaling.finetuned", Value::Bool(false))]),
            Some(100),
        )
        .unwrap();
        assert!((0..2).all(|l| !hp.rotates(l)));
        // Granite 3's mixture-of-experts files (`granitemoe`): experts of `feed_forward_length`
        // routed by a softmax, renormalized; a shared expert where the file gives its width.
        let moe = [
            ("logit_scale", Value::F32(8.0)),
            ("expert_count", Value::U32(4)),
            ("expert_used_count", Value::U32(2)),
            ("expert_shared_feed_forward_length", Value::U32(64)),
        ];
        let hp = HParams::from_metadata(&md("granitemoe", &moe), Some(100)).unwrap();
        assert_eq!(hp.family, Family::Granite);
        let m = hp.moe.unwrap();
        assert_eq!((m.experts, m.experts_used, m.expert_ffn, m.shared_ffn), (4, 2, 512, 64));
        assert_eq!((m.gating, m.normalize, m.shared_gate), (MoeGating::Softmax, true, false));
        let too_many = [&moe[..2], &[("expert_used_count", Value::U32(5))]].concat();
        assert_eq!(bad_key(&md("granitemoe", &too_many)), "granitemoe.expert_used_count");
    }

    /// Granite 4.0's hybrids: the layers whose K/V head count is 0 are Mamba-2 layers of the
    /// `ssm.*` keys; only the others keep K/V; the logit scale is optional; rope off where the
    /// file says.
    #[test]
    fn granite_hybrid_reads_its_mamba2_layers() {
        let per_layer = |v: &[u32]| Value::Array(v.iter().map(|&x| Value::U32(x)).collect());
        let with = |extra: &[(&str, Value)]| {
            let mut all = vec![
                ("block_count", Value::U32(4)),
                ("attention.head_count_kv", per_layer(&[0, 0, 2, 0])),
                ("ssm.conv_kernel", Value::U32(4)),
                ("ssm.inner_size", Value::U32(512)),
                ("ssm.state_size", Value::U32(16)),
                ("ssm.time_step_rank", Value::U32(8)),
                ("ssm.group_count", Value::U32(2)),
                ("rope.scaling.finetuned", Value::Bool(false)),
            ];
            for (k, v) in extra {
                all.retain(|(a, _)| a != k);
                all.push((k, v.clone()));
            }
            md("granitehybrid", &all)
        };
        let hp = HParams::from_metadata(&with(&[]), Some(100)).unwrap();
        assert_eq!(hp.family, Family::GraniteHybrid);
        assert_eq!((hp.kv_heads, hp.kv_layers, hp.logit_scale), (2, 1, None));
        let m = hp.mamba2.clone().unwrap();
        assert_eq!(m.layers, [true, true, false, true]);
        assert_eq!((m.head_dim(), m.conv_channels(), m.proj_width()), (64, 576, 1096));
        assert_eq!(hp.recurrent_flags(), Some(&[true, true, false, true][..]));
        assert_eq!(hp.kv_layer(2), 0);
        assert_eq!(hp.state_shape(), Some(vec![[3 * 576, 512 * 16]; 3]));
        assert!((0..4).all(|l| !hp.rotates(l)));
        assert!(hp.moe.is_none());
        // H-Tiny's and H-Small's experts beside a shared one.
        let hp = HParams::from_metadata(
            &with(&[
                ("expert_count", Value::U32(4)),
                ("expert_used_count", Value::U32(2)),
                ("expert_shared_feed_forward_length", Value::U32(128)),
                ("rope.scaling.finetuned", Value::Bool(true)),
            ]),
            Some(100),
        )
        .unwrap();
        assert_eq!(hp.moe.as_ref().map(|m| (m.experts, m.shared_ffn, m.shared_gate)), Some((4, 128, false)));
        assert!((0..4).all(|l| hp.rotates(l)));
        for (extra, key) in [
            (("ssm.time_step_rank", Value::U32(7)), "granitehybrid.ssm.time_step_rank"),
            (("ssm.group_count", Value::U32(3)), "granitehybrid.ssm.group_count"),
            (("ssm.conv_kernel", Value::U32(0)), "granitehybrid.ssm.conv_kernel"),
            (("ssm.state_size", Value::U32(0)), "granitehybrid.ssm.state_size"),
            (("attention.head_count_kv", per_layer(&[0, 0, 0, 0])), "granitehybrid.attention.head_count_kv"),
            (("attention.head_count_kv", per_layer(&[0, 2, 1, 0])), "granitehybrid.attention.head_count_kv"),
            (("attention.head_count_kv", per_layer(&[0, 2, 0])), "granitehybrid.attention.head_count_kv"),
        ] {
            assert_eq!(bad_key(&with(&[extra])), key);
        }
        let mut missing = with(&[]);
        missing.remove("granitehybrid.ssm.state_size");
        assert!(matches!(
            HParams::from_metadata(&missing, Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "granitehybrid.ssm.state_size"
        ));
    }

    /// Falcon-H1: Llama's family with NeoX pairs; every layer both attends (keeping K/V, in
    /// its own store layer) and carries a Mamba-2 state of the `ssm.*` keys, which it requires.
    #[test]
    fn falcon_h1_attends_and_scans_in_every_layer() {
        let keys = [
            ("attention.head_count_kv", Value::U32(2)),
            ("ssm.conv_kernel", Value::U32(4)),
            ("ssm.inner_size", Value::U32(512)),
            ("ssm.state_size", Value::U32(16)),
            ("ssm.time_step_rank", Value::U32(8)),
            ("ssm.group_count", Value::U32(2)),
        ];
        let hp = HParams::from_metadata(&md("falcon-h1", &keys), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.ssm_beside_attention), (Family::Llama, RopeStyle::Neox, true));
        assert_eq!((hp.kv_heads, hp.kv_layers, hp.kv_layer(1)), (2, 2, 1));
        assert!((0..2).all(|l| hp.attends(l) && hp.is_recurrent(l) && hp.has_mlp(l) && hp.rotates(l)));
        assert_eq!(hp.state_shape(), Some(vec![[3 * 576, 512 * 16]; 2]));
        // A Llama file has neither.
        let llama = HParams::from_metadata(&md("llama", &keys), Some(100)).unwrap();
        assert_eq!((llama.mamba2.is_none(), llama.ssm_beside_attention, llama.recurrent_flags()), (true, false, None));
        let mut missing = md("falcon-h1", &keys);
        missing.remove("falcon-h1.ssm.group_count");
        assert!(matches!(
            HParams::from_metadata(&missing, Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "falcon-h1.ssm.group_count"
        ));
    }

    /// SmallThinker: experts with a ReLU gate, routed on the layer's input by the file's gating
    /// (required), renormalized; with a window in the file, one of 4,096 positions, the first
    /// of every four layers global and without rope (but in a file of four layers, as
    /// llama.cpp's graph), the local ones on `rope.freq_base_swa`.
    #[test]
    fn smallthinker_reads_its_experts_and_windows() {
        let with = |layers: u32, extra: &[(&str, Value)]| {
            let mut keys = vec![
                ("block_count", Value::U32(layers)),
                ("expert_count", Value::U32(4)),
                ("expert_used_count", Value::U32(2)),
                ("expert_feed_forward_length", Value::U32(128)),
                ("expert_gating_func", Value::U32(2)),
            ];
            keys.extend(extra.iter().cloned());
            md("smallthinker", &keys)
        };
        let hp = HParams::from_metadata(&with(8, &[]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.relu_gate, hp.route_on_layer_input), (Family::Llama, RopeStyle::Neox, true, true));
        let m = hp.moe.clone().unwrap();
        assert_eq!((m.experts, m.experts_used, m.expert_ffn, m.gating, m.normalize, m.weights_scale), (4, 2, 128, MoeGating::Sigmoid, true, 1.0));
        assert!(hp.sliding.is_none() && (0..8).all(|l| hp.rotates(l)));
        let windowed = [("attention.sliding_window", Value::U32(32)), ("rope.freq_base_swa", Value::F32(1000.0))];
        let hp = HParams::from_metadata(&with(8, &windowed), Some(100)).unwrap();
        let s = hp.sliding.clone().unwrap();
        assert_eq!((s.window, s.rope_base), (4096, 1000.0));
        assert_eq!(s.local, [false, true, true, true, false, true, true, true]);
        assert_eq!((0..8).filter(|&l| !hp.rotates(l)).collect::<Vec<_>>(), [0, 4]);
        let hp = HParams::from_metadata(&with(4, &windowed), Some(100)).unwrap();
        assert!((0..4).all(|l| hp.rotates(l)));
        let mut no_gating = with(8, &[]);
        no_gating.remove("smallthinker.expert_gating_func");
        assert!(matches!(
            HParams::from_metadata(&no_gating, Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "smallthinker.expert_gating_func"
        ));
        let mut no_experts = with(8, &[]);
        no_experts.remove("smallthinker.expert_count");
        assert!(HParams::from_metadata(&no_experts, Some(100)).is_err());
        // Llama's experts keep SiLU, routed on their own input.
        let llama = HParams::from_metadata(&md("llama", &[("expert_count", Value::U32(4)), ("expert_used_count", Value::U32(2))]), Some(100)).unwrap();
        assert!(!llama.relu_gate && !llama.route_on_layer_input);
    }

    /// Llama 4: chunks of 8,192 in three layers of four (the file's pattern where it has one),
    /// the fourth global, without rope, its queries under the temperature; unweighted Q/K norms
    /// but in Maverick's 128-expert files; experts every `interleave_moe_layer_step`-th layer
    /// beside a shared expert as wide, sigmoid-routed, not renormalized, weighing the inputs;
    /// a window of 0: no chunks, no temperature, rope in every layer.
    #[test]
    fn llama4_reads_its_chunks_temperature_and_experts() {
        let with = |extra: &[(&str, Value)]| {
            let mut keys = vec![
                ("block_count", Value::U32(8)),
                ("expert_count", Value::U32(16)),
                ("expert_used_count", Value::U32(1)),
                ("expert_feed_forward_length", Value::U32(96)),
                ("interleave_moe_layer_step", Value::U32(2)),
            ];
            keys.extend(extra.iter().cloned());
            md("llama4", &keys)
        };
        let hp = HParams::from_metadata(&with(&[("attention.sliding_window", Value::U32(8192))]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.rope_style, hp.qk_norm_unweighted), (Family::Llama, RopeStyle::Interleaved, true));
        let chunk = Some(Window::Chunked(8192));
        assert_eq!((0..8).map(|l| hp.window(l)).collect::<Vec<_>>(), [chunk, chunk, chunk, None, chunk, chunk, chunk, None]);
        assert_eq!((0..8).filter(|&l| !hp.rotates(l)).collect::<Vec<_>>(), [3, 7]);
        let t = hp.attn_temperature.unwrap();
        assert!(t.no_rope_only && t.at(8190) == 1.0 && t.at(8191) > 1.0);
        assert!((t.at(8191) - (1.0 + 0.1 * 2f32.ln())).abs() < 1e-6);
        let m = hp.moe.clone().unwrap();
        assert_eq!((m.expert_ffn, m.shared_ffn, m.layer_step, m.dense_leading), (96, 96, 2, 0));
        assert_eq!((m.gating, m.normalize, m.weights_scale, m.weigh_inputs), (MoeGating::Sigmoid, false, 1.0, true));
        // A pattern and a local base of the file's own; Maverick's expert count.
        let hp = HParams::from_metadata(&with(&[("attention.sliding_window_pattern", Value::U32(2)), ("rope.freq_base_swa", Value::F32(500.0))]), Some(100)).unwrap();
        assert_eq!((0..4).map(|l| hp.window(l).is_some()).collect::<Vec<_>>(), [true, false, true, false]);
        assert_eq!(hp.sliding.as_ref().map(|s| s.rope_base), Some(500.0));
        let hp = HParams::from_metadata(&with(&[("expert_count", Value::U32(128))]), Some(200)).unwrap();
        assert!(!hp.qk_norm_unweighted);
        // A window of 0 (MobileLLM-R1's files).
        let hp = HParams::from_metadata(&with(&[("attention.sliding_window", Value::U32(0))]), Some(100)).unwrap();
        assert!(hp.sliding.is_none() && hp.attn_temperature.is_none() && (0..8).all(|l| hp.rotates(l)));
        // Experts and the step are required.
        for k in ["llama4.expert_count", "llama4.interleave_moe_layer_step", "llama4.expert_feed_forward_length"] {
            let mut without = with(&[]);
            without.remove(k);
            assert!(HParams::from_metadata(&without, Some(100)).is_err(), "{k}");
        }
        assert!(HParams::from_metadata(&with(&[("interleave_moe_layer_step", Value::U32(0))]), Some(100)).is_err());
    }

    /// Deci: each layer its own K/V heads (only those with K/V keep any, the store layers
    /// numbered over them), linear attention where there are query heads alone, an MLP alone
    /// where there are none, no MLP where the width is 0; a file's `attention.scale`.
    #[test]
    fn deci_reads_each_layers_heads_and_width() {
        let per_layer = |v: &[u32]| Value::Array(v.iter().map(|&x| Value::U32(x)).collect());
        let with = |heads: &[u32], kv: &[u32], extra: &[(&str, Value)]| {
            let mut keys = vec![
                ("block_count", Value::U32(heads.len() as u32)),
                ("attention.head_count", per_layer(heads)),
                ("attention.head_count_kv", per_layer(kv)),
                ("attention.key_length", Value::U32(64)),
                ("feed_forward_length", per_layer(&[512, 384, 256, 512, 0, 640][..heads.len()])),
            ];
            keys.extend(extra.iter().cloned());
            md("deci", &keys)
        };
        let hp = HParams::from_metadata(&with(&[4, 4, 0, 4, 0, 4], &[2, 0, 0, 4, 0, 1], &[]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.heads, hp.kv_heads, hp.kv_layers, hp.ffn), (Family::Llama, 4, 2, 3, 640));
        assert_eq!((0..6).filter(|&l| hp.attends(l)).collect::<Vec<_>>(), [0, 3, 5]);
        assert_eq!((0..6).filter(|&l| hp.is_linear_attn(l)).collect::<Vec<_>>(), [1]);
        assert_eq!((0..6).filter(|&l| hp.is_mlp_only(l)).collect::<Vec<_>>(), [2, 4]);
        assert_eq!((0..6).filter(|&l| !hp.has_mlp(l)).collect::<Vec<_>>(), [4]);
        assert_eq!([0, 3, 5].map(|l| (hp.kv_layer(l), hp.writes_kv(l))), [(0, true), (1, true), (2, true)]);
        assert_eq!([0, 3, 5].map(|l| hp.attn_shape(l).kv_heads), [2, 4, 1]);
        let shape = hp.kv_shape();
        assert_eq!((0..3).map(|s| shape.layer(s).kv_heads).collect::<Vec<_>>(), [2, 4, 1]);
        assert_eq!(hp.attention_scale, 1.0 / 8.0);
        let scaled = HParams::from_metadata(&with(&[4, 4], &[2, 2], &[("attention.scale", Value::F32(0.25))]), Some(100)).unwrap();
        assert_eq!((scaled.attention_scale, scaled.kv_layers), (0.25, 2));
        // DeciLM-7B's: one query head count, K/V heads per layer.
        let mut decilm = with(&[4, 4, 4], &[4, 2, 1], &[]);
        decilm.insert("deci.attention.head_count".into(), Value::U32(4));
        let hp = HParams::from_metadata(&decilm, Some(100)).unwrap();
        assert_eq!(((0..3).map(|l| hp.attn_shape(l).kv_heads).collect::<Vec<_>>(), hp.kv_layers), (vec![4, 2, 1], 3));
        // Query heads may differ too (llama.cpp's graph reads each layer's).
        let hp = HParams::from_metadata(&with(&[4, 2], &[2, 2], &[]), Some(100)).unwrap();
        assert_eq!([0, 1].map(|l| (hp.attn_shape(l).heads, hp.attn_shape(l).kv_heads)), [(4, 2), (2, 2)]);
        // Refused: K/V heads that do not divide the query heads or without query heads, no
        // layer with K/V, query heads that differ without a head width.
        for (heads, kv) in [(&[4, 4][..], &[3, 2][..]), (&[0, 4], &[2, 2]), (&[4, 0], &[0, 0])] {
            assert!(HParams::from_metadata(&with(heads, kv, &[]), Some(100)).is_err(), "{heads:?} {kv:?}");
        }
        let mut no_width = with(&[4, 2], &[2, 2], &[]);
        no_width.remove("deci.attention.key_length");
        assert!(matches!(HParams::from_metadata(&no_width, Some(100)), Err(ModelError::MissingMetadata { .. })));
    }

    /// OpenELM: each layer its own query heads, K/V heads and MLP width, every layer attending
    /// and keeping its own K/V (of its own heads); NeoX pairs. A layer without K/V heads is
    /// refused.
    #[test]
    fn openelm_reads_each_layers_heads_and_width() {
        let per_layer = |v: &[u32]| Value::Array(v.iter().map(|&x| Value::U32(x)).collect());
        let with = |heads: &[u32], kv: &[u32]| {
            md(
                "openelm",
                &[
                    ("block_count", Value::U32(heads.len() as u32)),
                    ("attention.head_count", per_layer(heads)),
                    ("attention.head_count_kv", per_layer(kv)),
                    ("attention.key_length", Value::U32(64)),
                    ("attention.value_length", Value::U32(64)),
                    ("feed_forward_length", per_layer(&[256, 384, 512, 640][..heads.len()])),
                ],
            )
        };
        let hp = HParams::from_metadata(&with(&[2, 4, 6, 8], &[1, 2, 3, 2]), Some(100)).unwrap();
        assert_eq!((hp.family, hp.heads, hp.kv_heads, hp.kv_layers, hp.ffn), (Family::Llama, 2, 1, 4, 640));
        assert_eq!((0..4).map(|l| (hp.attn_shape(l).heads, hp.attn_shape(l).kv_heads)).collect::<Vec<_>>(), [(2, 1), (4, 2), (6, 3), (8, 2)]);
        assert_eq!((0..4).map(|l| hp.ffn_of(l)).collect::<Vec<_>>(), [256, 384, 512, 640]);
        assert!((0..4).all(|l| hp.attends(l) && hp.has_mlp(l) && !hp.is_linear_attn(l) && !hp.is_mlp_only(l)));
        assert_eq!((0..4).map(|l| (hp.kv_layer(l), hp.writes_kv(l))).collect::<Vec<_>>(), [(0, true), (1, true), (2, true), (3, true)]);
        let shape = hp.kv_shape();
        assert_eq!((0..4).map(|s| shape.layer(s).kv_heads).collect::<Vec<_>>(), [1, 2, 3, 2]);
        assert_eq!((hp.rope_style, hp.attention_scale), (RopeStyle::Neox, 1.0 / 8.0));
        assert!(HParams::from_metadata(&with(&[2, 4], &[1, 0]), Some(100)).is_err());
    }

    /// Nemotron-H: a layer without K/V heads is an MLP where its width is not 0, else Mamba-2;
    /// only attention layers keep K/V, none rotates; the epsilon may be `layer_norm_epsilon`.
    #[test]
    fn nemotron_h_reads_its_three_kinds_of_layer() {
        let per_layer = |v: &[u32]| Value::Array(v.iter().map(|&x| Value::U32(x)).collect());
        let keys = [
            ("block_count", Value::U32(6)),
            ("attention.head_count_kv", per_layer(&[0, 0, 2, 0, 0, 0])),
            ("feed_forward_length", per_layer(&[0, 512, 0, 384, 0, 512])),
            ("attention.layer_norm_epsilon", Value::F32(1e-6)),
            ("ssm.conv_kernel", Value::U32(4)),
            ("ssm.inner_size", Value::U32(512)),
            ("ssm.state_size", Value::U32(16)),
            ("ssm.time_step_rank", Value::U32(8)),
            ("ssm.group_count", Value::U32(2)),
        ];
        let hp = HParams::from_metadata(&md("nemotron_h", &keys), Some(100)).unwrap();
        assert_eq!(hp.family, Family::NemotronH);
        assert_eq!(hp.mamba2.as_ref().map(|m| m.layers.clone()), Some(vec![true, false, false, false, true, false]));
        assert_eq!(hp.mlp_only, [false, true, false, true, false, true]);
        assert_eq!((hp.kv_heads, hp.kv_layers, hp.ffn, hp.ffn_of(3)), (2, 1, 512, 384));
        assert_eq!(((0..6).filter(|&l| hp.attends(l)).collect::<Vec<_>>(), hp.kv_layer(2)), (vec![2], 0));
        assert_eq!((0..6).filter(|&l| hp.has_mlp(l)).collect::<Vec<_>>(), [1, 3, 5]);
        assert!((0..6).all(|l| !hp.rotates(l)));
        assert!((hp.rms_eps - 1e-6).abs() < 1e-12);
        assert_eq!(hp.state_shape().map(|s| s.len()), Some(2));
        // The other families' layers all have an MLP.
        let llama = HParams::from_metadata(&md("llama", &[]), Some(100)).unwrap();
        assert!((0..2).all(|l| llama.has_mlp(l) && llama.attends(l)));
    }

    #[test]
    fn nemotron_h_moe_reads_ungated_sigmoid_routed_experts() {
        fn keys(extra: &[(&'static str, Value)]) -> Vec<(&'static str, Value)> {
            let per_layer = |v: &[u32]| Value::Array(v.iter().map(|&x| Value::U32(x)).collect());
            let mut k = vec![
                ("block_count", Value::U32(3)),
                ("attention.head_count_kv", per_layer(&[0, 2, 0])),
                ("feed_forward_length", per_layer(&[0, 0, 3712])),
                ("attention.layer_norm_epsilon", Value::F32(1e-5)),
                ("ssm.conv_kernel", Value::U32(4)),
                ("ssm.inner_size", Value::U32(512)),
                ("ssm.state_size", Value::U32(16)),
                ("ssm.time_step_rank", Value::U32(8)),
                ("ssm.group_count", Value::U32(2)),
                ("expert_count", Value::U32(128)),
                ("expert_used_count", Value::U32(6)),
                ("expert_shared_feed_forward_length", Value::U32(3712)),
                ("expert_weights_norm", Value::Bool(true)),
                ("expert_weights_scale", Value::F32(2.5)),
            ];
            k.extend(extra.iter().cloned());
            k
        }
        let hp = HParams::from_metadata(&md("nemotron_h_moe", &keys(&[("expert_feed_forward_length", Value::U32(1856))])), Some(100)).unwrap();
        assert_eq!(hp.family, Family::NemotronH);
        let m = hp.moe.clone().unwrap();
        assert_eq!((m.experts, m.experts_used, m.expert_ffn, m.shared_ffn), (128, 6, 1856, 3712));
        assert_eq!((m.gating, m.normalize, m.weights_scale, m.expert_mlp, m.latent), (MoeGating::Sigmoid, true, 2.5, MlpKind::UpReluSquared, None));
        assert_eq!(hp.mlp_only, [false, false, true]);
        // Without an expert width, a MoE layer's width over the experts per token (llama.cpp's
        // fallback); Super's latent size.
        let hp = HParams::from_metadata(&md("nemotron_h_moe", &keys(&[("moe_latent_size", Value::U32(1024))])), Some(100)).unwrap();
        let m = hp.moe.unwrap();
        assert_eq!((m.expert_ffn, m.latent), (3712 / 6, Some(1024)));
        // The shared expert is required.
        let mut no_shared = keys(&[]);
        no_shared.retain(|(k, _)| *k != "expert_shared_feed_forward_length");
        assert!(matches!(
            HParams::from_metadata(&md("nemotron_h_moe", &no_shared), Some(100)),
            Err(ModelError::MissingMetadata { key }) if key == "nemotron_h_moe.expert_shared_feed_forward_length"
        ));
    }

    #[test]
    fn lfm2moe_reads_its_experts_after_the_dense_layers() {
        fn keys(extra: &[(&'static str, Value)]) -> Vec<(&'static str, Value)> {
            let per_layer = |v: &[u32]| Value::Array(v.iter().map(|&x| Value::U32(x)).collect());
            let mut k = vec![
                ("block_count", Value::U32(3)),
                ("attention.head_count_kv", per_layer(&[0, 0, 2])),
                ("attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
                ("shortconv.l_cache", Value::U32(3)),
                ("expert_count", Value::U32(32)),
                ("expert_used_count", Value::U32(4)),
                ("expert_feed_forward_length", Value::U32(1792)),
                ("leading_dense_block_count", Value::U32(2)),
                ("expert_gating_func", Value::U32(2)),
                // llama.cpp's `lfm2moe` reads no scale: one here changes nothing.
                ("expert_weights_scale", Value::F32(2.5)),
            ];
            k.extend(extra.iter().cloned());
            k
        }
        let hp = HParams::from_metadata(&md("lfm2moe", &keys(&[])), Some(100)).unwrap();
        assert_eq!(hp.family, Family::Lfm2);
        assert_eq!(hp.recurrent_flags(), Some(&[true, true, false][..]));
        let m = hp.moe.unwrap();
        assert_eq!((m.experts, m.experts_used, m.expert_ffn, m.shared_ffn, m.dense_leading), (32, 4, 1792, 0, 2));
        assert_eq!((m.gating, m.normalize, m.weights_scale, m.ungated(), m.shared_gate), (MoeGating::Sigmoid, true, 1.0, false, false));
        // Its gating function and expert width are required, as llama.cpp requires them.
        for k in ["expert_gating_func", "expert_feed_forward_length"] {
            let mut without = keys(&[]);
            without.retain(|(key, _)| *key != k);
            assert!(
                matches!(
                    HParams::from_metadata(&md("lfm2moe", &without), Some(100)),
                    Err(ModelError::MissingMetadata { key }) if key == format!("lfm2moe.{k}")
                ),
                "{k}"
            );
        }
        // A plain `lfm2` file has none.
        let mut dense = keys(&[]);
        dense.retain(|(k, _)| !k.starts_with("expert") && *k != "leading_dense_block_count");
        assert_eq!(HParams::from_metadata(&md("lfm2", &dense), Some(100)).unwrap().moe, None);
    }

    #[test]
    fn head_counts_may_be_written_per_layer_when_every_layer_has_the_same() {
        let per_layer = |v: &[u32]| Value::Array(v.iter().map(|&x| Value::U32(x)).collect());
        // Granite 4.0's converter writes the K/V heads once per layer.
        let hp = HParams::from_metadata(
            &md(
                "granite",
                &[("logit_scale", Value::F32(8.0)), ("attention.head_count_kv", per_layer(&[2, 2]))],
            ),
            Some(100),
        )
        .unwrap();
        assert_eq!((hp.heads, hp.kv_heads), (4, 2));
        assert_eq!(
            bad_key(&md("llama", &[("attention.head_count_kv", per_layer(&[2, 4]))])),
            "llama.attention.head_count_kv"
        );
        assert_eq!(bad_key(&md("llama", &[("attention.head_count_kv", per_layer(&[]))])), "llama.attention.head_count_kv");
        assert_eq!(
            bad_key(&md("llama", &[("feed_forward_length", Value::Array(vec![Value::String("x".into())]))])),
            "llama.feed_forward_length"
        );
    }
}
