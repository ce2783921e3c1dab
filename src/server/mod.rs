//! `hearth --headless`: an OpenAI-compatible HTTP server over the engine.
//!
//! The server only translates: it parses OpenAI's JSON, tokenizes, submits a
//! [`crate::engine::GenerateRequest`] through the [`crate::engine::EngineHandle`] and turns
//! the request's [`crate::engine::Event`]s back into OpenAI's JSON or server-sent events.
//! Scheduling, batching and the cache are the engine's.
//!
//! The pieces, one concern each:
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`router`]: the routes and their layers (body limit, auth on `/v1`) |
//! | `serve.rs` | [`serve`] on a listener: connection cap, header timeout, graceful shutdown; [`shutdown_signal`] |
//! | `timeout_body.rs` | the request body's idle deadline ([`BODY_TIMEOUT`]; 408 when it passes) |
//! | `state.rs` | [`AppState`] (the engine handle and the [`ServerConfig`]) shared by every handler |
//! | `error.rs` | [`ApiError`]: every failure as an HTTP status and OpenAI's `{"error": ...}` body |
//! | `auth.rs` | the `Authorization: Bearer` check on `/v1` routes |
//! | `body.rs` | reading a JSON body from bytes, so malformed input gets our 400, and 413 over the limit |
//! | `protocol.rs` | OpenAI's wire types: request fields, responses, stream chunks, usage |
//! | `params.rs` | request fields → the engine's [`crate::engine::GenerateParams`] (defaults, ranges, `n`, `stop`) |
//! | `chat.rs` | `POST /v1/chat/completions` |
//! | `completions.rs` | `POST /v1/completions` (with `suffix`: fill-in-the-middle) |
//! | `infill.rs` | `POST /infill`: llama.cpp's fill-in-the-middle route for editor plugins |
//! | `embeddings.rs` | `POST /v1/embeddings`: an embedding model's pooled, normalized vectors |
//! | `rerank.rs` | `POST /v1/rerank` (and llama.cpp's other paths for it): a reranker's scores of documents for a query |
//! | `responses/` | OpenAI's Responses API (`POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`): `input` items as messages, the `response` object, its typed stream events, the in-memory store behind `previous_response_id` |
//! | `conversations.rs` | `/v1/conversations`: the saved conversations (list, create, get, change, delete, send, regenerate, edit) through the engine's conversation API |
//! | `structured.rs` | `response_format` (JSON, a JSON Schema) as the engine's grammar; a schema that does not compile as a 400 naming the field |
//! | `tools.rs` | `tools` and `tool_choice` (400s naming the field), messages' `tool_calls`, the reply's calls in OpenAI's shape |
//! | `logprobs.rs` | `logprobs` in the chat's and the completions' shapes |
//! | `ollama/` | Ollama's API (`/api/chat`, `/api/generate`, `/api/embed`, `/api/tags`, `/api/show`, `/api/ps`, `/api/version`, `GET /`) for tools built for Ollama: its request fields and `options`, replies as lines of JSON, errors as `{"error"}` |
//! | `anthropic/` | Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`) for coding agents built for Claude: `system` and content blocks as messages, the `message` object, its SSE events, errors in Anthropic's shape |
//! | `reply.rs` | a finished reply split into reasoning, text and calls (with fresh ids), and the assistant message it is |
//! | `generation.rs` | submitting to the engine and collecting a whole reply |
//! | `choices.rs` | a request's choices (`n` of each prompt): the first of a prompt alone until its prompt is cached, then the others |
//! | `stream.rs` | a request's events as an SSE stream (`data: {...}` chunks, `data: [DONE]`) |
//! | `models.rs` | `GET /v1/models`, `GET /v1/models/{id}`, `GET /health` |
//! | `tokenize.rs` | `POST /tokenize`, `POST /detokenize` (llama.cpp's and vLLM's shapes) |
//! | `metrics.rs` | `GET /metrics`: [`crate::engine::EngineStats`] in Prometheus' text format |
//!
//! Invariants: no handler panics on anything a request carries; a streamed reply owns its
//! [`crate::engine::RequestStream`] and nothing else holds it, so a client that goes away
//! drops it and the engine cancels the request within one step (a non-streamed reply's
//! handler future holds it the same way); there is no global state, everything is in
//! [`AppState`].
//!
//! Counterpart: vLLM's `entrypoints/openai/api_server.py` (routes), `protocol.py` (wire
//! types) and `serving_chat.py` / `serving_completion.py` (request → engine → response).

mod anthropic;
mod auth;
mod body;
mod chat;
mod choices;
mod completions;
mod conversations;
mod embeddings;
mod error;
mod generation;
mod infill;
mod logprobs;
mod metrics;
mod models;
mod ollama;
mod params;
mod protocol;
mod reply;
mod rerank;
mod responses;
mod serve;
mod state;
mod stream;
mod structured;
mod timeout_body;
mod tokenize;
mod tools;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use axum::Router;

pub use error::ApiError;
pub use metrics::render as render_metrics;
pub use serve::{drained, serve, shutdown_signal, HEADER_TIMEOUT, MAX_CONNECTIONS, SHUTDOWN_GRACE};
pub use state::{AppState, ConnectionLimits, ServerConfig};

/// URLs longer than this get a 414 in our JSON (hyper itself answers those over 64 KiB, with
/// an empty body).
pub const MAX_URI_BYTES: usize = 8 << 10;
/// More headers than this get a 431 in our JSON (hyper itself refuses more than
/// [`serve`]'s 256, with an empty body).
pub const MAX_HEADERS: usize = 100;
/// More bytes of headers than this get a 431 in our JSON.
pub const MAX_HEADER_BYTES: usize = 64 << 10;

/// A request body with no new bytes for this long is refused (408) by default.
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Every route, with its layers, over `state`; no socket (tests call it with
/// `tower::ServiceExt::oneshot`).
///
/// `/v1/*`, `/api/*`, `/infill`, `/tokenize` and `/detokenize` need the API key when one is configured;
/// `/health`, `/metrics` and `/` are open. Bodies over [`ServerConfig::max_body_bytes`] get 413.
pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat::handle))
        .route("/v1/completions", post(completions::handle))
        .route("/v1/embeddings", post(embeddings::handle))
        .route("/v1/rerank", post(rerank::handle))
        .route("/v1/reranking", post(rerank::handle))
        .route("/rerank", post(rerank::handle))
        .route("/reranking", post(rerank::handle))
        .route("/v1/responses", post(responses::create))
        .route("/v1/messages", post(anthropic::create))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/responses/{id}", get(responses::retrieve).delete(responses::delete))
        .route(
            "/v1/conversations",
            get(conversations::list).post(conversations::create),
        )
        .route(
            "/v1/conversations/{id}",
            get(conversations::get)
                .patch(conversations::change)
                .delete(conversations::delete),
        )
        .route("/v1/conversations/{id}/messages", post(conversations::send))
        .route("/v1/conversations/{id}/messages/{index}", put(conversations::edit))
        .route("/v1/conversations/{id}/regenerate", post(conversations::regenerate))
        .route("/v1/models", get(models::list))
        .route("/v1/models/{*id}", get(models::retrieve))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/embed", post(ollama::embed))
        .route("/api/embeddings", post(ollama::embeddings))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/ps", get(ollama::ps))
        .route("/api/version", get(ollama::version))
        .route("/api/pull", post(ollama::pull))
        .route("/api/create", post(ollama::create_or_push))
        .route("/api/push", post(ollama::create_or_push))
        .route("/api/copy", post(ollama::copy_or_delete))
        .route("/api/delete", axum::routing::delete(ollama::copy_or_delete))
        .route("/infill", post(infill::handle))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_api_key,
        ));
    Router::new()
        .merge(v1)
        .route("/health", get(models::health))
        .route("/", get(ollama::root))
        .route("/metrics", get(metrics::handle))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.config().max_body_bytes))
        .layer(axum::middleware::map_request_with_state(state.clone(), body_deadline))
        .layer(axum::middleware::from_fn(request_limits))
        .with_state(state)
}

/// Every request body fails (408) once no bytes come for [`ConnectionLimits::body_timeout`].
async fn body_deadline(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
) -> axum::extract::Request {
    let timeout = state.config().limits.body_timeout;
    req.map(|b| axum::body::Body::new(timeout_body::TimeoutBody::new(b, timeout)))
}

/// A URL or headers past our limits: refused in our JSON before any route runs.
async fn request_limits(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    let uri = req.uri().to_string().len();
    if uri > MAX_URI_BYTES {
        return ApiError::UriTooLong { limit: MAX_URI_BYTES }.into_response();
    }
    let headers = req.headers();
    if headers.len() > MAX_HEADERS {
        return ApiError::HeadersTooLarge(format!("{} headers; at most {MAX_HEADERS} are accepted", headers.len()))
            .into_response();
    }
    let bytes: usize = headers.iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum();
    if bytes > MAX_HEADER_BYTES {
        return ApiError::HeadersTooLarge(format!(
            "{bytes} bytes of headers; at most {MAX_HEADER_BYTES} are accepted"
        ))
        .into_response();
    }
    next.run(req).await
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no route {}", uri.path()))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}
