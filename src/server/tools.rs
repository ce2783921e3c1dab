//! `tools`, `tool_choice` and the tool calls of messages and replies.
//!
//! Owns: reading a request's `tools` (OpenAI's `{"type": "function", "function": {"name",
//! "description", "parameters"}}`) into the engine's [`Tool`]s and `tool_choice` (`none`,
//! `auto`, `required`, or `{"type": "function", "function": {"name"}}`) into [`Choice`], with
//! a 400 naming the field for anything malformed; an assistant message's `tool_calls`; and the
//! reply's calls in OpenAI's shape (`call_...` ids, arguments as JSON text). The model's own
//! format (which the engine knows from the chat template) decides how calls are rendered,
//! parsed and forced.
//!
//! Counterpart: vLLM's `ChatCompletionToolsParam`, `ToolChoice` validation in `protocol.py`
//! and `serving_chat.py`'s tool-call handling.

use serde::Serialize;
use serde_json::Value;

use crate::engine::{EngineHandle, Grammar, ParsedCall, Tool, ToolCall, ToolFormat};

use super::ApiError;

/// What the request allows the model to do with its tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    /// Never call (the tools are still shown to the model, so the prompt stays the same).
    None,
    /// Call or answer, as the model decides.
    Auto,
    /// Call one of the tools.
    Required,
    /// Call this tool.
    Named(String),
}

/// A request's tools and what it allows.
#[derive(Debug, Clone)]
pub(crate) struct ToolRequest {
    pub tools: Vec<Tool>,
    pub choice: Choice,
}

impl ToolRequest {
    /// Reads `tools` and `tool_choice`.
    pub fn read(tools: Option<&Value>, choice: Option<&Value>) -> Result<Self, ApiError> {
        Self::read_shaped(tools, choice, Shape::Nested)
    }

    /// [`ToolRequest::read`] for tools written in `shape`.
    pub fn read_shaped(tools: Option<&Value>, choice: Option<&Value>, shape: Shape) -> Result<Self, ApiError> {
        let tools = match tools {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                items.iter().enumerate().map(|(i, t)| tool(i, t, shape)).collect::<Result<_, _>>()?
            }
            Some(_) => return Err(ApiError::invalid_param("tools", "tools must be a list of functions")),
        };
        for (i, t) in tools.iter().enumerate() {
            if tools[..i].iter().any(|o| o.name == t.name) {
                return Err(ApiError::invalid_param(
                    format!("tools[{i}]{}.name", shape.prefix()),
                    format!("two tools are named {:?}", t.name),
                ));
            }
        }
        let choice = read_choice(choice, &tools)?;
        Ok(Self { tools, choice })
    }

    /// Whether the reply is read for calls.
    pub fn parses_calls(&self) -> bool {
        !self.tools.is_empty() && self.choice != Choice::None
    }

    /// The grammar that forces a call (`required`, or a named tool), as `engine`'s model
    /// writes calls.
    pub fn forced(&self, engine: &EngineHandle) -> Option<Grammar> {
        match &self.choice {
            Choice::Required => Some(engine.forced_call(&self.tools)),
            Choice::Named(name) => {
                let named: Vec<Tool> = self.tools.iter().filter(|t| &t.name == name).cloned().collect();
                Some(engine.forced_call(&named))
            }
            Choice::None | Choice::Auto => None,
        }
    }
}

/// How a request writes each tool: chat's `{"type": "function", "function": {"name", ...}}`,
/// the Responses API's flat `{"type": "function", "name", ...}`, or Anthropic's `{"name",
/// "description", "input_schema"}` (`type` absent or `custom`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Nested,
    Flat,
    Anthropic,
}

impl Shape {
    /// Where a tool's `name`, `description` and `parameters` sit inside it.
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Self::Nested => ".function",
            Self::Flat | Self::Anthropic => "",
        }
    }

    /// The key of a tool's JSON Schema.
    fn schema_key(self) -> &'static str {
        match self {
            Self::Nested | Self::Flat => "parameters",
            Self::Anthropic => "input_schema",
        }
    }

    /// Where a tool's JSON Schema sits inside it (`.function.parameters`, ...).
    pub(crate) fn schema_field(self) -> String {
        format!("{}.{}", self.prefix(), self.schema_key())
    }

    /// The `type` a function tool has (it may also leave `type` out).
    fn kind(self) -> &'static str {
        match self {
            Self::Nested | Self::Flat => "function",
            Self::Anthropic => "custom",
        }
    }
}

fn tool(i: usize, v: &Value, shape: Shape) -> Result<Tool, ApiError> {
    let at = |field: &str| format!("tools[{i}]{field}");
    let fat = |field: &str| format!("tools[{i}]{}{field}", shape.prefix());
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::invalid_param(at(""), format!("{} must be an object", at(""))))?;
    match obj.get("type").and_then(Value::as_str) {
        None => {}
        Some(kind) if kind == shape.kind() => {}
        Some(other) => {
            return Err(ApiError::invalid_param(
                at(".type"),
                format!("{} must be {:?} (hearth runs no built-in tools), not {other:?}", at(".type"), shape.kind()),
            ))
        }
    }
    let f = match shape {
        Shape::Flat | Shape::Anthropic => obj,
        Shape::Nested => obj.get("function").and_then(Value::as_object).ok_or_else(|| {
            ApiError::invalid_param(at(".function"), format!("{} must be an object with a name", at(".function")))
        })?,
    };
    let name = match f.get("name").and_then(Value::as_str) {
        Some(n) if valid_name(n) => n.to_owned(),
        Some(n) => {
            return Err(ApiError::invalid_param(
                fat(".name"),
                format!(
                    "{} must be 1 to 64 letters, digits, '_', '-' or '.', got {n:?}",
                    fat(".name")
                ),
            ))
        }
        None => {
            return Err(ApiError::invalid_param(
                fat(".name"),
                format!("{} is required (a string)", fat(".name")),
            ))
        }
    };
    let description = match f.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => {
            return Err(ApiError::invalid_param(
                fat(".description"),
                format!("{} must be a string", fat(".description")),
            ))
        }
    };
    let parameters = match f.get(shape.schema_key()) {
        None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(ApiError::invalid_param(
                fat(&format!(".{}", shape.schema_key())),
                format!("{} must be a JSON Schema object", fat(&format!(".{}", shape.schema_key()))),
            ))
        }
    };
    Ok(Tool {
        name,
        description,
        parameters,
    })
}

/// OpenAI's rule for function names.
fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len()) && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

fn read_choice(choice: Option<&Value>, tools: &[Tool]) -> Result<Choice, ApiError> {
    let param = "tool_choice";
    let choice = match choice {
        None | Some(Value::Null) => {
            return Ok(if tools.is_empty() { Choice::None } else { Choice::Auto });
        }
        Some(Value::String(s)) => match s.as_str() {
            "none" => Choice::None,
            "auto" => Choice::Auto,
            "required" => Choice::Required,
            other => {
                return Err(ApiError::invalid_param(
                    param,
                    format!("tool_choice must be none, auto, required or a function, not {other:?}"),
                ))
            }
        },
        Some(Value::Object(o)) => {
            // Chat's `{"function": {"name"}}` or the Responses API's `{"name"}`.
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::invalid_param(param, "tool_choice must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}")
                })?;
            if !tools.iter().any(|t| t.name == name) {
                return Err(ApiError::invalid_param(
                    param,
                    format!("tool_choice names the function {name:?}, which is not among tools"),
                ));
            }
            Choice::Named(name.to_owned())
        }
        Some(_) => {
            return Err(ApiError::invalid_param(
                param,
                "tool_choice must be a string or an object naming a function",
            ))
        }
    };
    if tools.is_empty() && matches!(choice, Choice::Required | Choice::Named(_)) {
        return Err(ApiError::invalid_param(param, "tool_choice requires tools"));
    }
    Ok(choice)
}

/// `messages[i].tool_calls`: OpenAI's `[{"id", "type": "function", "function": {"name",
/// "arguments"}}]` (arguments a JSON string; an object is accepted too).
pub(crate) fn message_calls(value: Option<&Value>, i: usize) -> Result<Vec<ToolCall>, ApiError> {
    let param = format!("messages[{i}].tool_calls");
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(ApiError::invalid_param(param.clone(), format!("{param} must be a list"))),
    };
    items
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let bad = |what: &str| ApiError::invalid_param(param.clone(), format!("{param}[{j}]: {what}"));
            let f = c.get("function").ok_or_else(|| bad("needs a `function`"))?;
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| bad("needs a function name"))?;
            let arguments = match f.get("arguments") {
                None | Some(Value::Null) => "{}".to_owned(),
                Some(Value::String(s)) => s.clone(),
                Some(v @ Value::Object(_)) => v.to_string(),
                Some(_) => return Err(bad("arguments must be a JSON string")),
            };
            let id = match c.get("id") {
                None | Some(Value::Null) => format!("call_{i}_{j}"),
                Some(Value::String(s)) => s.clone(),
                Some(_) => return Err(bad("id must be a string")),
            };
            Ok(ToolCall {
                id,
                name: name.to_owned(),
                arguments,
            })
        })
        .collect()
}

/// A call in a reply (whole, or one streamed chunk's `delta.tool_calls` entry with `index`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WireToolCall {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: WireFunction,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct WireFunction {
    pub name: String,
    pub arguments: String,
}

/// `calls` in OpenAI's shape, each with a fresh id of the model's `format`; `indexed` for
/// stream chunks.
pub(crate) fn wire_calls(calls: Vec<ParsedCall>, indexed: bool, format: ToolFormat) -> Vec<WireToolCall> {
    calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| WireToolCall {
            index: indexed.then_some(i),
            id: format.call_id(),
            kind: "function",
            function: WireFunction {
                name: c.name,
                arguments: c.arguments,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}})
    }

    #[test]
    fn tools_and_choices() {
        let r = ToolRequest::read(Some(&json!([weather()])), None).unwrap();
        assert_eq!((r.tools.len(), r.choice.clone()), (1, Choice::Auto));
        assert!(r.parses_calls());
        let r = ToolRequest::read(None, None).unwrap();
        assert_eq!(r.choice, Choice::None);
        let named = json!({"type": "function", "function": {"name": "weather"}});
        let r = ToolRequest::read(Some(&json!([weather()])), Some(&named)).unwrap();
        assert_eq!(r.choice, Choice::Named("weather".into()));
    }

    #[test]
    fn malformed_tools_name_the_field() {
        let cases = [
            (json!([{"type": "function", "function": {"parameters": {}}}]), "tools[0].function.name"),
            (json!([{"type": "function", "function": {"name": "a b"}}]), "tools[0].function.name"),
            (json!([{"type": "function", "function": {"name": "f", "parameters": "x"}}]), "tools[0].function.parameters"),
            (json!([{"type": "retrieval"}]), "tools[0].type"),
            (json!([weather(), weather()]), "tools[1].function.name"),
            (json!({"a": 1}), "tools"),
        ];
        for (tools, param) in cases {
            let e = ToolRequest::read(Some(&tools), None).unwrap_err();
            assert_eq!(e.body().error.param.as_deref(), Some(param), "{tools}: {e}");
        }
        for choice in [json!("sometimes"), json!({"type": "function", "function": {"name": "other"}}), json!(3)] {
            let e = ToolRequest::read(Some(&json!([weather()])), Some(&choice)).unwrap_err();
            assert_eq!(e.body().error.param.as_deref(), Some("tool_choice"), "{choice}");
        }
        assert!(ToolRequest::read(None, Some(&json!("required"))).is_err());
    }

    #[test]
    fn message_calls_read_openai_shape() {
        let calls = json!([{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]);
        let c = message_calls(Some(&calls), 1).unwrap();
        assert_eq!(c[0].name, "weather");
        assert_eq!(c[0].arguments, "{\"city\": \"Paris\"}");
        assert!(message_calls(Some(&json!([{"id": "x"}])), 1).is_err());
    }
}
