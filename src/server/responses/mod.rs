//! OpenAI's Responses API: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`.
//!
//! The newer of OpenAI's two text APIs, which its own agents and recent SDK examples use: a
//! request sends `input` (a string, or messages, reasoning, function calls and their outputs as
//! items) and `instructions`; the answer is a `response` whose `output` holds a `reasoning`
//! item (a thinking model), a `message` and `function_call` items. Generation is the chat
//! route's: the same chat template, tool-call parsing, forced calls and grammars
//! (`text.format` is chat's `response_format`), sampling fields and limits
//! (`max_output_tokens`).
//!
//! With `store` (the default), the response and the whole conversation it ends are kept in
//! memory ([`store::ResponseStore`]), so a request with `previous_response_id` sends only what
//! is new, and the prompt it renders starts with the very tokens the previous turn left in the
//! prefix cache. `instructions` are not inherited (OpenAI's rule): each request sends its own.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the handlers: reading the request into a [`Plan`] and a prompt, answering whole |
//! | `input.rs` | the request's own fields; `input` items as chat messages |
//! | `output.rs` | the `response` object, its items, `usage` |
//! | `events.rs` | the streamed events |
//! | `store.rs` | the stored responses |
//!
//! Counterpart: vLLM's `serving_responses.py` (`OpenAIServingResponses`).

mod events;
mod input;
mod output;
pub(crate) mod store;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::engine::{Message, Role};

use super::params::Plan;
use super::protocol::CommonFields;
use super::tools::{Shape, ToolRequest};
use super::{body, chat, generation, params, structured, ApiError, AppState};

use input::ResponsesFields;
use output::{Frame, Reply};
use store::Stored;

pub(crate) async fn create(
    State(state): State<AppState>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let fields = body::fields::<ResponsesFields>(&value)?;
    fields.check_unsupported()?;
    let mut plan = plan(&state, &value, &fields)?;
    let tools = ToolRequest::read_shaped(fields.tools.as_ref(), fields.tool_choice.as_ref(), Shape::Flat)?;
    plan.offer_tools(&tools, state.engine(), fields.parallel_tool_calls.unwrap_or(true));
    let mut kwargs = chat::template_kwargs(fields.chat_template_kwargs.clone())?;
    let effort = fields.reasoning.as_ref().and_then(|r| r.get("effort"));
    chat::reasoning_effort(&mut kwargs, effort, "reasoning.effort")?;
    let instructions = fields.instructions()?;
    let mut history = match &fields.previous_response_id {
        Some(id) => state.responses().get(id).map(|s| s.history.clone()).ok_or_else(|| {
            ApiError::NotFound(format!(
                "previous_response_id: no stored response {id:?} (responses are kept in memory until the server restarts, and the oldest go when the store is full)"
            ))
        })?,
        None => Vec::new(),
    };
    history.extend(input::messages(&fields.input)?);
    input::name_results(&mut history);
    if !history.iter().any(|m| m.role != Role::System) {
        return Err(ApiError::invalid_param("input", "input must hold at least one message or item"));
    }
    let mut prompt_messages: Vec<Message> = instructions.iter().map(|i| Message::new(Role::System, i.clone())).collect();
    prompt_messages.extend(history.iter().cloned());
    let prompt = generation::chat_prompt(&state, prompt_messages, tools.tools.clone(), Shape::Flat, kwargs).await?;
    plan.think_for(state.engine(), prompt.reasoning, true);
    let frame = frame(&fields, &plan, instructions);
    let events = generation::submit(&state, prompt.ids, &plan, None)?;
    let keep = fields.store.unwrap_or(true).then_some(history);
    if plan.stream {
        return Ok(events::sse(state.clone(), events, plan, frame, keep).into_response());
    }
    let report = generation::collect(events).await?;
    let reply = Reply::of(&plan, &report.text);
    let status = output::status_of(&report);
    let usage = output::usage(&report, plan.reasoning_tokens(&report));
    let response = frame.response(status, output::items(&reply, status), Some(usage), None);
    if let Some(history) = keep {
        self::keep(&state, &frame.id, response.clone(), history, &reply);
    }
    Ok(Json(response).into_response())
}

/// The request's sampling fields as the completion routes read them, with the Responses
/// API's names for the reply's limit (`max_output_tokens`) and format (`text.format`).
fn plan(state: &AppState, value: &Value, fields: &ResponsesFields) -> Result<Plan, ApiError> {
    let mut common = body::fields::<CommonFields>(value)?;
    common.max_tokens = None;
    common.max_completion_tokens = fields.max_output_tokens;
    common.response_format = None;
    common.stream_options = None;
    // Not a Responses field: one output per response.
    common.n = None;
    let mut plan = params::plan(state, common)?;
    if let Some(grammar) = structured::text_format(fields.format())? {
        plan.params.grammar = Some(grammar);
        plan.grammar_from = Some(structured::TEXT_FIELD);
    }
    Ok(plan)
}

/// What every `response` object of this request repeats: its id and the settings it ran with.
fn frame(fields: &ResponsesFields, plan: &Plan, instructions: Option<String>) -> Frame {
    let sampling = &plan.params.sampling;
    let max_output = (plan.params.max_tokens != usize::MAX).then_some(plan.params.max_tokens);
    let settings = json!({
        "model": plan.model,
        "instructions": instructions,
        "max_output_tokens": max_output,
        "parallel_tool_calls": plan.parallel_calls,
        "previous_response_id": fields.previous_response_id,
        "reasoning": fields.reasoning.clone().unwrap_or(json!({"effort": null, "summary": null})),
        "store": fields.store.unwrap_or(true),
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "text": {"format": fields.format().cloned().unwrap_or(json!({"type": "text"}))},
        "tool_choice": fields.tool_choice.clone().unwrap_or(json!(if plan.tool_calls.is_some() { "auto" } else { "none" })),
        "tools": fields.tools.clone().unwrap_or(json!([])),
        "truncation": "disabled",
        "metadata": fields.metadata.clone().unwrap_or(json!({})),
    });
    Frame {
        id: output::item_id("resp"),
        created_at: super::state::unix_now(),
        settings: match settings {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        },
    }
}

/// Stores a finished response with its conversation: `history` (this request's and the earlier
/// turns) and the reply.
fn keep(state: &AppState, id: &str, response: Value, mut history: Vec<Message>, reply: &Reply) {
    history.push(reply.message());
    state.responses().insert(id.to_owned(), Stored { response, history });
}

/// `GET /v1/responses/{id}`: a stored response as it was returned.
pub(crate) async fn retrieve(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    match state.responses().get(&id) {
        Some(stored) => Ok(Json(stored.response.clone()).into_response()),
        None => Err(not_stored(&id)),
    }
}

/// `DELETE /v1/responses/{id}`.
pub(crate) async fn delete(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    if state.responses().remove(&id) {
        Ok(Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
    } else {
        Err(not_stored(&id))
    }
}

fn not_stored(id: &str) -> ApiError {
    ApiError::NotFound(format!(
        "no stored response {id:?} (responses are kept in memory until the server restarts)"
    ))
}
