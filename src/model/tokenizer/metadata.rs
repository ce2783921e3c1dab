//! Typed reading of the GGUF `tokenizer.ggml.*` keys.
//!
//! Owns: turning the loose `gguf_file::Value`s into a [`GgufVocab`] whose
//! arrays all have one entry per token, with errors that name the key
//! (`MissingMetadata` when absent, `BadMetadata` when mistyped or inconsistent).
//! Special-token ids outside the vocabulary are dropped with a warning, as
//! llama.cpp does, rather than failing the load.
//!
//! Counterpart: the key table and `llama_vocab::impl::load` in llama.cpp's
//! `src/llama-vocab.cpp` (`LLM_KV_TOKENIZER_*`).

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use super::special::TokenType;
use crate::model::ModelError;

pub(crate) const MODEL: &str = "tokenizer.ggml.model";
pub(crate) const PRE: &str = "tokenizer.ggml.pre";
pub(crate) const TOKENS: &str = "tokenizer.ggml.tokens";
pub(crate) const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
pub(crate) const SCORES: &str = "tokenizer.ggml.scores";
pub(crate) const MERGES: &str = "tokenizer.ggml.merges";
pub(crate) const BOS_ID: &str = "tokenizer.ggml.bos_token_id";
pub(crate) const EOS_ID: &str = "tokenizer.ggml.eos_token_id";
pub(crate) const UNK_ID: &str = "tokenizer.ggml.unknown_token_id";
pub(crate) const PAD_ID: &str = "tokenizer.ggml.padding_token_id";
pub(crate) const EOT_ID: &str = "tokenizer.ggml.eot_token_id";
pub(crate) const EOM_ID: &str = "tokenizer.ggml.eom_token_id";
/// Fill-in-the-middle tokens (llama.cpp's `LLM_KV_TOKENIZER_FIM_*_ID`).
pub(crate) const FIM_PRE_ID: &str = "tokenizer.ggml.fim_pre_token_id";
pub(crate) const FIM_SUF_ID: &str = "tokenizer.ggml.fim_suf_token_id";
pub(crate) const FIM_MID_ID: &str = "tokenizer.ggml.fim_mid_token_id";
pub(crate) const FIM_PAD_ID: &str = "tokenizer.ggml.fim_pad_token_id";
pub(crate) const FIM_REP_ID: &str = "tokenizer.ggml.fim_rep_token_id";
pub(crate) const FIM_SEP_ID: &str = "tokenizer.ggml.fim_sep_token_id";
/// The older names of the first three (CodeLlama's files).
pub(crate) const PREFIX_ID: &str = "tokenizer.ggml.prefix_token_id";
pub(crate) const SUFFIX_ID: &str = "tokenizer.ggml.suffix_token_id";
pub(crate) const MIDDLE_ID: &str = "tokenizer.ggml.middle_token_id";
pub(crate) const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
pub(crate) const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
/// Whether a pair of texts (a reranker's query and document) has the separator between them.
pub(crate) const ADD_SEP: &str = "tokenizer.ggml.add_sep_token";
pub(crate) const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
/// BERT's `[SEP]` (the key's spelling is llama.cpp's).
pub(crate) const SEP_ID: &str = "tokenizer.ggml.seperator_token_id";
pub(crate) const NORMALIZER_LOWERCASE: &str = "tokenizer.ggml.normalizer.lowercase";
pub(crate) const NORMALIZER_STRIP_ACCENTS: &str = "tokenizer.ggml.normalizer.strip_accents";
/// A Unigram (`t5`) vocabulary's compiled normalization rules, SentencePiece's bytes.
pub(crate) const PRECOMPILED_CHARSMAP: &str = "tokenizer.ggml.precompiled_charsmap";
/// Whether a Unigram vocabulary's normalizer merges runs of spaces and drops them at the ends.
pub(crate) const REMOVE_EXTRA_WHITESPACES: &str = "tokenizer.ggml.remove_extra_whitespaces";
/// The file's architecture, by which llama.cpp sets some tokens' attributes (`<mask>`'s
/// left strip in nomic-embed-text-v2-moe's and jina-embeddings-v3's vocabularies).
pub(crate) const ARCHITECTURE: &str = "general.architecture";
/// The model's name, by which llama.cpp sets some tokens' attributes too (`[MASK]`'s left
/// strip where it names ModernBERT as `modern-bert`).
pub(crate) const NAME: &str = "general.name";

type Metadata = HashMap<String, Value>;

/// The special ids and flags of a GGUF vocabulary; each `None` when absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SpecialKeys {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    /// BERT's separator (`[SEP]`), which ends its encodings.
    pub sep: Option<u32>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_sep: Option<bool>,
    /// The fill-in-the-middle tokens the file names (others are found by their text).
    pub fim: super::special::FimTokens,
}

impl SpecialKeys {
    /// Reads the special keys; ids `>= n_tokens` are warned about and dropped.
    pub fn read(md: &Metadata, n_tokens: Option<usize>) -> Result<Self, ModelError> {
        let id = |key: &str| -> Result<Option<u32>, ModelError> {
            let Some(id) = opt_u32(md, key)? else { return Ok(None) };
            match n_tokens {
                Some(n) if id as usize >= n => {
                    tracing::warn!("{key} = {id} is outside the vocabulary of {n} tokens; ignoring it");
                    Ok(None)
                }
                _ => Ok(Some(id)),
            }
        };
        Ok(Self {
            bos: id(BOS_ID)?,
            eos: id(EOS_ID)?,
            unk: id(UNK_ID)?,
            pad: id(PAD_ID)?,
            eot: id(EOT_ID)?,
            eom: id(EOM_ID)?,
            sep: id(SEP_ID)?,
            add_bos: opt_bool(md, ADD_BOS)?,
            add_eos: opt_bool(md, ADD_EOS)?,
            add_sep: opt_bool(md, ADD_SEP)?,
            fim: super::special::FimTokens {
                pre: id(FIM_PRE_ID)?.or(id(PREFIX_ID)?),
                suf: id(FIM_SUF_ID)?.or(id(SUFFIX_ID)?),
                mid: id(FIM_MID_ID)?.or(id(MIDDLE_ID)?),
                pad: id(FIM_PAD_ID)?,
                rep: id(FIM_REP_ID)?,
                sep: id(FIM_SEP_ID)?,
            },
        })
    }
}

/// Everything `tokenizer.ggml.*` says about one vocabulary.
#[derive(Debug, Clone)]
pub(crate) struct GgufVocab {
    /// `tokenizer.ggml.model`: "gpt2" or "llama" (others are rejected later).
    pub model: String,
    /// `tokenizer.ggml.pre`, the pre-tokenizer name (gpt2 only).
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    /// One per token; all `Normal` when the key is absent.
    pub types: Vec<TokenType>,
    /// One per token when present (llama).
    pub scores: Option<Vec<f32>>,
    /// Raw `"left right"` merge strings (gpt2).
    pub merges: Option<Vec<String>>,
    pub special: SpecialKeys,
    pub add_space_prefix: Option<bool>,
    /// BERT's normalizer: lowercase the text, strip its accents (`bert` vocabularies).
    pub normalizer_lowercase: Option<bool>,
    pub normalizer_strip_accents: Option<bool>,
    /// A Unigram vocabulary's `precompiled_charsmap` (`t5` vocabularies).
    pub precompiled_charsmap: Option<Vec<u8>>,
    pub remove_extra_whitespaces: Option<bool>,
    /// `general.architecture`, where the metadata given has it.
    pub architecture: Option<String>,
    /// `general.name`, where the metadata given has it.
    pub name: Option<String>,
}

impl GgufVocab {
    pub fn read(md: &Metadata) -> Result<Self, ModelError> {
        let model = req(md, MODEL).and_then(|v| as_str(v, MODEL))?.to_string();
        let pre = opt_str(md, PRE)?;
        let tokens = str_array(req(md, TOKENS)?, TOKENS)?;
        if tokens.is_empty() {
            return Err(bad(TOKENS, "the token list is empty"));
        }
        let n = tokens.len();
        let types = match md.get(TOKEN_TYPE) {
            None => vec![TokenType::Normal; n],
            Some(v) => {
                let codes = int_array(v, TOKEN_TYPE)?;
                check_len(TOKEN_TYPE, codes.len(), n)?;
                codes.into_iter().map(TokenType::from_code).collect()
            }
        };
        let scores = match md.get(SCORES) {
            None => None,
            Some(v) => {
                let s = f32_array(v, SCORES)?;
                check_len(SCORES, s.len(), n)?;
                Some(s)
            }
        };
        let merges = md.get(MERGES).map(|v| str_array(v, MERGES)).transpose()?;
        Ok(Self {
            model,
            pre,
            special: SpecialKeys::read(md, Some(n))?,
            add_space_prefix: opt_bool(md, ADD_SPACE_PREFIX)?,
            normalizer_lowercase: opt_bool(md, NORMALIZER_LOWERCASE)?,
            normalizer_strip_accents: opt_bool(md, NORMALIZER_STRIP_ACCENTS)?,
            precompiled_charsmap: md.get(PRECOMPILED_CHARSMAP).map(|v| byte_array(v, PRECOMPILED_CHARSMAP)).transpose()?,
            remove_extra_whitespaces: opt_bool(md, REMOVE_EXTRA_WHITESPACES)?,
            architecture: opt_str(md, ARCHITECTURE)?,
            name: opt_str(md, NAME)?,
            tokens,
            types,
            scores,
            merges,
        })
    }
}

pub(crate) fn bad(key: &str, reason: impl Into<String>) -> ModelError {
    ModelError::BadMetadata {
        key: key.to_string(),
        reason: reason.into(),
    }
}

fn check_len(key: &str, got: usize, want: usize) -> Result<(), ModelError> {
    if got == want {
        Ok(())
    } else {
        Err(bad(key, format!("has {got} entries but {TOKENS} has {want}")))
    }
}

fn req<'a>(md: &'a Metadata, key: &str) -> Result<&'a Value, ModelError> {
    md.get(key)
        .ok_or_else(|| ModelError::MissingMetadata { key: key.to_string() })
}

fn type_name(v: &Value) -> String {
    format!("{:?}", v.value_type())
}

fn as_str<'a>(v: &'a Value, key: &str) -> Result<&'a str, ModelError> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(bad(key, format!("expected a string, found {}", type_name(other)))),
    }
}

pub(crate) fn opt_str(md: &Metadata, key: &str) -> Result<Option<String>, ModelError> {
    md.get(key).map(|v| as_str(v, key).map(str::to_string)).transpose()
}

fn opt_bool(md: &Metadata, key: &str) -> Result<Option<bool>, ModelError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(bad(key, format!("expected a bool, found {}", type_name(other)))),
    }
}

/// Any integer type, as long as the value fits in `u32`.
fn opt_u32(md: &Metadata, key: &str) -> Result<Option<u32>, ModelError> {
    let Some(v) = md.get(key) else { return Ok(None) };
    let wide = as_i64(v).ok_or_else(|| bad(key, format!("expected an integer, found {}", type_name(v))))?;
    u32::try_from(wide)
        .map(Some)
        .map_err(|_| bad(key, format!("{wide} is not a valid token id")))
}

fn as_i64(v: &Value) -> Option<i64> {
    Some(match v {
        Value::U8(x) => i64::from(*x),
        Value::I8(x) => i64::from(*x),
        Value::U16(x) => i64::from(*x),
        Value::I16(x) => i64::from(*x),
        Value::U32(x) => i64::from(*x),
        Value::I32(x) => i64::from(*x),
        Value::U64(x) => i64::try_from(*x).ok()?,
        Value::I64(x) => *x,
        _ => return None,
    })
}

fn array<'a>(v: &'a Value, key: &str) -> Result<&'a [Value], ModelError> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(bad(key, format!("expected an array, found {}", type_name(other)))),
    }
}

fn str_array(v: &Value, key: &str) -> Result<Vec<String>, ModelError> {
    array(v, key)?
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Ok(s.clone()),
            other => Err(bad(key, format!("entry {i} is {}, not a string", type_name(other)))),
        })
        .collect()
}

fn int_array(v: &Value, key: &str) -> Result<Vec<i64>, ModelError> {
    array(v, key)?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            as_i64(item).ok_or_else(|| bad(key, format!("entry {i} is {}, not an integer", type_name(item))))
        })
        .collect()
}

/// An array of `u8` or `i8` (llama.cpp takes either for a byte blob), as bytes.
fn byte_array(v: &Value, key: &str) -> Result<Vec<u8>, ModelError> {
    array(v, key)?
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::U8(x) => Ok(*x),
            Value::I8(x) => Ok(x.to_le_bytes()[0]),
            other => Err(bad(key, format!("entry {i} is {}, not a byte", type_name(other)))),
        })
        .collect()
}

fn f32_array(v: &Value, key: &str) -> Result<Vec<f32>, ModelError> {
    array(v, key)?
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::F32(x) => Ok(*x),
            Value::F64(x) => Ok(*x as f32),
            other => Err(bad(key, format!("entry {i} is {}, not a float", type_name(other)))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(entries: Vec<(&str, Value)>) -> Metadata {
        entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn strings(items: &[&str]) -> Value {
        Value::Array(items.iter().map(|s| Value::String(s.to_string())).collect())
    }

    #[test]
    fn reads_a_minimal_vocab() {
        let m = md(vec![
            (MODEL, Value::String("gpt2".into())),
            (TOKENS, strings(&["a", "b", "ab"])),
            (MERGES, strings(&["a b"])),
            (BOS_ID, Value::I32(2)),
            (EOS_ID, Value::U64(1)),
            (ADD_BOS, Value::Bool(false)),
        ]);
        let v = GgufVocab::read(&m).unwrap();
        assert_eq!(v.tokens.len(), 3);
        assert_eq!(v.types, vec![TokenType::Normal; 3]);
        assert_eq!(v.special.bos, Some(2));
        assert_eq!(v.special.eos, Some(1));
        assert_eq!(v.special.add_bos, Some(false));
        assert_eq!(v.merges.as_deref(), Some(&["a b".to_string()][..]));
    }

    #[test]
    fn errors_name_the_key() {
        let missing = GgufVocab::read(&md(vec![(MODEL, Value::String("gpt2".into()))])).unwrap_err();
        assert!(
            matches!(&missing, ModelError::MissingMetadata { key } if key == TOKENS),
            "{missing}"
        );

        let wrong = GgufVocab::read(&md(vec![
            (MODEL, Value::String("gpt2".into())),
            (TOKENS, Value::U32(3)),
        ]))
        .unwrap_err();
        assert!(
            matches!(&wrong, ModelError::BadMetadata { key, .. } if key == TOKENS),
            "{wrong}"
        );

        let short = GgufVocab::read(&md(vec![
            (MODEL, Value::String("llama".into())),
            (TOKENS, strings(&["a", "b"])),
            (SCORES, Value::Array(vec![Value::F32(0.0)])),
        ]))
        .unwrap_err();
        assert!(short.to_string().contains(SCORES), "{short}");

        let neg = SpecialKeys::read(&md(vec![(BOS_ID, Value::I32(-1))]), None).unwrap_err();
        assert!(neg.to_string().contains(BOS_ID), "{neg}");
    }

    #[test]
    fn out_of_range_special_ids_are_dropped() {
        let keys = SpecialKeys::read(&md(vec![(EOS_ID, Value::U32(10)), (BOS_ID, Value::U32(1))]), Some(3)).unwrap();
        assert_eq!(keys.eos, None);
        assert_eq!(keys.bos, Some(1));
    }
}
