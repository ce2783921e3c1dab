//! `hearth bench agent`: a coding agent's loop through the Anthropic and Responses APIs, with
//! prefix caching on and off.
//!
//! The workload the brief names as the one a warm cache helps most. An agent sends a long
//! system prompt and its tools, then turn after turn the whole history grown by the model's
//! reply and a tool's output:
//! - through `/v1/messages` every request resends everything (Claude Code's way);
//! - through `/v1/responses` each request sends only the new output with
//!   `previous_response_id` (the server keeps the history).
//!
//! Each (API, caching) run gets a fresh engine and server, so it starts cold; turns run one
//! after another over a loopback socket, streamed, greedy, exactly `reply_tokens` each
//! (`ignore_eos`). Reported per run and turn: time to the first streamed token (at the
//! client), prompt tokens, and prompt tokens served from the cache.
//!
//! Counterpart: none in vLLM or SGLang's benchmarks; the multi-turn ("conversation")
//! datasets of vLLM's `benchmark_serving.py` come closest.

use std::path::Path;
use std::time::{Duration, Instant};

use candle_core::Device;
use serde_json::{json, Value};

use super::client::{ClientError, HttpClient};
use super::serve::{random_text, Served};
use super::BenchError;
use crate::config::Settings;
use crate::engine::{Engine, EngineHandle};
use crate::model::source::{resolve, ModelSource};
use crate::model::LoadedModel;
use crate::server::{AppState, ServerConfig};

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AgentBenchOptions {
    /// Requests in one agent loop.
    pub turns: usize,
    pub system_tokens: usize,
    /// Tokens of each tool output (and of the first task).
    pub result_tokens: usize,
    pub reply_tokens: usize,
}

impl Default for AgentBenchOptions {
    fn default() -> Self {
        Self {
            turns: 8,
            system_tokens: 2048,
            result_tokens: 256,
            reply_tokens: 32,
        }
    }
}

/// One turn as the client saw it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AgentTurn {
    pub ttft_ms: f64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
}

/// One (API, caching) run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AgentRun {
    /// `messages` or `responses`.
    pub api: &'static str,
    pub prefix_caching: bool,
    pub turns: Vec<AgentTurn>,
}

impl AgentRun {
    /// The mean time to first token over turns 2.. (the turns a cache can serve).
    pub fn later_ttft_ms(&self) -> f64 {
        let later = &self.turns[1.min(self.turns.len())..];
        later.iter().map(|t| t.ttft_ms).sum::<f64>() / later.len().max(1) as f64
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AgentBenchReport {
    pub options: AgentBenchOptions,
    pub model: String,
    pub parameters: u64,
    pub device: String,
    pub kv_dtype: crate::config::KvDtype,
    pub runs: Vec<AgentRun>,
}

impl std::fmt::Display for AgentBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "model: {} ({:.1}M parameters), device: {}, K/V {}; {} turns: {}-token system prompt and 4 tools, \
             {}-token tool outputs, {}-token replies\n",
            self.model,
            self.parameters as f64 / 1e6,
            self.device,
            self.kv_dtype,
            o.turns,
            o.system_tokens,
            o.result_tokens,
            o.reply_tokens
        )?;
        f.write_str(&self.table())
    }
}

impl AgentBenchReport {
    fn run(&self, api: &str, caching: bool) -> Option<&AgentRun> {
        self.runs.iter().find(|r| r.api == api && r.prefix_caching == caching)
    }

    /// A Markdown table of the runs, then each API's caching speedup.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| API | prefix caching | TTFT turn 1 | TTFT turns 2.., mean | TTFT last turn | last turn: cached / prompt tokens |\n\
             |---|---|---:|---:|---:|---:|\n",
        );
        for r in &self.runs {
            let (first, last) = match (r.turns.first(), r.turns.last()) {
                (Some(a), Some(b)) => (a, b),
                _ => continue,
            };
            s.push_str(&format!(
                "| {} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {} / {} |\n",
                r.api,
                if r.prefix_caching { "on" } else { "off" },
                first.ttft_ms,
                r.later_ttft_ms(),
                last.ttft_ms,
                last.cached_tokens,
                last.prompt_tokens,
            ));
        }
        s.push('\n');
        for api in ["messages", "responses"] {
            if let (Some(on), Some(off)) = (self.run(api, true), self.run(api, false)) {
                s.push_str(&format!(
                    "- {api}: mean TTFT of turns 2.., caching off / on: {:.1}x\n",
                    off.later_ttft_ms() / on.later_ttft_ms().max(1e-9)
                ));
            }
        }
        s
    }
}

/// Four tools in Anthropic's shape (a coding agent's).
fn tools() -> Vec<Value> {
    let tool = |name: &str, description: &str, properties: Value, required: &[&str]| {
        json!({
            "name": name,
            "description": description,
            "input_schema": {"type": "object", "properties": properties, "required": required, "additionalProperties": false},
        })
    };
    vec![
        tool(
            "bash",
            "Run a shell command in the project directory and return its output.",
            json!({"command": {"type": "string"}, "timeout_ms": {"type": "integer", "minimum": 0}}),
            &["command"],
        ),
        tool("read_file", "Read a file of the project.", json!({"path": {"type": "string"}, "offset": {"type": "integer"}}), &["path"]),
        tool(
            "edit_file",
            "Replace a string in a file with another.",
            json!({"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}),
            &["path", "old", "new"],
        ),
        tool("search", "Search the project's files for a pattern.", json!({"pattern": {"type": "string"}}), &["pattern"]),
    ]
}

/// The same tools in the Responses API's flat shape.
fn flat_tools() -> Vec<Value> {
    tools()
        .into_iter()
        .map(|t| json!({"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}))
        .collect()
}

/// The texts of one agent loop: the system prompt, then the task and each tool output.
struct Script {
    system: String,
    inputs: Vec<String>,
}

/// Runs the agent benchmark on the GGUF at `path`, with `settings`' cache and engine limits
/// (prefix caching set per run).
pub fn run_agent_bench(
    path: &Path,
    device: &Device,
    settings: &Settings,
    opts: AgentBenchOptions,
) -> Result<AgentBenchReport, BenchError> {
    let resolved = resolve(&ModelSource::Local(path.to_path_buf()), &Default::default())?;
    let load = || LoadedModel::load(&resolved, device, settings.model.context_length);
    let probe = load()?;
    let script = Script {
        system: random_text(&probe.tokenizer, opts.system_tokens, 7)?,
        inputs: (0..opts.turns)
            .map(|i| random_text(&probe.tokenizer, opts.result_tokens, 700 + i as u64))
            .collect::<Result<_, _>>()?,
    };
    let mut report = AgentBenchReport {
        model: probe.info.name.clone(),
        parameters: probe.info.parameters,
        device: probe.info.device.clone(),
        kv_dtype: settings.cache.kv_dtype(),
        options: opts.clone(),
        runs: Vec::new(),
    };
    drop(probe);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| BenchError::Serve(format!("cannot start the async runtime: {e}")))?;
    for api in ["messages", "responses"] {
        for caching in [true, false] {
            let mut cache = settings.cache.clone();
            cache.prefix_caching = caching;
            let engine = Engine::new(load()?, &cache, &settings.engine)?;
            let handle = EngineHandle::spawn(engine, settings.engine.max_queued)?;
            let config = ServerConfig::from_settings(settings, &handle.model_info().name);
            let state = AppState::new(handle, config);
            let turns = rt.block_on(async {
                let served = Served::start(state).await?;
                let client = HttpClient::new(served.addr, None);
                let turns = match api {
                    "messages" => messages_loop(&client, &script, &opts).await,
                    _ => responses_loop(&client, &script, &opts).await,
                };
                served.stop().await;
                turns
            })?;
            tracing::info!("agent bench: {api}, caching {caching} done");
            report.runs.push(AgentRun {
                api,
                prefix_caching: caching,
                turns,
            });
        }
    }
    Ok(report)
}

/// The loop through `/v1/messages`: every request carries the whole history.
async fn messages_loop(client: &HttpClient, script: &Script, opts: &AgentBenchOptions) -> Result<Vec<AgentTurn>, BenchError> {
    let mut history: Vec<Value> = Vec::new();
    let mut turns = Vec::new();
    for input in &script.inputs {
        history.push(json!({"role": "user", "content": input}));
        let body = json!({
            "system": script.system,
            "tools": tools(),
            "messages": history,
            "max_tokens": opts.reply_tokens,
            "temperature": 0,
            "ignore_eos": true,
            "stream": true,
        });
        let (turn, last) = streamed(client, "/v1/messages", &body, |v| v["type"] == "content_block_delta").await?;
        let usage = &last["usage"];
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        turns.push(AgentTurn {
            prompt_tokens: n(&usage["input_tokens"]) + n(&usage["cache_read_input_tokens"]),
            cached_tokens: n(&usage["cache_read_input_tokens"]),
            ..turn
        });
        history.push(json!({"role": "assistant", "content": turn_text(&last)}));
    }
    Ok(turns)
}

/// The loop through `/v1/responses`: each request sends the new input after the last response.
async fn responses_loop(client: &HttpClient, script: &Script, opts: &AgentBenchOptions) -> Result<Vec<AgentTurn>, BenchError> {
    let mut previous: Option<String> = None;
    let mut turns = Vec::new();
    for input in &script.inputs {
        let body = json!({
            "instructions": script.system,
            "tools": flat_tools(),
            "input": input,
            "previous_response_id": previous,
            "max_output_tokens": opts.reply_tokens,
            "temperature": 0,
            "ignore_eos": true,
            "stream": true,
        });
        let first = |v: &Value| v["type"].as_str().is_some_and(|t| t.ends_with("text.delta"));
        let (turn, last) = streamed(client, "/v1/responses", &body, first).await?;
        let response = &last["response"];
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        turns.push(AgentTurn {
            prompt_tokens: n(&response["usage"]["input_tokens"]),
            cached_tokens: n(&response["usage"]["input_tokens_details"]["cached_tokens"]),
            ..turn
        });
        previous = response["id"].as_str().map(str::to_owned);
    }
    Ok(turns)
}

/// The `/v1/messages` reply's text, which the last event does not carry: kept by [`streamed`]
/// under `"text"`.
fn turn_text(last: &Value) -> String {
    last["text"].as_str().unwrap_or_default().to_owned()
}

/// One streamed request: the time to the first event `first` accepts, and the last event with
/// a `usage` (or a `response`), with the streamed text added as `"text"`.
async fn streamed(
    client: &HttpClient,
    path: &str,
    body: &Value,
    first: impl Fn(&Value) -> bool,
) -> Result<(AgentTurn, Value), BenchError> {
    let started = Instant::now();
    let res = client.post_json(path, body).await?;
    if res.status != 200 {
        let status = res.status;
        let text = res.text().await.unwrap_or_default();
        return Err(BenchError::Serve(format!("{path}: status {status}: {text}")));
    }
    let mut sse = res.sse();
    let mut ttft: Option<Duration> = None;
    let mut last = Value::Null;
    let mut text = String::new();
    while let Some(data) = sse.next_data().await? {
        let v: Value = serde_json::from_str(&data).map_err(ClientError::from)?;
        if v["type"] == "error" {
            return Err(BenchError::Serve(format!("{path}: {v}")));
        }
        if ttft.is_none() && first(&v) {
            ttft = Some(started.elapsed());
        }
        if let Some(t) = v["delta"]["text"].as_str() {
            text.push_str(t);
        }
        if v.get("usage").is_some_and(Value::is_object) || v.get("response").is_some_and(|r| r["usage"].is_object()) {
            last = v;
        }
    }
    if last.is_null() {
        return Err(BenchError::Serve(format!("{path}: the stream carried no usage")));
    }
    last["text"] = json!(text);
    let turn = AgentTurn {
        ttft_ms: ttft.unwrap_or_else(|| started.elapsed()).as_secs_f64() * 1e3,
        prompt_tokens: 0,
        cached_tokens: 0,
    };
    Ok((turn, last))
}
