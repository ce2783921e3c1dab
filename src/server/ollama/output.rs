//! Ollama's answers: the chat `message`, `tool_calls`, `done_reason`, the timings and
//! `created_at`.
//!
//! Owns: the assistant message of a [`Reply`] (`content`, `thinking` for a model that thinks,
//! `tool_calls` with each call's arguments as an object and its id), `done_reason` (`length`
//! when the reply ran out of tokens or context, else `stop`), the last line's counts and
//! durations in nanoseconds (`prompt_eval_count` is the whole prompt, however much of it the
//! cache served, as `usage.prompt_tokens` is on the OpenAI routes; `prompt_eval_duration` the
//! time from the first scheduled step to the first token; `load_duration` 0, as the model is
//! loaded before the server starts) and `created_at` (RFC 3339 in UTC with nanoseconds).
//!
//! Counterpart: Ollama's `api/types.go` (`ChatResponse`, `GenerateResponse`, `Metrics`).

use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Map, Value};

use crate::engine::{rfc3339, GenerationReport, StopReason, ToolCall};

use super::super::reply::Reply;

/// `created_at`: now.
pub(crate) fn created_at() -> String {
    rfc3339(SystemTime::now())
}

/// `done_reason`.
pub(crate) fn done_reason(report: &GenerationReport) -> &'static str {
    match report.stop {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        StopReason::Eos | StopReason::StopString => "stop",
    }
}

/// The last line's `done`, `done_reason`, counts and durations, into `out`.
pub(crate) fn finish(out: &mut Map<String, Value>, report: &GenerationReport, started: Instant) {
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    out.insert("done".into(), json!(true));
    out.insert("done_reason".into(), json!(done_reason(report)));
    out.insert("total_duration".into(), json!(ns(started.elapsed())));
    out.insert("load_duration".into(), json!(0));
    out.insert("prompt_eval_count".into(), json!(report.prompt_tokens));
    out.insert(
        "prompt_eval_duration".into(),
        json!(ns(report.ttft.saturating_sub(report.queued))),
    );
    out.insert("eval_count".into(), json!(report.tokens.len()));
    out.insert("eval_duration".into(), json!(ns(report.decode)));
}

/// `tool_calls`: each call's name, arguments (an object; `{}` for arguments that are not one)
/// and id.
pub(crate) fn tool_calls(calls: &[ToolCall]) -> Value {
    calls
        .iter()
        .enumerate()
        .map(|(index, c)| {
            let arguments = match c.arguments_value() {
                v @ Value::Object(_) => v,
                _ => json!({}),
            };
            json!({"id": c.id, "function": {"index": index, "name": c.name, "arguments": arguments}})
        })
        .collect()
}

/// The assistant message of a whole reply.
pub(crate) fn message(reply: &Reply) -> Value {
    let mut m = json!({"role": "assistant", "content": reply.content});
    if let Some(r) = &reply.reasoning {
        m["thinking"] = json!(r);
    }
    if !reply.calls.is_empty() {
        m["tool_calls"] = tool_calls(&reply.calls);
    }
    m
}

/// The start of every line: `model` and `created_at`.
pub(crate) fn line(model: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("model".into(), json!(model));
    m.insert("created_at".into(), json!(created_at()));
    m
}

/// The answer to a request that only loads the model (no prompt or messages): it is loaded.
pub(crate) fn loaded(model: &str, chat: bool) -> Value {
    let mut m = line(model);
    if chat {
        m.insert("message".into(), json!({"role": "assistant", "content": ""}));
    } else {
        m.insert("response".into(), json!(""));
    }
    m.insert("done".into(), json!(true));
    m.insert("done_reason".into(), json!("load"));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_content_thinking_and_calls_with_object_arguments() {
        let reply = Reply {
            reasoning: Some("plan".into()),
            content: String::new(),
            calls: vec![
                ToolCall {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city": "Paris"}"#.into(),
                },
                ToolCall {
                    id: "call_2".into(),
                    name: "f".into(),
                    arguments: "not json".into(),
                },
            ],
        };
        let m = message(&reply);
        assert_eq!(m["thinking"], "plan");
        assert_eq!(m["content"], "");
        assert_eq!(
            m["tool_calls"][0],
            json!({"id": "call_1", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}})
        );
        assert_eq!(m["tool_calls"][1]["function"]["arguments"], json!({}));
        let plain = message(&Reply {
            reasoning: None,
            content: "hi".into(),
            calls: Vec::new(),
        });
        assert_eq!(plain, json!({"role": "assistant", "content": "hi"}));
    }
}
