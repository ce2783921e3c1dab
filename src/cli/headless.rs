//! `hearth --headless`: the OpenAI-compatible HTTP server.

use std::process::ExitCode;

use anyhow::{Context, Result};

use hearth::config::{AppPaths, Settings};

use super::start::start;

/// `hearth --headless`: the OpenAI-compatible server until Ctrl-C or SIGTERM.
pub fn run(settings: &Settings, paths: &AppPaths) -> Result<ExitCode> {
    use hearth::server::{drained, serve, shutdown_signal, AppState, ServerConfig, SHUTDOWN_GRACE};
    let server = &settings.server;
    // The host is loopback unless the command line or the config asked for
    // another; say what that means without a key.
    if !server.host.is_loopback() && server.api_key.is_none() {
        tracing::warn!(
            "listening on {} without an API key: anyone who can reach this address can use the model (set --api-key or HEARTH_API_KEY)",
            server.host
        );
    }
    // Bind before the (slow) model load, so a taken port fails at once.
    let addr = std::net::SocketAddr::new(server.host, server.port);
    let listener = std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    listener.set_nonblocking(true)?;
    let handle = start(settings, paths)?;
    let config = ServerConfig::from_settings(settings, &handle.model_info().name);
    let saver = handle.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let local = listener.local_addr()?;
        eprintln!(
            "hearth: serving {} at http://{local}/v1 (Ctrl-C to stop)",
            config.model_id
        );
        // What an embedding model or a reranker is for: its routes.
        if let Some(p) = config.embedding_pooling(&handle) {
            eprintln!("hearth: embeddings pooled by {} at POST /v1/embeddings", p.name());
        }
        if handle.model().transformer.hparams().rank.is_some() {
            eprintln!("hearth: a reranker: scores at POST /v1/rerank");
        }
        let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            shutdown_signal().await;
            eprintln!("hearth: stopping; waiting for requests in flight (Ctrl-C again to stop now)");
            let _ = stopping_tx.send(());
        };
        let engine = handle.clone();
        let force = async move {
            if stopping_rx.await.is_err() {
                std::future::pending::<()>().await;
            }
            tokio::select! {
                _ = shutdown_signal() => eprintln!("hearth: stopped with requests in flight"),
                _ = drained(&engine, SHUTDOWN_GRACE) => {
                    eprintln!("hearth: stopped; closed connections that sent no complete request")
                }
            }
        };
        tokio::select! {
            served = serve(listener, AppState::new(handle, config), shutdown) => {
                served.context("the server failed")?;
            }
            _ = force => {}
        }
        Ok::<_, anyhow::Error>(())
    })?;
    // Finish the saves of the last turns before exiting.
    saver.flush_disk();
    super::report_unsaved(&saver);
    Ok(ExitCode::SUCCESS)
}
