//! Special tokens: the GGUF token types, which tokens become `AddedToken`s,
//! and the facts generation needs (BOS, EOS, whether to add BOS, stop ids).
//!
//! Invariants: every control (type 3) and unknown (type 2) token is a *special*
//! added token and every user-defined (type 4) token a non-special one, all
//! with `normalized = false`, so their literal text in a prompt encodes to
//! their single id (llama.cpp's `tokenizer_st_partition` matches raw text the
//! same way); where llama.cpp's load makes a token take the whitespace beside it
//! (by the file's name or architecture: [`Strips`]), the added token strips the
//! same side. Stop ids are deduplicated and start with EOS, EOT, EOM.
//!
//! Counterpart: llama.cpp's `llama_token_attr` handling and its "auto-detect
//! EOT/EOG tokens by text" block in `src/llama-vocab.cpp`; HF's
//! `added_tokens` with `special` flags.

use tokenizers::AddedToken;

use super::hf_config::HfTokenizerConfig;
use super::metadata::{GgufVocab, SpecialKeys};

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
/// token out): `<think>` and `</think>` where a vocabulary makes them special, the reasoning
/// markers of Mistral's thinking models (Magistral, Ministral 3 Reasoning), Seed-OSS's reasoning
/// and call markers, LFM2's call marks, Cohere's reasoning and call marks, MiniMax-M2's call
/// wrapper and the marks around Nemotron Nano 2's, Apriel's and Apertus's lists of calls, which
/// are special tokens in their vocabularies, as llama.cpp's `preserved_tokens` keep them.
pub const PRESERVED_TOKENS: &[&str] = &[
    // The reasoning's tags (`chat::reasoning`), wherever they are special tokens.
    "<think>",
    "</think>",
    "[THINK]",
    "[/THINK]",
    // Seed-OSS's reasoning and call markers.
    "<seed:think>",
    "</seed:think>",
    "<seed:tool_call>",
    "</seed:tool_call>",
    // LFM2's call marks (a reply's calls are read between them: `chat::lfm2`).
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    // Cohere's reasoning and call marks (`chat::reasoning`, `chat::cohere`).
    "<|START_THINKING|>",
    "<|END_THINKING|>",
    "<|START_ACTION|>",
    "<|END_ACTION|>",
    // MiniMax-M2's call wrapper (`chat::minimax_xml`).
    "<minimax:tool_call>",
    "</minimax:tool_call>",
    // The marks around Nemotron Nano 2's, Apriel's and Apertus's lists of calls (`chat::json_list`).
    "<TOOLCALL>",
    "</TOOLCALL>",
    "<tool_calls>",
    "</tool_calls>",
    "<|tools_prefix|>",
    "<|tools_suffix|>",
    // DeepSeek's call marks (`chat::deepseek`).
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    // Apertus's deliberation (`chat::reasoning`).
    "<|inner_prefix|>",
    "<|inner_suffix|>",
];

/// The special tokens of OpenAI's harmony format (gpt-oss) that a reply's text keeps, in a
/// vocabulary that is harmony's (`is_harmony`): a reply is a sequence of messages whose
/// headers and ends are these, which the reply's parser reads (`chat::reasoning`,
/// `chat::tools`), as llama.cpp's `preserved_tokens` for gpt-oss keep them.
pub const HARMONY_TOKENS: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|constrain|>"];

/// Harmony's stops: the end of the reply (`<|return|>`) and of a tool call (`<|call|>`). In a
/// vocabulary that has both, `<|end|>` only ends one message of the reply and stops nothing
/// (llama.cpp drops it from its end-of-generation tokens the same way).
const HARMONY_RETURN: &str = "<|return|>";
const HARMONY_CALL: &str = "<|call|>";
const HARMONY_END: &str = "<|end|>";

/// Whether `inner`'s vocabulary is harmony's: `<|return|>` and `<|call|>` are special tokens.
pub(super) fn is_harmony(inner: &tokenizers::Tokenizer) -> bool {
    special_id(inner, HARMONY_RETURN).is_some() && special_id(inner, HARMONY_CALL).is_some()
}

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
    // Harmony (gpt-oss): the end of the reply and of a tool call (see `HARMONY_END`).
    HARMONY_RETURN,
    HARMONY_CALL,
    // GLM-4: a tool call ends with it (its `generation_config.json` lists it beside
    // `<|endoftext|>` and `<|user|>`, which GGUF files carry as EOS and EOT).
    "<|observation|>",
    // Gemma 4: the end of a turn.
    "<turn|>",
    // MiniMax-M2: the end of a turn (its EOS).
    "[e~[",
];

/// Gemma 4's mark after its tool calls: the model waits there for the results (llama.cpp ends
/// generation at it). Its vocabulary types it user-defined, not control, so it stops whatever
/// its type.
const GEMMA4_CALLS_END: &str = "<|tool_response>";

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
fn added_tokens(tokens: &[String], types: &[TokenType]) -> Vec<AddedToken> {
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

/// The added tokens of a GGUF vocabulary, in id order, each taking the whitespace beside it
/// where llama.cpp's load says so ([`Strips`]).
pub(crate) fn gguf_added_tokens(v: &GgufVocab) -> Vec<AddedToken> {
    let strips = Strips::of(v);
    added_tokens(&v.tokens, &v.types)
        .into_iter()
        .map(|t| {
            let (left, right) = (strips.lstrips(&t.content), strips.rstrips(&t.content));
            t.lstrip(left).rstrip(right)
        })
        .collect()
}

/// Which special tokens take the whitespace beside them with them, whatever the vocabulary's
/// model: llama.cpp's `llama_vocab::load` sets `LLAMA_TOKEN_ATTR_LSTRIP` and `_RSTRIP` by the
/// file's pre-tokenizer, architecture and name (GGUF stores no such attributes), and its
/// `tokenizer_st_partition` then drops the whitespace (C's `isspace`) to the token's left or right.
/// The Unigram encoder strips the same ([`C_SPACE`]); the tokenizers built on Hugging Face's
/// `tokenizers` strip through its `AddedToken`s, which take Unicode whitespace too (a no-break
/// space after the token: dropped there, kept by llama.cpp).
/// The rules, in llama.cpp's order (the first that applies):
/// - `<mask>` strips left in jina-embeddings-v2's German, Spanish and code vocabularies and in
///   `nomic-bert-moe` and `jina-bert-v3` files;
/// - where the name says `phi-3` or `phi3` (any case), every control, user-defined and unknown
///   token strips right except `<unk>`, `<s>` and `<|endoftext|>` (and `</s>` does): Phi-3's
///   `<|user|>\n` is one token, as in its `tokenizer.json`;
/// - `[MASK]` strips left where the name says `modern-bert`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Strips {
    /// The one token that strips left, where the vocabulary has it.
    lstrip: Option<&'static str>,
    /// Phi-3's rule: the special tokens strip right.
    phi3: bool,
}

/// The tokens Phi-3's rule leaves alone.
const PHI3_NO_RSTRIP: [&str; 3] = ["<unk>", "<s>", "<|endoftext|>"];

impl Strips {
    pub fn of(v: &GgufVocab) -> Self {
        let pre = v.pre.as_deref().unwrap_or_default();
        let arch = v.architecture.as_deref().unwrap_or_default();
        let name = v.name.as_deref().unwrap_or_default().to_lowercase();
        let has = |text: &'static str| v.tokens.iter().any(|t| t == text).then_some(text);
        let mask = ["jina-v2-de", "jina-v2-es", "jina-v2-code"].iter().any(|p| pre.contains(p))
            || ["nomic-bert-moe", "jina-bert-v3"].iter().any(|a| arch.contains(a));
        if mask {
            Self { lstrip: has("<mask>"), phi3: false }
        } else if name.contains("phi-3") || name.contains("phi3") {
            Self { lstrip: None, phi3: true }
        } else if name.contains("modern-bert") {
            Self { lstrip: has("[MASK]"), phi3: false }
        } else {
            Self::default()
        }
    }

    /// Whether the special token `text` takes the whitespace to its left.
    pub fn lstrips(&self, text: &str) -> bool {
        self.lstrip == Some(text)
    }

    /// Whether the special token `text` takes the whitespace to its right.
    pub fn rstrips(&self, text: &str) -> bool {
        self.phi3 && !PHI3_NO_RSTRIP.contains(&text)
    }
}

/// C's `isspace` in the "C" locale: the whitespace llama.cpp's partition strips.
pub(crate) const C_SPACE: [char; 6] = [' ', '\t', '\n', '\u{b}', '\u{c}', '\r'];

/// A vocabulary's fill-in-the-middle tokens: the prefix, suffix and middle marks a code
/// model's infill prompt is made of, and the pad, repository and file marks that end a
/// reply (llama.cpp's `fim_*` ids). Each `None` where the vocabulary has none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FimTokens {
    pub pre: Option<u32>,
    pub suf: Option<u32>,
    pub mid: Option<u32>,
    pub pad: Option<u32>,
    pub rep: Option<u32>,
    pub sep: Option<u32>,
}

/// The texts each fill-in-the-middle token goes by, as llama.cpp looks for them when the file
/// names none (Qwen's, StarCoder's and Granite's, DeepSeek's, CodeLlama's, GLM-4.5's,
/// Falcon-H1's).
const FIM_PRE_TEXTS: &[&str] = &["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"];
const FIM_SUF_TEXTS: &[&str] = &["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"];
const FIM_MID_TEXTS: &[&str] = &["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

impl FimTokens {
    /// `named` (the file's ids), each missing one found by its texts in `inner`'s vocabulary.
    pub(crate) fn find(named: FimTokens, inner: &tokenizers::Tokenizer) -> Self {
        let by_text = |id: Option<u32>, texts: &[&str]| id.or_else(|| texts.iter().find_map(|t| inner.token_to_id(t)));
        Self {
            pre: by_text(named.pre, FIM_PRE_TEXTS),
            suf: by_text(named.suf, FIM_SUF_TEXTS),
            mid: by_text(named.mid, FIM_MID_TEXTS),
            pad: by_text(named.pad, FIM_PAD_TEXTS),
            rep: by_text(named.rep, FIM_REP_TEXTS),
            sep: by_text(named.sep, FIM_SEP_TEXTS),
        }
    }

    /// The prefix, suffix and middle marks, where the vocabulary has all three.
    pub fn marks(&self) -> Option<(u32, u32, u32)> {
        Some((self.pre?, self.suf?, self.mid?))
    }
}

/// What generation needs to know about special tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Specials {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    /// `tokenizer.ggml.add_eos_token`: EOS after raw text, where the file says so (an
    /// embedding model's, such as Qwen3-Embedding's; read for embeddings only).
    pub add_eos: bool,
    pub stop_ids: Vec<u32>,
    pub fim: FimTokens,
}

impl Specials {
    /// From GGUF keys; `default_add_bos` applies when `add_bos_token` is absent.
    pub fn from_gguf(keys: &SpecialKeys, default_add_bos: bool, inner: &tokenizers::Tokenizer) -> Self {
        let fim = FimTokens::find(keys.fim, inner);
        Self {
            bos: keys.bos,
            eos: keys.eos,
            add_bos: keys.add_bos.unwrap_or(default_add_bos),
            add_eos: keys.add_eos.unwrap_or(false),
            stop_ids: stop_ids([keys.eos, keys.eot, keys.eom], fim, inner),
            fim,
        }
    }

    /// From a `tokenizer.json` alone: names in `tokenizer_config.json`, else well-known texts.
    pub fn from_hf(inner: &tokenizers::Tokenizer, config: &HfTokenizerConfig) -> Self {
        let by_names = |names: &[&str]| names.iter().find_map(|n| special_id(inner, n));
        let named = |name: &Option<String>| name.as_deref().and_then(|n| inner.token_to_id(n));
        let bos = named(&config.bos_token).or_else(|| by_names(BOS_NAMES));
        let eos = named(&config.eos_token).or_else(|| by_names(EOS_NAMES));
        let add_bos = config.add_bos_token.unwrap_or_else(|| post_processor_adds(inner, bos));
        let fim = FimTokens::find(FimTokens::default(), inner);
        Self {
            bos,
            eos,
            add_bos,
            add_eos: false,
            stop_ids: stop_ids([eos], fim, inner),
            fim,
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

/// `explicit` ids first, then special added tokens named in [`END_OF_TURN_TOKENS`], then the
/// fill-in-the-middle pad, repository and file marks (which end a reply in llama.cpp too),
/// deduplicated; in a harmony vocabulary without `<|end|>`, which ends a message of the reply,
/// not the reply.
fn stop_ids<const N: usize>(explicit: [Option<u32>; N], fim: FimTokens, inner: &tokenizers::Tokenizer) -> Vec<u32> {
    let not_a_stop = is_harmony(inner).then(|| special_id(inner, HARMONY_END)).flatten();
    let mut named: Vec<u32> = inner
        .get_added_tokens_decoder()
        .iter()
        .filter(|(_, t)| (t.special && END_OF_TURN_TOKENS.contains(&t.content.as_str())) || t.content == GEMMA4_CALLS_END)
        .map(|(id, _)| *id)
        .collect();
    named.sort_unstable();
    let mut out = Vec::new();
    let fim_ends = [fim.pad, fim.rep, fim.sep].into_iter().flatten();
    for id in explicit.into_iter().flatten().chain(named).chain(fim_ends) {
        if !out.contains(&id) && Some(id) != not_a_stop {
            out.push(id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::models::bpe::{Vocab, BPE};

    /// llama.cpp's strips, one rule for every vocabulary: `<mask>` strips left by pre-tokenizer
    /// or architecture; by a Phi-3 name every special token but `<unk>`, `<s>` and
    /// `<|endoftext|>` strips right; `[MASK]` strips left by a `modern-bert` name (not a Phi-3
    /// one); a token the vocabulary lacks strips nothing.
    #[test]
    fn the_strips_follow_llama_cpps_rules() {
        use candle_core::quantized::gguf_file::Value;
        let strips = |kv: &[(&str, &str)], tokens: &[&str]| {
            let tokens = tokens.iter().map(|t| Value::String(t.to_string())).collect();
            let mut md: std::collections::HashMap<String, Value> = kv.iter().map(|(k, v)| (k.to_string(), Value::String(v.to_string()))).collect();
            md.insert("tokenizer.ggml.model".into(), Value::String("gpt2".into()));
            md.insert("tokenizer.ggml.tokens".into(), Value::Array(tokens));
            Strips::of(&GgufVocab::read(&md).unwrap())
        };
        let masks = ["a", "<mask>", "[MASK]", "<|user|>"];
        let left = |s: Strips| masks.iter().copied().find(|t| s.lstrips(t));
        assert_eq!(left(strips(&[("tokenizer.ggml.pre", "jina-v2-code")], &masks)), Some("<mask>"));
        assert_eq!(left(strips(&[("general.architecture", "nomic-bert-moe")], &masks)), Some("<mask>"));
        assert_eq!(left(strips(&[("general.name", "Hearth-Tiny-Modern-BERT")], &masks)), Some("[MASK]"));
        assert_eq!(left(strips(&[("general.name", "Hearth-Tiny-Modern-BERT")], &["a", "<mask>"])), None);
        assert_eq!(left(strips(&[("general.name", "phi-3 modern-bert")], &masks)), None);
        assert_eq!(left(strips(&[("general.name", "ModernBERT Base"), ("tokenizer.ggml.pre", "modern-bert")], &masks)), None);
        assert_eq!(left(strips(&[("general.architecture", "bert")], &masks)), None);
        assert!(!strips(&[("general.architecture", "bert")], &masks).rstrips("<|user|>"));

        for name in ["Phi-3-mini-4k-instruct", "Phi3", "phi-3.5 mini", "PHI3 Medium"] {
            let s = strips(&[("general.name", name)], &masks);
            assert!(s.rstrips("<|user|>") && s.rstrips("<|end|>") && s.rstrips("</s>"), "{name}");
            for kept in ["<unk>", "<s>", "<|endoftext|>"] {
                assert!(!s.rstrips(kept), "{name}: {kept}");
            }
            assert_eq!(left(s), None, "{name}");
        }
        // Phi-4's name, and a Phi-3 name where the `<mask>` rule comes first, strip nothing right.
        assert!(!strips(&[("general.name", "Phi 4 Mini Instruct")], &masks).rstrips("<|user|>"));
        assert!(!strips(&[("general.name", "phi3"), ("general.architecture", "jina-bert-v3")], &masks).rstrips("<|user|>"));
    }

    /// The added tokens carry the strips as Hugging Face's `tokenizer.json` would: Phi-3's
    /// `<|user|>\n` encodes to the one token, the newline gone, where a Llama-named vocabulary
    /// keeps it.
    #[test]
    fn added_tokens_carry_the_strips() {
        use candle_core::quantized::gguf_file::Value;
        let texts = ["a", "\n", "<s>", "<|user|>", "<|endoftext|>"];
        let md = |name: &str| {
            let mut md = std::collections::HashMap::new();
            md.insert("general.name".to_string(), Value::String(name.into()));
            md.insert("tokenizer.ggml.model".into(), Value::String("gpt2".into()));
            md.insert("tokenizer.ggml.tokens".into(), Value::Array(texts.iter().map(|t| Value::String(t.to_string())).collect()));
            md.insert("tokenizer.ggml.token_type".into(), Value::Array([1, 1, 3, 3, 3].map(Value::I32).to_vec()));
            GgufVocab::read(&md).unwrap()
        };
        let summary = |name: &str| -> Vec<(String, bool)> {
            gguf_added_tokens(&md(name)).into_iter().map(|t| (t.content.clone(), t.rstrip)).collect()
        };
        let phi3 = summary("Phi-3-mini-4k-instruct");
        assert_eq!(phi3, [("<s>".into(), false), ("<|user|>".into(), true), ("<|endoftext|>".into(), false)]);
        assert!(summary("Llama 2 7B").iter().all(|(_, r)| !r));
        let vocab: Vocab = texts.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
        let encode = |name: &str, text: &str| {
            let mut tok = tokenizers::Tokenizer::new(BPE::builder().vocab_and_merges(vocab.clone(), vec![]).build().unwrap());
            tok.add_tokens(gguf_added_tokens(&md(name))).expect("the tokens are added");
            tok.encode(text, false).unwrap().get_ids().to_vec()
        };
        assert_eq!(encode("Phi-3-mini-4k-instruct", "<|user|>\na<|endoftext|>\n"), [3, 0, 4, 1]);
        assert_eq!(encode("Llama 2 7B", "<|user|>\na<|endoftext|>\n"), [3, 1, 0, 4, 1]);
    }

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
        tok.add_tokens(added_tokens(&texts, &types)).expect("the tokens are added");
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
    fn fim_tokens_are_the_files_else_found_by_text_and_their_ends_stop() {
        let vocab: Vocab = ["a", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<|endoftext|>"]
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let tok = tokenizers::Tokenizer::new(BPE::builder().vocab_and_merges(vocab, vec![]).build().unwrap());
        let found = FimTokens::find(FimTokens::default(), &tok);
        assert_eq!(found.marks(), Some((1, 2, 3)));
        assert_eq!((found.pad, found.rep, found.sep), (Some(4), Some(5), Some(6)));
        // The file's ids win.
        let named = FimTokens::find(FimTokens { pre: Some(7), ..FimTokens::default() }, &tok);
        assert_eq!(named.pre, Some(7));
        let keys = SpecialKeys {
            eos: Some(7),
            ..SpecialKeys::default()
        };
        let s = Specials::from_gguf(&keys, false, &tok);
        assert_eq!(s.stop_ids, vec![7, 4, 5, 6], "EOS, then the pad, repository and file marks");
        assert_eq!(FimTokens::find(FimTokens::default(), &toy()).marks(), None);
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

    /// A harmony vocabulary (gpt-oss's: `<|return|>` and `<|call|>`) stops on those and not on
    /// `<|end|>`, even where the file names it; elsewhere `<|end|>` stops (Phi-3's).
    #[test]
    fn harmony_stops_on_return_and_call_not_end() {
        let vocab = |texts: &[&str]| {
            let v: Vocab = texts.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
            let mut tok = tokenizers::Tokenizer::new(BPE::builder().vocab_and_merges(v, vec![]).build().unwrap());
            let owned: Vec<String> = texts.iter().map(|s| s.to_string()).collect();
            let types: Vec<TokenType> = texts.iter().map(|_| TokenType::Control).collect();
            tok.add_tokens(added_tokens(&owned, &types)).expect("the tokens are added");
            tok
        };
        let harmony = vocab(&["<|endoftext|>", "<|return|>", "<|end|>", "<|call|>", "<|channel|>"]);
        assert!(is_harmony(&harmony));
        let keys = SpecialKeys {
            eos: Some(1),
            eot: Some(2),
            ..Default::default()
        };
        assert_eq!(Specials::from_gguf(&keys, false, &harmony).stop_ids, vec![1, 0, 3]);
        let phi = vocab(&["<|endoftext|>", "<|end|>", "<|user|>"]);
        assert!(!is_harmony(&phi));
        assert_eq!(Specials::from_gguf(&SpecialKeys::default(), false, &phi).stop_ids, vec![0, 1]);
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
