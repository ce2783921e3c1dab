//! Mixture-of-experts MLPs: a router scores every expert for each token, the token runs
//! through its top `k` experts only, and their outputs are summed, weighted.
//!
//! Owns: the expert weights of one layer (each expert's gate/up fused into one matmul and its
//! down projection, sliced out of GGUF's stacked `ffn_*_exps` tensors, so on the CPU every
//! expert runs on our quantized kernels) and the routing. Routing follows llama.cpp's
//! `build_moe_ffn`: with softmax gating (Qwen3 MoE, Mixtral), softmax over all experts in f32,
//! the top `k` by probability (ties to the lower id), their probabilities renormalized to sum
//! to 1 (the sum clamped below at f16's smallest normal, as llama.cpp does); with sigmoid
//! gating (GLM-4.5, DeepSeek V3's scheme), each expert's sigmoid, the top `k` by that plus the
//! file's per-expert selection bias (`exp_probs_b`), their unbiased sigmoids as weights,
//! renormalized where the file says (`expert_weights_norm`), times `expert_weights_scale`;
//! with gpt-oss's softmax-of-the-chosen gating, the top `k` by raw score, weighted by a softmax
//! over those `k` scores; with Llama 4's, the top `k` by raw score, each weighted by its
//! sigmoid, the weight multiplying the expert's input instead of its output (`weigh_inputs`:
//! llama.cpp's `weight_before_ffn`). Where the file groups its experts (`expert_group_count` above 1:
//! DeepSeek-V3's, Ling 2.0's), a token chooses only among the `expert_group_used_count`
//! groups whose two best selection scores sum highest, as llama.cpp does for every
//! architecture. gpt-oss's router and experts also have biases (`ffn_gate_inp.bias`,
//! `ffn_{gate,up,down}_exps.bias`): added to the router's scores before anything else, to each
//! expert's gate and up outputs before the activation, and to its down output before its
//! weight multiplies it, as llama.cpp's `ggml_add_id`.
//! The expert outputs are scaled by their weights and summed per token in the order of the
//! choice, best first; a shared expert (`ffn_*_shexp`, GLM-4.5's) runs on every token and is
//! added after. Nemotron-H's experts (and its shared expert) have no gate: up, squared ReLU,
//! down; Nemotron 3 Super's run in a narrower latent space, the token projected down to it
//! (`ffn_latent_down`) before them and their weighted sum back up (`ffn_latent_up`) after.
//!
//! Invariants: every token's output is its own `k` experts' and nothing else's: tokens are
//! grouped by expert only to batch the matmuls, which work row by row, so a token's output
//! does not depend on which other tokens share its batch (beyond float rounding), and a
//! cached prefix gives the numbers a full prefill gives.
//!
//! Counterpart: vLLM's `FusedMoE` (`fused_topk` + `fused_experts`), SGLang's `moe` layers,
//! candle-transformers' `FusedMoeGGUF` (CUDA only); llama.cpp's `ggml_mul_mat_id`.

use candle_core::{DType, Device, Tensor};

use super::gguf::weight::Weight;
use super::gguf::GgufFile;
use super::hparams::{ExpertGroups, MlpKind, MoeGating, MoeParams};
use super::linear::{FusedLinear, QLinear};
use super::ModelError;
use crate::ops::glu::{self, Gate};
use crate::ops::OpsError;
use crate::ops::qmatmul::{matmul_many, MatmulJob, PackedMatrix};

/// llama.cpp clamps the sum of the chosen weights at f16's smallest normal before dividing.
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

struct Expert {
    /// Gate and up (fused), or up alone (ungated experts: Nemotron-H's, nomic-embed-text-v2-moe's).
    gate_up: FusedLinear,
    down: QLinear,
    /// gpt-oss: the expert's biases.
    bias: Option<ExpertBias>,
}

/// One expert's biases, on the host for the CPU path and on the device for the other.
struct ExpertBias {
    /// The gate's then up's: `[2 · expert_ffn]`, as the fused output's columns.
    gate_up: Vec<f32>,
    down: Vec<f32>,
    gate_t: Tensor,
    up_t: Tensor,
    down_t: Tensor,
}

impl ExpertBias {
    fn new(gate: Vec<f32>, up: Vec<f32>, down: Vec<f32>, device: &Device) -> Result<Self, ModelError> {
        let t = |v: &[f32]| Tensor::from_slice(v, v.len(), device);
        Ok(Self {
            gate_t: t(&gate)?,
            up_t: t(&up)?,
            down_t: t(&down)?,
            gate_up: [gate, up].concat(),
            down,
        })
    }
}

/// One layer's mixture of experts.
pub struct MoeMlp {
    /// `[experts, hidden]`: one score per expert.
    router: QLinear,
    /// gpt-oss: added to the router's scores.
    router_bias: Option<Vec<f32>>,
    experts: Vec<Expert>,
    routing: Routing,
    /// GLM-4.5: an MLP every token runs, added to the routed experts' sum.
    shared: Option<Expert>,
    /// Qwen3.5: `[hidden, 1]`, the score whose sigmoid multiplies the shared expert's output.
    shared_gate: Option<Tensor>,
    /// Nemotron 3 Super: `[latent, hidden]` before the experts and `[hidden, latent]` after.
    latent: Option<[QLinear; 2]>,
    /// An ungated expert's activation of its up output: Nemotron-H's squared ReLU (the
    /// default), nomic-embed-text-v2-moe's GELU.
    up_act: Gate,
}

/// How router scores become each token's experts and weights (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    pub k: usize,
    pub gating: MoeGating,
    /// Added to each expert's gated score to choose, not to weigh (`exp_probs_b`).
    pub selection_bias: Option<Vec<f32>>,
    /// Renormalize the chosen weights to sum to 1.
    pub normalize: bool,
    /// Multiplies every weight (1: none).
    pub scale: f32,
    /// Gemma 4: multiplies each expert's weight (`ffn_down_exps.scale`, one per expert: its
    /// output's scale, folded into the weight).
    pub expert_scale: Option<Vec<f32>>,
    /// The experts in groups, of which a token chooses among the best few only.
    pub groups: Option<ExpertGroups>,
    /// Llama 4's: chosen by raw score (the gating gives the weights only), each weight
    /// multiplying its expert's input rather than its output.
    pub weigh_inputs: bool,
}

#[cfg(test)]
impl Routing {
    /// Softmax, top `k`, renormalized: Qwen3 MoE's and Mixtral's.
    pub fn softmax(k: usize) -> Self {
        Self {
            k,
            gating: MoeGating::Softmax,
            selection_bias: None,
            normalize: true,
            scale: 1.0,
            expert_scale: None,
            groups: None,
            weigh_inputs: false,
        }
    }
}

/// Each token's experts (best first) and weights: `ids[t * k + slot]`, `weights[t * k + slot]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Routes {
    pub k: usize,
    pub ids: Vec<u32>,
    pub weights: Vec<f32>,
}

impl Routes {
    /// Each of `experts` experts' tokens as (packed row, slot), in token order.
    pub fn by_expert(&self, experts: usize) -> Vec<Vec<(u32, u32)>> {
        let mut rows_of = vec![Vec::new(); experts];
        for (i, &e) in self.ids.iter().enumerate() {
            rows_of[e as usize].push(((i / self.k) as u32, (i % self.k) as u32));
        }
        rows_of
    }
}

/// Routes each row of `logits` (`[tokens, experts]`, row-major) as `routing` says (see the
/// module docs).
pub fn route(logits: &[f32], experts: usize, routing: &Routing) -> Routes {
    let k = routing.k.min(experts);
    let tokens = logits.len().checked_div(experts).unwrap_or(0);
    let mut ids = Vec::with_capacity(tokens * k);
    let mut weights = Vec::with_capacity(tokens * k);
    let mut order: Vec<u32> = Vec::with_capacity(experts);
    for row in logits.chunks_exact(experts.max(1)).take(tokens) {
        let probs = gate(row, routing.gating);
        let mut selection: Vec<f32> = match &routing.selection_bias {
            Some(b) => probs.iter().zip(b).map(|(p, b)| p + b).collect(),
            None if routing.weigh_inputs => row.to_vec(),
            None => probs.clone(),
        };
        if let Some(g) = routing.groups {
            mask_groups(&mut selection, g);
        }
        order.clear();
        order.extend(0..experts as u32);
        // Stable: equal scores keep the lower id first.
        order.sort_by(|&a, &b| selection[b as usize].total_cmp(&selection[a as usize]));
        let chosen = &order[..k];
        let mut w: Vec<f32> = chosen.iter().map(|&e| probs[e as usize]).collect();
        if routing.gating == MoeGating::SoftmaxWeight {
            w = softmax(&w);
        }
        if routing.normalize {
            let sum = w.iter().sum::<f32>().max(MIN_WEIGHT_SUM);
            w.iter_mut().for_each(|p| *p /= sum);
        }
        if routing.scale != 1.0 {
            w.iter_mut().for_each(|p| *p *= routing.scale);
        }
        if let Some(s) = &routing.expert_scale {
            w.iter_mut().zip(chosen).for_each(|(p, &e)| *p *= s[e as usize]);
        }
        ids.extend_from_slice(chosen);
        weights.extend(w);
    }
    Routes { k, ids, weights }
}

/// Leaves `selection`'s scores in its best `g.used` groups and sets the others' to -inf: a
/// group's score is the sum of its two best experts' (llama.cpp's `build_moe_ffn`, after
/// DeepSeek-V3's `noaux_tc`); equal group scores keep the lower group.
fn mask_groups(selection: &mut [f32], g: ExpertGroups) {
    let per = selection.len() / g.count.max(1);
    if g.count <= 1 || per < 2 {
        return;
    }
    let score = |group: &[f32]| {
        let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for &x in group {
            if x > a {
                (a, b) = (x, a);
            } else if x > b {
                b = x;
            }
        }
        a + b
    };
    let scores: Vec<f32> = selection.chunks(per).map(score).collect();
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    for &dropped in &order[g.used.min(order.len())..] {
        selection[dropped * per..(dropped + 1) * per].fill(f32::NEG_INFINITY);
    }
}

/// One token's gated router scores: softmax over the experts, each one's sigmoid, or (gpt-oss)
/// the scores as they are.
fn gate(row: &[f32], gating: MoeGating) -> Vec<f32> {
    match gating {
        MoeGating::Softmax => softmax(row),
        MoeGating::Sigmoid => row.iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect(),
        MoeGating::SoftmaxWeight => row.to_vec(),
    }
}

/// Softmax of `row`, its sum taken in f64 (as ggml's `ggml_vec_soft_max_f32`).
fn softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = row.iter().map(|&x| (x - max).exp()).collect();
    let total: f64 = exps.iter().map(|&e| e as f64).sum();
    let inv = (1.0 / total) as f32;
    exps.iter().map(|e| e * inv).collect()
}

impl MoeMlp {
    /// Layer `layer`'s router (`ffn_gate_inp`), experts (`ffn_{gate,up,down}_exps`), where
    /// the file has them the selection bias (`exp_probs_b`) and shared expert
    /// (`ffn_{gate,up,down}_shexp`, required when `p.shared_ffn` is not 0), and where `p.biases`
    /// says the router's and experts' biases (`ffn_gate_inp.bias`, `ffn_*_exps.bias`, required).
    pub fn load(
        file: &mut GgufFile,
        layer: usize,
        hidden: usize,
        p: &MoeParams,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let n = |s: &str| format!("blk.{layer}.{s}");
        let router = super::transformer::load_2d(file, &n("ffn_gate_inp.weight"), [p.experts, hidden], device)?;
        let (e, f) = (p.experts, p.expert_ffn);
        // The experts' own width: the latent space's where the file has one.
        let m = p.latent.unwrap_or(hidden);
        let downs = load_experts(file, &n("ffn_down_exps.weight"), [e, m, f], device)?;
        let experts: Vec<Vec<Weight>> = if p.ungated() {
            let ups = load_experts(file, &n("ffn_up_exps.weight"), [e, f, m], device)?;
            ups.into_iter().zip(downs).map(|(u, d)| vec![u, d]).collect()
        } else {
            let (gates, ups) = if file.has_tensor(&n("ffn_gate_up_exps.weight")) {
                // Gemma 4's: each expert's gate rows, then its up rows, split as 2·experts parts.
                let name = n("ffn_gate_up_exps.weight");
                if let Some(dims) = file.tensor_shape(&name) {
                    super::transformer::check_shape(&name, &dims, &[e, 2 * f, m])?;
                }
                let mut parts = file.tensor_row_split(&name, &vec![f; 2 * e], m, device)?.into_iter();
                let (mut gates, mut ups) = (Vec::with_capacity(e), Vec::with_capacity(e));
                while let (Some(g), Some(u)) = (parts.next(), parts.next()) {
                    gates.push(g);
                    ups.push(u);
                }
                (gates, ups)
            } else {
                (
                    load_experts(file, &n("ffn_gate_exps.weight"), [e, f, m], device)?,
                    load_experts(file, &n("ffn_up_exps.weight"), [e, f, m], device)?,
                )
            };
            gates.into_iter().zip(ups).zip(downs).map(|((g, u), d)| vec![g, u, d]).collect()
        };
        let mut moe = Self::new(router, experts, Self::routing(file, layer, p)?, device)?;
        moe.up_act = match p.expert_mlp {
            MlpKind::Gated | MlpKind::UpReluSquared => Gate::ReluSquared,
            MlpKind::UpGelu => Gate::GeluTanh,
            MlpKind::UpXielu => return Err(OpsError::Layout("experts of xIELU are not supported".into()).into()),
        };
        let load = |file: &mut GgufFile, name: &str, shape| super::transformer::load_2d(file, &n(name), shape, device);
        if let Some(l) = p.latent {
            moe.latent = Some([
                QLinear::new(load(file, "ffn_latent_down.weight", [l, hidden])?, device)?,
                QLinear::new(load(file, "ffn_latent_up.weight", [hidden, l])?, device)?,
            ]);
        }
        if p.biases {
            let cpu_vec = |file: &mut GgufFile, name: &str, shape: &[usize]| -> Result<Vec<f32>, ModelError> {
                host_vec(file, &n(name), shape)?.ok_or_else(|| ModelError::MissingTensor { name: n(name) })
            };
            moe.router_bias = Some(cpu_vec(file, "ffn_gate_inp.bias", &[e])?);
            let gate = cpu_vec(file, "ffn_gate_exps.bias", &[e, f])?;
            let up = cpu_vec(file, "ffn_up_exps.bias", &[e, f])?;
            let down = cpu_vec(file, "ffn_down_exps.bias", &[e, hidden])?;
            for (i, expert) in moe.experts.iter_mut().enumerate() {
                expert.bias = Some(ExpertBias::new(
                    gate[i * f..][..f].to_vec(),
                    up[i * f..][..f].to_vec(),
                    down[i * hidden..][..hidden].to_vec(),
                    device,
                )?);
            }
        }
        if p.shared_ffn > 0 {
            let sf = p.shared_ffn;
            // Nemotron-H's shared expert, as its experts, has no gate.
            let names: &[&str] = if p.ungated() { &["ffn_up_shexp.weight"] } else { &["ffn_gate_shexp.weight", "ffn_up_shexp.weight"] };
            let gate_up = names.iter().map(|name| load(file, name, [sf, hidden])).collect::<Result<Vec<_>, _>>()?;
            moe.shared = Some(Expert {
                gate_up: FusedLinear::new(gate_up, device)?,
                down: QLinear::new(load(file, "ffn_down_shexp.weight", [hidden, sf])?, device)?,
                bias: None,
            });
        }
        if p.shared_gate {
            let w = super::transformer::load_vec(file, &n("ffn_gate_inp_shexp.weight"), hidden, device)?;
            moe.shared_gate = Some(w.reshape((hidden, 1))?);
        }
        Ok(moe)
    }

    /// Layer `layer`'s routing: `p`'s, with the file's selection bias (`exp_probs_b`) and
    /// per-expert output scales (`ffn_down_exps.scale`) where it has them.
    fn routing(file: &mut GgufFile, layer: usize, p: &MoeParams) -> Result<Routing, ModelError> {
        let n = |s: &str| format!("blk.{layer}.{s}");
        Ok(Routing {
            k: p.experts_used,
            gating: p.gating,
            selection_bias: host_vec(file, &n("exp_probs_b.bias"), &[p.experts])?,
            normalize: p.normalize,
            scale: p.weights_scale,
            expert_scale: host_vec(file, &n("ffn_down_exps.scale"), &[p.experts])?,
            groups: p.groups,
            weigh_inputs: p.weigh_inputs,
        })
    }

    /// A router `[experts, hidden]` and each expert's `[gate, up, down]` weights, or
    /// `[up, down]` for an ungated expert.
    fn new<W: Into<Weight>>(
        router: impl Into<Weight>,
        experts: Vec<Vec<W>>,
        routing: Routing,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let experts = experts
            .into_iter()
            .map(|w| {
                let mut w: Vec<Weight> = w.into_iter().map(Into::into).collect();
                let down = w.pop().ok_or_else(|| OpsError::Layout("an expert without weights".into()))?;
                Ok(Expert {
                    gate_up: FusedLinear::new(w, device)?,
                    down: QLinear::new(down, device)?,
                    bias: None,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Self {
            router: QLinear::new(router, device)?,
            router_bias: None,
            experts,
            routing,
            shared: None,
            shared_gate: None,
            latent: None,
            up_act: Gate::ReluSquared,
        })
    }

    /// `h`: `[tokens, hidden]` (the normed hidden state) → `[tokens, hidden]`.
    pub fn forward(&self, h: &Tensor, act: Gate) -> Result<Tensor, ModelError> {
        self.forward_routed(h, h, act)
    }

    /// [`Self::forward`] with the router scoring `router_in` (Gemma 4 routes on its own
    /// normalization of the layer's input) while the experts run `h`.
    pub fn forward_routed(&self, h: &Tensor, router_in: &Tensor, act: Gate) -> Result<Tensor, ModelError> {
        let (t, _) = h.dims2()?;
        if t == 0 {
            return Ok(h.clone());
        }
        let n = self.experts.len();
        let mut logits = self.router.forward(router_in)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        if let Some(b) = &self.router_bias {
            add_to_rows(&mut logits, b);
        }
        let routes = route(&logits, n, &self.routing);
        let rows_of = routes.by_expert(n);
        let x = match &self.latent {
            Some([down, _]) => down.forward(h)?,
            None => h.clone(),
        };
        let routed = match self.packed_experts() {
            Some(packed) if h.device().is_cpu() => self.forward_packed(&x, &packed, &routes, &rows_of, act)?,
            _ => self.forward_tensors(&x, &routes, &rows_of, act)?,
        };
        let routed = match &self.latent {
            Some([_, up]) => up.forward(&routed)?,
            None => routed,
        };
        match &self.shared {
            Some(e) => {
                let out = e.down.forward(&self.activated(&e.gate_up.forward(h)?, act)?)?;
                let out = match &self.shared_gate {
                    Some(w) => out.broadcast_mul(&candle_nn::ops::sigmoid(&h.matmul(w)?)?)?,
                    None => out,
                };
                Ok((routed + out)?)
            }
            None => Ok(routed),
        }
    }

    /// An expert's activation: `act(gate) · up`, or an ungated expert's `up_act(up)`.
    fn activated(&self, gate_up: &[Tensor], act: Gate) -> Result<Tensor, ModelError> {
        match gate_up {
            [up] => Ok(glu::activated(up, self.up_act)?),
            _ => activated(gate_up, act),
        }
    }

    /// Every expert's fused gate/up and down weights, when our CPU kernels run them all.
    fn packed_experts(&self) -> Option<Vec<(&PackedMatrix, &PackedMatrix)>> {
        self.experts.iter().map(|e| Some((e.gate_up.packed()?, e.down.packed()?))).collect()
    }

    /// The CPU path: the active experts' gate/up products as one split of work across the
    /// threads, then their down products as another ([`matmul_many`]), on plain slices. The
    /// same kernels and arithmetic as [`Self::forward_tensors`], so the same bits (test), with
    /// two wake-ups of the pool a layer instead of a few per expert.
    fn forward_packed(
        &self,
        h: &Tensor,
        packed: &[(&PackedMatrix, &PackedMatrix)],
        routes: &Routes,
        rows_of: &[Vec<(u32, u32)>],
        act: Gate,
    ) -> Result<Tensor, ModelError> {
        let (t, d) = h.dims2()?;
        let k = routes.k;
        let hv = h.flatten_all()?.to_vec1::<f32>()?;
        let active: Vec<usize> = (0..rows_of.len()).filter(|&e| !rows_of[e].is_empty()).collect();
        // Llama 4's: each row times its weight before the expert (the others' times 1: the
        // same bits).
        let weigh = self.routing.weigh_inputs;
        let input_weight = |r: u32, s: u32| if weigh { routes.weights[r as usize * k + s as usize] } else { 1.0 };
        let xs: Vec<Vec<f32>> = active
            .iter()
            .map(|&e| {
                rows_of[e]
                    .iter()
                    .flat_map(|&(r, s)| {
                        let w = input_weight(r, s);
                        hv[r as usize * d..][..d].iter().map(move |&x| x * w)
                    })
                    .collect()
            })
            .collect();
        let jobs = |mats: Vec<&PackedMatrix>, xs: &[Vec<f32>]| -> Vec<Vec<f32>> {
            let mut outs: Vec<Vec<f32>> = mats
                .iter()
                .zip(xs)
                .map(|(m, x)| vec![0f32; x.len() / m.cols() * m.rows()])
                .collect();
            let mut jobs: Vec<MatmulJob<'_>> = mats
                .iter()
                .zip(xs)
                .zip(outs.iter_mut())
                .map(|((m, x), out)| MatmulJob {
                    matrix: m,
                    x,
                    t: x.len() / m.cols(),
                    out,
                })
                .collect();
            matmul_many(&mut jobs);
            outs
        };
        let mut gate_ups = jobs(active.iter().map(|&e| packed[e].0).collect(), &xs);
        let bias_of = |e: usize| self.experts[e].bias.as_ref();
        for (&e, gu) in active.iter().zip(gate_ups.iter_mut()) {
            if let Some(b) = bias_of(e) {
                add_to_rows(gu, &b.gate_up);
            }
        }
        // act(gate) · up per row: the fused output's first half of columns is the gate; an
        // ungated expert's activation of up (`up_act`), as `glu::activated` computes it.
        let gated: Vec<Vec<f32>> = active
            .iter()
            .zip(gate_ups)
            .map(|(&e, gu)| {
                if self.experts[e].gate_up.parts() == 1 {
                    let f = packed[e].0.rows();
                    let ones = vec![1f32; f];
                    let mut a = vec![0f32; gu.len()];
                    for (row, out) in gu.chunks_exact(f).zip(a.chunks_exact_mut(f)) {
                        glu::row(self.up_act, row, &ones, out);
                    }
                    return a;
                }
                let f = packed[e].0.rows() / 2;
                let mut a = vec![0f32; gu.len() / 2];
                for (row, out) in gu.chunks_exact(2 * f).zip(a.chunks_exact_mut(f)) {
                    glu::row(act, &row[..f], &row[f..], out);
                }
                a
            })
            .collect();
        let mut ys = jobs(active.iter().map(|&e| packed[e].1).collect(), &gated);
        for (&e, y) in active.iter().zip(ys.iter_mut()) {
            if let Some(b) = bias_of(e) {
                add_to_rows(y, &b.down);
            }
        }
        // Where each token's slot landed: (active expert, its row there).
        let mut at = vec![(0usize, 0usize); t * k];
        for (ai, &e) in active.iter().enumerate() {
            for (pos, &(r, slot)) in rows_of[e].iter().enumerate() {
                at[r as usize * k + slot as usize] = (ai, pos);
            }
        }
        // Weighted, summed best first: `y₀·w₀ + y₁·w₁ + …`, each product rounded first, as the
        // tensor path's broadcast multiply and adds.
        let mut out = vec![0f32; t * d];
        for (i, &(ai, pos)) in at.iter().enumerate() {
            let w = if weigh { 1.0 } else { routes.weights[i] };
            let y = &ys[ai][pos * d..][..d];
            let o = &mut out[(i / k) * d..][..d];
            if i % k == 0 {
                o.iter_mut().zip(y).for_each(|(o, &y)| *o = y * w);
            } else {
                o.iter_mut().zip(y).for_each(|(o, &y)| *o += y * w);
            }
        }
        Ok(Tensor::from_vec(out, (t, d), h.device())?)
    }

    /// Any device: candle's ops per expert.
    fn forward_tensors(
        &self,
        h: &Tensor,
        routes: &Routes,
        rows_of: &[Vec<(u32, u32)>],
        act: Gate,
    ) -> Result<Tensor, ModelError> {
        let (t, d) = h.dims2()?;
        let k = routes.k;
        let mut outs = Vec::new();
        // Where token t's slot s landed among the experts' output rows.
        let mut at = vec![0u32; t * k];
        let mut next = 0u32;
        for (expert, rows) in self.experts.iter().zip(rows_of) {
            if rows.is_empty() {
                continue;
            }
            let idx: Vec<u32> = rows.iter().map(|&(r, _)| r).collect();
            let w: Vec<f32> = rows.iter().map(|&(r, s)| routes.weights[(r as usize) * k + s as usize]).collect();
            let x = h.index_select(&Tensor::new(idx.as_slice(), h.device())?, 0)?;
            let w = Tensor::from_vec(w, (rows.len(), 1), h.device())?;
            // Llama 4's: the weight on the input, the output summed as it is.
            let (x, w) = match self.routing.weigh_inputs {
                true => (x.broadcast_mul(&w)?, None),
                false => (x, Some(w)),
            };
            let gu = expert.gate_up.forward(&x)?;
            let y = match &expert.bias {
                Some(b) => {
                    let (g, u) = (gu[0].broadcast_add(&b.gate_t)?, gu[1].broadcast_add(&b.up_t)?);
                    expert.down.forward(&glu::gated(&g, &u, act)?)?.broadcast_add(&b.down_t)?
                }
                None => expert.down.forward(&self.activated(&gu, act)?)?,
            };
            outs.push(match w {
                Some(w) => y.broadcast_mul(&w)?,
                None => y,
            });
            for &(r, s) in rows {
                at[(r as usize) * k + s as usize] = next;
                next += 1;
            }
        }
        let all = Tensor::cat(&outs, 0)?;
        let in_order = all.index_select(&Tensor::new(at.as_slice(), h.device())?, 0)?;
        let y = in_order.reshape((t, k, d))?;
        // The slots summed best first, as llama.cpp adds them.
        let mut sum = y.narrow(1, 0, 1)?;
        for s in 1..k {
            sum = (sum + y.narrow(1, s, 1)?)?;
        }
        Ok(sum.reshape((t, d))?)
    }
}

/// An MLP's activation from its gate and up outputs: `act(gate) · up`, or with up alone
/// (Nemotron-H's ungated MLPs and experts) its squared ReLU.
pub(super) fn activated(gate_up: &[Tensor], act: Gate) -> Result<Tensor, ModelError> {
    match gate_up {
        [up] => Ok(up.relu()?.sqr()?),
        [gate, up] => Ok(glu::gated(gate, up, act)?),
        _ => Err(OpsError::Layout(format!("an MLP of {} projections before its down", gate_up.len())).into()),
    }
}


/// `name` (of `shape`) as f32 values on the host, when the file has it.
fn host_vec(file: &mut GgufFile, name: &str, shape: &[usize]) -> Result<Option<Vec<f32>>, ModelError> {
    let Some(t) = file.tensor_opt(name, &Device::Cpu)? else { return Ok(None) };
    super::transformer::check_shape(name, t.shape().dims(), shape)?;
    Ok(Some(t.dequantize(&Device::Cpu)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?))
}

/// `bias` added to each row of `rows` (`[n, bias.len()]`, row-major).
fn add_to_rows(rows: &mut [f32], bias: &[f32]) {
    for row in rows.chunks_exact_mut(bias.len().max(1)) {
        row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
    }
}

/// The experts of a stacked `[experts, rows, cols]` GGUF tensor, one `[rows, cols]` weight
/// each (an expert's blocks are contiguous in the file).
fn load_experts(file: &mut GgufFile, name: &str, shape: [usize; 3], device: &Device) -> Result<Vec<Weight>, ModelError> {
    let [experts, rows, cols] = shape;
    if let Some(dims) = file.tensor_shape(name) {
        super::transformer::check_shape(name, &dims, &shape)?;
    }
    file.tensor_row_split(name, &vec![rows; experts], cols, device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
    use candle_core::Module;

    fn weight(rows: usize, cols: usize, seed: u64, dtype: GgmlDType, gain: f32) -> QTensor {
        let data = crate::ops::test_util::rand_vec(rows * cols, seed);
        let a = gain / (cols as f32).sqrt();
        let t = Tensor::from_vec(data, (rows, cols), &Device::Cpu).unwrap();
        QTensor::quantize(&(t * a as f64).unwrap(), dtype).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar().unwrap()
    }

    /// Six experts, two per token, Q8_0 (our kernels) against a token-by-token reference
    /// with candle's `QMatMul` and ops: the routing, grouping and weighted sum; softmax-routed
    /// and renormalized, and as Llama 4's (sigmoid weights on the experts' inputs). Widths are
    /// not multiples of 256, where candle keeps ggml's Q8_0 activations (see tests/forward.rs).
    #[test]
    fn forward_equals_each_token_through_its_own_experts() {
        let k = 2;
        let llama4 = Routing {
            gating: MoeGating::Sigmoid,
            normalize: false,
            weigh_inputs: true,
            ..Routing::softmax(k)
        };
        for routing in [Routing::softmax(k), llama4] {
            experts_against_tokens(routing);
        }
    }

    fn experts_against_tokens(routing: Routing) {
        let (d, f, n) = (96, 160, 6);
        let q8 = GgmlDType::Q8_0;
        let experts = || -> Vec<[QTensor; 3]> {
            (0..n as u64)
                .map(|e| [weight(f, d, 10 + e, q8, 1.7), weight(f, d, 20 + e, q8, 1.7), weight(d, f, 30 + e, q8, 1.7)])
                .collect()
        };
        let moe = MoeMlp::new(weight(n, d, 1, GgmlDType::F32, 6.0), experts().into_iter().map(Vec::from).collect(), routing.clone(), &Device::Cpu).unwrap();
        let experts: Vec<[QMatMul; 3]> = experts()
            .into_iter()
            .map(|ws| ws.map(|w| QMatMul::from_qtensor(w).unwrap()))
            .collect();
        let t = 11;
        let h = Tensor::from_vec(crate::ops::test_util::rand_vec(t * d, 5), (t, d), &Device::Cpu).unwrap();
        let h = (h * 1.7).unwrap();
        let ours = moe.forward(&h, Gate::Silu).unwrap();

        let router = weight(n, d, 1, GgmlDType::F32, 6.0).dequantize(&Device::Cpu).unwrap();
        let mm = |w: &QMatMul, x: &Tensor| w.forward(x).unwrap();
        let mut used = vec![0usize; n];
        for row in 0..t {
            let x = h.narrow(0, row, 1).unwrap();
            let logits = x.matmul(&router.t().unwrap()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let r = route(&logits, n, &routing);
            let mut expect = Tensor::zeros((1, d), DType::F32, &Device::Cpu).unwrap();
            for (&e, &w) in r.ids.iter().zip(&r.weights) {
                let [g, u, dn] = &experts[e as usize];
                // Llama 4's weight scales the input; the others' the output.
                let (x, w) = if routing.weigh_inputs { ((&x * w as f64).unwrap(), 1.0) } else { (x.clone(), w as f64) };
                let a = (candle_nn::ops::silu(&mm(g, &x)).unwrap() * mm(u, &x)).unwrap();
                expect = (expect + (mm(dn, &a) * w).unwrap()).unwrap();
                used[e as usize] += 1;
            }
            let got = ours.narrow(0, row, 1).unwrap();
            let scale: f32 = expect.abs().unwrap().max_all().unwrap().to_scalar().unwrap();
            let diff = max_diff(&got, &expect);
            assert!(diff < 2e-2 * scale, "token {row}: max |diff| {diff}, max |y| {scale}");
        }
        assert!(used.iter().filter(|&&u| u > 0).count() >= 4, "routing too narrow to test: {used:?}");
        // The CPU path and candle's ops per expert: the same bits.
        let logits = moe.router.forward(&h).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let routes = route(&logits, n, &routing);
        let rows_of = routes.by_expert(n);
        let packed = moe.packed_experts().expect("Q8_0 experts run on our kernels");
        let a = moe.forward_packed(&h, &packed, &routes, &rows_of, Gate::Silu).unwrap();
        let b = moe.forward_tensors(&h, &routes, &rows_of, Gate::Silu).unwrap();
        assert_eq!(max_diff(&a, &b), 0.0);
        assert_eq!(max_diff(&a, &ours), 0.0);
        // One token alone gives what it gets in the batch.
        for row in [0, 5, 10] {
            let alone = moe.forward(&h.narrow(0, row, 1).unwrap(), Gate::Silu).unwrap();
            let diff = max_diff(&alone, &ours.narrow(0, row, 1).unwrap());
            assert!(diff < 1e-5, "token {row} alone: {diff}");
        }
    }

    /// Nemotron-H's ungated experts (up, squared ReLU, down) through a latent space, sigmoid
    /// routing with a selection bias, and an ungated shared expert: each token's output is its
    /// own experts' (token by token with candle's ops), and our CPU kernels' path gives the
    /// bits of candle's ops per expert.
    #[test]
    fn ungated_experts_in_a_latent_space_beside_a_shared_expert() {
        let (d, l, f, n, k) = (96, 64, 160, 6, 2);
        let q8 = GgmlDType::Q8_0;
        let experts = || -> Vec<Vec<QTensor>> {
            (0..n as u64).map(|e| vec![weight(f, l, 10 + e, q8, 1.7), weight(l, f, 30 + e, q8, 1.7)]).collect()
        };
        let routing = Routing {
            k,
            gating: MoeGating::Sigmoid,
            selection_bias: Some(crate::ops::test_util::rand_vec(n, 3).iter().map(|b| b * 0.3).collect()),
            normalize: true,
            scale: 2.5,
            expert_scale: None,
            groups: None,
            weigh_inputs: false,
        };
        let cpu = Device::Cpu;
        let mut moe = MoeMlp::new(weight(n, d, 1, GgmlDType::F32, 6.0), experts(), routing.clone(), &cpu).unwrap();
        moe.latent = Some([
            QLinear::new(weight(l, d, 40, q8, 1.0), &cpu).unwrap(),
            QLinear::new(weight(d, l, 41, q8, 1.0), &cpu).unwrap(),
        ]);
        moe.shared = Some(Expert {
            gate_up: FusedLinear::new(vec![weight(f, d, 42, q8, 1.7)], &cpu).unwrap(),
            down: QLinear::new(weight(d, f, 43, q8, 1.7), &cpu).unwrap(),
            bias: None,
        });
        let t = 9;
        let h = (Tensor::from_vec(crate::ops::test_util::rand_vec(t * d, 5), (t, d), &cpu).unwrap() * 1.7).unwrap();
        let ours = moe.forward(&h, Gate::Silu).unwrap();

        let mm = |w: QTensor, x: &Tensor| QMatMul::from_qtensor(w).unwrap().forward(x).unwrap();
        let relu2 = |x: Tensor| x.relu().unwrap().sqr().unwrap();
        let router = weight(n, d, 1, GgmlDType::F32, 6.0).dequantize(&cpu).unwrap();
        for row in 0..t {
            let x = h.narrow(0, row, 1).unwrap();
            let logits = x.matmul(&router.t().unwrap()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let r = route(&logits, n, &routing);
            let z = mm(weight(l, d, 40, q8, 1.0), &x);
            let mut sum = Tensor::zeros((1, l), DType::F32, &cpu).unwrap();
            for (&e, &w) in r.ids.iter().zip(&r.weights) {
                let e = e as u64;
                let y = mm(weight(l, f, 30 + e, q8, 1.7), &relu2(mm(weight(f, l, 10 + e, q8, 1.7), &z)));
                sum = (sum + (y * w as f64).unwrap()).unwrap();
            }
            let shared = mm(weight(d, f, 43, q8, 1.7), &relu2(mm(weight(f, d, 42, q8, 1.7), &x)));
            let expect = (mm(weight(d, l, 41, q8, 1.0), &sum) + shared).unwrap();
            let got = ours.narrow(0, row, 1).unwrap();
            let scale: f32 = expect.abs().unwrap().max_all().unwrap().to_scalar().unwrap();
            let diff = max_diff(&got, &expect);
            assert!(diff < 2e-2 * scale, "token {row}: max |diff| {diff}, max |y| {scale}");
        }
        let z = moe.latent.as_ref().unwrap()[0].forward(&h).unwrap();
        let logits = moe.router.forward(&h).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let routes = route(&logits, n, &routing);
        let rows_of = routes.by_expert(n);
        let packed = moe.packed_experts().expect("Q8_0 ungated experts run on our kernels");
        let a = moe.forward_packed(&z, &packed, &routes, &rows_of, Gate::Silu).unwrap();
        let b = moe.forward_tensors(&z, &routes, &rows_of, Gate::Silu).unwrap();
        assert_eq!(max_diff(&a, &b), 0.0);
        // nomic-embed-text-v2-moe's GELU in the squared ReLU's place: applied, and the two
        // paths still agree to the bit.
        moe.up_act = Gate::GeluTanh;
        let packed = moe.packed_experts().expect("Q8_0 ungated experts run on our kernels");
        let c = moe.forward_packed(&z, &packed, &routes, &rows_of, Gate::Silu).unwrap();
        let d = moe.forward_tensors(&z, &routes, &rows_of, Gate::Silu).unwrap();
        assert_eq!(max_diff(&c, &d), 0.0);
        assert!(max_diff(&c, &a) > 1e-3, "the activation changed nothing");
    }

    #[test]
    fn routes_pick_the_top_k_renormalized_best_first() {
        // Two tokens over four experts.
        let logits = [0.0, 2.0, 1.0, -1.0, 3.0, 3.0, 0.0, 5.0];
        let r = route(&logits, 4, &Routing::softmax(2));
        assert_eq!(r.ids, vec![1, 2, 3, 0]);
        let e = |x: f32| x.exp();
        let (a, b) = (e(2.0), e(1.0));
        assert!((r.weights[0] - a / (a + b)).abs() < 1e-6);
        assert!((r.weights[1] - b / (a + b)).abs() < 1e-6);
        // Equal scores: the lower id first.
        let (a, b) = (e(5.0), e(3.0));
        assert!((r.weights[2] - a / (a + b)).abs() < 1e-6);
        assert!((r.weights[3] - b / (a + b)).abs() < 1e-6);
        for w in r.weights.chunks(2) {
            assert!((w[0] + w[1] - 1.0).abs() < 1e-6);
        }
        // k = experts: every expert, weights = the softmax.
        let r = route(&[1.0, 1.0], 2, &Routing::softmax(2));
        assert_eq!((r.ids, r.weights), (vec![0, 1], vec![0.5, 0.5]));
        // Huge logits do not overflow.
        let r = route(&[1e30, -1e30, 0.0], 3, &Routing::softmax(1));
        assert_eq!((r.ids, r.weights), (vec![0], vec![1.0]));
    }

    /// Sigmoid gating (GLM-4.5): the selection bias chooses, the unbiased sigmoids weigh,
    /// renormalized where asked, then scaled.
    #[test]
    fn sigmoid_routes_choose_by_the_biased_score_and_weigh_by_the_unbiased_one() {
        let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
        let logits = [2.0, 1.0, 0.0, -1.0];
        let mut routing = Routing {
            k: 2,
            gating: MoeGating::Sigmoid,
            selection_bias: None,
            normalize: false,
            scale: 1.0,
            expert_scale: None,
            groups: None,
            weigh_inputs: false,
        };
        let r = route(&logits, 4, &routing);
        assert_eq!((r.ids.clone(), r.weights.clone()), (vec![0, 1], vec![sig(2.0), sig(1.0)]));
        // A bias that lifts expert 3 over experts 1 and 0 picks it first; its weight stays its
        // sigmoid.
        routing.selection_bias = Some(vec![0.0, 0.0, 0.0, 0.9]);
        let r = route(&logits, 4, &routing);
        assert_eq!((r.ids.clone(), r.weights.clone()), (vec![3, 0], vec![sig(-1.0), sig(2.0)]));
        routing.normalize = true;
        routing.scale = 2.5;
        let r = route(&logits, 4, &routing);
        let sum = sig(2.0) + sig(-1.0);
        assert!((r.weights[0] - 2.5 * sig(-1.0) / sum).abs() < 1e-6 && (r.weights[1] - 2.5 * sig(2.0) / sum).abs() < 1e-6);
    }

    /// Grouped experts: a token chooses only in the best groups by their two best selection
    /// scores' sum, a group with one very good expert losing to one with two good ones.
    #[test]
    fn grouped_routes_choose_within_the_best_groups() {
        // Four groups of two: sums 3+(-5), 2+2, 1.5+1.5, 0+0.
        let logits = [3.0, -5.0, 2.0, 2.0, 1.5, 1.5, 0.0, 0.0];
        let mut routing = Routing {
            gating: MoeGating::Sigmoid,
            normalize: false,
            groups: Some(ExpertGroups { count: 4, used: 2 }),
            ..Routing::softmax(2)
        };
        // Groups 1 and 2 (sums 4 and 3) win over group 0 (sum of sigmoids lower), though
        // expert 0 is the best alone.
        let r = route(&logits, 8, &routing);
        assert_eq!(r.ids, vec![2, 3]);
        routing.k = 3;
        assert_eq!(route(&logits, 8, &routing).ids, vec![2, 3, 4]);
        // Without groups expert 0 comes first.
        routing.groups = None;
        assert_eq!(route(&logits, 8, &routing).ids, vec![0, 2, 3]);
        // One group holding every expert: no masking.
        routing.groups = Some(ExpertGroups { count: 1, used: 1 });
        assert_eq!(route(&logits, 8, &routing).ids, vec![0, 2, 3]);
    }

    /// gpt-oss's gating: the raw scores choose, a softmax over the chosen ones weighs.
    #[test]
    fn softmax_weight_routes_weigh_by_a_softmax_over_the_chosen() {
        let routing = Routing {
            k: 2,
            gating: MoeGating::SoftmaxWeight,
            selection_bias: None,
            normalize: false,
            scale: 1.0,
            expert_scale: None,
            groups: None,
            weigh_inputs: false,
        };
        let r = route(&[1.0, 3.0, 2.0, -4.0], 4, &routing);
        assert_eq!(r.ids, vec![1, 2]);
        let (a, b) = (3f32.exp(), 2f32.exp());
        assert!((r.weights[0] - a / (a + b)).abs() < 1e-6 && (r.weights[1] - b / (a + b)).abs() < 1e-6);
    }

    /// gpt-oss's biased experts with its clamped SwiGLU and router bias: the CPU path and
    /// candle's ops per expert give the same bits, the biases change the output, and a token
    /// equals its own two experts computed by hand.
    #[test]
    fn biased_experts_take_their_biases_on_both_paths() {
        let (d, f, n, k) = (64, 96, 4, 2);
        let q8 = GgmlDType::Q8_0;
        let experts = || -> Vec<[QTensor; 3]> {
            (0..n as u64)
                .map(|e| [weight(f, d, 40 + e, q8, 1.7), weight(f, d, 50 + e, q8, 1.7), weight(d, f, 60 + e, q8, 1.7)])
                .collect()
        };
        let routing = Routing {
            k,
            gating: MoeGating::SoftmaxWeight,
            selection_bias: None,
            normalize: false,
            scale: 1.0,
            expert_scale: None,
            groups: None,
            weigh_inputs: false,
        };
        let plain = MoeMlp::new(weight(n, d, 2, GgmlDType::F32, 6.0), experts().into_iter().map(Vec::from).collect(), routing.clone(), &Device::Cpu).unwrap();
        let mut moe = MoeMlp::new(weight(n, d, 2, GgmlDType::F32, 6.0), experts().into_iter().map(Vec::from).collect(), routing.clone(), &Device::Cpu).unwrap();
        let bias = |len: usize, seed: u64, gain: f32| -> Vec<f32> {
            crate::ops::test_util::rand_vec(len, seed).iter().map(|x| x * gain).collect()
        };
        moe.router_bias = Some(bias(n, 70, 2.0));
        for (e, expert) in moe.experts.iter_mut().enumerate() {
            let s = 80 + 3 * e as u64;
            expert.bias = Some(ExpertBias::new(bias(f, s, 8.0), bias(f, s + 1, 8.0), bias(d, s + 2, 0.5), &Device::Cpu).unwrap());
        }
        let t = 9;
        let h = (Tensor::from_vec(crate::ops::test_util::rand_vec(t * d, 6), (t, d), &Device::Cpu).unwrap() * 1.7).unwrap();
        let ours = moe.forward(&h, Gate::SwigluOai).unwrap();
        assert!(max_diff(&ours, &plain.forward(&h, Gate::SwigluOai).unwrap()) > 1e-2, "the biases change nothing");

        let mut logits = moe.router.forward(&h).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        add_to_rows(&mut logits, moe.router_bias.as_ref().unwrap());
        let routes = route(&logits, n, &routing);
        let rows_of = routes.by_expert(n);
        let packed = moe.packed_experts().expect("Q8_0 experts run on our kernels");
        let a = moe.forward_packed(&h, &packed, &routes, &rows_of, Gate::SwigluOai).unwrap();
        let b = moe.forward_tensors(&h, &routes, &rows_of, Gate::SwigluOai).unwrap();
        assert_eq!(max_diff(&a, &b), 0.0);
        assert_eq!(max_diff(&a, &ours), 0.0);

        // Token 0 by hand: each chosen expert's gate and up plus their biases, the clamped
        // SwiGLU, down plus its bias, weighted.
        let x = h.narrow(0, 0, 1).unwrap();
        let mut expect = vec![0f32; d];
        for (&e, &w) in routes.ids[..k].iter().zip(&routes.weights[..k]) {
            let ex = &moe.experts[e as usize];
            let b = ex.bias.as_ref().unwrap();
            let gu = ex.gate_up.forward(&x).unwrap();
            let row = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let (g, u) = (row(&gu[0]), row(&gu[1]));
            let act: Vec<f32> = (0..f)
                .map(|i| {
                    let gi = (g[i] + b.gate_up[i]).min(7.0);
                    let ui = (u[i] + b.gate_up[f + i]).clamp(-7.0, 7.0);
                    gi / (1.0 + (-1.702 * gi).exp()) * (ui + 1.0)
                })
                .collect();
            let y = row(&ex.down.forward(&Tensor::from_vec(act, (1, f), &Device::Cpu).unwrap()).unwrap());
            for i in 0..d {
                expect[i] += (y[i] + b.down[i]) * w;
            }
        }
        let got = ours.narrow(0, 0, 1).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let scale = expect.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = got.iter().zip(&expect).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff < 2e-2 * scale, "token 0: max |diff| {diff}, max |y| {scale}");
    }
}
