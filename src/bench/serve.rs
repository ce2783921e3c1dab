//! `hearth bench serve`: the OpenAI server under load, with prefix caching on and off.
//!
//! The workload of lmdeploy's prefix-caching benchmark, scaled to a CPU: `requests` chat
//! requests that share one system prompt of `system_tokens` tokens, each with its own
//! `question_tokens`-token question, sent by `concurrency` clients at a time over real
//! loopback sockets to `hearth --headless`'s router (streaming, greedy, exactly `max_tokens`
//! each: `ignore_eos`, as vLLM's benchmark does).
//! Every (caching, concurrency) run gets a fresh engine and server, so each starts cold.
//!
//! Reported per run: requests per second, output tokens per second, time to first token
//! (p50 / p99, measured at the client), and the mean prompt tokens served from the cache.
//!
//! Counterpart: vLLM's `benchmark_serving.py`, lmdeploy's `profile_restful_api.py`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::Device;
use rand::{Rng, SeedableRng};

use super::client::{ClientError, HttpClient};
use super::BenchError;
use crate::config::Settings;
use crate::engine::{Engine, EngineHandle};
use crate::model::source::{resolve, ModelSource};
use crate::model::tokenizer::Tokenizer;
use crate::model::LoadedModel;
use crate::server::{AppState, ServerConfig};

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ServeBenchOptions {
    pub requests: usize,
    pub system_tokens: usize,
    pub question_tokens: usize,
    pub max_tokens: usize,
    pub concurrency: Vec<usize>,
}

impl Default for ServeBenchOptions {
    fn default() -> Self {
        Self {
            requests: 200,
            system_tokens: 512,
            question_tokens: 64,
            max_tokens: 64,
            concurrency: vec![1, 4, 16],
        }
    }
}

/// One (caching, concurrency) run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServeRun {
    pub prefix_caching: bool,
    pub concurrency: usize,
    pub wall_s: f64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    pub mean_prompt_tokens: f64,
    pub mean_cached_tokens: f64,
    pub mean_completion_tokens: f64,
    pub preemptions: u64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServeBenchReport {
    /// How K/V was stored.
    pub kv_dtype: crate::config::KvDtype,
    pub options: ServeBenchOptions,
    pub model: String,
    pub parameters: u64,
    pub device: String,
    pub max_running: usize,
    pub max_batch_tokens: usize,
    pub runs: Vec<ServeRun>,
}

/// The run's figures and then [`ServeBenchReport::table`].
impl std::fmt::Display for ServeBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "model: {} ({:.1}M parameters), device: {}, K/V {}, {} requests: {}-token system prompt + {}-token question, \
             up to {} reply tokens; max_running {}, max_batch_tokens {}\n",
            self.model,
            self.parameters as f64 / 1e6,
            self.device,
            self.kv_dtype,
            o.requests,
            o.system_tokens,
            o.question_tokens,
            o.max_tokens,
            self.max_running,
            self.max_batch_tokens
        )?;
        f.write_str(&self.table())
    }
}

impl ServeBenchReport {
    fn run(&self, caching: bool, concurrency: usize) -> Option<&ServeRun> {
        self.runs
            .iter()
            .find(|r| r.prefix_caching == caching && r.concurrency == concurrency)
    }

    /// Requests per second at the highest concurrency over the lowest, caching on.
    pub fn concurrency_speedup(&self) -> Option<f64> {
        let lo = *self.options.concurrency.iter().min()?;
        let hi = *self.options.concurrency.iter().max()?;
        Some(self.run(true, hi)?.requests_per_s / self.run(true, lo)?.requests_per_s)
    }

    /// Requests per second with caching on over off, at `concurrency`.
    pub fn caching_speedup(&self, concurrency: usize) -> Option<f64> {
        Some(self.run(true, concurrency)?.requests_per_s / self.run(false, concurrency)?.requests_per_s)
    }

    /// A Markdown table of the runs, then the ratios against the targets.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| prefix caching | concurrency | requests/s | output tok/s | TTFT p50 | TTFT p99 | cached / prompt tokens | preemptions |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.runs {
            s.push_str(&format!(
                "| {} | {} | {:.2} | {:.1} | {:.0} ms | {:.0} ms | {:.0} / {:.0} | {} |\n",
                if r.prefix_caching { "on" } else { "off" },
                r.concurrency,
                r.requests_per_s,
                r.output_tokens_per_s,
                r.ttft_p50_ms,
                r.ttft_p99_ms,
                r.mean_cached_tokens,
                r.mean_prompt_tokens,
                r.preemptions,
            ));
        }
        let ok = |v: f64, target: f64| if v >= target { "met" } else { "missed" };
        s.push('\n');
        if let Some(x) = self.concurrency_speedup() {
            s.push_str(&format!(
                "- throughput, highest / lowest concurrency (caching on): {x:.2}x (target >= 3: {})\n",
                ok(x, 3.0)
            ));
        }
        for &c in &self.options.concurrency {
            if let Some(x) = self.caching_speedup(c) {
                s.push_str(&format!(
                    "- throughput, caching on / off at concurrency {c}: {x:.2}x (target >= 1.5: {})\n",
                    ok(x, 1.5)
                ));
            }
        }
        s
    }
}

/// Text of about `tokens` tokens: random vocabulary pieces, cut to `tokens`
/// after tokenizing.
pub(super) fn random_text(tok: &Tokenizer, tokens: usize, seed: u64) -> Result<String, BenchError> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let special: Vec<u32> = tok.stop_ids().iter().copied().chain(tok.bos_id()).collect();
    let vocab = tok.vocab_size() as u32;
    let ids: Vec<u32> = std::iter::repeat_with(|| rng.random_range(0..vocab))
        .filter(|id| !special.contains(id))
        .take(tokens * 2)
        .collect();
    let text = tok.decode_skip_special(&ids)?;
    let mut again = tok.encode(&text, false)?;
    again.truncate(tokens);
    Ok(tok.decode_skip_special(&again)?)
}

struct Outcome {
    ttft: Duration,
    prompt_tokens: u64,
    cached_tokens: u64,
    completion_tokens: u64,
}

/// One streamed chat request; the time to its first content and its usage.
async fn one_request(client: &HttpClient, body: &serde_json::Value) -> Result<Outcome, BenchError> {
    let started = Instant::now();
    let res = client.post_json("/v1/chat/completions", body).await?;
    if res.status != 200 {
        let status = res.status;
        let text = res.text().await.unwrap_or_default();
        return Err(BenchError::Serve(format!("status {status}: {text}")));
    }
    let mut sse = res.sse();
    let mut ttft = None;
    let mut usage = None;
    while let Some(data) = sse.next_data().await? {
        if data == "[DONE]" {
            break;
        }
        let v: serde_json::Value = serde_json::from_str(&data).map_err(ClientError::from)?;
        if let Some(e) = v.get("error") {
            return Err(BenchError::Serve(e.to_string()));
        }
        let has_content = v["choices"]
            .get(0)
            .and_then(|c| c["delta"]["content"].as_str())
            .is_some_and(|t| !t.is_empty());
        if has_content && ttft.is_none() {
            ttft = Some(started.elapsed());
        }
        if v["usage"].is_object() {
            usage = Some(v["usage"].clone());
        }
    }
    let usage = usage.ok_or_else(|| BenchError::Serve("the stream carried no usage".into()))?;
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    Ok(Outcome {
        ttft: ttft.unwrap_or_else(|| started.elapsed()),
        prompt_tokens: n(&usage["prompt_tokens"]),
        cached_tokens: n(&usage["prompt_tokens_details"]["cached_tokens"]),
        completion_tokens: n(&usage["completion_tokens"]),
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs the serving benchmark on the GGUF at `path`, with `settings`' cache
/// and engine limits (prefix caching set per run).
pub fn run_serve_bench(
    path: &Path,
    device: &Device,
    settings: &Settings,
    opts: ServeBenchOptions,
) -> Result<ServeBenchReport, BenchError> {
    let resolved = resolve(&ModelSource::Local(path.to_path_buf()), &Default::default())?;
    let load = || LoadedModel::load(&resolved, device, settings.model.context_length);
    let probe = load()?;
    let system = random_text(&probe.tokenizer, opts.system_tokens, 1)?;
    let questions = (0..opts.requests)
        .map(|i| random_text(&probe.tokenizer, opts.question_tokens, 1000 + i as u64))
        .collect::<Result<Vec<_>, _>>()?;
    let bodies: Arc<Vec<serde_json::Value>> = Arc::new(
        questions
            .iter()
            .map(|q| {
                serde_json::json!({
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": q},
                    ],
                    "max_tokens": opts.max_tokens,
                    "temperature": 0,
                    "ignore_eos": true,
                    "stream": true,
                    "stream_options": {"include_usage": true},
                })
            })
            .collect(),
    );
    let mut report = ServeBenchReport {
        model: probe.info.name.clone(),
        parameters: probe.info.parameters,
        device: probe.info.device.clone(),
        kv_dtype: settings.cache.kv_dtype(),
        max_running: settings.engine.max_running,
        max_batch_tokens: settings.engine.max_batch_tokens,
        options: opts.clone(),
        runs: Vec::new(),
    };
    drop(probe);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| BenchError::Serve(format!("cannot start the async runtime: {e}")))?;
    for caching in [true, false] {
        for &concurrency in &opts.concurrency {
            let mut cache = settings.cache.clone();
            cache.prefix_caching = caching;
            let engine = Engine::new(load()?, &cache, &settings.engine)?;
            let handle = EngineHandle::spawn(engine, opts.requests.max(settings.engine.max_queued))?;
            let config = ServerConfig::from_settings(settings, &handle.model_info().name);
            let state = AppState::new(handle.clone(), config);
            let run = rt.block_on(drive(state, bodies.clone(), concurrency))?;
            let stats = handle.stats();
            report.runs.push(ServeRun {
                prefix_caching: caching,
                preemptions: stats.requests.preemptions,
                ..run
            });
            tracing::info!("serve bench: caching {caching}, concurrency {concurrency} done");
        }
    }
    Ok(report)
}

/// Serves `state` on a loopback port and sends every body from `concurrency` clients.
async fn drive(
    state: AppState,
    bodies: Arc<Vec<serde_json::Value>>,
    concurrency: usize,
) -> Result<ServeRun, BenchError> {
    let served = Served::start(state).await?;
    let addr = served.addr;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (next, bodies) = (next.clone(), bodies.clone());
        let client = HttpClient::new(addr, None);
        clients.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else { break };
                out.push(one_request(&client, body).await?);
            }
            Ok::<_, BenchError>(out)
        }));
    }
    let mut outcomes = Vec::new();
    for c in clients {
        outcomes.extend(c.await.map_err(|e| BenchError::Serve(e.to_string()))??);
    }
    let wall = started.elapsed().as_secs_f64();
    served.stop().await;
    let n = outcomes.len().max(1) as f64;
    let mut ttfts: Vec<f64> = outcomes.iter().map(|o| o.ttft.as_secs_f64() * 1e3).collect();
    ttfts.sort_by(f64::total_cmp);
    let sum = |f: fn(&Outcome) -> u64| outcomes.iter().map(f).sum::<u64>() as f64;
    Ok(ServeRun {
        prefix_caching: false,
        concurrency,
        wall_s: wall,
        requests_per_s: outcomes.len() as f64 / wall,
        output_tokens_per_s: sum(|o| o.completion_tokens) / wall,
        ttft_p50_ms: percentile(&ttfts, 50.0),
        ttft_p99_ms: percentile(&ttfts, 99.0),
        mean_prompt_tokens: sum(|o| o.prompt_tokens) / n,
        mean_cached_tokens: sum(|o| o.cached_tokens) / n,
        mean_completion_tokens: sum(|o| o.completion_tokens) / n,
        preemptions: 0,
    })
}

/// `hearth --headless`'s server on a loopback port, until [`Served::stop`].
pub(super) struct Served {
    pub addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
}

impl Served {
    pub async fn start(state: AppState) -> Result<Self, BenchError> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(|e| BenchError::Serve(format!("cannot bind a loopback port: {e}")))?;
        let addr = listener.local_addr().map_err(|e| BenchError::Serve(e.to_string()))?;
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let _ = crate::server::serve(listener, state, async {
                let _ = stop_rx.await;
            })
            .await;
        });
        Ok(Self { addr, stop, server })
    }

    /// Stops accepting and waits for the server to end.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
    }
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
