//! Anthropic's Messages request: its fields, and `system` plus `messages` as chat [`Message`]s.
//!
//! Owns: [`MessagesFields`] (what `/v1/messages` reads beside the sampling fields it shares
//! with the OpenAI routes: `max_tokens`, `temperature`, `top_p`, `top_k`, `stream`) and
//! [`messages`]. `system` (a string or text blocks) is the system message. A user turn's
//! `tool_result` blocks become `tool` messages answering their `tool_use_id`, in order, and its
//! text blocks one user message after them; an assistant turn's `thinking` block is its
//! `reasoning_content`, its text blocks its content and its `tool_use` blocks its calls (the
//! `input` object as the call's JSON arguments, keys in the order sent). Text blocks of one
//! turn are joined with a blank line. Images, documents and server tools' blocks are a 400
//! naming the block.
//!
//! Counterpart: llama.cpp server's `convert_anthropic_to_oai`; Anthropic's Messages API
//! reference.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::engine::{Grammar, Message, Role, ToolCall};

use super::super::ApiError;

/// `/v1/messages`' own fields.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct MessagesFields {
    #[serde(default)]
    pub messages: Vec<WireTurn>,
    /// A string or a list of text blocks.
    #[serde(default)]
    pub system: Option<Value>,
    /// `{"name", "description", "input_schema"}` each.
    #[serde(default)]
    pub tools: Option<Value>,
    /// `{"type": "auto" | "any" | "tool" | "none", "name"?, "disable_parallel_tool_use"?}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// Strings that end the reply (not included); the one that did is `stop_sequence`.
    #[serde(default)]
    pub stop_sequences: Option<Value>,
    /// `{"type": "enabled" | "disabled" | "adaptive", ...}`: `disabled` turns a thinking
    /// template's reasoning off (`enable_thinking: false`), as far as the template has that
    /// switch.
    #[serde(default)]
    pub thinking: Option<Value>,
    /// Further variables for the chat template, as on `/v1/chat/completions`.
    #[serde(default)]
    pub chat_template_kwargs: Option<Value>,
    /// `{"format": {"type": "json_schema", "schema"}}`: structured output (`effort` is ignored).
    #[serde(default)]
    pub output_config: Option<Value>,
}

/// The field a JSON Schema for the reply comes from.
pub(crate) const FORMAT_FIELD: &str = "output_config.format";

/// One turn as sent.
#[derive(Debug, Deserialize)]
pub(crate) struct WireTurn {
    pub role: String,
    #[serde(default)]
    pub content: Value,
}

impl MessagesFields {
    /// `tool_choice` in OpenAI's words (`auto`, `required`, `none`, a named function), and
    /// whether calls may come several at once.
    pub fn tool_choice(&self) -> Result<(Option<Value>, bool), ApiError> {
        let param = "tool_choice";
        let choice = match &self.tool_choice {
            None | Some(Value::Null) => return Ok((None, true)),
            Some(Value::Object(o)) => o,
            Some(_) => return Err(ApiError::invalid_param(param, "tool_choice must be an object with a `type`")),
        };
        let parallel = !choice.get("disable_parallel_tool_use").and_then(Value::as_bool).unwrap_or(false);
        let openai = match choice.get("type").and_then(Value::as_str) {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => match choice.get("name").and_then(Value::as_str) {
                Some(name) => json!({"type": "function", "name": name}),
                None => return Err(ApiError::invalid_param(param, "a tool_choice of type tool needs a `name`")),
            },
            other => {
                return Err(ApiError::invalid_param(
                    param,
                    format!("tool_choice.type must be auto, any, tool or none, got {other:?}"),
                ))
            }
        };
        Ok((Some(openai), parallel))
    }

    /// `output_config.format` as a grammar: absent or null for free text, else `{"type":
    /// "json_schema", "schema": {...}}`.
    pub fn format(&self) -> Result<Option<Grammar>, ApiError> {
        let format = match self.output_config.as_ref().and_then(|c| c.get("format")) {
            None | Some(Value::Null) => return Ok(None),
            Some(f) => f,
        };
        match (format.get("type").and_then(Value::as_str), format.get("schema")) {
            (Some("json_schema"), Some(schema @ Value::Object(_))) => Ok(Some(Grammar::JsonSchema(schema.clone()))),
            _ => Err(ApiError::invalid_param(
                FORMAT_FIELD,
                "output_config.format must be {\"type\": \"json_schema\", \"schema\": {...}}",
            )),
        }
    }

    /// The template variables: `chat_template_kwargs`, with `enable_thinking: false` added
    /// for `thinking: {"type": "disabled"}` unless the kwargs set it.
    pub fn template_kwargs(&self) -> Option<Value> {
        let disabled = self.thinking.as_ref().and_then(|t| t.get("type")).and_then(Value::as_str) == Some("disabled");
        match (self.chat_template_kwargs.clone(), disabled) {
            (kwargs, false) => kwargs,
            (None | Some(Value::Null), true) => Some(json!({"enable_thinking": false})),
            (Some(Value::Object(mut map)), true) => {
                map.entry("enable_thinking").or_insert(json!(false));
                Some(Value::Object(map))
            }
            (other, true) => other,
        }
    }
}

/// `system` and `messages` as the conversation the chat template renders.
pub(crate) fn messages(system: Option<&Value>, turns: &[WireTurn]) -> Result<Vec<Message>, ApiError> {
    if turns.is_empty() {
        return Err(ApiError::invalid_param("messages", "messages must hold at least one message"));
    }
    let mut out = Vec::new();
    match system {
        None | Some(Value::Null) => {}
        Some(v) => {
            let text = text_of(v, "system")?;
            if !text.is_empty() {
                out.push(Message::new(Role::System, text));
            }
        }
    }
    for (i, turn) in turns.iter().enumerate() {
        let at = format!("messages[{i}]");
        match turn.role.as_str() {
            "user" => user_turn(&turn.content, &at, &mut out)?,
            "assistant" => out.push(assistant_turn(&turn.content, &at)?),
            other => {
                return Err(ApiError::invalid_param(
                    format!("{at}.role"),
                    format!("{at}.role must be user or assistant (the system prompt is `system`), got {other:?}"),
                ))
            }
        }
    }
    Ok(out)
}

/// A turn's content as blocks: a string is one text block.
fn blocks(content: &Value, at: &str) -> Result<Vec<Map<String, Value>>, ApiError> {
    let param = format!("{at}.content");
    match content {
        Value::String(s) => Ok(vec![text_block(s)]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(j, b)| {
                b.as_object()
                    .filter(|o| o.get("type").is_some_and(Value::is_string))
                    .cloned()
                    .ok_or_else(|| ApiError::invalid_param(param.clone(), format!("{param}[{j}] must be an object with a `type`")))
            })
            .collect(),
        _ => Err(ApiError::invalid_param(param.clone(), format!("{param} must be a string or a list of blocks"))),
    }
}

fn text_block(s: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), json!("text"));
    m.insert("text".into(), json!(s));
    m
}

fn user_turn(content: &Value, at: &str, out: &mut Vec<Message>) -> Result<(), ApiError> {
    let mut texts = Vec::new();
    for (j, block) in blocks(content, at)?.iter().enumerate() {
        let param = format!("{at}.content[{j}]");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(block_text(block, &param)?),
            Some("tool_result") => {
                let id = match block.get("tool_use_id") {
                    Some(Value::String(id)) if !id.is_empty() => id.clone(),
                    _ => return Err(ApiError::invalid_param(format!("{param}.tool_use_id"), format!("{param}.tool_use_id is required (a string)"))),
                };
                let text = text_of(block.get("content").unwrap_or(&Value::Null), &format!("{param}.content"))?;
                let mut m = Message::new(Role::parse("tool"), text);
                m.tool_call_id = Some(id);
                out.push(m);
            }
            Some(other) => return Err(unsupported(&param, other)),
            None => return Err(no_type(&param)),
        }
    }
    if !texts.is_empty() {
        out.push(Message::new(Role::User, texts.join("\n\n")));
    }
    Ok(())
}

fn assistant_turn(content: &Value, at: &str) -> Result<Message, ApiError> {
    let mut m = Message::new(Role::Assistant, "");
    let mut texts = Vec::new();
    for (j, block) in blocks(content, at)?.iter().enumerate() {
        let param = format!("{at}.content[{j}]");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(block_text(block, &param)?),
            Some("thinking") => {
                let thinking = block.get("thinking").and_then(Value::as_str).unwrap_or_default();
                if !thinking.is_empty() {
                    m.reasoning_content = Some(thinking.to_owned());
                }
            }
            Some("redacted_thinking") => {}
            Some("tool_use") => {
                let field = |name: &str| match block.get(name) {
                    Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
                    _ => Err(ApiError::invalid_param(format!("{param}.{name}"), format!("{param}.{name} is required (a string)"))),
                };
                let arguments = match block.get("input") {
                    None | Some(Value::Null) => "{}".to_owned(),
                    Some(v @ Value::Object(_)) => v.to_string(),
                    Some(_) => return Err(ApiError::invalid_param(format!("{param}.input"), format!("{param}.input must be an object"))),
                };
                m.tool_calls.push(ToolCall {
                    id: field("id")?,
                    name: field("name")?,
                    arguments,
                });
            }
            Some(other) => return Err(unsupported(&param, other)),
            None => return Err(no_type(&param)),
        }
    }
    m.content = texts.join("\n\n");
    Ok(m)
}

fn no_type(param: &str) -> ApiError {
    ApiError::invalid_param(param, format!("{param} needs a `type`"))
}

fn unsupported(param: &str, kind: &str) -> ApiError {
    ApiError::invalid_param(
        param,
        format!("{param}: `{kind}` blocks are not supported (text, thinking, tool_use and tool_result are)"),
    )
}

fn block_text(block: &Map<String, Value>, param: &str) -> Result<String, ApiError> {
    block
        .get("text")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ApiError::invalid_param(param, format!("{param}: a text block needs a string `text`")))
}

/// `system` or a tool result's `content`: a string, or text blocks joined with a blank line.
fn text_of(v: &Value, param: &str) -> Result<String, ApiError> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(items) => {
            let mut texts = Vec::new();
            for (j, b) in items.iter().enumerate() {
                let at = format!("{param}[{j}]");
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => texts.push(b.get("text").and_then(Value::as_str).map(str::to_owned).ok_or_else(|| {
                        ApiError::invalid_param(at.clone(), format!("{at}: a text block needs a string `text`"))
                    })?),
                    Some(other) => return Err(unsupported(&at, other)),
                    None => return Err(no_type(&at)),
                }
            }
            Ok(texts.join("\n\n"))
        }
        _ => Err(ApiError::invalid_param(param, format!("{param} must be a string or a list of text blocks"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turns(v: Value) -> Vec<WireTurn> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_tool_conversation_reads_as_chat_messages() {
        let system = json!([{"type": "text", "text": "You code."}, {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]);
        let t = turns(json!([
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "use ls", "signature": ""},
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls", "cwd": "/"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.rs"}]},
                {"type": "text", "text": "Now read it."},
            ]},
        ]));
        let m = messages(Some(&system), &t).unwrap();
        let roles: Vec<String> = m.iter().map(|m| m.role.to_string()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(m[0].content, "You code.\n\nBe brief.");
        assert_eq!(m[2].reasoning_content.as_deref(), Some("use ls"));
        assert_eq!(m[2].content, "Listing.");
        assert_eq!(m[2].tool_calls[0].arguments, r#"{"command":"ls","cwd":"/"}"#, "keys in the order sent");
        assert_eq!((m[3].tool_call_id.as_deref(), m[3].content.as_str()), (Some("toolu_1"), "a.rs"));
        assert_eq!(m[4].content, "Now read it.");
    }

    #[test]
    fn tool_choice_and_thinking_map_to_openais_words() {
        let f = |v: Value| MessagesFields {
            tool_choice: Some(v),
            ..MessagesFields::default()
        };
        assert_eq!(f(json!({"type": "any"})).tool_choice().unwrap(), (Some(json!("required")), true));
        assert_eq!(
            f(json!({"type": "tool", "name": "bash", "disable_parallel_tool_use": true})).tool_choice().unwrap(),
            (Some(json!({"type": "function", "name": "bash"})), false)
        );
        assert!(f(json!({"type": "sometimes"})).tool_choice().is_err());
        let thinking = MessagesFields {
            thinking: Some(json!({"type": "disabled"})),
            ..MessagesFields::default()
        };
        assert_eq!(thinking.template_kwargs(), Some(json!({"enable_thinking": false})));
    }

    #[test]
    fn what_cannot_be_read_is_a_400_naming_the_block() {
        for (t, param) in [
            (json!([{"role": "user", "content": [{"type": "image", "source": {}}]}]), "messages[0].content[0]"),
            (json!([{"role": "system", "content": "x"}]), "messages[0].role"),
            (json!([{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]), "messages[0].content[0].tool_use_id"),
            (json!([{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}]), "messages[0].content[0].input"),
            (json!([{"role": "user", "content": 5}]), "messages[0].content"),
        ] {
            let e = messages(None, &turns(t.clone())).unwrap_err();
            assert_eq!(e.body().error.param.as_deref(), Some(param), "{t}: {e}");
        }
        assert_eq!(messages(None, &[]).unwrap_err().body().error.param.as_deref(), Some("messages"));
    }
}
