//! Ollama's API: `/api/chat`, `/api/generate`, `/api/embed` (and the older `/api/embeddings`),
//! `/api/tags`, `/api/show`, `/api/ps`, `/api/version`, and `GET /`.
//!
//! Many local tools speak Ollama's API rather than OpenAI's (Open WebUI, editor plugins, note
//! apps, the `ollama` Python and JavaScript libraries); pointed at hearth
//! (`OLLAMA_HOST=http://127.0.0.1:8080`), they run on the loaded model. A request runs exactly
//! as on `/v1/chat/completions` or `/v1/completions`: the same chat template, tool-call
//! parsing, grammars (`format`), sampling and reasoning split, and the same prefix cache; only
//! the wire shapes differ. Replies stream by default, one JSON object per line. Errors are
//! Ollama's shape, `{"error": "..."}`, with the same statuses as the OpenAI routes. hearth
//! serves the one model it was started with: the model routes list it, and those that would
//! pull, push, create, copy or delete models answer 501.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the chat, generate and embedding handlers; errors in Ollama's shape |
//! | `input.rs` | the requests' fields and `options`; messages and their calls |
//! | `output.rs` | the message, `tool_calls`, `done_reason`, timings, `created_at` |
//! | `stream.rs` | the streamed lines |
//! | `models.rs` | the model routes, `/api/version`, `GET /`, the routes hearth does not serve |
//!
//! Counterpart: Ollama's `server/routes.go` (`ChatHandler`, `GenerateHandler`,
//! `EmbedHandler`); vLLM and llama.cpp's server have none.

mod input;
mod models;
mod output;
mod stream;

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::header::{RETRY_AFTER, WWW_AUTHENTICATE};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::{infill_ids, normalize, Infill, Message, Role};

use super::params::Plan;
use super::reply::Reply;
use super::tools::{Shape, ToolRequest};
use super::{body, embeddings, generation, params, ApiError, AppState};

use input::OllamaFields;
use stream::Route;

pub(crate) use models::{copy_or_delete, create_or_push, ps, pull, root, show, tags, version};

/// `POST /api/chat`.
pub(crate) async fn chat(State(state): State<AppState>, request: Result<Bytes, BytesRejection>) -> Response {
    answer(chat_reply(&state, request).await)
}

/// `POST /api/generate`.
pub(crate) async fn generate(State(state): State<AppState>, request: Result<Bytes, BytesRejection>) -> Response {
    answer(generate_reply(&state, request).await)
}

fn answer(r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(|e| error_response(&e))
}

/// The request's fields, checked, with its [`Plan`] and the name to answer with.
fn read(state: &AppState, value: &Value) -> Result<(OllamaFields, Plan, String), ApiError> {
    let f = body::fields::<OllamaFields>(value)?;
    f.refuse_unsupported()?;
    let name = f.model_name(state)?;
    // As Ollama: reasoning asked of a model whose template has none is refused.
    if f.asks_to_think() && state.engine().model().info.reasoning.is_none() {
        return Err(ApiError::invalid_param("think", format!("\"{name}\" does not support thinking")));
    }
    let mut plan = params::plan(state, f.common(state)?)?;
    if let Some(g) = f.grammar()? {
        plan.params.grammar = Some(g);
        plan.grammar_from = Some(input::FORMAT_FIELD);
    }
    Ok((f, plan, name))
}

async fn chat_reply(state: &AppState, request: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let started = Instant::now();
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let (mut f, mut plan, name) = read(state, &value)?;
    let wire = f.messages.take().unwrap_or_default();
    if wire.is_empty() {
        return Ok(Json(output::loaded(&name, true)).into_response());
    }
    let tools = ToolRequest::read(f.tools.as_ref(), f.tool_choice.as_ref())?;
    plan.offer_tools(&tools, state.engine(), true);
    let kwargs = f.template_kwargs()?;
    let messages = input::messages(wire)?;
    let prompt = generation::chat_prompt(state, messages, tools.tools, Shape::Nested, kwargs).await?;
    plan.think_for(state.engine(), prompt.reasoning, true);
    run(state, prompt.ids, plan, name, Route::Chat, started).await
}

async fn generate_reply(state: &AppState, request: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let started = Instant::now();
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let (f, mut plan, name) = read(state, &value)?;
    let text = f.prompt.clone().unwrap_or_default();
    let context = f.context.clone().unwrap_or_default();
    let suffix = f.suffix.clone().filter(|s| !s.is_empty());
    if text.is_empty() && context.is_empty() && suffix.is_none() {
        return Ok(Json(output::loaded(&name, false)).into_response());
    }
    let raw = f.raw.unwrap_or(false);
    let kwargs = f.template_kwargs()?;
    let system = f.system.clone().filter(|s| !s.is_empty());
    if let Some(suffix) = suffix {
        // Fill-in-the-middle: the prompt is the code before the gap; no template, no context.
        let infill = Infill {
            prefix: text,
            suffix,
            ..Infill::default()
        };
        let ids = generation::tokenize(state, move |engine| {
            infill_ids(&engine.model().tokenizer, &infill).map_err(|e| ApiError::invalid_param("suffix", e.to_string()))
        })
        .await?;
        return run(state, ids, plan, name, Route::Generate { context: None }, started).await;
    }
    let prompt = generation::tokenize(state, move |engine| {
        if raw {
            return Ok::<_, ApiError>((engine.tokenize(&text)?, None));
        }
        let mut messages: Vec<Message> = system.into_iter().map(|s| Message::new(Role::System, s)).collect();
        messages.push(Message::new(Role::User, text));
        let p = engine.chat_prompt(&messages, &[], &kwargs)?;
        Ok((p.ids, p.reasoning))
    })
    .await?;
    let (mut ids, reasoning) = prompt;
    if !raw {
        plan.think_for(state.engine(), reasoning, true);
    }
    if !context.is_empty() {
        // The earlier turn's ids, then this one's without its BOS (the context has one).
        let bos = state.engine().model().tokenizer.bos_id();
        let skip = usize::from(bos.is_some() && ids.first().copied() == bos);
        ids = context.into_iter().chain(ids.into_iter().skip(skip)).collect();
    }
    let route = Route::Generate {
        context: (!raw).then(|| ids.clone()),
    };
    run(state, ids, plan, name, route, started).await
}

/// Submits `prompt`; answers with its lines, or with the whole reply.
async fn run(
    state: &AppState,
    prompt: Vec<u32>,
    plan: Plan,
    name: String,
    route: Route,
    started: Instant,
) -> Result<Response, ApiError> {
    let events = generation::submit(state, prompt, &plan, None)?;
    if plan.stream {
        return Ok(stream::ndjson(events, plan, name, route, started));
    }
    let report = generation::collect(events).await?;
    let reply = Reply::of(&plan, &report.text);
    let mut out = output::line(&name);
    match route {
        Route::Chat => {
            out.insert("message".into(), output::message(&reply));
        }
        Route::Generate { context } => {
            out.insert("response".into(), json!(reply.content));
            if let Some(r) = &reply.reasoning {
                out.insert("thinking".into(), json!(r));
            }
            if let Some(ids) = context {
                out.insert("context".into(), stream::generate_context(&ids, &report));
            }
        }
    }
    output::finish(&mut out, &report, started);
    Ok(Json(Value::Object(out)).into_response())
}

#[derive(Debug, Deserialize)]
struct EmbedFields {
    model: Option<String>,
    /// A string or a list of strings.
    #[serde(default)]
    input: Value,
    /// Absent: true: inputs over the context are cut to fit; false: refused.
    truncate: Option<bool>,
    dimensions: Option<u64>,
}

/// `POST /api/embed`: unit vectors, as `/v1/embeddings` gives them.
pub(crate) async fn embed(State(state): State<AppState>, request: Result<Bytes, BytesRejection>) -> Response {
    answer(embed_reply(&state, request).await)
}

async fn embed_reply(state: &AppState, request: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let started = Instant::now();
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let f = body::fields::<EmbedFields>(&value)?;
    let name = input::model_name(state, f.model.as_deref())?;
    let texts = match f.input {
        Value::Null => Vec::new(),
        Value::String(s) => vec![s],
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s),
                _ => Err(ApiError::invalid_param(
                    format!("input[{i}]"),
                    format!("input[{i}] must be a string"),
                )),
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(ApiError::invalid_param(
                "input",
                "input must be a string or a list of strings",
            ))
        }
    };
    let pooling = embeddings::pooling_for(state, &name)?;
    let dimensions = embeddings::dimensions(state, f.dimensions)?;
    if texts.len() > embeddings::MAX_INPUTS {
        return Err(ApiError::invalid_param(
            "input",
            format!(
                "at most {} inputs per request, not {}",
                embeddings::MAX_INPUTS,
                texts.len()
            ),
        ));
    }
    let mut prompts = tokenize_all(state, texts).await?;
    if f.truncate.unwrap_or(true) {
        let room = state.engine().model_info().context_length.saturating_sub(1);
        for p in &mut prompts {
            p.truncate(room);
        }
    }
    let vectors = embeddings::embed_all(state, &prompts, pooling, "input").await?;
    let vectors: Vec<Vec<f32>> = vectors
        .into_iter()
        .map(|mut v| {
            v.truncate(dimensions);
            normalize(&mut v);
            v
        })
        .collect();
    let tokens: usize = prompts.iter().map(Vec::len).sum();
    Ok(Json(json!({
        "model": name,
        "embeddings": vectors,
        "total_duration": u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
        "load_duration": 0,
        "prompt_eval_count": tokens,
    }))
    .into_response())
}

async fn tokenize_all(state: &AppState, texts: Vec<String>) -> Result<Vec<Vec<u32>>, ApiError> {
    generation::tokenize(state, move |engine| {
        texts
            .iter()
            .map(|t| engine.tokenize_for_embedding(t))
            .collect::<Result<Vec<Vec<u32>>, _>>()
    })
    .await
}

#[derive(Debug, Deserialize)]
struct LegacyEmbeddingFields {
    model: Option<String>,
    prompt: Option<String>,
}

/// `POST /api/embeddings` (Ollama's older route): one prompt's vector, pooled but not
/// normalized, as Ollama answers there; an empty prompt gives an empty vector.
pub(crate) async fn embeddings(State(state): State<AppState>, request: Result<Bytes, BytesRejection>) -> Response {
    let reply = async {
        let value = body::json_object(request, state.config().max_body_bytes)?;
        let f = body::fields::<LegacyEmbeddingFields>(&value)?;
        let name = input::model_name(&state, f.model.as_deref())?;
        let pooling = embeddings::pooling_for(&state, &name)?;
        let text = f.prompt.unwrap_or_default();
        if text.is_empty() {
            return Ok(Json(json!({"embedding": []})).into_response());
        }
        let prompts = tokenize_all(&state, vec![text]).await?;
        let vector = embeddings::embed_all(&state, &prompts, pooling, "prompt")
            .await?
            .pop()
            .unwrap_or_default();
        Ok::<_, ApiError>(Json(json!({"embedding": vector})).into_response())
    };
    answer(reply.await)
}

/// `e` as Ollama answers: its status (and `Retry-After` or `WWW-Authenticate`, when it has
/// one), `{"error": ...}`.
pub(crate) fn error_response(e: &ApiError) -> Response {
    let openai = e.clone().into_response();
    let mut response = (e.status(), Json(json!({"error": e.body().error.message}))).into_response();
    for name in [RETRY_AFTER, WWW_AUTHENTICATE] {
        if let Some(value) = openai.headers().get(&name) {
            response.headers_mut().insert(name, value.clone());
        }
    }
    response
}
