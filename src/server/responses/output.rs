//! The Responses API's answer: the `response` object and its output items.
//!
//! Owns: the output items of a [`Reply`] (`reasoning`, `message` with one `output_text` part,
//! `function_call`), [`Frame`] (what
//! every `response` object of one request repeats: id, creation time, model and the request's
//! settings) and the `usage` object. Both the whole answer and the stream's events build their
//! items here, so they are the same JSON.
//!
//! Counterpart: vLLM's `ResponsesResponse` and `serving_responses.py`'s output items.

use serde_json::{json, Value};

use crate::engine::{GenerationReport, ToolCall};

pub(crate) use super::super::reply::Reply;

/// The output items of a reply that is whole: reasoning, then the message (left out when the
/// reply is only calls), then each call, each with `status` (`completed` or `incomplete`).
pub(crate) fn items(reply: &Reply, status: &str) -> Vec<Value> {
    let mut items = Vec::new();
    if let Some(r) = &reply.reasoning {
        items.push(reasoning_item(&item_id("rs"), r, status));
    }
    if !reply.content.is_empty() || reply.calls.is_empty() {
        items.push(message_item(&item_id("msg"), &reply.content, status));
    }
    for c in &reply.calls {
        items.push(call_item(&item_id("fc"), c, status));
    }
    items
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
    use crate::engine::Role;

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
        let whole = items(&reply, "completed");
        let types: Vec<&str> = whole.iter().map(|i| i["type"].as_str().unwrap_or("")).collect();
        assert_eq!(types, ["reasoning", "function_call"]);
        let m = reply.message();
        assert_eq!((m.role, m.reasoning_content.as_deref(), m.tool_calls.len()), (Role::Assistant, Some("think"), 1));
        let empty = Reply {
            reasoning: None,
            content: String::new(),
            calls: Vec::new(),
        };
        let cut = items(&empty, "incomplete");
        assert_eq!(cut.len(), 1, "an empty reply is still one message");
        assert_eq!(cut[0]["status"], "incomplete");
        assert_eq!(cut[0]["content"][0]["text"], "");
    }
}
