//! The Responses API's request: its own fields, and `input` as chat [`Message`]s.
//!
//! Owns: [`ResponsesFields`] (what `/v1/responses` reads beside the sampling fields it shares
//! with the completion routes) and [`messages`]: `input` (a string, or a list of items) as the
//! conversation the model's chat template renders. Items: messages (`role` `user`, `system`,
//! `developer` or `assistant`; `content` a string or `input_text` / `output_text` parts),
//! `reasoning` (its text goes with the assistant turn after it, as `reasoning_content`),
//! `function_call` (a call of that assistant turn) and `function_call_output` (a `tool`
//! message answering `call_id`). A reply's own output items, sent back as they came, become
//! the one assistant turn they were, so the history renders to the tokens the cache holds.
//! Anything else (images, files, built-in tools' items, `item_reference`) is a 400 naming the
//! item.
//!
//! Counterpart: vLLM's `ResponsesRequest` and `construct_input_messages` in
//! `entrypoints/responses_utils.py`.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::engine::{Message, Role, ToolCall};

use super::super::ApiError;

/// `/v1/responses`' own fields (the sampling fields are read as the completion routes read
/// them).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ResponsesFields {
    /// A string (one user message) or a list of items.
    #[serde(default)]
    pub input: Value,
    /// A system message before everything else; not inherited through `previous_response_id`.
    #[serde(default)]
    pub instructions: Option<Value>,
    /// Continue after this stored response (its whole conversation goes first).
    #[serde(default)]
    pub previous_response_id: Option<String>,
    /// Function tools, flat: `{"type": "function", "name", "description", "parameters"}`.
    #[serde(default)]
    pub tools: Option<Value>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub max_output_tokens: Option<usize>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", ...}}`.
    #[serde(default)]
    pub text: Option<Value>,
    /// Keep the response for `previous_response_id` and `GET` (default true).
    #[serde(default)]
    pub store: Option<bool>,
    /// OpenAI runs such a request asynchronously; hearth does not.
    #[serde(default)]
    pub background: Option<bool>,
    /// OpenAI's Conversations API, which hearth does not have.
    #[serde(default)]
    pub conversation: Option<Value>,
    /// Returned as sent.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Returned as sent (hearth reasons as the model does; `effort` changes nothing).
    #[serde(default)]
    pub reasoning: Option<Value>,
    /// Further variables for the chat template, as on `/v1/chat/completions`.
    #[serde(default)]
    pub chat_template_kwargs: Option<Value>,
}

impl ResponsesFields {
    /// `instructions` as text: absent, null or a string.
    pub fn instructions(&self) -> Result<Option<String>, ApiError> {
        match &self.instructions {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ApiError::invalid_param("instructions", "instructions must be a string")),
        }
    }

    /// `text.format`, where it is given.
    pub fn format(&self) -> Option<&Value> {
        self.text.as_ref().and_then(|t| t.get("format"))
    }

    /// The fields hearth cannot honour, as a 400 naming the first.
    pub fn check_unsupported(&self) -> Result<(), ApiError> {
        if self.background == Some(true) {
            return Err(ApiError::invalid_param(
                "background",
                "background responses are not supported: hearth answers each request while the client waits (use stream: true to see it as it comes)",
            ));
        }
        if self.conversation.as_ref().is_some_and(|c| !c.is_null()) {
            return Err(ApiError::invalid_param(
                "conversation",
                "OpenAI's Conversations API is not supported; continue with previous_response_id, or use hearth's /v1/conversations",
            ));
        }
        if self.max_output_tokens == Some(0) {
            return Err(ApiError::invalid_param("max_output_tokens", "max_output_tokens must be at least 1"));
        }
        Ok(())
    }
}

/// `input` as messages: a string is one user message; null is none.
pub(crate) fn messages(input: &Value) -> Result<Vec<Message>, ApiError> {
    let items = match input {
        Value::Null => return Ok(Vec::new()),
        Value::String(s) => return Ok(vec![Message::new(Role::User, s.clone())]),
        Value::Array(items) => items,
        _ => return Err(ApiError::invalid_param("input", "input must be a string or a list of items")),
    };
    let mut b = Builder::default();
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let obj = item
            .as_object()
            .ok_or_else(|| ApiError::invalid_param(at.clone(), format!("{at} must be an object")))?;
        let kind = match obj.get("type") {
            None | Some(Value::Null) if obj.contains_key("role") => "message",
            Some(Value::String(t)) => t.as_str(),
            _ => return Err(ApiError::invalid_param(at.clone(), format!("{at} needs a `type` (or a `role`)"))),
        };
        match kind {
            "message" => b.message(obj, &at)?,
            "reasoning" => b.reasoning(obj, &at)?,
            "function_call" => b.call(obj, &at)?,
            "function_call_output" => b.output(obj, &at)?,
            other => {
                return Err(ApiError::invalid_param(
                    format!("{at}.type"),
                    format!("{at}.type {other:?} is not supported: items are messages, reasoning, function_call and function_call_output"),
                ))
            }
        }
    }
    b.close();
    Ok(b.out)
}

/// Names each `tool` message of `history` after the function whose call it answers (some
/// templates print it), where an earlier assistant turn made that call: in this request's
/// items or in the stored conversation `previous_response_id` continues.
pub(crate) fn name_results(history: &mut [Message]) {
    let mut names: HashMap<String, String> = HashMap::new();
    for m in history.iter_mut() {
        for c in &m.tool_calls {
            names.insert(c.id.clone(), c.name.clone());
        }
        if m.role.is_tool() && m.name.is_none() {
            m.name = m.tool_call_id.as_ref().and_then(|id| names.get(id).cloned());
        }
    }
}

#[derive(Default)]
struct Builder {
    out: Vec<Message>,
    /// The assistant turn being put together from a reply's items.
    turn: Option<Message>,
}

impl Builder {
    fn close(&mut self) {
        if let Some(turn) = self.turn.take() {
            self.out.push(turn);
        }
    }

    /// The assistant turn that an item of kind `next` goes into: the open one when `next` may
    /// follow what it holds (reasoning, then text, then calls), else a new one.
    fn turn(&mut self, next: Part) -> &mut Message {
        let fits = self.turn.as_ref().is_some_and(|t| match next {
            Part::Reasoning => false,
            Part::Text => t.content.is_empty() && t.tool_calls.is_empty(),
            Part::Call => true,
        });
        if !fits {
            self.close();
        }
        self.turn.get_or_insert_with(|| Message::new(Role::Assistant, ""))
    }

    fn message(&mut self, obj: &Map<String, Value>, at: &str) -> Result<(), ApiError> {
        let role = match obj.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("system" | "developer") => Role::System,
            Some("assistant") => Role::Assistant,
            other => {
                return Err(ApiError::invalid_param(
                    format!("{at}.role"),
                    format!("{at}.role must be user, system, developer or assistant, got {other:?}"),
                ))
            }
        };
        let text = content_text(obj.get("content").unwrap_or(&Value::Null), &format!("{at}.content"))?;
        if role == Role::Assistant {
            self.turn(Part::Text).content = text;
        } else {
            self.close();
            self.out.push(Message::new(role, text));
        }
        Ok(())
    }

    fn reasoning(&mut self, obj: &Map<String, Value>, at: &str) -> Result<(), ApiError> {
        let texts = |field: &str| -> Vec<String> {
            obj.get(field)
                .and_then(Value::as_array)
                .map(|parts| {
                    parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str).map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut text = texts("content").join("");
        if text.is_empty() {
            text = texts("summary").join("\n\n");
        }
        if obj.get("content").is_some_and(|c| !c.is_array() && !c.is_null()) {
            return Err(ApiError::invalid_param(format!("{at}.content"), format!("{at}.content must be a list")));
        }
        let turn = self.turn(Part::Reasoning);
        turn.reasoning_content = (!text.is_empty()).then_some(text);
        Ok(())
    }

    fn call(&mut self, obj: &Map<String, Value>, at: &str) -> Result<(), ApiError> {
        let call_id = string(obj, "call_id", at)?;
        let name = string(obj, "name", at)?;
        let arguments = match obj.get("arguments") {
            None | Some(Value::Null) => "{}".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(v @ Value::Object(_)) => v.to_string(),
            Some(_) => {
                return Err(ApiError::invalid_param(
                    format!("{at}.arguments"),
                    format!("{at}.arguments must be JSON text"),
                ))
            }
        };
        self.turn(Part::Call).tool_calls.push(ToolCall {
            id: call_id,
            name,
            arguments,
        });
        Ok(())
    }

    fn output(&mut self, obj: &Map<String, Value>, at: &str) -> Result<(), ApiError> {
        let call_id = string(obj, "call_id", at)?;
        let text = content_text(obj.get("output").unwrap_or(&Value::Null), &format!("{at}.output"))?;
        self.close();
        let mut m = Message::new(Role::parse("tool"), text);
        m.tool_call_id = Some(call_id);
        self.out.push(m);
        Ok(())
    }
}

/// What an item adds to an assistant turn.
#[derive(Clone, Copy)]
enum Part {
    Reasoning,
    Text,
    Call,
}

/// A required, non-empty string field of an item.
fn string(obj: &Map<String, Value>, field: &str, at: &str) -> Result<String, ApiError> {
    match obj.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(ApiError::invalid_param(
            format!("{at}.{field}"),
            format!("{at}.{field} is required (a string)"),
        )),
    }
}

/// A message's `content` (or a call output's `output`): a string, or text parts joined in
/// order (`input_text`, `output_text`, `text`, `refusal`).
fn content_text(content: &Value, param: &str) -> Result<String, ApiError> {
    let parts = match content {
        Value::Null => return Ok(String::new()),
        Value::String(s) => return Ok(s.clone()),
        Value::Array(parts) => parts,
        _ => {
            return Err(ApiError::invalid_param(
                param,
                format!("{param} must be a string or a list of text parts"),
            ))
        }
    };
    let mut text = String::new();
    for (j, part) in parts.iter().enumerate() {
        let kind = part.get("type").and_then(Value::as_str);
        let field = if kind == Some("refusal") { "refusal" } else { "text" };
        match (kind, part.get(field).and_then(Value::as_str)) {
            (Some("input_text" | "output_text" | "text" | "refusal"), Some(t)) => text.push_str(t),
            (Some("input_text" | "output_text" | "text" | "refusal"), None) => {
                return Err(ApiError::invalid_param(
                    param,
                    format!("{param}[{j}]: a text part needs a string `{field}`"),
                ))
            }
            (Some(other), _) => {
                return Err(ApiError::invalid_param(
                    param,
                    format!("{param}[{j}]: only text parts are supported, not `{other}`"),
                ))
            }
            (None, _) => {
                return Err(ApiError::invalid_param(
                    param,
                    format!("{param}[{j}]: each part must be an object with a `type`"),
                ))
            }
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_string_is_one_user_message() {
        let m = messages(&json!("hi")).unwrap();
        assert_eq!((m.len(), &m[0].role, m[0].content.as_str()), (1, &Role::User, "hi"));
        assert!(messages(&Value::Null).unwrap().is_empty());
        assert!(messages(&json!(3)).is_err());
    }

    #[test]
    fn a_replys_items_sent_back_are_one_assistant_turn() {
        let input = json!([
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "input_text", "text": "weather "}, {"type": "input_text", "text": "in Paris?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "look it up"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
            {"type": "function_call", "call_id": "call_a", "name": "weather", "arguments": "{\"city\": \"Paris\"}"},
            {"type": "function_call", "call_id": "call_b", "name": "time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
            {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "noon"}]},
            {"role": "assistant", "content": "Sunny at noon."},
            {"role": "user", "content": "thanks"},
        ]);
        let mut m = messages(&input).unwrap();
        name_results(&mut m);
        let roles: Vec<String> = m.iter().map(|m| m.role.to_string()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool", "assistant", "user"]);
        assert_eq!(m[1].content, "weather in Paris?");
        let turn = &m[2];
        assert_eq!(turn.reasoning_content.as_deref(), Some("look it up"));
        assert_eq!(turn.content, "Checking.");
        let calls: Vec<(&str, &str)> = turn.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str())).collect();
        assert_eq!(calls, [("call_a", "weather"), ("call_b", "time")]);
        assert_eq!((m[3].tool_call_id.as_deref(), m[3].name.as_deref(), m[3].content.as_str()), (Some("call_a"), Some("weather"), "sunny"));
        assert_eq!((m[4].name.as_deref(), m[4].content.as_str()), (Some("time"), "noon"));
        assert_eq!(m[5].content, "Sunny at noon.");
        assert!(m[5].reasoning_content.is_none());
    }

    #[test]
    fn a_call_alone_is_an_assistant_turn_without_text() {
        let m = messages(&json!([
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]))
        .unwrap();
        assert_eq!(m[1].role, Role::Assistant);
        assert_eq!((m[1].content.as_str(), m[1].tool_calls.len()), ("", 1));
    }

    #[test]
    fn what_cannot_be_read_is_a_400_naming_the_item() {
        for (input, param) in [
            (json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]), "input[0].content"),
            (json!([{"role": "robot", "content": "x"}]), "input[0].role"),
            (json!([{"type": "web_search_call", "id": "w"}]), "input[0].type"),
            (json!([{"type": "function_call", "name": "f"}]), "input[0].call_id"),
            (json!([{"type": "function_call_output", "call_id": "c", "output": 5}]), "input[0].output"),
            (json!(["hi"]), "input[0]"),
        ] {
            let e = messages(&input).unwrap_err();
            assert_eq!(e.body().error.param.as_deref(), Some(param), "{input}: {e}");
        }
    }
}
