//! `GET /v1/models`, `GET /v1/models/{id}` and `GET /health`.
//!
//! Owns: the model list (the one loaded model, under its id; aliases are accepted in
//! requests but not listed) and the liveness answer (`{"status": "ok"}`, or 503 once the
//! engine thread has stopped).
//!
//! Counterpart: vLLM's `show_available_models` and `/health`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::protocol::{ModelCard, ModelList};
use super::{ApiError, AppState};

fn card(state: &AppState) -> ModelCard {
    ModelCard {
        id: state.config().model_id.clone(),
        object: "model",
        created: state.started(),
        owned_by: "hearth",
        max_model_len: state.engine().model_info().context_length,
    }
}

pub(crate) async fn list(State(state): State<AppState>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![card(&state)],
    })
}

pub(crate) async fn retrieve(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    state.resolve_model(Some(&id))?;
    Ok(Json(card(&state)))
}

pub(crate) async fn health(State(state): State<AppState>) -> Response {
    if state.engine().is_running() {
        Json(serde_json::json!({"status": "ok"})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "unavailable", "reason": "the engine has stopped"})),
        )
            .into_response()
    }
}
