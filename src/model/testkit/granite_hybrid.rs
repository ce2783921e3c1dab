//! Random `granitehybrid` files: Granite 4.0's Mamba-2 layers beside its attention layers, as
//! llama.cpp's converter writes them (`ssm_in`, `ssm_conv1d` with its bias, `ssm_dt.bias`,
//! `ssm_a` and `ssm_d` as `[heads, 1]`, `ssm_norm` as `[groups, inner / groups]`, `ssm_out`;
//! per-layer `attention.head_count_kv`, 0 in a Mamba-2 layer; Granite's multipliers).
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose family is GraniteHybrid with
//! the tensors and metadata here: every layer a Mamba-2 mixer ([`TinyMamba2`]) except each
//! `attention_every`-th ([`TinyMamba2::attends`]), which attends with the spec's heads; dense MLPs, or
//! with `spec.moe` experts beside a shared expert (H-Tiny's and H-Small's layout).

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::gguf::{moe_tensors, Rand, TinyModelSpec};
use crate::model::ModelError;

/// The Mamba-2 mixer's sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TinyMamba2 {
    pub conv_kernel: usize,
    /// Twice the hidden width, as every Granite 4.0 hybrid's.
    pub inner: usize,
    pub state: usize,
    pub heads: usize,
    pub groups: usize,
    /// Without rope (`rope.scaling.finetuned` false), as IBM's files.
    pub no_rope: bool,
    /// Layer `i` attends where `i % attention_every == attention_every / 2` ([`Self::attends`]).
    pub attention_every: usize,
    /// Nemotron 3 Super's layout (`nemotron_h_moe` with experts): the experts' latent width
    /// (`moe_latent_size`).
    pub moe_latent: Option<usize>,
    /// The grouped RMSNorm of the mixer's output (`ssm_norm`); Falcon-H1's files without
    /// `mamba_rms_norm` have none.
    pub ssm_norm: bool,
}

impl TinyMamba2 {
    /// 16 heads of 32 (for a hidden width of 256) in 2 groups, a state of 16, 4 taps, no
    /// rope. (The input projection's rows, 1,104, a multiple of 16: llama.cpp's AMX kernels,
    /// which record the references on this machine, crash on others.)
    pub fn tiny(hidden: usize) -> Self {
        Self {
            conv_kernel: 4,
            inner: 2 * hidden,
            state: 16,
            heads: 16,
            groups: 2,
            no_rope: true,
            attention_every: 4,
            moe_latent: None,
            ssm_norm: true,
        }
    }

    /// Whether layer `i` attends (H-350M's 4 of 32, H-Tiny's 4 of 40; here every
    /// `attention_every`-th from the middle of the first run: the tiny's 2, 6, …).
    pub fn attends(&self, i: usize) -> bool {
        i % self.attention_every == self.attention_every / 2
    }

    fn channels(&self) -> usize {
        self.inner + 2 * self.groups * self.state
    }
}

/// The file's metadata (the vocabulary's aside).
pub(super) fn metadata(spec: &TinyModelSpec, t: &TinyMamba2) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let k = |s: &str| format!("granitehybrid.{s}");
    let kv: Vec<Value> = (0..spec.layers).map(|i| u32v(if t.attends(i) { spec.kv_heads } else { 0 })).collect();
    let mut md = vec![
        ("general.architecture".into(), Value::String("granitehybrid".into())),
        ("general.name".into(), Value::String("hearth-tiny-granitehybrid".into())),
        (k("context_length"), u32v(spec.context_length)),
        (k("embedding_length"), u32v(spec.hidden)),
        (k("block_count"), u32v(spec.layers)),
        (k("feed_forward_length"), u32v(spec.ffn)),
        (k("attention.head_count"), u32v(spec.heads)),
        (k("attention.head_count_kv"), Value::Array(kv)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        (k("rope.freq_base"), Value::F32(spec.rope_base)),
        (k("rope.scaling.finetuned"), Value::Bool(!t.no_rope)),
        (k("ssm.conv_kernel"), u32v(t.conv_kernel)),
        (k("ssm.inner_size"), u32v(t.inner)),
        (k("ssm.state_size"), u32v(t.state)),
        (k("ssm.time_step_rank"), u32v(t.heads)),
        (k("ssm.group_count"), u32v(t.groups)),
        (k("vocab_size"), u32v(spec.vocab.size)),
    ];
    if let Some(g) = spec.granite {
        md.push((k("embedding_scale"), Value::F32(g.embedding)));
        md.push((k("attention.scale"), Value::F32(g.attention)));
        md.push((k("residual_scale"), Value::F32(g.residual)));
        md.push((k("logit_scale"), Value::F32(g.logit)));
    }
    if let Some(m) = spec.moe {
        md.push((k("expert_count"), u32v(m.experts)));
        md.push((k("expert_used_count"), u32v(m.used)));
        md.push((k("expert_shared_feed_forward_length"), u32v(spec.ffn)));
    }
    md
}

/// Every layer's tensors (the embedding, output and final norm aside).
pub(super) fn tensors(
    spec: &TinyModelSpec,
    t: &TinyMamba2,
    rng: &mut Rand,
    moe_rng: &mut Rand,
) -> Result<Vec<(String, QTensor)>, ModelError> {
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
    let mut out = Vec::new();
    for i in 0..spec.layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        out.push(f32s(n("attn_norm.weight"), rng.around(d, 1.0, 0.1), &[d])?);
        if t.attends(i) {
            out.push(mat(n("attn_q.weight"), q_dim, d, rng)?);
            out.push(mat(n("attn_k.weight"), kv_dim, d, rng)?);
            out.push(mat(n("attn_v.weight"), kv_dim, d, rng)?);
            out.push(mat(n("attn_output.weight"), d, q_dim, rng)?);
        } else {
            out.extend(mamba2_tensors(i, d, t, wt, rng)?);
        }
        out.push(f32s(n("ffn_norm.weight"), rng.around(d, 1.0, 0.1), &[d])?);
        let f = spec.ffn;
        let shapes = [("ffn_gate", f, d), ("ffn_up", f, d), ("ffn_down", d, f)];
        match spec.moe {
            // A router and experts (the first the dense MLP the same stream gives), and a shared
            // expert of their width.
            Some(m) => {
                let dense = shapes.iter().map(|&(_, rows, cols)| rng.matrix(rows, cols, 1.0)).collect();
                out.extend(moe_tensors(i, d, f, m, dense, wt, moe_rng)?);
                for (name, rows, cols) in shapes {
                    out.push(mat(n(&format!("{name}_shexp.weight")), rows, cols, moe_rng)?);
                }
            }
            None => {
                for (name, rows, cols) in shapes {
                    out.push(mat(n(&format!("{name}.weight")), rows, cols, rng)?);
                }
            }
        }
    }
    Ok(out)
}

/// Layer `i`'s Mamba-2 tensors (`ssm_*`), its input projection and output of type `wt`.
pub(super) fn mamba2_tensors(i: usize, d: usize, t: &TinyMamba2, wt: GgmlDType, rng: &mut Rand) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let n = |s: &str| format!("blk.{i}.{s}");
    let mat = |name: String, rows: usize, cols: usize, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let w = Tensor::from_vec(rng.matrix(rows, cols, 1.0), (rows, cols), &cpu)?;
        Ok((name, QTensor::quantize(&w, wt)?))
    };
    let f32s = |name: String, data: Vec<f32>, dims: &[usize]| -> Result<(String, QTensor), ModelError> {
        Ok((name, QTensor::quantize(&Tensor::from_vec(data, dims, &cpu)?, GgmlDType::F32)?))
    };
    let (ch, heads) = (t.channels(), t.heads);
    let mut out = vec![mat(n("ssm_in.weight"), t.inner + ch + heads, d, rng)?];
    // Taps that mix the tokens without cancelling them.
    out.push(f32s(n("ssm_conv1d.weight"), rng.around(ch * t.conv_kernel, 0.3, 0.4), &[ch, t.conv_kernel])?);
    out.push(f32s(n("ssm_conv1d.bias"), rng.around(ch, 0.0, 0.2), &[ch])?);
    out.push(f32s(n("ssm_dt.bias"), rng.around(heads, 0.0, 1.0), &[heads])?);
    // `-exp(A_log)`: with steps about 0.3 to 1.3, decays of about 0.3 to 0.9 a token.
    let a: Vec<f32> = rng.around(heads, -0.5, 0.4).into_iter().map(|x| -x.exp()).collect();
    out.push(f32s(n("ssm_a"), a, &[heads, 1])?);
    out.push(f32s(n("ssm_d"), rng.around(heads, 1.0, 0.5), &[heads, 1])?);
    if t.ssm_norm {
        out.push(f32s(n("ssm_norm.weight"), rng.around(t.inner, 1.0, 0.1), &[t.groups, t.inner / t.groups])?);
    }
    out.push(mat(n("ssm_out.weight"), d, t.inner, rng)?);
    Ok(out)
}
