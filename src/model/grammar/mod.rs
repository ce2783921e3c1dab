//! Constrained decoding: a grammar that every sampled token must keep satisfiable.
//!
//! Owns: [`Grammar`] (what a request asks for: any JSON object, a JSON Schema, or a Lark
//! grammar, which may embed schemas), [`GrammarCompiler`] (one per model, built on first use:
//! the vocabulary as bytes in `llguidance`'s token trie and its parser factory), and
//! [`Constraint`] (one request's parser: the mask of allowed tokens before each sample, then
//! the sampled token). The grammar engine is `llguidance` (as in llama.cpp and vLLM), not a
//! hand-written state machine.
//!
//! Invariants:
//! - A grammar is compiled on the caller's thread when the request is submitted; one that does
//!   not compile (an unsupported schema keyword, something that is not JSON Schema) is a
//!   [`GrammarError::Invalid`] naming the problem, and nothing is queued.
//! - The mask only ever removes tokens: allowed tokens keep their logits bit for bit, so a
//!   grammar that allows the greedy token leaves greedy output unchanged. End-of-sequence ids
//!   are allowed exactly when the grammar can end.
//! - Requests without a grammar never touch this module.
//! - The one exception to "only the grammar decides": after a thinking model's reasoning the
//!   engine may allow a few bytes of whitespace-only tokens before the grammar's first token
//!   ([`Constraint::allow_leading_blank`]); the grammar never sees them, and never again once
//!   it has taken a token.
//! - JSON is written on one line with `", "` and `": "` between items, as `json.dumps` (and the
//!   chat templates' `tojson`) write it, so a reply re-rendered into a later prompt is the
//!   same text (and the same cached tokens); a schema's own `x-guidance` options win.
//!
//! Counterpart: vLLM's `v1/structured_output/backend_guidance.py` (`GuidanceBackend`,
//! `GuidanceGrammar`), llama.cpp's `llama-grammar` with `--grammar`/`json_schema`.

mod compiler;
mod vocab;

pub use compiler::{Constraint, GrammarCompiler};

/// The JSON layout hearth asks llguidance for (its `x-guidance` options) unless a schema says
/// otherwise: one line, `json.dumps`' separators (see the invariants above). Forced tool calls,
/// whose schema sits inside a Lark grammar, carry it themselves.
pub fn json_layout() -> serde_json::Value {
    serde_json::json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
    })
}

/// What a request's output must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid against this JSON Schema (`{"type": "json_schema"}`).
    JsonSchema(serde_json::Value),
    /// A grammar in llguidance's Lark dialect; `%json {...}` embeds a schema.
    Lark(String),
}

/// What can go wrong with a grammar.
#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    /// The grammar or schema does not compile: an unsupported feature, a schema that is not
    /// valid JSON Schema, a Lark syntax error. The message names it.
    #[error("{0}")]
    Invalid(String),
    /// The model's vocabulary could not be prepared for constrained decoding.
    #[error("constrained decoding is unavailable for this model: {0}")]
    Vocabulary(String),
    /// The parser failed during generation (a bug or a limit of the grammar engine).
    #[error("the grammar failed while generating: {0}")]
    Step(String),
}
