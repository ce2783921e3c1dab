//! Every way a request can fail, as an HTTP status and OpenAI's error body.
//!
//! Owns: [`ApiError`] (one variant per status the server answers with, each documented),
//! its [`IntoResponse`], the mapping from [`EngineError`]'s [`ErrorKind`], and the
//! [`ErrorBody`] that both plain responses and a mid-stream SSE error event carry:
//! `{"error": {"message", "type", "param", "code"}}`.
//!
//! Counterpart: vLLM's `ErrorResponse` / `create_error_response`, OpenAI's error object.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::engine::ModelError;
use crate::engine::{EngineError, ErrorKind};

/// Seconds a client is asked to wait after a 503 for a full queue.
const RETRY_AFTER_SECS: &str = "1";

/// A failed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// 400: malformed JSON, a missing field, a field of the wrong type or out
    /// of range. `param` names the field when one is at fault.
    InvalidRequest { message: String, param: Option<String> },
    /// 400 `context_length_exceeded`: the prompt does not fit the context (or
    /// the cache); the message gives both figures.
    ContextLength(String),
    /// 401 `invalid_api_key`: a missing or wrong `Authorization: Bearer` key.
    Unauthorized,
    /// 404 `model_not_found`: `model` names a model this server does not serve.
    ModelNotFound(String),
    /// 404: no such route.
    NotFound(String),
    /// 405: the route exists for other methods.
    MethodNotAllowed(String),
    /// 414: the URL is longer than [`super::MAX_URI_BYTES`].
    UriTooLong { limit: usize },
    /// 431: more headers than [`super::MAX_HEADERS`] or more bytes of them than
    /// [`super::MAX_HEADER_BYTES`].
    HeadersTooLarge(String),
    /// 408: the client stopped sending the body (nothing for [`super::BODY_TIMEOUT`]).
    RequestTimeout,
    /// 413: the body is larger than the configured limit.
    PayloadTooLarge { limit: usize },
    /// 503 with `Retry-After`: the engine's queue is full; the same request
    /// may succeed shortly.
    Overloaded(String),
    /// 503: the engine has stopped, or cancelled the request itself.
    Unavailable(String),
    /// 500: a failure inside hearth.
    Internal(String),
}

/// OpenAI's error body.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 naming no field.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidRequest {
            message: message.into(),
            param: None,
        }
    }

    /// A 400 about the field `param`.
    pub fn invalid_param(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidRequest {
            message: message.into(),
            param: Some(param.into()),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest { .. } | Self::ContextLength(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::ModelNotFound(_) | Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            Self::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Overloaded(_) | Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The JSON body: OpenAI's `type` and `code` for the variant.
    pub fn body(&self) -> ErrorBody {
        let (message, kind, param, code) = match self {
            Self::InvalidRequest { message, param } => (message.clone(), "invalid_request_error", param.clone(), None),
            Self::ContextLength(m) => (
                m.clone(),
                "invalid_request_error",
                None,
                Some("context_length_exceeded"),
            ),
            Self::Unauthorized => (
                "missing or incorrect API key; send `Authorization: Bearer <key>`".into(),
                "invalid_request_error",
                None,
                Some("invalid_api_key"),
            ),
            Self::ModelNotFound(m) => (
                m.clone(),
                "invalid_request_error",
                Some("model".into()),
                Some("model_not_found"),
            ),
            Self::NotFound(m) => (m.clone(), "invalid_request_error", None, Some("not_found")),
            Self::MethodNotAllowed(m) => (m.clone(), "invalid_request_error", None, Some("method_not_allowed")),
            Self::UriTooLong { limit } => (
                format!("the URL is longer than {limit} bytes"),
                "invalid_request_error",
                None,
                Some("uri_too_long"),
            ),
            Self::HeadersTooLarge(m) => (m.clone(), "invalid_request_error", None, Some("headers_too_large")),
            Self::RequestTimeout => (
                format!(
                    "the request body stopped arriving (nothing for {} s)",
                    super::BODY_TIMEOUT.as_secs()
                ),
                "invalid_request_error",
                None,
                Some("request_timeout"),
            ),
            Self::PayloadTooLarge { limit } => (
                format!("the request body is larger than the server's limit of {limit} bytes"),
                "invalid_request_error",
                None,
                Some("request_too_large"),
            ),
            Self::Overloaded(m) => (m.clone(), "server_error", None, Some("overloaded")),
            Self::Unavailable(m) => (m.clone(), "server_error", None, Some("unavailable")),
            Self::Internal(m) => (m.clone(), "server_error", None, Some("internal_error")),
        };
        ErrorBody {
            error: ErrorDetail {
                message,
                kind,
                param,
                code,
            },
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status().as_u16(), self.body().error.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!("{self}");
        } else {
            tracing::debug!("{self}");
        }
        let mut response = (status, Json(self.body())).into_response();
        let headers = response.headers_mut();
        match self {
            Self::Overloaded(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
            }
            Self::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let message = match &e {
            EngineError::Model(ModelError::PromptTooLong { tokens, context }) => format!(
                "this model's context is {context} tokens and the prompt is {tokens} tokens; \
                 at most {} prompt tokens fit (one is left for the reply)",
                context.saturating_sub(1)
            ),
            // A sampling value out of range names the request's field.
            EngineError::Sampling(s) => {
                use crate::config::SamplingParamsError as S;
                let param = match s {
                    S::Temperature(_) => "temperature",
                    S::TopP(_) => "top_p",
                    S::MinP(_) => "min_p",
                    S::RepeatPenalty(_) => "repetition_penalty",
                    S::PresencePenalty(_) => "presence_penalty",
                    S::FrequencyPenalty(_) => "frequency_penalty",
                    S::LogitBias { .. } | S::LogitBiasToken { .. } => "logit_bias",
                };
                return Self::invalid_param(param, s.to_string().replace("repeat_penalty", "repetition_penalty"));
            }
            _ => e.to_string(),
        };
        match e.kind() {
            ErrorKind::InvalidRequest => Self::invalid(message),
            ErrorKind::ContextLength => Self::ContextLength(message),
            ErrorKind::Overloaded => Self::Overloaded(message),
            ErrorKind::Unavailable | ErrorKind::Cancelled => Self::Unavailable(message),
            ErrorKind::NotFound => Self::NotFound(message),
            ErrorKind::Internal => Self::Internal(message),
        }
    }
}
