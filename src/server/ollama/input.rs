//! Ollama's requests: `/api/chat`'s and `/api/generate`'s fields, `options`, and messages.
//!
//! Owns: [`OllamaFields`] and [`Options`] (what the two routes read; unknown fields and
//! options are ignored, as Ollama ignores them, and a known one of the wrong type is a 400
//! naming it), their translation into the OpenAI routes' [`CommonFields`] (`num_predict` is
//! `max_tokens`, -1 and -2 the server's default; `repeat_penalty`; a negative `seed` is a
//! random one; `stream` defaults to true), `format` (`"json"` or a JSON Schema) as a grammar,
//! `tool_choice` as on the OpenAI routes (hearth's extension), `think` (false turns a thinking template off, `"low"`/`"medium"`/`"high"` is gpt-oss's
//! `reasoning_effort`), what hearth cannot do as a 400 naming the field (`images`, a Go
//! `template`, `logprobs`), and [`messages`]. An assistant turn's `tool_calls` carry
//! their arguments as an object and (from Ollama's clients) no ids: each gets one from its
//! place in the conversation (`call00000`, `call00001`, …; nine letters and digits, which
//! every template accepts, Mistral's too), and a `tool` message without `tool_call_id` answers
//! the earliest call not yet answered. The same history always renders the same prompt, so a
//! resent conversation is served from the prefix cache.
//!
//! Counterpart: Ollama's `api/types.go` (`ChatRequest`, `GenerateRequest`, `Options`).

use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::{Grammar, Message, Role, TemplateKwargs, ToolCall};

use super::super::protocol::CommonFields;
use super::super::{chat, ApiError, AppState};

/// The fields `/api/chat` and `/api/generate` read.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct OllamaFields {
    pub model: Option<String>,
    /// `/api/chat`: the conversation.
    pub messages: Option<Vec<WireMessage>>,
    /// `/api/generate`: the user's text (or, with `raw`, the whole prompt).
    pub prompt: Option<String>,
    /// `/api/generate`: the system message.
    pub system: Option<String>,
    /// `/api/generate`: send `prompt` as it is, without the chat template.
    pub raw: Option<bool>,
    /// `/api/generate`: the ids an earlier reply's `context` gave, continued.
    pub context: Option<Vec<u32>>,
    /// `/api/generate`: the code after the gap `prompt` is before (fill-in-the-middle).
    pub suffix: Option<String>,
    pub template: Option<String>,
    pub images: Option<Value>,
    /// `"json"`, a JSON Schema, or `""`/null for free text.
    pub format: Option<Value>,
    pub options: Option<Options>,
    /// Absent: true (Ollama streams by default).
    pub stream: Option<bool>,
    /// A boolean, or `"low"`, `"medium"`, `"high"`.
    pub think: Option<Value>,
    /// OpenAI's function tools.
    pub tools: Option<Value>,
    /// hearth's extension (Ollama has none): OpenAI's `tool_choice` (`auto`, `none`,
    /// `required`, a named function) to force a call.
    pub tool_choice: Option<Value>,
    pub logprobs: Option<bool>,
}

/// The `options` hearth acts on; the others (`num_ctx`, `num_gpu`, `num_thread`, `mirostat`,
/// …) are the server's to choose and are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Options {
    pub num_predict: Option<i64>,
    pub temperature: Option<f32>,
    pub top_k: Option<i64>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub seed: Option<i64>,
    /// A list of strings (a string is accepted too).
    pub stop: Option<Value>,
    pub repeat_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
}

/// One message as sent.
#[derive(Debug, Deserialize)]
pub(crate) struct WireMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub thinking: Option<String>,
    #[serde(default)]
    pub images: Option<Value>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireCall>>,
    /// A `tool` message: the function that answered.
    #[serde(default)]
    pub tool_name: Option<String>,
    /// A `tool` message: the call it answers (newer clients send it).
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

/// A call in an assistant turn.
#[derive(Debug, Deserialize)]
pub(crate) struct WireCall {
    #[serde(default)]
    pub id: Option<String>,
    pub function: WireFunction,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireFunction {
    pub name: String,
    /// An object (a JSON string of one is accepted too).
    #[serde(default)]
    pub arguments: Value,
}

/// The field a JSON Schema or `"json"` comes from.
pub(crate) const FORMAT_FIELD: &str = "format";

impl OllamaFields {
    /// The model's name as the request gave it (Ollama's answers repeat it), after checking
    /// that it names the loaded model: its id or an alias, with or without `:latest`.
    pub fn model_name(&self, state: &AppState) -> Result<String, ApiError> {
        model_name(state, self.model.as_deref())
    }

    /// The sampling and length fields in the OpenAI routes' words.
    pub fn common(&self, state: &AppState) -> Result<CommonFields, ApiError> {
        let o = self.options.as_ref();
        let max_tokens = match o.and_then(|o| o.num_predict) {
            None | Some(-1 | -2) => None,
            Some(n) if n > 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            Some(n) => {
                return Err(ApiError::invalid_param(
                    "options.num_predict",
                    format!("options.num_predict must be at least 1, or -1 for no limit, not {n}"),
                ))
            }
        };
        Ok(CommonFields {
            model: Some(state.config().model_id.clone()),
            max_tokens,
            temperature: o.and_then(|o| o.temperature),
            top_p: o.and_then(|o| o.top_p),
            top_k: o.and_then(|o| o.top_k),
            min_p: o.and_then(|o| o.min_p),
            repetition_penalty: o.and_then(|o| o.repeat_penalty),
            presence_penalty: o.and_then(|o| o.presence_penalty),
            frequency_penalty: o.and_then(|o| o.frequency_penalty),
            seed: o.and_then(|o| o.seed).and_then(|s| u64::try_from(s).ok()),
            stop: o.and_then(|o| o.stop.clone()),
            stream: Some(self.stream.unwrap_or(true)),
            ..CommonFields::default()
        })
    }

    /// `format` as a grammar: `"json"` for any JSON object, an object for its JSON Schema.
    pub fn grammar(&self) -> Result<Option<Grammar>, ApiError> {
        match &self.format {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) if s == "json" => Ok(Some(Grammar::JsonObject)),
            Some(schema @ Value::Object(_)) => Ok(Some(Grammar::JsonSchema(schema.clone()))),
            Some(other) => Err(ApiError::invalid_param(
                FORMAT_FIELD,
                format!("format must be \"json\" or a JSON Schema object, not {other}"),
            )),
        }
    }

    /// Whether `think` asks for reasoning (`true` or a level), which Ollama refuses on a model
    /// without the `thinking` capability.
    pub fn asks_to_think(&self) -> bool {
        matches!(&self.think, Some(Value::Bool(true) | Value::String(_)))
    }

    /// The chat template's variables `think` sets: `enable_thinking: false` for `false`,
    /// `reasoning_effort` for a level; none for `true` or no `think`.
    pub fn template_kwargs(&self) -> Result<TemplateKwargs, ApiError> {
        let mut kwargs = TemplateKwargs::new();
        match &self.think {
            None | Some(Value::Null) | Some(Value::Bool(true)) => {}
            Some(Value::Bool(false)) => {
                kwargs.insert("enable_thinking".into(), json!(false));
            }
            Some(level @ Value::String(s)) if ["low", "medium", "high"].contains(&s.as_str()) => {
                chat::reasoning_effort(&mut kwargs, Some(level), "think")?;
            }
            Some(other) => {
                return Err(ApiError::invalid_param(
                    "think",
                    format!("think must be true, false, \"low\", \"medium\" or \"high\", not {other}"),
                ))
            }
        }
        Ok(kwargs)
    }

    /// What hearth cannot do, as a 400 naming the field: images (hearth runs text models),
    /// a Go `template` (hearth renders the file's own Jinja
    /// chat template), `logprobs` (`/v1/chat/completions` has them).
    pub fn refuse_unsupported(&self) -> Result<(), ApiError> {
        if self.images.as_ref().is_some_and(has_items) {
            return Err(ApiError::invalid_param(
                "images",
                "images are not supported: hearth runs text-only models",
            ));
        }
        if self.template.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::invalid_param(
                "template",
                "a template in the request is not supported: hearth renders the model file's own chat template (use raw for a prompt written whole)",
            ));
        }
        if self.logprobs == Some(true) {
            return Err(ApiError::invalid_param(
                "logprobs",
                "logprobs are not supported on /api routes; /v1/chat/completions and /v1/completions have them",
            ));
        }
        Ok(())
    }
}

/// A non-empty list or a non-empty string: images were sent.
fn has_items(v: &Value) -> bool {
    match v {
        Value::Array(a) => !a.is_empty(),
        Value::String(s) => !s.is_empty(),
        Value::Null => false,
        _ => true,
    }
}

/// The name `requested` as the answers repeat it, once it names the loaded model (its id or
/// an alias, `:latest` allowed after either); absent or empty: the name the model routes list.
pub(crate) fn model_name(state: &AppState, requested: Option<&str>) -> Result<String, ApiError> {
    let Some(name) = requested.filter(|n| !n.is_empty()) else {
        return Ok(super::models::listed_name(state));
    };
    let bare = name.strip_suffix(":latest").unwrap_or(name);
    state
        .resolve_model(Some(name))
        .or_else(|e| state.resolve_model(Some(bare)).map_err(|_| e))?;
    Ok(name.to_owned())
}

/// `/api/chat`'s messages as the conversation the chat template renders.
pub(crate) fn messages(wire: Vec<WireMessage>) -> Result<Vec<Message>, ApiError> {
    let mut out = Vec::with_capacity(wire.len());
    let mut calls = 0usize;
    // Calls of earlier assistant turns not yet answered by a `tool` message, oldest first.
    let mut unanswered: VecDeque<String> = VecDeque::new();
    for (i, m) in wire.into_iter().enumerate() {
        let at = format!("messages[{i}]");
        if m.images.as_ref().is_some_and(has_items) {
            return Err(ApiError::invalid_param(
                format!("{at}.images"),
                format!("{at}.images: images are not supported: hearth runs text-only models"),
            ));
        }
        let role = match m.role.as_str() {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::parse("tool"),
            other => {
                return Err(ApiError::invalid_param(
                    format!("{at}.role"),
                    format!("{at}.role must be system, user, assistant or tool, got {other:?}"),
                ))
            }
        };
        let mut message = Message::new(role, m.content.unwrap_or_default());
        if message.role == Role::Assistant {
            message.reasoning_content = m.thinking.filter(|t| !t.is_empty());
            for (j, call) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
                let id = call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("call{calls:05}"));
                calls += 1;
                let arguments = match call.function.arguments {
                    Value::Null => "{}".to_owned(),
                    v @ Value::Object(_) => v.to_string(),
                    Value::String(s) if serde_json::from_str::<Value>(&s).is_ok_and(|v| v.is_object()) => s,
                    _ => {
                        let param = format!("{at}.tool_calls[{j}].function.arguments");
                        return Err(ApiError::invalid_param(
                            param.clone(),
                            format!("{param} must be an object"),
                        ));
                    }
                };
                unanswered.push_back(id.clone());
                message.tool_calls.push(ToolCall {
                    id,
                    name: call.function.name,
                    arguments,
                });
            }
        }
        if message.role.is_tool() {
            message.tool_call_id = match m.tool_call_id.filter(|id| !id.is_empty()) {
                Some(id) => {
                    unanswered.retain(|u| *u != id);
                    Some(id)
                }
                None => unanswered.pop_front(),
            };
            message.name = m.tool_name.filter(|n| !n.is_empty());
        }
        out.push(message);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(v: Value) -> Vec<WireMessage> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn calls_get_ids_from_their_place_and_results_answer_them_in_order() {
        let m = messages(wire(json!([
            {"role": "system", "content": "You help."},
            {"role": "user", "content": "Weather in Paris and Oslo?"},
            {"role": "assistant", "content": "", "thinking": "two calls", "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}},
                {"function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
            ]},
            {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
            {"role": "tool", "content": "rain", "tool_name": "get_weather"},
        ])))
        .unwrap();
        let roles: Vec<String> = m.iter().map(|m| m.role.to_string()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
        let calls = &m[2].tool_calls;
        assert_eq!((calls[0].id.as_str(), calls[1].id.as_str()), ("call00000", "call00001"));
        assert_eq!(
            calls[0].arguments, r#"{"city":"Paris","unit":"C"}"#,
            "keys in the order sent"
        );
        assert_eq!(calls[1].arguments, r#"{"city": "Oslo"}"#);
        assert_eq!(m[2].reasoning_content.as_deref(), Some("two calls"));
        assert_eq!(
            (m[3].tool_call_id.as_deref(), m[3].name.as_deref()),
            (Some("call00000"), Some("get_weather"))
        );
        assert_eq!(m[4].tool_call_id.as_deref(), Some("call00001"));
    }

    #[test]
    fn what_cannot_be_read_is_a_400_naming_the_field() {
        for (v, param) in [
            (
                json!([{"role": "user", "content": "x", "images": ["aGk="]}]),
                "messages[0].images",
            ),
            (json!([{"role": "robot", "content": "x"}]), "messages[0].role"),
            (
                json!([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}]),
                "messages[0].tool_calls[0].function.arguments",
            ),
        ] {
            let e = messages(wire(v.clone())).unwrap_err();
            assert_eq!(e.body().error.param.as_deref(), Some(param), "{v}: {e}");
        }
        let f = |v: Value| serde_json::from_value::<OllamaFields>(v).unwrap();
        for (v, param) in [
            (json!({"images": ["aGk="]}), "images"),
            (json!({"template": "{{ .Prompt }}"}), "template"),
            (json!({"logprobs": true}), "logprobs"),
        ] {
            let e = f(v.clone()).refuse_unsupported().unwrap_err();
            assert_eq!(e.body().error.param.as_deref(), Some(param), "{v}");
        }
        assert!(f(json!({"images": [], "suffix": "", "template": ""}))
            .refuse_unsupported()
            .is_ok());
        assert_eq!(
            f(json!({"format": 5}))
                .grammar()
                .unwrap_err()
                .body()
                .error
                .param
                .as_deref(),
            Some("format")
        );
        assert_eq!(
            f(json!({"format": "json"})).grammar().unwrap(),
            Some(Grammar::JsonObject)
        );
        assert_eq!(f(json!({"format": ""})).grammar().unwrap(), None);
        assert_eq!(
            f(json!({"think": "max"}))
                .template_kwargs()
                .unwrap_err()
                .body()
                .error
                .param
                .as_deref(),
            Some("think")
        );
        assert_eq!(
            f(json!({"think": false}))
                .template_kwargs()
                .unwrap()
                .get("enable_thinking"),
            Some(&json!(false))
        );
        assert_eq!(
            f(json!({"think": "low"}))
                .template_kwargs()
                .unwrap()
                .get("reasoning_effort"),
            Some(&json!("low"))
        );
    }
}
