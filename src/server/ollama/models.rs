//! Ollama's model routes: `GET /api/tags`, `POST /api/show`, `GET /api/ps`, `GET
//! /api/version`, `GET /`; and the routes that manage models, which hearth does not serve.
//!
//! Owns: the one loaded model as Ollama describes a model, under [`listed_name`]: `details` (`format` gguf, the
//! architecture as `family`, the parameter count as `parameter_size`, the dominant weight type
//! as `quantization_level`), `size` (the file's bytes), `modified_at` (the file's), and for
//! `/api/show` the chat template, the server's sampling defaults as `parameters`, `model_info`
//! (the architecture's shape, with `{arch}.context_length` the context hearth serves) and
//! `capabilities` (`completion` and `tools` for a chat model, `thinking` where its template
//! thinks, `embedding` for an embedding model). There is no `digest`: Ollama's is the sha256
//! of its blob, which hearth does not compute. `/api/version` answers [`OLLAMA_VERSION`], the
//! Ollama release whose API these routes follow (clients check it before using newer
//! fields); `GET /` answers as Ollama does, which clients probe for. `/api/pull` of the loaded
//! model succeeds (it is here); of another, 404. Pushing, creating, copying and deleting models
//! answer 501: hearth serves the model it was started with (`--model`).
//!
//! Counterpart: Ollama's `ListHandler`, `ShowHandler`, `PsHandler` in `server/routes.go`.

use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::engine::ModelPurpose;

use super::super::{body, ApiError, AppState};
use super::{answer, input};

/// The Ollama release whose API hearth's `/api` routes follow.
pub(crate) const OLLAMA_VERSION: &str = "0.12.0";

/// `GET /`: what Ollama answers, which clients look for.
pub(crate) async fn root() -> &'static str {
    "Ollama is running"
}

/// `GET /api/version`.
pub(crate) async fn version() -> Json<Value> {
    Json(json!({"version": OLLAMA_VERSION}))
}

/// `GET /api/tags`: the loaded model.
pub(crate) async fn tags(State(state): State<AppState>) -> Json<Value> {
    let mut m = model(&state);
    m.insert("modified_at".into(), json!(modified_at(&state)));
    Json(json!({"models": [m]}))
}

/// `GET /api/ps`: the loaded model, which stays loaded while the server runs.
pub(crate) async fn ps(State(state): State<AppState>) -> Json<Value> {
    let info = state.engine().model_info();
    let mut m = model(&state);
    m.insert("expires_at".into(), json!("9999-12-31T23:59:59Z"));
    let on_gpu = info.device.to_lowercase().contains("cuda");
    m.insert("size_vram".into(), json!(if on_gpu { info.file_bytes } else { 0 }));
    m.insert("context_length".into(), json!(info.context_length));
    Json(json!({"models": [m]}))
}

/// `POST /api/show`: `{"model"}` (or the older `{"name"}`).
pub(crate) async fn show(State(state): State<AppState>, request: Result<Bytes, BytesRejection>) -> Response {
    let shown = async {
        let requested = requested(&state, request)?;
        input::model_name(&state, requested.as_deref())?;
        Ok::<_, ApiError>(Json(show_body(&state)).into_response())
    };
    answer(shown.await)
}

/// `POST /api/pull`: the loaded model is here already; another cannot be pulled.
pub(crate) async fn pull(State(state): State<AppState>, request: Result<Bytes, BytesRejection>) -> Response {
    let pulled = async {
        let requested = requested(&state, request)?;
        input::model_name(&state, requested.as_deref()).map_err(|_| {
            ApiError::ModelNotFound(format!(
                "hearth does not pull models: it serves `{}`, chosen when it started (--model)",
                state.config().model_id
            ))
        })?;
        Ok::<_, ApiError>(Json(json!({"status": "success"})).into_response())
    };
    answer(pulled.await)
}

/// The model a `{"model"}` (or older `{"name"}`) body names, if it names one.
fn requested(state: &AppState, request: Result<Bytes, BytesRejection>) -> Result<Option<String>, ApiError> {
    let value = body::json_object(request, state.config().max_body_bytes)?;
    Ok(["model", "name"]
        .iter()
        .find_map(|k| value.get(*k).and_then(Value::as_str))
        .map(str::to_owned))
}

/// `POST /api/create`, `POST /api/push`: not served.
pub(crate) async fn create_or_push() -> Response {
    not_served("creating or pushing models")
}

/// `POST /api/copy`, `DELETE /api/delete`: not served.
pub(crate) async fn copy_or_delete() -> Response {
    not_served("copying or deleting models")
}

fn not_served(what: &str) -> Response {
    let message =
        format!("hearth does not manage models ({what}): it serves the one model it was started with (--model)");
    (StatusCode::NOT_IMPLEMENTED, Json(json!({"error": message}))).into_response()
}

/// The name the model routes list: the model's id where it is a name Ollama's clients accept
/// (letters, digits, `.`, `_`, `-`), else the first of its aliases that is (the file's name
/// without `.gguf`), else the id.
pub(crate) fn listed_name(state: &AppState) -> String {
    let c = state.config();
    let plain = |n: &&String| !n.is_empty() && n.chars().all(|ch| ch.is_ascii_alphanumeric() || "._-".contains(ch));
    let stems = c.model_aliases.iter().filter(|a| !a.ends_with(".gguf"));
    std::iter::once(&c.model_id)
        .chain(stems)
        .chain(c.model_aliases.iter())
        .find(plain)
        .unwrap_or(&c.model_id)
        .clone()
}

/// The fields every model route gives: names, size, details.
fn model(state: &AppState) -> Map<String, Value> {
    let id = &listed_name(state);
    let mut m = Map::new();
    m.insert("name".into(), json!(id));
    m.insert("model".into(), json!(id));
    m.insert("size".into(), json!(state.engine().model_info().file_bytes));
    m.insert("details".into(), details(state));
    m
}

fn details(state: &AppState) -> Value {
    let info = state.engine().model_info();
    json!({
        "parent_model": "",
        "format": "gguf",
        "family": info.architecture,
        "families": [info.architecture],
        "parameter_size": parameter_size(info.parameters),
        "quantization_level": quantization_level(&info.quantization),
    })
}

/// The model file's modification time (the server's start where it cannot be read).
fn modified_at(state: &AppState) -> String {
    let info = state.engine().model_info();
    let file = info
        .files
        .first()
        .and_then(|f| std::fs::metadata(f).ok())
        .and_then(|m| m.modified().ok());
    let started = SystemTime::UNIX_EPOCH + Duration::from_secs(state.started());
    crate::engine::rfc3339(file.unwrap_or(started))
}

fn show_body(state: &AppState) -> Value {
    let engine = state.engine();
    let info = engine.model_info();
    let hp = engine.model().transformer.hparams();
    let arch = &info.architecture;
    let mut model_info = Map::new();
    model_info.insert("general.architecture".into(), json!(arch));
    model_info.insert("general.name".into(), json!(info.name));
    model_info.insert("general.parameter_count".into(), json!(info.parameters));
    model_info.insert(format!("{arch}.context_length"), json!(info.context_length));
    model_info.insert(format!("{arch}.embedding_length"), json!(hp.hidden));
    model_info.insert(format!("{arch}.block_count"), json!(hp.layers));
    model_info.insert(format!("{arch}.attention.head_count"), json!(hp.heads));
    model_info.insert(format!("{arch}.attention.head_count_kv"), json!(hp.kv_heads));
    let capabilities: Vec<&str> = match info.purpose {
        ModelPurpose::Chat => {
            let mut c = vec!["completion", "tools"];
            if info.reasoning.is_some() {
                c.push("thinking");
            }
            c
        }
        ModelPurpose::Embedding => vec!["embedding"],
        ModelPurpose::Reranker => Vec::new(),
    };
    let file = info.files.first().map(|f| f.display().to_string()).unwrap_or_default();
    json!({
        "license": "",
        "modelfile": format!("# Served by hearth {}\nFROM {file}\n", env!("CARGO_PKG_VERSION")),
        "parameters": parameters(state),
        "template": engine.model().chat_template.source(),
        "details": details(state),
        "model_info": model_info,
        "capabilities": capabilities,
        "modified_at": modified_at(state),
    })
}

/// The server's sampling defaults, one `name value` per line as a Modelfile writes them.
fn parameters(state: &AppState) -> String {
    let c = state.config();
    let s = &c.sampling;
    let mut lines = vec![
        format!("temperature {}", s.temperature),
        format!("top_k {}", s.top_k),
        format!("top_p {}", s.top_p),
        format!("min_p {}", s.min_p),
        format!("repeat_penalty {}", s.repeat_penalty),
        format!("num_ctx {}", state.engine().model_info().context_length),
    ];
    if c.max_tokens != usize::MAX {
        lines.push(format!("num_predict {}", c.max_tokens));
    }
    lines.join("\n")
}

/// A parameter count as Ollama writes it: `135M`, `1.5B`, `8B`.
fn parameter_size(n: u64) -> String {
    let (value, unit) = match n {
        n if n >= 1_000_000_000 => (n as f64 / 1e9, "B"),
        n if n >= 1_000_000 => (n as f64 / 1e6, "M"),
        n if n >= 1_000 => (n as f64 / 1e3, "K"),
        n => return n.to_string(),
    };
    let text = if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    };
    format!("{}{unit}", text.strip_suffix(".0").unwrap_or(&text))
}

/// A weight type as GGML names it (`Q4_K`, `Q8_0`, `F16`) from candle's (`Q4K`, `Q8_0`, `F16`).
fn quantization_level(candle: &str) -> String {
    let upper = candle.to_uppercase();
    match upper.strip_suffix('K') {
        Some(stem) if stem.starts_with('Q') && !stem.ends_with('_') => format!("{stem}_K"),
        _ => upper,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_weight_types_read_as_ollamas() {
        assert_eq!(parameter_size(134_515_008), "135M");
        assert_eq!(parameter_size(1_543_714_304), "1.5B");
        assert_eq!(parameter_size(8_030_261_248), "8B");
        assert_eq!(parameter_size(268_098_176), "268M");
        assert_eq!(parameter_size(40_960), "41K");
        assert_eq!(parameter_size(512), "512");
        assert_eq!(quantization_level("Q4K"), "Q4_K");
        assert_eq!(quantization_level("Q4_1"), "Q4_1");
        assert_eq!(quantization_level("F16"), "F16");
        assert_eq!(quantization_level("Q8_0"), "Q8_0");
        assert_eq!(quantization_level("IQ4_XS"), "IQ4_XS");
    }
}
