//! Serving [`super::router`] on a socket until a shutdown signal.
//!
//! Owns: [`serve`] (axum's server over a bound listener; after `shutdown` resolves it stops
//! accepting and waits for requests in flight, streams included, to end) and
//! [`shutdown_signal`] (Ctrl-C, or SIGTERM on Unix). Binding, and deciding which address is
//! allowed, is the caller's (`main.rs`).
//!
//! Counterpart: vLLM's `serve_http` (uvicorn with graceful shutdown).

use std::future::Future;

use tokio::net::TcpListener;

use super::{router, AppState};

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
