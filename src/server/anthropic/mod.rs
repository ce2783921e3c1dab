//! Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`.
//!
//! Coding agents built for Claude (Claude Code, and tools on Anthropic's SDKs) speak this API;
//! pointed at hearth (`ANTHROPIC_BASE_URL=http://127.0.0.1:8080`), they run on the local model.
//! They resend a long system prompt, their tools and the whole history on every turn, which
//! is what the prefix cache serves. A request runs exactly as on `/v1/chat/completions`: the
//! same chat template, tool-call parsing and forced calls (`tool_choice` `any` or `tool`),
//! grammars (`output_config.format`'s JSON Schema), sampling and reasoning split; only the wire shapes differ. Errors are Anthropic's shape,
//! `{"type": "error", "error": {"type", "message"}}`, with the same statuses.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the handlers; errors in Anthropic's shape |
//! | `input.rs` | the request's own fields; `system` and `messages` as chat messages |
//! | `output.rs` | the `message` object, its blocks, `stop_reason`, `usage` |
//! | `events.rs` | the streamed events |
//!
//! Counterpart: llama.cpp server's `/v1/messages` (`handle_anthropic_messages`); vLLM has
//! none.

mod events;
mod input;
mod output;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::header::RETRY_AFTER;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::engine::ChatPrompt;

use super::params::Plan;
use super::protocol::CommonFields;
use super::reply::Reply;
use super::tools::{Shape, ToolRequest};
use super::{body, chat, generation, params, ApiError, AppState};

use input::MessagesFields;

pub(crate) async fn create(State(state): State<AppState>, request: Result<Bytes, BytesRejection>) -> Response {
    match reply(&state, request).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

async fn reply(state: &AppState, request: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let value = body::json_object(request, state.config().max_body_bytes)?;
    if value.get("max_tokens").is_none_or(Value::is_null) {
        return Err(ApiError::invalid_param("max_tokens", "max_tokens is required"));
    }
    let (plan, prompt) = prepare(state, &value).await?;
    let prompt_tokens = prompt.ids.len();
    let events = generation::submit(state, prompt.ids, &plan, None)?;
    let id = output::message_id();
    if plan.stream {
        return Ok(events::sse(events, plan, id, prompt_tokens).into_response());
    }
    let report = generation::collect(events).await?;
    let reply = Reply::of(&plan, &report.text);
    Ok(Json(output::message(&id, &plan.model, &report, &reply)).into_response())
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens"}`, the prompt the same body would send.
pub(crate) async fn count_tokens(State(state): State<AppState>, request: Result<Bytes, BytesRejection>) -> Response {
    let counted = async {
        let value = body::json_object(request, state.config().max_body_bytes)?;
        let (_, prompt) = prepare(&state, &value).await?;
        Ok::<_, ApiError>(Json(json!({"input_tokens": prompt.ids.len()})).into_response())
    };
    match counted.await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

/// The request read into a [`Plan`] and rendered into its prompt.
async fn prepare(state: &AppState, value: &Value) -> Result<(Plan, ChatPrompt), ApiError> {
    let fields = body::fields::<MessagesFields>(value)?;
    let mut common = body::fields::<CommonFields>(value)?;
    // Anthropic's names: `stop_sequences`, and no OpenAI-only fields.
    common.stop = fields.stop_sequences.clone();
    common.max_completion_tokens = None;
    common.response_format = None;
    common.stream_options = None;
    common.n = None;
    if common.max_tokens == Some(0) {
        return Err(ApiError::invalid_param("max_tokens", "max_tokens must be at least 1"));
    }
    let mut plan = params::plan(state, common)?;
    if let Some(grammar) = fields.format()? {
        plan.params.grammar = Some(grammar);
        plan.grammar_from = Some(input::FORMAT_FIELD);
    }
    let (choice, parallel) = fields.tool_choice()?;
    let tools = ToolRequest::read_shaped(fields.tools.as_ref(), choice.as_ref(), Shape::Anthropic)?;
    plan.offer_tools(&tools, state.engine(), parallel);
    let kwargs = chat::template_kwargs(fields.template_kwargs())?;
    let messages = input::messages(fields.system.as_ref(), &fields.messages)?;
    let prompt = generation::chat_prompt(state, messages, tools.tools, Shape::Anthropic, kwargs).await?;
    plan.think_for(state.engine(), prompt.reasoning, true);
    Ok((plan, prompt))
}

/// Anthropic's error body for `e`.
pub(crate) fn error_body(e: &ApiError) -> Value {
    let kind = match e.status().as_u16() {
        400 | 405 | 408 | 414 | 431 => "invalid_request_error",
        401 => "authentication_error",
        404 => "not_found_error",
        413 => "request_too_large",
        503 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": e.body().error.message}})
}

/// `e` as Anthropic answers: its status (and `Retry-After`, when it has one), Anthropic's body.
fn error_response(e: &ApiError) -> Response {
    let openai = e.clone().into_response();
    let mut response = (e.status(), Json(error_body(e))).into_response();
    if let Some(retry) = openai.headers().get(RETRY_AFTER) {
        response.headers_mut().insert(RETRY_AFTER, retry.clone());
    }
    response
}
