//! Serving [`super::router`] on a socket until a shutdown signal.
//!
//! Owns: [`serve`] (axum's server over a bound listener; after `shutdown` resolves it stops
//! accepting and waits for requests in flight, streams included, to end), [`drained`] (the
//! deadline on that wait: connections that never got a request to the engine — headers never
//! finished, a body that stopped — are not waited for past a short grace) and
//! [`shutdown_signal`] (Ctrl-C, or SIGTERM on Unix). Binding, and deciding which address is
//! allowed, is the caller's (`main.rs`).
//!
//! Counterpart: vLLM's `serve_http` (uvicorn with graceful shutdown).

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use super::{router, AppState};
use crate::engine::EngineHandle;

/// How long a stopping server waits, once the engine has nothing left to do, for connections
/// that have not brought it a request.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves every route over `listener` until `shutdown` resolves, then until
/// the requests in flight are done.
pub async fn serve<F>(listener: TcpListener, state: AppState, shutdown: F) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
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
