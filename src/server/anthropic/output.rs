//! Anthropic's Messages answer: the `message` object, its content blocks and `usage`.
//!
//! Owns: the blocks of a [`Reply`] (`thinking` for a model that thinks, `text`, `tool_use`
//! with the call's arguments as the `input` object), `stop_reason` (`tool_use`, `max_tokens`,
//! `stop_sequence` with the string in `stop_sequence`, else `end_turn`) and `usage`, where
//! `input_tokens` counts only the prompt tokens computed and `cache_read_input_tokens` those
//! served from hearth's KV cache (Anthropic's split: their sum is the prompt). hearth caches
//! every prompt without being asked, so `cache_creation_input_tokens` is 0.
//!
//! Counterpart: Anthropic's `Message` object; llama.cpp server's `to_json_anthropic`.

use serde_json::{json, Value};

use crate::engine::{GenerationReport, StopReason, ToolCall};

use super::super::reply::Reply;

/// A fresh message id.
pub(crate) fn message_id() -> String {
    format!("msg_{:016x}{:08x}", rand::random::<u64>(), rand::random::<u32>())
}

/// The content blocks of a whole reply.
pub(crate) fn blocks(reply: &Reply) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(r) = &reply.reasoning {
        blocks.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
    }
    if !reply.content.is_empty() {
        blocks.push(json!({"type": "text", "text": reply.content}));
    }
    blocks.extend(reply.calls.iter().map(|c| tool_use(c, input(c))));
    blocks
}

/// A `tool_use` block with `input`.
pub(crate) fn tool_use(call: &ToolCall, input: Value) -> Value {
    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
}

/// A call's arguments as the `input` object (`{}` for arguments that are not an object).
pub(crate) fn input(call: &ToolCall) -> Value {
    match call.arguments_value() {
        v @ Value::Object(_) => v,
        _ => json!({}),
    }
}

/// `stop_reason` and `stop_sequence`.
pub(crate) fn stop(report: &GenerationReport, called: bool) -> (&'static str, Option<String>) {
    match report.stop {
        _ if called => ("tool_use", None),
        StopReason::MaxTokens | StopReason::ContextFull => ("max_tokens", None),
        StopReason::StopString => ("stop_sequence", report.stop_string.clone()),
        StopReason::Eos => ("end_turn", None),
    }
}

/// `usage`: the prompt split into computed and cached tokens, and the reply's tokens.
pub(crate) fn usage(report: &GenerationReport) -> Value {
    let cached = report.cached.tokens.min(report.prompt_tokens);
    json!({
        "input_tokens": report.prompt_tokens - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": report.tokens.len(),
    })
}

/// The whole `message` object.
pub(crate) fn message(id: &str, model: &str, report: &GenerationReport, reply: &Reply) -> Value {
    let (stop_reason, stop_sequence) = stop(report, !reply.calls.is_empty());
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks(reply),
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage(report),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_thinking_text_and_tool_use_blocks() {
        let reply = Reply {
            reasoning: Some("plan".into()),
            content: "Running it.".into(),
            calls: vec![ToolCall {
                id: "call_1".into(),
                name: "bash".into(),
                arguments: r#"{"command": "ls"}"#.into(),
            }],
        };
        let b = blocks(&reply);
        let types: Vec<&str> = b.iter().map(|b| b["type"].as_str().unwrap_or("")).collect();
        assert_eq!(types, ["thinking", "text", "tool_use"]);
        assert_eq!(b[2]["input"], json!({"command": "ls"}));
        let bad = ToolCall {
            id: "c".into(),
            name: "f".into(),
            arguments: "not json".into(),
        };
        assert_eq!(input(&bad), json!({}));
    }
}
