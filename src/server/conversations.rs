//! `/v1/conversations`: hearth's own routes for the conversations it keeps (the desktop app's
//! list, through HTTP). Each handler is one [`crate::engine::EngineHandle`] conversation call.
//!
//! - `GET /v1/conversations`: the list, most recently updated first.
//! - `POST /v1/conversations` `{"title"?, "system_prompt"?}`: a new, empty conversation.
//! - `GET /v1/conversations/{id}`: one conversation with its messages.
//! - `PATCH /v1/conversations/{id}` `{"title"?, "system_prompt"?}`: rename, set or clear
//!   (`""` or `null`) the system prompt.
//! - `DELETE /v1/conversations/{id}`: its text and its cache file.
//! - `POST /v1/conversations/{id}/messages` `{"content", ...}`: save the user's message, reply.
//! - `POST /v1/conversations/{id}/regenerate` `{...}`: drop the last reply, reply again.
//! - `PUT /v1/conversations/{id}/messages/{index}` `{"content", ...}`: replace the user's
//!   message at `index`, drop what follows, reply.
//!
//! The three that reply take the completion fields (`stream`, `max_tokens`, sampling; a
//! conversation's own settings win) and answer as `/v1/chat/completions` does; the reply is
//! saved to the conversation when it finishes.
//!
//! Invariants: every call that writes runs on the blocking pool (file writes, the chat
//! template), and a refused call writes nothing (the engine's conversation API checks first).
//!
//! Counterpart: Open WebUI's `/api/v1/chats` routes; OpenAI's Conversations API in spirit.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::{ConversationId, ConversationSettings, EngineError, EngineHandle, RequestStream};

use super::choices::Choice;
use super::protocol::{CommonFields, Kind};
use super::{body, generation, params, ApiError, AppState};

/// The fields of a create or change.
#[derive(Debug, Default, Deserialize)]
struct ConversationFields {
    title: Option<String>,
    /// `Some(None)`: sent as `null` (clear it).
    #[serde(default, deserialize_with = "present")]
    system_prompt: Option<Option<String>>,
}

/// The field of a message sent or edited.
#[derive(Debug, Deserialize)]
struct MessageFields {
    content: String,
}

/// A present field, even `null`, as `Some`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

fn parse_id(id: &str) -> Result<ConversationId, ApiError> {
    ConversationId::parse(id).map_err(|e| ApiError::invalid_param("id", e.to_string()))
}

/// Runs `f` with the engine on the blocking pool.
async fn blocking<T, F>(state: &AppState, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&EngineHandle) -> Result<T, EngineError> + Send + 'static,
{
    let engine = state.engine().clone();
    tokio::task::spawn_blocking(move || f(&engine))
        .await
        .map_err(|e| ApiError::Internal(format!("the conversation call failed: {e}")))?
        .map_err(ApiError::from)
}

pub(crate) async fn list(State(state): State<AppState>) -> Result<Response, ApiError> {
    let list = blocking(&state, |e| e.list_conversations()).await?;
    Ok(Json(json!({"object": "list", "data": list})).into_response())
}

pub(crate) async fn create(
    State(state): State<AppState>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let f: ConversationFields = body::fields(&value)?;
    let settings = ConversationSettings {
        system_prompt: f.system_prompt.flatten().filter(|p| !p.trim().is_empty()),
        ..Default::default()
    };
    let (c, unsaved) = blocking(&state, move |e| {
        let c = e.create_conversation(f.title.as_deref(), settings)?;
        let unsaved = e.unsaved_reason(&c.id);
        Ok((c, unsaved))
    })
    .await?;
    let response = (axum::http::StatusCode::CREATED, Json(c)).into_response();
    Ok(generation::mark_unsaved(response, unsaved.as_deref()))
}

pub(crate) async fn get(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let c = blocking(&state, move |e| e.conversation(&id)).await?;
    Ok(Json(c).into_response())
}

pub(crate) async fn change(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let f: ConversationFields = body::fields(&value)?;
    if f.title.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return Err(ApiError::invalid_param("title", "a title cannot be empty"));
    }
    let c = blocking(&state, move |e| {
        let mut changed = None;
        if let Some(title) = &f.title {
            changed = Some(e.rename_conversation(&id, title)?);
        }
        if let Some(prompt) = &f.system_prompt {
            changed = Some(e.set_system_prompt(&id, prompt.as_deref())?);
        }
        // Each change returns the conversation as written; with none, read it.
        changed.map_or_else(|| e.conversation(&id), Ok)
    })
    .await?;
    Ok(Json(c).into_response())
}

pub(crate) async fn delete(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let shown = id.to_string();
    blocking(&state, move |e| e.delete_conversation(&id)).await?;
    Ok(Json(json!({"id": shown, "object": "conversation.deleted", "deleted": true})).into_response())
}

pub(crate) async fn send(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let text = body::fields::<MessageFields>(&value)?.content;
    reply(&state, &value, id, move |e, id, p| e.send_message(id, Some(&text), p)).await
}

pub(crate) async fn regenerate(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let value = body::json_object(request, state.config().max_body_bytes)?;
    reply(&state, &value, id, move |e, id, p| e.regenerate(id, p)).await
}

pub(crate) async fn edit(
    State(state): State<AppState>,
    Path((id, index)): Path<(String, String)>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let index: usize = index
        .parse()
        .map_err(|_| ApiError::invalid_param("index", format!("`{index}` is not a message index")))?;
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let text = body::fields::<MessageFields>(&value)?.content;
    reply(&state, &value, id, move |e, id, p| {
        e.edit_and_resend(id, index, &text, p)
    })
    .await
}

/// Plans the reply from the body's completion fields, starts it with `start` and answers as a
/// chat completion (streamed or whole), marked "not saved" when conversation `id` is only in
/// memory (a full disk).
async fn reply<F>(state: &AppState, value: &Value, id: ConversationId, start: F) -> Result<Response, ApiError>
where
    F: FnOnce(&EngineHandle, &ConversationId, &crate::engine::GenerateParams) -> Result<RequestStream, EngineError>
        + Send
        + 'static,
{
    let mut plan = params::plan(state, body::fields::<CommonFields>(value)?)?;
    plan.one_choice("a conversation's turn saves one reply")?;
    // A conversation's turns render through the plain template, as the model's own probe did.
    let reasoning = state.engine().model_info().reasoning;
    plan.think_for(state.engine(), reasoning, true);
    let params = plan.params.clone();
    let (events, unsaved) = blocking(state, move |e| {
        let events = start(e, &id, &params)?;
        Ok((events, e.unsaved_reason(&id)))
    })
    .await?;
    let response = generation::answer(state.engine(), vec![Choice::one(events)], &plan, Kind::Chat).await?;
    Ok(generation::mark_unsaved(response, unsaved.as_deref()))
}
