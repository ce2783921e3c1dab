//! Reading a request body as JSON, with our own errors.
//!
//! Owns: turning the `Bytes` extractor's result into a JSON object (413 over the body limit,
//! 400 with serde_json's line and column for malformed JSON, 400 for a non-object) and
//! reading typed fields out of it with the failing field's path in the message
//! (`messages[0].content: invalid type ...`). Unknown fields are ignored: clients send many.
//!
//! Counterpart: axum's `Json` extractor, whose rejections are plain text, not OpenAI's JSON.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ApiError;

/// The body as a JSON object.
pub(crate) fn json_object(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Value, ApiError> {
    let bytes = match body {
        Ok(b) => b,
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => return Err(ApiError::PayloadTooLarge { limit }),
        Err(r) if super::timeout_body::timed_out(&r) => return Err(ApiError::RequestTimeout),
        Err(r) => {
            return Err(ApiError::invalid(format!(
                "cannot read the request body: {}",
                r.body_text()
            )))
        }
    };
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::invalid("the request body must be a JSON object"));
    }
    Ok(value)
}

/// `value` read as `T`; an error names the field at fault.
pub(crate) fn fields<T: DeserializeOwned>(value: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            ApiError::invalid(inner.to_string())
        } else {
            ApiError::invalid_param(path.clone(), format!("{path}: {inner}"))
        }
    })
}
