//! `POST /v1/chat/completions`.
//!
//! Owns: reading `messages` (each `content` a string, a list of `{"type": "text", "text"}`
//! parts joined in order, or null for an empty turn; other part types are refused) into
//! [`Message`]s, which the engine renders through the model's chat template with the
//! generation prompt and the request's `chat_template_kwargs`; `reasoning_format` (whether a
//! thinking model's reasoning comes back apart), and an assistant turn's `reasoning_content`.
//!
//! Counterpart: vLLM's `serving_chat.py` and `chat_utils.py` (content parts).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::Response;
use serde_json::Value;

use crate::engine::{
    check_kwargs, ConversationId, EngineError, EngineHandle, Grammar, GrammarError, Message, Role, SaveTo, TemplateKwargs,
    Tool,
};

use super::protocol::{ChatFields, CommonFields, Kind, WireMessage};
use super::tools::{message_calls, Shape, ToolRequest};
use super::{body, generation, params, structured, ApiError, AppState};

pub(crate) async fn handle(
    State(state): State<AppState>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let mut plan = params::plan(&state, body::fields::<CommonFields>(&value)?)?;
    let fields = body::fields::<ChatFields>(&value)?;
    plan.params.logprobs = params::chat_logprobs(fields.logprobs, fields.top_logprobs)?;
    let tools = ToolRequest::read(fields.tools.as_ref(), fields.tool_choice.as_ref())?;
    plan.offer_tools(&tools, state.engine(), fields.parallel_tool_calls.unwrap_or(true));
    let mut kwargs = template_kwargs(fields.chat_template_kwargs)?;
    reasoning_effort(&mut kwargs, fields.reasoning_effort.as_ref(), "reasoning_effort")?;
    let split_reasoning = split_reasoning(fields.reasoning_format.as_ref())?;
    let messages = messages(fields.messages)?;
    let save = match fields.conversation_id {
        None => None,
        Some(id) => {
            plan.one_choice("a request with conversation_id saves one reply")?;
            Some(save_to(&id, &messages)?)
        }
    };
    let (prompt, unsaved) = generation::tokenize(&state, {
        let conversation = save.as_ref().map(|s| s.conversation.clone());
        // `submit` compiles the request's grammar (a 400 before anything is queued); with a
        // conversation to save first, it is compiled before that save too.
        let grammar = plan.params.grammar.clone().filter(|_| conversation.is_some());
        let grammar_from = plan.grammar_from;
        move |engine| {
            check_schemas(engine, &tools.tools, Shape::Nested, grammar.as_ref(), grammar_from)?;
            let prompt = engine.chat_prompt(&messages, &tools.tools, &kwargs)?;
            // The request's messages are saved before generating (a valid prompt only). A
            // write that fails keeps them in memory (written later) and the reply says so.
            let mut unsaved = None;
            if let Some(conversation) = conversation {
                match engine.save_messages(&conversation, &messages) {
                    Ok(kept) => unsaved = kept.and_then(|k| k.unsaved),
                    Err(e) => {
                        tracing::warn!("could not save conversation {conversation} before replying: {e}");
                        unsaved = Some(e.to_string());
                    }
                }
            }
            Ok::<_, ApiError>((prompt, unsaved))
        }
    })
    .await?;
    plan.think_for(state.engine(), prompt.reasoning, split_reasoning);
    let response = generation::respond(&state, prompt.ids, plan, Kind::Chat, save).await?;
    Ok(generation::mark_unsaved(response, unsaved.as_deref()))
}

/// Compiles each tool's `parameters` (its tools written in `shape`) and the request's grammar;
/// what does not compile is a 400 naming its field.
pub(crate) fn check_schemas(
    engine: &EngineHandle,
    tools: &[Tool],
    shape: Shape,
    grammar: Option<&Grammar>,
    grammar_from: Option<&str>,
) -> Result<(), ApiError> {
    for (i, t) in tools.iter().enumerate() {
        let field = format!("tools[{i}]{}", shape.schema_field());
        match engine.check_grammar(&Grammar::JsonSchema(t.parameters.clone())) {
            Ok(()) => {}
            // A model whose vocabulary the grammar engine cannot take (no end-of-sequence
            // token) can still be offered tools; only a forced call needs the grammar.
            Err(EngineError::Grammar(GrammarError::Vocabulary(why))) => {
                tracing::debug!("tool schemas not checked: {why}");
                break;
            }
            Err(e) => return Err(structured::named(e, Some(&field))),
        }
    }
    if let Some(g) = grammar {
        engine.check_grammar(g).map_err(|e| structured::named(e, grammar_from))?;
    }
    Ok(())
}

/// `conversation_id`: the conversation this turn is saved as (its messages, the reply and the
/// cache file). The id names files, so only letters, digits, `-` and `_` are accepted.
fn save_to(id: &str, messages: &[Message]) -> Result<SaveTo, ApiError> {
    let conversation =
        ConversationId::parse(id).map_err(|e| ApiError::invalid_param("conversation_id", e.to_string()))?;
    let messages = messages
        .iter()
        .enumerate()
        .map(|(i, m)| match m.role {
            Role::System | Role::User | Role::Assistant => Ok(m.clone()),
            _ if m.role.is_tool() => Ok(m.clone()),
            Role::Other(_) => Err(ApiError::invalid_param(
                format!("messages[{i}].role"),
                format!(
                    "a request with conversation_id may only hold system, user, assistant and tool messages, not `{}`",
                    m.role
                ),
            )),
        })
        .collect::<Result<_, _>>()?;
    Ok(SaveTo {
        conversation,
        messages: Some(messages),
    })
}

pub(crate) fn messages(wire: Vec<WireMessage>) -> Result<Vec<Message>, ApiError> {
    if wire.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "messages must hold at least one message",
        ));
    }
    wire.into_iter()
        .enumerate()
        .map(|(i, m)| {
            let role = match m.role.as_str() {
                "system" | "developer" => Role::System,
                "user" => Role::User,
                "assistant" => Role::Assistant,
                "tool" => Role::parse("tool"),
                other => {
                    return Err(ApiError::invalid_param(
                        format!("messages[{i}].role"),
                        format!(
                            "messages[{i}].role must be system, developer, user, assistant or tool, got {:?}",
                            other
                        ),
                    ))
                }
            };
            // Only an assistant turn may come without text (OpenAI: one that made tool calls).
            if m.content.is_null() && role != Role::Assistant {
                return Err(ApiError::invalid_param(
                    format!("messages[{i}].content"),
                    format!("messages[{i}].content is required for a {} message", m.role),
                ));
            }
            let mut message = Message::new(role, content_text(m.content, i)?);
            if message.role == Role::Assistant {
                message.tool_calls = message_calls(m.tool_calls.as_ref(), i)?;
                message.reasoning_content =
                    optional_string(m.reasoning_content, &format!("messages[{i}].reasoning_content"))?;
            }
            if message.role.is_tool() {
                message.tool_call_id = optional_string(m.tool_call_id, &format!("messages[{i}].tool_call_id"))?;
            }
            message.name = optional_string(m.name, &format!("messages[{i}].name"))?;
            Ok(message)
        })
        .collect()
}

/// `chat_template_kwargs`: absent, null or an object whose fields do not name a variable
/// hearth sets itself.
pub(crate) fn template_kwargs(v: Option<Value>) -> Result<TemplateKwargs, ApiError> {
    const FIELD: &str = "chat_template_kwargs";
    match v {
        None | Some(Value::Null) => Ok(TemplateKwargs::new()),
        Some(Value::Object(map)) => {
            check_kwargs(&map).map_err(|why| ApiError::invalid_param(FIELD, format!("{FIELD}: {why}")))?;
            Ok(map)
        }
        Some(_) => Err(ApiError::invalid_param(FIELD, format!("{FIELD} must be an object"))),
    }
}

/// The reasoning efforts OpenAI's API names.
const EFFORTS: [&str; 4] = ["minimal", "low", "medium", "high"];

/// A request's reasoning effort (`field`: `reasoning_effort`, or the Responses API's
/// `reasoning.effort`) as the template variable `reasoning_effort`, which gpt-oss's template
/// reads (other templates ignore it); `chat_template_kwargs` setting it wins. Absent or null:
/// the template's default. Anything but OpenAI's four words is a 400 naming `field`.
pub(crate) fn reasoning_effort(kwargs: &mut TemplateKwargs, effort: Option<&Value>, field: &str) -> Result<(), ApiError> {
    match effort {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if EFFORTS.contains(&s.as_str()) => {
            kwargs.entry("reasoning_effort").or_insert_with(|| Value::String(s.clone()));
            Ok(())
        }
        Some(other) => Err(ApiError::invalid_param(
            field,
            format!("{field} must be one of \"minimal\", \"low\", \"medium\" or \"high\", got {other}"),
        )),
    }
}

/// `reasoning_format`: whether a thinking model's reasoning is returned apart from its
/// content (`auto`, `deepseek`, absent: yes; `none`: no, it stays in `content`).
fn split_reasoning(v: Option<&Value>) -> Result<bool, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(true),
        Some(Value::String(s)) if s == "auto" || s == "deepseek" => Ok(true),
        Some(Value::String(s)) if s == "none" => Ok(false),
        Some(other) => Err(ApiError::invalid_param(
            "reasoning_format",
            format!("reasoning_format must be \"auto\", \"deepseek\" or \"none\", got {other}"),
        )),
    }
}

/// An optional string field of a message.
fn optional_string(v: Option<Value>, param: &str) -> Result<Option<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::invalid_param(param, format!("{param} must be a string"))),
    }
}

/// A message's `content` as one string.
fn content_text(content: Value, index: usize) -> Result<String, ApiError> {
    let param = format!("messages[{index}].content");
    match content {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s),
        Value::Array(parts) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    (Some("text"), None) => {
                        return Err(ApiError::invalid_param(
                            param.clone(),
                            format!("{param}[{j}]: a text part needs a string `text`"),
                        ))
                    }
                    (Some(other), _) => {
                        return Err(ApiError::invalid_param(
                            param.clone(),
                            format!("{param}[{j}]: only text parts are supported, not `{other}`"),
                        ))
                    }
                    (None, _) => {
                        return Err(ApiError::invalid_param(
                            param.clone(),
                            format!("{param}[{j}]: each part must be an object with a `type`"),
                        ))
                    }
                }
            }
            Ok(text)
        }
        _ => Err(ApiError::invalid_param(
            param.clone(),
            format!("{param} must be a string or a list of text parts"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_reasoning_effort_is_a_template_variable_the_kwargs_may_override() {
        let mut kwargs = TemplateKwargs::new();
        reasoning_effort(&mut kwargs, Some(&json!("low")), "reasoning_effort").unwrap();
        assert_eq!(kwargs.get("reasoning_effort"), Some(&json!("low")));
        let mut given = TemplateKwargs::new();
        given.insert("reasoning_effort".into(), json!("high"));
        reasoning_effort(&mut given, Some(&json!("low")), "reasoning_effort").unwrap();
        assert_eq!(given.get("reasoning_effort"), Some(&json!("high")));
        let mut none = TemplateKwargs::new();
        reasoning_effort(&mut none, Some(&Value::Null), "reasoning_effort").unwrap();
        assert!(none.is_empty());
        for bad in [json!("extreme"), json!(3), json!("Low\n# Instructions")] {
            let e = reasoning_effort(&mut none, Some(&bad), "reasoning.effort").unwrap_err();
            assert_eq!(e.body().error.param.as_deref(), Some("reasoning.effort"), "{bad}");
        }
    }

    #[test]
    fn content_is_a_string_text_parts_or_null() {
        assert_eq!(content_text(json!("hi"), 0).unwrap(), "hi");
        assert_eq!(content_text(Value::Null, 0).unwrap(), "");
        let parts = json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]);
        assert_eq!(content_text(parts, 0).unwrap(), "ab");
        let image = json!([{"type": "image_url", "image_url": {"url": "x"}}]);
        let e = content_text(image, 2).unwrap_err();
        assert!(e.body().error.message.contains("messages[2].content[0]"), "{e}");
        assert!(content_text(json!(5), 0).is_err());
        assert!(content_text(json!([{"text": "a"}]), 0).is_err());
    }
}
