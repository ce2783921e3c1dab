//! A block's input norm and the model's final norm: their weights and the family's kind of
//! norm ([`NormKind`]) with its epsilon.
//!
//! RMSNorm for most families; Cohere's LayerNorm without a bias; Orion's LayerNorm with one,
//! `(x − mean) / √(var + ε) · α + β`, as llama.cpp's `build_norm` with `LLM_NORM` and a bias
//! (`ggml_norm`, `ggml_mul`, `ggml_add`); OLMo's LayerNorm with neither (its `α` all ones).
//!
//! Phi-3.5-MoE's RMSNorm has a bias too (`x / √(mean(x²) + ε) · α + β`).
//!
//! Invariant: a norm holds a bias exactly when its kind is [`NormKind::BiasedLayer`] or
//! [`NormKind::BiasedRms`], and a weight read from its file unless its kind is
//! [`NormKind::PlainLayer`]. A file whose norm has a bias or weight its family does not read
//! is refused (llama.cpp refuses a file with a
//! tensor it does not load), never run without it.
//!
//! Counterpart: vLLM's `RMSNorm` and `nn.LayerNorm` as its model files hold them
//! (`input_layernorm`, `post_attention_layernorm`, `norm`).

use candle_core::{Device, Tensor};

use super::gguf::GgufFile;
use super::hparams::{HParams, NormKind};
use super::transformer::load_vec;
use super::ModelError;
use crate::ops::norm;

/// One norm over the hidden state: weight `α`, the bias `β` of a biased LayerNorm.
#[derive(Clone)]
pub(super) struct BlockNorm {
    alpha: Tensor,
    beta: Option<Tensor>,
    kind: NormKind,
    eps: f32,
}

impl BlockNorm {
    /// The norm whose tensors are `{stem}.weight` (and `{stem}.bias` for a biased LayerNorm),
    /// each one value per hidden column.
    pub(super) fn load(file: &mut GgufFile, stem: &str, hp: &HParams, device: &Device) -> Result<Self, ModelError> {
        let (mut weight, bias) = (format!("{stem}.weight"), format!("{stem}.bias"));
        // Falcon-H1's converter names its MLP norm's weight without the suffix (`ffn_norm`, as
        // llama.cpp reads it).
        if hp.ssm_beside_attention && !file.has_tensor(&weight) && file.has_tensor(stem) {
            weight = stem.to_owned();
        }
        let alpha = match hp.norm {
            NormKind::PlainLayer if file.has_tensor(&weight) => {
                return Err(ModelError::UnsupportedTensor {
                    name: weight,
                    reason: "this architecture's norms have no weight".into(),
                })
            }
            // (× 1: the same values as a LayerNorm with no weight.)
            NormKind::PlainLayer => Tensor::ones(hp.hidden, candle_core::DType::F32, device)?,
            _ => load_vec(file, &weight, hp.hidden, device)?,
        };
        let beta = match hp.norm.has_bias() {
            true => Some(load_vec(file, &bias, hp.hidden, device)?),
            false if file.has_tensor(&bias) => {
                return Err(ModelError::UnsupportedTensor {
                    name: bias,
                    reason: "this architecture's norms have no bias".into(),
                })
            }
            false => None,
        };
        Ok(Self {
            alpha,
            beta,
            kind: hp.norm,
            eps: hp.rms_eps as f32,
        })
    }

    /// `x` (`[.., hidden]`) normalized over its last dimension.
    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let y = match self.kind.is_layer() {
            false => norm::rms_norm(x, &self.alpha, self.eps)?,
            true => norm::layer_norm(x, &self.alpha, self.eps)?,
        };
        Ok(match &self.beta {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(kind: NormKind, beta: Option<Vec<f32>>) -> BlockNorm {
        let cpu = Device::Cpu;
        BlockNorm {
            alpha: Tensor::new(&[1.0f32, 2.0, 0.5, 1.0], &cpu).unwrap(),
            beta: beta.map(|b| Tensor::new(b.as_slice(), &cpu).unwrap()),
            kind,
            eps: 1e-5,
        }
    }

    /// A biased LayerNorm is candle_nn's LayerNorm with that bias; an RMSNorm candle_nn's.
    #[test]
    fn each_kind_matches_candle_nn() {
        let cpu = Device::Cpu;
        let x = Tensor::new(&[[0.5f32, -1.0, 3.0, 2.0], [1.0, 1.5, -0.25, 0.0]], &cpu).unwrap();
        let beta = vec![0.1f32, -0.2, 0.3, 0.0];
        let n = norm(NormKind::BiasedLayer, Some(beta.clone()));
        let want = candle_nn::ops::layer_norm(&x, &n.alpha, &Tensor::new(beta.as_slice(), &cpu).unwrap(), 1e-5).unwrap();
        let got = n.forward(&x).unwrap();
        let diff = (got - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 1e-6, "biased LayerNorm off by {diff}");

        let n = norm(NormKind::Rms, None);
        let want = candle_nn::ops::rms_norm(&x, &n.alpha, 1e-5).unwrap();
        let diff = (n.forward(&x).unwrap() - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 1e-6, "RMSNorm off by {diff}");
    }
}
