//! A byte-level BPE tokenizer (`tokenizer.ggml.model = "gpt2"`) built from
//! GGUF metadata: Llama 3, Qwen2, GPT-2, SmolLM and their relatives.
//!
//! Pipeline (as in those models' `tokenizer.json`): optional normalizer and
//! pre-tokenizer per [`PreKind`], BPE over the byte-level alphabet with the
//! file's merges in order (rank = position), ByteLevel decoder. Every token of
//! the GGUF list is in the BPE vocabulary at its own id; control and
//! user-defined tokens are also added tokens (see [`super::special`]).
//!
//! Counterpart: llama.cpp's `llm_tokenizer_bpe` (`src/llama-vocab.cpp`); HF's
//! `GPT2Converter` / `Qwen2Converter` in `convert_slow_tokenizer.py`.

use tokenizers::models::bpe::{Merges, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

use super::metadata::{self, GgufVocab};
use super::pretokenizers::PreKind;
use super::{special, token_vocab};
use crate::model::ModelError;

pub(super) fn build(v: &GgufVocab) -> Result<tokenizers::Tokenizer, ModelError> {
    let kind = PreKind::from_gguf(v.pre.as_deref());
    let raw = v.merges.as_ref().ok_or_else(|| ModelError::MissingMetadata {
        key: metadata::MERGES.to_string(),
    })?;
    let merges = parse_merges(raw)?;
    let bpe = BPE::builder()
        .vocab_and_merges(token_vocab(&v.tokens), merges)
        .ignore_merges(kind.ignore_merges())
        .build()
        .map_err(|e| ModelError::Tokenizer(format!("cannot build the BPE model from {}: {e}", metadata::MERGES)))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_normalizer(kind.normalizer())
        .map_err(|e| ModelError::Tokenizer(format!("cannot set the normalizer: {e}")))?;
    tok.with_pre_tokenizer(Some(kind.pre_tokenizer()?));
    tok.with_decoder(Some(ByteLevel::default()));
    tok.add_tokens(special::gguf_added_tokens(v))
        .map_err(|e| ModelError::Tokenizer(format!("cannot add the special tokens: {e}")))?;
    Ok(tok)
}

/// `"left right"` strings into pairs. Byte-level tokens never hold a plain
/// space (it is `Ġ`; in Gemma 4's, `▁`), so the first space separates the two halves.
pub(super) fn parse_merges(raw: &[String]) -> Result<Merges, ModelError> {
    raw.iter()
        .enumerate()
        .map(|(i, m)| match m.split_once(' ') {
            Some((l, r)) if !l.is_empty() && !r.is_empty() => Ok((l.to_string(), r.to_string())),
            _ => Err(metadata::bad(
                metadata::MERGES,
                format!("entry {i} ({m:?}) is not two tokens separated by a space"),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_parse_or_name_the_bad_entry() {
        let ok = parse_merges(&["Ġ t".to_string(), "a bc".to_string()]).unwrap();
        assert_eq!(
            ok,
            vec![("Ġ".to_string(), "t".to_string()), ("a".to_string(), "bc".to_string())]
        );
        let err = parse_merges(&["ab".to_string()]).unwrap_err();
        assert!(err.to_string().contains("entry 0"), "{err}");
    }
}
