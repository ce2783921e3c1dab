//! Sentence embeddings: how a sequence's final hidden states become one vector.
//!
//! Owns: reading [`Pooling`] from a file (`{arch}.pooling_type`: mean, first token or last token),
//! [`Pooled`] (a sequence's running pool, fed the rows of its chunks as they are computed, each
//! position once however often it is recomputed), and [`normalize`] (OpenAI's unit-length
//! vectors). The rows pooled are the final norm's output, before the output projection: llama.cpp's
//! `t_embd`, which its `build_pooling` pools the same three ways.
//!
//! Also a reranker's pieces: its head's shape ([`rank_head`]), the head ([`Classifier`]) and prompt
//! ([`rank_prompt`]).
//!
//! Invariants: a file's pooling type is read at load and one hearth cannot honour (rank outside
//! [`RANK_ARCHS`], an unknown type) is refused then; a file with bidirectional attention
//! (`{arch}.attention.causal` false) is refused too unless it is one of the encoders hearth runs
//! ([`BIDIRECTIONAL_ARCHS`]: BERT's, nomic-embed-text's and EmbeddingGemma's, which read their
//! whole input at once; a BERT rank file, a cross-encoder, scores its first row, a ModernBERT
//! one its first or the rows' mean, as its file says);
//! a pooled vector is the same whether its prefix came from the cache or was computed (for
//! [`Pooling::Last`], the only one that reads the cache, the last row always runs).
//!
//! Counterpart: vLLM's `Pooler` (`MeanPool`, `CLSPool`, `LastPool`) and llama.cpp's
//! `llama_pooling_type`.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use super::gguf::{md_opt_bool, md_opt_usize};
use super::hparams::{BIDIRECTIONAL_ARCHS, MODERN_BERT};
use super::tokenizer::Tokenizer;
use crate::ops::qmatmul::{round_acts, QuantKind};
use super::ModelError;

/// Declared in `config` (the settings name it too, `server.pooling`); its reading from a file
/// and what it needs of the forward are here.
pub use crate::config::Pooling;

impl Pooling {
    /// The file's pooling type, `{arch}.pooling_type` (llama.cpp's numbering: 0 none, 1 mean,
    /// 2 cls, 3 last, 4 rank); `None` where it is absent or none (a generative model). A rank
    /// file (a reranker's classifier head) and a file whose attention is bidirectional (but an
    /// encoder's, [`BIDIRECTIONAL_ARCHS`]) are refused.
    pub fn read(md: &HashMap<String, Value>, arch: &str) -> Result<Option<Self>, ModelError> {
        let causal = format!("{arch}.attention.causal");
        if md_opt_bool(md, &causal)? == Some(false) && !BIDIRECTIONAL_ARCHS.contains(&arch) {
            return Err(ModelError::BadMetadata {
                key: causal,
                reason: format!(
                    "bidirectional attention is supported in {} files only (encoders); this {arch} file's layers attend causally here",
                    BIDIRECTIONAL_ARCHS.join(", ")
                ),
            });
        }
        let key = format!("{arch}.pooling_type");
        match md_opt_usize(md, &key)? {
            None | Some(0) => Ok(None),
            Some(1) => Ok(Some(Self::Mean)),
            Some(2) => Ok(Some(Self::Cls)),
            Some(3) => Ok(Some(Self::Last)),
            // A reranker: not an embedding model ([`rank_head`]).
            Some(4) if RANK_ARCHS.contains(&arch) => Ok(None),
            Some(4) => Err(ModelError::BadMetadata {
                key,
                reason: format!("pooling type rank (a reranker's classifier head) is supported for {} files only", RANK_ARCHS.join(", ")),
            }),
            Some(n) => Err(ModelError::BadMetadata {
                key,
                reason: format!("unknown pooling type {n} (0 none, 1 mean, 2 cls, 3 last)"),
            }),
        }
    }

    /// Whether a sequence pooled so may start from the prefix cache: only the last row counts,
    /// and that one always runs.
    pub fn reads_cache(self) -> bool {
        self == Self::Last
    }

    /// Which of a chunk's `new` rows, over positions `cached..cached + new` of a prompt of
    /// `len` tokens, this pooling needs: their offsets in the chunk.
    pub fn rows(self, cached: usize, new: usize, len: usize) -> std::ops::Range<usize> {
        match self {
            Self::Mean => 0..new,
            Self::Cls if cached == 0 && new > 0 => 0..1,
            Self::Last if cached + new == len && new > 0 => new - 1..new,
            Self::Cls | Self::Last => 0..0,
        }
    }
}

/// The architectures whose rank files hearth runs: Qwen3-Reranker's (llama.cpp's `cls_out` on
/// the last token, then a softmax over its labels), as llama.cpp reads rank files of these
/// only among causal models; and BERT's (`bert`: cross-encoders such as ms-marco-MiniLM, and
/// XLM-RoBERTa's, bge-reranker and bge-reranker-v2-m3: the first token through RoBERTa's dense
/// layer and tanh where the file has one, then `cls_out`, its first output the score);
/// jina-reranker-v1's (`jina-bert-v2`: the first token through `cls`'s one row and tanh); and
/// ModernBERT's (`modern-bert`, gte-reranker-modernbert: the rows' mean or the first, by
/// `classifier.pooling_type`, through `cls`, GELU, `cls.norm`, then `cls_out`).
const RANK_ARCHS: [&str; 5] = ["qwen3", "qwen3vl", "bert", "jina-bert-v2", MODERN_BERT];

/// The name of a rank file's classifier head: `[labels, hidden]`.
pub const CLASSIFIER: &str = "cls.output.weight";
/// Its bias, where the file has one (`[labels]`).
pub const CLASSIFIER_BIAS: &str = "cls.output.bias";
/// RoBERTa's classifier's dense layer before it (`[hidden, hidden]`), and its bias.
pub const CLASSIFIER_DENSE: &str = "cls.weight";
pub const CLASSIFIER_DENSE_BIAS: &str = "cls.bias";
/// ModernBERT's head's LayerNorm after the dense layer's GELU (a weight, no bias).
pub const CLASSIFIER_NORM: &str = "cls.norm.weight";

/// A rank file's head as its metadata describes it ([`rank_head`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankHead {
    /// Its labels (`{arch}.classifier.output_labels`; one where the file lists none).
    pub labels: usize,
    /// The row it scores: the rows' mean (`{arch}.classifier.pooling_type` mean, ModernBERT's
    /// `classifier_pooling`), else an encoder's first, a causal model's last.
    pub mean: bool,
    /// ModernBERT's head: GELU after the dense layer, then `cls.norm` (RoBERTa's is tanh).
    pub modern: bool,
}

/// A reranker's head (`Some`) for a rank file (`pooling_type` 4) of [`RANK_ARCHS`], `None`
/// for any other file: its labels (Qwen3-Reranker's "yes" and "no"), the row it scores and
/// the shape of its layers.
pub fn rank_head(md: &HashMap<String, Value>, arch: &str) -> Result<Option<RankHead>, ModelError> {
    if !RANK_ARCHS.contains(&arch) || md_opt_usize(md, &format!("{arch}.pooling_type"))? != Some(4) {
        return Ok(None);
    }
    let key = format!("{arch}.classifier.output_labels");
    let labels = match md.get(&key) {
        None => 1,
        Some(Value::Array(labels)) if !labels.is_empty() => labels.len(),
        Some(_) => {
            return Err(ModelError::BadMetadata {
                key,
                reason: "must be a non-empty list of labels".into(),
            })
        }
    };
    // llama.cpp pools the mean for `mean` (1) and picks a row for anything else.
    let key = format!("{arch}.classifier.pooling_type");
    let mean = match md_opt_usize(md, &key)? {
        None | Some(0 | 2 | 3 | 4) => false,
        Some(1) => true,
        Some(n) => {
            return Err(ModelError::BadMetadata {
                key,
                reason: format!("unknown pooling type {n} before the classifier (1 mean, 2 cls)"),
            })
        }
    };
    Ok(Some(RankHead {
        labels,
        mean,
        modern: arch == MODERN_BERT,
    }))
}

/// A reranker's classifier head, in f32 on the host, as llama.cpp's `build_pooling` applies it
/// to the pooled row: the dense layer where the file has one (RoBERTa's, then tanh; ModernBERT's,
/// then GELU and a LayerNorm), the output projection where it has one, a softmax for
/// Qwen3-Reranker; the score is the first output (Qwen3-Reranker's "yes" probability, a
/// cross-encoder's logit), as llama.cpp's server scores.
#[derive(Debug, Clone, PartialEq)]
pub struct Classifier {
    /// `cls.weight` (`[hidden, hidden]` row-major; jina-reranker-v1's one row) and `cls.bias`.
    pub dense: Option<Affine>,
    /// What follows the dense layer: tanh, or ModernBERT's GELU.
    pub act: HeadAct,
    /// ModernBERT's `cls.norm` after the activation.
    pub norm: Option<HeadNorm>,
    /// `cls.output.weight` (`[labels, in]` row-major) and `cls.output.bias`.
    pub output: Option<Affine>,
    /// A softmax over the outputs (Qwen3-Reranker's).
    pub softmax: bool,
}

/// The activation after a head's dense layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadAct {
    /// RoBERTa's and BERT's pooler's.
    Tanh,
    /// ModernBERT's (`classifier_activation` gelu), tanh-approximated as ggml's `gelu`.
    Gelu,
}

impl HeadAct {
    fn apply(self, x: f32) -> f32 {
        match self {
            Self::Tanh => x.tanh(),
            Self::Gelu => {
                const SQRT_2_OVER_PI: f32 = 0.797_884_6;
                0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044_715 * x * x)).tanh())
            }
        }
    }
}

/// A LayerNorm without a bias (ModernBERT's `cls.norm`): `(x − mean) / √(var + eps) · weight`.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadNorm {
    pub weight: Vec<f32>,
    pub eps: f32,
}

impl HeadNorm {
    fn apply(&self, x: &mut [f32]) {
        let n = x.len().max(1) as f32;
        let mean = x.iter().sum::<f32>() / n;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        let inv = 1.0 / (var + self.eps).sqrt();
        x.iter_mut().zip(&self.weight).for_each(|(v, w)| *v = (*v - mean) * inv * w);
    }
}

/// `x ↦ W·x + b`: `weights` row-major, one row per output.
#[derive(Debug, Clone, PartialEq)]
pub struct Affine {
    pub weights: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    /// The quantized type the weights were stored in, where our integer kernels take it:
    /// `x` is then rounded to 8 bits first, as ggml multiplies such a weight against its input
    /// quantized to the type's `vec_dot_type` (Q8_0's blocks of 32 for Q8_0, Q4_0/1, Q5_0/1;
    /// Q8_K's of 256 for the K-quants: `ops::qmatmul::round_acts`).
    pub input_kind: Option<QuantKind>,
}

impl Affine {
    /// `W·x + b`.
    pub fn apply(&self, x: &[f32]) -> Vec<f32> {
        let rounded;
        let x = match self.input_kind {
            Some(kind) => {
                rounded = round_acts(kind, x);
                &rounded[..]
            }
            None => x,
        };
        let mut y: Vec<f32> = self
            .weights
            .chunks(x.len().max(1))
            .map(|w| w.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect();
        if let Some(b) = &self.bias {
            y.iter_mut().zip(b).for_each(|(y, b)| *y += b);
        }
        y
    }
}

impl Classifier {
    /// The score of a pooled row (the last for a causal reranker, the first for an encoder).
    pub fn score(&self, row: &[f32]) -> f32 {
        let mut x = row.to_vec();
        if let Some(dense) = &self.dense {
            x = dense.apply(&x).into_iter().map(|v| self.act.apply(v)).collect();
            if let Some(norm) = &self.norm {
                norm.apply(&mut x);
            }
        }
        if let Some(output) = &self.output {
            x = output.apply(&x);
        }
        let Some(&first) = x.first() else { return 0.0 };
        if !self.softmax {
            return first;
        }
        let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = x.iter().map(|l| (l - max).exp()).sum();
        (first - max).exp() / sum
    }
}

/// A reranker's prompt for `query` and `document`: the file's rerank template
/// (`tokenizer.chat_template.rerank`) with `{query}` and `{document}` replaced, special tokens
/// in it recognised and nothing added, as llama.cpp's server formats it; without one, BOS (where
/// the vocabulary adds it), the query, EOS (where the file says `add_eos_token`), the separator
/// (where it says `add_sep_token`), the document and EOS again
/// ([`Tokenizer::pair_marks`]: `<s> q </s></s> d </s>` in XLM-RoBERTa's files, `[CLS] q
/// [SEP] d [SEP]` in BERT's).
pub fn rank_prompt(tok: &Tokenizer, template: Option<&str>, query: &str, document: &str) -> Result<Vec<u32>, ModelError> {
    if let Some(t) = template {
        let text = t.replace("{query}", query).replace("{document}", document);
        return tok.encode(&text, false);
    }
    let marks = tok.pair_marks();
    let mut ids = tok.encode(query, tok.add_bos())?;
    ids.extend(marks.eos);
    ids.extend(marks.sep);
    ids.extend(tok.encode(document, false)?);
    ids.extend(marks.eos);
    Ok(ids)
}

/// A sequence's embedding as its rows arrive.
#[derive(Debug, Clone, PartialEq)]
pub struct Pooled {
    pooling: Pooling,
    len: usize,
    /// The positions pooled so far (`0..next`: a recomputed position is not pooled twice).
    next: usize,
    sum: Vec<f32>,
    /// The row kept ([`Pooling::Cls`], [`Pooling::Last`]).
    kept: Option<Vec<f32>>,
}

impl Pooled {
    /// An empty pool for a prompt of `len` tokens.
    pub fn new(pooling: Pooling, len: usize) -> Self {
        Self {
            pooling,
            len,
            next: 0,
            sum: Vec::new(),
            kept: None,
        }
    }

    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Pools `rows`, the rows of positions `from..` (those [`Pooling::rows`] asked for).
    pub fn push(&mut self, from: usize, rows: &[Vec<f32>]) {
        for (j, row) in rows.iter().enumerate() {
            let p = from + j;
            match self.pooling {
                Pooling::Mean => {
                    // Each position once, in order (a preempted prompt runs its rows again).
                    if p != self.next {
                        continue;
                    }
                    if self.sum.is_empty() {
                        self.sum = vec![0.0; row.len()];
                    }
                    for (s, v) in self.sum.iter_mut().zip(row) {
                        *s += v;
                    }
                    self.next += 1;
                }
                Pooling::Cls if p == 0 => self.kept = Some(row.clone()),
                Pooling::Last if p + 1 == self.len => self.kept = Some(row.clone()),
                Pooling::Cls | Pooling::Last => {}
            }
        }
    }

    /// The embedding, once every row it needs has arrived.
    pub fn finish(&self) -> Option<Vec<f32>> {
        match self.pooling {
            Pooling::Mean if self.next == self.len && self.len > 0 => {
                let n = self.len as f32;
                Some(self.sum.iter().map(|s| s / n).collect())
            }
            Pooling::Mean => None,
            Pooling::Cls | Pooling::Last => self.kept.clone(),
        }
    }
}

/// `v` scaled to unit length (Euclidean), as OpenAI's embeddings are; a zero vector stays zero.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    if norm > 0.0 {
        let inv = (1.0 / norm) as f32;
        v.iter_mut().for_each(|x| *x *= inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(pairs: &[(&str, Value)]) -> HashMap<String, Value> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    #[test]
    fn reads_the_files_pooling_type() {
        assert_eq!(Pooling::read(&md(&[]), "qwen3").unwrap(), None);
        assert_eq!(Pooling::read(&md(&[("qwen3.pooling_type", Value::U32(0))]), "qwen3").unwrap(), None);
        assert_eq!(Pooling::read(&md(&[("qwen3.pooling_type", Value::U32(1))]), "qwen3").unwrap(), Some(Pooling::Mean));
        assert_eq!(Pooling::read(&md(&[("qwen3.pooling_type", Value::U32(2))]), "qwen3").unwrap(), Some(Pooling::Cls));
        assert_eq!(Pooling::read(&md(&[("qwen3.pooling_type", Value::U32(3))]), "qwen3").unwrap(), Some(Pooling::Last));
        // A reranker of Qwen3's is no embedding model; another architecture's is refused.
        assert_eq!(Pooling::read(&md(&[("qwen3.pooling_type", Value::U32(4))]), "qwen3").unwrap(), None);
        let rank = Pooling::read(&md(&[("llama.pooling_type", Value::U32(4))]), "llama").unwrap_err();
        assert!(rank.to_string().contains("rerank"), "{rank}");
        assert!(Pooling::read(&md(&[("qwen3.pooling_type", Value::U32(9))]), "qwen3").is_err());
        // Another architecture's key is not this file's.
        assert_eq!(Pooling::read(&md(&[("llama.pooling_type", Value::U32(1))]), "qwen3").unwrap(), None);
    }

    #[test]
    fn a_rank_file_has_labels_and_scores_by_the_first() {
        let labels = Value::Array(vec![Value::String("yes".into()), Value::String("no".into())]);
        let rank = md(&[("qwen3.pooling_type", Value::U32(4)), ("qwen3.classifier.output_labels", labels)]);
        let head = |md: &HashMap<String, Value>, arch: &str| rank_head(md, arch).unwrap().map(|h| h.labels);
        assert_eq!(head(&rank, "qwen3"), Some(2));
        assert_eq!(head(&md(&[("qwen3.pooling_type", Value::U32(4))]), "qwen3"), Some(1));
        assert_eq!(head(&md(&[("qwen3.pooling_type", Value::U32(3))]), "qwen3"), None);
        // Logits 2 and 0: softmax's first is e²/(e²+1).
        let qwen3 = Classifier {
            dense: None,
            act: HeadAct::Tanh,
            norm: None,
            output: Some(Affine { weights: vec![1.0, 0.0, 0.0, 0.0], bias: None, input_kind: None }),
            softmax: true,
        };
        let s = qwen3.score(&[2.0, 5.0]);
        assert!((s - 0.880_797).abs() < 1e-5, "{s}");
        // A BERT rank file scores too.
        assert_eq!(head(&md(&[("bert.pooling_type", Value::U32(4))]), "bert"), Some(1));
    }

    #[test]
    fn robertas_head_is_dense_tanh_then_the_raw_logit() {
        // dense: [[1, 0], [0, 2]] + [0, 1]; tanh; output [1, -1] + 0.5.
        let roberta = Classifier {
            dense: Some(Affine { weights: vec![1.0, 0.0, 0.0, 2.0], bias: Some(vec![0.0, 1.0]), input_kind: None }),
            act: HeadAct::Tanh,
            norm: None,
            output: Some(Affine { weights: vec![1.0, -1.0], bias: Some(vec![0.5]), input_kind: None }),
            softmax: false,
        };
        let x = [0.3f32, -0.2];
        let want = 0.3f32.tanh() - (2.0f32 * -0.2 + 1.0).tanh() + 0.5;
        assert!((roberta.score(&x) - want).abs() < 1e-6);
        // Without an output projection (jina-reranker-v1's), the dense layer's first output.
        let dense_only = Classifier { output: None, ..roberta };
        assert!((dense_only.score(&x) - 0.3f32.tanh()).abs() < 1e-6);
    }

    #[test]
    fn modern_berts_head_is_dense_gelu_norm_then_the_logit() {
        let rank = |pool: Option<u32>| {
            let mut m = md(&[("modern-bert.pooling_type", Value::U32(4))]);
            if let Some(p) = pool {
                m.insert("modern-bert.classifier.pooling_type".into(), Value::U32(p));
            }
            m
        };
        let head = |m: &HashMap<String, Value>| rank_head(m, "modern-bert").unwrap();
        let mean = RankHead { labels: 1, mean: true, modern: true };
        assert_eq!(head(&rank(Some(1))), Some(mean));
        // cls, or none said: the first row, as llama.cpp.
        assert_eq!(head(&rank(Some(2))), Some(RankHead { mean: false, ..mean }));
        assert_eq!(head(&rank(None)), Some(RankHead { mean: false, ..mean }));
        let bad = rank_head(&rank(Some(7)), "modern-bert").unwrap_err();
        assert!(bad.to_string().contains("modern-bert.classifier.pooling_type"), "{bad}");
        // Another encoder's head is RoBERTa's.
        assert_eq!(rank_head(&md(&[("bert.pooling_type", Value::U32(4))]), "bert").unwrap().map(|h| h.modern), Some(false));

        // dense: identity; GELU; LayerNorm with weight [1, 2] (eps 0); output [1, 1].
        let modern = Classifier {
            dense: Some(Affine { weights: vec![1.0, 0.0, 0.0, 1.0], bias: None, input_kind: None }),
            act: HeadAct::Gelu,
            norm: Some(HeadNorm { weight: vec![1.0, 2.0], eps: 0.0 }),
            output: Some(Affine { weights: vec![1.0, 1.0], bias: Some(vec![0.25]), input_kind: None }),
            softmax: false,
        };
        // GELU(1) ≈ 0.8412 > GELU(−1) ≈ −0.1588: normed to [1, −1], weighted [1, −2].
        assert!((modern.score(&[1.0, -1.0]) - (1.0 - 2.0 + 0.25)).abs() < 1e-5);
        assert!((HeadAct::Gelu.apply(1.0) - 0.841_192).abs() < 1e-5);
    }

    #[test]
    fn a_quantized_weights_input_is_rounded_as_ggml_rounds_it() {
        // Q8_0's form, one block: max 1.27, so d = 0.01 (0.01000213623046875 in f16), each
        // x/d rounded.
        let mut x = vec![0.0f32; 32];
        x[0] = 1.27;
        x[1] = -0.004; // −0.4 steps: 0
        x[2] = 0.506; // 50.6 steps: 51
        let r = round_acts(QuantKind::Q8_0, &x);
        let d = half::f16::from_f32(0.01).to_f32();
        assert_eq!((r[0], r[1], r[2]), (127.0 * d, 0.0, 51.0 * d));
        assert_eq!(round_acts(QuantKind::Q4_1, &x), r, "Q8_1's values are Q8_0's");
        // Blocks are apart: a zero block stays zero, a short last block has its own scale.
        let mut y = vec![0.0f32; 40];
        y[35] = -2.0;
        let r = round_acts(QuantKind::Q5_0, &y);
        assert!(r[..32].iter().all(|v| *v == 0.0));
        assert_eq!(r[35], -127.0 * half::f16::from_f32(2.0 / 127.0).to_f32());

        // Q8_K's, for the K-quants: one scale per 256 values, f32, signed by the value of
        // largest magnitude (d = −2/−127 here), halves rounded to even.
        let mut z = vec![0.0f32; 512];
        z[0] = -2.0;
        z[1] = 2.0 / 127.0 * 2.5; // 2.5 steps: 2
        z[2] = 0.5; // on the scale of all 256, not of its own 32 as Q8_0's
        z[300] = 1.0;
        let r = round_acts(QuantKind::Q4K, &z);
        let d = 1.0 / (-127.0f32 / -2.0);
        assert_eq!((r[0], r[1], r[2]), (-127.0 * d, 2.0 * d, (0.5f32 * (-127.0 / -2.0)).round() * d));
        assert_ne!(r[2], round_acts(QuantKind::Q8_0, &z)[2]);
        assert_eq!(r[300], 1.0, "the second block has its own scale");
        assert_eq!(round_acts(QuantKind::Q6K, &z), r);

        // An affine map of such a weight rounds its input first.
        let w = Affine { weights: x.clone(), bias: None, input_kind: Some(QuantKind::Q8_0) };
        let exact = Affine { input_kind: None, ..w.clone() };
        let input: Vec<f32> = (0..32).map(|i| 0.013 * i as f32).collect();
        let want: f32 = x.iter().zip(round_acts(QuantKind::Q8_0, &input)).map(|(a, b)| a * b).sum();
        assert_eq!(w.apply(&input), vec![want]);
        assert_ne!(exact.apply(&input), vec![want]);
    }

    #[test]
    fn bidirectional_attention_is_refused_but_in_an_encoder() {
        let e = Pooling::read(&md(&[("qwen2.attention.causal", Value::Bool(false))]), "qwen2").unwrap_err();
        assert!(e.to_string().contains("qwen2.attention.causal"), "{e}");
        assert!(Pooling::read(&md(&[("qwen2.attention.causal", Value::Bool(true))]), "qwen2").is_ok());
        // An encoder's bidirectional attention is its own.
        let bert = md(&[("bert.attention.causal", Value::Bool(false)), ("bert.pooling_type", Value::U32(2))]);
        assert_eq!(Pooling::read(&bert, "bert").unwrap(), Some(Pooling::Cls));
    }

    #[test]
    fn each_pooling_asks_for_its_rows() {
        assert_eq!(Pooling::Mean.rows(4, 3, 10), 0..3);
        assert_eq!(Pooling::Cls.rows(0, 3, 10), 0..1);
        assert_eq!(Pooling::Cls.rows(3, 3, 10), 0..0);
        assert_eq!(Pooling::Last.rows(4, 3, 10), 0..0);
        assert_eq!(Pooling::Last.rows(7, 3, 10), 2..3);
    }

    #[test]
    fn pools_each_position_once() {
        let rows: Vec<Vec<f32>> = (0..4).map(|i| vec![i as f32, 1.0]).collect();
        let mut mean = Pooled::new(Pooling::Mean, 4);
        mean.push(0, &rows[..2]);
        assert_eq!(mean.finish(), None);
        // A preempted prompt runs positions 0..3 again: 0 and 1 are not counted twice.
        mean.push(0, &rows[..3]);
        mean.push(3, &rows[3..]);
        assert_eq!(mean.finish(), Some(vec![1.5, 1.0]));

        let mut cls = Pooled::new(Pooling::Cls, 4);
        cls.push(0, &rows[..1]);
        assert_eq!(cls.finish(), Some(vec![0.0, 1.0]));
        let mut last = Pooled::new(Pooling::Last, 4);
        last.push(2, &rows[2..3]);
        assert_eq!(last.finish(), None);
        last.push(3, &rows[3..]);
        assert_eq!(last.finish(), Some(vec![3.0, 1.0]));
    }

    #[test]
    fn normalizes_to_unit_length() {
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        let mut z = vec![0.0, 0.0];
        normalize(&mut z);
        assert_eq!(z, vec![0.0, 0.0]);
    }
}
