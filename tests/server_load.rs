//! Load over real loopback sockets: 64 concurrent streaming clients, a
//! quarter of them vanishing mid-answer. Every other client gets exactly the
//! reply it gets alone, nothing answers 5xx, and afterwards every block is
//! back and the process's memory has not grown with the load.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use hearth::bench::client::HttpClient;
use hearth::config::{EngineSettings, SamplingParams};
use hearth::engine::{EngineHandle, EngineStats};
use hearth::model::hparams::Family;
use hearth::model::testkit::{TinyModelSpec, WeightType};
use hearth::server::{AppState, ServerConfig};
use serde_json::{json, Value};

const CLIENTS: usize = 64;
const PROMPTS: usize = 8;

/// A completion request; `ignore_eos` makes the reply exactly `max_tokens` long.
fn body(i: usize, max_tokens: usize, stream: bool) -> Value {
    json!({
        "prompt": format!("Client story {i}: once upon a time, in a small town by the sea,"),
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": true,
        "stream": stream,
    })
}

/// The resident set of this process, in bytes (Linux).
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Polls the engine until `submitted` requests were taken and all have ended.
async fn settle(h: &EngineHandle, submitted: u64) -> EngineStats {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = h.stats();
        let r = s.requests;
        if r.submitted >= submitted
            && r.finished + r.cancelled + r.failed == r.submitted
            && s.running == 0
            && s.waiting == 0
            && s.cache.running_seqs == 0
        {
            return s;
        }
        assert!(Instant::now() < deadline, "the engine did not settle: {s:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One client: streams its completion; a vanishing one drops the connection
/// after `leave_after` events. Returns (status, text, finish_reason).
async fn client(addr: SocketAddr, j: usize, leave_after: Option<usize>) -> (u16, String, Option<String>) {
    let c = HttpClient::new(addr, None);
    let max_tokens = if leave_after.is_some() { 300 } else { 24 };
    let res = c
        .post_json("/v1/completions", &body(j % PROMPTS, max_tokens, true))
        .await
        .unwrap();
    let status = res.status;
    if status != 200 {
        return (status, res.text().await.unwrap_or_default(), None);
    }
    let mut sse = res.sse();
    let (mut text, mut finish, mut events) = (String::new(), None, 0);
    while let Some(data) = sse.next_data().await.unwrap() {
        events += 1;
        if leave_after == Some(events) {
            return (status, text, None); // drops the connection
        }
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&data).unwrap();
        assert!(v.get("error").is_none(), "client {j}: {v}");
        let choice = &v["choices"][0];
        text.push_str(choice["text"].as_str().unwrap_or(""));
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    (status, text, finish)
}

#[test]
fn sixty_four_streaming_clients_with_a_quarter_vanishing() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0);
    let path = write_tiny(dir.path(), &spec, "llama.gguf");
    let limits = EngineSettings {
        max_running: 32,
        max_batch_tokens: 256,
        max_queued: 128,
        threads: None,
    };
    let engine = engine_limits(&path, cache_settings(true, 16), &limits, 512, 64);
    let handle = EngineHandle::spawn(engine, limits.max_queued).unwrap();
    let state = AppState::new(
        handle.clone(),
        ServerConfig {
            model_id: "tiny".into(),
            model_aliases: vec![],
            sampling: SamplingParams::greedy(),
            max_tokens: 16,
            api_key: None,
            max_body_bytes: 1 << 20,
            limits: Default::default(),
            pooling: None,
        },
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(hearth::server::serve(listener, state, async {
            let _ = stopped.await;
        }));

        // What each prompt gets alone (whole replies, one at a time).
        let c = HttpClient::new(addr, None);
        let mut alone = Vec::new();
        for i in 0..PROMPTS {
            let v = c
                .post_json("/v1/completions", &body(i, 24, false))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            alone.push(v["choices"][0]["text"].as_str().unwrap().to_string());
        }
        let mut submitted = PROMPTS as u64;
        let baseline = settle(&handle, submitted).await;
        assert_blocks_released(&baseline.cache, "before the load");

        let mut rss_after = Vec::new();
        for round in 0..2 {
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|j| {
                    // Every fourth client leaves after 1 to 5 events.
                    let leave = (j % 4 == 0).then_some(1 + (j / 4) % 5);
                    (j, leave, tokio::spawn(client(addr, j, leave)))
                })
                .collect();
            for (j, leave, task) in tasks {
                let (status, text, finish) = task.await.unwrap();
                assert_eq!(status, 200, "round {round} client {j}: {text}");
                if leave.is_none() {
                    assert_eq!(
                        text,
                        alone[j % PROMPTS],
                        "round {round} client {j}: reply differs from alone"
                    );
                    assert!(finish.is_some(), "round {round} client {j}: no finish_reason");
                }
            }
            submitted += CLIENTS as u64;
            let stats = settle(&handle, submitted).await;
            assert_blocks_released(&stats.cache, &format!("after round {round}"));
            assert_eq!(stats.requests.failed, 0);
            // Each vanished client's request was cancelled, not run to its 300 tokens.
            assert_eq!(
                stats.requests.cancelled,
                (round as u64 + 1) * (CLIENTS as u64 / 4),
                "{:?}",
                stats.requests
            );
            assert_eq!(handle.queued(), 0);
            rss_after.push(rss_bytes());
        }
        // A second identical round costs no more memory than the first left behind.
        if let [Some(a), Some(b)] = rss_after[..] {
            assert!(
                b < a + (32 << 20),
                "memory grew from {a} to {b} bytes over a second round"
            );
        }
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    });
}
