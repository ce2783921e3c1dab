//! BERT's WordPiece tokenizer (`tokenizer.ggml.model = "bert"`) built from GGUF metadata:
//! the vocabulary of BERT, MiniLM, BGE, nomic-embed-text and the other encoder embedding
//! models llama.cpp converts.
//!
//! llama.cpp's converter writes each WordPiece token in "phantom space" form: a word-initial
//! piece gains `▁` (`the` → `▁the`), a continuation loses its `##` (`##ing` → `ing`), control
//! tokens (`[CLS]`, `[SEP]`, `[UNK]`, `[PAD]`, `[MASK]`) stay as they are. This module undoes
//! that and builds Hugging Face's BERT pipeline over the original pieces: `BertNormalizer`
//! (control characters dropped, whitespace made spaces, CJK characters split apart, accents
//! stripped after NFD and text lowercased as the file's `tokenizer.ggml.normalizer.lowercase`
//! and `strip_accents` say, both by default, as llama.cpp), `BertPreTokenizer` (split at
//! whitespace and at each punctuation mark), greedy longest-match `WordPiece` with `[UNK]` for a
//! word it cannot cover, and the WordPiece decoder.
//!
//! Every encoding is `[CLS] … [SEP]` where the caller asks for special tokens: llama.cpp adds
//! both to every WPM encoding with special tokens (the BOS id, else 101, and the separator,
//! `tokenizer.ggml.seperator_token_id`, else 102), whatever `add_bos_token` says.
//!
//! Counterpart: llama.cpp's `llm_tokenizer_wpm_session` (`preprocess`, then the longest
//! vocabulary match at each byte of `▁word`) in `src/llama-vocab.cpp`; HF's `BertConverter`.

use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::bpe::Vocab;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;

use super::metadata::GgufVocab;
use super::special::{self, Specials, TokenType};
use crate::model::ModelError;

/// The mark llama.cpp's converter puts before a word-initial piece.
const PHANTOM_SPACE: char = '▁';
/// HF's mark of a continuation piece.
const CONTINUATION: &str = "##";
/// llama.cpp's default ids of BERT's `[CLS]`, `[UNK]` and `[SEP]`, used where the file names none.
const DEFAULT_CLS: u32 = 101;
const DEFAULT_UNK: u32 = 100;
const DEFAULT_SEP: u32 = 102;

/// The piece HF's WordPiece knows for the GGUF token `text` of type `ty`.
fn original_piece(text: &str, ty: TokenType) -> String {
    match (ty, text.strip_prefix(PHANTOM_SPACE)) {
        (TokenType::Control, _) => text.to_owned(),
        (_, Some(word_start)) => word_start.to_owned(),
        (_, None) => format!("{CONTINUATION}{text}"),
    }
}

/// `id` where the vocabulary of `n` tokens has it.
fn in_vocab(id: u32, n: usize) -> Option<u32> {
    ((id as usize) < n).then_some(id)
}

pub(super) fn build(v: &GgufVocab) -> Result<tokenizers::Tokenizer, ModelError> {
    let n = v.tokens.len();
    let mut vocab = Vocab::with_capacity(n);
    for (id, (text, &ty)) in v.tokens.iter().zip(&v.types).enumerate() {
        let piece = original_piece(text, ty);
        if !piece.is_empty() && piece != CONTINUATION {
            vocab.entry(piece).or_insert(id as u32);
        }
    }
    let unk = v
        .special
        .unk
        .or_else(|| in_vocab(DEFAULT_UNK, n))
        .and_then(|id| v.tokens.get(id as usize))
        .ok_or_else(|| ModelError::Tokenizer("the WordPiece vocabulary has no unknown token".into()))?;
    let wordpiece = WordPiece::builder()
        .vocab(vocab)
        .unk_token(unk.clone())
        .continuing_subword_prefix(CONTINUATION.into())
        // llama.cpp matches words of any length.
        .max_input_chars_per_word(usize::MAX)
        .build()
        .map_err(|e| ModelError::Tokenizer(format!("cannot build the WordPiece model: {e}")))?;
    let lowercase = v.normalizer_lowercase.unwrap_or(true);
    let strip_accents = v.normalizer_strip_accents.unwrap_or(lowercase);
    let mut tok = tokenizers::Tokenizer::new(wordpiece);
    tok.with_normalizer(Some(BertNormalizer::new(true, true, Some(strip_accents), lowercase)))
        .map_err(|e| ModelError::Tokenizer(format!("cannot set the normalizer: {e}")))?;
    tok.with_pre_tokenizer(Some(BertPreTokenizer));
    tok.with_decoder(Some(WordPieceDecoder::new(CONTINUATION.into(), true)));
    tok.add_tokens(special::gguf_added_tokens(v))
        .map_err(|e| ModelError::Tokenizer(format!("cannot add the special tokens: {e}")))?;
    Ok(tok)
}

/// BERT's special-token facts: `[CLS]` as BOS and `[SEP]` as EOS, both added to every
/// encoding with special tokens (an embedding's input), as llama.cpp adds them.
pub(super) fn specials(v: &GgufVocab, s: &mut Specials) {
    let n = v.tokens.len();
    s.bos = v.special.bos.or_else(|| in_vocab(DEFAULT_CLS, n));
    s.eos = v.special.sep.or_else(|| in_vocab(DEFAULT_SEP, n));
    s.add_bos = s.bos.is_some();
    s.add_eos = s.eos.is_some();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phantom_space_pieces_map_back_to_word_piece() {
        assert_eq!(original_piece("▁the", TokenType::Normal), "the");
        assert_eq!(original_piece("ing", TokenType::Normal), "##ing");
        assert_eq!(original_piece("[CLS]", TokenType::Control), "[CLS]");
        // A word-initial piece that is itself the mark's text keeps nothing.
        assert_eq!(original_piece("▁", TokenType::Normal), "");
    }
}
