//! Gemma 4's tokenizer (`tokenizer.ggml.model = "gemma4"`) built from GGUF metadata:
//! SentencePiece-style pieces (`▁` for a space, no space prefix) merged by BPE with the file's
//! merges in order, `<0xNN>` byte fallback for what no piece covers.
//!
//! Pipeline, as llama.cpp's `LLAMA_VOCAB_PRE_TYPE_GEMMA4`: spaces become `▁`; the text splits
//! into runs of newlines and runs of anything else (`[^\n]+|[\n]+`); each run is merged by
//! rank, and a run that is itself a token is taken whole (llama.cpp does so for newline runs,
//! which its merges do not build; here every run, which for the rest gives what the merges
//! give); a piece without a token becomes its bytes' `<0xNN>` tokens. Decoding maps `▁` back to
//! a space and byte tokens to their bytes.
//!
//! Counterpart: llama.cpp's `llm_tokenizer_bpe_session` with `byte_encode = false` and
//! `escape_whitespaces` (`src/llama-vocab.cpp`); Gemma 4's published `tokenizer.json`.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::SplitDelimiterBehavior;

use super::metadata::{self, GgufVocab};
use super::{special, token_vocab};
use crate::model::ModelError;

/// SentencePiece's visible space.
const SPACE: &str = "▁";

pub(super) fn build(v: &GgufVocab) -> Result<tokenizers::Tokenizer, ModelError> {
    let raw = v.merges.as_ref().ok_or_else(|| ModelError::MissingMetadata {
        key: metadata::MERGES.to_string(),
    })?;
    let merges = super::gguf_bpe::parse_merges(raw)?;
    let vocab = token_vocab(&v.tokens);
    super::gguf_spm::check_byte_tokens(&vocab, "gemma4")?;
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .ignore_merges(true);
    if let Some(unk) = v.special.unk.and_then(|id| v.tokens.get(id as usize)) {
        builder = builder.unk_token(unk.clone());
    }
    let bpe = builder
        .build()
        .map_err(|e| ModelError::Tokenizer(format!("cannot build Gemma 4's BPE model: {e}")))?;
    let tok_err = |what: &str, e: tokenizers::Error| ModelError::Tokenizer(format!("cannot build {what}: {e}"));
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_normalizer(Some(Replace::new(" ", SPACE).map_err(|e| tok_err("Replace(\" \", \"▁\")", e))?))
        .map_err(|e| tok_err("the normalizer", e))?;
    let runs = Split::new(SplitPattern::Regex("\n+".into()), SplitDelimiterBehavior::Isolated, false)
        .map_err(|e| tok_err("the newline split", e))?;
    tok.with_pre_tokenizer(Some(runs));
    tok.with_decoder(Some(DecoderSequence::new(vec![
        Replace::new(SPACE, " ").map_err(|e| tok_err("Replace(\"▁\", \" \")", e))?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ])));
    tok.add_tokens(special::gguf_added_tokens(v))
        .map_err(|e| ModelError::Tokenizer(format!("cannot add the special tokens: {e}")))?;
    Ok(tok)
}
