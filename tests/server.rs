//! The OpenAI-compatible server against the real engine on a tiny model: every route,
//! streamed and whole replies, every error status, auth, metrics, the prefix cache seen
//! through `usage`, cancellation when a client goes away, and `serve` on a real socket.
//!
//! Router tests call `router(state).oneshot(request)`: no socket.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use candle_core::Device;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use hearth::config::{CacheSettings, DevicePool, EngineSettings, SamplingParams};
use hearth::engine::{DiskSettings, Engine, EngineHandle, GenerateParams};
use hearth::model::chat::Message;
use hearth::model::hparams::Family;
use hearth::model::source::{resolve, ModelSource};
use hearth::model::testkit::{write_model, TinyModelSpec, WeightType};
use hearth::model::LoadedModel;
use hearth::persist::Faults;
use hearth::runtime::PoolSizes;
use hearth::server::{router, AppState, ConnectionLimits, ServerConfig};

const BLOCK_SIZE: usize = 16;

/// How to build the server under test.
struct Opts {
    api_key: Option<String>,
    max_queued: usize,
    max_body_bytes: usize,
    /// Give the engine a disk tier in the temp dir's `data/`.
    disk: bool,
    /// The disk tier's write hook (a full disk).
    faults: Faults,
    limits: ConnectionLimits,
    /// The model served (the tiny Llama when `None`).
    model: Option<TinyModelSpec>,
    /// `--pooling`.
    pooling: Option<hearth::config::Pooling>,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            api_key: None,
            max_queued: 16,
            max_body_bytes: 1 << 20,
            disk: false,
            faults: Faults::none(),
            limits: ConnectionLimits::default(),
            model: None,
            pooling: None,
        }
    }
}

struct TestServer {
    state: AppState,
    app: Router,
    _dir: tempfile::TempDir,
}

fn load_engine(path: &Path) -> Engine {
    let resolved = resolve(&ModelSource::Local(path.to_path_buf()), &Default::default()).unwrap();
    let model = LoadedModel::load(&resolved, &Device::Cpu, None).unwrap();
    let cache = CacheSettings {
        kv_dtype: None,
        block_size: BLOCK_SIZE,
        device_pool: DevicePool::Bytes(1),
        host_bytes: 0,
        prefix_caching: true,
        write_through: false,
        disk_budget_bytes: 0,
    };
    let sizes = PoolSizes {
        device_blocks: 96,
        host_blocks: 0,
    };
    Engine::with_pool_sizes(model, &cache, &EngineSettings::default(), sizes).unwrap()
}

fn server(opts: Opts) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let spec = opts.model.clone().unwrap_or_else(|| TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0));
    write_model(&spec, &path).unwrap();
    let mut engine = load_engine(&path);
    if opts.disk {
        let disk = DiskSettings {
            faults: opts.faults.clone(),
            ..DiskSettings::new(dir.path().join("data"), 1 << 30)
        };
        engine = engine.with_disk(&disk).unwrap();
    }
    let handle = EngineHandle::spawn(engine, opts.max_queued).unwrap();
    let config = ServerConfig {
        model_id: "tiny-llama".into(),
        model_aliases: vec!["tiny.gguf".into()],
        sampling: SamplingParams::default(),
        max_tokens: 8,
        api_key: opts.api_key,
        max_body_bytes: opts.max_body_bytes,
        limits: opts.limits,
        pooling: opts.pooling,
    };
    let state = AppState::new(handle, config);
    TestServer {
        app: router(state.clone()),
        state,
        _dir: dir,
    }
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `data:` payloads of an SSE body, in order.
    fn sse_data(&self) -> Vec<String> {
        let text = self.text();
        text.split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .filter_map(|e| {
                let data: Vec<&str> = e.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
                (!data.is_empty()).then(|| data.join("\n"))
            })
            .collect()
    }

    /// The error body's `error` object, checking the status.
    fn error(&self, status: StatusCode) -> Value {
        assert_eq!(self.status, status, "{}", self.text());
        let v = self.json();
        let e = v["error"].clone();
        assert!(e["message"].is_string(), "{v}");
        assert!(e["type"].is_string(), "{v}");
        e
    }
}

async fn send(app: &Router, request: Request<Body>) -> Reply {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply { status, headers, body }
}

fn request(method: Method, uri: &str, body: Body, key: Option<&str>) -> Request<Body> {
    let mut b = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(k) = key {
        b = b.header(header::AUTHORIZATION, format!("Bearer {k}"));
    }
    b.body(body).unwrap()
}

async fn post(app: &Router, uri: &str, body: &Value) -> Reply {
    send(app, request(Method::POST, uri, Body::from(body.to_string()), None)).await
}

async fn get(app: &Router, uri: &str) -> Reply {
    send(app, request(Method::GET, uri, Body::empty(), None)).await
}

fn chat_body(content: &str, max_tokens: usize, stream: bool) -> Value {
    json!({
        "model": "tiny-llama",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
    })
}

/// Parsed chunks of a stream that ended with `[DONE]`.
fn chunks(reply: &Reply) -> Vec<Value> {
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let ct = reply.headers[header::CONTENT_TYPE].to_str().unwrap();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let data = reply.sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    assert_eq!(data.iter().filter(|d| *d == "[DONE]").count(), 1);
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("chunk not JSON ({e}): {d}")))
        .collect()
}

/// Gemma 2's own template refuses a system message ("System role not supported"). Through the
/// API it is merged into the first user message, as llama.cpp does: the request is answered
/// exactly as the same words sent as one user message are.
#[tokio::test]
async fn a_system_message_reaches_a_template_without_a_system_role() {
    let mut spec = TinyModelSpec::tiny(Family::Gemma2, WeightType::Q8_0);
    let template = include_str!("../src/model/chat/fixtures/google-gemma-2-2b-it.jinja");
    spec.vocab.metadata.retain(|(k, _)| k != "tokenizer.chat_template");
    spec.vocab.metadata.push((
        "tokenizer.chat_template".into(),
        candle_core::quantized::gguf_file::Value::String(template.into()),
    ));
    let s = server(Opts {
        model: Some(spec),
        ..Opts::default()
    });
    let body = |messages: Value| json!({"messages": messages, "max_tokens": 6, "temperature": 0});
    let with_system = post(
        &s.app,
        "/v1/chat/completions",
        &body(json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])),
    )
    .await;
    assert_eq!(with_system.status, StatusCode::OK, "{}", with_system.text());
    let merged = post(
        &s.app,
        "/v1/chat/completions",
        &body(json!([{"role": "user", "content": "Be brief.\nHi"}])),
    )
    .await;
    let (a, b) = (with_system.json(), merged.json());
    assert_eq!(a["usage"]["prompt_tokens"], b["usage"]["prompt_tokens"]);
    assert_eq!(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
}

#[tokio::test]
async fn health_and_models() {
    let s = server(Opts::default());
    let r = get(&s.app, "/health").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json(), json!({"status": "ok"}));

    let r = get(&s.app, "/v1/models").await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(v["object"], "list");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["id"], "tiny-llama");
    assert_eq!(data[0]["object"], "model");
    assert_eq!(data[0]["owned_by"], "hearth");
    assert_eq!(data[0]["max_model_len"], 512);

    assert_eq!(get(&s.app, "/v1/models/tiny-llama").await.json()["id"], "tiny-llama");
    assert_eq!(get(&s.app, "/v1/models/tiny.gguf").await.json()["id"], "tiny-llama");
    let e = get(&s.app, "/v1/models/other").await.error(StatusCode::NOT_FOUND);
    assert_eq!(e["code"], "model_not_found");
}

#[tokio::test]
async fn chat_stream_deltas_equal_the_whole_reply() {
    let s = server(Opts::default());
    let whole = post(&s.app, "/v1/chat/completions", &chat_body("Hello there", 8, false)).await;
    assert_eq!(whole.status, StatusCode::OK, "{}", whole.text());
    let v = whole.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "tiny-llama");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let choice = &v["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    let text = choice["message"]["content"].as_str().unwrap().to_string();
    let finish = choice["finish_reason"].as_str().unwrap().to_string();
    assert!(finish == "stop" || finish == "length", "{finish}");
    let u = &v["usage"];
    let (p, c) = (
        u["prompt_tokens"].as_u64().unwrap(),
        u["completion_tokens"].as_u64().unwrap(),
    );
    assert!(p > 0 && (1..=8).contains(&c), "{u}");
    assert_eq!(u["total_tokens"].as_u64().unwrap(), p + c);
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64(), "{u}");

    let streamed = post(&s.app, "/v1/chat/completions", &chat_body("Hello there", 8, true)).await;
    let chunks = chunks(&streamed);
    assert!(chunks.len() >= 2, "{chunks:?}");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let id = &chunks[0]["id"];
    let mut joined = String::new();
    for (i, ch) in chunks.iter().enumerate() {
        assert_eq!(ch["object"], "chat.completion.chunk");
        assert_eq!(&ch["id"], id);
        assert_eq!(ch["model"], "tiny-llama");
        assert!(ch.get("usage").is_none(), "usage without include_usage: {ch}");
        let c = &ch["choices"][0];
        if let Some(t) = c["delta"]["content"].as_str() {
            joined.push_str(t);
        }
        let last = i == chunks.len() - 1;
        assert_eq!(!c["finish_reason"].is_null(), last, "{ch}");
    }
    assert_eq!(joined, text);
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], finish.as_str());
}

#[tokio::test]
async fn completions_stream_and_whole_agree_and_token_prompts_work() {
    let s = server(Opts::default());
    let body =
        |stream: bool| json!({"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "stream": stream});
    let whole = post(&s.app, "/v1/completions", &body(false)).await;
    assert_eq!(whole.status, StatusCode::OK, "{}", whole.text());
    let v = whole.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["model"], "tiny-llama", "a missing model uses the loaded one");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    let text = v["choices"][0]["text"].as_str().unwrap().to_string();
    let finish = v["choices"][0]["finish_reason"].as_str().unwrap().to_string();

    let chunks = chunks(&post(&s.app, "/v1/completions", &body(true)).await);
    let mut joined = String::new();
    for ch in &chunks {
        assert_eq!(ch["object"], "text_completion");
        joined.push_str(ch["choices"][0]["text"].as_str().unwrap());
    }
    assert_eq!(joined, text);
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], finish.as_str());

    // The same prompt as token ids gives the same greedy reply.
    let ids = s.state.engine().tokenize("Once upon a time").unwrap();
    for prompt in [json!(ids), json!([ids]), json!(["Once upon a time"])] {
        let r = post(
            &s.app,
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 6, "temperature": 0}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(r.json()["choices"][0]["text"], text.as_str(), "{prompt}");
    }
}

#[tokio::test]
async fn include_usage_adds_a_last_chunk_with_usage() {
    let s = server(Opts::default());
    for (uri, mut body) in [
        ("/v1/chat/completions", chat_body("Count with me", 5, true)),
        (
            "/v1/completions",
            json!({"prompt": "Count with me", "max_tokens": 5, "temperature": 0, "stream": true}),
        ),
    ] {
        body["stream_options"] = json!({"include_usage": true});
        let chunks = chunks(&post(&s.app, uri, &body).await);
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]), "{uri}: {last}");
        let u = &last["usage"];
        assert!(u["prompt_tokens"].as_u64().unwrap() > 0, "{u}");
        let c = u["completion_tokens"].as_u64().unwrap();
        assert!((1..=5).contains(&c), "{u}");
        assert_eq!(
            u["total_tokens"].as_u64().unwrap(),
            u["prompt_tokens"].as_u64().unwrap() + c
        );
        let before = &chunks[chunks.len() - 2];
        assert!(!before["choices"][0]["finish_reason"].is_null(), "{uri}: {before}");
        assert!(chunks[..chunks.len() - 1].iter().all(|c| c.get("usage").is_none()));
    }
}

#[tokio::test]
async fn stop_strings_end_the_reply_before_them() {
    let s = server(Opts::default());
    let body = |stop: Value, stream: bool| {
        let mut b = chat_body("Hello there", 12, stream);
        b["stop"] = stop;
        b
    };
    let free = post(&s.app, "/v1/chat/completions", &body(Value::Null, false)).await;
    let text = free.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() >= 6, "the reply is too short to cut: {text:?}");
    let stop: String = chars[3..5].iter().collect();
    let want = &text[..text.find(&stop).unwrap()];
    for stop_field in [json!(stop), json!(["never appears", stop])] {
        let r = post(&s.app, "/v1/chat/completions", &body(stop_field.clone(), false)).await;
        let v = r.json();
        assert_eq!(v["choices"][0]["message"]["content"], want, "{stop_field}: {v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        let chunks = chunks(&post(&s.app, "/v1/chat/completions", &body(stop_field, true)).await);
        let joined: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(joined, want, "streamed text must hold the stop string back");
        assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "stop");
    }
}

#[tokio::test]
async fn content_parts_and_unknown_fields_are_accepted() {
    let s = server(Opts::default());
    let plain = post(&s.app, "/v1/chat/completions", &chat_body("Hello there", 4, false)).await;
    let parts = json!({
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]}],
        "max_completion_tokens": 4,
        "temperature": 0,
        "frequency_penalty": 0,
        "logit_bias": {},
        "user": "someone",
        "stop": null,
        "n": 1,
    });
    let r = post(&s.app, "/v1/chat/completions", &parts).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"], plain.json()["choices"][0]["message"]);
    assert_eq!(
        r.json()["usage"]["prompt_tokens"],
        plain.json()["usage"]["prompt_tokens"]
    );
}

#[tokio::test]
async fn bad_requests_get_400_with_openai_errors() {
    let s = server(Opts::default());
    let chat = "/v1/chat/completions";
    let raw = |body: &'static str| request(Method::POST, chat, Body::from(body), None);

    let e = send(&s.app, raw("{\"messages\": ["))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(e["type"], "invalid_request_error");
    assert!(e["message"].as_str().unwrap().contains("not valid JSON"), "{e}");
    let e = send(&s.app, raw("[1, 2]")).await.error(StatusCode::BAD_REQUEST);
    assert!(e["message"].as_str().unwrap().contains("object"), "{e}");
    let e = send(&s.app, raw("")).await.error(StatusCode::BAD_REQUEST);
    assert!(e["message"].as_str().unwrap().contains("not valid JSON"), "{e}");

    let e = post(&s.app, chat, &json!({"model": "tiny-llama"}))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert!(e["message"].as_str().unwrap().contains("messages"), "{e}");
    let mut b = chat_body("hi", 4, false);
    b["temperature"] = json!("hot");
    let e = post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "temperature", "{e}");
    let mut b = chat_body("hi", 4, false);
    b["max_tokens"] = json!(-3);
    let e = post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "max_tokens", "{e}");
    let e = post(&s.app, chat, &chat_body("hi", 0, false))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert!(e["message"].as_str().unwrap().contains("max_tokens"), "{e}");
    let mut b = chat_body("hi", 4, false);
    b["messages"][0]["content"] = json!(42);
    let e = post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "messages[0].content", "{e}");
    let mut b = chat_body("hi", 4, false);
    b["messages"][0]["content"] = json!([{"type": "image_url", "image_url": {"url": "http://x"}}]);
    let e = post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
    assert!(e["message"].as_str().unwrap().contains("image_url"), "{e}");
    let mut b = chat_body("hi", 4, false);
    b["messages"] = json!([]);
    post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
    let mut b = chat_body("hi", 4, false);
    b["stop"] = json!([1, 2]);
    let e = post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "stop", "{e}");

    // Out of range: refused by the engine's validation, before anything is queued.
    let mut b = chat_body("hi", 4, false);
    b["temperature"] = json!(-1.0);
    let e = post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
    assert!(e["message"].as_str().unwrap().contains("temperature"), "{e}");
    let mut b = chat_body("hi", 4, false);
    b["top_p"] = json!(0);
    post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
    // 2^64 is finite as an f32, and still refused, naming the field.
    for field in ["temperature", "repetition_penalty"] {
        let mut b = chat_body("hi", 4, false);
        b[field] = json!(18446744073709551616u128 as f64);
        let e = post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], field, "{e}");
        assert!(e["message"].as_str().unwrap().contains(field), "{e}");
    }
    // OpenAI's penalties and logit_bias: their ranges, the bias's shape, ids in the vocabulary.
    for (field, value) in [
        ("presence_penalty", json!(2.5)),
        ("frequency_penalty", json!(-3)),
        ("logit_bias", json!([1, 2])),
        ("logit_bias", json!({"hello": 1})),
        ("logit_bias", json!({"5": "up"})),
        ("logit_bias", json!({"5": 101})),
        ("logit_bias", json!({"4000000000": 1})),
    ] {
        let mut b = chat_body("hi", 4, false);
        b[field] = value;
        let e = post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], field, "{b}: {e}");
    }
    // Roles must be OpenAI's; a user, system or tool message needs its content.
    let mut b = chat_body("hi", 4, false);
    b["messages"] = json!([{"role": "bogus", "content": "x"}]);
    let e = post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "messages[0].role", "{e}");
    for m in [json!({"role": "user"}), json!({"role": "user", "content": null})] {
        let mut b = chat_body("hi", 4, false);
        b["messages"] = json!([m]);
        let e = post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], "messages[0].content", "{e}");
    }

    for n in [json!(0), json!(129), json!(-1), json!("2")] {
        let mut b = chat_body("hi", 4, false);
        b["n"] = n.clone();
        let e = post(&s.app, chat, &b).await.error(StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], "n", "{n}: {e}");
    }

    let mut b = chat_body("hi", 4, false);
    b["model"] = json!("gpt-4o");
    let e = post(&s.app, chat, &b).await.error(StatusCode::NOT_FOUND);
    assert_eq!(e["code"], "model_not_found");
    assert!(e["message"].as_str().unwrap().contains("gpt-4o"), "{e}");
    let mut b = chat_body("hi", 4, false);
    b["model"] = json!("tiny.gguf");
    assert_eq!(
        post(&s.app, chat, &b).await.status,
        StatusCode::OK,
        "an alias is accepted"
    );

    let comp = "/v1/completions";
    let e = post(&s.app, comp, &json!({"prompt": ["a", 3]}))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "prompt[1]", "{e}");
    let e = post(&s.app, comp, &json!({"prompt": {"text": "a"}}))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "prompt", "{e}");
    let e = post(&s.app, comp, &json!({"prompt": [1, 2, 100000]}))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert!(e["message"].as_str().unwrap().contains("100000"), "{e}");
    post(&s.app, comp, &json!({"max_tokens": 3}))
        .await
        .error(StatusCode::BAD_REQUEST);

    let e = get(&s.app, "/v1/nothing").await.error(StatusCode::NOT_FOUND);
    assert!(e["message"].as_str().unwrap().contains("/v1/nothing"), "{e}");
    get(&s.app, chat).await.error(StatusCode::METHOD_NOT_ALLOWED);

    // Nothing above reached the engine.
    let stats = s.state.engine().stats();
    assert_eq!(stats.requests.failed, 0);
    assert_eq!(stats.waiting + stats.running, 0);
}

#[tokio::test]
async fn prompt_over_the_context_is_400_with_the_limits() {
    let s = server(Opts::default());
    let long = "lorem ipsum dolor sit amet ".repeat(200);
    let tokens = s
        .state
        .engine()
        .tokenize_chat(&[Message::user(long.clone())])
        .unwrap()
        .len();
    assert!(tokens > 512, "the prompt must not fit: {tokens} tokens");
    let e = post(&s.app, "/v1/chat/completions", &chat_body(&long, 4, false))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(e["code"], "context_length_exceeded");
    let m = e["message"].as_str().unwrap();
    assert!(m.contains("512") && m.contains(&tokens.to_string()), "{m}");
    let e = post(&s.app, "/v1/completions", &json!({"prompt": long, "stream": true}))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(
        e["code"], "context_length_exceeded",
        "a streamed request fails before the stream"
    );
}

#[tokio::test]
async fn body_over_the_limit_is_413() {
    let s = server(Opts {
        max_body_bytes: 1024,
        ..Default::default()
    });
    let big = chat_body(&"x".repeat(4096), 4, false);
    let e = post(&s.app, "/v1/chat/completions", &big)
        .await
        .error(StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(e["code"], "request_too_large");
    assert!(e["message"].as_str().unwrap().contains("1024"), "{e}");
    let small = post(&s.app, "/v1/chat/completions", &chat_body("hi", 2, false)).await;
    assert_eq!(small.status, StatusCode::OK, "{}", small.text());
}

#[tokio::test]
async fn full_queue_is_503_with_retry_after() {
    let s = server(Opts {
        max_queued: 0,
        ..Default::default()
    });
    for stream in [false, true] {
        let r = post(&s.app, "/v1/chat/completions", &chat_body("hi", 2, stream)).await;
        let e = r.error(StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e["code"], "overloaded");
        assert_eq!(r.headers[header::RETRY_AFTER], "1");
    }
    // Refusals are counted where operators look.
    let m = get(&s.app, "/metrics").await.text();
    assert!(m.contains("hearth_requests_rejected_total 2"), "{m}");
}

#[tokio::test]
async fn api_key_guards_v1_but_not_health_or_metrics() {
    let s = server(Opts {
        api_key: Some("sekret".into()),
        ..Default::default()
    });
    let models = |key: Option<&'static str>| request(Method::GET, "/v1/models", Body::empty(), key);
    for key in [None, Some("wrong"), Some("sekre"), Some("sekret2")] {
        let r = send(&s.app, models(key)).await;
        let e = r.error(StatusCode::UNAUTHORIZED);
        assert_eq!(e["code"], "invalid_api_key", "{key:?}");
        assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer");
    }
    let r = send(&s.app, models(Some("sekret"))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let chat = |key| {
        request(
            Method::POST,
            "/v1/chat/completions",
            Body::from(chat_body("hi", 2, false).to_string()),
            key,
        )
    };
    send(&s.app, chat(None)).await.error(StatusCode::UNAUTHORIZED);
    assert_eq!(send(&s.app, chat(Some("sekret"))).await.status, StatusCode::OK);
    // Anthropic's clients send the key as `x-api-key`.
    for (key, status) in [("sekret", StatusCode::OK), ("wrong", StatusCode::UNAUTHORIZED)] {
        let mut r = models(None);
        r.headers_mut().insert("x-api-key", key.parse().unwrap());
        assert_eq!(send(&s.app, r).await.status, status, "x-api-key {key}");
    }
    // The tokenizer routes show the model too.
    for route in ["/tokenize", "/detokenize"] {
        let body = || Body::from(json!({"content": "hi", "tokens": [1]}).to_string());
        send(&s.app, request(Method::POST, route, body(), None)).await.error(StatusCode::UNAUTHORIZED);
        let r = send(&s.app, request(Method::POST, route, body(), Some("sekret"))).await;
        assert_eq!(r.status, StatusCode::OK, "{route}: {}", r.text());
    }
    // So do Ollama's routes (refused in its error shape); its probe of `/` is open.
    for route in ["/api/tags", "/api/version"] {
        let r = send(&s.app, request(Method::GET, route, Body::empty(), None)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{route}");
        assert!(r.json()["error"].is_string(), "{route}: {}", r.text());
        assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer");
        let r = send(&s.app, request(Method::GET, route, Body::empty(), Some("sekret"))).await;
        assert_eq!(r.status, StatusCode::OK, "{route}: {}", r.text());
    }
    assert_eq!(get(&s.app, "/").await.status, StatusCode::OK);
    assert_eq!(get(&s.app, "/health").await.status, StatusCode::OK);
    assert_eq!(get(&s.app, "/metrics").await.status, StatusCode::OK);

    // No key configured: /v1 is open.
    let open = server(Opts::default());
    assert_eq!(get(&open.app, "/v1/models").await.status, StatusCode::OK);
}

#[tokio::test]
async fn metrics_expose_cache_requests_and_histograms() {
    let s = server(Opts::default());
    let r = post(&s.app, "/v1/chat/completions", &chat_body("Hello there", 4, false)).await;
    assert_eq!(r.status, StatusCode::OK);
    // Stats are published after the step that finished the request.
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.state.engine().stats().requests.finished < 1 {
        assert!(Instant::now() < deadline, "the finished request was never counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The tiny model's K/V in the default type on the CPU: 2 layers × K, V × 2 heads × 64 × f16.
    assert!(
        text_of_metrics(&s)
            .await
            .contains("hearth_kv_bytes_per_token{dtype=\"f16\"} 1024\n"),
        "K/V bytes per token"
    );
    let r = get(&s.app, "/metrics").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.headers[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let m = r.text();
    for needle in [
        "# TYPE hearth_prefix_cache_hit_tokens_total counter",
        "hearth_prefix_cache_hit_tokens_total{tier=\"device\"}",
        "hearth_prefix_cache_hit_tokens_total{tier=\"host\"}",
        "# TYPE hearth_prompt_tokens_total counter",
        "hearth_generation_tokens_total ",
        "# TYPE hearth_kv_blocks gauge",
        "hearth_kv_blocks{tier=\"device\",state=\"used\"}",
        "hearth_kv_blocks{tier=\"device\",state=\"cached\"}",
        "hearth_kv_blocks{tier=\"device\",state=\"free\"}",
        "hearth_kv_blocks{tier=\"host\",state=\"free\"} 0",
        "hearth_requests_total{outcome=\"finished\"} 1",
        "hearth_requests_total{outcome=\"cancelled\"} 0",
        "hearth_requests_waiting 0",
        "hearth_requests_running 0",
        "hearth_preemptions_total 0",
        "# TYPE hearth_time_to_first_token_seconds histogram",
        "hearth_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1",
        "hearth_time_to_first_token_seconds_sum ",
        "hearth_time_to_first_token_seconds_count 1",
        "# TYPE hearth_decode_tokens_per_second histogram",
        "hearth_decode_tokens_per_second_bucket{le=\"+Inf\"} 1",
        "hearth_model_info{model=\"tiny-llama\"",
    ] {
        assert!(m.contains(needle), "missing {needle:?} in:\n{m}");
    }
    // Every sample line is `name{labels} value` with a numeric value.
    for line in m.lines().filter(|l| !l.starts_with('#')) {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "bad sample line: {line}");
        assert!(line.starts_with("hearth_"), "{line}");
    }
    let prompt_line = m
        .lines()
        .find(|l| l.starts_with("hearth_prompt_tokens_total "))
        .unwrap();
    assert_ne!(prompt_line, "hearth_prompt_tokens_total 0");
}

#[tokio::test]
async fn the_same_system_prompt_is_served_from_the_cache() {
    let s = server(Opts::default());
    let system = "You are a careful assistant. Answer briefly and kindly, and never make things up. \
                  Think about the question before you answer it, and say so when you do not know."
        .repeat(2);
    let conversation = |question: &str| vec![Message::system(system.clone()), Message::user(question)];
    let body = |question: &str| {
        json!({
            "messages": conversation(question),
            "max_tokens": 2,
            "temperature": 0,
        })
    };
    let first = post(&s.app, "/v1/chat/completions", &body("What is a prefix cache?")).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    assert_eq!(first.json()["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

    let second = post(&s.app, "/v1/chat/completions", &body("Why is the sky blue?")).await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.text());
    let a = s
        .state
        .engine()
        .tokenize_chat(&conversation("What is a prefix cache?"))
        .unwrap();
    let b = s
        .state
        .engine()
        .tokenize_chat(&conversation("Why is the sky blue?"))
        .unwrap();
    let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let full_blocks = shared / BLOCK_SIZE * BLOCK_SIZE;
    assert!(
        full_blocks >= 4 * BLOCK_SIZE,
        "the system prompt is too short to test: {shared} tokens"
    );
    let usage = &second.json()["usage"];
    let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() as usize;
    assert!(
        cached >= full_blocks,
        "cached {cached} < the shared prompt's full blocks {full_blocks}: {usage}"
    );
    assert!(cached < b.len(), "{usage}");
    assert_eq!(usage["prompt_tokens"].as_u64().unwrap() as usize, b.len());
}

/// Waits until the server's one request has ended, and checks it was
/// cancelled (not run to its end) and holds no blocks.
async fn wait_until_cancelled(s: &TestServer, deadline: Instant) {
    wait_until_all_cancelled(s, 1, deadline).await
}

/// [`wait_until_cancelled`] for the server's `requests` engine requests.
async fn wait_until_all_cancelled(s: &TestServer, requests: u64, deadline: Instant) {
    loop {
        let st = s.state.engine().stats();
        if st.waiting + st.running == 0 && st.requests.cancelled + st.requests.finished == requests {
            assert_eq!(st.requests.cancelled, requests, "{:?}", st.requests);
            assert_eq!(st.cache.device.referenced_blocks, 0, "blocks still held");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the request was not cancelled: {:?}",
            st.requests
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Streams `body` from `uri`; once the first piece of the reply arrives, the client leaves;
/// waits until the engine has cancelled the request.
async fn leave_after_the_first_piece(s: &TestServer, uri: &str, body: &Value) {
    let response = s
        .app
        .clone()
        .oneshot(request(Method::POST, uri, Body::from(body.to_string()), None))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.into_body();
    let frame = stream.frame().await.unwrap().unwrap();
    assert!(frame.is_data());
    drop(stream);
    wait_until_cancelled(s, Instant::now() + Duration::from_secs(20)).await;
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_its_request() {
    let s = server(Opts::default());
    let body_json = json!({"prompt": "Tell me a long story", "max_tokens": 200, "temperature": 0, "stream": true});
    // Greedy, this prompt runs to max_tokens (checked below), far longer than
    // the drop takes: a finished request means the drop did not cancel it.
    leave_after_the_first_piece(&s, "/v1/completions", &body_json).await;
    let mut whole = body_json;
    whole["stream"] = json!(false);
    let r = post(&s.app, "/v1/completions", &whole).await;
    assert_eq!(
        r.json()["usage"]["completion_tokens"],
        200,
        "the uncancelled reply is long"
    );
}

/// The same for Ollama's streamed lines: a client that leaves after the first line cancels
/// the request.
#[tokio::test]
async fn an_ollama_client_that_goes_away_cancels_its_request() {
    let s = server(Opts::default());
    let body_json = json!({"prompt": "Tell me a long story", "raw": true, "options": {"num_predict": 200, "temperature": 0}});
    leave_after_the_first_piece(&s, "/api/generate", &body_json).await;
    let mut whole = body_json;
    whole["stream"] = json!(false);
    let r = post(&s.app, "/api/generate", &whole).await;
    assert_eq!(r.json()["eval_count"], 200, "the uncancelled reply is long");
}

#[tokio::test]
async fn serve_answers_on_a_socket_and_shuts_down_gracefully() {
    use hyper_util::rt::TokioIo;

    let s = server(Opts::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(hearth::server::serve(listener, s.state.clone(), async move {
        let _ = stop_rx.await;
    }));

    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let req = Request::builder()
        .uri("/health")
        .header(header::HOST, addr.to_string())
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), json!({"status": "ok"}));
    drop(sender);
    let _ = conn.await;

    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("serve did not stop")
        .unwrap()
        .unwrap();
}

/// `hearth --headless` end to end: it binds, logs its URL, answers, and exits
/// cleanly on SIGTERM, even with a client holding half a request open.
#[cfg(unix)]
#[tokio::test]
async fn headless_binary_serves_and_stops_on_sigterm() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    write_model(&TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0), &model).unwrap();
    let config = dir.path().join("empty-config.toml");
    std::fs::write(&config, "").unwrap();
    let hearth = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hearth"));
        c.arg("--config")
            .arg(&config)
            .arg("--offline")
            .env("HEARTH_DATA_DIR", dir.path().join("data"))
            .env("HF_HUB_OFFLINE", "1")
            .env("HF_HOME", dir.path().join("hf"))
            .env_remove("HEARTH_API_KEY")
            .env("RUST_LOG", "warn");
        c
    };

    let refused = hearth().args(["--headless", "run", "-p", "x"]).output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--headless"));

    let mut child = hearth()
        .args([
            "--headless",
            "--port",
            "0",
            "--device",
            "cpu",
            "--kv-pool-mib",
            "8",
            "--host-cache-gib",
            "0",
        ])
        .arg("--model")
        .arg(&model)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("http://").nth(1) {
                let _ = url_tx.send(rest.split('/').next().unwrap_or_default().to_string());
            }
        }
    });
    let addr = match url_rx.recv_timeout(Duration::from_secs(60)) {
        Ok(a) => a,
        Err(e) => {
            let _ = child.kill();
            panic!("no URL on stderr: {e}");
        }
    };

    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/completions")
        .header(header::HOST, &addr)
        .header(header::CONTENT_TYPE, "application/json")
        .body(http_body_util::Full::new(Bytes::from(
            json!({"prompt": "Hi", "max_tokens": 3, "temperature": 0}).to_string(),
        )))
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["object"], "text_completion", "{v}");
    drop(sender);
    let _ = conn.await;

    // A client that never finishes its request's headers does not hold the shutdown up past
    // the grace period.
    let mut half_open = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(
        &mut half_open,
        format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n").as_bytes(),
    )
    .unwrap();

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("hearth --headless did not stop on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    drop(half_open);
}

/// Serves `s` on a loopback socket, POSTs `body` to `path` over a plain TCP connection and waits
/// until the request reached the engine; returns the open socket, the server task and a
/// deadline 20 s out.
async fn submit_over_a_socket(
    s: &TestServer,
    path: &str,
    body: &Value,
) -> (
    std::net::TcpStream,
    tokio::task::JoinHandle<std::io::Result<()>>,
    Instant,
) {
    use std::io::Write;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(hearth::server::serve(listener, s.state.clone(), std::future::pending()));
    let body = body.to_string();
    let mut socket = std::net::TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).unwrap();
    socket.write_all(body.as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.state.engine().stats().requests.submitted == 0 {
        assert!(Instant::now() < deadline, "the request never reached the engine");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (socket, served, deadline)
}

/// A whole (non-streamed) reply is cancelled too when its client closes the
/// connection: hyper drops the handler's future, and the `RequestStream` in it.
#[tokio::test]
async fn closing_the_socket_cancels_a_whole_reply() {
    let s = server(Opts::default());
    let body = json!({"prompt": "Tell me a long story", "max_tokens": 200, "temperature": 0});
    let (socket, served, deadline) = submit_over_a_socket(&s, "/v1/completions", &body).await;
    drop(socket);
    // The same prompt runs to 200 tokens when nobody leaves (see above).
    wait_until_cancelled(&s, deadline).await;
    served.abort();
}

/// A chat request naming a conversation has its messages saved before the reply is generated:
/// a client that leaves mid-reply leaves its message saved (the reply, cancelled, is not).
#[tokio::test]
async fn conversation_id_saves_the_messages_before_the_reply() {
    let s = server(Opts {
        disk: true,
        ..Opts::default()
    });
    let data = s._dir.path().join("data");
    let mut b = chat_body("Tell me a long story", 200, false);
    b["conversation_id"] = json!("left-early");
    b["temperature"] = json!(0);
    let (socket, served, deadline) = submit_over_a_socket(&s, "/v1/chat/completions", &b).await;
    let file = data.join("conversations/left-early.json");
    let saved = |what: &str| -> Value {
        serde_json::from_slice(&std::fs::read(&file).unwrap_or_else(|e| panic!("{what}: {e}"))).unwrap()
    };
    let mid = saved("while generating");
    let msgs = mid["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "{mid}");
    assert_eq!(
        (&msgs[0]["role"], &msgs[0]["content"]),
        (&json!("user"), &json!("Tell me a long story"))
    );
    drop(socket);
    wait_until_cancelled(&s, deadline).await;
    s.state.engine().flush_disk();
    let after = saved("after the client left");
    assert_eq!(after["messages"], mid["messages"], "{after}");
    served.abort();
}

#[tokio::test]
async fn conversation_id_saves_the_turn_and_cannot_name_a_path() {
    let s = server(Opts {
        disk: true,
        ..Opts::default()
    });
    let data = s._dir.path().join("data");
    for bad in ["../../etc/passwd", "a/b", "", "x.json", "..", "caf\u{e9}"] {
        let mut body = chat_body("hi", 4, false);
        body["conversation_id"] = json!(bad);
        let r = post(&s.app, "/v1/chat/completions", &body).await;
        let e = r.error(StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], "conversation_id", "{bad:?}: {e}");
    }
    let mut body = chat_body("hi", 4, false);
    body["conversation_id"] = json!(5);
    post(&s.app, "/v1/chat/completions", &body)
        .await
        .error(StatusCode::BAD_REQUEST);
    let mut body = chat_body("hi", 4, false);
    body["conversation_id"] = json!("c1");
    body["messages"] = json!([{"role": "robot", "content": "x"}]);
    post(&s.app, "/v1/chat/completions", &body)
        .await
        .error(StatusCode::BAD_REQUEST);
    assert!(
        !data.join("conversations").exists(),
        "a refused request wrote something"
    );

    // A valid id: the turn is saved, text and cache file.
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(8);
    let mut body = chat_body(&long, 6, false);
    body["conversation_id"] = json!("chat-42");
    let r = post(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let reply = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    s.state.engine().flush_disk();
    let conv: Value = serde_json::from_slice(&std::fs::read(data.join("conversations/chat-42.json")).unwrap()).unwrap();
    let msgs = conv["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2, "{conv}");
    assert_eq!(msgs[0]["role"], "user");
    assert_eq!(msgs[0]["content"], long.as_str());
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(msgs[1]["content"], reply.as_str());
    assert!(data.join("cache/chat-42.hkv").exists());
    let metrics = get(&s.app, "/metrics").await.text();
    assert!(metrics.contains("hearth_disk_files_written_total 1\n"), "{metrics}");
    assert!(metrics.contains("hearth_disk_cache_files 1\n"), "{metrics}");
    // Only files named by the id, inside the data dir.
    let mut names: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["cache", "conversations"]);
}

#[tokio::test]
async fn conversation_routes_create_send_regenerate_edit_rename_and_delete() {
    let s = server(Opts {
        disk: true,
        ..Opts::default()
    });
    let send_json = |method: Method, uri: &str, body: Value| {
        let app = s.app.clone();
        let uri = uri.to_string();
        async move { send(&app, request(method, &uri, Body::from(body.to_string()), None)).await }
    };
    // Created untitled: "New chat" until the first message names it.
    let r = post(&s.app, "/v1/conversations", &json!({"system_prompt": "Be terse."})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let c = r.json();
    let id = c["id"].as_str().unwrap().to_string();
    assert_eq!(c["title"], hearth::engine::NEW_CHAT_TITLE);
    assert_eq!(c["settings"]["system_prompt"], "Be terse.");

    let reply_of = |r: &Reply| {
        r.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let turn = json!({"content": "Hello there\nsecond line", "max_tokens": 4, "temperature": 0});
    let r = post(&s.app, &format!("/v1/conversations/{id}/messages"), &turn).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let first = reply_of(&r);
    s.state.engine().flush_disk();
    let c = get(&s.app, &format!("/v1/conversations/{id}")).await.json();
    assert_eq!(c["title"], "Hello there");
    let msgs = c["messages"].as_array().unwrap();
    assert_eq!(
        (msgs.len(), msgs[1]["content"].as_str()),
        (2, Some(first.as_str())),
        "{c}"
    );

    // Regenerate: the same (greedy) reply replaces the last one.
    let r = post(
        &s.app,
        &format!("/v1/conversations/{id}/regenerate"),
        &json!({"max_tokens": 4, "temperature": 0}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(reply_of(&r), first);
    s.state.engine().flush_disk();
    let c = get(&s.app, &format!("/v1/conversations/{id}")).await.json();
    assert_eq!(c["messages"].as_array().unwrap().len(), 2, "{c}");

    // Edit: only a user message, never blank; refused edits change nothing.
    for (index, body) in [
        ("1", json!({"content": "x"})),
        ("0", json!({"content": "  "})),
        ("zz", json!({"content": "x"})),
    ] {
        let r = send_json(Method::PUT, &format!("/v1/conversations/{id}/messages/{index}"), body).await;
        r.error(StatusCode::BAD_REQUEST);
    }
    let r = send_json(
        Method::PUT,
        &format!("/v1/conversations/{id}/messages/0"),
        json!({"content": "Another question", "max_tokens": 3, "temperature": 0, "stream": true}),
    )
    .await;
    assert!(!chunks(&r).is_empty());
    s.state.engine().flush_disk();
    let c = get(&s.app, &format!("/v1/conversations/{id}")).await.json();
    let msgs = c["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2, "{c}");
    assert_eq!(msgs[0]["content"], "Another question");

    // Rename (blank refused), clear the system prompt, list, delete.
    let r = send_json(Method::PATCH, &format!("/v1/conversations/{id}"), json!({"title": " "})).await;
    r.error(StatusCode::BAD_REQUEST);
    let r = send_json(
        Method::PATCH,
        &format!("/v1/conversations/{id}"),
        json!({"title": "Renamed", "system_prompt": null}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["settings"]["system_prompt"], Value::Null);
    let list = get(&s.app, "/v1/conversations").await.json();
    assert_eq!(list["data"][0]["title"], "Renamed", "{list}");
    let r = send_json(Method::DELETE, &format!("/v1/conversations/{id}"), json!({})).await;
    assert_eq!(r.json()["deleted"], true, "{}", r.text());
    get(&s.app, &format!("/v1/conversations/{id}"))
        .await
        .error(StatusCode::NOT_FOUND);
    post(&s.app, "/v1/conversations/nope/messages", &json!({"content": "x"}))
        .await
        .error(StatusCode::NOT_FOUND);
    get(&s.app, "/v1/conversations/a.b")
        .await
        .error(StatusCode::BAD_REQUEST);

    // Without a disk tier the routes say so.
    let plain = server(Opts::default());
    get(&plain.app, "/v1/conversations")
        .await
        .error(StatusCode::BAD_REQUEST);
}

async fn text_of_metrics(s: &TestServer) -> String {
    get(&s.app, "/metrics").await.text()
}

/// A full disk: the turn is answered, the reply says the conversation is not saved, the text is
/// kept in memory (readable through the API, listed as unsaved) and written once space returns.
#[tokio::test]
async fn a_full_disk_marks_the_reply_unsaved_and_writes_it_once_space_returns() {
    use std::sync::atomic::Ordering;

    let (full, faults) = common::full_disk(true);
    let s = server(Opts {
        disk: true,
        faults,
        ..Opts::default()
    });
    let file = s._dir.path().join("data/conversations/full-disk.json");
    let mut b = chat_body("Hello there", 4, false);
    b["conversation_id"] = json!("full-disk");
    let r = post(&s.app, "/v1/chat/completions", &b).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.headers["x-hearth-conversation-saved"], "false");
    let why = r.headers["x-hearth-save-error"].to_str().unwrap().to_string();
    assert!(why.contains("No space left"), "{why}");
    let reply = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    s.state.engine().flush_disk();
    assert!(!file.exists(), "nothing could be written");
    let unsaved = s.state.engine().stats().disk.unwrap().unsaved;
    assert_eq!(unsaved.len(), 1, "{unsaved:?}");
    assert_eq!(unsaved[0].id.as_str(), "full-disk");
    // Kept in memory: the API reads the whole turn back.
    let got = get(&s.app, "/v1/conversations/full-disk").await.json();
    let texts: Vec<&str> = got["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Hello there", reply.as_str()], "{got}");
    // Space returns: the background writer writes it within its retry period.
    full.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() || !s.state.engine().stats().disk.unwrap().unsaved.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the kept conversation was never written: {:?}",
            s.state.engine().stats().disk
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["messages"], got["messages"], "{saved}");
    // A saved turn carries no "not saved" mark.
    let mut b = chat_body("Again", 2, false);
    b["conversation_id"] = json!("full-disk");
    let r = post(&s.app, "/v1/chat/completions", &b).await;
    assert!(!r.headers.contains_key("x-hearth-conversation-saved"));
}

/// Slow clients: a connection that never finishes its headers is closed by the server, a body
/// that stops gets a 408, and past the connection cap a client gets a 503 in our JSON while
/// the server keeps serving once connections end.
#[tokio::test]
async fn slow_headers_and_bodies_time_out_and_the_connection_cap_answers_503() {
    use std::io::{Read, Write};

    let s = server(Opts {
        limits: ConnectionLimits {
            max_connections: 3,
            header_timeout: Duration::from_millis(500),
            body_timeout: Duration::from_millis(500),
        },
        ..Opts::default()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(hearth::server::serve(listener, s.state.clone(), std::future::pending()));
    let read_all = |mut c: std::net::TcpStream| {
        tokio::task::spawn_blocking(move || {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut out = Vec::new();
            let _ = c.read_to_end(&mut out);
            String::from_utf8_lossy(&out).into_owned()
        })
    };
    // Headers that never end: closed by the server (read_to_end sees EOF, not our timeout).
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").unwrap();
    let t = Instant::now();
    read_all(slow).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "closed after {:?}", t.elapsed());
    // A body that stops: 408 with our JSON error.
    let mut stalled = std::net::TcpStream::connect(addr).unwrap();
    stalled
        .write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pr")
        .unwrap();
    let answer = read_all(stalled).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"request_timeout\""), "{answer}");
    // Three connections held open fill the cap; the fourth is told so, in JSON.
    let held: Vec<_> = (0..3).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let extra = std::net::TcpStream::connect(addr).unwrap();
    let answer = read_all(extra).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too many connections"), "{answer}");
    // Once they end (closed, or timed out by the server), /health answers again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let answer = read_all(c).await.unwrap();
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "the server never served again: {answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    served.abort();
}

/// Any JSON value in any field of a chat or completions body (issue 19's property): never a
/// 5xx, never a panic, and once everything is answered no K/V block is still referenced.
#[test]
fn arbitrary_json_in_any_field_is_never_a_server_error() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop_oneof![
            Just(-1.0f64),
            Just(0.0),
            Just(0.5),
            Just(1e308),
            Just(1.8446744073709552e19)
        ]
        .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::from),
        prop_oneof![
            Just("user"),
            Just("assistant"),
            Just("system"),
            Just("tool"),
            Just("auto")
        ]
        .prop_map(Value::from),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("role".to_string()),
                    Just("content".to_string()),
                    Just("type".to_string()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    const FIELDS: &[&str] = &[
        "model",
        "messages",
        "prompt",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "n",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "echo",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "conversation_id",
        "messages.0",
        "messages.0.role",
        "messages.0.content",
        "messages.0.content.0",
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let s = server(Opts {
        max_queued: 64,
        disk: true,
        ..Opts::default()
    });
    let mut runner = TestRunner::new(Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(0..FIELDS.len(), value, any::<bool>()), |(f, v, chat)| {
            let mut body = if chat {
                chat_body("hi", 3, false)
            } else {
                json!({"model": "tiny-llama", "prompt": "hi", "max_tokens": 3})
            };
            // A large `max_tokens` is valid: keep replies short so the run stays quick.
            let field = FIELDS[f];
            let v = if field.contains("max") && v.as_u64().is_some_and(|n| n > 8) {
                json!(8)
            } else {
                v
            };
            match field.split_once('.') {
                None => body[field] = v,
                Some((_, rest)) => {
                    let mut at = &mut body["messages"];
                    for part in rest.split('.') {
                        at = match part.parse::<usize>() {
                            Ok(i) => {
                                if !at.is_array() {
                                    *at = json!([]);
                                }
                                let list = at.as_array_mut().unwrap();
                                while list.len() <= i {
                                    list.push(Value::Null);
                                }
                                &mut list[i]
                            }
                            Err(_) => {
                                if !at.is_object() {
                                    *at = json!({});
                                }
                                &mut at[part]
                            }
                        };
                    }
                    *at = v;
                }
            }
            let path = if chat {
                "/v1/chat/completions"
            } else {
                "/v1/completions"
            };
            let r = rt.block_on(post(&s.app, path, &body));
            prop_assert!(r.status.as_u16() < 500, "{field} in {body}: {} {}", r.status, r.text());
            if r.status != StatusCode::OK {
                prop_assert!(r.json()["error"]["message"].is_string(), "{body}: {}", r.text());
            }
            Ok(())
        })
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = s.state.engine().stats();
        if st.waiting + st.running == 0 && st.cache.device.referenced_blocks == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "blocks still referenced: {:?}",
            st.cache.device
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A long URL or too many headers: 414 / 431 in our JSON, as every other 4xx.
#[tokio::test]
async fn long_urls_and_many_headers_get_json_errors() {
    let s = server(Opts::default());
    let long = format!("/v1/models/{}", "x".repeat(10_000));
    let r = get(&s.app, &long).await;
    assert_eq!(r.status, StatusCode::URI_TOO_LONG, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "uri_too_long");
    let mut req = request(Method::GET, "/health", Body::empty(), None);
    for i in 0..150 {
        req.headers_mut().insert(
            axum::http::HeaderName::try_from(format!("x-h{i}")).unwrap(),
            axum::http::HeaderValue::from_static("1"),
        );
    }
    let r = send(&s.app, req).await;
    assert_eq!(r.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "headers_too_large");
    let mut req = request(Method::GET, "/health", Body::empty(), None);
    req.headers_mut()
        .insert("x-big", axum::http::HeaderValue::from_str(&"y".repeat(70_000)).unwrap());
    let r = send(&s.app, req).await;
    assert_eq!(r.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "{}", r.text());
    assert_eq!(get(&s.app, "/health").await.status, StatusCode::OK);
}

/// Token `id`'s log-probability under `logits`, in f64.
/// `presence_penalty`, `frequency_penalty` and `logit_bias` reach the sampler: the reply is the
/// engine's with the same settings, a +100 bias makes every token the biased one, a -100 bias
/// keeps the greedy first token out, and the penalties change a reply that repeats itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn penalties_and_logit_bias_steer_the_reply() {
    // Long enough that the tiny model repeats a token.
    const N: usize = 40;
    let s = server(Opts::default());
    let engine = s.state.engine();
    let tok = &engine.model().tokenizer;
    let prompt = engine.tokenize_chat(&[Message::user("Hello")]).unwrap();
    let ask = |extra: Value| {
        let mut b = chat_body("Hello", N, false);
        b["ignore_eos"] = json!(true);
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let reply = |r: Reply| r.json()["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    let in_engine = |sampling: SamplingParams| {
        common::run_in_engine(
            engine,
            prompt.clone(),
            GenerateParams {
                ignore_eos: true,
                sampling,
                ..GenerateParams::greedy(N)
            },
        )
    };
    let free = in_engine(SamplingParams::greedy()).await;
    assert_eq!(reply(post(&s.app, "/v1/chat/completions", &ask(json!({}))).await), free.text);
    let mut seen = free.tokens.clone();
    seen.sort_unstable();
    seen.dedup();
    assert!(seen.len() < free.tokens.len(), "the tiny model repeats itself: {free:?}");

    // +100 on a token the reply never chose: every token is that one.
    let word = tok.encode(" the", false).unwrap()[0];
    assert!(!free.tokens.contains(&word));
    let biased = reply(post(&s.app, "/v1/chat/completions", &ask(json!({"logit_bias": {word.to_string(): 100}}))).await);
    assert_eq!(biased, tok.decode(&[word; N]).unwrap());
    // -100 on the greedy first token: another comes first.
    let first = free.tokens[0];
    let banned = reply(post(&s.app, "/v1/chat/completions", &ask(json!({"logit_bias": {first.to_string(): -100}}))).await);
    let expect = in_engine(SamplingParams {
        logit_bias: vec![(first, -100.0)],
        ..SamplingParams::greedy()
    })
    .await;
    assert_ne!(expect.tokens[0], first);
    assert_eq!(banned, expect.text);

    for (field, penalty) in [("presence_penalty", 2.0), ("frequency_penalty", 1.5)] {
        let got = reply(post(&s.app, "/v1/chat/completions", &ask(json!({field: penalty}))).await);
        let mut sampling = SamplingParams::greedy();
        if field == "presence_penalty" {
            sampling.presence_penalty = penalty;
        } else {
            sampling.frequency_penalty = penalty;
        }
        let expect = in_engine(sampling).await;
        assert_eq!(got, expect.text, "{field}");
        assert_ne!(expect.tokens, free.tokens, "{field} changes a reply that repeats itself");
    }
}

/// `/tokenize` and `/detokenize` answer llama.cpp's and vLLM's shapes with the engine's own
/// ids: llama.cpp's `content` without BOS by default, vLLM's `prompt` with it, chat `messages`
/// as the chat route renders them, `with_pieces`; the ids decode back; bad input is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_and_detokenize_answer_llama_cpp_and_vllm_shapes() {
    let s = server(Opts::default());
    let engine = s.state.engine();
    let text = "Hello world, 123";
    let bare = engine.tokenize_text(text, false).unwrap();
    let as_prompt = engine.tokenize(text).unwrap();
    let r = post(&s.app, "/tokenize", &json!({"content": text})).await.json();
    assert_eq!(r["tokens"], json!(bare), "{r}");
    assert_eq!(r["count"], bare.len());
    assert_eq!(r["max_model_len"], engine.model_info().context_length);
    let r = post(&s.app, "/tokenize", &json!({"prompt": text})).await.json();
    assert_eq!(r["tokens"], json!(as_prompt), "{r}");
    let r = post(&s.app, "/tokenize", &json!({"content": text, "add_special": true})).await.json();
    assert_eq!(r["tokens"], json!(as_prompt), "{r}");
    let chat = engine.tokenize_chat(&[Message::user("Hi")]).unwrap();
    let r = post(&s.app, "/tokenize", &json!({"messages": [{"role": "user", "content": "Hi"}]})).await.json();
    assert_eq!(r["tokens"], json!(chat), "{r}");
    let usage = post(&s.app, "/v1/chat/completions", &chat_body("Hi", 1, false)).await.json()["usage"].clone();
    assert_eq!(r["count"], usage["prompt_tokens"], "the chat route's prompt");
    let r = post(&s.app, "/tokenize", &json!({"content": text, "with_pieces": true})).await.json();
    let pieces: Vec<&Value> = r["tokens"].as_array().unwrap().iter().collect();
    assert_eq!(pieces.iter().map(|p| p["id"].as_u64().unwrap() as u32).collect::<Vec<_>>(), bare);
    assert_eq!(pieces.iter().map(|p| p["piece"].as_str().unwrap()).collect::<String>(), text);

    let r = post(&s.app, "/detokenize", &json!({"tokens": bare})).await.json();
    assert_eq!((r["content"].as_str(), r["prompt"].as_str()), (Some(text), Some(text)), "{r}");

    let e = post(&s.app, "/detokenize", &json!({"tokens": [1, 4_000_000_000u32]})).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "tokens", "{e}");
    assert!(e["message"].as_str().unwrap().contains("4000000000"), "{e}");
    let e = post(&s.app, "/detokenize", &json!({"tokens": "12"})).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "tokens", "{e}");
    for body in [json!({}), json!({"content": "a", "prompt": "b"})] {
        post(&s.app, "/tokenize", &body).await.error(StatusCode::BAD_REQUEST);
    }
    let e = post(&s.app, "/tokenize", &json!({"content": 5})).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "content", "{e}");
    let e = post(&s.app, "/tokenize", &json!({"messages": [{"role": "robot", "content": "x"}]})).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "messages[0].role", "{e}");
}

fn log_softmax_at(logits: &[f32], id: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z = max + logits.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln();
    logits[id as usize] as f64 - z
}

/// The completions' `echo` with `logprobs` (lm-evaluation-harness's log-likelihood requests):
/// the prompt's own token log-probabilities, each the model's for that token after the ones
/// before it; `max_tokens: 0` generates nothing; streamed, the prompt comes first. Scoring
/// never reads the prefix cache but fills it.
#[tokio::test]
async fn echo_scores_the_prompt_as_the_model_does() {
    let s = server(Opts::default());
    let prompt: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % 200 + 1).collect();
    let body = json!({"prompt": prompt, "max_tokens": 0, "echo": true, "logprobs": 2, "temperature": 0});
    let r = post(&s.app, "/v1/completions", &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v = r.json();
    let lp = &v["choices"][0]["logprobs"];
    let token_lps = lp["token_logprobs"].as_array().unwrap();
    assert_eq!(token_lps.len(), prompt.len(), "{lp}");
    assert!(token_lps[0].is_null() && lp["top_logprobs"][0].is_null(), "{lp}");
    assert_eq!(v["usage"]["completion_tokens"], 0, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let decoded = s.state.engine().model().tokenizer.decode(&prompt).unwrap();
    assert_eq!(v["choices"][0]["text"], decoded.as_str());
    // Each against the engine's logits for the prompt cut just before that token.
    for k in [1, 2, 17, 39] {
        let params = GenerateParams {
            keep_logits: true,
            ..GenerateParams::greedy(1)
        };
        let report = common::run_in_engine(s.state.engine(), prompt[..k].to_vec(), params).await;
        let want = log_softmax_at(&report.logits[0], prompt[k]);
        let got = token_lps[k].as_f64().unwrap();
        assert!((got - want).abs() < 1e-4, "token {k}: {got} vs {want}");
        assert!(lp["top_logprobs"][k].as_object().unwrap().len() <= 2);
    }
    // The same request again reads no cache (it needs every position's logits) ...
    let again = post(&s.app, "/v1/completions", &body).await.json();
    assert_eq!(again["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{again}");
    assert_eq!(again["choices"][0]["logprobs"], *lp, "the same scores");
    // ... but it filled the cache for everyone else.
    let plain = json!({"prompt": prompt, "max_tokens": 1, "temperature": 0});
    let hit = post(&s.app, "/v1/completions", &plain).await.json();
    assert_eq!(hit["usage"]["prompt_tokens_details"]["cached_tokens"], 32, "{hit}");

    // Streamed with a reply: the prompt (and its scores) first, then the reply's tokens.
    let streamed = json!({"prompt": prompt, "max_tokens": 3, "echo": true, "logprobs": 0, "temperature": 0,
        "ignore_eos": true, "stream": true});
    let r = post(&s.app, "/v1/completions", &streamed).await;
    let chunks = chunks(&r);
    assert_eq!(chunks[0]["choices"][0]["text"], decoded.as_str(), "{chunks:?}");
    let first = &chunks[0]["choices"][0]["logprobs"];
    assert_eq!(first["token_logprobs"].as_array().unwrap().len(), prompt.len());
    assert_eq!(first["token_logprobs"][17], token_lps[17]);
    let generated: usize = chunks[1..]
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["tokens"].as_array())
        .map(Vec::len)
        .sum();
    assert_eq!(generated, 3, "{chunks:?}");
    // Without echo, max_tokens 0 is still refused.
    let zero = json!({"prompt": prompt, "max_tokens": 0});
    post(&s.app, "/v1/completions", &zero).await.error(StatusCode::BAD_REQUEST);
}

/// `logprobs` on both routes, whole and streamed: the top entry is the greedy token, the values
/// are the log-softmax of the engine's own logits for the same prompt, and a stream carries
/// the same entries as the whole reply.
#[tokio::test]
async fn logprobs_are_the_models_and_streamed_as_whole() {
    let s = server(Opts::default());
    // Completions over token ids, against the engine's logits for the same prompt.
    let prompt: Vec<u32> = vec![5, 9, 2, 7, 11, 3];
    let body = json!({"prompt": prompt, "max_tokens": 5, "temperature": 0, "logprobs": 3, "ignore_eos": true});
    let r = post(&s.app, "/v1/completions", &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let lp = r.json()["choices"][0]["logprobs"].clone();
    let params = GenerateParams {
        keep_logits: true,
        ignore_eos: true,
        ..GenerateParams::greedy(5)
    };
    let report = common::run_in_engine(s.state.engine(), prompt.clone(), params).await;
    let token_lps = lp["token_logprobs"].as_array().unwrap();
    assert_eq!(token_lps.len(), report.tokens.len(), "{lp}");
    for (step, (logits, &id)) in report.logits.iter().zip(&report.tokens).enumerate() {
        let want = log_softmax_at(logits, id);
        let got = token_lps[step].as_f64().unwrap();
        assert!((got - want).abs() < 1e-4, "step {step}: {got} vs {want}");
        let top = lp["top_logprobs"][step].as_object().unwrap();
        assert!(top.len() <= 3 && !top.is_empty(), "{top:?}");
        let best = top
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::NEG_INFINITY, f64::max);
        assert!(
            (best - got).abs() < 1e-6,
            "the greedy token is the most likely: {top:?} vs {got}"
        );
    }
    assert_eq!(lp["tokens"].as_array().unwrap().len(), report.tokens.len());
    // Chat, whole and streamed.
    let mut b = chat_body("Hello", 6, false);
    b["logprobs"] = json!(true);
    b["top_logprobs"] = json!(4);
    b["ignore_eos"] = json!(true);
    let whole = post(&s.app, "/v1/chat/completions", &b).await.json();
    let content = whole["choices"][0]["logprobs"]["content"].as_array().unwrap().clone();
    assert_eq!(content.len(), 6, "{whole}");
    for c in &content {
        let top = c["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 4);
        assert_eq!(top[0]["token"], c["token"], "greedy: {c}");
        assert_eq!(top[0]["logprob"], c["logprob"]);
        let lps: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(lps.windows(2).all(|w| w[0] >= w[1]) && lps[0] <= 0.0, "{lps:?}");
        let bytes: Vec<u8> = c["bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(String::from_utf8_lossy(&bytes), c["token"].as_str().unwrap());
    }
    b["stream"] = json!(true);
    let streamed = post(&s.app, "/v1/chat/completions", &b).await;
    let from_chunks: Vec<Value> = chunks(&streamed)
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(from_chunks, content);
    // Out of range, or top_logprobs without logprobs: 400 naming the field.
    let mut bad = chat_body("Hello", 2, false);
    bad["logprobs"] = json!(true);
    bad["top_logprobs"] = json!(21);
    assert_eq!(
        post(&s.app, "/v1/chat/completions", &bad)
            .await
            .error(StatusCode::BAD_REQUEST)["param"],
        "top_logprobs"
    );
    bad["logprobs"] = json!(false);
    bad["top_logprobs"] = json!(2);
    assert_eq!(
        post(&s.app, "/v1/chat/completions", &bad)
            .await
            .error(StatusCode::BAD_REQUEST)["param"],
        "top_logprobs"
    );
    let bad = json!({"prompt": "hi", "max_tokens": 2, "logprobs": 21});
    assert_eq!(
        post(&s.app, "/v1/completions", &bad)
            .await
            .error(StatusCode::BAD_REQUEST)["param"],
        "logprobs"
    );
}

fn embeddings_server() -> TestServer {
    server(Opts {
        model: Some(TinyModelSpec::embedding(3, WeightType::Q8_0)),
        ..Opts::default()
    })
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

/// `/v1/embeddings` on an embedding model (last-token pooling): one vector per input at unit
/// length, in order, a text input equal to its token ids with BOS and EOS as the file says,
/// `dimensions` the first values renormalized, `base64` the same floats, the same input the
/// same vector from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_are_unit_vectors_in_order() {
    let s = embeddings_server();
    let width = TinyModelSpec::embedding(3, WeightType::Q8_0).hidden;
    let r = post(&s.app, "/v1/embeddings", &json!({"model": "tiny-llama", "input": ["the cat sat", "hello world", "the cat sat"]})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "tiny-llama");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    let vectors: Vec<Vec<f32>> = data.iter().map(|d| floats(&d["embedding"])).collect();
    for (i, (d, e)) in data.iter().zip(&vectors).enumerate() {
        assert_eq!(d["index"], i);
        assert_eq!(d["object"], "embedding");
        assert_eq!(e.len(), width);
        assert!((norm(e) - 1.0).abs() < 1e-4, "input {i}: |v| = {}", norm(e));
    }
    assert_ne!(vectors[0], vectors[1]);
    let same = vectors[0].iter().zip(&vectors[2]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(same < 1e-3, "the same input twice: max |diff| {same}");

    // The text's ids: BOS, the text, EOS (the file's add_eos_token).
    let ids = s.state.engine().tokenize_for_embedding("hello world").unwrap();
    let tok = &s.state.engine().model().tokenizer;
    assert_eq!(ids.first().copied(), tok.bos_id().filter(|_| tok.add_bos()).or(ids.first().copied()));
    assert_eq!(ids.last().copied(), tok.eos_id());
    let usage = &v["usage"];
    assert_eq!(usage["prompt_tokens"], usage["total_tokens"]);
    let by_ids = post(&s.app, "/v1/embeddings", &json!({"input": [ids.clone()]})).await;
    assert_eq!(by_ids.status, StatusCode::OK, "{}", by_ids.text());
    assert_eq!(by_ids.json()["usage"]["prompt_tokens"], ids.len());
    let e = floats(&by_ids.json()["data"][0]["embedding"]);
    let d = e.iter().zip(&vectors[1]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(d < 1e-3, "ids and text: max |diff| {d}");

    // dimensions: the first values, renormalized.
    let short = post(&s.app, "/v1/embeddings", &json!({"input": "hello world", "dimensions": 8})).await;
    let short = floats(&short.json()["data"][0]["embedding"]);
    assert_eq!(short.len(), 8);
    assert!((norm(&short) - 1.0).abs() < 1e-4);
    let scale = norm(&vectors[1][..8]);
    for (a, b) in short.iter().zip(&vectors[1][..8]) {
        assert!((a - b / scale).abs() < 1e-3, "{a} vs {}", b / scale);
    }

    // base64: the little-endian f32 bytes of the same vector.
    let b64 = post(&s.app, "/v1/embeddings", &json!({"input": "hello world", "encoding_format": "base64"})).await;
    let text = b64.json()["data"][0]["embedding"].as_str().unwrap().to_string();
    let bytes = decode_base64(&text);
    let decoded: Vec<f32> = bytes.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let d = decoded.iter().zip(&vectors[1]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(d < 1e-3, "base64: max |diff| {d}");
}

/// The encoders over HTTP (a tiny BERT file, one as XLM-RoBERTa's with its Unigram vocabulary,
/// one as nomic-embed-text-v2-moe's with its experts, one as EmbeddingGemma's): `/v1/embeddings` and Ollama's `/api/embed` give the same unit
/// vectors, their texts read between BOS and EOS (`[CLS] … [SEP]`, `<s> … </s>`); `/api/show`
/// says each embeds; a chat or completion request is a 400 that says the model serves
/// embeddings only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encoder_serves_embeddings_and_refuses_text() {
    for spec in [
        TinyModelSpec::encoder("bert", 1, WeightType::Q8_0),
        TinyModelSpec::encoder_xlmr(2, WeightType::Q8_0),
        TinyModelSpec::encoder_nomic_moe(1, WeightType::Q8_0),
        TinyModelSpec::gemma_embedding(WeightType::Q8_0),
    ] {
        let arch = spec.arch.unwrap_or_default();
        let s = server(Opts {
            model: Some(spec.clone()),
            ..Opts::default()
        });
        let texts = ["the cat sat on the mat", "Hello, World!"];
        let r = post(&s.app, "/v1/embeddings", &json!({"input": texts})).await;
        assert_eq!(r.status, StatusCode::OK, "{arch}: {}", r.text());
        let openai: Vec<Vec<f32>> = r.json()["data"].as_array().unwrap().iter().map(|d| floats(&d["embedding"])).collect();
        for v in &openai {
            assert_eq!(v.len(), spec.hidden);
            assert!((norm(v) - 1.0).abs() < 1e-4);
        }
        let ids = s.state.engine().tokenize_for_embedding(texts[1]).unwrap();
        let tok = &s.state.engine().model().tokenizer;
        assert_eq!((ids.first().copied(), ids.last().copied()), (tok.bos_id(), tok.eos_id()), "{arch}: BOS … EOS");
        let ollama = post(&s.app, "/api/embed", &json!({"model": "tiny-llama", "input": texts})).await;
        assert_eq!(ollama.status, StatusCode::OK, "{arch}: {}", ollama.text());
        for (o, e) in ollama.json()["embeddings"].as_array().unwrap().iter().zip(&openai) {
            let d = floats(o).iter().zip(e).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(d < 1e-4, "{arch}: /api/embed and /v1/embeddings: max |diff| {d}");
        }
        let show = post(&s.app, "/api/show", &json!({"model": "tiny-llama"})).await.json();
        assert_eq!(show["capabilities"], json!(["embedding"]), "{arch}");
        for (route, body) in [
            ("/v1/completions", json!({"prompt": "the cat", "max_tokens": 4})),
            ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})),
        ] {
            let r = post(&s.app, route, &body).await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{arch} {route}: {}", r.text());
            assert!(r.text().contains("embeddings only"), "{arch} {route}: {}", r.text());
        }
    }
}

/// EmbeddingGemma over HTTP gives llama.cpp's unit vectors (`tests/data/llama-cpp-embeddings.json`,
/// `llama-server --embeddings` on the same f32 file): its window and its projections after the
/// pooling on the server's path too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedding_gemma_over_http_matches_llama_cpp() {
    let s = server(Opts {
        model: Some(TinyModelSpec::gemma_embedding(WeightType::F32)),
        ..Opts::default()
    });
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/llama-cpp-embeddings.json");
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let want = data["models"]["tiny-gemma-embed-f32.gguf"]["embeddings"].as_array().unwrap();
    let r = post(&s.app, "/v1/embeddings", &json!({"input": data["inputs"]})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let got = r.json()["data"].as_array().unwrap().clone();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = floats(&g["embedding"]).iter().zip(floats(w)).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(d < 1e-4, "input {i}: max |diff| {d}");
    }
}

/// Ollama's `/api/embed` gives `/v1/embeddings`' unit vectors (`dimensions` too), cutting an
/// input over the context unless `truncate` is false; the older `/api/embeddings` gives the
/// same vector before it is normalized, as Ollama does; errors are Ollama's `{"error"}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_embed_gives_the_same_vectors() {
    let s = embeddings_server();
    let openai = post(&s.app, "/v1/embeddings", &json!({"input": ["the cat sat", "hello world"]})).await.json();
    let r = post(&s.app, "/api/embed", &json!({"model": "tiny-llama:latest", "input": ["the cat sat", "hello world"]})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v = r.json();
    assert_eq!(v["model"], "tiny-llama:latest");
    assert_eq!(v["prompt_eval_count"], openai["usage"]["prompt_tokens"]);
    let max_diff = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    for i in 0..2 {
        let ours = floats(&v["embeddings"][i]);
        let theirs = floats(&openai["data"][i]["embedding"]);
        assert_eq!(ours.len(), theirs.len());
        assert!(max_diff(&ours, &theirs) < 1e-3, "input {i}");
    }
    let one = post(&s.app, "/api/embed", &json!({"input": "hello world", "dimensions": 8})).await.json();
    let short = floats(&one["embeddings"][0]);
    assert_eq!(short.len(), 8);
    assert!((norm(&short) - 1.0).abs() < 1e-4);

    // The older route: the pooled vector, not normalized.
    let legacy = post(&s.app, "/api/embeddings", &json!({"model": "tiny-llama", "prompt": "hello world"})).await;
    assert_eq!(legacy.status, StatusCode::OK, "{}", legacy.text());
    let raw = floats(&legacy.json()["embedding"]);
    assert!((norm(&raw) - 1.0).abs() > 1e-3, "|v| = {}", norm(&raw));
    let unit: Vec<f32> = raw.iter().map(|x| x / norm(&raw)).collect();
    assert!(max_diff(&unit, &floats(&openai["data"][1]["embedding"])) < 1e-3);
    let empty = post(&s.app, "/api/embeddings", &json!({"prompt": ""})).await.json();
    assert_eq!(empty["embedding"], json!([]));

    // Over the context: cut to fit by default, refused with truncate false.
    let context = s.state.engine().model_info().context_length;
    let long = "word ".repeat(context + 10);
    let cut = post(&s.app, "/api/embed", &json!({"input": long})).await;
    assert_eq!(cut.status, StatusCode::OK, "{}", cut.text());
    assert_eq!(cut.json()["prompt_eval_count"], context - 1);
    let refused = post(&s.app, "/api/embed", &json!({"input": long, "truncate": false})).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text());
    assert!(refused.json()["error"].as_str().unwrap().contains("input[0]"), "{}", refused.text());
    for body in [json!({"input": 5}), json!({"input": ["a", 5]}), json!({"input": "a", "dimensions": 0})] {
        let r = post(&s.app, "/api/embed", &body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.text());
        assert!(r.json()["error"].is_string(), "{}", r.text());
    }

    // A chat model is no embedding model.
    let chat = server(Opts::default());
    let r = post(&chat.app, "/api/embed", &json!({"input": "hi"})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap().contains("not an embedding model"), "{}", r.text());
}

/// Fill-in-the-middle on a tiny code model (Qwen2.5-Coder's marks): `/v1/completions` with
/// `suffix` and Ollama's `/api/generate` with `suffix` send the prefix-suffix-middle prompt and
/// reply as the same ids sent as a prompt do; llama.cpp's `/infill` adds its repository and file
/// marks and other files; a model without the marks, token ids with a suffix, and `echo` with a
/// suffix are 400s. The pad, repository and file marks end a reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fill_in_the_middle_on_every_route() {
    let s = server(Opts {
        model: Some(TinyModelSpec::coder(WeightType::Q8_0)),
        ..Opts::default()
    });
    let tok = &s.state.engine().model().tokenizer;
    let id = |t: &str| tok.token_to_id(t).unwrap();
    let (pre, suf, mid) = (id("<|fim_prefix|>"), id("<|fim_suffix|>"), id("<|fim_middle|>"));
    for end in ["<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"] {
        assert!(tok.stop_ids().contains(&id(end)), "{end} ends a reply");
    }
    let (prefix, suffix) = ("def add(a, b):\n    ", "\n    return c\n");
    let text = |t: &str| tok.encode(t, false).unwrap();
    let expected: Vec<u32> = [vec![pre], text(prefix), vec![suf], text(suffix), vec![mid]].concat();

    let by_ids = post(&s.app, "/v1/completions", &json!({"prompt": expected, "max_tokens": 6, "temperature": 0})).await.json();
    let fim = post(&s.app, "/v1/completions", &json!({"prompt": prefix, "suffix": suffix, "max_tokens": 6, "temperature": 0})).await;
    assert_eq!(fim.status, StatusCode::OK, "{}", fim.text());
    let fim = fim.json();
    assert_eq!(fim["usage"]["prompt_tokens"], expected.len());
    assert_eq!(fim["choices"][0]["text"], by_ids["choices"][0]["text"]);
    let ollama = post(&s.app, "/api/generate", &json!({"prompt": prefix, "suffix": suffix, "stream": false, "options": {"num_predict": 6, "temperature": 0}})).await.json();
    assert_eq!(ollama["prompt_eval_count"], expected.len(), "{ollama}");
    assert_eq!(ollama["response"], by_ids["choices"][0]["text"]);
    let empty_prefix = post(&s.app, "/api/generate", &json!({"prompt": "", "suffix": suffix, "stream": false, "options": {"num_predict": 2}})).await.json();
    assert_eq!(empty_prefix["prompt_eval_count"], 2 + text(suffix).len() + 1, "a gap at the start is filled, not a load: {empty_prefix}");

    // llama.cpp's /infill: the repository mark, each other file, the file being edited, then
    // the prefix (with `prompt` after it), the suffix, the middle mark.
    let body = json!({
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": [{"filename": "util.py", "text": "import math\n"}],
        "prompt": "c =",
        "n_predict": 6,
        "temperature": 0,
        "return_tokens": true,
    });
    let infill = post(&s.app, "/infill", &body).await;
    assert_eq!(infill.status, StatusCode::OK, "{}", infill.text());
    let infill = infill.json();
    let repo: Vec<u32> = [
        vec![id("<|repo_name|>")],
        text("myproject\n"),
        vec![id("<|file_sep|>")],
        text("util.py\n"),
        text("import math\n"),
        vec![id("<|file_sep|>")],
        text("filename\n"),
        vec![pre],
        text(prefix),
        text("c ="),
        vec![suf],
        text(suffix),
        vec![mid],
    ]
    .concat();
    assert_eq!(infill["tokens_evaluated"], repo.len(), "{infill}");
    assert_eq!(infill["prompt"], tok.decode(&repo).unwrap());
    let same = post(&s.app, "/v1/completions", &json!({"prompt": repo, "max_tokens": 6, "temperature": 0})).await.json();
    assert_eq!(infill["content"], same["choices"][0]["text"], "{infill}");
    assert_eq!(infill["tokens"].as_array().unwrap().len(), infill["tokens_predicted"].as_u64().unwrap() as usize);
    assert!(["eos", "limit", "word"].contains(&infill["stop_type"].as_str().unwrap()), "{infill}");

    for (uri, body, param) in [
        ("/v1/completions", json!({"prompt": [1, 2], "suffix": "x"}), "suffix"),
        ("/v1/completions", json!({"prompt": "a", "suffix": "x", "echo": true}), "suffix"),
        ("/infill", json!({"input_prefix": "a", "input_suffix": "b", "stream": true}), "stream"),
        ("/infill", json!({"input_prefix": "a"}), "input_suffix"),
    ] {
        let r = post(&s.app, uri, &body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.text());
        assert!(r.text().contains(param), "{body}: {}", r.text());
    }
    // A model without the marks.
    let plain = server(Opts::default());
    let r = post(&plain.app, "/v1/completions", &json!({"prompt": "a", "suffix": "b"})).await;
    assert_eq!(r.error(StatusCode::BAD_REQUEST)["param"], "suffix");
    let r = post(&plain.app, "/infill", &json!({"input_prefix": "a", "input_suffix": "b"})).await;
    assert!(r.error(StatusCode::BAD_REQUEST)["message"].as_str().unwrap().contains("fill-in-the-middle"));
}

/// `/infill` gives llama.cpp's answers on the same tiny code model (f32): the prompt it builds
/// (as text, and its length) and the greedy reply's tokens and text, for a plain request and one
/// with `prompt` and other files. Recorded by `scripts/record-llama-infill.py` on the file this
/// test writes into `HEARTH_WRITE_TINY_MODELS=DIR`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fill_in_the_middle_matches_llama_cpp() {
    let spec = TinyModelSpec::coder(WeightType::F32);
    if let Ok(dir) = std::env::var("HEARTH_WRITE_TINY_MODELS") {
        std::fs::create_dir_all(&dir).unwrap();
        write_model(&spec, &Path::new(&dir).join("tiny-coder-f32.gguf")).unwrap();
        eprintln!("wrote the tiny code model into {dir}");
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/llama-cpp-infill.json");
    let data: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let s = server(Opts {
        model: Some(spec.clone()),
        ..Opts::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tiny-coder-f32.gguf");
    write_model(&spec, &file).unwrap();
    assert_eq!(std::fs::metadata(&file).unwrap().len(), data["bytes"].as_u64().unwrap(), "not the recorded file");
    let answers = data["answers"].as_array().unwrap();
    for (request, want) in data["requests"].as_array().unwrap().iter().zip(answers) {
        let mut body = request.clone();
        body["n_predict"] = json!(8);
        body["temperature"] = json!(0);
        body["return_tokens"] = json!(true);
        let r = post(&s.app, "/infill", &body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let ours = r.json();
        for field in ["tokens_evaluated", "prompt", "tokens", "content"] {
            assert_eq!(ours[field], want[field], "{field} of {request}");
        }
    }
}

fn decode_base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c).unwrap() as u32;
        bits = (bits << 6) | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    out
}

/// Bad embedding requests are 400s naming the field, and a chat model (no pooling type in its
/// file) refuses embeddings naming `model`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_embedding_requests_are_400s() {
    let s = embeddings_server();
    for (body, param) in [
        (json!({}), None),
        (json!({"input": []}), Some("input")),
        (json!({"input": 3}), Some("input")),
        (json!({"input": [[1, -1]]}), Some("input[0]")),
        (json!({"input": ["a", ""]}), Some("input[1]")),
        (json!({"input": ""}), Some("input")),
        (json!({"input": "a", "encoding_format": "int8"}), Some("encoding_format")),
        (json!({"input": "a", "dimensions": 0}), Some("dimensions")),
        (json!({"input": "a", "dimensions": 100000}), Some("dimensions")),
        (json!({"input": [[999999]]}), None),
    ] {
        let r = post(&s.app, "/v1/embeddings", &body).await;
        let e = r.error(StatusCode::BAD_REQUEST);
        if let Some(p) = param {
            assert_eq!(e["param"], p, "{body}: {e}");
        }
    }
    let r = post(&s.app, "/v1/embeddings", &json!({"input": "a", "model": "other"})).await;
    r.error(StatusCode::NOT_FOUND);
    // An input over the context refuses the whole request, naming it.
    let long = vec![5u32; 5000];
    let r = post(&s.app, "/v1/embeddings", &json!({"input": [[5, 6], long]})).await;
    let e = r.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["code"], "context_length_exceeded", "{e}");
    assert!(e["message"].as_str().unwrap().starts_with("input[1]"), "{e}");

    let chat = server(Opts::default());
    let r = post(&chat.app, "/v1/embeddings", &json!({"input": "a"})).await;
    let e = r.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "model");
    assert!(e["message"].as_str().unwrap().contains("pooling"), "{e}");

    // `--pooling` lets the same model serve them (llama.cpp's flag).
    let pooled = server(Opts {
        pooling: Some(hearth::config::Pooling::Mean),
        ..Opts::default()
    });
    let r = post(&pooled.app, "/v1/embeddings", &json!({"input": ["a b c", "d e f"]})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["data"].as_array().unwrap().len(), 2);
}

/// `/v1/rerank` on a cross-encoder (bge-reranker-v2-m3's layout: XLM-RoBERTa's vocabulary and
/// head, scoring the pair's first row): llama.cpp's scores (`tests/data/llama-cpp-encoders.json`,
/// `llama-server --rerank` on the same file), highest first, and its token count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_on_a_cross_encoder_scores_as_llama_cpp() {
    let s = server(Opts {
        model: Some(TinyModelSpec::encoder_reranker(true, WeightType::F32)),
        ..Opts::default()
    });
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/llama-cpp-encoders.json");
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let rerank = &data["rerank"];
    let want = &rerank["models"]["tiny-xlmr-rerank-f32.gguf"];
    let body = json!({"query": rerank["query"], "documents": rerank["documents"]});
    let r = post(&s.app, "/v1/rerank", &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v = r.json();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for (i, x) in results.iter().enumerate() {
        let index = x["index"].as_u64().unwrap() as usize;
        let (ours, theirs) = (x["relevance_score"].as_f64().unwrap(), want["scores"][index].as_f64().unwrap());
        assert!((ours - theirs).abs() < 1e-3, "document {index}: {ours} against {theirs}");
        if let Some(next) = results.get(i + 1) {
            assert!(ours >= next["relevance_score"].as_f64().unwrap());
        }
    }
    assert_eq!(v["usage"]["prompt_tokens"], want["prompt_tokens"]);
}

/// `/v1/rerank` on a reranker (Qwen3-Reranker's layout): every document scored in (0, 1),
/// sorted highest first, `top_n` and `return_documents` honoured, llama.cpp's other paths the
/// same route; bad requests and a model without a classifier head are 400s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_scores_documents_highest_first() {
    let s = server(Opts {
        model: Some(TinyModelSpec::reranker(WeightType::Q8_0)),
        ..Opts::default()
    });
    let docs = json!(["the cat sat on the mat", "stock prices fell", {"text": "a mat under a cat"}, "hello"]);
    let r = post(&s.app, "/v1/rerank", &json!({"query": "where is the cat", "documents": docs})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "list");
    let results = v["results"].as_array().unwrap();
    let mut indices: Vec<u64> = results.iter().map(|x| x["index"].as_u64().unwrap()).collect();
    let scores: Vec<f64> = results.iter().map(|x| x["relevance_score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert!(scores.iter().all(|s| *s > 0.0 && *s < 1.0), "{scores:?}");
    assert!(results.iter().all(|x| x.get("document").is_none()));
    indices.sort_unstable();
    assert_eq!(indices, vec![0, 1, 2, 3]);
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);

    let top = post(&s.app, "/rerank", &json!({"query": "where is the cat", "documents": docs, "top_n": 2, "return_documents": true})).await;
    assert_eq!(top.status, StatusCode::OK, "{}", top.text());
    let top = top.json();
    let top = top["results"].as_array().unwrap();
    assert_eq!(top.len(), 2);
    assert_eq!(top[0]["index"], results[0]["index"]);
    let texts = ["the cat sat on the mat", "stock prices fell", "a mat under a cat", "hello"];
    for x in top {
        assert_eq!(x["document"]["text"], texts[x["index"].as_u64().unwrap() as usize]);
    }

    for (body, param) in [
        (json!({"query": "q", "documents": []}), "documents"),
        (json!({"query": "q", "documents": [3]}), "documents[0]"),
        (json!({"query": "q", "documents": ["a"], "top_n": 0}), "top_n"),
    ] {
        let e = post(&s.app, "/v1/rerank", &body).await.error(StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], param, "{body}: {e}");
    }
    post(&s.app, "/v1/rerank", &json!({"documents": ["a"]})).await.error(StatusCode::BAD_REQUEST);
    post(&s.app, "/v1/rerank", &json!({"query": "q", "documents": ["a"], "texts": ["a"]})).await.error(StatusCode::BAD_REQUEST);

    // TEI's shape: `texts` in, a bare list of `{index, score, text}` out, the same order.
    let tei = post(&s.app, "/rerank", &json!({"query": "where is the cat", "texts": texts, "return_text": true})).await;
    assert_eq!(tei.status, StatusCode::OK, "{}", tei.text());
    let tei = tei.json();
    let tei = tei.as_array().unwrap();
    assert_eq!(tei.len(), 4);
    for (t, r) in tei.iter().zip(results) {
        assert_eq!(t["index"], r["index"]);
        assert_eq!(t["score"], r["relevance_score"]);
        assert_eq!(t["text"], texts[t["index"].as_u64().unwrap() as usize]);
    }

    let chat = server(Opts::default());
    let e = post(&chat.app, "/v1/rerank", &json!({"query": "q", "documents": ["a"]})).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "model");
}

/// The chat of [`n_choices_read_the_prompt_from_the_cache_and_each_equals_a_single_reply`]:
/// a system prompt of several blocks.
fn long_chat(n: usize, stream: bool) -> Value {
    let system = "You are a careful assistant. Answer briefly and kindly, and never make things up. ".repeat(3);
    json!({
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Name three rivers."}],
        "max_tokens": 6,
        "temperature": 0,
        "n": n,
        "stream": stream,
        "stream_options": {"include_usage": stream},
    })
}

/// `n` choices of one prompt: the first computes the prompt, the others read its full blocks
/// from the prefix cache; greedy, each is the single request's reply (the cache changes
/// nothing), numbered 0..n, with the prompt counted once in `usage`. Streamed, each chunk
/// names its choice and the choices' texts are the whole response's.
#[tokio::test]
async fn n_choices_read_the_prompt_from_the_cache_and_each_equals_a_single_reply() {
    let uri = "/v1/chat/completions";
    let single = {
        let s = server(Opts::default());
        let r = post(&s.app, uri, &long_chat(1, false)).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        r.json()
    };
    let text = single["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    let prompt = single["usage"]["prompt_tokens"].as_u64().unwrap();
    let completion = single["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(prompt as usize >= 3 * BLOCK_SIZE, "the prompt is too short to test: {prompt}");

    let s = server(Opts::default());
    let r = post(&s.app, uri, &long_chat(3, false)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v = r.json();
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3, "{v}");
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i, "{v}");
        assert_eq!(c["message"]["content"], text.as_str(), "choice {i}: {v}");
        assert_eq!(c["finish_reason"], single["choices"][0]["finish_reason"], "{v}");
    }
    let u = &v["usage"];
    assert_eq!(u["prompt_tokens"], prompt, "{u}");
    assert_eq!(u["completion_tokens"], 3 * completion, "{u}");
    assert_eq!(u["total_tokens"], prompt + 3 * completion, "{u}");
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 0, "the first choice computed the prompt: {u}");
    let full_blocks = prompt / BLOCK_SIZE as u64 * BLOCK_SIZE as u64;
    let hits = s.state.engine().stats().cache.hit_tokens_device;
    assert!(hits >= 2 * full_blocks, "choices 1 and 2 hit {hits} tokens, not each the prompt's {full_blocks}");

    let streamed = post(&s.app, uri, &long_chat(3, true)).await;
    let chunks = chunks(&streamed);
    let mut texts = vec![String::new(); 3];
    let mut finishes = vec![0; 3];
    let mut roles = vec![0; 3];
    for ch in &chunks[..chunks.len() - 1] {
        assert_eq!(ch["id"], chunks[0]["id"]);
        let c = &ch["choices"][0];
        let i = c["index"].as_u64().unwrap() as usize;
        assert!(finishes[i] == 0, "a chunk after choice {i}'s end: {ch}");
        if let Some(t) = c["delta"]["content"].as_str() {
            texts[i].push_str(t);
        }
        roles[i] += usize::from(c["delta"]["role"] == "assistant");
        finishes[i] += usize::from(!c["finish_reason"].is_null());
    }
    assert_eq!(texts, vec![text; 3]);
    assert_eq!((roles, finishes), (vec![1; 3], vec![1; 3]));
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(chunks.last().unwrap()["choices"], json!([]));
    assert_eq!((&usage["prompt_tokens"], &usage["completion_tokens"]), (&json!(prompt), &json!(3 * completion)));
}

/// Sampled choices with a seed: choice `i` is seeded `seed + i` (as vLLM seeds them), so each
/// is the single request with that seed, and they differ; `/v1/completions` numbers its
/// choices alike. A request that saves a conversation answers one choice.
#[tokio::test]
async fn seeded_choices_are_reproducible_one_by_one() {
    let s = server(Opts::default());
    let body = |n: usize, seed: u64| {
        json!({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.5, "seed": seed, "n": n})
    };
    let r = post(&s.app, "/v1/completions", &body(4, 40)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v = r.json();
    let texts: Vec<&str> = v["choices"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap()).collect();
    assert_eq!(texts.len(), 4, "{v}");
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(v["choices"][i]["index"], i);
        let one = post(&s.app, "/v1/completions", &body(1, 40 + i as u64)).await.json();
        assert_eq!(one["choices"][0]["text"].as_str(), Some(*t), "choice {i}");
    }
    assert!(texts.iter().any(|t| *t != texts[0]), "four seeds, one text: {texts:?}");

    let mut saved = chat_body("hi", 4, false);
    saved["n"] = json!(2);
    saved["conversation_id"] = json!("c1");
    let e = post(&s.app, "/v1/chat/completions", &saved).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "n", "{e}");

    // More choices than the engine's queue holds (16 here) could never be queued: a 400, not
    // a 503 to retry in vain.
    let e = post(&s.app, "/v1/completions", &body(17, 1)).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "n", "{e}");
    assert!(e["message"].as_str().unwrap().contains("queue of 16"), "{e}");
}

/// A client that leaves a stream of several choices cancels every one.
#[tokio::test]
async fn a_client_that_leaves_cancels_every_choice() {
    let s = server(Opts::default());
    let body = json!({"prompt": "Tell me a long story", "max_tokens": 200, "temperature": 0, "stream": true, "n": 2});
    let response = s
        .app
        .clone()
        .oneshot(request(Method::POST, "/v1/completions", Body::from(body.to_string()), None))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.into_body();
    assert!(stream.frame().await.unwrap().unwrap().is_data());
    drop(stream);
    wait_until_all_cancelled(&s, 2, Instant::now() + Duration::from_secs(20)).await;
}

/// Several prompts in one `/v1/completions` request (OpenAI's and vLLM's batch): `n` choices
/// of each, prompt by prompt, each the reply its prompt gets alone; `usage` counts every
/// prompt once; streamed alike; with `echo` each choice starts with its own prompt. More than
/// 128 choices in all is a 400.
#[tokio::test]
async fn several_prompts_are_answered_in_one_response_prompt_by_prompt() {
    let s = server(Opts::default());
    let uri = "/v1/completions";
    let prompts = ["Once upon a time", "The weather today is", "In a galaxy far away"];
    let mut alone = Vec::new();
    for p in prompts {
        let r = post(&s.app, uri, &json!({"prompt": p, "max_tokens": 5, "temperature": 0})).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        alone.push(r.json());
    }
    let sum = |field: &str| alone.iter().map(|v| v["usage"][field].as_u64().unwrap()).sum::<u64>();
    let (prompt_tokens, completion_tokens) = (sum("prompt_tokens"), sum("completion_tokens"));
    let body = |stream: bool| {
        json!({"prompt": prompts, "n": 2, "max_tokens": 5, "temperature": 0, "stream": stream,
               "stream_options": {"include_usage": stream}})
    };
    let v = post(&s.app, uri, &body(false)).await.json();
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 6, "{v}");
    for (k, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], k, "{v}");
        assert_eq!(c["text"], alone[k / 2]["choices"][0]["text"], "choice {k}: {v}");
    }
    assert_eq!(v["usage"]["prompt_tokens"], prompt_tokens, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 2 * completion_tokens, "{v}");

    let chunks = chunks(&post(&s.app, uri, &body(true)).await);
    let mut texts = vec![String::new(); 6];
    for ch in &chunks[..chunks.len() - 1] {
        let c = &ch["choices"][0];
        texts[c["index"].as_u64().unwrap() as usize].push_str(c["text"].as_str().unwrap());
    }
    let whole: Vec<&str> = choices.iter().map(|c| c["text"].as_str().unwrap()).collect();
    assert_eq!(texts, whole);
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!((&usage["prompt_tokens"], &usage["completion_tokens"]), (&v["usage"]["prompt_tokens"], &v["usage"]["completion_tokens"]));

    let echoed = post(&s.app, uri, &json!({"prompt": prompts[..2], "echo": true, "max_tokens": 3, "temperature": 0})).await;
    let v = echoed.json();
    for (i, p) in prompts[..2].iter().enumerate() {
        assert!(v["choices"][i]["text"].as_str().unwrap().starts_with(p), "{v}");
    }

    let many: Vec<&str> = vec!["a"; 65];
    let e = post(&s.app, uri, &json!({"prompt": many, "n": 2, "max_tokens": 1})).await.error(StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "prompt", "{e}");
    assert!(e["message"].as_str().unwrap().contains("130"), "{e}");
}
