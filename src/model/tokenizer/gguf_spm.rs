//! A SentencePiece-style BPE tokenizer (`tokenizer.ggml.model = "llama"`)
//! built from GGUF metadata: Llama 1/2, Mistral, TinyLlama and the like.
//!
//! Built the way HF's `LlamaConverter` writes a legacy Llama `tokenizer.json`:
//! normalizer `Prepend("▁")` (when `add_space_prefix`, default true) then
//! `Replace(" ", "▁")`; no pre-tokenizer; BPE with `byte_fallback` and the
//! unknown token; decoder `Replace("▁", " ")`, `ByteFallback`, `Fuse`,
//! `Strip(" ", 1, 0)` (the strip only with the space prefix).
//!
//! GGUF stores scores, not merges, so the merges are derived as HF's
//! `generate_merges` does: every split of a token into two pieces that are
//! both tokens is a merge, ranked by the merged token's score (higher first),
//! then longer left piece, longer right piece, merged id, left id, right id.
//! This is O(V · token length). The 256 byte tokens `<0xNN>` must exist.
//!
//! Counterpart: llama.cpp's `llm_tokenizer_spm` (greedy highest-score bigram
//! merges, byte fallback) in `src/llama-vocab.cpp`; HF's `LlamaConverter` and
//! `SentencePieceExtractor` in `convert_slow_tokenizer.py`.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Merges, Vocab, BPE};
use tokenizers::normalizers::prepend::Prepend;
use tokenizers::normalizers::replace::Replace;
use tokenizers::normalizers::utils::Sequence as NormalizerSequence;

use super::metadata::{self, GgufVocab};
use super::{special, token_vocab};
use crate::model::ModelError;

/// SentencePiece's visible space.
const SPACE: &str = "▁";

pub(super) fn build(v: &GgufVocab) -> Result<tokenizers::Tokenizer, ModelError> {
    let scores = v.scores.as_ref().ok_or_else(|| ModelError::MissingMetadata {
        key: metadata::SCORES.to_string(),
    })?;
    let vocab = token_vocab(&v.tokens);
    check_byte_tokens(&vocab, "llama")?;
    let merges = merges_from_scores(&v.tokens, scores, &vocab);
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = v.special.unk.and_then(|id| v.tokens.get(id as usize)) {
        builder = builder.unk_token(unk.clone());
    }
    let bpe = builder
        .build()
        .map_err(|e| ModelError::Tokenizer(format!("cannot build the SentencePiece BPE model: {e}")))?;

    let add_space_prefix = v.add_space_prefix.unwrap_or(true);
    let replace = |from: &str, to: &str| {
        Replace::new(from, to)
            .map_err(|e| ModelError::Tokenizer(format!("cannot build Replace({from:?}, {to:?}): {e}")))
    };
    let mut normalizers = Vec::new();
    if add_space_prefix {
        normalizers.push(Prepend::new(SPACE.to_string()).into());
    }
    normalizers.push(replace(" ", SPACE)?.into());
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_normalizer(Some(NormalizerSequence::new(normalizers)))
        .map_err(|e| ModelError::Tokenizer(format!("cannot set the normalizer: {e}")))?;
    tok.with_decoder(Some(decoder(add_space_prefix)?));
    tok.add_tokens(special::gguf_added_tokens(v))
        .map_err(|e| ModelError::Tokenizer(format!("cannot add the special tokens: {e}")))?;
    Ok(tok)
}

/// SentencePiece's decoder: `▁` back to a space, byte tokens to their bytes, the pieces
/// joined, and the space before the first word dropped where the normalizer added one.
pub(super) fn decoder(add_space_prefix: bool) -> Result<DecoderWrapper, ModelError> {
    let replace = Replace::new(SPACE, " ")
        .map_err(|e| ModelError::Tokenizer(format!("cannot build Replace({SPACE:?}, \" \"): {e}")))?;
    let mut decoders: Vec<DecoderWrapper> = vec![replace.into(), ByteFallback::new().into(), Fuse::new().into()];
    if add_space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    Ok(DecoderSequence::new(decoders).into())
}

/// Byte fallback needs every `<0xNN>` token: an error naming the first missing one in `kind`'s
/// vocabulary.
pub(super) fn check_byte_tokens(vocab: &Vocab, kind: &str) -> Result<(), ModelError> {
    match (0..=255u8).find(|b| !vocab.contains_key(&format!("<0x{b:02X}>"))) {
        Some(b) => Err(ModelError::Tokenizer(format!(
            "{kind} vocabulary has no byte token <0x{b:02X}>; byte fallback needs all 256 of <0x00>..<0xFF>"
        ))),
        None => Ok(()),
    }
}

/// HF's `generate_merges(vocab, vocab_scores)` for a SentencePiece BPE model.
///
/// `vocab` maps each text to the id BPE will use for it; a token whose id is
/// not that one (a duplicate text) contributes no merges.
pub(crate) fn merges_from_scores(tokens: &[String], scores: &[f32], vocab: &Vocab) -> Merges {
    struct Candidate {
        score: f32,
        len_left: usize,
        len_right: usize,
        merged: u32,
        left: u32,
        right: u32,
        split: usize,
    }
    let mut cands = Vec::new();
    for (id, text) in tokens.iter().enumerate() {
        let id = id as u32;
        if vocab.get(text) != Some(&id) {
            continue;
        }
        let n_chars = text.chars().count();
        for (n_left, (split, _)) in text.char_indices().enumerate().skip(1) {
            let (l, r) = text.split_at(split);
            if let (Some(&left), Some(&right)) = (vocab.get(l), vocab.get(r)) {
                cands.push(Candidate {
                    score: scores.get(id as usize).copied().unwrap_or(0.0),
                    len_left: n_left,
                    len_right: n_chars - n_left,
                    merged: id,
                    left,
                    right,
                    split,
                });
            }
        }
    }
    cands.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.len_left.cmp(&a.len_left))
            .then(b.len_right.cmp(&a.len_right))
            .then(a.merged.cmp(&b.merged))
            .then(a.left.cmp(&b.left))
            .then(a.right.cmp(&b.right))
    });
    cands
        .into_iter()
        .map(|c| {
            let (l, r) = tokens[c.merged as usize].split_at(c.split);
            (l.to_string(), r.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn merges_follow_score_then_length_then_id() {
        let tokens = strs(&["a", "b", "c", "ab", "bc", "abc", "▁", "▁a"]);
        let scores = [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, 0.0, -1.0];
        let vocab = token_vocab(&tokens);
        let merges = merges_from_scores(&tokens, &scores, &vocab);
        let pairs: Vec<(&str, &str)> = merges.iter().map(|(l, r)| (l.as_str(), r.as_str())).collect();
        // "ab" and "▁a" tie on score and lengths: lower merged id first.
        // "abc" has two splits of equal score: the longer left piece first.
        assert_eq!(
            pairs,
            vec![("a", "b"), ("▁", "a"), ("b", "c"), ("ab", "c"), ("a", "bc")]
        );
    }

    #[test]
    fn merges_of_a_large_vocab_are_fast() {
        let tokens: Vec<String> = (0..60_000u32)
            .map(|i| format!("▁t{i}"))
            .chain((0..10).map(|d| d.to_string()))
            .collect();
        let scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32)).collect();
        let vocab = token_vocab(&tokens);
        let start = std::time::Instant::now();
        let merges = merges_from_scores(&tokens, &scores, &vocab);
        assert!(merges.len() > 50_000, "{}", merges.len());
        assert!(start.elapsed().as_secs() < 5, "took {:?}", start.elapsed());
    }
}
