//! The pre-tokenizer (and normalizer) of a byte-level BPE vocabulary, chosen
//! by `tokenizer.ggml.pre`.
//!
//! Owns the mapping from llama.cpp's pre-tokenizer names to the HF pipeline
//! pieces those models' `tokenizer.json` files use. Invariant: for each kind,
//! the pipeline built here splits text exactly as the model's own
//! `tokenizer.json` does (checked against independently written JSON in
//! `tests/tokenizer.rs`). Unknown names fall back to GPT-2 with a warning.
//!
//! Counterpart: `llama_vocab::impl::load` (name → `LLAMA_VOCAB_PRE_TYPE_*`) and
//! `llm_tokenizer_bpe` (type → `regex_exprs`) in llama.cpp's
//! `src/llama-vocab.cpp`; the `pre_tokenizer` field of the models' HF files.

use tokenizers::normalizers::unicode::NFC;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use crate::model::ModelError;

/// Llama 3's split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_LLAMA3`): digits in groups of up to three.
pub(crate) const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_QWEN2`): the Llama 3 one with single digits.
pub(crate) const QWEN2_REGEX: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5's split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_QWEN35`): Qwen2's with combining marks
/// (`\p{M}`) kept in words, as its `tokenizer.json` writes it.
pub(crate) const QWEN35_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Jais 2's split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_JAIS2`): Llama 3's (contractions spelled
/// case by case) with a run of spaces before a word cut into pieces of 512, 256, ... 4, then
/// one or two, as its `tokenizer.json` cascades them.
pub(crate) const JAIS2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}";

/// GPT-4o's split (`o200k`, llama.cpp `LLAMA_VOCAB_PRE_TYPE_GPT4O`; Phi-4-mini, Llama 4): a
/// word is split before each run of capitals, contractions stay on their word, and `/` joins a
/// run of punctuation's trailing newlines. As written in the models' `tokenizer.json`.
pub(crate) const GPT4O_REGEX: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Mistral's Tekken split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_TEKKEN`; Mistral Nemo, Mistral Small
/// 3.x, Ministral, Devstral, Pixtral): GPT-4o's without contractions, one digit at a time. As
/// written in the models' `tokenizer.json`.
pub(crate) const TEKKEN_REGEX: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Seed-Coder's and Seed-OSS's split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_SEED_CODER`, its
/// `tokenizer.json`'s with the contractions spelled case by case): Llama 3's with single
/// digits, and a run of punctuation never takes a line break.
pub(crate) const SEED_CODER_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";

/// DeepSeek-V3's splits, applied in turn (llama.cpp `LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM`;
/// DeepSeek-V3, R1 and V3.1, as their `tokenizer.json` writes them): digits in groups of up to
/// three, runs of CJK ideographs and kana, then words, punctuation and spaces.
pub(crate) const DEEPSEEK3_REGEXES: [&str; 3] = [
    "\\p{N}{1,3}",
    "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
];

/// DeepSeek LLM's and DeepSeek-V2's splits, applied in turn (llama.cpp
/// `LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM`): newlines, words of Latin, Greek, Cyrillic and other
/// cased scripts with a leading space, ASCII and full-width punctuation, trailing spaces, CJK
/// runs, digit runs. (Written with escapes: a copy of the characters could be normalized on its
/// way, which turns some of the ranges around.)
pub(crate) const DEEPSEEK_LLM_REGEXES: [&str; 6] = [
    "[\r\n]",
    "\\s?[A-Za-z\u{b5}\u{c0}-\u{d6}\u{d8}-\u{f6}\u{f8}-\u{1ba}\u{1bc}-\u{1bf}\u{1c4}-\u{293}\u{295}-\u{2af}\u{370}-\u{373}\u{376}\u{377}\u{37b}-\u{37d}\u{37f}\u{386}\u{388}-\u{38a}\u{38c}\u{38e}-\u{3a1}\u{3a3}-\u{3f5}\u{3f7}-\u{481}\u{48a}-\u{52f}\u{531}-\u{556}\u{10a0}-\u{10c5}\u{13a0}-\u{13f5}\u{13f8}-\u{13fd}\u{1c90}-\u{1cba}\u{1cbd}-\u{1cbf}\u{1d00}-\u{1d2b}\u{1d6b}-\u{1d77}\u{1d79}-\u{1d9a}\u{1e00}-\u{1f15}\u{1f18}-\u{1f1d}\u{1f20}-\u{1f45}\u{1f48}-\u{1f4d}\u{1f50}-\u{1f57}\u{1f59}\u{1f5b}\u{1f5d}\u{1f5f}-\u{1f7d}\u{1f80}-\u{1fb4}\u{1fb6}-\u{1fbc}\u{1fbe}\u{1fc2}-\u{1fc4}\u{1fc6}-\u{1fcc}\u{1fd0}-\u{1fd3}\u{1fd6}-\u{1fdb}\u{1fe0}-\u{1fec}\u{1ff2}-\u{1ff4}\u{1ff6}-\u{1ffc}\u{2102}\u{2107}\u{210a}-\u{2113}\u{2115}\u{2119}-\u{211d}\u{2124}\u{2126}\u{2128}\u{212a}-\u{212d}\u{212f}-\u{2134}\u{2139}\u{213c}-\u{213f}\u{2145}-\u{2149}\u{214e}\u{2183}\u{2184}\u{2c00}-\u{2c7b}\u{2c7e}-\u{2ce4}\u{2ceb}-\u{2cee}\u{2cf2}\u{2cf3}\u{a640}-\u{a66d}\u{a680}-\u{a69b}\u{a722}-\u{a76f}\u{a771}-\u{a787}\u{a78b}-\u{a78e}\u{ab70}-\u{abbf}\u{fb00}-\u{fb06}\u{fb13}-\u{fb17}\u{ff21}-\u{ff3a}\u{ff41}-\u{ff5a}\u{10400}-\u{1044f}\u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}\u{118a0}-\u{118df}\u{1e900}-\u{1e943}]+",
    "\\s?[!-/:-~\u{ff01}-\u{ff0f}\u{ff1a}-\u{ff5e}\u{2018}-\u{201f}\u{3000}-\u{3002}]+",
    "\\s+$",
    "[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]+",
    "\\p{N}+",
];

/// Falcon's splits, applied in turn (llama.cpp `LLAMA_VOCAB_PRE_TYPE_FALCON`; Falcon 7B, 40B
/// and 180B): runs of punctuation (with `$+<=>^~|` and the backtick) first, then GPT-2's
/// regex, then digits in groups of three (a shorter run of digits stays as GPT-2's split left
/// it, a space before it included).
pub(crate) const FALCON_REGEXES: [&str; 3] = [
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    "[0-9][0-9][0-9]",
];

/// BLOOM's split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_BLOOM`; also Poro's and GPT-3 Finnish's):
/// words with an optional space before them, cut at whitespace and at `.,!?…。，、।۔،` (and the
/// parentheses and bar the class spells), which stand alone.
pub(crate) const BLOOM_REGEX: &str = " ?[^(\\s|.,!?\u{2026}\u{3002}\u{ff0c}\u{3001}\u{964}\u{6d4}\u{60c})]+";

/// The pre-tokenization families hearth implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PreKind {
    /// GPT-2's regex inside `ByteLevel(use_regex=true)`.
    Gpt2,
    /// [`LLAMA3_REGEX`], and BPE with `ignore_merges` (a word that is itself a token is taken whole).
    Llama3,
    /// [`QWEN2_REGEX`] after an NFC normalizer.
    Qwen2,
    /// [`QWEN35_REGEX`] after an NFC normalizer (Qwen3.5, Qwen3.6).
    Qwen35,
    /// [`QWEN2_REGEX`] without a normalizer (StableLM 2, Ling).
    StableLm2,
    /// Every digit split off, then GPT-2's regex (SmolLM, StarCoder).
    DigitsGpt2,
    /// [`LLAMA3_REGEX`] with plain BPE, no `ignore_merges` (tiktoken's `cl100k`: DBRX, Phi-4).
    Cl100k,
    /// [`GPT4O_REGEX`] (tiktoken's `o200k`: Phi-4-mini, Llama 4).
    Gpt4o,
    /// [`SEED_CODER_REGEX`] (Seed-Coder, Seed-OSS).
    SeedCoder,
    /// [`DEEPSEEK3_REGEXES`] (DeepSeek-V3, R1).
    DeepSeek3,
    /// [`DEEPSEEK_LLM_REGEXES`] (DeepSeek LLM, DeepSeek-V2 and V2-Lite).
    DeepSeekLlm,
    /// [`TEKKEN_REGEX`], and BPE with `ignore_merges` (Mistral's Tekken).
    Tekken,
    /// [`FALCON_REGEXES`] (Falcon 7B, 40B, 180B).
    Falcon,
    /// [`BLOOM_REGEX`] (BLOOM, Poro, GPT-3 Finnish).
    Bloom,
    /// [`JAIS2_REGEX`] (Jais 2).
    Jais2,
}

impl PreKind {
    /// The kind for a `tokenizer.ggml.pre` value; missing or "default" is GPT-2.
    pub fn from_gguf(pre: Option<&str>) -> Self {
        match pre {
            None => Self::Gpt2,
            Some(name) => Self::from_name(name).unwrap_or_else(|| {
                tracing::warn!("unknown tokenizer.ggml.pre \"{name}\"; using the GPT-2 pre-tokenizer, tokenization may differ from the model's");
                Self::Gpt2
            }),
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "default" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "jina-v2-es" | "jina-v2-de" | "jina-v2-code" | "jina-v1-en" | "roberta-bpe" | "gigachat"
            | "mellum" | "exaone4" | "olmo" | "mpt" | "jais" | "modern-bert" | "a.x-4.0" => Self::Gpt2,
            // GLM-4 (0414) and later: llama.cpp's CHATGLM4 regex is Llama 3's, with ignore_merges.
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2" | "glm4"
            | "glm5" => Self::Llama3,
            "qwen2" | "deepseek-r1-qwen" | "megrez" | "kormo" => Self::Qwen2,
            "qwen35" => Self::Qwen35,
            // Ling's (and LLaDA-MoE's) `tokenizer.json` spells Qwen2's split with possessive
            // quantifiers, which match as the greedy ones here: what they keep from
            // backtracking could never begin the piece after it.
            "stablelm2" | "bailingmoe" | "bailingmoe2" | "llada-moe" => Self::StableLm2,
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva" | "mellum2" => Self::DigitsGpt2,
            // GLM-4-9B-chat's (`chatglm-bpe`): the same regex without ignore_merges.
            "dbrx" | "smaug-bpe" | "chatglm-bpe" => Self::Cl100k,
            "tekken" => Self::Tekken,
            "falcon" => Self::Falcon,
            "bloom" | "poro-chat" | "gpt3-finnish" => Self::Bloom,
            "deepseek-v3" => Self::DeepSeek3,
            "seed-coder" => Self::SeedCoder,
            "jais-2" => Self::Jais2,
            "deepseek-llm" => Self::DeepSeekLlm,
            "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => Self::Gpt4o,
            _ => return None,
        })
    }

    /// Whether BPE looks a whole pre-token up in the vocabulary before merging.
    pub fn ignore_merges(self) -> bool {
        matches!(self, Self::Llama3 | Self::Tekken)
    }

    pub fn normalizer(self) -> Option<NormalizerWrapper> {
        matches!(self, Self::Qwen2 | Self::Qwen35).then(|| NFC.into())
    }

    pub fn pre_tokenizer(self) -> Result<PreTokenizerWrapper, ModelError> {
        let gpt2 = || ByteLevel::new(false, true, true);
        // Each regex splits the pieces the one before left, then the bytes are mapped.
        let splits_then_bytes = |regexes: &[&str]| -> Result<PreTokenizerWrapper, ModelError> {
            let mut steps = regexes
                .iter()
                .map(|regex| {
                    let split = Split::new(SplitPattern::Regex(regex.to_string()), SplitDelimiterBehavior::Isolated, false)
                        .map_err(|e| ModelError::Tokenizer(format!("pre-tokenizer regex does not compile: {e}")))?;
                    Ok(split.into())
                })
                .collect::<Result<Vec<PreTokenizerWrapper>, ModelError>>()?;
            steps.push(ByteLevel::new(false, true, false).into());
            Ok(Sequence::new(steps).into())
        };
        let split_then_bytes = |regex: &str| splits_then_bytes(&[regex]);
        match self {
            Self::Gpt2 => Ok(gpt2().into()),
            Self::Llama3 | Self::Cl100k => split_then_bytes(LLAMA3_REGEX),
            Self::Gpt4o => split_then_bytes(GPT4O_REGEX),
            Self::Tekken => split_then_bytes(TEKKEN_REGEX),
            Self::SeedCoder => split_then_bytes(SEED_CODER_REGEX),
            Self::DeepSeek3 => splits_then_bytes(&DEEPSEEK3_REGEXES),
            Self::DeepSeekLlm => splits_then_bytes(&DEEPSEEK_LLM_REGEXES),
            Self::Falcon => splits_then_bytes(&FALCON_REGEXES),
            Self::Bloom => split_then_bytes(BLOOM_REGEX),
            Self::Jais2 => split_then_bytes(JAIS2_REGEX),
            Self::Qwen2 | Self::StableLm2 => split_then_bytes(QWEN2_REGEX),
            Self::Qwen35 => split_then_bytes(QWEN35_REGEX),
            Self::DigitsGpt2 => Ok(Sequence::new(vec![Digits::new(true).into(), gpt2().into()]).into()),
        }
    }
}

/// llama.cpp's default for `add_bos_token` in a gpt2-model vocabulary: on for
/// the Llama 3 family, Tekken and Chameleon, off otherwise (GLM's split is Llama 3's, but its
/// templates write their own `[gMASK]<sop>` and llama.cpp sets no BOS for it).
pub(crate) fn bpe_adds_bos(pre: Option<&str>) -> bool {
    if matches!(pre, Some("glm4" | "glm5" | "chatglm-bpe")) {
        return false;
    }
    matches!(pre, Some("chameleon"))
        || matches!(pre.and_then(PreKind::from_name), Some(PreKind::Llama3 | PreKind::Tekken))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    fn split(kind: PreKind, text: &str) -> Vec<String> {
        let mut pts = PreTokenizedString::from(text);
        kind.pre_tokenizer().unwrap().pre_tokenize(&mut pts).unwrap();
        pts.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(s, _, _)| s.to_string())
            .collect()
    }

    #[test]
    fn names_map_to_kinds() {
        assert_eq!(PreKind::from_gguf(None), PreKind::Gpt2);
        assert_eq!(PreKind::from_gguf(Some("default")), PreKind::Gpt2);
        assert_eq!(PreKind::from_gguf(Some("llama-bpe")), PreKind::Llama3);
        assert_eq!(PreKind::from_gguf(Some("qwen2")), PreKind::Qwen2);
        assert_eq!(PreKind::from_gguf(Some("smollm")), PreKind::DigitsGpt2);
        // Mellum 2's and Minerva's: llama.cpp's StarCoder regexes.
        assert_eq!(PreKind::from_gguf(Some("mellum2")), PreKind::DigitsGpt2);
        assert_eq!(PreKind::from_gguf(Some("minerva")), PreKind::DigitsGpt2);
        assert_eq!(PreKind::from_gguf(Some("dbrx")), PreKind::Cl100k);
        assert_eq!(PreKind::from_gguf(Some("gpt-4o")), PreKind::Gpt4o);
        assert!(!PreKind::Cl100k.ignore_merges() && !PreKind::Gpt4o.ignore_merges());
        assert!(!bpe_adds_bos(Some("dbrx")) && !bpe_adds_bos(Some("gpt-4o")));
        assert_eq!(PreKind::from_gguf(Some("no-such-pre")), PreKind::Gpt2);
        assert!(bpe_adds_bos(Some("llama3")));
        assert_eq!(PreKind::from_gguf(Some("bailingmoe")), PreKind::StableLm2);
        assert!(!bpe_adds_bos(Some("bailingmoe")));
        assert!(!bpe_adds_bos(Some("qwen2")));
        // GLM's split is Llama 3's, its BOS llama.cpp's "none".
        assert_eq!(PreKind::from_gguf(Some("glm4")), PreKind::Llama3);
        assert_eq!(PreKind::from_gguf(Some("chatglm-bpe")), PreKind::Cl100k);
        assert!(!bpe_adds_bos(Some("glm4")) && !bpe_adds_bos(Some("chatglm-bpe")));
        assert!(!bpe_adds_bos(None));
    }

    /// DeepSeek-V3: digits by three, CJK runs apart, a punctuation mark joins the word after it;
    /// DeepSeek LLM: digit runs whole, a space joins the word after it, trailing spaces apart;
    /// Seed-Coder: single digits, contractions apart, punctuation without its line break.
    #[test]
    fn deepseek_and_seed_coder_splits() {
        assert_eq!(PreKind::from_gguf(Some("deepseek-v3")), PreKind::DeepSeek3);
        assert_eq!(PreKind::from_gguf(Some("deepseek-llm")), PreKind::DeepSeekLlm);
        assert_eq!(split(PreKind::DeepSeek3, "12345 ab.cd 日本語x"), ["123", "45", "Ġab", ".cd", "Ġ", "æĹ¥æľ¬èªŀ", "x"]);
        assert_eq!(split(PreKind::DeepSeekLlm, "12345 ab.cd  "), ["12345", "Ġab", ".", "cd", "ĠĠ"]);
        // Seed-Coder: single digits, contractions, punctuation without its line break.
        assert_eq!(PreKind::from_gguf(Some("seed-coder")), PreKind::SeedCoder);
        assert_eq!(split(PreKind::SeedCoder, "I'M 123;\n"), ["I", "'M", "Ġ", "1", "2", "3", ";", "Ċ"]);
    }

    /// Falcon: a run of punctuation (with `+=`) apart before GPT-2's split, so a contraction's
    /// apostrophe too; digits by three after it. BLOOM: words with their space, cut at its few
    /// punctuation marks, which stand alone.
    #[test]
    fn falcon_and_bloom_splits() {
        assert_eq!(PreKind::from_gguf(Some("falcon")), PreKind::Falcon);
        assert_eq!(split(PreKind::Falcon, "x+=12345; it's"), ["x", "+=", "123", "45", ";", "Ġit", "'", "s"]);
        assert!(!bpe_adds_bos(Some("falcon")));
        assert_eq!(PreKind::from_gguf(Some("bloom")), PreKind::Bloom);
        assert_eq!(split(PreKind::Bloom, "Hi, it's 12!"), ["Hi", ",", "Ġit's", "Ġ12", "!"]);
    }

    /// Jais 2: Llama 3's split, a long run of spaces before a word cut into pieces of powers of
    /// two (the last space staying with the word), a short one whole.
    #[test]
    fn jais2_cuts_runs_of_spaces_by_powers_of_two() {
        assert_eq!(PreKind::from_gguf(Some("jais-2")), PreKind::Jais2);
        assert!(!PreKind::Jais2.ignore_merges() && !bpe_adds_bos(Some("jais-2")));
        assert_eq!(split(PreKind::Jais2, "12345 It's"), ["123", "45", "ĠIt", "'s"]);
        // Eleven spaces then a word: 8, then 2, then the last one joins the word.
        let pieces = split(PreKind::Jais2, &format!("a{}b", " ".repeat(11)));
        assert_eq!(pieces, ["a", &"Ġ".repeat(8), "ĠĠ", "Ġb"]);
    }

    /// Qwen3.5 keeps a word's combining marks in it (Devanagari's vowel signs and virama, which
    /// no normalization composes); Qwen2's split leaves them apart.
    #[test]
    fn qwen35_keeps_combining_marks_in_words() {
        assert_eq!(PreKind::from_gguf(Some("qwen35")), PreKind::Qwen35);
        assert_eq!(split(PreKind::Qwen35, "हिन्दी ok").len(), 2);
        assert!(split(PreKind::Qwen2, "हिन्दी ok").len() > 2);
        assert_eq!(split(PreKind::Qwen35, "12 x"), ["1", "2", "Ġx"]);
    }

    #[test]
    fn digits_split_by_kind() {
        // Byte-level pieces: 'Ġ' is the space.
        assert_eq!(split(PreKind::Llama3, "12345 x"), ["123", "45", "Ġx"]);
        assert_eq!(split(PreKind::Qwen2, "12345"), ["1", "2", "3", "4", "5"]);
        assert_eq!(split(PreKind::Gpt2, "12345 x"), ["12345", "Ġx"]);
        assert_eq!(split(PreKind::DigitsGpt2, "a12 b"), ["a", "1", "2", "Ġb"]);
    }

    #[test]
    fn llama3_keeps_contractions_and_newlines_apart() {
        assert_eq!(
            split(PreKind::Llama3, "I'M here\n\n  ok"),
            ["I", "'M", "Ġhere", "ĊĊ", "Ġ", "Ġok"]
        );
        assert_eq!(split(PreKind::Gpt2, "I'M"), ["I", "'", "M"]);
    }

    #[test]
    fn gpt4o_splits_before_capitals_and_keeps_contractions_on_words() {
        assert_eq!(split(PreKind::Gpt4o, "HelloWorld's 12345"), ["Hello", "World's", "Ġ", "123", "45"]);
        assert_eq!(split(PreKind::Cl100k, "HelloWorld's 12345"), ["HelloWorld", "'s", "Ġ", "123", "45"]);
        assert_eq!(split(PreKind::Gpt4o, "a.\n/b"), ["a", ".Ċ/", "b"]);
        // Tekken: no contractions, single digits.
        assert_eq!(split(PreKind::Tekken, "HelloWorld's 123"), ["Hello", "World", "'s", "Ġ", "1", "2", "3"]);
        assert_eq!(PreKind::from_gguf(Some("tekken")), PreKind::Tekken);
        assert!(PreKind::Tekken.ignore_merges() && bpe_adds_bos(Some("tekken")));
    }
}
