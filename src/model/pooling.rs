//! Sentence embeddings: how a sequence's final hidden states become one vector.
//!
//! Owns: reading [`Pooling`] from a file (`{arch}.pooling_type`: mean, first token or last token),
//! [`Pooled`] (a sequence's running pool, fed the rows of its chunks as they are computed, each
//! position once however often it is recomputed), and [`normalize`] (OpenAI's unit-length
//! vectors). The rows pooled are the final norm's output, before the output projection: llama.cpp's
//! `t_embd`, which its `build_pooling` pools the same three ways.
//!
//! Invariants: a file's pooling type is read at load and one hearth cannot honour (rank, a
//! reranker's classifier head) is refused then; a file with bidirectional attention
//! (`{arch}.attention.causal` false) is refused too, since every layer here attends causally;
//! a pooled vector is the same whether its prefix came from the cache or was computed (for
//! [`Pooling::Last`], the only one that reads the cache, the last row always runs).
//!
//! Counterpart: vLLM's `Pooler` (`MeanPool`, `CLSPool`, `LastPool`) and llama.cpp's
//! `llama_pooling_type`.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use super::gguf::{md_opt_bool, md_opt_usize};
use super::ModelError;

/// Declared in `config` (the settings name it too, `server.pooling`); its reading from a file
/// and what it needs of the forward are here.
pub use crate::config::Pooling;

impl Pooling {
    /// The file's pooling type, `{arch}.pooling_type` (llama.cpp's numbering: 0 none, 1 mean,
    /// 2 cls, 3 last, 4 rank); `None` where it is absent or none (a generative model). A rank
    /// file (a reranker's classifier head) and a file whose attention is bidirectional are
    /// refused.
    pub fn read(md: &HashMap<String, Value>, arch: &str) -> Result<Option<Self>, ModelError> {
        let causal = format!("{arch}.attention.causal");
        if md_opt_bool(md, &causal)? == Some(false) {
            return Err(ModelError::BadMetadata {
                key: causal,
                reason: "bidirectional attention (an encoder or diffusion model) is not supported: every layer here attends causally".into(),
            });
        }
        let key = format!("{arch}.pooling_type");
        match md_opt_usize(md, &key)? {
            None | Some(0) => Ok(None),
            Some(1) => Ok(Some(Self::Mean)),
            Some(2) => Ok(Some(Self::Cls)),
            Some(3) => Ok(Some(Self::Last)),
            Some(4) => Err(ModelError::BadMetadata {
                key,
                reason: "pooling type rank (a reranker's classifier head) is not supported".into(),
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
        let rank = Pooling::read(&md(&[("qwen3.pooling_type", Value::U32(4))]), "qwen3").unwrap_err();
        assert!(rank.to_string().contains("rerank"), "{rank}");
        assert!(Pooling::read(&md(&[("qwen3.pooling_type", Value::U32(9))]), "qwen3").is_err());
        // Another architecture's key is not this file's.
        assert_eq!(Pooling::read(&md(&[("llama.pooling_type", Value::U32(1))]), "qwen3").unwrap(), None);
    }

    #[test]
    fn bidirectional_attention_is_refused() {
        let e = Pooling::read(&md(&[("qwen2.attention.causal", Value::Bool(false))]), "qwen2").unwrap_err();
        assert!(e.to_string().contains("qwen2.attention.causal"), "{e}");
        assert!(Pooling::read(&md(&[("qwen2.attention.causal", Value::Bool(true))]), "qwen2").is_ok());
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
