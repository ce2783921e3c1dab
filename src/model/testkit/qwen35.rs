//! Random `qwen35` files: Qwen3.5's gated delta net layers beside its gated attention, as
//! llama.cpp's converter writes them (`attn_qkv`, `attn_gate`, `ssm_*` in the recurrent layers;
//! `attn_q` with each head's gate rows after its Q rows, q/k norms, in the others; the MLP's
//! norm as `post_attention_norm`).
//!
//! [`super::gguf::write_model`] writes a [`TinyModelSpec`] whose family is Qwen35 with the
//! tensors and metadata here: the spec's attention fields and MLP are read; [`TinyDeltaNet`]
//! says the rest.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::gguf::{moe_tensors, Rand, TinyModelSpec};
use crate::model::ModelError;

/// What a `qwen35` file has beyond the spec's common fields.
#[derive(Debug, Clone, PartialEq)]
pub struct TinyDeltaNet {
    pub conv_kernel: usize,
    pub k_heads: usize,
    pub v_heads: usize,
    /// Each Q/K head's and each V head's width (equal, as llama.cpp requires).
    pub head: usize,
    /// Every this-many-th layer attends (`full_attention_interval`).
    pub attention_every: usize,
    /// Qwen3-Next's layout (`qwen3next`): V heads grouped by Q/K head, betas and alphas in one
    /// `ssm_ba` grouped so.
    pub grouped: bool,
    /// With `grouped`, its older files' one `ssm_in` (per Q/K head: Q, K, V, z) in place of
    /// `attn_qkv` and `attn_gate`.
    pub ssm_in: bool,
}

impl TinyDeltaNet {
    /// Two Q/K heads shared by four V heads of 32, a 4-tap convolution; every second layer
    /// attends (Qwen3.5's: every fourth).
    pub fn tiny() -> Self {
        Self {
            conv_kernel: 4,
            k_heads: 2,
            v_heads: 4,
            head: 32,
            attention_every: 2,
            grouped: false,
            ssm_in: false,
        }
    }

    fn channels(&self) -> usize {
        2 * self.k_heads * self.head + self.v_heads * self.head
    }
}

/// The file's metadata (the vocabulary's aside).
pub(super) fn metadata(spec: &TinyModelSpec, t: &TinyDeltaNet) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let arch = spec.arch.unwrap_or("qwen35");
    let k = |s: &str| format!("{arch}.{s}");
    let rope_dims = spec.rope_dims.unwrap_or(spec.head_dim);
    let mut md = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("hearth-tiny-{arch}"))),
        (k("context_length"), u32v(spec.context_length)),
        (k("embedding_length"), u32v(spec.hidden)),
        (k("block_count"), u32v(spec.layers)),
        (k("feed_forward_length"), u32v(spec.ffn)),
        (k("attention.head_count"), u32v(spec.heads)),
        (k("attention.head_count_kv"), u32v(spec.kv_heads)),
        (k("attention.key_length"), u32v(spec.head_dim)),
        (k("attention.value_length"), u32v(spec.head_dim)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("rope.freq_base"), Value::F32(spec.rope_base)),
        (k("rope.dimension_count"), u32v(rope_dims)),
        (k("full_attention_interval"), u32v(t.attention_every)),
        (k("ssm.conv_kernel"), u32v(t.conv_kernel)),
        (k("ssm.inner_size"), u32v(t.v_heads * t.head)),
        (k("ssm.state_size"), u32v(t.head)),
        (k("ssm.time_step_rank"), u32v(t.v_heads)),
        (k("ssm.group_count"), u32v(t.k_heads)),
        (k("vocab_size"), u32v(spec.vocab.size)),
    ];
    if let Some(m) = spec.moe {
        md.push((k("expert_count"), u32v(m.experts)));
        md.push((k("expert_used_count"), u32v(m.used)));
        md.push((k("expert_feed_forward_length"), u32v(spec.ffn)));
        md.push((k("expert_shared_feed_forward_length"), u32v(spec.ffn)));
    }
    if let Some(sections) = spec.rope_sections {
        let v = sections.iter().map(|&n| Value::I32(n as i32)).collect();
        md.push((k("rope.dimension_sections"), Value::Array(v)));
    }
    md
}

/// Every layer's tensors (the embedding, output and final norm aside).
pub(super) fn tensors(
    spec: &TinyModelSpec,
    t: &TinyDeltaNet,
    rng: &mut Rand,
    moe_rng: &mut Rand,
) -> Result<Vec<(String, QTensor)>, ModelError> {
    let cpu = Device::Cpu;
    let wt = spec.weight_type.ggml();
    let (d, hd) = (spec.hidden, spec.head_dim);
    let (q_dim, kv_dim) = (spec.heads * hd, spec.kv_heads * hd);
    let mat = |name: String, rows: usize, cols: usize, gain: f32, rng: &mut Rand| -> Result<(String, QTensor), ModelError> {
        let w = Tensor::from_vec(rng.matrix(rows, cols, gain), (rows, cols), &cpu)?;
        Ok((name, QTensor::quantize(&w, wt)?))
    };
    let f32s = |name: String, data: Vec<f32>, dims: &[usize]| -> Result<(String, QTensor), ModelError> {
        Ok((name, QTensor::quantize(&Tensor::from_vec(data, dims, &cpu)?, GgmlDType::F32)?))
    };
    let values = t.v_heads * t.head;
    let mut out = Vec::new();
    for i in 0..spec.layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        out.push(f32s(n("attn_norm.weight"), rng.around(d, 1.0, 0.1), &[d])?);
        if (i + 1) % t.attention_every != 0 {
            if t.ssm_in {
                out.push(mat(n("ssm_in.weight"), t.channels() + values, d, 1.0, rng)?);
            } else {
                out.push(mat(n("attn_qkv.weight"), t.channels(), d, 1.0, rng)?);
                out.push(mat(n("attn_gate.weight"), values, d, 1.0, rng)?);
            }
            // A convolution that mixes the taps without cancelling them.
            out.push(f32s(n("ssm_conv1d.weight"), rng.around(t.channels() * t.conv_kernel, 0.3, 0.4), &[t.channels(), t.conv_kernel])?);
            out.push(f32s(n("ssm_dt.bias"), rng.around(t.v_heads, 0.0, 1.0), &[t.v_heads])?);
            // `-exp(A_log)`: decays between about 0.3 and 0.95 a token.
            let a: Vec<f32> = rng.around(t.v_heads, -0.5, 0.4).into_iter().map(|x| -x.exp()).collect();
            out.push(f32s(n("ssm_a"), a, &[t.v_heads])?);
            if t.grouped {
                out.push(mat(n("ssm_ba.weight"), 2 * t.v_heads, d, 1.0, rng)?);
            } else {
                out.push(mat(n("ssm_beta.weight"), t.v_heads, d, 1.0, rng)?);
                out.push(mat(n("ssm_alpha.weight"), t.v_heads, d, 1.0, rng)?);
            }
            out.push(f32s(n("ssm_norm.weight"), rng.around(t.head, 1.0, 0.1), &[t.head])?);
            out.push(mat(n("ssm_out.weight"), d, values, 1.0, rng)?);
        } else {
            out.push(mat(n("attn_q.weight"), 2 * q_dim, d, 1.0, rng)?);
            out.push(mat(n("attn_k.weight"), kv_dim, d, 1.0, rng)?);
            out.push(mat(n("attn_v.weight"), kv_dim, d, 1.0, rng)?);
            out.push(mat(n("attn_output.weight"), d, q_dim, 1.0, rng)?);
            out.push(f32s(n("attn_q_norm.weight"), rng.around(hd, 1.0, 0.1), &[hd])?);
            out.push(f32s(n("attn_k_norm.weight"), rng.around(hd, 1.0, 0.1), &[hd])?);
        }
        out.push(f32s(n("post_attention_norm.weight"), rng.around(d, 1.0, 0.1), &[d])?);
        let f = spec.ffn;
        let shapes = [("ffn_gate", f, d), ("ffn_up", f, d), ("ffn_down", d, f)];
        match spec.moe {
            // The MoE files: a router and experts (the first is the dense MLP the same stream
            // gives), a shared expert and its gate's scores.
            Some(m) => {
                let dense = shapes.iter().map(|&(_, rows, cols)| rng.matrix(rows, cols, 1.0)).collect();
                out.extend(moe_tensors(i, d, f, m, dense, wt, moe_rng)?);
                for (name, rows, cols) in shapes {
                    out.push(mat(n(&format!("{name}_shexp.weight")), rows, cols, 1.0, moe_rng)?);
                }
                out.push(f32s(n("ffn_gate_inp_shexp.weight"), moe_rng.matrix(1, d, 1.0), &[d])?);
            }
            None => {
                for (name, rows, cols) in shapes {
                    out.push(mat(n(&format!("{name}.weight")), rows, cols, 1.0, rng)?);
                }
            }
        }
    }
    Ok(out)
}
