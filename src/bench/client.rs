//! A minimal HTTP/1.1 client for hearth's own server: JSON requests, whole or streamed (SSE)
//! responses, one connection per request.
//!
//! Owns: [`HttpClient`], [`Response`], [`SseReader`], [`ClientError`]. `hearth bench serve`
//! drives the server with it, and the socket tests use it to be real clients that can vanish
//! mid-stream: dropping a [`Response`] or [`SseReader`] closes its connection at once.
//!
//! Counterpart: the `openai` client that vLLM's `benchmark_serving.py` drives (here without the
//! dependency on a third-party HTTP stack beyond hyper, which axum already brings).

use std::net::SocketAddr;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderMap, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: SocketAddr, source: std::io::Error },
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("bad request line: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("the response is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the response is not UTF-8")]
    Utf8,
}

/// Closes the connection when dropped.
#[derive(Debug)]
struct Connection(JoinHandle<()>);

impl Drop for Connection {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Requests to one server.
#[derive(Debug, Clone)]
pub struct HttpClient {
    addr: SocketAddr,
    api_key: Option<String>,
}

/// A response whose body is still to be read.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    body: Incoming,
    _conn: Connection,
}

impl HttpClient {
    pub fn new(addr: SocketAddr, api_key: Option<String>) -> Self {
        Self { addr, api_key }
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(&self, path: &str, body: &serde_json::Value) -> Result<Response, ClientError> {
        self.send("POST", path, Bytes::from(serde_json::to_vec(body)?)).await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Response, ClientError> {
        self.send("GET", path, Bytes::new()).await
    }

    async fn send(&self, method: &str, path: &str, body: Bytes) -> Result<Response, ClientError> {
        let stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|source| ClientError::Connect {
                addr: self.addr,
                source,
            })?;
        let _ = stream.set_nodelay(true);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let conn = Connection(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.addr.to_string())
            .header(CONTENT_TYPE, "application/json");
        if let Some(key) = &self.api_key {
            req = req.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        let res = sender.send_request(req.body(Full::new(body))?).await?;
        let (parts, body) = res.into_parts();
        Ok(Response {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            _conn: conn,
        })
    }
}

impl Response {
    /// The whole body as text.
    pub async fn text(self) -> Result<String, ClientError> {
        let bytes = self.body.collect().await?.to_bytes();
        String::from_utf8(bytes.to_vec()).map_err(|_| ClientError::Utf8)
    }

    /// The whole body as JSON.
    pub async fn json(self) -> Result<serde_json::Value, ClientError> {
        let bytes = self.body.collect().await?.to_bytes();
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// The body as server-sent events.
    pub fn sse(self) -> SseReader {
        SseReader {
            body: self.body,
            buf: Vec::new(),
            _conn: self._conn,
        }
    }
}

/// Reads `data:` payloads of a server-sent event stream as they arrive.
#[derive(Debug)]
pub struct SseReader {
    body: Incoming,
    buf: Vec<u8>,
    _conn: Connection,
}

impl SseReader {
    /// The next event's data (its `data:` lines joined by newlines); events
    /// without data (keep-alive comments) are skipped. `None` at the end.
    pub async fn next_data(&mut self) -> Result<Option<String>, ClientError> {
        loop {
            while let Some(end) = find_event_end(&self.buf) {
                let event: Vec<u8> = self.buf.drain(..end.0 + end.1).collect();
                let text = std::str::from_utf8(&event[..end.0]).map_err(|_| ClientError::Utf8)?;
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if !data.is_empty() {
                    return Ok(Some(data.join("\n")));
                }
            }
            match self.body.frame().await {
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                None => return Ok(None),
            }
        }
    }
}

/// Where the first event of `buf` ends: (its length, the separator's length).
fn find_event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|p| (p, 2));
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| (p, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_end_at_a_blank_line_of_either_style() {
        assert_eq!(find_event_end(b"data: a\n\ndata: b"), Some((7, 2)));
        assert_eq!(find_event_end(b"data: a\r\n\r\n"), Some((7, 4)));
        assert_eq!(find_event_end(b"data: a\n"), None);
    }
}
