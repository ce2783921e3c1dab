//! The model's vocabulary as `llguidance` sees it: each token id's bytes in a token trie.
//!
//! Ordinary tokens are their text's bytes ([`Tokenizer::token_bytes`]); special tokens are
//! their text behind the `0xFF` marker byte (`toktrie`'s convention), so no grammar over text
//! can produce them, and the end-of-sequence set is the tokenizer's stop ids.

use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::model::tokenizer::Tokenizer;

use super::GrammarError;

/// A [`TokenizerEnv`] over our tokenizer.
pub(super) struct Vocabulary {
    trie: TokTrie,
    tokenizer: Tokenizer,
}

impl Vocabulary {
    /// The trie of `tok`'s `vocab_size` ids.
    pub(super) fn new(tok: &Tokenizer) -> Result<Self, GrammarError> {
        let n = tok.vocab_size();
        let stop = tok.stop_ids();
        let eos = stop
            .first()
            .copied()
            .or(tok.eos_id())
            .ok_or_else(|| GrammarError::Vocabulary("the tokenizer names no end-of-sequence token".into()))?;
        let specials = tok.hf().get_added_tokens_decoder();
        let mut words = Vec::with_capacity(n);
        for id in 0..n as u32 {
            let bytes = match specials.get(&id) {
                Some(added) if added.special => {
                    let mut b = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    b.extend_from_slice(added.content.as_bytes());
                    b
                }
                _ => tok.token_bytes(id),
            };
            words.push(bytes);
        }
        let mut info = TokRxInfo::new(n as u32, eos);
        info.tok_bos = tok.bos_id();
        let mut eos_ids: Vec<TokenId> = stop.iter().copied().filter(|&id| (id as usize) < n).collect();
        if eos_ids.is_empty() {
            eos_ids.push(eos);
        }
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos_ids);
        Ok(Self {
            trie,
            tokenizer: tok.clone(),
        })
    }

    /// The tokens that are nothing but ASCII whitespace (spaces, tabs, line breaks), with their
    /// lengths in bytes, in id order. Special tokens never are.
    pub(super) fn blank_tokens(&self) -> Vec<(TokenId, u8)> {
        (0..self.trie.vocab_size() as TokenId)
            .filter_map(|id| {
                let bytes = self.trie.token(id);
                let blank = !bytes.is_empty() && bytes.iter().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
                blank.then(|| (id, u8::try_from(bytes.len()).unwrap_or(u8::MAX)))
            })
            .collect()
    }
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // The grammar's literals: text through the tokenizer, bytes that are not UTF-8 by the
        // trie's greedy match.
        self.trie
            .tokenize_with_greedy_fallback(s, |text| self.tokenizer.encode(text, false).unwrap_or_default())
    }
}
