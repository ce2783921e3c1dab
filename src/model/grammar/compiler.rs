//! [`GrammarCompiler`] (a model's parser factory) and [`Constraint`] (one request's parser).

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{SimpleVob, TokEnv, TokenId};
use llguidance::{Matcher, ParserFactory};

use super::vocab::Vocabulary;
use super::{Grammar, GrammarError};
use crate::model::tokenizer::Tokenizer;

/// Compiles grammars for one model's vocabulary. Building it walks the whole vocabulary
/// (tens of milliseconds for 50k tokens), so a model builds it once, on first use.
pub struct GrammarCompiler {
    factory: ParserFactory,
    /// The vocabulary's whitespace-only tokens and their lengths (see [`Constraint::allow_leading_blank`]).
    blank: Arc<[(TokenId, u8)]>,
    /// Hashes of grammars [`GrammarCompiler::check`] found to compile (an agent sends the same
    /// tools' schemas with every request; each costs about half a millisecond to compile).
    known_good: std::sync::Mutex<std::collections::HashSet<u64>>,
}

/// The most grammars [`GrammarCompiler::check`] remembers; past it, it starts over.
const KNOWN_GOOD: usize = 4096;

impl std::fmt::Debug for GrammarCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCompiler").finish_non_exhaustive()
    }
}

impl GrammarCompiler {
    pub fn new(tok: &Tokenizer) -> Result<Self, GrammarError> {
        let started = std::time::Instant::now();
        let vocab = Vocabulary::new(tok)?;
        let blank = vocab.blank_tokens().into();
        let env: TokEnv = Arc::new(vocab);
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| GrammarError::Vocabulary(e.to_string()))?;
        factory.quiet();
        tracing::info!(
            "grammar engine ready for {} tokens in {:.0} ms",
            tok.vocab_size(),
            started.elapsed().as_secs_f64() * 1e3
        );
        Ok(Self {
            factory,
            blank,
            known_good: Default::default(),
        })
    }

    /// Whether `grammar` compiles, as [`GrammarCompiler::compile`] would say; a grammar that
    /// compiled before is not compiled again.
    pub fn check(&self, grammar: &Grammar) -> Result<(), GrammarError> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match grammar {
            Grammar::JsonObject => 0u8.hash(&mut h),
            Grammar::JsonSchema(schema) => (1u8, schema.to_string()).hash(&mut h),
            Grammar::Lark(text) => (2u8, text).hash(&mut h),
        }
        let key = h.finish();
        let lock = || self.known_good.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if lock().contains(&key) {
            return Ok(());
        }
        self.compile(grammar)?;
        let mut known = lock();
        if known.len() >= KNOWN_GOOD {
            known.clear();
        }
        known.insert(key);
        Ok(())
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
        Ok(Constraint {
            matcher,
            next: None,
            blank: Arc::clone(&self.blank),
            lead: Lead::Unset,
        })
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
    /// The vocabulary's whitespace-only tokens and their lengths in bytes, by id.
    blank: Arc<[(TokenId, u8)]>,
    lead: Lead,
}

/// Whether whitespace may come before the grammar's first token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lead {
    /// The grammar has taken no token yet and decides alone (the start).
    Unset,
    /// The grammar has taken no token yet, and this many bytes of whitespace may still come.
    Open(usize),
    /// The grammar has taken a token: it decides alone from now on.
    Closed,
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
    /// While [`Constraint::allow_leading_blank`] holds, whitespace within its allowance is
    /// allowed too.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), GrammarError> {
        let allowed = match self.next.take() {
            Some(ready) => ready?,
            None => self.compute()?,
        };
        let lead: Vec<(usize, f32)> = self
            .lead_tokens()
            .filter_map(|id| logits.get(id as usize).map(|&l| (id as usize, l)))
            .collect();
        let n = allowed.len().min(logits.len());
        allowed.iter_unset_entries(|i| {
            if i < n {
                logits[i] = f32::NEG_INFINITY;
            }
        });
        for l in logits.iter_mut().skip(n) {
            *l = f32::NEG_INFINITY;
        }
        for (i, l) in lead {
            logits[i] = l;
        }
        Ok(())
    }

    /// Until the grammar takes its first token, lets whitespace-only tokens of at most `bytes`
    /// bytes in all come before it, unseen by the grammar. A thinking model ends its reasoning
    /// with a line break (Qwen3 writes `</think>\n\n`, and its template renders a reply that
    /// way); a grammar that starts at once (`{`, `<tool_call>`) would forbid it, push the model
    /// off its habit, and leave a reply whose tokens differ from its re-rendered history, so a
    /// later request misses the prefix cache from there. Does nothing once the grammar has
    /// taken a token.
    pub fn allow_leading_blank(&mut self, bytes: usize) {
        if self.lead == Lead::Unset {
            self.lead = Lead::Open(bytes);
        }
    }

    /// The whitespace tokens that may come now, before the grammar's first token.
    fn lead_tokens(&self) -> impl Iterator<Item = TokenId> + '_ {
        let (blank, left): (&[(TokenId, u8)], usize) = match self.lead {
            Lead::Open(left) => (&self.blank, left),
            Lead::Unset | Lead::Closed => (&[], 0),
        };
        blank
            .iter()
            .filter(move |&&(_, len)| usize::from(len) <= left)
            .map(|&(id, _)| id)
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
    /// A whitespace token before the grammar's first, within [`Constraint::allow_leading_blank`]'s
    /// allowance, is taken without the grammar seeing it.
    pub fn accept(&mut self, id: u32) -> Result<(), GrammarError> {
        self.next = None;
        let step = |e: anyhow::Error| GrammarError::Step(e.to_string());
        let Lead::Open(left) = self.lead else {
            self.lead = Lead::Closed;
            return self.matcher.consume_token(id).map_err(step);
        };
        if self.matcher.try_consume_tokens(&[id]).map_err(step)? == 1 {
            self.lead = Lead::Closed;
            return Ok(());
        }
        match self.blank.binary_search_by_key(&id, |&(t, _)| t) {
            Ok(i) if usize::from(self.blank[i].1) <= left => {
                self.lead = Lead::Open(left - usize::from(self.blank[i].1));
                Ok(())
            }
            _ => Err(GrammarError::Step(format!("token {id} is not allowed here"))),
        }
    }

    /// Whether the grammar is complete and allows nothing more than ending.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testkit::{TinyVocab, VocabStyle};

    fn one_token(tok: &Tokenizer, text: &str) -> u32 {
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(ids.len(), 1, "{text:?} is one token");
        ids[0]
    }

    #[test]
    fn whitespace_leads_a_grammar_only_within_its_allowance_and_before_its_first_token() {
        let tok = Tokenizer::from_gguf_metadata(&TinyVocab::new(VocabStyle::Gpt2 { pre: "qwen2" }).metadata_map()).unwrap();
        let compiler = GrammarCompiler::new(&tok).unwrap();
        assert!(!compiler.blank.is_empty());
        let (nl, space, open, close) = (
            one_token(&tok, "\n"),
            one_token(&tok, " "),
            one_token(&tok, "{"),
            one_token(&tok, "}"),
        );
        let logits = || (0..tok.vocab_size()).map(|i| i as f32).collect::<Vec<f32>>();
        let masked = |c: &mut Constraint| {
            let mut l = logits();
            c.mask(&mut l).unwrap();
            l
        };

        // Without the allowance, the object starts at once.
        let mut c = compiler.compile(&Grammar::JsonObject).unwrap();
        let l = masked(&mut c);
        assert_eq!(l[nl as usize], f32::NEG_INFINITY);
        assert_eq!(l[open as usize], open as f32);
        assert!(c.accept(nl).is_err());

        // With 4 bytes: line breaks and spaces first, unseen by the grammar, logits untouched.
        let mut c = compiler.compile(&Grammar::JsonObject).unwrap();
        c.allow_leading_blank(4);
        for (step, id) in [nl, nl, space, nl].into_iter().enumerate() {
            let l = masked(&mut c);
            assert_eq!(l[id as usize], id as f32, "step {step}");
            assert_eq!(l[open as usize], open as f32, "step {step}");
            assert_eq!(l[close as usize], f32::NEG_INFINITY, "step {step}");
            c.accept(id).unwrap();
        }
        // The allowance is spent.
        let l = masked(&mut c);
        assert_eq!(l[nl as usize], f32::NEG_INFINITY);
        assert!(c.accept(nl).is_err(), "refused, and the grammar is where it was");
        c.accept(open).unwrap();
        // Once the grammar has a token, it alone decides, and a new allowance changes nothing.
        c.allow_leading_blank(4);
        let l = masked(&mut c);
        assert_eq!(l[nl as usize], f32::NEG_INFINITY);
        assert_eq!(l[close as usize], close as f32);
        c.accept(close).unwrap();
        assert!(c.is_finished());
    }

    #[test]
    fn a_checked_grammar_is_remembered_and_a_bad_one_never_is() {
        let tok = Tokenizer::from_gguf_metadata(&TinyVocab::new(VocabStyle::Gpt2 { pre: "qwen2" }).metadata_map()).unwrap();
        let compiler = GrammarCompiler::new(&tok).unwrap();
        let good = Grammar::JsonSchema(serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}}));
        let bad = Grammar::JsonSchema(serde_json::json!({"type": "strnig"}));
        compiler.check(&good).unwrap();
        compiler.check(&good).unwrap();
        assert_eq!(compiler.known_good.lock().unwrap().len(), 1);
        for _ in 0..2 {
            assert!(matches!(compiler.check(&bad), Err(GrammarError::Invalid(_))));
        }
        assert_eq!(compiler.known_good.lock().unwrap().len(), 1, "only grammars that compile are kept");
    }
}
