//! Random Gemma 4 files: layers of two shapes (local heads, and fewer, wider global ones whose
//! rope turns a quarter of each head), per-layer token embeddings and K/V shared by the last
//! layers (the E models), K as V in global layers and a dense MLP beside routed experts (the
//! 26B-A4B), as llama.cpp's converter writes them.
//!
//! Gemma 3n's files (`gemma3n`, [`TinyAltUp`]) are the E models' layers of one shape around
//! AltUp's streams, with Laurel's blocks and sparse MLP gates in the first layers.
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose family is Gemma 4 with the
//! tensors and metadata here; the spec's `heads`, `kv_heads`, `head_dim` and `ffn` are the
//! local layers' (and with `moe`, each expert's width), [`TinyGemma4`] says the rest.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::gguf::{Rand, TinyModelSpec};
use crate::model::ModelError;

/// What a Gemma 4 file has beyond the spec's common fields.
#[derive(Debug, Clone, PartialEq)]
pub struct TinyGemma4 {
    /// One flag per layer: `true` for a local (sliding-window) layer.
    pub local: Vec<bool>,
    pub global_kv_heads: usize,
    pub global_head_dim: usize,
    /// Of each global head's pairs, how many rope turns (`rope_freqs` holds 1 for these and
    /// 10³⁰ for the rest: Gemma 4's "proportional" rope).
    pub global_rotated_pairs: usize,
    /// The global layers have no `attn_v`: V is K's projection (the 26B's and 31B's).
    pub k_eq_v: bool,
    /// The last this-many layers keep no K/V (`attention.shared_kv_layers`).
    pub shared_kv_layers: usize,
    /// The per-layer embedding's width (0: none).
    pub per_layer_input: usize,
    /// Each layer's dense MLP width.
    pub ffn: Vec<usize>,
    pub final_softcap: Option<f32>,
    /// Gemma 3n's additions: the file is then `gemma3n`'s, without `rope_freqs` or
    /// `layer_output_scale`.
    pub altup: Option<TinyAltUp>,
}

/// What a Gemma 3n file adds to the E models' layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TinyAltUp {
    /// AltUp's streams (`altup.num_inputs`).
    pub inputs: usize,
    /// Laurel's rank (`laurel_l`'s rows).
    pub laurel_rank: usize,
    /// The first this-many layers' MLP gates are sparse (at the 95th percentile).
    pub sparse_layers: usize,
}

impl TinyGemma4 {
    /// The E models' shape in 5 layers: local, local, global, then a local and a global layer
    /// that read the K/V of layers 1 and 2, with MLPs twice as wide; per-layer embeddings of
    /// 32; one global K/V head of 128.
    pub fn e_model() -> Self {
        Self {
            local: vec![true, true, false, true, false],
            global_kv_heads: 1,
            global_head_dim: 128,
            global_rotated_pairs: 16,
            k_eq_v: false,
            shared_kv_layers: 2,
            per_layer_input: 32,
            ffn: vec![256, 256, 256, 512, 512],
            final_softcap: Some(10.0),
            altup: None,
        }
    }

    /// The 26B-A4B's shape in 3 layers (local, local, global), K as V in the global one, a
    /// dense MLP of 192 beside the experts.
    pub fn moe_model() -> Self {
        Self {
            local: vec![true, true, false],
            global_kv_heads: 1,
            global_head_dim: 128,
            global_rotated_pairs: 16,
            k_eq_v: true,
            shared_kv_layers: 0,
            per_layer_input: 0,
            ffn: vec![192; 3],
            final_softcap: None,
            altup: None,
        }
    }
}

impl TinyGemma4 {
    /// Gemma 4 E2B's layer shape (one K/V head of 256 in local layers, of 512 in global ones,
    /// a quarter of it rotated; per-layer inputs of 256; MLPs of 6,144, twice that in the
    /// layers sharing K/V) in 10 of its 35 layers: two runs of four local layers and a global
    /// one, the second run sharing the first's K/V (as its last 20 layers share its 15th's and
    /// 14th's: llama.cpp reads the last K/V layer as global and the one before as local).
    pub fn e2b_10_layers() -> Self {
        let local: Vec<bool> = (0..10).map(|l| l % 5 != 4).collect();
        Self {
            local,
            global_kv_heads: 1,
            global_head_dim: 512,
            global_rotated_pairs: 64,
            k_eq_v: false,
            shared_kv_layers: 5,
            per_layer_input: 256,
            ffn: (0..10).map(|l| if l < 5 { 6144 } else { 12288 }).collect(),
            final_softcap: Some(30.0),
            altup: None,
        }
    }

    /// Gemma 3n's shape in `layers` layers of one head shape (`kv_heads` K/V heads of
    /// `head_dim`, MLPs of `ffn`): runs of four local layers and a global one, the layers from
    /// `kv_layers` on reading the K/V of the last local and global layers before it (llama.cpp
    /// fixes `kv_layers` at 20, so the files it runs have 25 layers: layers 18 and 19), the
    /// first `kv_layers / 2` layers' MLP gates sparse (llama.cpp's 10); per-layer inputs of
    /// 256, 4 streams and Laurel of rank 64 (llama.cpp's fixed values), logits capped at 30
    /// (llama.cpp's, whatever the file says).
    pub fn gemma3n(layers: usize, kv_layers: usize, [kv_heads, head_dim, ffn]: [usize; 3]) -> Self {
        Self {
            local: (0..layers).map(|l| l % 5 != 4).collect(),
            global_kv_heads: kv_heads,
            global_head_dim: head_dim,
            global_rotated_pairs: head_dim / 2,
            k_eq_v: false,
            shared_kv_layers: layers - kv_layers,
            per_layer_input: 256,
            ffn: vec![ffn; layers],
            final_softcap: Some(30.0),
            altup: Some(TinyAltUp {
                inputs: 4,
                laurel_rank: 64,
                sparse_layers: kv_layers / 2,
            }),
        }
    }
}

/// The architecture's metadata (the vocabulary's is added by the caller).
pub(super) fn metadata(spec: &TinyModelSpec, g: &TinyGemma4) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let arch = if g.altup.is_some() { "gemma3n" } else { "gemma4" };
    let k = |s: &str| format!("{arch}.{s}");
    let per_layer = |f: &dyn Fn(bool) -> usize| Value::Array(g.local.iter().map(|&l| u32v(f(l))).collect());
    let mut md = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("hearth-tiny-{arch}"))),
        (k("context_length"), u32v(spec.context_length)),
        (k("embedding_length"), u32v(spec.hidden)),
        (k("block_count"), u32v(g.local.len())),
        (k("feed_forward_length"), Value::Array(g.ffn.iter().map(|&f| u32v(f)).collect())),
        (k("attention.head_count"), u32v(spec.heads)),
        (k("attention.head_count_kv"), per_layer(&|l| if l { spec.kv_heads } else { g.global_kv_heads })),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("attention.key_length"), u32v(g.global_head_dim)),
        (k("attention.value_length"), u32v(g.global_head_dim)),
        (k("attention.key_length_swa"), u32v(spec.head_dim)),
        (k("attention.value_length_swa"), u32v(spec.head_dim)),
        (k("attention.sliding_window"), u32v(spec.sliding_window.map_or(8, |(w, _)| w))),
        (k("attention.sliding_window_pattern"), Value::Array(g.local.iter().map(|&l| Value::Bool(l)).collect())),
        (k("attention.shared_kv_layers"), u32v(g.shared_kv_layers)),
        (k("embedding_length_per_layer_input"), u32v(g.per_layer_input)),
        (k("rope.freq_base"), Value::F32(spec.rope_base)),
        (k("rope.freq_base_swa"), Value::F32(spec.rope_base / 10.0)),
        (k("rope.dimension_count"), u32v(g.global_head_dim)),
        (k("rope.dimension_count_swa"), u32v(spec.head_dim)),
        (k("vocab_size"), u32v(spec.vocab.size)),
    ];
    if let Some(c) = g.final_softcap {
        md.push((k("final_logit_softcapping"), Value::F32(c)));
    }
    if let Some(a) = g.altup {
        md.push((k("altup.active_idx"), u32v(0)));
        md.push((k("altup.num_inputs"), u32v(a.inputs)));
        // As the converter writes the checkpoint's sparsity: its normal quantile, −∞ for 0.
        let scales = (0..g.local.len()).map(|l| Value::F32(if l < a.sparse_layers { 1.644_853_4 } else { f32::NEG_INFINITY }));
        md.push((k("activation_sparsity_scale"), Value::Array(scales.collect())));
    }
    if let Some(m) = spec.moe {
        md.push((k("expert_count"), u32v(m.experts)));
        md.push((k("expert_used_count"), u32v(m.used)));
        md.push((k("expert_feed_forward_length"), u32v(spec.ffn)));
    }
    md
}

/// Every tensor but the token embedding, the output projection and the final norm (which the
/// caller writes as for every family).
pub(super) fn tensors(
    spec: &TinyModelSpec,
    g: &TinyGemma4,
    rng: &mut Rand,
    moe_rng: &mut Rand,
) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let wt = spec.weight_type.ggml();
    let d = spec.hidden;
    let layers = g.local.len();
    let ple = g.per_layer_input;
    let mat = |name: String, rows: usize, cols: usize, gain: f32, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let t = Tensor::from_vec(rng.matrix(rows, cols, gain), (rows, cols), &cpu)?;
        Ok((name, QTensor::quantize(&t, wt)?))
    };
    let vector = |name: String, data: Vec<f32>| -> Result<(String, QTensor), ModelError> {
        let n = data.len();
        Ok((name, QTensor::quantize(&Tensor::from_vec(data, n, &cpu)?, GgmlDType::F32)?))
    };
    let half = g.global_head_dim / 2;
    let factors: Vec<f32> = (0..half).map(|i| if i < g.global_rotated_pairs { 1.0 } else { 1e30 }).collect();
    let mut out = Vec::new();
    match g.altup {
        None => out.push(vector("rope_freqs.weight".into(), factors)?),
        Some(a) => out.extend(altup_tensors(spec, &a, layers, rng)?),
    }
    if ple > 0 {
        out.push(mat("per_layer_token_embd.weight".into(), spec.vocab.size, ple * layers, 1.0, rng)?);
        out.push(mat("per_layer_model_proj.weight".into(), ple * layers, d, 1.0, rng)?);
        out.push(vector("per_layer_proj_norm.weight".into(), rng.around(ple, 1.0, 0.1))?);
    }
    let kv_layers = layers - g.shared_kv_layers;
    // Gemma 3n's block outputs small beside the streams (as a trained model's): 25 random
    // layers of full-size updates amplify a rounding flipped in one program and not the other.
    let post = if g.altup.is_some() { ALTUP_POST_NORM } else { 1.0 };
    for (i, &local) in g.local.iter().enumerate() {
        let n = |s: &str| format!("blk.{i}.{s}");
        let (kvh, hd) = if local { (spec.kv_heads, spec.head_dim) } else { (g.global_kv_heads, g.global_head_dim) };
        let q_dim = spec.heads * hd;
        out.push(vector(n("attn_norm.weight"), rng.around(d, 1.0, 0.1))?);
        out.push(mat(n("attn_q.weight"), q_dim, d, 1.0, rng)?);
        // Q and K are normalized per head and their product is not scaled: small norm weights
        // keep the scores a few units wide.
        out.push(vector(n("attn_q_norm.weight"), rng.around(hd, 0.25, 0.05))?);
        // (Gemma 3n's files keep them in the layers that share K/V too, unused.)
        if i < kv_layers || g.altup.is_some() {
            out.push(mat(n("attn_k.weight"), kvh * hd, d, 1.0, rng)?);
            if local || !g.k_eq_v {
                out.push(mat(n("attn_v.weight"), kvh * hd, d, 1.0, rng)?);
            }
            out.push(vector(n("attn_k_norm.weight"), rng.around(hd, 0.25, 0.05))?);
        }
        out.push(mat(n("attn_output.weight"), d, q_dim, 1.0, rng)?);
        out.push(vector(n("post_attention_norm.weight"), rng.around(d, post, 0.1 * post))?);
        let f = g.ffn[i];
        out.push(vector(n("ffn_norm.weight"), rng.around(d, 1.0, 0.1))?);
        out.push(mat(n("ffn_gate.weight"), f, d, 1.0, rng)?);
        out.push(mat(n("ffn_up.weight"), f, d, 1.0, rng)?);
        out.push(mat(n("ffn_down.weight"), d, f, 1.0, rng)?);
        out.push(vector(n("post_ffw_norm.weight"), rng.around(d, post, 0.1 * post))?);
        if let Some(m) = spec.moe {
            let fe = spec.ffn;
            out.push(vector(n("pre_ffw_norm_2.weight"), moe_rng.around(d, 1.0, 0.1))?);
            out.push(vector(n("post_ffw_norm_1.weight"), moe_rng.around(d, 1.0, 0.1))?);
            out.push(vector(n("post_ffw_norm_2.weight"), moe_rng.around(d, 1.0, 0.1))?);
            // Router logits of a few units: the router reads the normalized input over √hidden,
            // so its weights are that much larger; clear choices.
            let gain = 3.0 * (d as f32).sqrt();
            let router = Tensor::from_vec(moe_rng.matrix(m.experts, d, gain), (m.experts, d), &cpu)?;
            out.push((n("ffn_gate_inp.weight"), QTensor::quantize(&router, GgmlDType::F32)?));
            out.push(vector(n("ffn_gate_inp.scale"), moe_rng.around(d, 1.0, 0.3))?);
            // As Gemma 4's converter writes them: each expert's gate and up rows in one tensor.
            for (name, rows, cols) in [("ffn_gate_up_exps", 2 * fe, d), ("ffn_down_exps", d, fe)] {
                let w: Vec<f32> = (0..m.experts).flat_map(|_| moe_rng.matrix(rows, cols, 1.0)).collect();
                let t = Tensor::from_vec(w, (m.experts, rows, cols), &cpu)?;
                out.push((n(&format!("{name}.weight")), QTensor::quantize(&t, wt)?));
            }
            out.push(vector(n("ffn_down_exps.scale"), moe_rng.around(m.experts, 1.0, 0.5))?);
        }
        if ple > 0 {
            out.push(mat(n("inp_gate.weight"), ple, d, 1.0, rng)?);
            out.push(mat(n("proj.weight"), d, ple, 1.0, rng)?);
            out.push(vector(n("post_norm.weight"), rng.around(d, post, 0.1 * post))?);
        }
        if g.altup.is_none() {
            out.push(vector(n("layer_output_scale.weight"), rng.around(1, 0.8, 0.15))?);
        }
    }
    Ok(out)
}

/// The post-norms' weights in Gemma 3n's files (the attention's, the MLP's, Laurel's, the
/// per-layer input's).
const ALTUP_POST_NORM: f32 = 0.2;

/// Gemma 3n's AltUp projections and each layer's AltUp and Laurel tensors. The router reads
/// its normed input over `hidden`, so its weights are that much larger (modalities of a few
/// tenths); the coefficients are small, as a trained model's. With coefficients four times
/// larger and post-norms of 1, the f32 file was 0.145 from llama.cpp (whose GELU looks its
/// values up in a table of f16 inputs) and the Q8_0 file's greedy pick differed at the third
/// token: this much depth amplified those roundings.
fn altup_tensors(spec: &TinyModelSpec, a: &TinyAltUp, layers: usize, rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let (wt, d, n) = (spec.weight_type.ggml(), spec.hidden, a.inputs);
    let tensor = |name: String, data: Vec<f32>, shape: &[usize], dtype: GgmlDType| -> Result<(String, QTensor), ModelError> {
        Ok((name, QTensor::quantize(&Tensor::from_vec(data, shape, &cpu)?, dtype)?))
    };
    let mut out = Vec::new();
    for name in ["altup_proj.weight", "altup_unembd_proj.weight"] {
        let w: Vec<f32> = (0..n - 1).flat_map(|_| rng.matrix(d, d, 1.0)).collect();
        out.push(tensor(name.into(), w, &[n - 1, d, d], wt)?);
    }
    for i in 0..layers {
        let name = |s: &str| format!("blk.{i}.{s}");
        out.push(tensor(name("altup_router.weight"), rng.matrix(n, d, d as f32 / 2.0), &[n, d], wt)?);
        out.push(tensor(name("altup_router_norm.weight"), rng.around(d, 1.0, 0.1), &[d], GgmlDType::F32)?);
        out.push(tensor(name("altup_predict_coef.weight"), rng.matrix(n * n, n, 0.05), &[n * n, n], GgmlDType::F32)?);
        out.push(tensor(name("altup_correct_coef.weight"), rng.matrix(n, n, 0.075), &[n, n], GgmlDType::F32)?);
        out.push(tensor(name("altup_correct_scale.weight"), rng.around(d, 1.0, 0.2), &[d], GgmlDType::F32)?);
        out.push(tensor(name("laurel_l.weight"), rng.matrix(a.laurel_rank, d, 1.0), &[a.laurel_rank, d], wt)?);
        out.push(tensor(name("laurel_r.weight"), rng.matrix(d, a.laurel_rank, 1.0), &[d, a.laurel_rank], wt)?);
        out.push(tensor(name("laurel_post_norm.weight"), rng.around(d, ALTUP_POST_NORM, 0.1 * ALTUP_POST_NORM), &[d], GgmlDType::F32)?);
    }
    Ok(out)
}
