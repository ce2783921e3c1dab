//! [`GrammarCompiler`] (a model's parser factory) and [`Constraint`] (one request's parser).

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{SimpleVob, TokEnv};
use llguidance::{Matcher, ParserFactory};

use super::vocab::Vocabulary;
use super::{Grammar, GrammarError};
use crate::model::tokenizer::Tokenizer;

/// Compiles grammars for one model's vocabulary. Building it walks the whole vocabulary
/// (tens of milliseconds for 50k tokens), so a model builds it once, on first use.
pub struct GrammarCompiler {
    factory: ParserFactory,
}

impl std::fmt::Debug for GrammarCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCompiler").finish_non_exhaustive()
    }
}

impl GrammarCompiler {
    pub fn new(tok: &Tokenizer) -> Result<Self, GrammarError> {
        let started = std::time::Instant::now();
        let env: TokEnv = Arc::new(Vocabulary::new(tok)?);
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| GrammarError::Vocabulary(e.to_string()))?;
        factory.quiet();
        tracing::info!(
            "grammar engine ready for {} tokens in {:.0} ms",
            tok.vocab_size(),
            started.elapsed().as_secs_f64() * 1e3
        );
        Ok(Self { factory })
    }

    /// `grammar`'s parser at its start, or what is wrong with it.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint, GrammarError> {
        let top = match grammar {
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(with_options(serde_json::json!({"type": "object"}))),
            Grammar::JsonSchema(schema) => {
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(GrammarError::Invalid(format!(
                        "a JSON Schema is an object (or true/false), not {}",
                        kind_of(schema)
                    )));
                }
                TopLevelGrammar::from_json_schema(with_options(schema.clone()))
            }
            Grammar::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
        };
        let parser = self
            .factory
            .create_parser(top)
            .map_err(|e| GrammarError::Invalid(clean(&e.to_string())))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::Invalid(clean(&e)));
        }
        Ok(Constraint { matcher, next: None })
    }
}

/// `schema` with hearth's JSON layout, unless it sets its own.
fn with_options(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(obj) = schema.as_object_mut() {
        if !obj.contains_key("x-guidance") {
            obj.insert("x-guidance".into(), super::json_layout());
        }
    }
    schema
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// llguidance's message on one line.
fn clean(msg: &str) -> String {
    msg.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One request's grammar state: which tokens may come next.
pub struct Constraint {
    matcher: Matcher,
    /// The mask of the next step, when [`Constraint::prepare`] computed it ahead.
    next: Option<Result<SimpleVob, GrammarError>>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("stopped", &self.matcher.is_stopped())
            .finish_non_exhaustive()
    }
}

impl Constraint {
    /// Sets the logit of every token the grammar does not allow next to `-inf`; allowed ones
    /// keep theirs. Ids past the vocabulary are never allowed.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), GrammarError> {
        let allowed = match self.next.take() {
            Some(ready) => ready?,
            None => self.compute()?,
        };
        let n = allowed.len().min(logits.len());
        allowed.iter_unset_entries(|i| {
            if i < n {
                logits[i] = f32::NEG_INFINITY;
            }
        });
        for l in logits.iter_mut().skip(n) {
            *l = f32::NEG_INFINITY;
        }
        Ok(())
    }

    /// Computes the next step's mask now (the engine does this for a batch's sequences in
    /// parallel); [`Constraint::mask`] then uses it.
    pub fn prepare(&mut self) {
        if self.next.is_none() {
            self.next = Some(self.compute());
        }
    }

    fn compute(&mut self) -> Result<SimpleVob, GrammarError> {
        self.matcher
            .compute_mask_or_eos()
            .map_err(|e| GrammarError::Step(e.to_string()))
    }

    /// Moves past sampled token `id` (not an end-of-sequence id).
    pub fn accept(&mut self, id: u32) -> Result<(), GrammarError> {
        self.next = None;
        self.matcher
            .consume_token(id)
            .map_err(|e| GrammarError::Step(e.to_string()))
    }

    /// Whether the grammar is complete and allows nothing more than ending.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }
}
