//! `POST /v1/completions` (raw text, no chat template).
//!
//! Owns: reading `prompt`: a string (tokenized with BOS per the tokenizer's rule), a list of
//! token ids (used as they are), or a list of prompts, each a string or a list of token ids,
//! answered in one response (`n` choices of each, prompt by prompt: at most
//! [`MAX_CHOICES`] in all), as OpenAI's and vLLM's batch of prompts. With `suffix`
//! (OpenAI's field), a fill-in-the-middle request: each `prompt` is the code before the gap,
//! `suffix` the code after it, laid out with the model's FIM tokens ([`infill_ids`]); a model
//! without them, or a prompt of token ids, is a 400 naming `suffix`.
//!
//! Counterpart: vLLM's `serving_completion.py`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::Response;
use serde_json::Value;

use crate::engine::{infill_ids, EngineHandle, Infill};

use super::params::MAX_CHOICES;
use super::protocol::{CommonFields, CompletionFields, Kind};
use super::{body, choices, generation, params, ApiError, AppState};

/// A prompt as sent.
#[derive(Debug, PartialEq)]
enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
}

pub(crate) async fn handle(
    State(state): State<AppState>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let fields = body::fields::<CompletionFields>(&value)?;
    let echo = fields.echo.unwrap_or(false);
    let mut plan = params::plan_with(&state, body::fields::<CommonFields>(&value)?, echo)?;
    plan.params.logprobs = params::completion_logprobs(fields.logprobs)?;
    let prompts = prompts(fields.prompt)?;
    if prompts.len() * plan.n > MAX_CHOICES {
        return Err(ApiError::invalid_param(
            "prompt",
            format!(
                "at most {MAX_CHOICES} choices in one request, and {} prompts with n {} ask for {}",
                prompts.len(),
                plan.n,
                prompts.len() * plan.n
            ),
        ));
    }
    let suffix = fields.suffix.filter(|s| !s.is_empty());
    if suffix.is_some() && echo {
        return Err(ApiError::invalid_param("suffix", "suffix and echo cannot be used together"));
    }
    // Each prompt as ids, and as text when it is echoed (token ids are decoded only then).
    let prompts = generation::tokenize(&state, move |engine| {
        prompts.into_iter().map(|p| tokenized(engine, p, suffix.as_deref(), echo)).collect::<Result<Vec<_>, _>>()
    })
    .await?;
    if echo {
        // The prompt's own scores when logprobs are asked for; with `max_tokens: 0` they are
        // asked for regardless (the engine generates nothing only for a prompt it scores).
        plan.params.prompt_logprobs = match (plan.params.logprobs, plan.params.max_tokens) {
            (None, 0) => Some(0),
            (n, _) => n,
        };
    }
    let choices = choices::submit(&state, prompts, &plan, None).await?;
    generation::answer(state.engine(), choices, &plan, Kind::Text).await
}

/// `prompt` as ids (with `suffix`: laid out for fill-in-the-middle), and its text where it is
/// echoed.
fn tokenized(engine: &EngineHandle, prompt: Prompt, suffix: Option<&str>, echo: bool) -> Result<choices::Prompt, ApiError> {
    let (ids, echo) = match (prompt, suffix) {
        (Prompt::Text(prefix), Some(suffix)) => {
            let infill = Infill { prefix, suffix: suffix.to_string(), ..Infill::default() };
            let ids = infill_ids(&engine.model().tokenizer, &infill).map_err(|e| ApiError::invalid_param("suffix", e.to_string()))?;
            (ids, None)
        }
        (Prompt::Tokens(_), Some(_)) => {
            return Err(ApiError::invalid_param("suffix", "suffix needs a text prompt (the code before the gap), not token ids"))
        }
        (Prompt::Text(text), None) => (engine.tokenize(&text)?, echo.then_some(text)),
        (Prompt::Tokens(ids), None) => {
            let text = echo.then(|| engine.model().tokenizer.decode(&ids).unwrap_or_default());
            (ids, text)
        }
    };
    Ok(choices::Prompt { ids, echo })
}

/// `prompt`: a string, a list of token ids, or a list of strings or of lists of token ids
/// (several prompts, answered in one response).
fn prompts(value: Value) -> Result<Vec<Prompt>, ApiError> {
    const SHAPES: &str = "prompt must be a string, a list of token ids, or a list of strings or of lists of token ids";
    let items = match value {
        Value::String(s) => return Ok(vec![Prompt::Text(s)]),
        Value::Array(items) => items,
        _ => return Err(ApiError::invalid_param("prompt", SHAPES)),
    };
    match items.first() {
        None => Err(ApiError::invalid_param("prompt", "prompt must not be empty")),
        Some(Value::String(_) | Value::Array(_)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(Prompt::Text(s)),
                Value::Array(ids) if !ids.is_empty() => token_ids(&ids, &format!("prompt[{i}]")).map(Prompt::Tokens),
                Value::Array(_) => Err(ApiError::invalid_param(format!("prompt[{i}]"), format!("prompt[{i}] must not be empty"))),
                _ => Err(ApiError::invalid_param(format!("prompt[{i}]"), SHAPES)),
            })
            .collect(),
        Some(_) => token_ids(&items, "prompt").map(|ids| vec![Prompt::Tokens(ids)]),
    }
}

/// A JSON list of token ids; anything else in it is a 400 naming `param`.
pub(crate) fn token_ids(items: &[Value], param: &str) -> Result<Vec<u32>, ApiError> {
    items
        .iter()
        .map(|v| v.as_u64().and_then(|id| u32::try_from(id).ok()))
        .collect::<Option<Vec<u32>>>()
        .ok_or_else(|| ApiError::invalid_param(param, "token ids must be integers from 0 to 4294967295"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompt_shapes() {
        let text = |s: &str| Prompt::Text(s.into());
        assert_eq!(prompts(json!("hi")).unwrap(), [text("hi")]);
        assert_eq!(prompts(json!(["hi"])).unwrap(), [text("hi")]);
        assert_eq!(prompts(json!([1, 2, 3])).unwrap(), [Prompt::Tokens(vec![1, 2, 3])]);
        assert_eq!(prompts(json!([[4, 5]])).unwrap(), [Prompt::Tokens(vec![4, 5])]);
        assert_eq!(prompts(json!(["a", "b"])).unwrap(), [text("a"), text("b")]);
        assert_eq!(prompts(json!([[1], [2]])).unwrap(), [Prompt::Tokens(vec![1]), Prompt::Tokens(vec![2])]);
        assert_eq!(prompts(json!(["a", [2]])).unwrap(), [text("a"), Prompt::Tokens(vec![2])]);
        for (bad, param) in [
            (json!([]), "prompt"),
            (json!(null), "prompt"),
            (json!(3), "prompt"),
            (json!([1, -2]), "prompt"),
            (json!([1, "a"]), "prompt"),
            (json!(["a", 3]), "prompt[1]"),
            (json!([[1], [-1]]), "prompt[1]"),
            (json!([[1], []]), "prompt[1]"),
        ] {
            let e = prompts(bad.clone()).unwrap_err();
            assert_eq!(e.body().error.param.as_deref(), Some(param), "{bad}");
        }
    }
}
