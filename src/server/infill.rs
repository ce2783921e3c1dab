//! `POST /infill`: llama.cpp's fill-in-the-middle route, which its editor plugins
//! (llama.vim, llama.vscode) call as you type.
//!
//! Owns: reading llama.cpp's fields (`input_prefix` and `input_suffix`, required strings;
//! `input_extra`, other files as `[{"filename"?, "text"}]`; `prompt`, text the reply starts
//! with; `n_predict` and the sampling fields under llama.cpp's names) into the repository-level
//! infill prompt ([`Infill::repo_level`]) and answering in llama.cpp's completion shape
//! (`content`, `tokens_predicted`, `tokens_evaluated`, `tokens_cached`, `stop_type`,
//! `stopping_word`, `truncated`, `timings`, and the prompt as text). Whole replies only:
//! `stream: true` is a 400 (`/v1/completions` with `suffix` streams). A model without
//! fill-in-the-middle tokens is a 400, as in llama.cpp.
//!
//! Counterpart: llama.cpp server's `post_infill` and `format_prompt_infill`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::{infill_ids, Infill, StopReason};

use super::protocol::CommonFields;
use super::{body, generation, params, ApiError, AppState};

#[derive(Debug, Deserialize)]
struct InfillFields {
    input_prefix: String,
    input_suffix: String,
    #[serde(default)]
    input_extra: Vec<ExtraChunk>,
    #[serde(default)]
    prompt: String,
    model: Option<String>,
    /// -1 (or absent): the server's default.
    n_predict: Option<i64>,
    temperature: Option<f32>,
    top_k: Option<i64>,
    top_p: Option<f32>,
    min_p: Option<f32>,
    /// -1 (or any negative): random.
    seed: Option<i64>,
    stop: Option<Value>,
    repeat_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    stream: Option<bool>,
    /// The reply's token ids in `tokens`.
    return_tokens: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct ExtraChunk {
    #[serde(default)]
    filename: Option<String>,
    text: String,
}

pub(crate) async fn handle(
    State(state): State<AppState>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let value = body::json_object(request, state.config().max_body_bytes)?;
    let f = body::fields::<InfillFields>(&value)?;
    if f.stream == Some(true) {
        return Err(ApiError::invalid_param(
            "stream",
            "/infill answers whole replies; /v1/completions with `suffix` streams them",
        ));
    }
    let max_tokens = match f.n_predict {
        None | Some(-1) => None,
        Some(n) if n > 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(n) => {
            return Err(ApiError::invalid_param(
                "n_predict",
                format!("n_predict must be at least 1, or -1, not {n}"),
            ))
        }
    };
    let plan = params::plan(
        &state,
        CommonFields {
            model: f.model,
            max_tokens,
            temperature: f.temperature,
            top_k: f.top_k,
            top_p: f.top_p,
            min_p: f.min_p,
            seed: f.seed.and_then(|s| u64::try_from(s).ok()),
            stop: f.stop,
            repetition_penalty: f.repeat_penalty,
            presence_penalty: f.presence_penalty,
            frequency_penalty: f.frequency_penalty,
            ..CommonFields::default()
        },
    )?;
    let infill = Infill {
        prefix: f.input_prefix,
        suffix: f.input_suffix,
        prompt: f.prompt,
        extra: f
            .input_extra
            .into_iter()
            .map(|c| (c.filename.unwrap_or_else(|| "tmp".into()), c.text))
            .collect(),
        repo_level: true,
    };
    let (ids, prompt_text) = generation::tokenize(&state, move |engine| {
        let tok = &engine.model().tokenizer;
        let ids = infill_ids(tok, &infill)
            .map_err(|e| ApiError::invalid(format!("infill is not supported by this model: {e}")))?;
        let text = tok.decode(&ids).unwrap_or_default();
        Ok::<_, ApiError>((ids, text))
    })
    .await?;
    let events = generation::submit(&state, ids, &plan, None)?;
    let report = generation::collect(events).await?;
    let (stop_type, stopping_word) = match report.stop {
        StopReason::Eos => ("eos", String::new()),
        StopReason::StopString => ("word", report.stop_string.clone().unwrap_or_default()),
        StopReason::MaxTokens | StopReason::ContextFull => ("limit", String::new()),
    };
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let prompt_ms = ms(report.ttft.saturating_sub(report.queued));
    let predicted_ms = ms(report.decode);
    let computed = report.prompt_tokens - report.cached.tokens.min(report.prompt_tokens);
    let mut out = json!({
        "index": 0,
        "content": report.text,
        "stop": true,
        "model": plan.model,
        "tokens_predicted": report.tokens.len(),
        "tokens_evaluated": report.prompt_tokens,
        "tokens_cached": report.cached.tokens,
        "prompt": prompt_text,
        "has_new_line": report.text.contains('\n'),
        "truncated": false,
        "stop_type": stop_type,
        "stopping_word": stopping_word,
        "timings": {
            "prompt_n": computed,
            "prompt_ms": prompt_ms,
            "predicted_n": report.tokens.len(),
            "predicted_ms": predicted_ms,
            "predicted_per_second": report.decode_rate(),
        },
    });
    if f.return_tokens == Some(true) {
        out["tokens"] = json!(report.tokens);
    }
    Ok(Json(out))
}
