//! A request's common fields → what the engine is asked for.
//!
//! Owns: merging a request's sampling fields over the server's defaults, `max_tokens` /
//! `max_completion_tokens`, `stop` (a string or a list; empty strings are dropped), `n` (1 to
//! 128 choices, each seeded `seed + i` where a seed is sent, as vLLM's children), the `model`
//! check and the streaming flags. Ranges of sampling values are the engine's
//! to check ([`crate::engine::EngineHandle::submit`] refuses them with a message naming the
//! field).
//!
//! Counterpart: vLLM's `ChatCompletionRequest.to_sampling_params`.

use serde_json::Value;

use crate::engine::{
    EngineHandle, GenerateParams, GenerationReport, GrammarDelay, Reasoning, Section, ThinkTags, Tool, ToolFormat,
};

use super::protocol::CommonFields;
use super::tools::ToolRequest;
use super::{ApiError, AppState};

/// The field a forced call's grammar comes from ([`Plan::grammar_from`]).
pub(crate) const TOOL_CHOICE: &str = "tool_choice";

/// How to answer one request.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub params: GenerateParams,
    /// The model id to name in the response.
    pub model: String,
    pub stream: bool,
    /// Send a last chunk with `usage` (`stream_options.include_usage`).
    pub include_usage: bool,
    /// The request field `params.grammar` came from, named by the 400 when it does not compile.
    pub grammar_from: Option<&'static str>,
    /// Read the reply for tool calls written in this format (the request offered tools).
    pub tool_calls: Option<ToolFormat>,
    /// The tools the request offered: their schemas type GLM-4.5's argument values
    /// ([`ToolFormat::parse_for`]).
    pub tools: Vec<Tool>,
    /// Return every call the reply holds (`parallel_tool_calls`, true by default), or only the
    /// first.
    pub parallel_calls: bool,
    /// Split the reply's reasoning from its content (a model that thinks, and the request
    /// did not ask for `reasoning_format: none`); tool calls are read from the content only.
    pub reasoning: Option<Reasoning>,
    /// With `reasoning`: the close tag's token, where it is one, to count the reply's
    /// reasoning tokens (`usage.completion_tokens_details.reasoning_tokens`).
    pub reasoning_close: Option<u32>,
    /// How many choices of the prompt to generate (`n`): each a request of its own, the first
    /// computing the prompt and the others reading it from the prefix cache.
    pub n: usize,
}

pub(crate) fn plan(state: &AppState, f: CommonFields) -> Result<Plan, ApiError> {
    plan_with(state, f, false)
}

/// [`plan`]; `zero_tokens`: `max_tokens` may be 0 (the completions' `echo`: score the prompt).
pub(crate) fn plan_with(state: &AppState, f: CommonFields, zero_tokens: bool) -> Result<Plan, ApiError> {
    let config = state.config();
    let model = state.resolve_model(f.model.as_deref())?.to_string();
    let n = choices(f.n)?;
    let (max_name, max_tokens) = match (f.max_completion_tokens, f.max_tokens) {
        (Some(m), _) => ("max_completion_tokens", m),
        (None, Some(m)) => ("max_tokens", m),
        (None, None) => ("max_tokens", config.max_tokens),
    };
    if max_tokens == 0 && !zero_tokens {
        return Err(ApiError::invalid_param(
            max_name,
            format!("{max_name} must be at least 1 (0 only with echo on /v1/completions)"),
        ));
    }
    let mut sampling = config.sampling.clone();
    if let Some(t) = f.temperature {
        sampling.temperature = t;
    }
    if let Some(p) = f.top_p {
        sampling.top_p = p;
    }
    if let Some(k) = f.top_k {
        sampling.top_k = if k <= 0 {
            0
        } else {
            usize::try_from(k).unwrap_or(usize::MAX)
        };
    }
    if let Some(p) = f.min_p {
        sampling.min_p = p;
    }
    if let Some(p) = f.repetition_penalty {
        sampling.repeat_penalty = p;
    }
    if let Some(s) = f.seed {
        sampling.seed = Some(s);
    }
    if let Some(p) = f.presence_penalty {
        sampling.presence_penalty = p;
    }
    if let Some(p) = f.frequency_penalty {
        sampling.frequency_penalty = p;
    }
    sampling.logit_bias = logit_bias(f.logit_bias)?;
    let stream = f.stream.unwrap_or(false);
    let grammar = super::structured::response_format(f.response_format.as_ref())?;
    let grammar_from = grammar.is_some().then_some(super::structured::FIELD);
    Ok(Plan {
        params: GenerateParams {
            max_tokens,
            sampling,
            stop: stop_strings(f.stop)?,
            ignore_eos: f.ignore_eos.unwrap_or(false),
            keep_logits: false,
            logprobs: None,
            grammar,
            grammar_after: None,
            prompt_logprobs: None,
            embed: None,
        },
        model,
        stream,
        include_usage: stream && f.stream_options.and_then(|o| o.include_usage).unwrap_or(false),
        grammar_from,
        tool_calls: None,
        tools: Vec::new(),
        parallel_calls: true,
        reasoning: None,
        reasoning_close: None,
        n,
    })
}

/// The most choices one request may ask for (`n`), as OpenAI's API allows.
pub(crate) const MAX_CHOICES: usize = 128;

/// `n`: how many choices of the prompt to generate, 1 to [`MAX_CHOICES`] (absent: 1).
fn choices(n: Option<u64>) -> Result<usize, ApiError> {
    match n {
        None => Ok(1),
        Some(n) if (1..=MAX_CHOICES as u64).contains(&n) => Ok(n as usize),
        Some(n) => Err(ApiError::invalid_param(
            "n",
            format!("n must be between 1 and {MAX_CHOICES}, got {n}"),
        )),
    }
}

impl Plan {
    /// Refuses more than one choice where `route` answers one (`why`: the reason, for the 400).
    pub fn one_choice(&self, why: &str) -> Result<(), ApiError> {
        if self.n == 1 {
            return Ok(());
        }
        Err(ApiError::invalid_param("n", format!("n must be 1 here: {why}; got {}", self.n)))
    }

    /// Choice `index`'s parameters: the request's, with a seed, when one was sent, of its
    /// own (`seed + index`, as vLLM seeds each of `n`), so that seeded choices differ and
    /// each is reproducible.
    pub fn params_for(&self, index: usize) -> GenerateParams {
        let mut params = self.params.clone();
        if let Some(seed) = &mut params.sampling.seed {
            *seed = seed.wrapping_add(index as u64);
        }
        params
    }
}

impl Plan {
    /// How the reply's reasoning is handled, for a prompt whose reply carries it as
    /// `reasoning` says: split from the content when `split`; a grammar (a response format or a
    /// forced call) waits for the reasoning's end when the prompt opened it, or when the model
    /// opens it with its first token (`opener`: the open tag's token id, where it is one token).
    /// In harmony (gpt-oss) a response format waits for the final message's header, however
    /// the reply starts; a forced call's grammar takes the reasoning itself.
    pub fn think(&mut self, reasoning: Option<Reasoning>, split: bool, opener: Option<u32>) {
        if let Some(r) = reasoning.filter(|_| self.params.grammar.is_some()) {
            let harmony = r.tags == ThinkTags::Harmony;
            let if_first = if r.starts_open || harmony { None } else { opener };
            let forced_call = self.grammar_from == Some(TOOL_CHOICE);
            if (r.starts_open || if_first.is_some() || harmony) && !(harmony && forced_call) {
                self.params.grammar_after = Some(GrammarDelay {
                    until: r.answer_tag().to_owned(),
                    then: r.answer_tag_end().map(str::to_owned),
                    if_first,
                });
            }
        }
        self.reasoning = reasoning.filter(|_| split);
    }
}

/// `logit_bias`: absent, null, or an object from token ids (as strings, OpenAI's form) to
/// numbers. Ranges (the value's, the id's against the vocabulary) are the engine's to check.
fn logit_bias(bias: Option<Value>) -> Result<Vec<(u32, f32)>, ApiError> {
    let map = match bias {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(ApiError::invalid_param(
                "logit_bias",
                "logit_bias must be an object from token ids to numbers, e.g. {\"1234\": -100}",
            ))
        }
    };
    map.into_iter()
        .map(|(key, value)| {
            let id = key.trim().parse::<u32>().map_err(|_| {
                ApiError::invalid_param("logit_bias", format!("logit_bias keys are token ids, not {key:?}"))
            })?;
            let bias = value.as_f64().ok_or_else(|| {
                ApiError::invalid_param("logit_bias", format!("the logit_bias of token {id} must be a number, not {value}"))
            })?;
            Ok((id, bias as f32))
        })
        .collect()
}

impl Plan {
    /// Offers `tools` to the reply: their calls are read from it in `engine`'s model's format
    /// (unless `tool_choice` is `none`), several at once where `parallel`, and a forced call
    /// (`required` or a named tool) becomes the reply's grammar.
    pub fn offer_tools(&mut self, tools: &ToolRequest, engine: &EngineHandle, parallel: bool) {
        if tools.parses_calls() {
            self.tool_calls = Some(engine.tool_format());
            self.tools = tools.tools.clone();
        }
        self.parallel_calls = parallel;
        if let Some(forced) = tools.forced(engine) {
            self.params.grammar = Some(forced);
            self.grammar_from = Some(TOOL_CHOICE);
        }
    }
}

impl Plan {
    /// [`Plan::think`] with the tag tokens of `engine`'s vocabulary (the open tag's, for a
    /// grammar that may follow the model's own reasoning; the close tag's, to count it).
    pub fn think_for(&mut self, engine: &EngineHandle, reasoning: Option<Reasoning>, split: bool) {
        let opener = reasoning.and_then(|r| engine.token_id(r.tags.open()));
        self.think(reasoning, split, opener);
        self.reasoning_close = self.reasoning.and_then(|r| engine.token_id(r.close_tag()));
    }

    /// How many of `report`'s tokens are reasoning, tags included (OpenAI's
    /// `completion_tokens_details.reasoning_tokens`), for a reply whose reasoning comes apart:
    /// none without a reasoning part, all of them when it never closed, else up to and with
    /// the close tag's token. `None` for other replies, and where the close tag is no single
    /// token of the vocabulary (or not among the reply's tokens).
    pub fn reasoning_tokens(&self, report: &GenerationReport) -> Option<usize> {
        reasoning_tokens(self.reasoning, self.reasoning_close, &report.text, &report.tokens)
    }
}

/// [`Plan::reasoning_tokens`] of a reply (`text`, `tokens`) split as `reasoning` says, whose
/// close tag is token `close`.
pub(crate) fn reasoning_tokens(reasoning: Option<Reasoning>, close: Option<u32>, text: &str, tokens: &[u32]) -> Option<usize> {
    match Reasoning::section(Some(reasoning?), text) {
        Section::None => Some(0),
        Section::Unclosed => Some(tokens.len()),
        Section::Closed => {
            let close = close?;
            tokens.iter().position(|&t| t == close).map(|i| i + 1)
        }
    }
}

/// `stop`: absent, null, a string or a list of strings.
fn stop_strings(stop: Option<Value>) -> Result<Vec<String>, ApiError> {
    let bad = || ApiError::invalid_param("stop", "stop must be a string or a list of strings");
    let list = match stop {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                _ => Err(bad()),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    Ok(list.into_iter().filter(|s| !s.is_empty()).collect())
}

/// The chat's `logprobs` (a bool) and `top_logprobs` (0–20, only with `logprobs: true`) as the
/// engine's [`GenerateParams::logprobs`].
pub(crate) fn chat_logprobs(logprobs: Option<bool>, top: Option<u64>) -> Result<Option<usize>, ApiError> {
    let top = top_count("top_logprobs", top)?;
    match (logprobs, top) {
        (Some(true), top) => Ok(Some(top.unwrap_or(0))),
        (_, Some(_)) => Err(ApiError::invalid_param(
            "top_logprobs",
            "top_logprobs needs logprobs: true",
        )),
        _ => Ok(None),
    }
}

/// The completions' `logprobs` (0–20 alternatives per token).
pub(crate) fn completion_logprobs(n: Option<u64>) -> Result<Option<usize>, ApiError> {
    top_count("logprobs", n)
}

fn top_count(field: &str, n: Option<u64>) -> Result<Option<usize>, ApiError> {
    match n {
        Some(n) if n > crate::engine::MAX_TOP_LOGPROBS as u64 => Err(ApiError::invalid_param(
            field,
            format!("{field} must be between 0 and {}", crate::engine::MAX_TOP_LOGPROBS),
        )),
        n => Ok(n.map(|n| n as usize)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Grammar;

    fn plan(grammar: bool) -> Plan {
        Plan {
            params: GenerateParams {
                grammar: grammar.then_some(Grammar::JsonObject),
                ..GenerateParams::greedy(1)
            },
            model: "m".into(),
            stream: false,
            include_usage: false,
            grammar_from: None,
            tool_calls: None,
        tools: Vec::new(),
            parallel_calls: true,
            reasoning: None,
            reasoning_close: None,
            n: 1,
        }
    }

    #[test]
    fn n_is_one_to_128_and_seeded_choices_get_seeds_of_their_own() {
        assert_eq!(choices(None).unwrap(), 1);
        assert_eq!(choices(Some(128)).unwrap(), 128);
        for bad in [0, 129, u64::MAX] {
            let e = choices(Some(bad)).unwrap_err();
            assert_eq!(e.body().error.param.as_deref(), Some("n"), "{bad}");
        }
        let mut p = plan(false);
        assert!(p.one_choice("x").is_ok());
        p.n = 3;
        assert!(p.one_choice("x").unwrap_err().body().error.message.contains("x"));
        assert_eq!(p.params_for(2).sampling.seed, None);
        p.params.sampling.seed = Some(u64::MAX);
        let seeds: Vec<_> = (0..3).map(|i| p.params_for(i).sampling.seed).collect();
        assert_eq!(seeds, [Some(u64::MAX), Some(0), Some(1)]);
    }

    #[test]
    fn reasoning_tokens_run_to_the_close_tag_or_the_end() {
        let (qwen3, qwq) = (
            Reasoning {
                tags: ThinkTags::Think,
                starts_open: false,
            },
            Reasoning {
                tags: ThinkTags::Think,
                starts_open: true,
            },
        );
        let count = |r, close, text| reasoning_tokens(Some(r), close, text, &[1, 9, 2, 3, 4]);
        // Qwen3: `<think>`(1) · (9) `</think>`(2) · answer.
        assert_eq!(count(qwen3, Some(2), "\n<think>x</think>\n\nhi"), Some(3));
        assert_eq!(count(qwen3, Some(2), "<think>x y z"), Some(5), "cut off inside");
        assert_eq!(count(qwen3, Some(2), "hi </think>"), Some(0), "no reasoning part");
        assert_eq!(count(qwq, Some(2), "x</think>hi"), Some(3));
        assert_eq!(count(qwq, Some(2), "x y"), Some(5));
        // A close tag that is no single token (or not among the tokens): not counted.
        assert_eq!(count(qwq, None, "x</think>hi"), None);
        assert_eq!(count(qwq, Some(7), "x</think>hi"), None);
        // Not split (a model that does not think, `reasoning_format: none`): no figure.
        assert_eq!(reasoning_tokens(None, Some(2), "<think>x</think>", &[1, 2]), None);
    }

    #[test]
    fn a_grammar_waits_for_the_reasoning_it_may_follow() {
        let think = |starts_open| Reasoning {
            tags: ThinkTags::Think,
            starts_open,
        };
        let delay = |reasoning, opener| {
            let mut p = plan(true);
            p.think(reasoning, true, opener);
            p.params.grammar_after
        };
        let after = |until: &str, if_first| {
            Some(GrammarDelay {
                until: until.into(),
                then: None,
                if_first,
            })
        };
        // The prompt opened it: always wait.
        assert_eq!(delay(Some(think(true)), Some(7)), after("</think>", None));
        // The model may open it with its one-token tag.
        assert_eq!(delay(Some(think(false)), Some(7)), after("</think>", Some(7)));
        // A tag that is no single token, a model that does not think: the grammar holds at once.
        assert_eq!(delay(Some(think(false)), None), None);
        assert_eq!(delay(None, Some(7)), None);
        let mistral = Reasoning {
            tags: ThinkTags::Mistral,
            starts_open: true,
        };
        assert_eq!(delay(Some(mistral), None), after("[/THINK]", None));
        // Harmony: a response format waits for the final message; a forced call does not wait.
        let harmony = Reasoning {
            tags: ThinkTags::Harmony,
            starts_open: false,
        };
        // Its header ends at `<|message|>`, after a constraint the model may write.
        let final_message = Some(GrammarDelay {
            until: "<|channel|>final".into(),
            then: Some("<|message|>".into()),
            if_first: None,
        });
        assert_eq!(delay(Some(harmony), None), final_message);
        let mut p = plan(true);
        p.grammar_from = Some(TOOL_CHOICE);
        p.think(Some(harmony), true, None);
        assert_eq!(p.params.grammar_after, None);
        // No grammar, nothing to wait for; `reasoning_format: none` keeps the reply whole.
        let mut p = plan(false);
        p.think(Some(think(true)), false, None);
        assert_eq!((p.params.grammar_after, p.reasoning), (None, None));
    }

    #[test]
    fn stop_accepts_a_string_or_a_list() {
        assert_eq!(stop_strings(None).unwrap(), Vec::<String>::new());
        assert_eq!(stop_strings(Some(Value::Null)).unwrap(), Vec::<String>::new());
        assert_eq!(stop_strings(Some("x".into())).unwrap(), vec!["x"]);
        assert_eq!(
            stop_strings(Some(serde_json::json!(["a", "", "b"]))).unwrap(),
            vec!["a", "b"]
        );
        assert!(stop_strings(Some(serde_json::json!([1]))).is_err());
        assert!(stop_strings(Some(serde_json::json!({"a": 1}))).is_err());
    }
}
