//! Our transformer forward: one implementation for every supported family.
//!
//! `forward` takes a packed batch (several sequences of different lengths,
//! see [`BatchLayout`]) and a [`KvStore`]; it never owns a cache. Per layer it
//! computes Q/K/V for all packed rows with one matmul each, applies the
//! family's small differences (bias, q/k norm, rope pairing), and hands Q/K/V
//! to the store, which appends K/V and attends. Only the rows whose logits
//! are wanted go through the output projection.
//!
//! A mixture-of-experts model (Qwen3 MoE, Mixtral, GLM-4.5, gpt-oss) has a router and expert
//! MLPs in place of each MLP ([`MoeMlp`]); everything else is the same forward.
//!
//! Weights stay quantized ([`QLinear`]: our CPU kernels for the hot GGUF
//! types, candle's `QMatMul` otherwise), the token embedding table too
//! ([`TokenEmbedding`]: host memory, rows dequantized per forward); norms and
//! biases are f32. Activations are f32; the MLP's gate is [`glu::gated`].
//!
//! Counterpart: candle-transformers' `quantized_llama.rs` / `quantized_qwen2.rs` /
//! `quantized_qwen3.rs` (same tensors and math, one file instead of three),
//! vLLM's `LlamaModel.forward` over flattened tokens.

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::{DType, Device, Tensor};

use super::gguf::weight::Weight;
use super::gguf::GgufFile;
use super::delta_net::{DeltaNet, RecurrentSeq, RecurrentState};
use super::gemma3n::{AltUp, LayerAltUp};
use super::gemma4::{layer_input, DenseAndExperts, PerLayerEmbedding, PerLayerInput};
use super::block_norm::BlockNorm;
use super::hparams::{AttnShape, Family, HParams, LocalRope, MlpKind, RopeScaling, Xielu};
use super::embedding::TokenEmbedding;
use super::linear::{FusedLinear, QLinear};
use super::mla::LatentAttention;
use super::mamba::Mamba;
use super::pooling::{Affine, Classifier};
use super::mamba2::Mamba2;
use super::short_conv::ShortConv;
use super::moe::MoeMlp;
use super::rope::{positions_tensor, RopeSpec, RopeTables};
use super::ModelError;
use crate::ops::glu::Gate;
use crate::ops::norm;
use crate::ops::{Attend, BatchLayout, KvShape, KvStore, OpsError, ShiftedLayers};

/// Which rows get logits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logits {
    /// The last new token of each sequence: `[sequences, vocab]`.
    LastPerSequence,
    /// Every packed row: `[tokens, vocab]`.
    All,
    /// These packed rows, in this order: `[rows, vocab]`.
    Rows(Vec<u32>),
}

struct Attention {
    /// The layer's heads (Gemma 4's global layers differ from its local ones).
    shape: AttnShape,
    /// Q, K and V projections (fused when their weights share a type); Q and K alone where V
    /// is K's projection (Gemma 4's global layers without `attn_v`: V is K before K's norm),
    /// Q alone where the layer reads another's K/V.
    qkv: FusedLinear,
    /// The store layer whose K/V this layer writes and reads ([`HParams::kv_layer`]): its own,
    /// or an earlier one's, already written by the same forward, which it only reads.
    kv_layer: usize,
    /// Whether it writes K/V (else it reads `kv_layer`'s).
    writes_kv: bool,
    /// Qwen3.5: each head's Q projection is followed by as many gate values; the attention
    /// output is multiplied by their sigmoid before the output projection.
    q_gate: bool,
    /// AFMoE's output gate: its own projection of the normed input (`attn_gate`).
    out_gate: Option<QLinear>,
    /// BitNet b1.58: the RMSNorm of the attention's output before `attn_output`
    /// (`attn_sub_norm`).
    sub_norm: Option<Tensor>,
    /// Gemma 4: V normalized per head (RMS, weights of 1).
    v_norm: Option<Tensor>,
    wo: QLinear,
    /// Qwen2: biases of the Q/K/V projections.
    bias: Option<[Tensor; 3]>,
    /// The weights of Q's and K's norms, run where `qk_norm` says: RMSNorms', or the per-head
    /// LayerNorms' `[heads, head_dim]`. (Gemma 4's layers that read another's K/V have Q's
    /// only.)
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    qk_norm: QkNorm,
    /// The per-head LayerNorms' unit weight (`QkNorm::PerHeadLayer`, where the layer has the
    /// norms): each head is normalized with it, then multiplied by its own weights.
    qk_unit: Option<Tensor>,
    /// jina-embeddings-v2's code model: biased LayerNorms of all of Q and all of K
    /// (`attn_q_norm`, `attn_k_norm`), after their biases, before the heads are split.
    qk_layer_norms: Option<[BlockNorm; 2]>,
    /// gpt-oss, StarCoder2, Phi-2: the output projection's bias.
    out_bias: Option<Tensor>,
    /// gpt-oss: one sink logit per query head ([`Attend::sinks`]), on the host.
    sinks: Option<Vec<f32>>,
}

/// Where a layer's Q and K norms run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QkNorm {
    /// Over each head's values, before rope (Qwen3's).
    PerHead,
    /// Over all of Q and all of K, before rope (OLMo 2's: `HParams::qk_norm_whole`).
    Whole,
    /// Over each head's values, after rope (Hunyuan's: `HParams::qk_norm_after_rope`).
    PerHeadAfterRope,
    /// A LayerNorm (without bias) over each head's values with weights of each head's own,
    /// before rope (Command R+'s, StableLM 2 12B's: the LayerNorm families' Q/K norms).
    PerHeadLayer,
}

pub(super) struct Mlp {
    /// Gate and up projections (fused when their weights share a type), or up alone.
    gate_up: FusedLinear,
    down: QLinear,
    /// What runs between them.
    kind: MlpKind,
    /// Apertus: the layer's xIELU parameters ([`MlpKind::UpXielu`]).
    xielu: Option<Xielu>,
    /// The projections' biases where the family has them (`HParams::out_biases`).
    biases: Option<MlpBiases>,
    /// Gemma 3n's first layers: the gate's Gaussian top-k with this many standard deviations
    /// ([`super::gemma3n::sparse_gate`]) before its activation.
    sparsity: Option<f32>,
    /// BitNet b1.58: the RMSNorm (weights, epsilon) of the gated product before the down
    /// projection (`ffn_sub_norm`).
    sub_norm: Option<(Tensor, f32)>,
}

/// A dense MLP's biases: up's and down's (StarCoder2's, Phi-2's and the other coder and GPT-2
/// layouts'), and a gated MLP's gate's (Jais's).
pub(super) struct MlpBiases {
    gate: Option<Tensor>,
    /// (jina-embeddings-v2's files may have none.)
    up: Option<Tensor>,
    down: Tensor,
}

impl Mlp {
    pub(super) fn forward(&self, h: &Tensor, act: Gate) -> Result<Tensor, ModelError> {
        let mut gate_up = self.gate_up.forward(h)?;
        if let Some(b) = &self.biases {
            if let (Some(up), Some(bias)) = (gate_up.last_mut(), &b.up) {
                *up = up.broadcast_add(bias)?;
            }
            if let (Some(gate_b), [gate, _]) = (&b.gate, gate_up.as_mut_slice()) {
                *gate = gate.broadcast_add(gate_b)?;
            }
        }
        if let (Some(k), [gate, _]) = (self.sparsity, gate_up.as_mut_slice()) {
            *gate = super::gemma3n::sparse_gate(gate, k)?;
        }
        let hidden = match (self.kind, gate_up.as_slice()) {
            // GELU's tanh approximation, as ggml's.
            (MlpKind::UpGelu, [up]) => crate::ops::glu::activated(up, Gate::GeluTanh)?,
            (MlpKind::UpXielu, [up]) => match self.xielu {
                Some(x) => xielu(up, x)?,
                None => return Err(ModelError::Ops(crate::ops::OpsError::Layout("an xIELU MLP without its parameters".into()))),
            },
            // Gated, or Nemotron-H's and Arcee's squared ReLU of up.
            _ => super::moe::activated(&gate_up, act)?,
        };
        let hidden = match &self.sub_norm {
            Some((n, eps)) => norm::rms_norm(&hidden, n, *eps)?,
            None => hidden,
        };
        let out = self.down.forward(&hidden)?;
        Ok(match &self.biases {
            Some(b) => out.broadcast_add(&b.down)?,
            None => out,
        })
    }
}

/// Apertus's xIELU of every value of `x` (see [`Xielu`]), in candle's ops on any device:
/// `a_p·x² + β·x` where `x > 0`, else `(exp(min(x, ε)) − 1 − x)·a_n + β·x`.
fn xielu(x: &Tensor, p: Xielu) -> Result<Tensor, ModelError> {
    let linear = x.affine(f64::from(p.beta), 0.0)?;
    let positive = (x.sqr()?.affine(f64::from(p.a_p), 0.0)? + &linear)?;
    let clipped = x.minimum(f64::from(p.eps))?;
    let negative = ((clipped.exp()?.affine(1.0, -1.0)? - x)?.affine(f64::from(p.a_n), 0.0)? + &linear)?;
    Ok(x.gt(0.0)?.where_cond(&positive, &negative)?)
}

/// A layer's feed-forward block.
enum Ffn {
    Dense(Mlp),
    /// Qwen3 MoE, Mixtral: a router over expert MLPs.
    Moe(MoeMlp),
    /// Gemma 4 26B-A4B: a dense MLP beside routed experts.
    DenseAndExperts(DenseAndExperts),
    /// None: Nemotron-H's mixer layers.
    None,
}

impl Ffn {
    /// The block's output for the residual stream `x`, whose input norm is `norm`; experts
    /// routed on `router_in` where given (SmallThinker's layer input), else on their input.
    fn forward(&self, x: &Tensor, norm: Option<&BlockNorm>, eps: f64, act: Gate, router_in: Option<&Tensor>) -> Result<Tensor, ModelError> {
        match (self, norm) {
            (Self::Dense(m), _) => m.forward(&pre_norm(x, norm)?, act),
            (Self::Moe(m), _) => match router_in {
                Some(r) => m.forward_routed(&pre_norm(x, norm)?, r, act),
                None => m.forward(&pre_norm(x, norm)?, act),
            },
            (Self::DenseAndExperts(f), Some(n)) => f.forward(x, n, eps, act),
            (Self::DenseAndExperts(_), None) => {
                Err(OpsError::Layout("a dense-and-experts block without its input norm".into()).into())
            }
            (Self::None, _) => Err(OpsError::Layout("the MLP of a layer without one".into()).into()),
        }
    }
}

/// A layer's attention block.
enum SelfAttention {
    /// Heads with their own K/V (every family but DeepSeek-V2's).
    Heads(Attention),
    /// DeepSeek-V2's multi-head latent attention.
    Latent(LatentAttention),
    /// Qwen3.5's gated delta net (linear attention with a state per sequence).
    Recurrent(DeltaNet),
    /// LFM2's gated short convolution (a state of its last few inputs per sequence).
    ShortConv(ShortConv),
    /// Granite 4.0's and Nemotron-H's Mamba-2 mixer (a state per head per sequence).
    Mamba2(Mamba2),
    /// Jamba's Mamba mixer (a state per channel per sequence).
    Mamba(Mamba),
    /// Deci's "linear attention": the output projection alone over the normed rows (no heads,
    /// no K/V, nothing kept between tokens).
    Linear(QLinear),
    /// None: Nemotron-H's and Deci's MLP layers.
    None,
}

impl SelfAttention {
    /// Bytes its weights take in memory beyond the file's (DeepSeek-V2's per-head latent maps,
    /// held as f32).
    fn extra_bytes(&self) -> u64 {
        match self {
            Self::Latent(m) => m.extra_bytes(),
            Self::Heads(_) | Self::Recurrent(_) | Self::ShortConv(_) | Self::Mamba2(_) | Self::Mamba(_) | Self::Linear(_) | Self::None => 0,
        }
    }
}

struct Layer {
    /// The attention and the MLP read the layer's input side by side
    /// (`Transformer::parallel_layer`): Cohere's, Phi-2's, Falcon's, GPT-NeoX's and StableLM 2
    /// 12B's layers.
    parallel: bool,
    /// The norm before attention (none in OLMo 2 and EXAONE 4.0, which normalize after).
    attn_norm: Option<BlockNorm>,
    /// Falcon 40B's and 180B's parallel layers: the attention's own norm (`attn_norm_2`), the
    /// MLP then reading `attn_norm`'s output alone.
    attn_norm_2: Option<BlockNorm>,
    attn: SelfAttention,
    /// Falcon-H1: the Mamba-2 mixer beside the attention, over the same normed rows, its
    /// output added to the attention's (`HParams::ssm_beside_attention`).
    ssm: Option<Mamba2>,
    /// Gemma, OLMo 2, EXAONE 4.0, GLM-4: RMSNorm of the attention output before the residual add.
    post_attn_norm: Option<Tensor>,
    /// The norm before the MLP (none in OLMo 2 and EXAONE 4.0, nor in parallel layers but
    /// GPT-NeoX's).
    ffn_norm: Option<BlockNorm>,
    ffn: Ffn,
    /// Gemma, OLMo 2, EXAONE 4.0, GLM-4: RMSNorm of the MLP output before the residual add.
    post_ffn_norm: Option<Tensor>,
    /// Gemma 4's E models: the layer's per-layer input, added after the MLP.
    per_layer: Option<PerLayerInput>,
    /// Gemma 4: multiplies the layer's output (`layer_output_scale`).
    out_scale: Option<f64>,
    /// Gemma 3n: the layer's prediction and correction of AltUp's streams, and its Laurel
    /// block.
    altup: Option<LayerAltUp>,
    /// An encoder's norms after its residual adds; `Transformer::encoder_layer`.
    residual_norms: Option<ResidualNorms>,
}

/// An encoder layer's norms after its residual adds.
struct ResidualNorms {
    /// Of the attention's output plus the layer's input (`attn_output_norm`).
    attn: BlockNorm,
    /// jina-embeddings-v2's code model: of that plus the layer's input again (`attn_norm_2`).
    attn_2: Option<BlockNorm>,
    /// Of the MLP's output plus its input (`layer_output_norm`).
    out: BlockNorm,
}

/// A loaded model: quantized weights and the forward over them.
pub struct Transformer {
    hp: HParams,
    embedding: TokenEmbedding,
    layers: Vec<Layer>,
    /// The final norm (none in an encoder, whose last layer ends in its own norm).
    norm: Option<BlockNorm>,
    output: QLinear,
    /// Phi-2's logit biases (`HParams::output_bias`).
    output_bias: Option<Tensor>,
    /// A reranker's classifier head (f32 on the host): [`Self::rank_score`].
    classifier: Option<Classifier>,
    /// EmbeddingGemma's projections of the pooled vector (`dense_2`, `dense_3`; f32 on the
    /// host): [`Self::project_pooled`].
    dense_out: Option<[Affine; 2]>,
    rope: RopeTables,
    /// Gemma: the sliding-window layers' tables (their own base; Gemma 4's their own width
    /// too), when they differ from `rope`.
    rope_local: Option<RopeTables>,
    /// Gemma 4's E models: the per-layer token embedding.
    per_layer_embd: Option<PerLayerEmbedding>,
    /// Gemma 3n: AltUp's projections into and out of its streams.
    altup: Option<AltUp>,
    /// GPT-2's and StarCoder's learned positions (`HParams::learned_positions`).
    positions: Option<TokenEmbedding>,
    /// BLOOM's LayerNorm of the embedding (`token_embd_norm`, `HParams::embedding_norm`).
    embd_norm: Option<BlockNorm>,
    /// An encoder's first token type's row (`token_types`, "sentence A"), added to every
    /// token's embedding (`HParams::encoder`; `[hidden]`).
    token_type: Option<Tensor>,
    /// Refact's and BLOOM's ALiBi slopes, one per query head (`HParams::alibi_slopes`).
    alibi: Option<Vec<f32>>,
    activation: Gate,
    device: Device,
    /// Bytes the weights take in the device's memory (quantized tensors as
    /// stored; on a GPU, without the host-side embedding table).
    weight_bytes: u64,
}

impl std::fmt::Debug for Transformer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transformer")
            .field("hparams", &self.hp)
            .finish_non_exhaustive()
    }
}

impl Transformer {
    /// Loads the weights of `file` onto `device`. `max_positions` sizes the
    /// rope tables (the context length hearth will use).
    pub fn from_gguf(file: &mut GgufFile, device: &Device, max_positions: usize) -> Result<Self, ModelError> {
        let embd_shape = file.tensor_shape("token_embd.weight");
        let hp = HParams::from_metadata(file.metadata(), embd_shape.as_ref().map(|s| s[0]))?;
        let d = hp.hidden;

        // The table stays in host memory, quantized (see `embedding`).
        let embedding_q = load_2d(file, "token_embd.weight", [hp.vocab_size, d], &Device::Cpu)?;
        let cpu = device.is_cpu();
        let file_bytes = file.total_tensor_bytes(cpu);
        let rope_bytes: u64 = ROPE_FACTOR_TENSORS.iter().filter_map(|n| file.tensor_bytes(n, cpu)).sum();
        // Multi-token-prediction blocks stay in the file, unread.
        let mtp_bytes: u64 = (hp.layers..hp.layers + hp.mtp_layers)
            .map(|i| file.tensor_bytes_where(cpu, |name| name.starts_with(&format!("blk.{i}."))))
            .sum();
        let unused_bytes = pass_over_shared_kv_weights(file, &hp, cpu);
        let tied = !file.has_tensor("output.weight");
        let (embedding, output) = load_embedding_and_output(file, embedding_q, tied, [hp.vocab_size, d], device)?;
        let embd_bytes = embedding.file_bytes();
        // The rope factors only feed the tables. On the CPU a tied table our kernels do not run
        // is held twice (the rows to look up, candle's copy); on a GPU the lookup table is not
        // in VRAM.
        let weight_bytes = match (device.is_cpu(), tied) {
            (true, true) if !embedding.is_shared() => file_bytes + embd_bytes,
            (false, false) => file_bytes.saturating_sub(embd_bytes),
            _ => file_bytes,
        }
        .saturating_sub(rope_bytes + mtp_bytes + unused_bytes);
        // The global layers' rotated dimensions (Gemma 4's are wider than its local layers').
        let global_rope_dims = hp.global_attn.map_or(hp.rope_dims, |g| g.rope_dims);
        let freq_factors = match rope_factors_name(file, &hp, max_positions) {
            Some(name) => {
                let t = file.tensor(name, &Device::Cpu)?;
                check_shape(name, t.shape().dims(), &[global_rope_dims / 2])?;
                Some(t.dequantize(&Device::Cpu)?.to_dtype(DType::F32)?.to_vec1::<f32>()?)
            }
            None => None,
        };
        let gemma4 = hp.family == Family::Gemma4;
        let tables = |base: f64, scaling: RopeScaling, attn_factor: f64, local: bool| {
            let spec = RopeSpec {
                base,
                scaling,
                attn_factor,
                style: hp.rope_style,
            };
            // Gemma 4's local layers rotate their own width, without the global layers'
            // proportional factors (llama.cpp passes `rope_freqs` to global layers only).
            match (gemma4, local) {
                (true, true) => RopeTables::new(hp.rope_dims, spec, None, max_positions, device),
                _ => RopeTables::new(global_rope_dims, spec, freq_factors.as_deref(), max_positions, device),
            }
        };
        let rope = tables(hp.rope_base, hp.rope_scaling, hp.rope_attn_factor, false)?;
        // Gemma 3's local layers rotate unscaled: the file's scaling (linear ×8 on 4B and up) is
        // the global layers' (llama.cpp's `rope_freq_scale_train_swa` = 1, HF's
        // `rotary_emb_local`); OLMo 3's without the attention factor too. Gemma 2's take the
        // global scaling, and its base unless the file gives them one of their own: then the
        // global tables serve them.
        let rope_local = match &hp.sliding {
            Some(s) if s.rope == LocalRope::Scaled && s.rope_base == hp.rope_base && !gemma4 => None,
            Some(s) => Some(match s.rope {
                LocalRope::Scaled => tables(s.rope_base, hp.rope_scaling, hp.rope_attn_factor, true)?,
                LocalRope::Unscaled => tables(s.rope_base, RopeScaling::None, hp.rope_attn_factor, true)?,
                LocalRope::Plain => tables(s.rope_base, RopeScaling::None, 1.0, true)?,
            }),
            None => None,
        };
        let layers = (0..hp.layers)
            .map(|i| load_layer(file, &hp, i, device))
            .collect::<Result<Vec<_>, _>>()?;
        // DeepSeek-V2's per-head latent maps are held as f32, wider than the file's.
        let weight_bytes = weight_bytes + layers.iter().map(|l| l.attn.extra_bytes()).sum::<u64>();
        let per_layer_embd = PerLayerEmbedding::load(file, &hp, device)?;
        let altup = AltUp::load(file, &hp, device)?;
        let positions = load_positions(file, &hp, max_positions)?;
        // Their tables stay in host memory, as the token embedding's does.
        let host_tables = per_layer_embd.as_ref().map_or(0, |p| p.table_bytes()) + positions.as_ref().map_or(0, |p| p.file_bytes());
        let weight_bytes = if device.is_cpu() { weight_bytes } else { weight_bytes.saturating_sub(host_tables) };
        Ok(Self {
            positions,
            embd_norm: match hp.embedding_norm {
                true => Some(BlockNorm::load(file, "token_embd_norm", &hp, device)?),
                false => None,
            },
            alibi: hp.alibi_slopes(),
            output_bias: load_output_bias(file, &hp, device)?,
            classifier: load_classifier(file, &hp)?,
            dense_out: load_dense_out(file, &hp)?,
            per_layer_embd,
            altup,
            // LFM2's final norm is stored as `token_embd_norm` (llama.cpp reads it so).
            norm: match hp.bert_layers {
                true => None,
                false => Some(BlockNorm::load(
                    file,
                    if hp.family == Family::Lfm2 { "token_embd_norm" } else { "output_norm" },
                    &hp,
                    device,
                )?),
            },
            token_type: load_token_type(file, &hp, device)?,
            output,
            embedding,
            layers,
            rope,
            rope_local,
            // ModernBERT's: the file's.
            activation: match hp.gate_act {
                Some(g) => g,
                None => family_activation(&hp),
            },
            device: device.clone(),
            weight_bytes,
            hp,
        })
    }

    pub fn hparams(&self) -> &HParams {
        &self.hp
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The K/V geometry a store must provide for this model.
    pub fn kv_shape(&self) -> KvShape {
        self.hp.kv_shape()
    }

    /// Bytes the weights take in memory.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// The longest sequence the rope tables cover.
    pub fn max_positions(&self) -> usize {
        self.rope.max_positions()
    }

    /// Runs `tokens` (packed per `batch`) through the model, appending their
    /// K/V to `kv`, and returns f32 logits for the rows `which` selects.
    ///
    /// A model with recurrent layers ([`Self::recurrent_state`]) needs each sequence's state
    /// ([`Self::forward_with`]); here every sequence must start at its first token, from the
    /// state before any.
    pub fn forward(&self, tokens: &[u32], batch: &BatchLayout, kv: &mut dyn KvStore, which: Logits) -> Result<Tensor, ModelError> {
        let mut states: Vec<RecurrentSeq> = match self.recurrent_state() {
            Some(fresh) => {
                if let Some(s) = batch.seqs().iter().find(|s| s.cached > 0) {
                    return Err(ModelError::MissingState { cached: s.cached });
                }
                batch.seqs().iter().map(|_| RecurrentSeq::new(fresh.clone())).collect()
            }
            None => Vec::new(),
        };
        self.forward_with(tokens, batch, kv, &mut states, which)
    }

    /// The state a sequence starts from in the recurrent layers, for a model that has them.
    pub fn recurrent_state(&self) -> Option<RecurrentState> {
        self.hp.state_shape().map(|s| RecurrentState::new(&s))
    }

    /// [`Self::forward`] with each sequence's recurrent state (one per sequence of `batch`, in
    /// order; none for a model without recurrent layers), advanced over its new tokens.
    pub fn forward_with(
        &self,
        tokens: &[u32],
        batch: &BatchLayout,
        kv: &mut dyn KvStore,
        states: &mut [RecurrentSeq],
        which: Logits,
    ) -> Result<Tensor, ModelError> {
        let x = self.layers_over(tokens, batch, kv, states)?;
        self.logits(x, batch, which)
    }

    /// A pooled embedding as the model gives it out: through EmbeddingGemma's two projections
    /// where the file has them (after pooling, before any normalization, as llama.cpp's
    /// `build_dense_out`), else as it is.
    pub fn project_pooled(&self, pooled: Vec<f32>) -> Vec<f32> {
        match &self.dense_out {
            Some([up, down]) => down.apply(&up.apply(&pooled)),
            None => pooled,
        }
    }

    /// A reranker's score of its pooled row after the final norm, `row` (the last, or an
    /// encoder's first: [`HParams::rank_pooling`]); `None` for a model without a classifier head.
    pub fn rank_score(&self, row: &[f32]) -> Option<f32> {
        self.classifier.as_ref().map(|c| c.score(row))
    }

    /// [`Self::forward_with`] giving, beside the logits of `which` rows (none: no logits), the
    /// final norm's output at `hidden` rows (`[rows, hidden]` in f32; none where empty): the
    /// rows a sentence embedding pools ([`super::pooling`]), llama.cpp's `t_embd`.
    pub fn forward_outputs(
        &self,
        tokens: &[u32],
        batch: &BatchLayout,
        kv: &mut dyn KvStore,
        states: &mut [RecurrentSeq],
        which: Option<Logits>,
        hidden: &[u32],
    ) -> Result<(Option<Tensor>, Option<Tensor>), ModelError> {
        let x = self.layers_over(tokens, batch, kv, states)?;
        let rows = match hidden {
            [] => None,
            rows => {
                let rows = Tensor::new(rows, &self.device)?;
                let h = self.final_norm(&x.index_select(&rows, 0)?)?;
                Some(h.to_dtype(DType::F32)?)
            }
        };
        let logits = match which {
            Some(which) => Some(self.logits(x, batch, which)?),
            None => None,
        };
        Ok((logits, rows))
    }

    /// The layers over `tokens` (every check of [`Self::forward_with`] first): the residual
    /// state after the last one, `[t, hidden]`, before the final norm.
    fn layers_over(
        &self,
        tokens: &[u32],
        batch: &BatchLayout,
        kv: &mut dyn KvStore,
        states: &mut [RecurrentSeq],
    ) -> Result<Tensor, ModelError> {
        if tokens.len() != batch.total_tokens() {
            return Err(crate::ops::OpsError::Layout(format!(
                "{} tokens for a batch of {}",
                tokens.len(),
                batch.total_tokens()
            ))
            .into());
        }
        ModelError::check_token_ids(tokens, self.hp.vocab_size)?;
        for s in batch.seqs() {
            if s.cached + s.new > self.rope.max_positions() {
                return Err(ModelError::PromptTooLong {
                    tokens: s.cached + s.new,
                    context: self.rope.max_positions(),
                });
            }
        }
        let hp = &self.hp;
        let t = tokens.len();
        let pos = batch.positions();
        let positions = positions_tensor(&pos, &self.device)?;
        // Ministral 3: each query scaled by its position's attention temperature.
        let q_scale = match hp.attn_temperature {
            Some(temp) => {
                let s: Vec<f32> = pos.iter().map(|&p| temp.at(p as usize)).collect();
                Some(Tensor::from_vec(s, (t, 1, 1), &self.device)?)
            }
            None => None,
        };
        let global = (&self.rope, self.rope.gather(&positions)?);
        let local = match &self.rope_local {
            Some(r) => Some((r, r.gather(&positions)?)),
            None => None,
        };

        let mut x = self.embedding.lookup(tokens, &self.device)?; // [t, hidden]
        if let Some(s) = hp.embedding_scale {
            x = x.affine(s, 0.0)?;
        }
        if let Some(tt) = &self.token_type {
            x = x.broadcast_add(tt)?;
        }
        if let Some(p) = &self.positions {
            x = (x + p.lookup(&pos, &self.device)?)?;
        }
        if let Some(n) = &self.embd_norm {
            x = n.forward(&x)?;
        }
        let per_layer_inputs = match &self.per_layer_embd {
            Some(p) => Some(p.inputs(tokens, &x, hp.rms_eps)?),
            None => None,
        };
        let rope_of = |li: usize| match (&local, hp.window(li)) {
            (Some((r, cs)), Some(_)) => (*r, cs),
            _ => (global.0, &global.1),
        };
        if let Some(altup) = &self.altup {
            return self.altup_layers(altup, &x, per_layer_inputs.as_ref(), &rope_of, q_scale.as_ref(), batch, kv, states);
        }
        // Nanbeige's passes over the stack (one for every other file), each on store layers of
        // its own, the final norm between them where the file says.
        let passes = (0..hp.loops).flat_map(|pass| self.layers.iter().enumerate().map(move |l| (pass, l)));
        for (pass, (li, layer)) in passes {
            if pass > 0 && li == 0 && hp.loop_norm {
                x = self.final_norm(&x)?;
            }
            let mut shifted = ShiftedLayers {
                inner: &mut *kv,
                offset: pass * hp.kv_layers,
            };
            let kv: &mut dyn KvStore = &mut shifted;
            let rope = rope_of(li);
            if let Some(norms) = &layer.residual_norms {
                x = self.encoder_layer(li, layer, norms, x, rope, batch, kv, states)?;
                continue;
            }
            if layer.parallel {
                x = self.parallel_layer(li, layer, x, rope, q_scale.as_ref(), batch, kv, states)?;
                continue;
            }
            // SmallThinker routes its experts on the layer's input.
            let layer_in = hp.route_on_layer_input.then(|| x.clone());
            if let Some(mut attn) = self.mixer(li, layer, &x, rope, q_scale.as_ref(), batch, kv, states)? {
                if let Some(n) = &layer.post_attn_norm {
                    attn = norm::rms_norm(&attn, n, hp.rms_eps as f32)?;
                }
                if let Some(s) = hp.residual_scale {
                    attn = attn.affine(s, 0.0)?;
                }
                x = (x + attn)?;
            }
            // (Nemotron-H's mixer layers have no MLP.)
            if !matches!(layer.ffn, Ffn::None) {
                let mut mlp = layer.ffn.forward(&x, layer.ffn_norm.as_ref(), hp.rms_eps, self.activation, layer_in.as_ref())?;
                if let Some(n) = &layer.post_ffn_norm {
                    mlp = norm::rms_norm(&mlp, n, hp.rms_eps as f32)?;
                }
                if let Some(s) = hp.residual_scale {
                    mlp = mlp.affine(s, 0.0)?;
                }
                x = (x + mlp)?;
            }
            if let (Some(p), Some(inputs)) = (&layer.per_layer, &per_layer_inputs) {
                x = p.forward(&x, &layer_input(inputs, li)?, hp.rms_eps)?;
            }
            if let Some(s) = layer.out_scale {
                x = x.affine(s, 0.0)?;
            }
        }
        Ok(x)
    }

    /// Gemma 3n's layers over AltUp's streams of the scaled embeddings `x` (`[t, hidden]`), as
    /// llama.cpp's `gemma3n` graph: each layer runs on the first stream of its prediction
    /// (attention beside Laurel, their mean, then the MLP), corrects every stream by its output,
    /// and adds its per-layer input to the streams but the first. Returns the merged streams.
    #[allow(clippy::too_many_arguments)]
    fn altup_layers<'r>(
        &self,
        altup: &AltUp,
        x: &Tensor,
        per_layer_inputs: Option<&Tensor>,
        rope_of: &dyn Fn(usize) -> (&'r RopeTables, &'r (Tensor, Tensor)),
        q_scale: Option<&Tensor>,
        batch: &BatchLayout,
        kv: &mut dyn KvStore,
        states: &mut [RecurrentSeq],
    ) -> Result<Tensor, ModelError> {
        let eps = self.hp.rms_eps;
        let mut s = altup.spread(x)?;
        for (li, layer) in self.layers.iter().enumerate() {
            let Some(a) = &layer.altup else {
                return Err(OpsError::Layout(format!("layer {li} has no AltUp weights")).into());
            };
            let pred = a.predict(&s)?;
            let active = a.active(&pred)?;
            let h = pre_norm(&active, layer.attn_norm.as_ref())?;
            let laurel = a.laurel(&h)?;
            let mut attn = self
                .mixer_of_normed(li, layer, &h, rope_of(li), q_scale, batch, kv, states)?
                .ok_or_else(|| OpsError::Layout(format!("layer {li} has no attention")))?;
            if let Some(n) = &layer.post_attn_norm {
                attn = norm::rms_norm(&attn, n, eps as f32)?;
            }
            let attn = ((attn + &active)? + laurel)?.affine(std::f64::consts::FRAC_1_SQRT_2, 0.0)?;
            let mut mlp = layer.ffn.forward(&attn, layer.ffn_norm.as_ref(), eps, self.activation, None)?;
            if let Some(n) = &layer.post_ffn_norm {
                mlp = norm::rms_norm(&mlp, n, eps as f32)?;
            }
            s = a.correct(&pred, &(mlp + attn)?)?;
            if let (Some(p), Some(inputs)) = (&layer.per_layer, per_layer_inputs) {
                let y = p.added(&a.gate_input(&s)?, &layer_input(inputs, li)?, eps)?;
                s = a.add_to_others(&s, &y)?;
            }
        }
        altup.merge(&s)
    }

    /// Layer `li`'s mixer (attention or a recurrent layer) over the residual stream `x`, after
    /// its norm: its output, before any post-norm and residual scale; `None` for a layer without
    /// one (Nemotron-H's MLP layers).
    #[allow(clippy::too_many_arguments)]
    fn mixer(
        &self,
        li: usize,
        layer: &Layer,
        x: &Tensor,
        rope: (&RopeTables, &(Tensor, Tensor)),
        q_scale: Option<&Tensor>,
        batch: &BatchLayout,
        kv: &mut dyn KvStore,
        states: &mut [RecurrentSeq],
    ) -> Result<Option<Tensor>, ModelError> {
        if matches!(layer.attn, SelfAttention::None) {
            return Ok(None);
        }
        let h = pre_norm(x, layer.attn_norm.as_ref())?;
        self.mixer_of_normed(li, layer, &h, rope, q_scale, batch, kv, states)
    }

    /// Cohere's, Phi-2's, Falcon's, GPT-NeoX's and StableLM 2 12B's layer: the attention and
    /// the MLP both read the attention norm's output (a LayerNorm; Falcon 40B's attention its
    /// own, `attn_norm_2`; GPT-NeoX's MLP its own, `ffn_norm`), and both add to the residual
    /// `x`, in llama.cpp's Cohere and GPT-NeoX order (`x + mlp`, then `+ attn`; the other
    /// graphs add the same three in another order, which only rounding tells apart).
    #[allow(clippy::too_many_arguments)]
    fn parallel_layer(
        &self,
        li: usize,
        layer: &Layer,
        x: Tensor,
        rope: (&RopeTables, &(Tensor, Tensor)),
        q_scale: Option<&Tensor>,
        batch: &BatchLayout,
        kv: &mut dyn KvStore,
        states: &mut [RecurrentSeq],
    ) -> Result<Tensor, ModelError> {
        let n = layer
            .attn_norm
            .as_ref()
            .ok_or_else(|| OpsError::Layout("a parallel layer without its norm".into()))?;
        let h = n.forward(&x)?;
        let h_attn = match &layer.attn_norm_2 {
            Some(n2) => n2.forward(&x)?,
            None => h.clone(),
        };
        let attn = self
            .mixer_of_normed(li, layer, &h_attn, rope, q_scale, batch, kv, states)?
            .ok_or_else(|| OpsError::Layout("a parallel layer without attention".into()))?;
        let h_mlp = match &layer.ffn_norm {
            Some(nf) => nf.forward(&x)?,
            None => h,
        };
        let mlp = layer.ffn.forward(&h_mlp, None, self.hp.rms_eps, self.activation, None)?;
        Ok(((mlp + x)? + attn)?)
    }

    /// Layer `li`'s mixer over `h`, the rows after its norm: as [`Self::mixer`].
    #[allow(clippy::too_many_arguments)]
    fn mixer_of_normed(
        &self,
        li: usize,
        layer: &Layer,
        h: &Tensor,
        rope: (&RopeTables, &(Tensor, Tensor)),
        q_scale: Option<&Tensor>,
        batch: &BatchLayout,
        kv: &mut dyn KvStore,
        states: &mut [RecurrentSeq],
    ) -> Result<Option<Tensor>, ModelError> {
        let hp = &self.hp;
        let out = match &layer.attn {
            SelfAttention::Heads(a) => {
                let (attn, gate) = self.attention(li, a, h, rope, q_scale, batch, kv)?;
                let attn = match gate {
                    Some(g) => (attn * candle_nn::ops::sigmoid(&g)?)?,
                    None => attn,
                };
                let attn = match &a.sub_norm {
                    Some(n) => norm::rms_norm(&attn, n, hp.rms_eps as f32)?,
                    None => attn,
                };
                let attn = a.wo.forward(&attn)?;
                match &a.out_bias {
                    Some(b) => attn.broadcast_add(b)?,
                    None => attn,
                }
            }
            SelfAttention::Latent(m) => {
                let how = Attend::causal(hp.attention_scale);
                m.forward(li, h, rope, q_scale, how, batch, kv, hp.rms_eps as f32)?
            }
            SelfAttention::Recurrent(net) => net.forward(h, batch, states)?,
            SelfAttention::ShortConv(c) => c.forward(h, batch, states)?,
            SelfAttention::Mamba2(m) => m.forward(h, batch, states)?,
            SelfAttention::Mamba(m) => m.forward(h, batch, states)?,
            SelfAttention::Linear(wo) => wo.forward(h)?,
            SelfAttention::None => return Ok(None),
        };
        // Falcon-H1: the Mamba-2 mixer's output added to the attention's (llama.cpp's order).
        Ok(Some(match &layer.ssm {
            Some(m) => (out + m.forward(h, batch, states)?)?,
            None => out,
        }))
    }

    /// One layer's attention of the normed rows `h` (`[t, hidden]`), before its output
    /// projection: Q/K/V, their biases and norms, rope from `rope` (the layer's tables and
    /// their cos/sin at the batch's positions), then the store (`[t, heads · head_dim]`); and
    /// Qwen3.5's and AFMoE's output gate (`[t, heads · head_dim]`, before its sigmoid).
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        li: usize,
        a: &Attention,
        h: &Tensor,
        (rope, (cos, sin)): (&RopeTables, &(Tensor, Tensor)),
        q_scale: Option<&Tensor>,
        batch: &BatchLayout,
        kv: &mut dyn KvStore,
    ) -> Result<(Tensor, Option<Tensor>), ModelError> {
        let hp = &self.hp;
        let t = h.dim(0)?;
        let AttnShape { heads, kv_heads, head_dim, .. } = a.shape;
        let mut qkv = a.qkv.forward(h)?.into_iter();
        let mut q = qkv.next().ok_or_else(|| OpsError::Layout("the Q projection gave nothing".into()))?;
        // Qwen3.5: each head's Q, then its gate.
        let gate = if a.q_gate {
            let qg = q.reshape((t, heads, 2 * head_dim))?;
            q = qg.narrow(2, 0, head_dim)?.contiguous()?.reshape((t, heads * head_dim))?;
            Some(qg.narrow(2, head_dim, head_dim)?.contiguous()?.reshape((t, heads * head_dim))?)
        } else {
            // AFMoE's: a projection of its own.
            a.out_gate.as_ref().map(|g| g.forward(h)).transpose()?
        };
        // K and V where the layer writes them: V is K's projection where the layer has no V.
        let mut kv_rows = match (a.writes_kv, qkv.next(), qkv.next()) {
            (false, _, _) => None,
            (true, Some(k), Some(v)) => Some((k, v)),
            (true, Some(k), None) => Some((k.clone(), k)),
            (true, None, _) => {
                return Err(OpsError::Layout("the QKV projection did not give K".into()).into());
            }
        };
        if let Some([bq, bk, bv]) = &a.bias {
            q = q.broadcast_add(bq)?;
            if let Some((k, v)) = kv_rows.as_mut() {
                *k = k.broadcast_add(bk)?;
                *v = v.broadcast_add(bv)?;
            }
        }
        // MPT's clamp of Q, K and V.
        if let Some(c) = hp.clamp_kqv.map(f64::from) {
            q = q.clamp(-c, c)?;
            if let Some((k, v)) = kv_rows.as_mut() {
                *k = k.clamp(-c, c)?;
                *v = v.clamp(-c, c)?;
            }
        }
        let eps = hp.rms_eps as f32;
        if a.qk_norm == QkNorm::Whole {
            (q, kv_rows) = norm_q_k(q, kv_rows, a, eps)?;
        }
        if let Some([qn, kn]) = &a.qk_layer_norms {
            q = qn.forward(&q)?;
            if let Some((k, _)) = kv_rows.as_mut() {
                *k = kn.forward(k)?;
            }
        }
        let mut q = q.reshape((t, heads, head_dim))?;
        let mut kv_rows = match kv_rows {
            Some((k, v)) => Some((k.reshape((t, kv_heads, head_dim))?, v.reshape((t, kv_heads, head_dim))?)),
            None => None,
        };
        if matches!(a.qk_norm, QkNorm::PerHead | QkNorm::PerHeadLayer) {
            (q, kv_rows) = norm_q_k(q, kv_rows, a, eps)?;
        }
        if let (Some(ones), Some((_, v))) = (&a.v_norm, kv_rows.as_mut()) {
            *v = norm::rms_norm(&v.contiguous()?, ones, eps)?;
        }
        // SmolLM3's NoPE layers (and Granite without rope) take Q and K as they are.
        let rotates = hp.rotates(li);
        if rotates {
            q = rope.apply(&q, cos, sin)?;
            if let Some((k, _)) = kv_rows.as_mut() {
                *k = rope.apply(k, cos, sin)?;
            }
        }
        if a.qk_norm == QkNorm::PerHeadAfterRope {
            (q, kv_rows) = norm_q_k(q, kv_rows, a, eps)?;
        }
        // (Llama 4's temperature is its rope-less layers' alone.)
        if let Some(s) = q_scale.filter(|_| !(rotates && hp.attn_temperature.is_some_and(|t| t.no_rope_only))) {
            q = q.broadcast_mul(s)?;
        }
        let how = Attend {
            scale: hp.attention_scale,
            window: hp.window(li),
            softcap: hp.attn_softcap.map(|c| c as f32),
            sinks: a.sinks.as_deref(),
            alibi: self.alibi.as_deref(),
        };
        // An encoder's queries see their whole input, and its K/V is nobody's prefix: not stored.
        if hp.encoder {
            let (k, v) = kv_rows.ok_or_else(|| OpsError::Layout("an encoder layer without K/V".into()))?;
            return Ok((crate::ops::attention::attend_both_ways(&q, &k, &v, batch, how)?, gate));
        }
        let out = match kv_rows {
            Some((k, v)) => kv.attend(a.kv_layer, &q, &k, &v, batch, how)?,
            None => kv.attend_shared(a.kv_layer, &q, batch, how)?,
        };
        Ok((out, gate))
    }

    /// `x` through the final norm, where the model has one.
    fn final_norm(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        match &self.norm {
            Some(n) => n.forward(x),
            None => Ok(x.clone()),
        }
    }

    /// An encoder's layer (`HParams::encoder`): the attention's output added to the input,
    /// then normed; the MLP's output added to that, then normed (BERT's post-norm order, as
    /// llama.cpp's `bert` graph).
    #[allow(clippy::too_many_arguments)]
    fn encoder_layer(
        &self,
        li: usize,
        layer: &Layer,
        norms: &ResidualNorms,
        x: Tensor,
        rope: (&RopeTables, &(Tensor, Tensor)),
        batch: &BatchLayout,
        kv: &mut dyn KvStore,
        states: &mut [RecurrentSeq],
    ) -> Result<Tensor, ModelError> {
        let attn = self
            .mixer_of_normed(li, layer, &x, rope, None, batch, kv, states)?
            .ok_or_else(|| OpsError::Layout(format!("encoder layer {li} has no attention")))?;
        let mut h = norms.attn.forward(&(attn + &x)?)?;
        if let Some(n) = &norms.attn_2 {
            h = n.forward(&(h + &x)?)?;
        }
        let mlp = layer.ffn.forward(&h, None, self.hp.rms_eps, self.activation, None)?;
        norms.out.forward(&(mlp + h)?)
    }

    /// The logits of the rows of `x` (the last layer's output) that `which` selects.
    fn logits(&self, x: Tensor, batch: &BatchLayout, which: Logits) -> Result<Tensor, ModelError> {
        let x = match which {
            Logits::All => x,
            Logits::LastPerSequence => {
                let rows = Tensor::new(batch.last_rows().as_slice(), &self.device)?;
                x.index_select(&rows, 0)?
            }
            Logits::Rows(rows) => {
                let rows = Tensor::new(rows.as_slice(), &self.device)?;
                x.index_select(&rows, 0)?
            }
        };
        let x = self.final_norm(&x)?;
        let logits = self.output.forward(&x)?.to_dtype(DType::F32)?;
        let logits = match &self.output_bias {
            Some(b) => logits.broadcast_add(b)?,
            None => logits,
        };
        // Granite divides its logits by `logit_scale`, Cohere multiplies them by its; Gemma 2
        // soft-caps them.
        let logits = match (self.hp.logit_scale, self.hp.logit_multiplier) {
            (Some(s), _) => logits.affine(1.0 / s, 0.0)?,
            (None, Some(m)) => logits.affine(m, 0.0)?,
            (None, None) => logits,
        };
        Ok(match self.hp.final_softcap {
            Some(c) => crate::ops::attention::soft_cap(&logits, c)?,
            None => logits,
        })
    }
}

/// The gated MLP's activation of a family whose file does not name one.
fn family_activation(hp: &HParams) -> Gate {
    match hp.family {
        Family::Gemma2 | Family::Gemma3 | Family::Gemma4 => Gate::GeluTanh,
        Family::GptOss => Gate::SwigluOai,
        _ if hp.relu_gate => Gate::Relu,
        _ if hp.relu_squared_gate => Gate::ReluSquared,
        // jina-embeddings-v2's GEGLU.
        _ if hp.gate_optional => Gate::GeluTanh,
        _ => Gate::Silu,
    }
}

/// Q and K (where the layer computes it) through their norms, where the layer has them.
fn norm_q_k(
    q: Tensor,
    mut kv_rows: Option<(Tensor, Tensor)>,
    a: &Attention,
    eps: f32,
) -> Result<(Tensor, Option<(Tensor, Tensor)>), ModelError> {
    let normed = |x: &Tensor, n: &Tensor| -> Result<Tensor, ModelError> {
        let x = x.contiguous()?;
        match &a.qk_unit {
            // `[t, heads, head_dim]` normalized per head, then each head by its own weights
            // (`[heads, head_dim]`), as ggml's `ggml_norm` and `ggml_mul`.
            Some(ones) => Ok(norm::layer_norm(&x, ones, eps)?.broadcast_mul(n)?),
            None => Ok(norm::rms_norm(&x, n, eps)?),
        }
    };
    let q = match &a.q_norm {
        Some(n) => normed(&q, n)?,
        None => q,
    };
    if let (Some(n), Some((k, _))) = (&a.k_norm, kv_rows.as_mut()) {
        *k = normed(k, n)?;
    }
    Ok((q, kv_rows))
}

/// A block's input: `x` through its norm `n`, or `x` itself where the family has none
/// (OLMo 2).
fn pre_norm(x: &Tensor, n: Option<&BlockNorm>) -> Result<Tensor, ModelError> {
    match n {
        Some(n) => n.forward(x),
        None => Ok(x.clone()),
    }
}

/// The tensors that hold per-frequency rope divisors: Llama 3.1's, Phi-3's LongRoPE pair.
const ROPE_FACTOR_TENSORS: [&str; 3] = ["rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"];

/// Which rope divisors apply when running `max_positions` positions: `rope_freqs` when the file
/// has it; else Phi-3's long factors beyond `rope.scaling.original_context_length` and its
/// short ones within it (llama.cpp's `get_rope_factors`, by the context it runs).
pub fn rope_factors_name(file: &GgufFile, hp: &HParams, max_positions: usize) -> Option<&'static str> {
    let [freqs, long, short] = ROPE_FACTOR_TENSORS;
    if file.has_tensor(freqs) {
        Some(freqs)
    } else if max_positions > hp.rope_original_context && file.has_tensor(long) {
        Some(long)
    } else {
        file.has_tensor(short).then_some(short)
    }
}

/// Phi-2's logit biases (`HParams::output_bias`); a file of another architecture that has
/// them is refused rather than run without them.
fn load_output_bias(file: &mut GgufFile, hp: &HParams, device: &Device) -> Result<Option<Tensor>, ModelError> {
    match (hp.output_bias, file.has_tensor("output.bias")) {
        (true, _) => Ok(Some(load_vec(file, "output.bias", hp.vocab_size, device)?)),
        (false, true) => Err(ModelError::UnsupportedTensor {
            name: "output.bias".into(),
            reason: "a bias on the output projection is read for Phi-2's and Phi-3.5-MoE's files only".into(),
        }),
        (false, false) => Ok(None),
    }
}

/// A reranker's classifier head in f32 on the host (a few rows, or RoBERTa's `[hidden,
/// hidden]` dense layer): the output projection `cls.output.weight` (`[labels, hidden]`) and
/// the dense layer `cls.weight` before it, each with its bias where the file has one, and
/// ModernBERT's `cls.norm` after the dense layer's GELU; a rank file with neither projection is
/// refused, as a head in any other file is, and a head norm outside ModernBERT's.
fn load_classifier(file: &mut GgufFile, hp: &HParams) -> Result<Option<Classifier>, ModelError> {
    use super::pooling::{HeadAct, HeadNorm, CLASSIFIER, CLASSIFIER_BIAS, CLASSIFIER_DENSE, CLASSIFIER_DENSE_BIAS, CLASSIFIER_NORM};
    let present = [CLASSIFIER, CLASSIFIER_DENSE, CLASSIFIER_NORM].into_iter().find(|n| file.has_tensor(n));
    let head = match (hp.rank, present) {
        (Some(head), Some(_)) => head,
        (Some(_), None) => return Err(ModelError::MissingTensor { name: CLASSIFIER.into() }),
        (None, Some(name)) => {
            return Err(ModelError::UnsupportedTensor {
                name: name.into(),
                reason: "a classifier head is read for rerankers (pooling type rank) only".into(),
            })
        }
        (None, None) => return Ok(None),
    };
    if !head.modern && file.has_tensor(CLASSIFIER_NORM) {
        return Err(ModelError::UnsupportedTensor {
            name: CLASSIFIER_NORM.into(),
            reason: "a norm in the classifier head is read in ModernBERT's rerankers (modern-bert) only".into(),
        });
    }
    let mut affine = |name: &str, bias: &str, rows: usize| -> Result<Option<Affine>, ModelError> {
        if !file.has_tensor(name) {
            return Ok(None);
        }
        let mut a = load_affine(file, name, [rows, hp.hidden])?;
        if file.has_tensor(bias) {
            a.bias = Some(load_vec(file, bias, rows, &Device::Cpu)?.to_vec1::<f32>()?);
        }
        Ok(Some(a))
    };
    // jina-reranker-v1's (`jina-bert-v2`) is one row, its tanh the score (llama.cpp's
    // `{n_embd, 1}` `cls` and `build_pooling`).
    let dense_rows = if hp.gate_optional { 1 } else { hp.hidden };
    let dense = affine(CLASSIFIER_DENSE, CLASSIFIER_DENSE_BIAS, dense_rows)?;
    let output = affine(CLASSIFIER, CLASSIFIER_BIAS, head.labels)?;
    // llama.cpp's graph normalizes only what the dense layer gave.
    let norm = match (file.has_tensor(CLASSIFIER_NORM), &dense) {
        (false, _) => None,
        (true, None) => return Err(ModelError::MissingTensor { name: CLASSIFIER_DENSE.into() }),
        (true, Some(_)) => Some(HeadNorm {
            weight: load_vec(file, CLASSIFIER_NORM, hp.hidden, &Device::Cpu)?.to_vec1::<f32>()?,
            eps: hp.rms_eps as f32,
        }),
    };
    Ok(Some(Classifier {
        dense,
        act: if head.modern { HeadAct::Gelu } else { HeadAct::Tanh },
        norm,
        output,
        // Qwen3-Reranker's (a causal model's) labels go through a softmax, as llama.cpp's graph.
        softmax: !hp.encoder,
    }))
}

/// EmbeddingGemma's projections of the pooled vector: `dense_2.weight` (`[feat, hidden]`)
/// and `dense_3.weight` (`[hidden, feat]`), `feat` the file's `dense_2_feat_out`; f32 on the
/// host. A file with the tensors and not the key is refused, naming the key.
fn load_dense_out(file: &mut GgufFile, hp: &HParams) -> Result<Option<[Affine; 2]>, ModelError> {
    const UP: &str = "dense_2.weight";
    const DOWN: &str = "dense_3.weight";
    let Some(feat) = hp.dense_out else {
        return match file.has_tensor(UP) || file.has_tensor(DOWN) {
            true => Err(ModelError::UnsupportedTensor {
                name: UP.into(),
                reason: "read in gemma-embedding files with `dense_2_feat_out` only".into(),
            }),
            false => Ok(None),
        };
    };
    Ok(Some([load_affine(file, UP, [feat, hp.hidden])?, load_affine(file, DOWN, [hp.hidden, feat])?]))
}

/// A `[rows, cols]` weight as an unbiased [`Affine`] in f32 on the host, rounding its input
/// as ggml does for the weight's type where our integer kernels take that type
/// (`linear::kind_of`: the input rounded as those kernels round their activations).
fn load_affine(file: &mut GgufFile, name: &str, shape: [usize; 2]) -> Result<Affine, ModelError> {
    let q = file.tensor(name, &Device::Cpu)?;
    check_shape(name, q.shape().dims(), &shape)?;
    let input_kind = super::linear::kind_of(q.dtype());
    let weights = q.dequantize(&Device::Cpu)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    Ok(Affine { weights, bias: None, input_kind })
}

/// The token embedding and the output projection. A tied table on the CPU that our kernels
/// run is held once: packed for the output, and the lookup reads its rows back from there.
fn load_embedding_and_output(
    file: &mut GgufFile,
    embedding_q: Weight,
    tied: bool,
    shape: [usize; 2],
    device: &Device,
) -> Result<(TokenEmbedding, QLinear), ModelError> {
    if !tied {
        let embedding = TokenEmbedding::from_weight(embedding_q)?;
        let output = load_2d(file, "output.weight", shape, device)?;
        return Ok((embedding, QLinear::new(output, device)?));
    }
    if !device.is_cpu() {
        // On a GPU the output projection is the table copied to the device from the bytes
        // already read; the lookup stays on the host.
        let on_device = qtensor_from_ggml(embedding_q.dtype(), &embedding_q.data()?, shape.to_vec(), device)?;
        return Ok((TokenEmbedding::from_weight(embedding_q)?, QLinear::new(on_device, device)?));
    }
    let dtype = embedding_q.dtype();
    let output = QLinear::new(embedding_q, device)?;
    let embedding = match output.shared_table() {
        Some(p) => TokenEmbedding::shared(dtype, p)?,
        // A type our kernels do not take: candle keeps its copy, the lookup its own.
        None => TokenEmbedding::from_weight(load_2d(file, "token_embd.weight", shape, &Device::Cpu)?)?,
    };
    Ok((embedding, output))
}

/// GPT-2's and StarCoder's learned position vectors (`position_embd.weight`, a row per position
/// of the trained context), kept in host memory as the token embedding is; `None` for the
/// other files. A context past its rows is refused.
fn load_positions(file: &mut GgufFile, hp: &HParams, max_positions: usize) -> Result<Option<TokenEmbedding>, ModelError> {
    if !hp.learned_positions {
        return Ok(None);
    }
    if max_positions > hp.context_length {
        return Err(ModelError::PromptTooLong {
            tokens: max_positions,
            context: hp.context_length,
        });
    }
    let t = load_2d(file, "position_embd.weight", [hp.context_length, hp.hidden], &Device::Cpu)?;
    Ok(Some(TokenEmbedding::new(&t)?))
}

/// An encoder's first token type's row (`token_types.weight`, `[types, hidden]`; none where the
/// file has no table, as llama.cpp reads it), f32 on `device`.
fn load_token_type(file: &mut GgufFile, hp: &HParams, device: &Device) -> Result<Option<Tensor>, ModelError> {
    const NAME: &str = "token_types.weight";
    if !hp.bert_layers || !file.has_tensor(NAME) {
        return Ok(None);
    }
    let t = file.tensor(NAME, &Device::Cpu)?;
    match t.shape().dims() {
        &[_, h] if h == hp.hidden => {}
        dims => check_shape(NAME, dims, &[1, hp.hidden])?,
    }
    let t = t.dequantize(&Device::Cpu)?.to_dtype(DType::F32)?;
    Ok(Some(t.get(0)?.to_device(device)?))
}

/// Refuses layer `i`'s tensors that hearth would not read rather than run without them.
/// Output and MLP biases: only gpt-oss's (output), StarCoder2's, Phi-2's, GPT-NeoX's and the
/// other coder and GPT-2 layouts' (output, up, down; Jais's gate too) files have them, where
/// they are required (llama.cpp reads them as optional for Granite, Ministral 3, Nemotron and
/// Deci, whose files have none). AWQ's activation scales (MPT files converted from AWQ
/// checkpoints).
fn refuse_unread(file: &GgufFile, hp: &HParams, i: usize) -> Result<(), ModelError> {
    let n = |s: &str| format!("blk.{i}.{s}");
    if file.has_tensor(&n("ffn_act.scales")) {
        return Err(ModelError::UnsupportedTensor {
            name: n("ffn_act.scales"),
            reason: "AWQ activation scales are not supported".into(),
        });
    }
    // BitNet's per-matrix scales (bitnet.cpp's files): not read, so refused.
    for m in ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"] {
        let name = n(&format!("{m}.scale"));
        if file.has_tensor(&name) {
            return Err(ModelError::UnsupportedTensor {
                name,
                reason: "per-matrix weight scales are not supported".into(),
            });
        }
    }
    let gpt_oss = hp.family == Family::GptOss;
    let gated = hp.mlp == MlpKind::Gated;
    for name in ["attn_output.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"] {
        // (jina-embeddings-v2's gate bias llama.cpp does not read either.)
        let read = (gpt_oss && name == "attn_output.bias") || (hp.out_biases && (name != "ffn_gate.bias" || (gated && !hp.gate_optional)));
        if file.has_tensor(&n(name)) && !read {
            return Err(ModelError::UnsupportedTensor {
                name: n(name),
                reason: "output and MLP biases are not supported".into(),
            });
        }
    }
    Ok(())
}

/// Passes over the K and V projections (and K's norm) that Gemma 3n's files keep in the layers
/// reading an earlier layer's K/V: the checkpoint's, unused by it as by llama.cpp, and not held.
/// Returns their bytes (`on_cpu`: as [`GgufFile::tensor_bytes`] counts them).
fn pass_over_shared_kv_weights(file: &mut GgufFile, hp: &HParams, on_cpu: bool) -> u64 {
    let unused: Vec<String> = (0..hp.layers)
        .filter(|&i| hp.family == Family::Gemma4 && !hp.writes_kv(i))
        .flat_map(|i| ["attn_k.weight", "attn_v.weight", "attn_k_norm.weight"].map(|s| format!("blk.{i}.{s}")))
        .filter(|name| file.has_tensor(name))
        .collect();
    unused.iter().for_each(|name| file.pass_over(name));
    unused.iter().filter_map(|name| file.tensor_bytes(name, on_cpu)).sum()
}

/// Layer `i`'s weights: the tensors `blk.{i}.*`; optional ones by family (biases, q/k
/// norms, Gemma's post-norms) when the file has them.
fn load_layer(file: &mut GgufFile, hp: &HParams, i: usize, device: &Device) -> Result<Layer, ModelError> {
    let d = hp.hidden;
    let n = |s: &str| format!("blk.{i}.{s}");
    // OLMo 2 and EXAONE 4.0 normalize after each block only; the others before (but
    // ModernBERT's first attention, which reads the normed embedding).
    let pre_norm = |file: &mut GgufFile, stem: &str| -> Result<Option<BlockNorm>, ModelError> {
        match hp.family {
            Family::Olmo2 | Family::Exaone4 => Ok(None),
            _ if hp.bert_layers || (hp.attn_norm_optional && !file.has_tensor(&n(&format!("{stem}.weight")))) => Ok(None),
            _ => BlockNorm::load(file, &n(stem), hp, device).map(Some),
        }
    };
    // Gemma's (not Gemma 1's), OLMo 2's, EXAONE 4.0's and GLM-4's post-norms are part of
    // their architecture: required there, absent elsewhere.
    let post_norm = |file: &mut GgufFile, name: &str| -> Result<Option<Tensor>, ModelError> {
        match hp.post_norms {
            true => load_vec(file, &n(name), d, device).map(Some),
            false => Ok(None),
        }
    };
    refuse_unread(file, hp, i)?;
    let dense = |file: &mut GgufFile| -> Result<Mlp, ModelError> {
        let f = hp.ffn_of(i);
        if hp.gate_optional { return jina_mlp(file, &n, hp, f, device) }
        Ok(Mlp {
            gate_up: FusedLinear::new(load_gate_up(file, &n, hp, f, device)?, device)?,
            down: QLinear::new(load_2d(file, &n("ffn_down.weight"), [d, f], device)?, device)?,
            kind: hp.mlp,
            xielu: hp.xielu.get(i).copied(),
            sparsity: hp.altup.as_ref().and_then(|a| a.sparsity.get(i).copied().flatten()),
            sub_norm: match hp.sub_norms {
                true => Some((load_vec(file, &n("ffn_sub_norm.weight"), f, device)?, hp.rms_eps as f32)),
                false => None,
            },
            biases: match hp.out_biases {
                true => Some(MlpBiases {
                    gate: match hp.mlp {
                        MlpKind::Gated => Some(load_vec(file, &n("ffn_gate.bias"), f, device)?),
                        _ => None,
                    },
                    up: Some(load_vec(file, &n("ffn_up.bias"), f, device)?),
                    down: load_vec(file, &n("ffn_down.bias"), d, device)?,
                }),
                false => None,
            },
        })
    };
    if hp.family == Family::NemotronH {
        return nemotron_h_layer(file, hp, i, dense, device);
    }
    // StableLM 2 12B's layers have no MLP norm: parallel ones.
    let parallel = hp.parallel_block || (hp.ffn_norm_optional && !file.has_tensor(&n("ffn_norm.weight")));
    // Deci's layers: some without attention (their MLP reads the residual stream), some without
    // an MLP.
    let (mlp_only, has_mlp) = (hp.is_mlp_only(i), hp.has_mlp(i));
    Ok(Layer {
        parallel,
        attn_norm: match mlp_only {
            true => None,
            false => pre_norm(file, "attn_norm")?,
        },
        // (llama.cpp reads `attn_norm_2` for Falcon alone; no other family's files have it.)
        attn_norm_2: match parallel && file.has_tensor(&n("attn_norm_2.weight")) {
            true => pre_norm(file, "attn_norm_2")?,
            false => None,
        },
        attn: match hp.mla {
            _ if mlp_only => SelfAttention::None,
            _ if hp.is_linear_attn(i) => SelfAttention::Linear(QLinear::new(load_2d(file, &n("attn_output.weight"), [d, d], device)?, device)?),
            Some(_) => SelfAttention::Latent(LatentAttention::load(file, hp, i, device)?),
            None if hp.is_recurrent(i) && hp.short_conv.is_some() => SelfAttention::ShortConv(ShortConv::load(file, hp, i, device)?),
            None if hp.ssm_beside_attention => SelfAttention::Heads(load_attention(file, hp, i, device)?),
            None if hp.is_recurrent(i) && hp.mamba2.is_some() => SelfAttention::Mamba2(Mamba2::load(file, hp, i, device)?),
            None if hp.is_recurrent(i) && hp.mamba.is_some() => SelfAttention::Mamba(Mamba::load(file, hp, i, device)?),
            None if hp.is_recurrent(i) => SelfAttention::Recurrent(DeltaNet::load(file, hp, i, device)?),
            None => SelfAttention::Heads(load_attention(file, hp, i, device)?),
        },
        ssm: match hp.ssm_beside_attention {
            true => Some(Mamba2::load(file, hp, i, device)?),
            false => None,
        },
        post_attn_norm: post_norm(file, "post_attention_norm.weight")?,
        // (The MLP pre-norm's name: `HParams::ffn_norm_stem`.)
        // (Cohere's, Phi-2's, Falcon's, PLaMo's and StableLM 2 12B's MLPs read the attention
        // norm's output; GPT-NeoX's parallel layers' their own norm's.)
        ffn_norm: match (parallel && !hp.parallel_mlp_norm) || !has_mlp {
            true => None,
            false => pre_norm(file, hp.ffn_norm_stem)?,
        },
        ffn: match &hp.moe {
            _ if !has_mlp => Ffn::None,
            // Gemma 4's experts run beside its dense MLP.
            Some(_) if hp.family == Family::Gemma4 => {
                let mlp = dense(file)?;
                Ffn::DenseAndExperts(DenseAndExperts::load(file, hp, i, mlp, device)?)
            }
            // GLM-4.5's first layers are dense; ERNIE 4.5's every `layer_step`-th after them has
            // experts (llama.cpp's `(il + 1) % n_moe_layer_step == 0`; nomic-embed-text-v2-moe's
            // `il % n == 1`: `MoeParams::routes`).
            // Jamba's layers with a router have experts.
            Some(p) if p.where_routed => match file.has_tensor(&n("ffn_gate_inp.weight")) {
                true => Ffn::Moe(MoeMlp::load(file, i, d, p, device)?),
                false => Ffn::Dense(dense(file)?),
            },
            Some(p) if p.routes(i) => Ffn::Moe(MoeMlp::load(file, i, d, p, device)?),
            _ => Ffn::Dense(dense(file)?),
        },
        post_ffn_norm: post_norm(file, "post_ffw_norm.weight")?,
        per_layer: PerLayerInput::load(file, hp, i, device)?,
        altup: LayerAltUp::load(file, hp, i, device)?,
        out_scale: match file.tensor_opt(&n("layer_output_scale.weight"), &Device::Cpu)? {
            Some(t) if hp.family == Family::Gemma4 => {
                check_shape(&n("layer_output_scale.weight"), t.shape().dims(), &[1])?;
                Some(f64::from(t.dequantize(&Device::Cpu)?.to_dtype(DType::F32)?.to_vec1::<f32>()?[0]))
            }
            _ => None,
        },
        residual_norms: residual_norms(file, hp, i, device)?,
    })
}

/// An encoder's layer `i`: its norms after the residual adds (`Layer::residual_norms`); a
/// second attention norm where a jina-embeddings-v2 file has one.
fn residual_norms(file: &mut GgufFile, hp: &HParams, i: usize, device: &Device) -> Result<Option<ResidualNorms>, ModelError> {
    if !hp.bert_layers {
        return Ok(None);
    }
    let stem = |s: &str| format!("blk.{i}.{s}");
    let attn_2 = match hp.gate_optional && file.has_tensor(&stem("attn_norm_2.weight")) {
        true => Some(BlockNorm::load(file, &stem("attn_norm_2"), hp, device)?),
        false => None,
    };
    Ok(Some(ResidualNorms {
        attn: BlockNorm::load(file, &stem("attn_output_norm"), hp, device)?,
        attn_2,
        out: BlockNorm::load(file, &stem("layer_output_norm"), hp, device)?,
    }))
}

/// Nemotron-H's layer `i`: one block (Mamba-2, attention, or the MLP `dense` loads, or in
/// its MoE files experts) after its one norm (`attn_norm`, whichever the block).
fn nemotron_h_layer(
    file: &mut GgufFile,
    hp: &HParams,
    i: usize,
    dense: impl FnOnce(&mut GgufFile) -> Result<Mlp, ModelError>,
    device: &Device,
) -> Result<Layer, ModelError> {
    let norm = BlockNorm::load(file, &format!("blk.{i}.attn_norm"), hp, device)?;
    let mlp = hp.is_mlp_only(i);
    Ok(Layer {
        parallel: false,
        attn_norm: (!mlp).then(|| norm.clone()),
        attn_norm_2: None,
        attn: match (mlp, hp.is_recurrent(i)) {
            (true, _) => SelfAttention::None,
            (false, true) => SelfAttention::Mamba2(Mamba2::load(file, hp, i, device)?),
            (false, false) => SelfAttention::Heads(load_attention(file, hp, i, device)?),
        },
        ssm: None,
        post_attn_norm: None,
        ffn_norm: mlp.then_some(norm),
        ffn: match &hp.moe {
            // Nemotron 3's MoE files: every MLP layer's experts.
            Some(p) if mlp => Ffn::Moe(MoeMlp::load(file, i, hp.hidden, p, device)?),
            None if mlp => Ffn::Dense(dense(file)?),
            _ => Ffn::None,
        },
        post_ffn_norm: None,
        per_layer: None,
        out_scale: None,
        altup: None,
        residual_norms: None,
    })
}

/// Layer `i`'s attention: Q/K/V (Q alone where the layer reads another's K/V; Q and K where V
/// is K's projection), their biases and norms, the output projection, gpt-oss's bias and sinks.
fn load_attention(file: &mut GgufFile, hp: &HParams, i: usize, device: &Device) -> Result<Attention, ModelError> {
    let d = hp.hidden;
    let shape = hp.attn_shape(i);
    let hd = shape.head_dim;
    let q_dim = shape.heads * hd;
    let kv_dim = shape.kv_heads * hd;
    let n = |s: &str| format!("blk.{i}.{s}");
    let kv_layer = hp.kv_layer(i);
    // Qwen3.5's attention layers are the store's layers in order; Gemma 4's that share read
    // an earlier one's.
    let writes_kv = hp.writes_kv(i);
    let q_gate = hp.family == Family::Qwen35;
    // Its gate's rows follow each head's Q rows in the one projection.
    let q_rows = if q_gate { 2 * q_dim } else { q_dim };
    let gemma4 = hp.family == Family::Gemma4;
    let k_as_v = gemma4 && writes_kv && !file.has_tensor(&n("attn_v.weight")) && !file.has_tensor(&n("attn_qkv.weight"));
    let qkv = match (writes_kv, k_as_v) {
        (false, _) => vec![load_2d(file, &n("attn_q.weight"), [q_dim, d], device)?],
        (true, false) if q_gate => load_qkv(file, &n, [q_rows, kv_dim, d], device)?,
        (true, true) => vec![
            load_2d(file, &n("attn_q.weight"), [q_dim, d], device)?,
            load_2d(file, &n("attn_k.weight"), [kv_dim, d], device)?,
        ],
        (true, false) => load_qkv(file, &n, [q_dim, kv_dim, d], device)?,
    };
    let bias = load_qkv_bias(file, &n, [q_dim, kv_dim], device)?;
    // OLMo 2 and OLMoE normalize Q and K whole (over every head), the others per head; the
    // LayerNorm families (Command R+, StableLM 2 12B) with weights per head.
    // Llama 4's rotating layers: unweighted norms after rope (weights of ones: the same bits).
    let unweighted = hp.qk_norm_unweighted && hp.rotates(i);
    let qk_norm = match (hp.norm.is_layer(), hp.qk_norm_whole, hp.qk_norm_after_rope || unweighted) {
        (true, _, _) => QkNorm::PerHeadLayer,
        (false, true, _) => QkNorm::Whole,
        (false, false, true) => QkNorm::PerHeadAfterRope,
        (false, false, false) => QkNorm::PerHead,
    };
    // jina-embeddings-v2's Q/K LayerNorms are over all of Q and K (`qk_layer_norms`), with biases.
    let whole_layer_norms = hp.gate_optional && file.has_tensor(&n("attn_q_norm.weight"));
    let has_q_norm = file.has_tensor(&n("attn_q_norm.weight")) && !whole_layer_norms;
    let load_norm = |file: &mut GgufFile, name: &str, heads: usize| match qk_norm {
        QkNorm::Whole => load_vec(file, &n(name), heads * hd, device),
        QkNorm::PerHeadLayer => load_rows_f32(file, &n(name), [heads, hd], device),
        _ => load_vec(file, &n(name), hd, device),
    };
    let ones = || Tensor::ones(hd, DType::F32, device);
    let q_norm = match (unweighted, has_q_norm) {
        (true, _) => Some(ones()?),
        (false, true) => Some(load_norm(file, "attn_q_norm.weight", shape.heads)?),
        (false, false) => None,
    };
    let k_norm = match (unweighted, has_q_norm, writes_kv) {
        (_, _, false) => None,
        (true, _, true) => Some(ones()?),
        (false, true, true) => Some(load_norm(file, "attn_k_norm.weight", shape.kv_heads)?),
        (false, false, true) => None,
    };
    let gpt_oss = hp.family == Family::GptOss;
    Ok(Attention {
        shape,
        qkv: FusedLinear::new(qkv, device)?,
        kv_layer,
        writes_kv,
        q_gate,
        out_gate: match hp.attn_gate {
            true => Some(QLinear::new(load_2d(file, &n("attn_gate.weight"), [q_dim, d], device)?, device)?),
            false => None,
        },
        sub_norm: match hp.sub_norms {
            true => Some(load_vec(file, &n("attn_sub_norm.weight"), q_dim, device)?),
            false => None,
        },
        v_norm: if gemma4 { Some(Tensor::ones(hd, DType::F32, device)?) } else { None },
        wo: QLinear::new(load_2d(file, &n("attn_output.weight"), [d, q_dim], device)?, device)?,
        bias,
        q_norm,
        k_norm,
        qk_norm,
        qk_unit: match qk_norm == QkNorm::PerHeadLayer && has_q_norm {
            true => Some(Tensor::ones(hd, DType::F32, device)?),
            false => None,
        },
        qk_layer_norms: match whole_layer_norms {
            true => Some([BlockNorm::load(file, &n("attn_q_norm"), hp, device)?, BlockNorm::load(file, &n("attn_k_norm"), hp, device)?]),
            false => None,
        },
        out_bias: match gpt_oss || hp.out_biases {
            true => Some(load_vec(file, &n("attn_output.bias"), d, device)?),
            false => None,
        },
        sinks: if gpt_oss {
            Some(load_vec(file, &n("attn_sinks.weight"), shape.heads, &Device::Cpu)?.to_vec1::<f32>()?)
        } else {
            None
        },
    })
}

/// Q, K and V's weights: `attn_q`, `attn_k`, `attn_v`, or a fused `attn_qkv` (Phi-3's; GLM-4
/// files may have one) split into its `q`, `kv`, `kv` rows. `dims`: `[q_dim, kv_dim, hidden]`.
fn load_qkv(
    file: &mut GgufFile,
    n: &dyn Fn(&str) -> String,
    [q_dim, kv_dim, d]: [usize; 3],
    device: &Device,
) -> Result<Vec<Weight>, ModelError> {
    if file.has_tensor(&n("attn_qkv.weight")) {
        return file.tensor_row_split(&n("attn_qkv.weight"), &[q_dim, kv_dim, kv_dim], d, device);
    }
    Ok(vec![
        load_2d(file, &n("attn_q.weight"), [q_dim, d], device)?,
        load_2d(file, &n("attn_k.weight"), [kv_dim, d], device)?,
        load_2d(file, &n("attn_v.weight"), [kv_dim, d], device)?,
    ])
}

/// Q, K and V's biases, when the file has them: `attn_q.bias`, `attn_k.bias`, `attn_v.bias`, or
/// one `attn_qkv.bias` beside a fused `attn_qkv` (llama.cpp's `create_tensor_qkv` reads both
/// layouts), split as its weight is. `dims`: `[q_dim, kv_dim]`.
fn load_qkv_bias(
    file: &mut GgufFile,
    n: &dyn Fn(&str) -> String,
    [q_dim, kv_dim]: [usize; 2],
    device: &Device,
) -> Result<Option<[Tensor; 3]>, ModelError> {
    if file.has_tensor(&n("attn_qkv.bias")) {
        let all = load_vec(file, &n("attn_qkv.bias"), q_dim + 2 * kv_dim, device)?;
        return Ok(Some([all.narrow(0, 0, q_dim)?, all.narrow(0, q_dim, kv_dim)?, all.narrow(0, q_dim + kv_dim, kv_dim)?]));
    }
    if !file.has_tensor(&n("attn_q.bias")) {
        return Ok(None);
    }
    Ok(Some([
        load_vec(file, &n("attn_q.bias"), q_dim, device)?,
        load_vec(file, &n("attn_k.bias"), kv_dim, device)?,
        load_vec(file, &n("attn_v.bias"), kv_dim, device)?,
    ]))
}

/// The MLP's gate and up weights: `ffn_gate` and `ffn_up`, or Phi-3's and GLM-4's `ffn_up` of
/// twice the width whose first half is the gate (llama.cpp's `LLM_FFN_SWIGLU` on one tensor).
/// jina-embeddings-v2's MLP of layer `n`'s tensors ([`HParams::gate_optional`]): GELU-gated
/// where the file has `ffn_gate` or an `ffn_up` of `2·f` rows (the gate its first `f`, as
/// ggml's `ggml_geglu` splits it), else up and GELU; `ffn_up.bias` where the file has one (the
/// fused one's first half the gate's), `ffn_down.bias` required.
fn jina_mlp(file: &mut GgufFile, n: &dyn Fn(&str) -> String, hp: &HParams, f: usize, device: &Device) -> Result<Mlp, ModelError> {
    let d = hp.hidden;
    let fused = !file.has_tensor(&n("ffn_gate.weight")) && file.tensor_shape(&n("ffn_up.weight")).is_some_and(|s| s.first() == Some(&(2 * f)));
    let gate_up = match (fused, file.has_tensor(&n("ffn_gate.weight"))) {
        (true, _) => file.tensor_row_split(&n("ffn_up.weight"), &[f, f], d, device)?,
        (false, true) => vec![load_2d(file, &n("ffn_gate.weight"), [f, d], device)?, load_2d(file, &n("ffn_up.weight"), [f, d], device)?],
        (false, false) => vec![load_2d(file, &n("ffn_up.weight"), [f, d], device)?],
    };
    let kind = if gate_up.len() == 2 { MlpKind::Gated } else { MlpKind::UpGelu };
    let (gate_b, up_b) = match file.has_tensor(&n("ffn_up.bias")) {
        false => (None, None),
        true if fused => {
            let b = load_vec(file, &n("ffn_up.bias"), 2 * f, device)?;
            (Some(b.narrow(0, 0, f)?), Some(b.narrow(0, f, f)?))
        }
        true => (None, Some(load_vec(file, &n("ffn_up.bias"), f, device)?)),
    };
    Ok(Mlp {
        gate_up: FusedLinear::new(gate_up, device)?,
        down: QLinear::new(load_2d(file, &n("ffn_down.weight"), [d, f], device)?, device)?,
        kind,
        xielu: None,
        sparsity: None,
        sub_norm: None,
        biases: Some(MlpBiases {
            gate: gate_b,
            up: up_b,
            down: load_vec(file, &n("ffn_down.bias"), d, device)?,
        }),
    })
}

fn load_gate_up(
    file: &mut GgufFile,
    n: &dyn Fn(&str) -> String,
    hp: &HParams,
    f: usize,
    device: &Device,
) -> Result<Vec<Weight>, ModelError> {
    let d = hp.hidden;
    // (ModernBERT's too, whatever its activation.)
    if matches!(hp.family, Family::Phi3 | Family::Glm4) || hp.gate_act.is_some() {
        return file.tensor_row_split(&n("ffn_up.weight"), &[f, f], d, device);
    }
    if hp.mlp != MlpKind::Gated {
        return Ok(vec![load_2d(file, &n("ffn_up.weight"), [f, d], device)?]);
    }
    Ok(vec![
        load_2d(file, &n("ffn_gate.weight"), [f, d], device)?,
        load_2d(file, &n("ffn_up.weight"), [f, d], device)?,
    ])
}

pub(super) fn check_shape(name: &str, actual: &[usize], expected: &[usize]) -> Result<(), ModelError> {
    if actual != expected {
        return Err(ModelError::BadTensor {
            name: name.into(),
            actual: actual.to_vec(),
            expected: expected.to_vec(),
        });
    }
    Ok(())
}

pub(super) fn load_2d(file: &mut GgufFile, name: &str, shape: [usize; 2], device: &Device) -> Result<Weight, ModelError> {
    let t = file.weight(name, device)?;
    check_shape(name, t.shape().dims(), &shape)?;
    Ok(t)
}

/// An f32 matrix of `shape` (Command R+'s and StableLM 2 12B's per-head norm weights).
pub(super) fn load_rows_f32(file: &mut GgufFile, name: &str, shape: [usize; 2], device: &Device) -> Result<Tensor, ModelError> {
    let t = file.tensor(name, device)?;
    check_shape(name, t.shape().dims(), &shape)?;
    Ok(t.dequantize(device)?.to_dtype(DType::F32)?)
}

/// An f32 vector of `len` values (norm weights, biases, scales).
pub(super) fn load_vec(file: &mut GgufFile, name: &str, len: usize, device: &Device) -> Result<Tensor, ModelError> {
    let t = file.tensor(name, device)?;
    check_shape(name, t.shape().dims(), &[len])?;
    Ok(t.dequantize(device)?.to_dtype(DType::F32)?)
}
