//! SentencePiece's Unigram model (`tokenizer.ggml.model = "t5"`, llama.cpp's UGM): the
//! vocabulary of XLM-RoBERTa and the embedding and reranking models built on it (bge-m3,
//! multilingual-e5, bge-reranker-v2-m3), and T5's.
//!
//! Owns the text → ids half of such a vocabulary, as llama.cpp's `llm_tokenizer_ugm` does it:
//! 1. the text is cut at special tokens (control, user-defined and unknown tokens' texts, the
//!    longest first), which become their ids; in nomic-embed-text-v2-moe's and
//!    jina-embeddings-v3's vocabularies the whitespace before `<mask>` goes with it (the left
//!    strip llama.cpp gives that token by the file's architecture);
//! 2. each other piece is normalized by the file's `precompiled_charsmap` (SentencePiece's
//!    compiled normalization rules: an XOR-compressed double array over UTF-8 bytes and the
//!    replacement strings, applied to the longest match at each point; a user-defined token's
//!    text passes unchanged), spaces become `▁`, runs of them one and a `▁` goes before
//!    the first word (or before every word where `remove_extra_whitespaces`);
//! 3. a Viterbi pass over the normalized bytes picks the split with the highest sum of the
//!    pieces' scores (user-defined pieces score 0; a character no piece covers is the unknown
//!    token at the lowest normal score − 10, and a run of them one unknown token).
//!
//! The ids → text half is the `tokenizers::Tokenizer` [`build`] returns (a word-level model of
//! the same pieces, SentencePiece's decoder), which the rest of [`super::Tokenizer`] uses as for
//! every other vocabulary; `tokenizers`' own Unigram model would split some texts otherwise
//! (its normalizer looks charsmap entries up per grapheme, not per longest prefix).
//!
//! Invariants: the ids are llama.cpp's (`tests/tokenizer.rs` compares them with SentencePiece's
//! own and llama.cpp's on a vocabulary SentencePiece trained, charsmap included); a corrupt
//! charsmap is an error at load (its header) or at encoding (an index out of its bounds), never
//! a read outside it.
//!
//! Counterpart: llama.cpp's `llm_tokenizer_ugm` and `llm_tokenizer_ugm_session` in
//! `src/llama-vocab.cpp`; SentencePiece's `normalizer.cc` and `unigram_model.cc`
//! (`EncodeOptimized`).

use std::collections::HashMap;

use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::wordlevel::WordLevel;

use super::metadata::{self, GgufVocab};
use super::special::{self, TokenType};
use crate::model::ModelError;

/// SentencePiece's visible space (U+2581), which stands for a space in pieces.
const SPACE: &str = "\u{2581}";
/// How far below the lowest normal piece's score an unknown character scores.
const UNKNOWN_PENALTY: f64 = 10.0;
/// llama.cpp's default unknown id for a `t5` vocabulary whose file names none.
const DEFAULT_UNK: u32 = 2;

/// The encoder of a Unigram vocabulary.
#[derive(Debug)]
pub(super) struct Unigram {
    /// Normal, user-defined and unused pieces (llama.cpp's `token_matcher`).
    pieces: ByteTrie,
    /// User-defined pieces, which normalization leaves as they are.
    user_defined: ByteTrie,
    /// Each token's score in the Viterbi pass (user-defined ones 0).
    scores: Vec<f64>,
    unk: u32,
    unk_score: f64,
    charsmap: Option<Charsmap>,
    add_space_prefix: bool,
    remove_extra_whitespaces: bool,
    /// Control, user-defined and unknown tokens' texts with their ids, longest first.
    specials: Vec<(String, u32)>,
    /// Which special tokens take the whitespace beside them (llama.cpp's
    /// `LLAMA_TOKEN_ATTR_LSTRIP` and `_RSTRIP`).
    strips: special::Strips,
}

/// The text → ids model and the `tokenizers::Tokenizer` that decodes the same ids.
pub(super) fn build(v: &GgufVocab) -> Result<(Unigram, tokenizers::Tokenizer), ModelError> {
    let n = v.tokens.len();
    let scores = v.scores.as_ref().ok_or_else(|| ModelError::MissingMetadata {
        key: metadata::SCORES.to_string(),
    })?;
    let unk = match v.special.unk {
        Some(id) => id,
        None if (DEFAULT_UNK as usize) < n => DEFAULT_UNK,
        None => {
            return Err(ModelError::Tokenizer(format!(
                "the Unigram vocabulary of {n} tokens names no unknown token ({})",
                metadata::UNK_ID
            )))
        }
    };
    let mut pieces = ByteTrie::default();
    let mut user_defined = ByteTrie::default();
    let mut min_score = f64::INFINITY;
    for (id, (text, ty)) in v.tokens.iter().zip(&v.types).enumerate() {
        let id = id as u32;
        if matches!(ty, TokenType::Normal | TokenType::UserDefined | TokenType::Unused) {
            pieces.insert(text.as_bytes(), id);
        }
        match ty {
            TokenType::Normal => min_score = min_score.min(f64::from(scores[id as usize])),
            TokenType::UserDefined => user_defined.insert(text.as_bytes(), id),
            _ => {}
        }
    }
    if !min_score.is_finite() {
        // (No normal piece at all: llama.cpp's FLT_MAX start.)
        min_score = f64::from(f32::MAX);
    }
    let mut specials: Vec<(String, u32)> = v
        .tokens
        .iter()
        .zip(&v.types)
        .enumerate()
        .filter(|(_, (t, ty))| {
            !t.is_empty() && matches!(ty, TokenType::Control | TokenType::UserDefined | TokenType::Unknown)
        })
        .map(|(id, (t, _))| (t.clone(), id as u32))
        .collect();
    specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
    let add_space_prefix = v.add_space_prefix.unwrap_or(true);
    let unigram = Unigram {
        pieces,
        user_defined,
        scores: v
            .types
            .iter()
            .zip(scores)
            .map(|(ty, &s)| {
                if *ty == TokenType::UserDefined {
                    0.0
                } else {
                    f64::from(s)
                }
            })
            .collect(),
        unk,
        unk_score: min_score - UNKNOWN_PENALTY,
        charsmap: v.precompiled_charsmap.as_deref().map(Charsmap::parse).transpose()?,
        add_space_prefix,
        remove_extra_whitespaces: v.remove_extra_whitespaces.unwrap_or(false),
        strips: special::Strips::of(v),
        specials,
    };
    Ok((unigram, decoder_tokenizer(v, unk, add_space_prefix)?))
}

/// A word-level model of the pieces (for ids ↔ texts), SentencePiece's decoder, the special
/// tokens added: what [`super::Tokenizer`] decodes with.
fn decoder_tokenizer(v: &GgufVocab, unk: u32, add_space_prefix: bool) -> Result<tokenizers::Tokenizer, ModelError> {
    let mut vocab: HashMap<String, u32> = HashMap::with_capacity(v.tokens.len());
    for (id, t) in v.tokens.iter().enumerate() {
        vocab.entry(t.clone()).or_insert(id as u32);
    }
    let unk_text = v.tokens.get(unk as usize).cloned().unwrap_or_default();
    let model = WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token(unk_text)
        .build()
        .map_err(|e| ModelError::Tokenizer(format!("cannot build the Unigram vocabulary's decoder: {e}")))?;
    let mut tok = tokenizers::Tokenizer::new(model);
    let decoder: DecoderWrapper = super::gguf_spm::decoder(add_space_prefix)?;
    tok.with_decoder(Some(decoder));
    tok.add_tokens(special::gguf_added_tokens(v))
        .map_err(|e| ModelError::Tokenizer(format!("cannot add the special tokens: {e}")))?;
    Ok(tok)
}

impl Unigram {
    /// The ids of `text`, special tokens' texts in it recognised; nothing added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        let mut out = Vec::new();
        for fragment in self.partition(text) {
            match fragment {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(t) => self.tokenize(t.as_bytes(), &mut out)?,
            }
        }
        Ok(out)
    }

    /// `text` cut at the special tokens' texts, each special token in turn (the longest first)
    /// over the pieces not yet cut, as llama.cpp's `tokenizer_st_partition`.
    fn partition<'t>(&self, text: &'t str) -> Vec<Fragment<'t>> {
        let mut fragments = vec![Fragment::Text(text)];
        for (special, id) in &self.specials {
            if !text.contains(special.as_str()) {
                continue;
            }
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for f in fragments {
                let Fragment::Text(mut rest) = f else {
                    next.push(f);
                    continue;
                };
                while let Some(at) = rest.find(special.as_str()) {
                    let mut left = &rest[..at];
                    if self.strips.lstrips(special) {
                        left = left.trim_end_matches(special::C_SPACE);
                    }
                    if !left.is_empty() {
                        next.push(Fragment::Text(left));
                    }
                    next.push(Fragment::Token(*id));
                    rest = &rest[at + special.len()..];
                    if self.strips.rstrips(special) {
                        rest = rest.trim_start_matches(special::C_SPACE);
                    }
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            fragments = next;
        }
        fragments
    }

    /// Appends the ids of one piece of text without special tokens: normalized, then the best
    /// split by the pieces' scores.
    fn tokenize(&self, text: &[u8], out: &mut Vec<u32>) -> Result<(), ModelError> {
        let normalized = self.normalize(text)?;
        let len = normalized.len();
        if len == 0 {
            return Ok(());
        }
        // best[i]: the best split of normalized[..i]: its last token, where that token starts,
        // the split's score.
        let mut best = vec![(self.unk, 0usize, f64::MIN); len + 1];
        best[0].2 = 0.0;
        let mut start = 0;
        while start < len {
            let char_len = utf8_len(normalized[start]).min(len - start);
            let base = best[start].2;
            let mut whole_char_piece = false;
            let mut node = self.pieces.child(ByteTrie::ROOT, normalized[start]);
            let mut end = start + 1;
            while let Some(n) = node {
                if let Some(id) = self.pieces.value(n) {
                    if end - start == char_len {
                        whole_char_piece = true;
                    }
                    let score = base + self.scores.get(id as usize).copied().unwrap_or(0.0);
                    if score > best[end].2 {
                        best[end] = (id, start, score);
                    }
                }
                if end == len {
                    break;
                }
                node = self.pieces.child(n, normalized[end]);
                end += 1;
            }
            if !whole_char_piece {
                let end = start + char_len;
                let score = base + self.unk_score;
                if score > best[end].2 {
                    best[end] = (self.unk, start, score);
                }
            }
            start += char_len;
        }
        // Back from the end, a run of unknown tokens as one.
        let first = out.len();
        let mut at = len;
        let mut prev_unknown = false;
        loop {
            let (id, from, _) = best[at];
            let unknown = id == self.unk;
            if !(prev_unknown && unknown) {
                out.push(id);
            }
            if from == 0 {
                break;
            }
            prev_unknown = unknown;
            at = from;
        }
        out[first..].reverse();
        Ok(())
    }

    /// SentencePiece's normalization as llama.cpp does it: each longest prefix replaced by the
    /// charsmap's string for it, spaces escaped as `▁` (runs merged and ends dropped where
    /// `remove_extra_whitespaces`), a `▁` before the first word where `add_space_prefix`.
    fn normalize(&self, input: &[u8]) -> Result<Vec<u8>, ModelError> {
        let mut out = Vec::with_capacity(input.len() * 3);
        let merge = self.remove_extra_whitespaces;
        let mut space_prepended = false;
        let mut in_word = false;
        let mut at = 0;
        while at < input.len() {
            let (replacement, consumed) = self.normalize_prefix(input, at)?;
            for &c in replacement {
                if c != b' ' {
                    if !in_word {
                        in_word = true;
                        if (self.add_space_prefix && !space_prepended) || merge {
                            out.extend_from_slice(SPACE.as_bytes());
                            space_prepended = true;
                        }
                    }
                    out.push(c);
                } else {
                    in_word = false;
                    if !merge {
                        out.extend_from_slice(SPACE.as_bytes());
                    }
                }
            }
            at += consumed.max(1);
        }
        Ok(out)
    }

    /// What the text at `at` becomes and how many of its bytes that consumes: a user-defined
    /// token's text as it is, else the charsmap's longest match, else one character as it is
    /// (a byte that starts none: U+FFFD).
    fn normalize_prefix<'a>(&'a self, input: &'a [u8], at: usize) -> Result<(&'a [u8], usize), ModelError> {
        let rest = &input[at..];
        let user = self.user_defined.longest_path(rest);
        if user > 0 {
            return Ok((&rest[..user], user));
        }
        if let Some(map) = &self.charsmap {
            if let Some((replacement, consumed)) = map.longest_match(rest)? {
                return Ok((replacement, consumed));
            }
        }
        Ok(match utf8_char_len(rest) {
            Some(n) => (&rest[..n], n),
            None => ("\u{FFFD}".as_bytes(), 1),
        })
    }
}

/// A piece of text between special tokens, or one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

/// Bytes a UTF-8 sequence takes by its first byte (1 for a continuation byte), as llama.cpp's
/// `unicode_len_utf8`.
fn utf8_len(first: u8) -> usize {
    const LEN: [usize; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LEN[usize::from(first >> 4)]
}

/// The length of the UTF-8 sequence `bytes` starts with, if it starts one (llama.cpp's
/// `unicode_cpt_from_utf8` check: the first byte's form, then continuation bytes present).
fn utf8_char_len(bytes: &[u8]) -> Option<usize> {
    let first = *bytes.first()?;
    let n = match first {
        0x00..=0x7F => 1,
        _ if first & 0xE0 == 0xC0 => 2,
        _ if first & 0xF0 == 0xE0 => 3,
        _ if first & 0xF8 == 0xF0 => 4,
        _ => return None,
    };
    let cont = bytes.get(1..n)?;
    cont.iter().all(|b| b & 0xC0 == 0x80).then_some(n)
}

/// A trie over bytes: node 0 is the root; edges in one map keyed by (node, byte).
#[derive(Debug, Default)]
struct ByteTrie {
    edges: HashMap<(u32, u8), u32>,
    /// Each node's token id, if a token ends there (the last inserted, as llama.cpp's).
    values: Vec<Option<u32>>,
}

impl ByteTrie {
    const ROOT: u32 = 0;

    fn insert(&mut self, key: &[u8], id: u32) {
        if self.values.is_empty() {
            self.values.push(None);
        }
        let mut node = Self::ROOT;
        for &b in key {
            let next = self.values.len() as u32;
            node = *self.edges.entry((node, b)).or_insert(next);
            if node == next {
                self.values.push(None);
            }
        }
        self.values[node as usize] = Some(id);
    }

    fn child(&self, node: u32, b: u8) -> Option<u32> {
        self.edges.get(&(node, b)).copied()
    }

    fn value(&self, node: u32) -> Option<u32> {
        self.values.get(node as usize).copied().flatten()
    }

    /// How many bytes of `key` the trie has a path for, whether or not a token ends there
    /// (llama.cpp's `naive_trie::get_longest_prefix`, which its UGM normalizer uses as is).
    fn longest_path(&self, key: &[u8]) -> usize {
        if self.edges.is_empty() {
            return 0;
        }
        let mut node = Self::ROOT;
        for (i, &b) in key.iter().enumerate() {
            match self.child(node, b) {
                Some(n) => node = n,
                None => return i,
            }
        }
        key.len()
    }
}

/// SentencePiece's `precompiled_charsmap`: a little-endian `u32` byte length, that many bytes
/// of the XOR-compressed compact double array (one bit-packed `u32` per node), then the
/// NUL-terminated replacement strings the array's leaves point into.
#[derive(Debug)]
struct Charsmap {
    nodes: Vec<u32>,
    replacements: Vec<u8>,
}

impl Charsmap {
    fn parse(blob: &[u8]) -> Result<Self, ModelError> {
        let bad = |reason: String| metadata::bad(metadata::PRECOMPILED_CHARSMAP, reason);
        let header: [u8; 4] = blob
            .get(..4)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| bad(format!("is {} bytes, shorter than its 4-byte header", blob.len())))?;
        let array_len = u32::from_le_bytes(header) as usize;
        let array = blob.get(4..4usize.saturating_add(array_len)).ok_or_else(|| {
            bad(format!(
                "says its array is {array_len} bytes, but {} follow",
                blob.len() - 4
            ))
        })?;
        if !array_len.is_multiple_of(4) {
            return Err(bad(format!(
                "says its array is {array_len} bytes, not a whole number of 4-byte nodes"
            )));
        }
        Ok(Self {
            nodes: array
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            replacements: blob[4 + array_len..].to_vec(),
        })
    }

    fn node(&self, index: u32) -> Result<u32, ModelError> {
        self.nodes.get(index as usize).copied().ok_or_else(|| {
            metadata::bad(
                metadata::PRECOMPILED_CHARSMAP,
                format!("points to node {index} of {}", self.nodes.len()),
            )
        })
    }

    fn base(packed: u32) -> u32 {
        (packed >> 10) << ((packed & (1 << 9)) >> 6)
    }

    /// The replacement for the longest prefix of `input` the array has, and that prefix's length.
    fn longest_match(&self, input: &[u8]) -> Result<Option<(&[u8], usize)>, ModelError> {
        if self.nodes.is_empty() {
            return Ok(None);
        }
        let mut found = None;
        let mut index = Self::base(self.node(0)?);
        for (i, &c) in input.iter().enumerate() {
            if c == 0 {
                break;
            }
            index ^= u32::from(c);
            let packed = self.node(index)?;
            // LCHECK (the low byte, and the top bit, set on value nodes) must be the byte.
            if packed & ((1 << 31) | 0xFF) != u32::from(c) {
                break;
            }
            let leaf = (packed >> 8) & 1 == 1;
            index ^= Self::base(packed);
            if leaf {
                found = Some((i + 1, self.node(index)? & ((1 << 31) - 1)));
            }
        }
        let Some((consumed, offset)) = found else {
            return Ok(None);
        };
        let tail = self
            .replacements
            .get(offset as usize..)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                metadata::bad(
                    metadata::PRECOMPILED_CHARSMAP,
                    format!("points to replacement {offset} of {} bytes", self.replacements.len()),
                )
            })?;
        let end = tail.iter().position(|&b| b == 0).ok_or_else(|| {
            metadata::bad(
                metadata::PRECOMPILED_CHARSMAP,
                format!("has an unterminated replacement at {offset}"),
            )
        })?;
        Ok(Some((&tail[..end], consumed)))
    }
}

#[cfg(test)]
mod tests;
