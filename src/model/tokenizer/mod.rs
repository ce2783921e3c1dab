//! The model's tokenizer: text to ids and back, plus the special-token facts
//! generation needs (BOS, EOS, stop ids, whether to prepend BOS).
//!
//! [`Tokenizer`] wraps a `tokenizers::Tokenizer`, built one of two ways:
//! - [`Tokenizer::from_gguf_metadata`]: in code, from the GGUF's
//!   `tokenizer.ggml.*` keys: byte-level BPE for `"gpt2"` (`gguf_bpe`, the
//!   pre-tokenizer per `tokenizer.ggml.pre` in `pretokenizers`) or
//!   SentencePiece-style BPE for `"llama"` (`gguf_spm`), and for `"gemma4"` with the
//!   file's merges (`gguf_gemma4`), BERT's WordPiece for `"bert"` (`gguf_wpm`); for
//!   SentencePiece's Unigram (`"t5"`: XLM-RoBERTa's, bge-m3's) it decodes, and
//!   `gguf_ugm`'s own encoder turns text into ids as llama.cpp does;
//! - [`Tokenizer::from_file`]: a Hugging Face `tokenizer.json`.
//!
//! Invariants: both constructions of one vocabulary give the same ids and the
//! same text (tested in `tests/tokenizer.rs` against independently written
//! `tokenizer.json` files); [`Tokenizer::encode`] sees exactly the raw text
//! (special tokens in it recognised, the file's post-processor never adds
//! BOS/EOS), and BOS is prepended only when the caller asks; [`TokenStream`]
//! never emits part of a UTF-8 character and its pieces concatenate to the
//! decoded text (special tokens skipped).
//!
//! Counterpart: llama.cpp's `src/llama-vocab.cpp` (`llama_vocab::impl::load`,
//! `tokenize`, `token_to_piece`); HF's `convert_slow_tokenizer.py` converters.

mod gguf_bpe;
mod gguf_gemma4;
mod gguf_spm;
mod gguf_ugm;
mod gguf_wpm;
mod hf_config;
mod metadata;
mod pretokenizers;
mod special;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::gguf_file::Value;
use tokenizers::models::bpe::Vocab;

use self::hf_config::HfTokenizerConfig;
use self::metadata::{GgufVocab, SpecialKeys};
use self::special::Specials;
use super::ModelError;

pub use self::special::{FimTokens, END_OF_TURN_TOKENS, HARMONY_TOKENS, PRESERVED_TOKENS};

/// The `tokenizer.ggml.model` values hearth can build a tokenizer for.
pub const SUPPORTED_GGUF_MODELS: &[&str] = &["gpt2", "llama", "gemma4", "bert", "t5"];

/// A model's tokenizer plus the special-token facts generation needs.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos: Option<u32>,
    eos: Option<u32>,
    bos_text: Option<String>,
    eos_text: Option<String>,
    add_bos: bool,
    add_eos: bool,
    stop_ids: Vec<u32>,
    fim: FimTokens,
    vocab_size: usize,
    /// The special tokens of [`PRESERVED_TOKENS`] this vocabulary has (and in a harmony
    /// vocabulary, gpt-oss's, those of [`HARMONY_TOKENS`]): they decode as text.
    preserved: Vec<u32>,
    /// A Unigram vocabulary's encoder (`inner` then only decodes).
    unigram: Option<Arc<gguf_ugm::Unigram>>,
    pair: PairMarks,
}

/// What goes between and after two texts read as a pair (a reranker's query and document,
/// without a rerank template), as llama.cpp's server joins them: `eos` after each (where the
/// file adds EOS; the separator where it has no EOS), `sep` between them (where the file adds
/// the separator).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PairMarks {
    pub eos: Option<u32>,
    pub sep: Option<u32>,
}

impl Tokenizer {
    /// Builds the tokenizer from the GGUF's `tokenizer.ggml.*` metadata.
    pub fn from_gguf_metadata(md: &HashMap<String, Value>) -> Result<Self, ModelError> {
        let v = GgufVocab::read(md)?;
        let mut unigram = None;
        let (inner, default_add_bos) = match v.model.as_str() {
            "gpt2" => (gguf_bpe::build(&v)?, pretokenizers::bpe_adds_bos(v.pre.as_deref())),
            "llama" => (gguf_spm::build(&v)?, true),
            // llama.cpp adds BOS for Gemma 4 whatever the file says (early converters wrote
            // `add_bos_token` false): set below.
            "gemma4" => (gguf_gemma4::build(&v)?, true),
            "bert" => (gguf_wpm::build(&v)?, true),
            "t5" => {
                let (encoder, inner) = gguf_ugm::build(&v)?;
                unigram = Some(Arc::new(encoder));
                (inner, false)
            }
            other => {
                return Err(ModelError::Tokenizer(format!(
                    "{} is \"{other}\"; hearth supports: {}",
                    metadata::MODEL,
                    SUPPORTED_GGUF_MODELS.join(", ")
                )))
            }
        };
        let mut specials = Specials::from_gguf(&v.special, default_add_bos, &inner);
        match v.model.as_str() {
            "gemma4" => specials.add_bos = true,
            "bert" => gguf_wpm::specials(&v, &mut specials),
            // llama.cpp's defaults for a `t5` vocabulary: EOS 1, added after the text.
            "t5" => {
                if specials.eos.is_none() && v.tokens.len() > 1 {
                    specials.eos = Some(1);
                    specials.stop_ids.insert(0, 1);
                }
                specials.add_eos = v.special.add_eos.unwrap_or(true);
            }
            _ => {}
        }
        // llama.cpp's flags for a pair: its own defaults per vocabulary type (EOS added in
        // Unigram files, the separator in BERT's), where ours differ for BERT's embedding inputs.
        let sep = match v.model.as_str() {
            "bert" => specials.eos,
            _ => v.special.sep,
        };
        let eos = match v.model.as_str() {
            "bert" => v.special.eos,
            _ => specials.eos,
        }
        .or(sep);
        let pair = PairMarks {
            eos: eos.filter(|_| v.special.add_eos.unwrap_or(v.model == "t5")),
            sep: sep.filter(|_| v.special.add_sep.unwrap_or(v.model == "bert" || matches!(v.pre.as_deref(), Some("jina-v1-en" | "jina-v2-code" | "roberta-bpe")))),
        };
        let mut tok = Self::assemble(inner, specials, v.tokens.len());
        tok.unigram = unigram;
        tok.pair = pair;
        Ok(tok)
    }

    /// Loads a Hugging Face `tokenizer.json`. BOS/EOS/stop ids and `add_bos`
    /// come from the GGUF metadata `md` where given (and it names them), else
    /// from a `tokenizer_config.json` beside the file and the added tokens.
    pub fn from_file(path: &Path, md: Option<&HashMap<String, Value>>) -> Result<Self, ModelError> {
        let text = std::fs::read(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut inner = tokenizers::Tokenizer::from_bytes(&text)
            .map_err(|e| ModelError::Tokenizer(format!("{} is not a usable tokenizer.json: {e}", path.display())))?;
        inner
            .with_truncation(None)
            .map_err(|e| ModelError::Tokenizer(format!("{}: cannot turn truncation off: {e}", path.display())))?;
        inner.with_padding(None);
        let vocab_size = inner.get_vocab(true).values().max().map_or(0, |&m| m as usize + 1);

        let from_gguf = match md {
            Some(md) if md.contains_key(metadata::MODEL) || md.contains_key(metadata::EOS_ID) => {
                let keys = SpecialKeys::read(md, Some(vocab_size))?;
                let model = metadata::opt_str(md, metadata::MODEL)?;
                let pre = metadata::opt_str(md, metadata::PRE)?;
                let default_add_bos = match model.as_deref() {
                    Some("llama") => true,
                    Some(_) => pretokenizers::bpe_adds_bos(pre.as_deref()),
                    None => keys.bos.is_some(),
                };
                Some(Specials::from_gguf(&keys, default_add_bos, &inner))
            }
            _ => None,
        };
        let specials = from_gguf.unwrap_or_else(|| Specials::from_hf(&inner, &HfTokenizerConfig::beside(path)));
        Ok(Self::assemble(inner, specials, vocab_size))
    }

    fn assemble(inner: tokenizers::Tokenizer, s: Specials, vocab_size: usize) -> Self {
        let text = |id: Option<u32>| id.and_then(|id| inner.id_to_token(id));
        Self {
            bos_text: text(s.bos),
            eos_text: text(s.eos),
            bos: s.bos,
            eos: s.eos,
            add_bos: s.add_bos,
            add_eos: s.add_eos,
            stop_ids: s.stop_ids,
            fim: s.fim,
            vocab_size,
            preserved: PRESERVED_TOKENS
                .iter()
                .chain(if special::is_harmony(&inner) { HARMONY_TOKENS } else { &[] })
                .filter_map(|t| special::special_id(&inner, t))
                .collect(),
            inner,
            unigram: None,
            pair: PairMarks {
                eos: s.eos.filter(|_| s.add_eos),
                sep: None,
            },
        }
    }

    /// Token ids of `text` as the model sees the raw text: special tokens in
    /// it are recognised, nothing is added, except BOS first when `add_bos`
    /// and the vocabulary has one.
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, ModelError> {
        if let Some(unigram) = &self.unigram {
            let mut ids = Vec::with_capacity(text.len() / 3 + 2);
            if let (true, Some(bos)) = (add_bos, self.bos) {
                ids.push(bos);
            }
            ids.extend(unigram.encode(text)?);
            return Ok(ids);
        }
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| ModelError::Tokenizer(format!("cannot encode text: {e}")))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if let (true, Some(bos)) = (add_bos, self.bos) {
            ids.push(bos);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// The text of `ids`, special tokens included. Ids outside the vocabulary are skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| ModelError::Tokenizer(format!("cannot decode ids: {e}")))
    }

    /// The text of `ids` without special tokens (what a user should read), except those of
    /// [`PRESERVED_TOKENS`] (and harmony's [`HARMONY_TOKENS`]), which are written as their text.
    pub fn decode_skip_special(&self, ids: &[u32]) -> Result<String, ModelError> {
        let decode = |ids: &[u32], skip: bool| {
            self.inner
                .decode(ids, skip)
                .map_err(|e| ModelError::Tokenizer(format!("cannot decode ids: {e}")))
        };
        if !ids.iter().any(|id| self.preserved.contains(id)) {
            return decode(ids, true);
        }
        let mut text = String::new();
        for run in ids.split_inclusive(|id| self.preserved.contains(id)) {
            match run.split_last() {
                Some((last, before)) if self.preserved.contains(last) => {
                    text.push_str(&decode(before, true)?);
                    text.push_str(&decode(std::slice::from_ref(last), false)?);
                }
                _ => text.push_str(&decode(run, true)?),
            }
        }
        Ok(text)
    }

    /// Whether the model expects BOS before raw text (`tokenizer.ggml.add_bos_token`,
    /// else llama.cpp's default for the vocabulary type).
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether the file asks for EOS after raw text (`tokenizer.ggml.add_eos_token`), as an
    /// embedding model's does; llama.cpp adds it wherever it adds special tokens, hearth only to
    /// an embedding's input (a prompt to continue never ends in EOS here).
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Token ids of `text` as an embedding's input: BOS and EOS as the file says, as
    /// llama.cpp's server tokenizes `/v1/embeddings` inputs.
    pub fn encode_for_embedding(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        let mut ids = self.encode(text, self.add_bos)?;
        if let (true, Some(eos)) = (self.add_eos, self.eos) {
            ids.push(eos);
        }
        Ok(ids)
    }

    /// The marks around the second of two texts read as a pair ([`PairMarks`]).
    pub fn pair_marks(&self) -> PairMarks {
        self.pair
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// BOS as text, for chat templates (`bos_token`).
    pub fn bos_token(&self) -> Option<&str> {
        self.bos_text.as_deref()
    }

    /// EOS as text, for chat templates (`eos_token`).
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_text.as_deref()
    }

    /// Ids that end generation: EOS, EOT/EOM and end-of-turn control tokens.
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// The vocabulary's fill-in-the-middle tokens.
    pub fn fim(&self) -> FimTokens {
        self.fim
    }

    /// The id of a token given its text (added tokens included).
    /// The bytes token `id` stands for in text: a byte-fallback token (`<0x0A>`) its byte, a
    /// byte-level BPE token (GPT-2's alphabet) its bytes, a SentencePiece piece with `▁` as a
    /// space, a special token its text. Empty for an id outside the vocabulary. (OpenAI's
    /// `logprobs[].bytes`; a token may be part of a UTF-8 character.)
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        let Some(piece) = self.inner.id_to_token(id) else {
            return Vec::new();
        };
        if let Some(hex) = piece.strip_prefix("<0x").and_then(|p| p.strip_suffix('>')) {
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                return vec![b];
            }
        }
        let byte_level = matches!(
            self.inner.get_decoder(),
            Some(tokenizers::decoders::DecoderWrapper::ByteLevel(_))
        );
        if byte_level {
            let mut out = Vec::with_capacity(piece.len());
            for c in piece.chars() {
                match gpt2_byte(c) {
                    Some(b) => out.push(b),
                    None => out.extend_from_slice(c.to_string().as_bytes()),
                }
            }
            return out;
        }
        piece.replace('\u{2581}', " ").into_bytes()
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The id of `text` if it is a special token (one decoding leaves out).
    pub fn special_token_id(&self, text: &str) -> Option<u32> {
        special::special_id(&self.inner, text)
    }

    /// Number of token ids (largest id + 1); for a GGUF, the length of `tokenizer.ggml.tokens`.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The wrapped Hugging Face tokenizer.
    pub fn hf(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// An incremental detokenizer for streaming; special tokens are skipped.
    pub fn stream(&self) -> TokenStream<'_> {
        TokenStream {
            tok: self,
            state: Detokenizer::default(),
        }
    }
}

/// A text → id map with the first id of each text (GGUF lists may repeat a text).
fn token_vocab(tokens: &[String]) -> Vocab {
    let mut vocab = Vocab::with_capacity(tokens.len());
    for (id, t) in tokens.iter().enumerate() {
        vocab.entry(t.clone()).or_insert(id as u32);
    }
    if vocab.len() != tokens.len() {
        tracing::debug!(
            "{} duplicate token texts in the vocabulary; the first id of each is used",
            tokens.len() - vocab.len()
        );
    }
    vocab
}

/// Turns generated ids into text pieces as they arrive, holding back partial UTF-8.
///
/// Each piece is the growth of the decoded text of a short window of recent
/// ids, so decoders that look at neighbours (SentencePiece's leading-space
/// strip) stay right; a piece is emitted only when the text does not end in
/// an incomplete character (tokenizers' `DecodeStream` algorithm).
///
/// It holds no reference to the tokenizer, so a long-lived sequence can own
/// one; each call takes the tokenizer. [`TokenStream`] bundles the two.
#[derive(Debug, Clone, Default)]
pub struct Detokenizer {
    ids: Vec<u32>,
    prefix: String,
    prefix_index: usize,
}

impl Detokenizer {
    /// Adds one id; returns the new text, or `None` while it is held back.
    ///
    /// tokenizers' `step_decode_stream`, except where the window's text no longer starts with
    /// what was already sent: SentencePiece's byte fallback decodes a run of byte tokens
    /// together, and when a byte joins a run that then is not UTF-8, every byte of it becomes
    /// U+FFFD, including bytes sent before as characters (a lone `<0x1C>`, then `<0x80>`).
    /// tokenizers returns an error there, which would end the reply; here the sent text stays
    /// as it was and the ids not yet sent are decoded on their own (as llama.cpp, which turns
    /// each token into its bytes, sends the valid byte and replaces the stray one).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<Option<String>, ModelError> {
        self.ids.push(id);
        let text = tok.decode_skip_special(&self.ids)?;
        if text.len() <= self.prefix.len() || text.ends_with('\u{FFFD}') {
            return Ok(None);
        }
        let new_text = match text.strip_prefix(self.prefix.as_str()) {
            Some(rest) => rest.to_string(),
            None => tok.decode_skip_special(&self.ids[self.prefix_index..])?,
        };
        let unsent = self.ids.len() - self.prefix_index;
        self.ids.drain(..self.prefix_index);
        self.prefix = tok.decode_skip_special(&self.ids)?;
        self.prefix_index = unsent;
        Ok(Some(new_text))
    }

    /// Ends the stream: returns held-back text (an incomplete character becomes U+FFFD).
    pub fn finish(self, tok: &Tokenizer) -> Result<Option<String>, ModelError> {
        let text = tok.decode_skip_special(&self.ids)?;
        Ok(match text.strip_prefix(self.prefix.as_str()) {
            Some(rest) if !rest.is_empty() => Some(rest.to_string()),
            _ => None,
        })
    }
}

/// A [`Detokenizer`] bound to its tokenizer.
pub struct TokenStream<'a> {
    tok: &'a Tokenizer,
    state: Detokenizer,
}

impl TokenStream<'_> {
    /// Adds one id; returns the new text, or `None` while it is held back.
    pub fn push(&mut self, id: u32) -> Result<Option<String>, ModelError> {
        self.state.push(self.tok, id)
    }

    /// Ends the stream: returns held-back text (an incomplete character becomes U+FFFD).
    pub fn finish(self) -> Result<Option<String>, ModelError> {
        self.state.finish(self.tok)
    }
}

/// The byte GPT-2's byte-level alphabet writes as `c`: printable bytes are themselves, the other
/// 68 (0–32, 127–160, 173) are `U+0100 + n` in that order.
fn gpt2_byte(c: char) -> Option<u8> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let c = c as u32;
    if c < 256 {
        return printable(c).then_some(c as u8);
    }
    let n = c.checked_sub(256)?;
    (0u32..256).filter(|&b| !printable(b)).nth(n as usize).map(|b| b as u8)
}

#[cfg(test)]
mod tests {

    /// GPT-2's byte-level alphabet: 256 characters, one per byte (`Ġ` a space, `Ċ` a newline).
    #[test]
    fn the_byte_level_alphabet_covers_every_byte_once() {
        let bytes: std::collections::BTreeSet<u8> =
            (0u32..400).filter_map(char::from_u32).filter_map(gpt2_byte).collect();
        assert_eq!(bytes.len(), 256);
        assert_eq!(gpt2_byte('\u{120}'), Some(b' '));
        assert_eq!(gpt2_byte('\u{10a}'), Some(b'\n'));
        assert_eq!(gpt2_byte('a'), Some(b'a'));
        assert_eq!(gpt2_byte(' '), None);
    }

    use super::*;
    use crate::model::testkit::{TinyVocab, VocabStyle};

    fn md(v: &TinyVocab) -> HashMap<String, Value> {
        v.metadata.iter().cloned().collect()
    }

    fn styles() -> [VocabStyle; 4] {
        [
            VocabStyle::Gpt2 { pre: "llama-bpe" },
            VocabStyle::Gpt2 { pre: "qwen2" },
            VocabStyle::Gpt2 { pre: "gpt-2" },
            VocabStyle::LlamaSpm,
        ]
    }

    #[test]
    fn every_style_round_trips_text() {
        for style in styles() {
            let tok = Tokenizer::from_gguf_metadata(&md(&TinyVocab::new(style))).unwrap();
            for text in [
                "Hello, world!",
                "naïve café 日本 🎉",
                "  two  spaces\tand\n\nlines  ",
                "x = 3.14159;",
            ] {
                let ids = tok.encode(text, false).unwrap();
                assert_eq!(tok.decode(&ids).unwrap(), text, "{style:?}");
            }
        }
    }

    #[test]
    fn bos_is_prepended_only_when_asked() {
        let tok = Tokenizer::from_gguf_metadata(&md(&TinyVocab::new(VocabStyle::LlamaSpm))).unwrap();
        assert!(tok.add_bos());
        assert_eq!(tok.bos_token(), Some("<s>"));
        assert_eq!(tok.eos_token(), Some("</s>"));
        let plain = tok.encode("hi there", false).unwrap();
        let with = tok.encode("hi there", true).unwrap();
        assert_eq!(with[0], 1);
        assert_eq!(&with[1..], &plain[..]);
        assert_ne!(plain[0], 1);
    }

    #[test]
    fn unsupported_model_names_the_supported_ones() {
        let mut m = md(&TinyVocab::new(VocabStyle::LlamaSpm));
        // (RWKV's trie-based "world" vocabularies.)
        m.insert(metadata::MODEL.into(), Value::String("rwkv".into()));
        let err = Tokenizer::from_gguf_metadata(&m).unwrap_err().to_string();
        assert!(
            err.contains("rwkv") && err.contains("gpt2") && err.contains("llama") && err.contains("bert") && err.contains("t5"),
            "{err}"
        );
    }

    #[test]
    fn spm_without_space_prefix_keeps_text_as_is() {
        let mut m = md(&TinyVocab::new(VocabStyle::LlamaSpm));
        m.insert(metadata::ADD_SPACE_PREFIX.into(), Value::Bool(false));
        let tok = Tokenizer::from_gguf_metadata(&m).unwrap();
        let ids = tok.encode("the cat", false).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), "the cat");
        let first = tok.decode(&ids[..1]).unwrap();
        assert!(!first.starts_with(' '), "{first:?}");
        let with_prefix = Tokenizer::from_gguf_metadata(&md(&TinyVocab::new(VocabStyle::LlamaSpm))).unwrap();
        assert_ne!(with_prefix.encode("the cat", false).unwrap(), ids);
    }

    #[test]
    fn spm_without_byte_tokens_is_an_error() {
        let mut m = md(&TinyVocab::new(VocabStyle::LlamaSpm));
        let Some(Value::Array(tokens)) = m.get_mut(metadata::TOKENS) else {
            panic!("no tokens")
        };
        tokens[3 + 0x41] = Value::String("not-a-byte".into());
        let err = Tokenizer::from_gguf_metadata(&m).unwrap_err().to_string();
        assert!(err.contains("<0x41>"), "{err}");
    }

    #[test]
    fn stream_holds_back_partial_characters_and_flushes_on_finish() {
        let tok = Tokenizer::from_gguf_metadata(&md(&TinyVocab::new(VocabStyle::LlamaSpm))).unwrap();
        // "🦀" is not in the tiny vocabulary: four byte-fallback tokens.
        let ids = tok.encode("🦀", false).unwrap();
        let crab: Vec<u32> = ids.iter().copied().filter(|&id| (3..259).contains(&id)).collect();
        assert_eq!(crab.len(), 4, "{ids:?}");
        let mut s = tok.stream();
        for &id in &ids[..ids.len() - 1] {
            let piece = s.push(id).unwrap();
            assert!(piece.as_deref().is_none_or(|p| !p.contains('\u{FFFD}')), "{piece:?}");
        }
        assert_eq!(
            s.finish().unwrap().as_deref().map(|p| p.ends_with('\u{FFFD}')),
            Some(true)
        );
    }

    /// A byte sent as a character, then a byte that makes its run invalid UTF-8: the stream goes
    /// on (tokenizers' own stream gives an "invalid prefix" error here).
    #[test]
    fn stream_survives_a_byte_run_that_turns_invalid() {
        let tok = Tokenizer::from_gguf_metadata(&md(&TinyVocab::new(VocabStyle::LlamaSpm))).unwrap();
        let byte = |b: u32| 3 + b;
        let dot = tok.encode(".", false).unwrap();
        let mut s = tok.stream();
        let mut out = String::new();
        for id in [byte(0x1C), byte(0x80)].into_iter().chain(dot.iter().copied()) {
            out.extend(s.push(id).unwrap());
        }
        out.extend(s.finish().unwrap());
        assert_eq!(out.chars().next(), Some('\u{1C}'), "{out:?}");
        assert!(out.contains('\u{FFFD}') && out.ends_with('.'), "{out:?}");
        assert_eq!(tok.decode(&[byte(0x1C), byte(0x80)]).unwrap(), "\u{FFFD}\u{FFFD}");
    }
}
