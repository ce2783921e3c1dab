//! Special tokens: the GGUF token types, which tokens become `AddedToken`s,
//! and the facts generation needs (BOS, EOS, whether to add BOS, stop ids).
//!
//! Invariants: every control (type 3) and unknown (type 2) token is a *special*
//! added token and every user-defined (type 4) token a non-special one, all
//! with `normalized = false`, so their literal text in a prompt encodes to
//! their single id (llama.cpp's `tokenizer_st_partition` matches raw text the
//! same way). Stop ids are deduplicated and start with EOS, EOT, EOM.
//!
//! Counterpart: llama.cpp's `llama_token_attr` handling and its "auto-detect
//! EOT/EOG tokens by text" block in `src/llama-vocab.cpp`; HF's
//! `added_tokens` with `special` flags.

use tokenizers::AddedToken;

use super::hf_config::HfTokenizerConfig;
use super::metadata::SpecialKeys;

/// `tokenizer.ggml.token_type` codes (llama.cpp's `llama_token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
    /// 0 or any code llama.cpp does not define.
    Undefined,
}

impl TokenType {
    pub fn from_code(code: i64) -> Self {
        match code {
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Undefined,
        }
    }
}

/// Texts of special tokens that a reply's text keeps (decoding leaves every other special
/// token out): the reasoning markers of Mistral's thinking models (Magistral, Ministral 3
/// Reasoning), which are special tokens in their vocabularies, as llama.cpp's
/// `preserved_tokens` keep them.
pub const PRESERVED_TOKENS: &[&str] = &["[THINK]", "[/THINK]"];

/// Texts of tokens that end a turn in the chat formats we know. A *special*
/// token with one of these texts always stops generation, whatever
/// `eos_token_id` says (a chat model's EOS is often the base model's).
pub const END_OF_TURN_TOKENS: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "</s>",
    "<｜end▁of▁sentence｜>",
    // GLM-4: a tool call ends with it (its `generation_config.json` lists it beside
    // `<|endoftext|>` and `<|user|>`, which GGUF files carry as EOS and EOT).
    "<|observation|>",
];

/// BOS texts tried, in order, when neither GGUF metadata nor `tokenizer_config.json` names one.
const BOS_NAMES: &[&str] = &["<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"];
/// EOS texts tried, in order, when neither GGUF metadata nor `tokenizer_config.json` names one.
const EOS_NAMES: &[&str] = &[
    "<|end_of_text|>",
    "</s>",
    "<eos>",
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
];

/// The added tokens of a GGUF vocabulary, in id order.
pub(crate) fn added_tokens(tokens: &[String], types: &[TokenType]) -> Vec<AddedToken> {
    tokens
        .iter()
        .zip(types)
        .filter_map(|(text, ty)| {
            let special = match ty {
                TokenType::Control | TokenType::Unknown => true,
                TokenType::UserDefined => false,
                _ => return None,
            };
            Some(AddedToken::from(text.clone(), special).normalized(false))
        })
        .collect()
}

/// What generation needs to know about special tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Specials {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    pub stop_ids: Vec<u32>,
}

impl Specials {
    /// From GGUF keys; `default_add_bos` applies when `add_bos_token` is absent.
    pub fn from_gguf(keys: &SpecialKeys, default_add_bos: bool, inner: &tokenizers::Tokenizer) -> Self {
        Self {
            bos: keys.bos,
            eos: keys.eos,
            add_bos: keys.add_bos.unwrap_or(default_add_bos),
            stop_ids: stop_ids([keys.eos, keys.eot, keys.eom], inner),
        }
    }

    /// From a `tokenizer.json` alone: names in `tokenizer_config.json`, else well-known texts.
    pub fn from_hf(inner: &tokenizers::Tokenizer, config: &HfTokenizerConfig) -> Self {
        let by_names = |names: &[&str]| names.iter().find_map(|n| special_id(inner, n));
        let named = |name: &Option<String>| name.as_deref().and_then(|n| inner.token_to_id(n));
        let bos = named(&config.bos_token).or_else(|| by_names(BOS_NAMES));
        let eos = named(&config.eos_token).or_else(|| by_names(EOS_NAMES));
        let add_bos = config.add_bos_token.unwrap_or_else(|| post_processor_adds(inner, bos));
        Self {
            bos,
            eos,
            add_bos,
            stop_ids: stop_ids([eos], inner),
        }
    }
}

/// The id of `text` if it is a special added token.
pub(super) fn special_id(inner: &tokenizers::Tokenizer, text: &str) -> Option<u32> {
    let id = inner.token_to_id(text)?;
    inner.get_added_vocabulary().is_special_token(text).then_some(id)
}

/// Whether the file's post-processor puts `bos` first (Llama's TemplateProcessing does).
fn post_processor_adds(inner: &tokenizers::Tokenizer, bos: Option<u32>) -> bool {
    let Some(bos) = bos else { return false };
    match inner.encode("", true) {
        Ok(enc) => enc.get_ids().first() == Some(&bos),
        Err(_) => false,
    }
}

/// `explicit` ids first, then special added tokens named in [`END_OF_TURN_TOKENS`], deduplicated.
fn stop_ids<const N: usize>(explicit: [Option<u32>; N], inner: &tokenizers::Tokenizer) -> Vec<u32> {
    let mut named: Vec<u32> = inner
        .get_added_tokens_decoder()
        .iter()
        .filter(|(_, t)| t.special && END_OF_TURN_TOKENS.contains(&t.content.as_str()))
        .map(|(id, _)| *id)
        .collect();
    named.sort_unstable();
    let mut out = Vec::new();
    for id in explicit.into_iter().flatten().chain(named) {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::models::bpe::{Vocab, BPE};

    fn toy() -> tokenizers::Tokenizer {
        let vocab: Vocab = ["a", "<|im_end|>", "<|endoftext|>", "<tool>", "<s>"]
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let mut tok = tokenizers::Tokenizer::new(BPE::builder().vocab_and_merges(vocab, vec![]).build().unwrap());
        let texts: Vec<String> = ["a", "<|im_end|>", "<|endoftext|>", "<tool>", "<s>"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let types = [
            TokenType::Normal,
            TokenType::Control,
            TokenType::Control,
            TokenType::UserDefined,
            TokenType::Control,
        ];
        tok.add_tokens(&added_tokens(&texts, &types));
        tok
    }

    #[test]
    fn token_types_decide_added_tokens() {
        let texts: Vec<String> = ["x", "<unk>", "<c>", "<u>", "<0x00>"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let types = [
            TokenType::Normal,
            TokenType::Unknown,
            TokenType::Control,
            TokenType::UserDefined,
            TokenType::Byte,
        ];
        let added = added_tokens(&texts, &types);
        let summary: Vec<(&str, bool, bool)> = added
            .iter()
            .map(|t| (t.content.as_str(), t.special, t.normalized))
            .collect();
        assert_eq!(
            summary,
            vec![("<unk>", true, false), ("<c>", true, false), ("<u>", false, false)]
        );
        assert_eq!(TokenType::from_code(6), TokenType::Byte);
        assert_eq!(TokenType::from_code(42), TokenType::Undefined);
    }

    #[test]
    fn stop_ids_are_explicit_then_named_and_deduplicated() {
        let tok = toy();
        let keys = SpecialKeys {
            eos: Some(2),
            eot: Some(1),
            eom: Some(2),
            ..Default::default()
        };
        let s = Specials::from_gguf(&keys, true, &tok);
        assert_eq!(s.stop_ids, vec![2, 1]);
        assert!(s.add_bos);
        // A user-defined token is never a stop id, even with a stop-like name.
        let only_named = Specials::from_gguf(&SpecialKeys::default(), false, &tok);
        assert_eq!(only_named.stop_ids, vec![1, 2]);
        assert!(!only_named.add_bos);
    }

    #[test]
    fn hf_specials_fall_back_to_known_names() {
        let tok = toy();
        let s = Specials::from_hf(&tok, &HfTokenizerConfig::default());
        assert_eq!(s.bos, Some(4));
        assert_eq!(s.eos, Some(2));
        assert!(!s.add_bos, "no post-processor, no config: BOS is not added");
        let config = HfTokenizerConfig {
            eos_token: Some("<|im_end|>".into()),
            add_bos_token: Some(true),
            ..Default::default()
        };
        let s = Specials::from_hf(&tok, &config);
        assert_eq!(s.eos, Some(1));
        assert!(s.add_bos);
        assert_eq!(s.stop_ids, vec![1, 2]);
    }
}
