//! A tiny WordPiece vocabulary as llama.cpp's converter writes BERT's (`tokenizer.ggml.model =
//! "bert"`): `[PAD]`, `[UNK]`, `[CLS]`, `[SEP]`, `[MASK]` (control tokens), then every character
//! of [`TRAINING_TEXT`] (as BERT's normalizer leaves it: lowercased, accents stripped) as a word
//! start (`▁c`) and as a continuation (`c`), the text's frequent words (`▁word`), and the
//! frequent endings of the others as continuations; the `▁` is llama.cpp's "phantom space" for a
//! word start, where BERT's `vocab.txt` marks continuations with `##` instead (as the
//! `tokenizer.json` here does).
//!
//! The words come from Hugging Face's `BertNormalizer` and `BertPreTokenizer` over the text, so
//! the vocabulary covers what those pieces give; deterministic (counts, then text, order ties).

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::{NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

use super::hf_json::bert_json;
use super::{kv, strings, TinyVocab, VocabStyle, FILLER_CLOSE, FILLER_OPEN, TRAINING_TEXT};

/// The control tokens, in their ids' order.
const SPECIALS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
/// Whole words kept: those seen at least this often, up to [`MAX_WORDS`].
const MIN_WORD_COUNT: usize = 2;
const MAX_WORDS: usize = 220;
/// Continuation endings kept: 2 to 4 characters, seen at least this often, up to [`MAX_ENDINGS`].
const MIN_ENDING_COUNT: usize = 3;
const MAX_ENDINGS: usize = 60;

/// The words BERT's normalizer and pre-tokenizer make of `text`.
fn bert_words(text: &str) -> Vec<String> {
    let mut n = NormalizedString::from(text);
    let split = BertNormalizer::new(true, true, Some(true), true)
        .normalize(&mut n)
        .and_then(|()| {
            let mut p = PreTokenizedString::from(n);
            BertPreTokenizer.pre_tokenize(&mut p)?;
            Ok(p.get_splits(OffsetReferential::Original, OffsetType::Byte)
                .into_iter()
                .map(|(s, _, _)| s.to_owned())
                .collect())
        });
    split.unwrap_or_default()
}

/// `items` with their counts, most frequent first, then by text; those of at least `min`, up to `max`.
fn frequent(counts: HashMap<String, usize>, min: usize, max: usize) -> Vec<String> {
    let mut v: Vec<(String, usize)> = counts.into_iter().filter(|&(_, c)| c >= min).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.into_iter().take(max).map(|(w, _)| w).collect()
}

pub(super) fn wordpiece(size: usize) -> TinyVocab {
    let words = bert_words(TRAINING_TEXT);
    let mut chars: Vec<char> = words.iter().flat_map(|w| w.chars()).collect();
    chars.sort_unstable();
    chars.dedup();
    let mut word_counts: HashMap<String, usize> = HashMap::new();
    for w in words.iter().filter(|w| w.chars().count() >= 2) {
        *word_counts.entry(w.clone()).or_default() += 1;
    }
    let kept = frequent(word_counts, MIN_WORD_COUNT, MAX_WORDS);
    let mut ending_counts: HashMap<String, usize> = HashMap::new();
    for w in words.iter().filter(|w| !kept.contains(w)) {
        let cs: Vec<char> = w.chars().collect();
        for n in 2..=4.min(cs.len().saturating_sub(1)) {
            *ending_counts.entry(cs[cs.len() - n..].iter().collect()).or_default() += 1;
        }
    }
    let endings = frequent(ending_counts, MIN_ENDING_COUNT, MAX_ENDINGS);

    // (GGUF text, HF piece) of each token after the specials.
    let mut pieces: Vec<(String, String)> = Vec::new();
    pieces.extend(chars.iter().map(|c| (format!("▁{c}"), c.to_string())));
    pieces.extend(chars.iter().map(|c| (c.to_string(), format!("##{c}"))));
    pieces.extend(kept.iter().map(|w| (format!("▁{w}"), w.clone())));
    pieces.extend(endings.iter().map(|e| (e.clone(), format!("##{e}"))));
    let n_fillers = size.saturating_sub(SPECIALS.len() + pieces.len());
    pieces.extend((0..n_fillers).map(|i| {
        let f = format!("{FILLER_OPEN}filler{i}{FILLER_CLOSE}");
        (format!("▁{f}"), f)
    }));

    let mut tokens: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
    tokens.extend(pieces.iter().map(|(g, _)| g.clone()));
    let mut types = vec![3i32; SPECIALS.len()];
    types.extend(std::iter::repeat_n(1, pieces.len()));
    let id = |t: &str| SPECIALS.iter().position(|s| *s == t).unwrap_or(0) as u32;
    let metadata = vec![
        kv("tokenizer.ggml.model", Value::String("bert".into())),
        kv("tokenizer.ggml.pre", Value::String("default".into())),
        kv("tokenizer.ggml.tokens", strings(&tokens)),
        kv(
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        kv("tokenizer.ggml.token_type_count", Value::U32(2)),
        kv("tokenizer.ggml.bos_token_id", Value::U32(id("[CLS]"))),
        kv("tokenizer.ggml.seperator_token_id", Value::U32(id("[SEP]"))),
        kv("tokenizer.ggml.unknown_token_id", Value::U32(id("[UNK]"))),
        kv("tokenizer.ggml.padding_token_id", Value::U32(id("[PAD]"))),
        kv("tokenizer.ggml.mask_token_id", Value::U32(id("[MASK]"))),
    ];
    let hf_pieces: Vec<String> = SPECIALS
        .iter()
        .map(|s| s.to_string())
        .chain(pieces.into_iter().map(|(_, h)| h))
        .collect();
    TinyVocab {
        style: VocabStyle::WordPiece,
        metadata,
        tokenizer_json: bert_json(&hf_pieces, &SPECIALS).to_string(),
        size: tokens.len(),
    }
}
