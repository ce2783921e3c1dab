//! A tiny SentencePiece Unigram vocabulary as llama.cpp's converter writes XLM-RoBERTa's
//! (bge-m3's, multilingual-e5's): `tokenizer.ggml.model = "t5"`, `<s> <pad> </s> <unk>` first,
//! SentencePiece's pieces one id later than in its own model (the fairseq offset), an unused
//! `[PAD…]` token last, the scores, the normalizer's flags and its `precompiled_charsmap`.
//!
//! Unlike the other styles, the pieces are not trained here: SentencePiece trained them on
//! [`TRAINING_TEXT`] with a small rule table of its own, and compiled the table into the
//! charsmap (`scripts/make-unigram-fixture.py` wrote `unigram.json`, with SentencePiece's ids
//! for some texts, which the tokenizer's tests compare with hearth's).

use candle_core::quantized::gguf_file::Value;
use serde::Deserialize;

#[cfg(doc)]
use super::TRAINING_TEXT;
use super::{floats, ints, kv, strings, TinyVocab, VocabStyle, FILLER_CLOSE, FILLER_OPEN};

/// The fixture: SentencePiece's model, in its own ids.
#[derive(Debug, Clone, Deserialize)]
pub struct UnigramFixture {
    pub pieces: Vec<String>,
    pub scores: Vec<f32>,
    /// "normal", "unknown", "control", "unused" or "byte".
    pub kinds: Vec<String>,
    pub add_dummy_prefix: bool,
    pub remove_extra_whitespaces: bool,
    /// Base64 of the charsmap's bytes.
    pub precompiled_charsmap: String,
    pub texts: Vec<FixtureText>,
}

/// A text and SentencePiece's ids for it (its own ids; [`UnigramFixture::gguf_id`] maps them).
#[derive(Debug, Clone, Deserialize)]
pub struct FixtureText {
    pub text: String,
    pub sentencepiece_ids: Vec<u32>,
}

impl UnigramFixture {
    pub fn load() -> Self {
        serde_json::from_str(include_str!("unigram.json")).expect("unigram.json is the fixture script's JSON")
    }

    /// The GGUF id of SentencePiece's id `id`: `<unk>` (0) → 3, `<s>` (1) → 0, `</s>` (2) → 2,
    /// a piece one later (XLM-RoBERTa's ids, as its converter lays them out).
    pub fn gguf_id(id: u32) -> u32 {
        match id {
            0 => 3,
            1 => 0,
            2 => 2,
            n => n + 1,
        }
    }

    pub fn charsmap(&self) -> Vec<u8> {
        base64_decode(&self.precompiled_charsmap)
    }
}

/// The vocabulary (padded with unreachable fillers to `size`, if larger), in llama.cpp's
/// converter's layout.
pub(super) fn unigram(size: usize) -> TinyVocab {
    let f = UnigramFixture::load();
    let code = |kind: &str| match kind {
        "unknown" => 2,
        "control" => 3,
        "unused" => 5,
        "byte" => 6,
        _ => 1,
    };
    let mut tokens: Vec<String> = ["<s>", "<pad>", "</s>", "<unk>"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut scores = vec![0.0f32; 4];
    let mut types = vec![3i32, 3, 3, 2];
    for i in 3..f.pieces.len() {
        tokens.push(f.pieces[i].clone());
        scores.push(f.scores[i]);
        types.push(code(&f.kinds[i]));
    }
    // The converter's vocabulary is the model config's size (XLM-RoBERTa's: SentencePiece's and
    // 2); what SentencePiece leaves out is `[PAD<id>]`, unused, scored -10000.
    let n_fillers = size.saturating_sub(tokens.len() + 1);
    for i in 0..n_fillers {
        tokens.push(format!("▁{FILLER_OPEN}filler{i}{FILLER_CLOSE}"));
        scores.push(-1000.0);
        types.push(1);
    }
    tokens.push(format!("[PAD{}]", tokens.len()));
    scores.push(-10000.0);
    types.push(5);
    let metadata = vec![
        kv("tokenizer.ggml.model", Value::String("t5".into())),
        kv("tokenizer.ggml.pre", Value::String("default".into())),
        kv("tokenizer.ggml.tokens", strings(&tokens)),
        kv("tokenizer.ggml.scores", floats(&scores)),
        kv("tokenizer.ggml.token_type", ints(&types)),
        kv("tokenizer.ggml.add_space_prefix", Value::Bool(f.add_dummy_prefix)),
        kv("tokenizer.ggml.token_type_count", Value::U32(1)),
        kv(
            "tokenizer.ggml.remove_extra_whitespaces",
            Value::Bool(f.remove_extra_whitespaces),
        ),
        kv(
            "tokenizer.ggml.precompiled_charsmap",
            Value::Array(f.charsmap().into_iter().map(Value::U8).collect()),
        ),
        kv("tokenizer.ggml.bos_token_id", Value::U32(0)),
        kv("tokenizer.ggml.eos_token_id", Value::U32(2)),
        kv("tokenizer.ggml.unknown_token_id", Value::U32(3)),
        kv("tokenizer.ggml.seperator_token_id", Value::U32(2)),
        kv("tokenizer.ggml.padding_token_id", Value::U32(1)),
        kv("tokenizer.ggml.cls_token_id", Value::U32(0)),
        kv("tokenizer.ggml.add_bos_token", Value::Bool(true)),
        kv("tokenizer.ggml.add_eos_token", Value::Bool(true)),
        kv("tokenizer.ggml.add_sep_token", Value::Bool(true)),
    ];
    TinyVocab {
        style: VocabStyle::Unigram,
        metadata,
        tokenizer_json: String::new(),
        size: tokens.len(),
    }
}

/// Standard base64 (with `=` padding) to bytes; characters outside the alphabet are skipped.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let digits: Vec<u32> = text.bytes().filter_map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let mut acc = 0u32;
        for (i, &d) in chunk.iter().enumerate() {
            acc |= d << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(base64_decode("aGVsbG8="), b"hello");
        assert_eq!(base64_decode("aGk="), b"hi");
        assert_eq!(base64_decode("aGV5"), b"hey");
        assert_eq!(base64_decode(""), b"");
    }

    #[test]
    fn layout_is_the_converters() {
        let v = unigram(0);
        let f = UnigramFixture::load();
        assert_eq!(v.size, f.pieces.len() + 2);
        let toks = match &v.metadata.iter().find(|(k, _)| k == "tokenizer.ggml.tokens").unwrap().1 {
            Value::Array(a) => a.iter().map(|t| t.to_string().unwrap().clone()).collect::<Vec<_>>(),
            _ => unreachable!(),
        };
        assert_eq!(&toks[..4], ["<s>", "<pad>", "</s>", "<unk>"]);
        assert_eq!(toks[UnigramFixture::gguf_id(5) as usize], f.pieces[5]);
        assert!(toks.last().unwrap().starts_with("[PAD"));
    }
}
