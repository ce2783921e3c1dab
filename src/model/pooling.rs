//! Sentence embeddings: how a sequence's final hidden states become one vector.
//!
//! Owns: reading [`Pooling`] from a file (`{arch}.pooling_type`: mean, first token or last token),
//! [`Pooled`] (a sequence's running pool, fed the rows of its chunks as they are computed, each
//! position once however often it is recomputed), and [`normalize`] (OpenAI's unit-length
//! vectors). The rows pooled are the final norm's output, before the output projection: llama.cpp's
//! `t_embd`, which its `build_pooling` pools the same three ways.
//!
//! Also a reranker's pieces: its labels ([`rank_labels`]), head ([`Classifier`]) and prompt
//! ([`rank_prompt`]).
//!
//! Invariants: a file's pooling type is read at load and one hearth cannot honour (rank outside
//! [`RANK_ARCHS`], an unknown type) is refused then; a file with bidirectional attention
//! (`{arch}.attention.causal` false) is refused too unless it is one of the encoders hearth runs
//! ([`BIDIRECTIONAL_ARCHS`]: BERT's, nomic-embed-text's and EmbeddingGemma's, which read their
//! whole input at once; a BERT rank file, a cross-encoder, scores its first row);
//! a pooled vector is the same whether its prefix came from the cache or was computed (for
//! [`Pooling::Last`], the only one that reads the cache, the last row always runs).
//!
//! Counterpart: vLLM's `Pooler` (`MeanPool`, `CLSPool`, `LastPool`) and llama.cpp's
//! `llama_pooling_type`.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use super::gguf::{md_opt_bool, md_opt_usize};
use super::hparams::BIDIRECTIONAL_ARCHS;
use super::tokenizer::Tokenizer;
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
            // A reranker: not an embedding model ([`rank_labels`]).
            Some(4) if RANK_ARCHS.contains(&arch) => Ok(None),
            Some(4) => Err(ModelError::BadMetadata {
                key,
                reason: format!("pooling type rank (a reranker's classifier head) is supported for {} files only", RANK_ARCHS.join(" and ")),
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
/// layer and tanh where the file has one, then `cls_out`, its first output the score); and
/// jina-reranker-v1's (`jina-bert-v2`: the first token through `cls`'s one row and tanh).
const RANK_ARCHS: [&str; 4] = ["qwen3", "qwen3vl", "bert", "jina-bert-v2"];

/// The name of a rank file's classifier head: `[labels, hidden]`.
pub const CLASSIFIER: &str = "cls.output.weight";
/// Its bias, where the file has one (`[labels]`).
pub const CLASSIFIER_BIAS: &str = "cls.output.bias";
/// RoBERTa's classifier's dense layer before it (`[hidden, hidden]`), and its bias.
pub const CLASSIFIER_DENSE: &str = "cls.weight";
pub const CLASSIFIER_DENSE_BIAS: &str = "cls.bias";

/// A reranker's labels (`{arch}.classifier.output_labels`, Qwen3-Reranker's "yes" and "no";
/// one where the file lists none): `Some(count)` for a rank file (`pooling_type` 4) of
/// [`RANK_ARCHS`], `None` for any other file.
pub fn rank_labels(md: &HashMap<String, Value>, arch: &str) -> Result<Option<usize>, ModelError> {
    if !RANK_ARCHS.contains(&arch) || md_opt_usize(md, &format!("{arch}.pooling_type"))? != Some(4) {
        return Ok(None);
    }
    let key = format!("{arch}.classifier.output_labels");
    Ok(Some(match md.get(&key) {
        None => 1,
        Some(Value::Array(labels)) if !labels.is_empty() => labels.len(),
        Some(_) => {
            return Err(ModelError::BadMetadata {
                key,
                reason: "must be a non-empty list of labels".into(),
            })
        }
    }))
}

/// A reranker's classifier head, in f32 on the host, as llama.cpp's `build_pooling` applies it
/// to the pooled row: RoBERTa's dense layer and tanh where the file has one, the output
/// projection where it has one, a softmax for Qwen3-Reranker; the score is the first output
/// (Qwen3-Reranker's "yes" probability, a cross-encoder's logit), as llama.cpp's server scores.
#[derive(Debug, Clone, PartialEq)]
pub struct Classifier {
    /// `cls.weight` (`[hidden, hidden]` row-major; jina-reranker-v1's one row) and `cls.bias`.
    pub dense: Option<Affine>,
    /// `cls.output.weight` (`[labels, in]` row-major) and `cls.output.bias`.
    pub output: Option<Affine>,
    /// A softmax over the outputs (Qwen3-Reranker's).
    pub softmax: bool,
}

/// `x ↦ W·x + b`: `weights` row-major, one row per output.
#[derive(Debug, Clone, PartialEq)]
pub struct Affine {
    pub weights: Vec<f32>,
    pub bias: Option<Vec<f32>>,
}

impl Affine {
    /// `W·x + b`.
    pub fn apply(&self, x: &[f32]) -> Vec<f32> {
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
            x = dense.apply(&x).into_iter().map(f32::tanh).collect();
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
        assert_eq!(rank_labels(&rank, "qwen3").unwrap(), Some(2));
        assert_eq!(rank_labels(&md(&[("qwen3.pooling_type", Value::U32(4))]), "qwen3").unwrap(), Some(1));
        assert_eq!(rank_labels(&md(&[("qwen3.pooling_type", Value::U32(3))]), "qwen3").unwrap(), None);
        // Logits 2 and 0: softmax's first is e²/(e²+1).
        let qwen3 = Classifier {
            dense: None,
            output: Some(Affine { weights: vec![1.0, 0.0, 0.0, 0.0], bias: None }),
            softmax: true,
        };
        let s = qwen3.score(&[2.0, 5.0]);
        assert!((s - 0.880_797).abs() < 1e-5, "{s}");
        // A BERT rank file scores too.
        assert_eq!(rank_labels(&md(&[("bert.pooling_type", Value::U32(4))]), "bert").unwrap(), Some(1));
    }

    #[test]
    fn robertas_head_is_dense_tanh_then_the_raw_logit() {
        // dense: [[1, 0], [0, 2]] + [0, 1]; tanh; output [1, -1] + 0.5.
        let roberta = Classifier {
            dense: Some(Affine { weights: vec![1.0, 0.0, 0.0, 2.0], bias: Some(vec![0.0, 1.0]) }),
            output: Some(Affine { weights: vec![1.0, -1.0], bias: Some(vec![0.5]) }),
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
