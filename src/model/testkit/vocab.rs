//! Tiny tokenizer vocabularies for tests and benchmarks, each given twice: as
//! GGUF `tokenizer.ggml.*` metadata and as the `tokenizer.json` Hugging Face's
//! converters would write for the same model family.
//!
//! The vocabulary comes from a small deterministic BPE training over
//! [`TRAINING_TEXT`] (English, code, accented Latin, CJK, numbers): byte-level
//! for the `gpt2` styles (256 byte symbols, the learned merges, then the
//! family's special tokens), SentencePiece-like for [`VocabStyle::LlamaSpm`]
//! (`<unk>`, `<s>`, `</s>`, the 256 `<0xNN>` byte tokens, learned pieces with
//! `▁` for spaces and scores, higher = merged earlier, then single characters).
//!
//! Parts: `train` (the text, word splits, the BPE loop), `families` (special
//! tokens, ids and chat templates per family), `hf_json` (the `tokenizer.json`
//! writers), `phi3` (Phi-3's added tokens over the SentencePiece style); this
//! file lays the tokens out and writes the GGUF metadata.
//!
//! Invariant: the JSON is written literally, field by field, in the shape of
//! the models' published files (`LlamaConverter`, Qwen2's and Llama 3's
//! `tokenizer.json`), never by serializing the tokenizer that
//! `Tokenizer::from_gguf_metadata` builds, so tests comparing the two compare
//! independent constructions. Training and layout are deterministic: the same
//! style and size give byte-identical output.
//!
//! Counterpart: llama.cpp's `convert_hf_to_gguf.py` (`_set_vocab_gpt2`,
//! `_set_vocab_sentencepiece`) for the metadata; HF's
//! `convert_slow_tokenizer.py` for the JSON.

mod families;
mod hf_json;
mod phi3;
mod train;
mod unigram;
mod wordpiece;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Value;

use self::families::{gpt2_family, Gpt2Family, HARMONY, LLAMA2_TEMPLATE};
use self::hf_json::{gemma4_json, gpt2_json, spm_json};
pub use self::phi3::PHI3_NAME;
pub use self::train::TRAINING_TEXT;
pub use self::unigram::{FixtureText, UnigramFixture};
use self::train::{byte_chars, count_words, gpt2_words, to_byte_level, train_bpe};

/// Which kind of vocabulary to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VocabStyle {
    /// Byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with the given
    /// `tokenizer.ggml.pre`: "llama-bpe", "qwen2" or "gpt-2".
    Gpt2 { pre: &'static str },
    /// gpt-oss's: byte-level BPE with o200k's pre-tokenizer (`gpt-4o`), harmony's special
    /// tokens and gpt-oss's chat template.
    Harmony,
    /// SentencePiece BPE with byte fallback (`tokenizer.ggml.model = "llama"`).
    LlamaSpm,
    /// Gemma 4's: SentencePiece-style BPE stored with its merges (`tokenizer.ggml.model =
    /// "gemma4"`): `▁` for spaces, `<0xNN>` byte fallback, Gemma 4's turn, channel and tool
    /// tokens and its chat template.
    Gemma4,
    /// BERT's WordPiece (`tokenizer.ggml.model = "bert"`), in llama.cpp's phantom-space form.
    WordPiece,
    /// SentencePiece's Unigram (`tokenizer.ggml.model = "t5"`) as XLM-RoBERTa's files carry it,
    /// charsmap included; SentencePiece trained it (`unigram`). No `tokenizer.json`.
    Unigram,
}

/// A tiny vocabulary: GGUF `tokenizer.ggml.*` metadata and an equivalent HF `tokenizer.json`.
#[derive(Debug, Clone)]
pub struct TinyVocab {
    pub style: VocabStyle,
    /// `tokenizer.ggml.*` (and `tokenizer.chat_template`) entries for the GGUF.
    pub metadata: Vec<(String, Value)>,
    /// The same vocabulary as a Hugging Face `tokenizer.json`.
    pub tokenizer_json: String,
    /// Number of tokens (the model's vocabulary size).
    pub size: usize,
}

/// Text that never occurs in [`TRAINING_TEXT`], so filler tokens can never be produced.
const FILLER_OPEN: char = '〔';
const FILLER_CLOSE: char = '〕';

/// How many merges the byte-level styles learn (fewer if the text runs out of repeated pairs).
const GPT2_MERGES: usize = 600;
/// How many pieces the SentencePiece style learns.
const SPM_MERGES: usize = 450;
/// A character joins the SentencePiece alphabet when it occurs this often; rarer ones use byte fallback.
const SPM_MIN_CHAR_COUNT: usize = 3;

impl TinyVocab {
    /// The natural-size vocabulary of `style` (a few hundred tokens).
    pub fn new(style: VocabStyle) -> Self {
        Self::with_size(style, 0)
    }

    /// The vocabulary of `style` padded with unreachable filler tokens to
    /// `size` tokens (no padding when `size` is at most the natural size).
    /// Fillers sit after the learned tokens and before the gpt2 styles' special tokens.
    pub fn with_size(style: VocabStyle, size: usize) -> Self {
        match style {
            VocabStyle::Gpt2 { pre } => gpt2(pre, gpt2_family(pre), style, size),
            VocabStyle::Harmony => gpt2("gpt-4o", HARMONY, style, size),
            VocabStyle::LlamaSpm => spm(size),
            VocabStyle::Gemma4 => gemma4(size),
            VocabStyle::WordPiece => wordpiece::wordpiece(size),
            VocabStyle::Unigram => unigram::unigram(size),
        }
    }

    /// A Unigram vocabulary as llama.cpp's converter writes nomic-embed-text-v2-moe's: its last
    /// token `<mask>`, a control token scored 0, in the unused `[PAD…]`'s place (what a
    /// `nomic-bert-moe` or `jina-bert-v3` file's `<mask>` left strip applies to).
    pub fn with_mask(mut self) -> Self {
        for (key, value) in self.metadata.iter_mut() {
            let Value::Array(items) = value else { continue };
            let Some(last) = items.last_mut() else { continue };
            match key.as_str() {
                "tokenizer.ggml.tokens" => *last = Value::String("<mask>".into()),
                "tokenizer.ggml.scores" => *last = Value::F32(0.0),
                "tokenizer.ggml.token_type" => *last = Value::I32(3),
                _ => {}
            }
        }
        self
    }

    /// Phi-3's vocabulary: [`VocabStyle::LlamaSpm`]'s with Phi-3's added tokens
    /// (`<|endoftext|>` as EOS, `<|assistant|>`, `<|system|>`, `<|end|>`, `<|user|>`) after it,
    /// Phi-3.5's chat template and a Phi-3 name ([`PHI3_NAME`], in `general.name`): llama.cpp
    /// and the `tokenizer.json` strip the whitespace after each but `<unk>`, `<s>` and
    /// `<|endoftext|>`.
    pub fn phi3() -> Self {
        phi3::phi3()
    }

    /// The metadata as the map `Tokenizer::from_gguf_metadata` takes.
    pub fn metadata_map(&self) -> HashMap<String, Value> {
        self.metadata.iter().cloned().collect()
    }

    /// Writes `tokenizer.json` into `dir` and returns its path.
    pub fn write_tokenizer_json(&self, dir: &Path) -> std::io::Result<PathBuf> {
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, &self.tokenizer_json)?;
        Ok(path)
    }
}

// Byte-level BPE styles

/// A byte-level vocabulary written with `pre` and `family`'s special tokens and template.
fn gpt2(pre: &'static str, family: Gpt2Family, style: VocabStyle, size: usize) -> TinyVocab {
    let bytes = byte_chars();
    let mut table = ['?'; 256];
    for &(b, c) in &bytes {
        table[b as usize] = c;
    }
    let words = count_words(
        gpt2_words(TRAINING_TEXT)
            .iter()
            .map(|w| to_byte_level(w, &table).chars().map(String::from).collect()),
    );
    let merges = train_bpe(words, GPT2_MERGES, |_| true);

    let mut tokens: Vec<String> = bytes.iter().map(|&(_, c)| c.to_string()).collect();
    for (a, b) in &merges {
        let merged = format!("{a}{b}");
        if !tokens.contains(&merged) {
            tokens.push(merged);
        }
    }
    let n_fillers = size.saturating_sub(tokens.len() + family.added.len());
    tokens.extend((0..n_fillers).map(|i| to_byte_level(&format!("{FILLER_OPEN}filler{i}{FILLER_CLOSE}"), &table)));
    let n_model = tokens.len();
    tokens.extend(family.added.iter().map(|(t, _)| t.to_string()));
    let mut types = vec![1i32; n_model];
    types.extend(family.added.iter().map(|&(_, control)| if control { 3 } else { 4 }));

    let id = |text: &str| tokens.iter().position(|t| t == text).unwrap_or(0) as u32;
    let merge_strings: Vec<String> = merges.iter().map(|(a, b)| format!("{a} {b}")).collect();
    let mut metadata = vec![
        kv("tokenizer.ggml.model", Value::String("gpt2".into())),
        kv("tokenizer.ggml.pre", Value::String(pre.into())),
        kv("tokenizer.ggml.tokens", strings(&tokens)),
        kv(
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        kv("tokenizer.ggml.merges", strings(&merge_strings)),
        kv("tokenizer.ggml.bos_token_id", Value::U32(id(family.bos))),
        kv("tokenizer.ggml.eos_token_id", Value::U32(id(family.eos))),
        kv("tokenizer.ggml.padding_token_id", Value::U32(id(family.pad))),
        kv("tokenizer.ggml.add_bos_token", Value::Bool(family.add_bos)),
        kv("tokenizer.chat_template", Value::String(family.chat_template.into())),
    ];
    if let Some(eot) = family.eot {
        metadata.push(kv("tokenizer.ggml.eot_token_id", Value::U32(id(eot))));
    }

    let json = gpt2_json(pre, &family, &tokens[..n_model], &merge_strings, n_model as u32);
    TinyVocab {
        style,
        metadata,
        tokenizer_json: json.to_string(),
        size: tokens.len(),
    }
}

// SentencePiece style

/// The SentencePiece-like training: its merges, in order, and its alphabet (characters common
/// enough to be pieces; rarer ones fall back to bytes).
fn spm_pieces() -> (Vec<(String, String)>, Vec<char>) {
    let (words, alphabet) = train::spm_words(TRAINING_TEXT, SPM_MIN_CHAR_COUNT);
    let in_alphabet = |s: &str| {
        let mut chars = s.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => alphabet.contains(&c),
            _ => true,
        }
    };
    let merges = train_bpe(words, SPM_MERGES, in_alphabet);
    (merges, alphabet)
}

fn spm(size: usize) -> TinyVocab {
    let (merges, alphabet) = spm_pieces();

    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    let mut types: Vec<i32> = vec![2, 3, 3];
    types.extend([6; 256]);
    let mut scores: Vec<f32> = vec![0.0; tokens.len()];
    let mut next_score = 0.0f32;
    let learned = merges.iter().map(|(a, b)| format!("{a}{b}"));
    let singles = alphabet.iter().map(|c| c.to_string());
    for piece in learned.chain(singles) {
        if !tokens.contains(&piece) {
            tokens.push(piece);
            types.push(1);
            scores.push(next_score);
            next_score -= 1.0;
        }
    }
    for i in 0..size.saturating_sub(tokens.len()) {
        tokens.push(format!("{FILLER_OPEN}filler{i}{FILLER_CLOSE}"));
        types.push(1);
        scores.push(next_score);
        next_score -= 1.0;
    }

    let metadata = vec![
        kv("tokenizer.ggml.model", Value::String("llama".into())),
        kv("tokenizer.ggml.tokens", strings(&tokens)),
        kv("tokenizer.ggml.scores", floats(&scores)),
        kv("tokenizer.ggml.token_type", ints(&types)),
        kv("tokenizer.ggml.bos_token_id", Value::U32(1)),
        kv("tokenizer.ggml.eos_token_id", Value::U32(2)),
        kv("tokenizer.ggml.unknown_token_id", Value::U32(0)),
        kv("tokenizer.ggml.add_bos_token", Value::Bool(true)),
        kv("tokenizer.ggml.add_eos_token", Value::Bool(false)),
        kv("tokenizer.chat_template", Value::String(LLAMA2_TEMPLATE.into())),
    ];
    let json = spm_json(&tokens, &scores);
    TinyVocab {
        style: VocabStyle::LlamaSpm,
        metadata,
        tokenizer_json: json.to_string(),
        size: tokens.len(),
    }
}

// Gemma 4 style

/// Gemma 4's special tokens as its GGUFs type them: control (3), or user-defined (4) for those
/// the converter leaves visible so that chat parsers can read them.
const GEMMA4_SPECIALS: [(&str, i32); 18] = [
    ("<pad>", 3),
    ("<eos>", 3),
    ("<bos>", 3),
    ("<unk>", 2),
    ("<mask>", 3),
    ("<|turn>", 3),
    ("<turn|>", 3),
    ("<|think|>", 3),
    ("<|tool>", 3),
    ("<tool|>", 3),
    ("<|channel>", 4),
    ("<channel|>", 4),
    ("<|tool_call>", 4),
    ("<tool_call|>", 4),
    ("<|tool_response>", 4),
    ("<tool_response|>", 4),
    ("<|\"|>", 4),
    ("<|image|>", 3),
];

fn gemma4(size: usize) -> TinyVocab {
    let (merges, alphabet) = spm_pieces();

    let mut tokens: Vec<String> = GEMMA4_SPECIALS.iter().map(|(t, _)| t.to_string()).collect();
    let mut types: Vec<i32> = GEMMA4_SPECIALS.iter().map(|&(_, t)| t).collect();
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    types.extend([6; 256]);
    // Single characters, then the learned pieces: every merge's halves are tokens.
    let singles = alphabet.iter().map(|c| c.to_string());
    let learned = merges.iter().map(|(a, b)| format!("{a}{b}"));
    for piece in singles.chain(learned) {
        if !tokens.contains(&piece) {
            tokens.push(piece);
            types.push(1);
        }
    }
    for i in 0..size.saturating_sub(tokens.len()) {
        tokens.push(format!("{FILLER_OPEN}filler{i}{FILLER_CLOSE}"));
        types.push(1);
    }
    let merge_strings: Vec<String> = merges.iter().map(|(a, b)| format!("{a} {b}")).collect();
    let id = |text: &str| tokens.iter().position(|t| t == text).unwrap_or(0) as u32;
    let metadata = vec![
        kv("tokenizer.ggml.model", Value::String("gemma4".into())),
        kv("tokenizer.ggml.tokens", strings(&tokens)),
        kv("tokenizer.ggml.scores", Value::Array(vec![Value::F32(0.0); tokens.len()])),
        kv("tokenizer.ggml.token_type", ints(&types)),
        kv("tokenizer.ggml.merges", strings(&merge_strings)),
        kv("tokenizer.ggml.bos_token_id", Value::U32(id("<bos>"))),
        kv("tokenizer.ggml.eos_token_id", Value::U32(id("<eos>"))),
        kv("tokenizer.ggml.unknown_token_id", Value::U32(id("<unk>"))),
        kv("tokenizer.ggml.padding_token_id", Value::U32(id("<pad>"))),
        kv("tokenizer.ggml.add_bos_token", Value::Bool(true)),
        kv("tokenizer.ggml.add_space_prefix", Value::Bool(false)),
        kv(
            "tokenizer.chat_template",
            Value::String(include_str!("../chat/builtin/gemma-4-it.jinja").into()),
        ),
    ];
    let json = gemma4_json(&tokens, &types, &merge_strings);
    TinyVocab {
        style: VocabStyle::Gemma4,
        metadata,
        tokenizer_json: json.to_string(),
        size: tokens.len(),
    }
}

pub(super) fn kv(key: &str, value: Value) -> (String, Value) {
    (key.to_string(), value)
}

pub(super) fn strings(items: &[String]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.clone())).collect())
}

/// Scores as a GGUF array.
pub(super) fn floats(items: &[f32]) -> Value {
    Value::Array(items.iter().map(|&s| Value::F32(s)).collect())
}

/// Token types as a GGUF array.
pub(super) fn ints(items: &[i32]) -> Value {
    Value::Array(items.iter().map(|&t| Value::I32(t)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value as Json;

    fn get<'a>(v: &'a TinyVocab, key: &str) -> &'a Value {
        &v.metadata.iter().find(|(k, _)| k == key).unwrap().1
    }

    fn tokens(v: &TinyVocab) -> Vec<String> {
        match get(v, "tokenizer.ggml.tokens") {
            Value::Array(items) => items.iter().map(|t| t.to_string().unwrap().clone()).collect(),
            _ => panic!("tokens is not an array"),
        }
    }

    #[test]
    fn sizes_are_small_and_consistent() {
        for style in [
            VocabStyle::Gpt2 { pre: "llama-bpe" },
            VocabStyle::Gpt2 { pre: "qwen2" },
            VocabStyle::Gpt2 { pre: "gpt-2" },
            VocabStyle::LlamaSpm,
        ] {
            let v = TinyVocab::new(style);
            assert!((300..=1200).contains(&v.size), "{style:?}: {}", v.size);
            assert_eq!(tokens(&v).len(), v.size);
            let json: Json = serde_json::from_str(&v.tokenizer_json).unwrap();
            let n_model = json["model"]["vocab"].as_object().unwrap().len();
            let n_added_outside = json["added_tokens"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["id"].as_u64().unwrap() as usize >= n_model)
                .count();
            assert_eq!(n_model + n_added_outside, v.size, "{style:?}");
        }
    }

    #[test]
    fn training_is_deterministic() {
        let a = TinyVocab::new(VocabStyle::Gpt2 { pre: "qwen2" });
        let b = TinyVocab::new(VocabStyle::Gpt2 { pre: "qwen2" });
        assert_eq!(a.tokenizer_json, b.tokenizer_json);
        assert_eq!(tokens(&a), tokens(&b));
        let a = TinyVocab::new(VocabStyle::LlamaSpm);
        assert_eq!(a.tokenizer_json, TinyVocab::new(VocabStyle::LlamaSpm).tokenizer_json);
    }

    #[test]
    fn byte_level_alphabet_is_gpt2s() {
        let v = TinyVocab::new(VocabStyle::Gpt2 { pre: "gpt-2" });
        let t = tokens(&v);
        assert_eq!(t[0], "!");
        assert_eq!(t[188], "Ā", "byte 0 maps to U+0100 after the 188 printable bytes");
        assert_eq!(t[188 + 32], "Ġ", "the space");
        assert!(t.iter().any(|x| x == "Ġthe"), "a common word was learned");
        assert_eq!(t.last().unwrap(), "<|endoftext|>");
    }

    #[test]
    fn spm_layout_and_scores() {
        let v = TinyVocab::new(VocabStyle::LlamaSpm);
        let t = tokens(&v);
        assert_eq!(&t[..3], ["<unk>", "<s>", "</s>"]);
        assert_eq!(t[3], "<0x00>");
        assert_eq!(t[258], "<0xFF>");
        assert!(t.iter().any(|x| x == "▁the"));
        assert!(
            !t.iter().any(|x| x.contains('🚀')),
            "rare characters are left to byte fallback"
        );
        let Value::Array(scores) = get(&v, "tokenizer.ggml.scores") else {
            panic!()
        };
        let s: Vec<f32> = scores.iter().map(|x| x.to_f32().unwrap()).collect();
        assert!(
            s[259..].windows(2).all(|w| w[0] > w[1]),
            "scores fall with the id after the byte tokens"
        );
    }

    #[test]
    fn padding_reaches_the_requested_size() {
        for style in [VocabStyle::Gpt2 { pre: "llama-bpe" }, VocabStyle::LlamaSpm] {
            let v = TinyVocab::with_size(style, 2_000);
            assert_eq!(v.size, 2_000);
            assert_eq!(tokens(&v).len(), 2_000);
        }
        // Specials stay last in the byte-level styles.
        let v = TinyVocab::with_size(VocabStyle::Gpt2 { pre: "qwen2" }, 1_500);
        assert_eq!(tokens(&v)[1_497], "<|im_end|>");
        assert_eq!(
            TinyVocab::with_size(VocabStyle::LlamaSpm, 10).size,
            TinyVocab::new(VocabStyle::LlamaSpm).size
        );
    }
}
