//! Serving [`super::router`] on a socket until a shutdown signal.
//!
//! Owns: [`serve`] (our accept loop over hyper's HTTP/1 connections, with the state's
//! [`super::ConnectionLimits`]: at most [`MAX_CONNECTIONS`] open at once, request headers within
//! [`HEADER_TIMEOUT`] — which also closes a kept-alive connection idle that long —; after `shutdown` resolves it stops accepting
//! and lets the requests in flight, streams included, end), [`drained`] (the deadline on that
//! wait: connections that never got a request to the engine — headers never finished, a body
//! that stopped — are not waited for past a short grace) and [`shutdown_signal`] (Ctrl-C, or
//! SIGTERM on Unix). Binding, and deciding which address is allowed, is the caller's.
//!
//! A connection past the cap is answered at once with a 503 in our JSON and closed, so the
//! process never runs out of file descriptors and serves again as soon as connections end.
//! Protocol errors hyper finds itself (a garbage request line, a bad `Content-Length`, a URL
//! over 64 KiB: 400/414/431) are answered by hyper with an empty body: it offers no hook for
//! the body of those responses.
//!
//! Counterpart: vLLM's `serve_http` (uvicorn with `timeout_keep_alive`, `limit_concurrency`
//! and graceful shutdown).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::{router, ApiError, AppState};
use crate::engine::EngineHandle;

/// How long a stopping server waits, once the engine has nothing left to do, for connections
/// that have not brought it a request.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Connections open at once by default; one more is answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 256;

/// By default, a request's headers must arrive within this; a kept-alive connection with no
/// new request for this long is closed too.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(15);

/// Serves every route over `listener` until `shutdown` resolves, then until
/// the requests in flight are done.
pub async fn serve<F>(listener: TcpListener, state: AppState, shutdown: F) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let limits = state.config().limits;
    let app = router(state);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, or the peer gave up before we accepted: wait a
                    // little and go on, as hyper's and axum's servers do.
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream, limits.max_connections));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("connection from {peer}: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Answers a connection past the cap (`max` open) with a 503 and closes it.
async fn refuse(mut stream: tokio::net::TcpStream, max: usize) {
    let body = ApiError::Overloaded(format!("too many connections ({max} open); retry shortly")).body();
    let body = serde_json::to_string(&body).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}

/// Resolves once `engine` has had no request waiting or running for `grace`: from then on a
/// stopping server waits only for connections that will never reach the engine (a client
/// that sent half a request), so it may stop (dropping them) instead of waiting forever.
pub async fn drained(engine: &EngineHandle, grace: Duration) {
    let mut idle_since: Option<Instant> = None;
    loop {
        let s = engine.stats();
        if s.waiting + s.running == 0 {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= grace {
                return;
            }
        } else {
            idle_since = None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Resolves on Ctrl-C, or on SIGTERM on Unix. If a signal cannot be
/// watched, it is logged and the other still works.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!("cannot watch for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot watch for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}
