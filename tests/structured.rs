//! Structured output and tool calls through the HTTP API, on tiny random models: output
//! forced by a JSON Schema validates at any temperature, bad schemas and tools are 400s that
//! name the field and queue nothing.

mod common;

use std::path::Path;

use axum::body::{Body, Bytes};
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use hearth::config::SamplingParams;
use hearth::engine::EngineHandle;
use hearth::model::hparams::Family;
use hearth::model::testkit::{write_model, TinyModelSpec, TinyVocab, VocabStyle, WeightType};
use hearth::server::{router, AppState, ConnectionLimits, ServerConfig};

struct TestServer {
    state: AppState,
    app: Router,
    _dir: tempfile::TempDir,
}

/// A tiny Qwen2-style model (ChatML tokens, `<tool_call>` among them) whose chat template is
/// `template` (`None`: the vocabulary's own ChatML).
fn server(template: Option<&str>) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let mut spec = TinyModelSpec::tiny(Family::Qwen2, WeightType::Q8_0);
    spec.vocab = TinyVocab::new(VocabStyle::Gpt2 { pre: "qwen2" });
    if let Some(t) = template {
        for (k, v) in &mut spec.vocab.metadata {
            if k == "tokenizer.chat_template" {
                *v = candle_core::quantized::gguf_file::Value::String(t.to_owned());
            }
        }
    }
    write_model(&spec, &path).unwrap();
    let engine = common::engine(Path::new(&path), true, 256, 0);
    let handle = EngineHandle::spawn(engine, 64).unwrap();
    let config = ServerConfig {
        model_id: "tiny".into(),
        model_aliases: vec![],
        sampling: SamplingParams::default(),
        max_tokens: 16,
        api_key: None,
        max_body_bytes: 1 << 20,
        limits: ConnectionLimits::default(),
    };
    let state = AppState::new(handle, config);
    TestServer {
        app: router(state.clone()),
        state,
        _dir: dir,
    }
}

async fn post(app: &Router, uri: &str, body: &Value) -> (StatusCode, Bytes) {
    let request = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    (status, response.into_body().collect().await.unwrap().to_bytes())
}

async fn post_json(app: &Router, uri: &str, body: &Value) -> (StatusCode, Value) {
    let (status, bytes) = post(app, uri, body).await;
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)));
    (status, v)
}

/// The schema of the 20-request test: every value bounded, so any sample finishes.
fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "role": {"enum": ["admin", "user", "guest"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
            "active": {"type": "boolean"},
        },
        "required": ["name", "age", "role", "tags", "active"],
        "additionalProperties": false,
    })
}

/// Checks `v` against [`person_schema`], by hand.
fn assert_person(v: &Value) {
    let obj = v.as_object().unwrap_or_else(|| panic!("not an object: {v}"));
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["active", "age", "name", "role", "tags"], "{v}");
    assert!(obj["name"].as_str().is_some_and(|s| s.chars().count() <= 8), "{v}");
    assert!(obj["age"].as_u64().is_some_and(|a| a <= 120), "{v}");
    assert!(["admin", "user", "guest"].contains(&obj["role"].as_str().unwrap_or("")), "{v}");
    let tags = obj["tags"].as_array().unwrap_or_else(|| panic!("tags: {v}"));
    assert!(tags.len() <= 3, "{v}");
    assert!(tags.iter().all(|t| t.as_str().is_some_and(|s| s.chars().count() <= 4)), "{v}");
    assert!(obj["active"].is_boolean(), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_schema_holds_for_twenty_requests_at_temperature_one() {
    let s = server(None);
    for seed in 0..20u64 {
        let body = json!({
            "messages": [{"role": "user", "content": format!("Describe person number {seed}.")}],
            "temperature": 1.0,
            "seed": seed,
            "max_tokens": 200,
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": person_schema()}},
        });
        let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let parsed: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("seed {seed}: not JSON ({e}): {text}"));
        assert_person(&parsed);
    }
    // json_object: any object.
    let body = json!({
        "prompt": "data:",
        "temperature": 0,
        "max_tokens": 64,
        "response_format": {"type": "json_object", "schema": {"type": "object", "properties": {"x": {"const": 7}}, "required": ["x"], "additionalProperties": false}},
    });
    let (status, v) = post_json(&s.app, "/v1/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["text"], "{\"x\": 7}", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_that_does_not_compile_is_a_400_naming_the_field() {
    let s = server(None);
    for schema in [
        json!({"type": "strnig"}),
        json!({"type": "object", "properties": 5}),
        json!(["not", "a", "schema"]),
        json!({"type": "integer", "minimum": 5, "maximum": 1}),
        json!({"type": "string", "format": "no-such-format"}),
        json!({"type": "object", "dependentSchemas": {"a": {"required": ["b"]}}}),
        json!({"$ref": "#/$defs/missing"}),
    ] {
        let body = json!({
            "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        });
        let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{schema}: {v}");
        assert_eq!(v["error"]["param"], "response_format", "{v}");
        eprintln!("{schema} -> {}", v["error"]["message"]);
    }
    let stats = s.state.engine().stats();
    assert_eq!(stats.requests.submitted, 0, "nothing was queued");
}
