//! `POST /v1/completions` (raw text, no chat template).
//!
//! Owns: reading `prompt`: a string (tokenized with BOS per the tokenizer's rule), a list of
//! one string, a list of token ids (used as they are), or a list of one such list. Several
//! prompts in one request are refused (several choices of one prompt, `n`, are not). With `suffix`
//! (OpenAI's field), a fill-in-the-middle request: `prompt` is the code before the gap,
//! `suffix` the code after it, laid out with the model's FIM tokens ([`infill_ids`]); a model
//! without them, or a prompt of token ids, is a 400 naming `suffix`.
//!
//! Counterpart: vLLM's `serving_completion.py`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::Response;
use serde_json::Value;

use crate::engine::{infill_ids, Infill};

use super::params::Echo;
use super::protocol::{CommonFields, CompletionFields, Kind};
use super::{body, generation, params, ApiError, AppState};

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
    let prompt = prompt(fields.prompt)?;
    let suffix = fields.suffix.filter(|s| !s.is_empty());
    if suffix.is_some() && echo {
        return Err(ApiError::invalid_param("suffix", "suffix and echo cannot be used together"));
    }
    // The prompt as ids, and as text when it is echoed (token ids are decoded only then).
    let (ids, text) = generation::tokenize(&state, move |engine| match (prompt, suffix) {
        (Prompt::Text(prefix), Some(suffix)) => {
            let infill = Infill { prefix, suffix, ..Infill::default() };
            let ids = infill_ids(&engine.model().tokenizer, &infill).map_err(|e| ApiError::invalid_param("suffix", e.to_string()))?;
            Ok((ids, None))
        }
        (Prompt::Tokens(_), Some(_)) => Err(ApiError::invalid_param("suffix", "suffix needs a text prompt (the code before the gap), not token ids")),
        (Prompt::Text(text), None) => Ok::<_, ApiError>((engine.tokenize(&text)?, echo.then_some(text))),
        (Prompt::Tokens(ids), None) => {
            let text = echo.then(|| engine.model().tokenizer.decode(&ids).unwrap_or_default());
            Ok((ids, text))
        }
    })
    .await?;
    if let Some(text) = text {
        // The prompt's own scores when logprobs are asked for; with `max_tokens: 0` they are
        // asked for regardless (the engine generates nothing only for a prompt it scores).
        plan.params.prompt_logprobs = match (plan.params.logprobs, plan.params.max_tokens) {
            (None, 0) => Some(0),
            (n, _) => n,
        };
        plan.echo = Some(Echo { text, ids: ids.clone() });
    }
    generation::respond(&state, ids, plan, Kind::Text, None).await
}

fn prompt(value: Value) -> Result<Prompt, ApiError> {
    const SHAPES: &str =
        "prompt must be a string, a list of one string, a list of token ids or a list of one list of token ids";
    let one_only = || {
        ApiError::invalid_param(
            "prompt",
            "several prompts in one request are not supported; send one request per prompt",
        )
    };
    match value {
        Value::String(s) => Ok(Prompt::Text(s)),
        Value::Array(items) => match items.as_slice() {
            [] => Err(ApiError::invalid_param("prompt", "prompt must not be empty")),
            [Value::String(_)] | [Value::Array(_)] => match items.into_iter().next() {
                Some(Value::String(s)) => Ok(Prompt::Text(s)),
                Some(Value::Array(ids)) => token_ids(&ids, "prompt").map(Prompt::Tokens),
                _ => Err(ApiError::invalid_param("prompt", SHAPES)),
            },
            [Value::String(_) | Value::Array(_), ..] => Err(one_only()),
            _ => token_ids(&items, "prompt").map(Prompt::Tokens),
        },
        _ => Err(ApiError::invalid_param("prompt", SHAPES)),
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
        assert_eq!(prompt(json!("hi")).unwrap(), Prompt::Text("hi".into()));
        assert_eq!(prompt(json!(["hi"])).unwrap(), Prompt::Text("hi".into()));
        assert_eq!(prompt(json!([1, 2, 3])).unwrap(), Prompt::Tokens(vec![1, 2, 3]));
        assert_eq!(prompt(json!([[4, 5]])).unwrap(), Prompt::Tokens(vec![4, 5]));
        for bad in [
            json!(["a", "b"]),
            json!([[1], [2]]),
            json!([]),
            json!(null),
            json!(3),
            json!([1, -2]),
            json!([1, "a"]),
        ] {
            assert!(prompt(bad.clone()).is_err(), "{bad}");
        }
    }
}
