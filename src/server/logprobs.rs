//! `logprobs` in OpenAI's two shapes: the chat's `{"content": [{token, logprob, bytes,
//! top_logprobs}]}` and the legacy completions' `{tokens, token_logprobs, top_logprobs,
//! text_offset}`, built from the engine's [`TokenLogprob`]s, whole or per streamed chunk.
//!
//! Counterpart: vLLM's `_create_chat_logprobs` / `_create_completion_logprobs`
//! (`serving_chat.py`, `serving_completion.py`); like vLLM, `-inf` is written as `-9999.0`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::engine::{EngineHandle, TokenLogprob};

use super::protocol::Kind;

/// What JSON can hold for a log-probability of zero probability.
const FLOOR: f32 = -9999.0;

fn finite(lp: f32) -> f32 {
    if lp.is_finite() {
        lp
    } else {
        FLOOR
    }
}

/// One token as the chat shape writes it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChatLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// A choice's `logprobs`, in the route's shape.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum Logprobs {
    Chat {
        content: Vec<ChatLogprob>,
    },
    Text {
        tokens: Vec<String>,
        /// `null` for the first token of an echoed prompt (nothing comes before it).
        token_logprobs: Vec<Option<f32>>,
        top_logprobs: Vec<Option<BTreeMap<String, f32>>>,
        text_offset: Vec<usize>,
    },
}

impl Logprobs {
    /// `self` followed by `more` (both the completions shape; else `self`).
    pub fn then(self, more: Logprobs) -> Logprobs {
        match (self, more) {
            (
                Logprobs::Text {
                    mut tokens,
                    mut token_logprobs,
                    mut top_logprobs,
                    mut text_offset,
                },
                Logprobs::Text {
                    tokens: t,
                    token_logprobs: l,
                    top_logprobs: p,
                    text_offset: o,
                },
            ) => {
                tokens.extend(t);
                token_logprobs.extend(l);
                top_logprobs.extend(p);
                text_offset.extend(o);
                Logprobs::Text {
                    tokens,
                    token_logprobs,
                    top_logprobs,
                    text_offset,
                }
            }
            (first, _) => first,
        }
    }
}

/// An echoed prompt's logprobs in the completions shape: its first token with `null`s, then
/// `scored` (tokens 1..); `offset` advanced past the prompt's text.
pub(crate) fn echo(ids: &[u32], scored: &[TokenLogprob], names: &Names<'_>, offset: &mut usize) -> Logprobs {
    let Some(&first) = ids.first() else {
        return build(Kind::Text, scored, names, offset);
    };
    let (token, _) = names.token(first);
    let head = Logprobs::Text {
        tokens: vec![token.clone()],
        token_logprobs: vec![None],
        top_logprobs: vec![None],
        text_offset: vec![*offset],
    };
    *offset += token.chars().count();
    head.then(build(Kind::Text, scored, names, offset))
}

/// Token ids to their text, through the engine's tokenizer.
pub(crate) struct Names<'a>(pub &'a EngineHandle);

impl Names<'_> {
    fn token(&self, id: u32) -> (String, Vec<u8>) {
        let bytes = self.0.token_bytes(id);
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }
}

/// `lps` in `kind`'s shape; `offset`: characters of the reply before the first of them (the
/// completions shape's `text_offset`), advanced past them.
pub(crate) fn build(kind: Kind, lps: &[TokenLogprob], names: &Names<'_>, offset: &mut usize) -> Logprobs {
    match kind {
        Kind::Chat => Logprobs::Chat {
            content: lps
                .iter()
                .map(|lp| {
                    let (token, bytes) = names.token(lp.id);
                    ChatLogprob {
                        token,
                        logprob: finite(lp.logprob),
                        bytes,
                        top_logprobs: lp
                            .top
                            .iter()
                            .map(|&(id, l)| {
                                let (token, bytes) = names.token(id);
                                TopLogprob {
                                    token,
                                    logprob: finite(l),
                                    bytes,
                                }
                            })
                            .collect(),
                    }
                })
                .collect(),
        },
        Kind::Text => {
            let mut tokens = Vec::with_capacity(lps.len());
            let mut text_offset = Vec::with_capacity(lps.len());
            for lp in lps {
                let (token, _) = names.token(lp.id);
                text_offset.push(*offset);
                *offset += token.chars().count();
                tokens.push(token);
            }
            Logprobs::Text {
                tokens,
                token_logprobs: lps.iter().map(|lp| Some(finite(lp.logprob))).collect(),
                top_logprobs: lps
                    .iter()
                    .map(|lp| Some(lp.top.iter().map(|&(id, l)| (names.token(id).0, finite(l))).collect()))
                    .collect(),
                text_offset,
            }
        }
    }
}
