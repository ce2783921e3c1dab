//! `POST /tokenize` and `POST /detokenize`: the loaded model's tokenizer, for clients that
//! count a prompt's tokens before sending it (to fit a history into the context) or read ids.
//!
//! Owns: both request shapes clients send, llama.cpp's (`content`, `add_special` default
//! false, `with_pieces`; the answer's `tokens`, and `content` back) and vLLM's (`prompt`, or
//! chat `messages` rendered through the template with the generation prompt, as
//! `/v1/chat/completions` would see them; `add_special_tokens` default true; the answer's
//! `count` and `max_model_len`, and `prompt` back). One answer carries both sets of fields.
//! Bad input is a 400 naming the field; an id outside the vocabulary too.
//!
//! Counterpart: llama.cpp's server `/tokenize`, `/detokenize`; vLLM's
//! `entrypoints/openai/serving_tokenization.py`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::protocol::WireMessage;
use super::{body, chat, generation, ApiError, AppState};

#[derive(Debug, Deserialize)]
struct TokenizeFields {
    /// llama.cpp's text.
    content: Option<String>,
    /// vLLM's text.
    prompt: Option<String>,
    /// vLLM's chat form.
    messages: Option<Vec<WireMessage>>,
    /// llama.cpp's: add BOS (per the tokenizer's rule); default false.
    add_special: Option<bool>,
    /// vLLM's: the same; default true.
    add_special_tokens: Option<bool>,
    /// llama.cpp's: each token as `{"id", "piece"}`.
    with_pieces: Option<bool>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Tokenized {
    tokens: Vec<Value>,
    count: usize,
    max_model_len: usize,
}

pub(crate) async fn tokenize(
    State(state): State<AppState>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<Tokenized>, ApiError> {
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let f = body::fields::<TokenizeFields>(&value)?;
    // BOS by the shape's own default: llama.cpp's `content` none, vLLM's `prompt` the tokenizer's.
    let add = |default: bool| f.add_special.or(f.add_special_tokens).unwrap_or(default);
    enum Input {
        Text(String, bool),
        Chat(Vec<crate::engine::Message>),
    }
    let input = match (f.content, f.prompt, f.messages) {
        (Some(t), None, None) => Input::Text(t, add(false)),
        (None, Some(t), None) => Input::Text(t, add(true)),
        (None, None, Some(m)) => Input::Chat(chat::messages(m)?),
        _ => {
            return Err(ApiError::invalid(
                "give exactly one of content (a string), prompt (a string) or messages (a chat)",
            ))
        }
    };
    let pieces = f.with_pieces.unwrap_or(false);
    let tokens = generation::tokenize(&state, move |engine| {
        let ids = match input {
            Input::Text(t, add) => engine.tokenize_text(&t, add)?,
            Input::Chat(messages) => engine.tokenize_chat(&messages)?,
        };
        let token = |id: u32| {
            if pieces {
                serde_json::json!({"id": id, "piece": String::from_utf8_lossy(&engine.token_bytes(id))})
            } else {
                Value::from(id)
            }
        };
        Ok::<_, crate::engine::EngineError>(ids.into_iter().map(token).collect::<Vec<Value>>())
    })
    .await?;
    Ok(Json(Tokenized {
        count: tokens.len(),
        tokens,
        max_model_len: state.engine().model_info().context_length,
    }))
}

#[derive(Debug, Deserialize)]
struct DetokenizeFields {
    tokens: Vec<u32>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Detokenized {
    /// llama.cpp's name.
    content: String,
    /// vLLM's name.
    prompt: String,
}

pub(crate) async fn detokenize(
    State(state): State<AppState>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<Detokenized>, ApiError> {
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let f = body::fields::<DetokenizeFields>(&value)?;
    let text = generation::tokenize(&state, move |engine| engine.detokenize(&f.tokens))
        .await
        .map_err(|e| match e {
            ApiError::InvalidRequest { message, .. } => ApiError::invalid_param("tokens", message),
            other => other,
        })?;
    Ok(Json(Detokenized {
        content: text.clone(),
        prompt: text,
    }))
}
