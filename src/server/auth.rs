//! The API key check on `/v1` routes (and `/api`, `/infill`, `/tokenize`, `/detokenize`).
//!
//! Owns: the middleware that lets a request through when no key is configured or when it
//! carries `Authorization: Bearer <key>` (or `x-api-key: <key>`, as Anthropic's clients send
//! it) with the configured key, compared in constant time (the time taken does not depend on
//! where the given key first differs); anything else gets 401 with OpenAI's `invalid_api_key`
//! body (Ollama's `{"error"}` on its `/api` routes). `/health`, `/metrics` and `/` are outside
//! it.
//!
//! Counterpart: vLLM's `--api-key` middleware in `api_server.py`.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState};

pub(crate) async fn require_api_key(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(key) = state.config().api_key.as_deref() else {
        return next.run(request).await;
    };
    let headers = request.headers();
    let given = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim));
    match given {
        Some(token) if constant_time_eq(token.as_bytes(), key.as_bytes()) => next.run(request).await,
        // Ollama's clients read its error shape.
        _ if request.uri().path().starts_with("/api/") => super::ollama::error_response(&ApiError::Unauthorized),
        _ => ApiError::Unauthorized.into_response(),
    }
}

/// The token of `Bearer <token>` (the scheme is case-insensitive).
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether `a == b`, looking at every byte of the longer one whatever the
/// contents, so the time taken tells nothing about a matching prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= std::hint::black_box(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_keys_and_parses_bearer() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
    }
}
