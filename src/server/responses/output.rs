//! The Responses API's answer: the `response` object and its output items.
//!
//! Owns: [`Reply`] (a finished reply's reasoning, text and calls, with the call ids it is
//! answered with, read from its text as `/v1/chat/completions` reads it), the output items
//! (`reasoning`, `message` with one `output_text` part, `function_call`), [`Frame`] (what
//! every `response` object of one request repeats: id, creation time, model and the request's
//! settings) and the `usage` object. Both the whole answer and the stream's events build their
//! items here, so they are the same JSON.
//!
//! Counterpart: vLLM's `ResponsesResponse` and `serving_responses.py`'s output items.

use serde_json::{json, Value};

use crate::engine::{GenerationReport, Message, Role, SplitReply, ToolCall, ToolFormat};

use super::super::params::Plan;

/// A finished reply, as the items and the stored history hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    /// The reasoning (trimmed), for a model that thinks.
    pub reasoning: Option<String>,
    /// The text outside any calls.
    pub content: String,
    pub calls: Vec<ToolCall>,
}

impl Reply {
    /// `text` split as `plan` says (reasoning apart; calls read when tools were offered, only
    /// the first without `parallel_tool_calls`); each call gets a fresh id in `format`'s shape.
    pub fn of(plan: &Plan, text: &str) -> Self {
        let split = SplitReply::of(plan.reasoning, text);
        let parsed = plan.tool_calls.and_then(|format| format.parse(&split.content).map(|p| (format, p)));
        match parsed {
            Some((format, mut p)) if !p.calls.is_empty() => {
                if !plan.parallel_calls {
                    p.calls.truncate(1);
                }
                Self {
                    reasoning: split.reasoning,
                    content: p.content,
                    calls: p.calls.into_iter().map(|c| with_id(format, c.name, c.arguments)).collect(),
                }
            }
            _ => Self {
                reasoning: split.reasoning,
                content: split.content,
                calls: Vec::new(),
            },
        }
    }

    /// The assistant turn this reply is, for the history a later request continues.
    pub fn message(&self) -> Message {
        let mut m = Message::new(Role::Assistant, self.content.clone());
        m.reasoning_content = self.reasoning.clone();
        m.tool_calls = self.calls.clone();
        m
    }

    /// The output items of a reply that is whole: reasoning, then the message (left out when
    /// the reply is only calls), then each call. `done`: the items' status, `completed` or
    /// `incomplete`.
    pub fn items(&self, status: &str) -> Vec<Value> {
        let mut items = Vec::new();
        if let Some(r) = &self.reasoning {
            items.push(reasoning_item(&item_id("rs"), r, status));
        }
        if !self.content.is_empty() || self.calls.is_empty() {
            items.push(message_item(&item_id("msg"), &self.content, status));
        }
        for c in &self.calls {
            items.push(call_item(&item_id("fc"), c, status));
        }
        items
    }
}

/// A call with a fresh id in `format`'s shape (9 letters and digits for Mistral's templates).
pub(crate) fn with_id(format: ToolFormat, name: String, arguments: String) -> ToolCall {
    ToolCall {
        id: format.call_id(),
        name,
        arguments,
    }
}

/// A fresh item id with `prefix` (`rs`, `msg`, `fc`).
pub(crate) fn item_id(prefix: &str) -> String {
    format!("{prefix}_{:016x}{:08x}", rand::random::<u64>(), rand::random::<u32>())
}

pub(crate) fn reasoning_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "reasoning",
        "id": id,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    })
}

pub(crate) fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message",
        "id": id,
        "status": status,
        "role": "assistant",
        "content": [text_part(text)],
    })
}

/// An `output_text` part.
pub(crate) fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

pub(crate) fn call_item(id: &str, call: &ToolCall, status: &str) -> Value {
    json!({
        "type": "function_call",
        "id": id,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": status,
    })
}

/// How a finished request ended: `completed`, or `incomplete` at the token limit.
pub(crate) fn status_of(report: &GenerationReport) -> &'static str {
    match report.stop.finish_reason() {
        "length" => "incomplete",
        _ => "completed",
    }
}

/// The `usage` object.
pub(crate) fn usage(report: &GenerationReport, reasoning_tokens: Option<usize>) -> Value {
    json!({
        "input_tokens": report.prompt_tokens,
        "input_tokens_details": {"cached_tokens": report.cached.tokens},
        "output_tokens": report.tokens.len(),
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens.unwrap_or(0)},
        "total_tokens": report.prompt_tokens + report.tokens.len(),
    })
}

/// What every `response` object of one request repeats.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    pub id: String,
    pub created_at: u64,
    /// The request's settings as the response reports them (`model`, `instructions`,
    /// `tools`, ...).
    pub settings: serde_json::Map<String, Value>,
}

impl Frame {
    /// The `response` object in `status` with `output`; `usage` once finished, `error` when
    /// it failed.
    pub fn response(&self, status: &str, output: Vec<Value>, usage: Option<Value>, error: Option<Value>) -> Value {
        let mut r = serde_json::Map::new();
        r.insert("id".into(), json!(self.id));
        r.insert("object".into(), json!("response"));
        r.insert("created_at".into(), json!(self.created_at));
        r.insert("status".into(), json!(status));
        if status == "completed" {
            r.insert("completed_at".into(), json!(super::super::state::unix_now()));
        }
        r.insert("error".into(), error.unwrap_or(Value::Null));
        let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
        r.insert("incomplete_details".into(), incomplete.unwrap_or(Value::Null));
        r.extend(self.settings.clone());
        r.insert("output".into(), Value::Array(output));
        r.insert("usage".into(), usage.unwrap_or(Value::Null));
        Value::Object(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_of_calls_only_has_no_message_item() {
        let reply = Reply {
            reasoning: Some("think".into()),
            content: String::new(),
            calls: vec![ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: "{}".into(),
            }],
        };
        let items = reply.items("completed");
        let types: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap_or("")).collect();
        assert_eq!(types, ["reasoning", "function_call"]);
        let m = reply.message();
        assert_eq!((m.role, m.reasoning_content.as_deref(), m.tool_calls.len()), (Role::Assistant, Some("think"), 1));
        let empty = Reply {
            reasoning: None,
            content: String::new(),
            calls: Vec::new(),
        };
        let items = empty.items("incomplete");
        assert_eq!(items.len(), 1, "an empty reply is still one message");
        assert_eq!(items[0]["status"], "incomplete");
        assert_eq!(items[0]["content"][0]["text"], "");
    }
}
