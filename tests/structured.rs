//! Structured output, tool calls and reasoning through the HTTP API, on tiny random models:
//! output forced by a JSON Schema validates at any temperature, bad schemas and tools are 400s
//! that name the field and queue nothing, a thinking model's reasoning comes apart from its
//! content (and a grammar waits for the reasoning's end), template kwargs reach the template.

mod common;

use std::path::Path;

use axum::body::{Body, Bytes};
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use hearth::config::SamplingParams;
use hearth::engine::{
    DiskSettings, EngineHandle, GenerateParams, GenerationReport, Grammar, GrammarDelay, Message,
};
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
    let mut spec = TinyModelSpec::tiny(Family::Qwen2, WeightType::Q8_0);
    spec.vocab = TinyVocab::new(VocabStyle::Gpt2 { pre: "qwen2" });
    server_for(spec, template)
}

/// A server on the tiny model of `spec`, with `template` as its chat template.
fn server_for(mut spec: TinyModelSpec, template: Option<&str>) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    // (At least: Command R7B's template writes a preamble of some 3,700 of the tiny vocabulary's
    // tokens.)
    spec.context_length = spec.context_length.max(2048);
    if let Some(t) = template {
        for (k, v) in &mut spec.vocab.metadata {
            if k == "tokenizer.chat_template" {
                *v = candle_core::quantized::gguf_file::Value::String(t.to_owned());
            }
        }
    }
    write_model(&spec, &path).unwrap();
    // A disk tier, so the conversation routes answer too.
    let engine = common::engine(Path::new(&path), true, 256, 0)
        .with_disk(&DiskSettings::new(dir.path().join("data"), 1 << 30))
        .unwrap();
    let handle = EngineHandle::spawn(engine, 64).unwrap();
    let config = ServerConfig {
        model_id: "tiny".into(),
        model_aliases: vec![],
        sampling: SamplingParams::default(),
        max_tokens: 16,
        api_key: None,
        max_body_bytes: 1 << 20,
        limits: ConnectionLimits::default(),
        pooling: None,
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

const QWEN_TEMPLATE: &str = include_str!("../src/model/chat/fixtures/qwen2.5-instruct.jinja");

fn weather_tool() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"enum": ["Paris", "Oslo", "Lima"]},
                    "unit": {"enum": ["C", "F"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": false,
            },
        },
    })
}

fn clock_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}})
}

/// The SSE `data:` payloads of a streamed reply, `[DONE]` last.
fn sse_chunks(bytes: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(bytes);
    let data: Vec<&str> = text
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_tool_call_comes_back_as_tool_calls_whole_and_streamed() {
    let s = server(Some(QWEN_TEMPLATE));
    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let body = json!({
        "messages": [user],
        "tools": [weather_tool(), clock_tool()],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 1.0,
        "seed": 3,
        "max_tokens": 100,
    });
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    assert!(choice["message"]["content"].is_null(), "{v}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().unwrap().starts_with("call_"), "{v}");
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(["Paris", "Oslo", "Lima"].contains(&args["city"].as_str().unwrap()), "{args}");
    assert!(["C", "F"].contains(&args["unit"].as_str().unwrap()), "{args}");

    // The same streamed: text chunks never show the call's markup; one chunk carries the call.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, bytes) = post(&s.app, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, StatusCode::OK);
    let chunks = sse_chunks(&bytes);
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "", "{chunks:?}");
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(calls.len(), 1, "{chunks:?}");
    assert_eq!(calls[0]["index"], 0);
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(calls[0]["function"]["arguments"], call["function"]["arguments"], "same seed, same call");
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "tool_calls");

    // `required` picks one of the tools.
    let mut required = body.clone();
    required["tool_choice"] = json!("required");
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &required).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let name = v["choices"][0]["message"]["tool_calls"][0]["function"]["name"].as_str().unwrap().to_owned();
    assert!(name == "get_weather" || name == "get_time", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_call_of_a_tool_conversation_reuses_the_first() {
    let s = server(Some(QWEN_TEMPLATE));
    let tools = json!([weather_tool()]);
    let user = json!({"role": "user", "content": "What is the weather in Paris? Answer in one word, please."});
    let first = forced_call_request(&user, &tools);
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &first).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let prompt1 = v["usage"]["prompt_tokens"].as_u64().unwrap();
    let call = v["choices"][0]["message"]["tool_calls"][0].clone();
    let second = next_turn(&user, &call, "{\"sky\": \"clear\", \"temp\": 21}", &tools);
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &second).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached >= prompt1 / 16 * 16, "cached {cached} of the first call's {prompt1} prompt tokens: {v}");

    // The rendering is stable: the second prompt is the first, the call as the model wrote it,
    // then the tool's turn.
    let engine = s.state.engine();
    let tool_list = weather_tools();
    let m1 = vec![hearth::engine::Message::user(user["content"].as_str().unwrap())];
    let p1 = engine.tokenize_chat_with_tools(&m1, &tool_list).unwrap();
    assert_eq!(p1.len() as u64, prompt1);
    let mut assistant = hearth::engine::Message::assistant("");
    assistant.tool_calls.push(hearth::engine::ToolCall {
        id: call["id"].as_str().unwrap().into(),
        name: "get_weather".into(),
        arguments: call["function"]["arguments"].as_str().unwrap().into(),
    });
    let mut m2 = m1.clone();
    m2.push(assistant);
    let p2 = engine.tokenize_chat_with_tools(&m2, &tool_list).unwrap();
    let tok = &engine.model().tokenizer;
    let (t1, t2) = (tok.decode(&p1).unwrap(), tok.decode(&p2).unwrap());
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    let written = format!(
        "<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": {}, \"unit\": {}}}}}\n</tool_call>",
        args["city"], args["unit"]
    );
    assert!(t2.starts_with(&format!("{t1}{written}")), "{t2:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_tools_are_400s_naming_the_field_and_queue_nothing() {
    let s = server(Some(QWEN_TEMPLATE));
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (json!({"tools": [{"type": "function", "function": {"description": "no name"}}]}), "tools[0].function.name"),
        (json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]}), "tools[0].function.parameters"),
        (json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "strnig"}}}]}), "tools[0].function.parameters"),
        (json!({"tools": [weather_tool()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}), "tool_choice"),
        (json!({"tools": [weather_tool()], "tool_choice": "always"}), "tool_choice"),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (json!({"tools": "get_weather"}), "tools"),
    ];
    for (extra, param) in cases {
        let mut body = json!({"messages": user});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(v["error"]["param"], param, "{body}: {v}");
    }
    let bad_history = json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "x"}]}]});
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &bad_history).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["param"], "messages[0].tool_calls", "{v}");
    assert_eq!(s.state.engine().stats().requests.submitted, 0, "nothing was queued");
}

/// Mistral Small 3.2's real template (`[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}`, ids of exactly 9
/// letters and digits or the template raises): a forced call comes back with such an id, and
/// the agent's next request, which sends the call and its result back, renders and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mistral_tool_conversation_gets_ids_its_template_accepts() {
    let s = server(Some(include_str!("../src/model/chat/fixtures/mistral-small-3.2-24b-instruct-2506.jinja")));
    let tools = json!([weather_tool()]);
    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let first = forced_call_request(&user, &tools);
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &first).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = v["choices"][0]["message"]["tool_calls"][0].clone();
    let id = call["id"].as_str().unwrap();
    assert!(id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric()), "{v}");
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{args}");
    let second = next_turn(&user, &call, "{\"sky\": \"clear\"}", &tools);
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &second).await;
    assert_eq!(status, StatusCode::OK, "{v}");
}

/// `parallel_tool_calls: false` returns only the first of the calls a reply holds (as vLLM
/// does); `true`, the default, all of them; whole and streamed. Mistral Nemo writes its calls
/// as one JSON list, which a `response_format` makes hold two calls here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_tool_calls_false_returns_the_first_call_only() {
    let s = server(Some(include_str!("../src/model/chat/fixtures/mistral-nemo-instruct-2407.jinja")));
    let call = json!({
        "type": "object",
        "properties": {"name": {"const": "get_weather"}, "arguments": weather_tool()["function"]["parameters"]},
        "required": ["name", "arguments"],
        "additionalProperties": false,
    });
    let list = json!({"type": "array", "items": call, "minItems": 2, "maxItems": 2});
    let body = json!({
        "messages": [{"role": "user", "content": "The weather in Paris and in Oslo?"}],
        "tools": [weather_tool()],
        "response_format": {"type": "json_schema", "json_schema": {"name": "calls", "schema": list}},
        "temperature": 0,
        "max_tokens": 300,
    });
    let mut all = Vec::new();
    for parallel in [None, Some(true), Some(false)] {
        let mut b = body.clone();
        if let Some(p) = parallel {
            b["parallel_tool_calls"] = json!(p);
        }
        let (status, v) = post_json(&s.app, "/v1/chat/completions", &b).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
        let calls: Vec<Value> = message(&v)["tool_calls"].as_array().unwrap().clone();
        assert_eq!(calls.len(), if parallel == Some(false) { 1 } else { 2 }, "{v}");
        b["stream"] = json!(true);
        let (status, bytes) = post(&s.app, "/v1/chat/completions", &b).await;
        assert_eq!(status, StatusCode::OK);
        let streamed: Vec<Value> = sse_chunks(&bytes)
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned())
            .flatten()
            .collect();
        assert_eq!(streamed.len(), calls.len(), "{streamed:?}");
        for (whole, piece) in calls.iter().zip(&streamed) {
            assert_eq!(whole["function"], piece["function"]);
        }
        all.push(calls);
    }
    // The one call is the first of the two.
    assert_eq!(all[2][0]["function"], all[0][0]["function"]);
    let mut bad = body.clone();
    bad["parallel_tool_calls"] = json!("no");
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["param"], "parallel_tool_calls", "{v}");
}

/// `weather_tool()` as the engine takes tools.
fn weather_tools() -> Vec<hearth::engine::Tool> {
    vec![hearth::engine::Tool {
        name: "get_weather".into(),
        description: Some("The weather in a city.".into()),
        parameters: weather_tool()["function"]["parameters"].clone(),
    }]
}

/// Greedy reply to `prompt` forced to call one of `tools`, at most `max_tokens` long.
async fn forced_reply(
    engine: &EngineHandle,
    tools: &[hearth::engine::Tool],
    prompt: Vec<u32>,
    max_tokens: usize,
) -> Box<GenerationReport> {
    let forced = GenerateParams {
        grammar: Some(engine.forced_call(tools)),
        ..GenerateParams::greedy(max_tokens)
    };
    common::run_in_engine(engine, prompt, forced).await
}

/// A server on the tiny model of `spec` with `template`, whose tool format must be `format`,
/// and its greedy reply forced to call the weather tool (300 tokens at most: the tiny
/// vocabulary spells a call in many).
async fn forced_weather_call(
    spec: TinyModelSpec,
    template: &str,
    format: hearth::engine::ToolFormat,
) -> (TestServer, Box<GenerationReport>) {
    let s = server_for(spec, Some(template));
    let engine = s.state.engine();
    assert_eq!(engine.tool_format(), format);
    let tools = weather_tools();
    let p1 = engine
        .tokenize_chat_with_tools(&[Message::user("What is the weather in Paris?")], &tools)
        .unwrap();
    let reply = forced_reply(engine, &tools, p1, 300).await;
    (s, reply)
}

/// A request that forces a call of one of `tools` (greedy, room for the call).
fn forced_call_request(user: &Value, tools: &Value) -> Value {
    json!({
        "messages": [user],
        "tools": tools,
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 100,
    })
}

/// An agent's next request: the user's message, the model's `call`, the tool's `result`.
fn next_turn(user: &Value, call: &Value, result: &str, tools: &Value) -> Value {
    json!({
        "messages": [
            user,
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": result},
        ],
        "tools": tools,
        "temperature": 0,
        "max_tokens": 8,
    })
}

/// A ChatML template whose generation prompt opens the reasoning, as QwQ's and DeepSeek-R1's
/// do: the reply is reasoning until the model writes `</think>`.
const OPEN_THINK_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>' }}{% endif %}";

const QWEN3_TEMPLATE: &str = include_str!("../src/model/chat/fixtures/qwen3-0.6b.jinja");

/// The message of a whole chat completion.
fn message(v: &Value) -> &Value {
    &v["choices"][0]["message"]
}

/// A streamed chat reply's `reasoning_content` and `content` deltas, each joined.
fn streamed_parts(bytes: &[u8]) -> (String, String) {
    let chunks = sse_chunks(bytes);
    let joined = |field: &str| -> String {
        chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"][field].as_str())
            .collect()
    };
    (joined("reasoning_content"), joined("content"))
}

/// A reply to a prompt that opened the reasoning, which the tiny model never closes: all of it
/// is `reasoning_content`, whole and streamed; `reasoning_format: none` keeps it in `content`;
/// a response format waits for the reasoning's end, so here it forces nothing. With `<think>`
/// (as QwQ's template) and with Mistral's `[THINK]` special token (as Magistral's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_in_an_opened_think_block_comes_apart_from_the_content() {
    opened_reasoning_comes_apart(&server(Some(OPEN_THINK_TEMPLATE))).await;
    let mistral = OPEN_THINK_TEMPLATE.replace("<|im_start|>assistant\\n<think>", "[INST]assistant[/INST][THINK]");
    assert!(mistral.ends_with("[THINK]' }}{% endif %}"), "{mistral}");
    let s = server_for(TinyModelSpec::tiny(Family::Mistral3, WeightType::Q8_0), Some(&mistral));
    assert!(s.state.engine().model().tokenizer.special_token_id("[THINK]").is_some());
    opened_reasoning_comes_apart(&s).await;

    // A reasoning that closes (a +100 bias on `[/THINK]`: the model writes it at once, and on):
    // one reasoning token, the tag; the rest is the answer.
    let close = s.state.engine().model().tokenizer.special_token_id("[/THINK]").unwrap();
    let body = json!({
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
        "temperature": 0,
        "max_tokens": 5,
        "ignore_eos": true,
        "logit_bias": {close.to_string(): 100},
    });
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 5, "{v}");
    assert_eq!(v["usage"]["completion_tokens_details"]["reasoning_tokens"], 1, "{v}");
    assert!(message(&v).get("reasoning_content").is_none(), "an empty reasoning: {v}");
}

async fn opened_reasoning_comes_apart(s: &TestServer) {
    let body = json!({
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
        "temperature": 1.0,
        "seed": 7,
        "max_tokens": 12,
        "ignore_eos": true,
    });
    let mut inline = body.clone();
    inline["reasoning_format"] = json!("none");
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &inline).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let raw = message(&v)["content"].as_str().unwrap().to_owned();
    assert!(message(&v).get("reasoning_content").is_none(), "{v}");
    assert!(v["usage"].get("completion_tokens_details").is_none(), "not split, not counted: {v}");
    assert!(!raw.contains("</think>") && !raw.trim().is_empty(), "{raw:?}");

    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(message(&v)["reasoning_content"], raw.trim(), "{v}");
    assert_eq!(message(&v)["content"], "", "{v}");
    // Never closed: every reply token is reasoning (OpenAI's `reasoning_tokens`).
    assert_eq!(v["usage"]["completion_tokens_details"]["reasoning_tokens"], 12, "{v}");

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (status, bytes) = post(&s.app, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(streamed_parts(&bytes), (raw.trim().to_owned(), String::new()));
    let chunks = sse_chunks(&bytes);
    let usage = &chunks.iter().rev().find(|c| c["usage"].is_object()).unwrap()["usage"];
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 12, "{usage}");

    let mut formatted = body.clone();
    formatted["response_format"] = json!({"type": "json_object"});
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &formatted).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(message(&v)["reasoning_content"], raw.trim(), "the format waits: {v}");

    // A conversation route answers the same way, and keeps the reply as the model wrote it.
    let (status, created) = post_json(&s.app, "/v1/conversations", &json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap();
    let turn = json!({"content": "Why is the sky blue?", "temperature": 1.0, "seed": 7, "max_tokens": 12, "ignore_eos": true});
    let (status, v) = post_json(&s.app, &format!("/v1/conversations/{id}/messages"), &turn).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(message(&v)["reasoning_content"], raw.trim(), "{v}");
    assert_eq!(message(&v)["content"], "", "{v}");
    let request = Request::builder()
        .uri(format!("/v1/conversations/{id}"))
        .body(Body::empty())
        .unwrap();
    let saved = s.app.clone().oneshot(request).await.unwrap().into_body().collect().await.unwrap().to_bytes();
    let saved: Value = serde_json::from_slice(&saved).unwrap();
    assert_eq!(saved["messages"][1]["content"], raw.as_str(), "{saved}");
}

/// `grammar_after`: the reply is free (the same tokens as without a grammar) until it holds
/// the text, and follows the grammar from the next token. With `if_first`, it waits only when
/// the first token is that one (a model opening its reasoning), else holds from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grammar_that_waits_for_a_text_applies_from_the_token_after_it() {
    let s = server(None);
    let engine = s.state.engine();
    let prompt = engine.tokenize_chat(&[Message::user("Describe a person.")]).unwrap();
    let free = GenerateParams {
        ignore_eos: true,
        keep_logits: true,
        ..GenerateParams::greedy(4)
    };
    let free = common::run_in_engine(s.state.engine(), prompt.clone(), free).await;
    let trigger = engine.model().tokenizer.decode(&free.tokens[..2]).unwrap();
    assert!(!trigger.is_empty() && free.text.starts_with(&trigger), "{free:?}");
    let delay = |if_first: Option<u32>| GenerateParams {
        grammar: Some(Grammar::JsonSchema(person_schema())),
        grammar_after: Some(GrammarDelay {
            until: trigger.clone(),
            then: None,
            if_first,
        }),
        ..GenerateParams::greedy(300)
    };
    let waited = |report: Box<GenerationReport>| {
        assert_eq!(report.tokens[..2], free.tokens[..2], "free until the text");
        let rest = report.text.strip_prefix(&trigger).unwrap();
        assert_person(&serde_json::from_str(rest).unwrap_or_else(|e| panic!("{e}: {rest:?}")));
    };
    waited(common::run_in_engine(s.state.engine(), prompt.clone(), delay(None)).await);
    // The model's own first choice (which the schema forbids) opens the wait.
    assert!(!free.text.starts_with('{'), "{free:?}");
    waited(common::run_in_engine(s.state.engine(), prompt.clone(), delay(Some(free.tokens[0]))).await);
    // A first token it least wants never comes: the grammar holds from the start.
    let first = &free.logits[0];
    let least = (0..first.len()).min_by(|&a, &b| first[a].total_cmp(&first[b])).unwrap() as u32;
    let report = common::run_in_engine(s.state.engine(), prompt.clone(), delay(Some(least))).await;
    assert_person(&serde_json::from_str(&report.text).unwrap());
    // A second text after the first (harmony's `<|message|>` after `<|channel|>final`): free
    // until both have come, in that order, whatever is between.
    let first = engine.model().tokenizer.decode(&free.tokens[..1]).unwrap();
    let then = engine.model().tokenizer.decode(&free.tokens[2..3]).unwrap();
    let upto = engine.model().tokenizer.decode(&free.tokens[..3]).unwrap();
    assert!(!first.is_empty() && !then.is_empty() && free.text.starts_with(&upto), "{free:?}");
    let two = GenerateParams {
        grammar_after: Some(GrammarDelay {
            until: first,
            then: Some(then),
            if_first: None,
        }),
        ..delay(None)
    };
    let report = common::run_in_engine(s.state.engine(), prompt.clone(), two).await;
    assert_eq!(report.tokens[..3], free.tokens[..3], "free until both texts");
    let rest = report.text.strip_prefix(&upto).unwrap();
    assert_person(&serde_json::from_str(rest).unwrap_or_else(|e| panic!("{e}: {rest:?}")));
    // Without the wait the grammar holds from the first token.
    let at_once = GenerateParams {
        grammar_after: None,
        ..delay(None)
    };
    let report = common::run_in_engine(s.state.engine(), prompt, at_once).await;
    assert_person(&serde_json::from_str(&report.text).unwrap());
}

/// Between the awaited text and the grammar's first token, whitespace the model writes (the
/// line break after its reasoning, `</think>\n\n`) stays its own, up to [`GrammarDelay::GAP`]
/// bytes; a grammar that holds from the start allows none. A +100 `logit_bias` on the line
/// break makes the model want nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whitespace_the_model_writes_after_the_awaited_text_comes_before_the_grammar() {
    let s = server(None);
    let engine = s.state.engine();
    let tok = &engine.model().tokenizer;
    let nl = tok.encode("\n", false).unwrap();
    assert_eq!(nl.len(), 1);
    let prompt = engine.tokenize_chat(&[Message::user("Describe a person.")]).unwrap();
    let params = |after: Option<GrammarDelay>| GenerateParams {
        sampling: SamplingParams {
            logit_bias: vec![(nl[0], 100.0)],
            ..SamplingParams::greedy()
        },
        grammar: Some(Grammar::JsonSchema(person_schema())),
        grammar_after: after,
        ..GenerateParams::greedy(300)
    };
    let delay = GrammarDelay {
        until: "\n".into(),
        then: None,
        if_first: None,
    };
    let report = common::run_in_engine(engine, prompt.clone(), params(Some(delay))).await;
    let gap = "\n".repeat(GrammarDelay::GAP);
    let rest = report.text.strip_prefix('\n').unwrap().strip_prefix(gap.as_str()).unwrap_or_else(|| panic!("{report:?}"));
    assert_person(&serde_json::from_str(rest).unwrap_or_else(|e| panic!("{e}: {rest:?}")));
    assert_eq!(report.tokens[..1 + GrammarDelay::GAP], [nl[0]; 1 + GrammarDelay::GAP]);

    let report = common::run_in_engine(engine, prompt, params(None)).await;
    assert!(report.text.starts_with('{'), "{report:?}");
    assert_person(&serde_json::from_str(&report.text).unwrap());
}

/// `chat_template_kwargs` reach the template (Qwen3's `enable_thinking: false` closes an empty
/// reasoning in the prompt); a reasoning sent back as `reasoning_content` is rendered (Qwen3
/// keeps it for the turns after the last user message); bad values are 400s naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_kwargs_and_reasoning_sent_back_reach_the_template() {
    let s = server(Some(QWEN3_TEMPLATE));
    let user = json!({"role": "user", "content": "Hi"});
    let body = json!({"messages": [user], "temperature": 0, "max_tokens": 4});
    let prompt_tokens = |v: &Value| v["usage"]["prompt_tokens"].as_u64().unwrap();
    let (status, thinking) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{thinking}");
    let mut off = body.clone();
    off["chat_template_kwargs"] = json!({"enable_thinking": false});
    let (status, not_thinking) = post_json(&s.app, "/v1/chat/completions", &off).await;
    assert_eq!(status, StatusCode::OK, "{not_thinking}");
    let kwargs = off["chat_template_kwargs"].as_object().unwrap().clone();
    let expected = s
        .state
        .engine()
        .chat_prompt(&[Message::user("Hi")], &[], &kwargs)
        .unwrap();
    assert_eq!(prompt_tokens(&not_thinking), expected.ids.len() as u64);
    assert!(prompt_tokens(&not_thinking) > prompt_tokens(&thinking));
    assert_eq!(expected.reasoning.map(|r| r.starts_open), Some(false));

    let call = json!({"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}});
    let history = |reasoning: Option<&str>| {
        let mut assistant = json!({"role": "assistant", "content": null, "tool_calls": [call]});
        if let Some(r) = reasoning {
            assistant["reasoning_content"] = json!(r);
        }
        json!({
            "messages": [user, assistant, {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
            "tools": [weather_tool()],
            "temperature": 0,
            "max_tokens": 4,
        })
    };
    let (_, without) = post_json(&s.app, "/v1/chat/completions", &history(None)).await;
    let (status, with) = post_json(&s.app, "/v1/chat/completions", &history(Some("The user wants the weather."))).await;
    assert_eq!(status, StatusCode::OK, "{with}");
    assert!(prompt_tokens(&with) > prompt_tokens(&without) + 3, "{without} {with}");

    let before = s.state.engine().stats().requests.submitted;
    for (field, value) in [
        ("chat_template_kwargs", json!("enable_thinking=false")),
        ("chat_template_kwargs", json!({"messages": []})),
        ("reasoning_format", json!("think")),
    ] {
        let mut bad = body.clone();
        bad[field] = value;
        let (status, v) = post_json(&s.app, "/v1/chat/completions", &bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["error"]["param"], field, "{v}");
    }
    let mut bad = history(Some("x"));
    bad["messages"][1]["reasoning_content"] = json!(5);
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["param"], "messages[1].reasoning_content", "{v}");
    assert_eq!(s.state.engine().stats().requests.submitted, before, "nothing was queued");
}

/// Mistral's named calls, forced, are written with the vocabulary's `[TOOL_CALLS]` and `[ARGS]`
/// tokens, as the model writes calls: the reply parses to the call, and the next request's
/// prompt (the call sent back, rendered by Ministral 3's template) starts with the first
/// prompt and the reply's very tokens, so the prefix cache serves it through the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_mistral_call_is_written_with_its_special_tokens() {
    let template = include_str!("../src/model/chat/fixtures/ministral-3-14b-reasoning-2512.jinja");
    let s = server_for(TinyModelSpec::tiny(Family::Mistral3, WeightType::Q8_0), Some(template));
    let engine = s.state.engine();
    let tok = &engine.model().tokenizer;
    let (calls_id, args_id) = (
        tok.special_token_id("[TOOL_CALLS]").unwrap(),
        tok.special_token_id("[ARGS]").unwrap(),
    );
    let tools = weather_tools();
    let user = Message::user("What is the weather in Paris?");
    let p1 = engine.tokenize_chat_with_tools(std::slice::from_ref(&user), &tools).unwrap();
    let reply = forced_reply(engine, &tools, p1.clone(), 100).await;
    assert_eq!(reply.tokens.first(), Some(&calls_id), "{reply:?}");
    assert!(reply.tokens.contains(&args_id), "{reply:?}");
    let parsed = engine.tool_format().parse(&reply.text).unwrap_or_else(|| panic!("{:?}", reply.text));
    assert_eq!(parsed.calls.len(), 1);
    assert_eq!(parsed.calls[0].name, "get_weather");

    let mut assistant = Message::assistant("");
    assistant.tool_calls.push(hearth::engine::ToolCall {
        id: "a1B2c3D4e".into(),
        name: "get_weather".into(),
        arguments: parsed.calls[0].arguments.clone(),
    });
    let p2 = engine.tokenize_chat_with_tools(&[user, assistant], &tools).unwrap();
    let written: Vec<u32> = p1.iter().chain(&reply.tokens).copied().collect();
    assert_eq!(p2[..written.len()], written[..], "the history renders the call as it was written");

    // Through the API: the call comes back whole, with Mistral's id.
    let body = forced_call_request(
        &json!({"role": "user", "content": "What is the weather in Paris?"}),
        &json!([weather_tool()]),
    );
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["arguments"].as_str(), Some(parsed.calls[0].arguments.as_str()), "{v}");

    // Mistral Nemo's list form: `[TOOL_CALLS]` then a JSON list of one call.
    let nemo = include_str!("../src/model/chat/fixtures/mistral-nemo-instruct-2407.jinja");
    let s = server_for(TinyModelSpec::tiny(Family::Mistral3, WeightType::Q8_0), Some(nemo));
    let engine = s.state.engine();
    let p1 = engine
        .tokenize_chat_with_tools(&[Message::user("What is the weather in Paris?")], &tools)
        .unwrap();
    let reply = forced_reply(engine, &tools, p1, 100).await;
    assert_eq!(reply.tokens.first(), Some(&calls_id), "{reply:?}");
    assert!(reply.text.starts_with("[{\"name\": \"get_weather\", \"arguments\": {"), "{:?}", reply.text);
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather", "{v}");
}

/// A GLM-4-shaped template, its tool parts only: the tools listed in a system turn, a call an
/// assistant turn with the function's name as `metadata` and the arguments as content, a
/// result an `observation` turn (the statements GLM-4-0414's and GLM-Z1's templates use; the
/// real GLM-Z1 template is tested in `src/model/chat/tools.rs`, whose prompt opens `<think>`).
const GLM4_TOOLS_TEMPLATE: &str = "[gMASK]<sop>{%- if tools -%}<|system|>\n# 可用工具{% for tool in tools %}\n\n## {{ tool.function.name }}\n\n{{ tool.function | tojson(indent=4, ensure_ascii=False) }}{% endfor %}{%- endif -%}{%- for message in messages %}{%- set meta = message.get(\"metadata\", \"\") %}{%- if message.role == 'user' %}<|user|>\n{{ message.content }}{%- elif message.role == 'assistant' and not meta %}<|assistant|>\n{{ message.content }}{%- elif message.role == 'assistant' and meta %}<|assistant|>{{ meta }}\n{{ message.content }}{%- elif message.role == 'observation' %}<|observation|>\n{{ message.content }}{%- endif %}{%- endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";

/// GLM-4's calls (the function's name on a line, its arguments' JSON after) on a tiny GLM-4
/// file: a forced call comes back as the call, and the agent's next request, the call and
/// its result sent back as OpenAI's `tool_calls` and `tool` messages, renders them as GLM's
/// call and `observation` turns, starting with the first prompt and the reply's very tokens
/// (the prefix cache serves it); `<|observation|>` ends a reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_glm4_call_comes_back_and_its_history_renders_as_glm_writes_it() {
    let s = server_for(TinyModelSpec::tiny(Family::Glm4, WeightType::Q8_0), Some(GLM4_TOOLS_TEMPLATE));
    let engine = s.state.engine();
    assert_eq!(engine.tool_format(), hearth::engine::ToolFormat::Glm4);
    let tok = &engine.model().tokenizer;
    let observation = tok.special_token_id("<|observation|>").unwrap();
    assert!(tok.stop_ids().contains(&observation), "{:?}", tok.stop_ids());
    let tools = weather_tools();
    let user = Message::user("What is the weather in Paris?");
    let p1 = engine.tokenize_chat_with_tools(std::slice::from_ref(&user), &tools).unwrap();
    let reply = forced_reply(engine, &tools, p1.clone(), 100).await;
    assert!(reply.text.starts_with("get_weather\n{\""), "{:?}", reply.text);
    let parsed = engine.tool_format().parse(&reply.text).unwrap_or_else(|| panic!("{:?}", reply.text));
    assert_eq!(parsed.calls[0].name, "get_weather");

    let mut assistant = Message::assistant("");
    assistant.tool_calls.push(hearth::engine::ToolCall {
        id: "call_1".into(),
        name: "get_weather".into(),
        arguments: parsed.calls[0].arguments.clone(),
    });
    let mut result = Message::new(hearth::engine::Role::parse("tool"), "21 C, clear");
    result.tool_call_id = Some("call_1".into());
    let p2 = engine.tokenize_chat_with_tools(&[user, assistant, result], &tools).unwrap();
    let written: Vec<u32> = p1.iter().chain(&reply.tokens).copied().collect();
    assert_eq!(p2[..written.len()], written[..], "the history renders the call as it was written");
    assert_eq!(p2[written.len()], observation, "the result follows as an observation turn");

    // Through the API: the call comes back whole.
    let body = forced_call_request(
        &json!({"role": "user", "content": "What is the weather in Paris?"}),
        &json!([weather_tool()]),
    );
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{v}");
    assert_eq!(call["function"]["arguments"].as_str(), Some(parsed.calls[0].arguments.as_str()), "{v}");
}

/// GLM-4.6's template (llama.cpp's copy) on a tiny GLM-4.5 file: a forced call is written in
/// GLM's `<arg_key>`/`<arg_value>` format, each required argument (the enum strings as one of
/// their values), and comes back as the call with its arguments typed by the tool's schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_glm45_forced_call_is_written_in_its_xml_format_and_comes_back() {
    let template = include_str!("../src/model/chat/fixtures/glm-4.6.jinja");
    let spec = TinyModelSpec::tiny(Family::Glm4Moe, WeightType::Q8_0);
    let (s, reply) = forced_weather_call(spec, template, hearth::engine::ToolFormat::GlmXml { compact: false }).await;
    assert!(reply.text.starts_with("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>"), "{:?}", reply.text);
    assert!(reply.text.ends_with("</arg_value>\n</tool_call>"), "{:?}", reply.text);

    // The tiny vocabulary spells the call in many tokens.
    let mut body = forced_call_request(
        &json!({"role": "user", "content": "What is the weather in Paris?"}),
        &json!([weather_tool()]),
    );
    body["max_tokens"] = json!(300);
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{v}");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(["Paris", "Oslo", "Lima"].contains(&args["city"].as_str().unwrap()), "{v}");
    assert!(["C", "F"].contains(&args["unit"].as_str().unwrap()), "{v}");
}

/// GLM-4.7-Flash's template (llama.cpp's copy) on a tiny `deepseek2` file in its layout: a
/// forced call is GLM's format with nothing between its parts, as that template writes calls,
/// and comes back through the API as the call; the agent's next request renders the call back
/// as the model wrote it, so the cache holds past the first prompt. (Through the API with
/// thinking off: its prompt otherwise opens the reasoning and the call waits for `</think>`,
/// which this random model never writes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_glm47_flash_forced_call_is_written_compactly_and_comes_back() {
    let template = include_str!("../src/model/chat/fixtures/glm-4.7-flash.jinja");
    let spec = TinyModelSpec::tiny(Family::DeepSeek2, WeightType::Q8_0);
    let format = hearth::engine::ToolFormat::GlmXml { compact: true };
    let (s, reply) = forced_weather_call(spec, template, format).await;
    assert!(reply.text.starts_with("<tool_call>get_weather<arg_key>city</arg_key><arg_value>"), "{:?}", reply.text);
    assert!(reply.text.ends_with("</arg_value></tool_call>"), "{:?}", reply.text);

    the_next_request_holds_the_cache_into_the_call(&s).await;
}

/// A forced weather call through the API with thinking off, then the agent's next request with
/// the call and its result: its cached prefix runs past the first prompt, into the call as the
/// model wrote it.
async fn the_next_request_holds_the_cache_into_the_call(s: &TestServer) {
    let no_thinking = json!({"enable_thinking": false});
    let (_, v, call) = forced_call_over_api(s, Some(&no_thinking)).await;
    let first_prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let mut second = next_turn(&user, &call, "sunny", &json!([weather_tool()]));
    second["chat_template_kwargs"] = no_thinking;
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &second).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached > first_prompt, "the cache holds into the call as written ({cached} of {first_prompt}): {v}");
}

/// Qwen3.5's template (llama.cpp's copy) on a tiny `qwen35` file (gated delta net layers): a
/// forced call is Qwen3-Coder's XML and comes back through the API as the call; the agent's next
/// request renders the call back as the model wrote it, and the cache holds past the first
/// prompt: the recurrent layers' state was kept at a block boundary inside the call. (Through
/// the API with thinking off, as GLM-4.7-Flash's: its prompt otherwise opens the reasoning.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qwen35_forced_call_comes_back_and_the_next_request_holds_the_cache() {
    let template = include_str!("../src/model/chat/fixtures/qwen3.5-4b.jinja");
    let spec = TinyModelSpec::tiny(Family::Qwen35, WeightType::Q8_0);
    let (s, reply) = forced_weather_call(spec, template, hearth::engine::ToolFormat::QwenXml { seed: false }).await;
    assert!(reply.text.starts_with("<tool_call>\n<function=get_weather>\n<parameter=city>\n"), "{:?}", reply.text);

    the_next_request_holds_the_cache_into_the_call(&s).await;
    // The state copies that made it so, in the stats and on /metrics (within their budget: it
    // holds at least 16 copies).
    let stats = s.state.engine().stats();
    let r = stats.recurrent_states.expect("a recurrent model's stats count its state copies");
    assert!(r.copies >= 1 && r.bytes > 0 && r.bytes <= r.budget_bytes, "{r:?}");
    let req = Request::builder().method(Method::GET).uri("/metrics").body(Body::empty()).unwrap();
    let res = s.app.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let text = String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(text.contains("hearth_recurrent_state_copies "), "{text}");
    assert!(text.contains("hearth_recurrent_state_bytes "), "{text}");
}

/// Seed-OSS's template (llama.cpp's copy, the tiny vocabulary's own) on a tiny Seed-OSS file: a
/// forced call is Qwen3-Coder's XML inside `<seed:tool_call>` (its special tokens kept as text),
/// and comes back through the API as the call, whole and streamed; the agent's next request
/// renders it back as written (the cache holds) and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_oss_forced_call_is_written_in_its_wrapper_and_comes_back() {
    let template = include_str!("../src/model/chat/fixtures/bytedance-seed-oss.jinja");
    let spec = TinyModelSpec::tiny(Family::SeedOss, WeightType::Q8_0);
    let format = hearth::engine::ToolFormat::QwenXml { seed: true };
    let (s, reply) = forced_weather_call(spec, template, format).await;
    let written = s.state.engine().model().tokenizer.decode(&reply.tokens).unwrap();
    assert!(written.starts_with("<seed:tool_call>\n<function=get_weather>\n<parameter=city>"), "{written:?}");
    assert!(written.ends_with("</parameter>\n</function>\n</seed:tool_call>"), "{written:?}");
    forced_call_round_trip(&s, &reply).await;
}

/// Qwen3-Coder's template (llama.cpp's copy) on a tiny Qwen3 MoE file: a forced call is its
/// XML, `<function=get_weather>` and a `<parameter=…>` block per required argument, and comes
/// back through the API as the call, whole and streamed; the agent's next request, with the
/// call and its result, renders the call back in that XML (the tokens the model wrote: the
/// cache holds) and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qwen3_coder_forced_call_is_written_in_its_xml_and_comes_back() {
    let template = include_str!("../src/model/chat/fixtures/qwen3-coder-30b-a3b-instruct.jinja");
    let spec = TinyModelSpec::tiny(Family::Qwen3Moe, WeightType::Q8_0);
    let (s, reply) = forced_weather_call(spec, template, hearth::engine::ToolFormat::QwenXml { seed: false }).await;
    assert!(reply.text.starts_with("<tool_call>\n<function=get_weather>\n<parameter=city>\n"), "{:?}", reply.text);
    assert!(reply.text.ends_with("\n</parameter>\n</function>\n</tool_call>"), "{:?}", reply.text);
    forced_call_round_trip(&s, &reply).await;
}

/// Gemma 4's template (llama.cpp's copy) on the tiny Gemma 4 file: a forced call is
/// `<|tool_call>call:get_weather{…}<tool_call|>` in Gemma's notation (strings between `<|"|>`
/// marks, the arguments sorted as the template writes them) and comes back through the API as
/// the call, whole and streamed; the agent's next request renders the call back as written (the
/// cache holds) with the result in the same turn, and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemma4_forced_call_is_written_in_its_notation_and_comes_back() {
    let template = include_str!("../src/model/chat/builtin/gemma-4-it.jinja");
    let spec = TinyModelSpec::tiny(Family::Gemma4, WeightType::Q8_0);
    let (s, reply) = forced_weather_call(spec, template, hearth::engine::ToolFormat::Gemma4).await;
    let written = s.state.engine().model().tokenizer.decode(&reply.tokens).unwrap();
    assert!(written.starts_with("<|tool_call>call:get_weather{city:<|\"|>"), "{written:?}");
    assert!(written.ends_with("<|\"|>}<tool_call|>"), "{written:?}");
    forced_call_round_trip(&s, &reply).await;
}

/// LFM2's templates (llama.cpp's copies) on a tiny LFM2 file (convolution layers; its vocabulary
/// has LFM2's call marks as special tokens): a forced call is
/// `<|tool_call_start|>[get_weather(city='…', unit='…')]<|tool_call_end|>`, the marks written as
/// the vocabulary's tokens and kept in the text, and comes back through the API as the call,
/// whole and streamed; the agent's next request renders the call back as written (by hearth into
/// the turn's content for LFM2-8B-A1B's template, which renders no `tool_calls`; by
/// LFM2.5-8B-A1B's itself), so the cache holds, and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lfm2_forced_calls_are_python_style_and_come_back() {
    for template in [
        include_str!("../src/model/chat/fixtures/lfm2-8b-a1b.jinja"),
        include_str!("../src/model/chat/fixtures/lfm2.5-8b-a1b.jinja"),
    ] {
        let spec = TinyModelSpec::tiny(Family::Lfm2, WeightType::Q8_0);
        let (s, reply) = forced_weather_call(spec, template, hearth::engine::ToolFormat::Lfm2).await;
        let tokenizer = &s.state.engine().model().tokenizer;
        let marks = ["<|tool_call_start|>", "<|tool_call_end|>"].map(|t| tokenizer.special_token_id(t));
        assert!(marks.iter().all(Option::is_some), "the tiny vocabulary has LFM2's marks");
        assert_eq!((reply.tokens.first().copied(), reply.tokens.last().copied()), (marks[0], marks[1]));
        let written = tokenizer.decode(&reply.tokens).unwrap();
        assert!(written.starts_with("<|tool_call_start|>[get_weather(city='"), "{written:?}");
        assert!(written.ends_with("')]<|tool_call_end|>"), "{written:?}");
        forced_call_round_trip(&s, &reply).await;
    }
}

/// Command R7B's template (llama.cpp's copy) on a tiny Cohere file: a forced call is
/// `<|START_ACTION|>`, a list of one `{"tool_call_id", "tool_name", "parameters"}` laid out as
/// the template writes it, `<|END_ACTION|>`, the marks written as the vocabulary's tokens and
/// kept in the text; it comes back through the API as the call, whole and streamed (no text
/// chunk shows its markup), and the agent's next request, which the template renders with the
/// call (its id numbered by the template), answers from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cohere_forced_calls_are_json_lists_between_action_marks() {
    let template = include_str!("../src/model/chat/fixtures/cohere-command-r7b.jinja");
    let spec = TinyModelSpec {
        context_length: 8192,
        ..TinyModelSpec::tiny(Family::Cohere, WeightType::Q8_0)
    };
    let (s, reply) = forced_weather_call(spec, template, hearth::engine::ToolFormat::Cohere).await;
    let tokenizer = &s.state.engine().model().tokenizer;
    let marks = ["<|START_ACTION|>", "<|END_ACTION|>"].map(|t| tokenizer.special_token_id(t));
    assert!(marks.iter().all(Option::is_some), "the tiny vocabulary has Cohere's marks");
    assert_eq!((reply.tokens.first().copied(), reply.tokens.last().copied()), (marks[0], marks[1]));
    let written = tokenizer.decode(&reply.tokens).unwrap();
    assert!(written.starts_with("<|START_ACTION|>[\n    {\"tool_call_id\": \""), "{written:?}");
    assert!(written.contains("\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \""), "{written:?}");
    assert!(written.ends_with("\"}}\n]<|END_ACTION|>"), "{written:?}");

    // Through the API a reply may open a reasoning part first (the grammar then waits for its
    // end): this random model's favourite first token is that mark, so it is kept out.
    let opener = tokenizer.special_token_id("<|START_THINKING|>").unwrap();
    biased_forced_call_round_trip(&s, json!({opener.to_string(): -100})).await;
}

/// MiniMax-M2's template (llama.cpp's copy, the tiny vocabulary's own) on a tiny `minimax-m2`
/// file (its call wrapper and reasoning tags special tokens): a forced call is
/// `<minimax:tool_call>`, `<invoke name="get_weather">` with a `<parameter name="…">` line per
/// required argument, `</invoke>`, the wrapper's end, the wrapper written as the vocabulary's
/// tokens and kept in the text. Through the API the prompt opens the reasoning, so the call
/// waits for `</think>` (made the first token here by a bias: the random model would not write
/// it); the call comes back whole and streamed (no text chunk shows its markup), and the agent's
/// next request, which the template renders with the call and its result, answers from the
/// cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minimax_forced_calls_are_invoke_blocks_in_their_wrapper() {
    let template = include_str!("../src/model/chat/fixtures/minimax-m2.jinja");
    let spec = TinyModelSpec {
        context_length: 8192,
        ..TinyModelSpec::minimax_m2(WeightType::Q8_0)
    };
    let (s, reply) = forced_weather_call(spec, template, hearth::engine::ToolFormat::MinimaxXml).await;
    let tokenizer = &s.state.engine().model().tokenizer;
    let marks = ["<minimax:tool_call>", "</minimax:tool_call>"].map(|t| tokenizer.special_token_id(t));
    assert!(marks.iter().all(Option::is_some), "the tiny vocabulary has MiniMax's wrapper");
    assert_eq!((reply.tokens.first().copied(), reply.tokens.last().copied()), (marks[0], marks[1]));
    let written = tokenizer.decode(&reply.tokens).unwrap();
    assert!(written.starts_with("<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">"), "{written:?}");
    assert!(written.ends_with("</parameter>\n</invoke>\n</minimax:tool_call>"), "{written:?}");

    let closer = tokenizer.special_token_id("</think>").unwrap();
    biased_forced_call_round_trip(&s, json!({closer.to_string(): 100})).await;
}

/// DeepSeek-V3.1's template (llama.cpp's copy) on a tiny file with DeepSeek-V3's vocabulary: the
/// tools are described in the system prompt as its model card does; a forced call is the list
/// of one call, `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{…}` and the
/// end marks, every mark the vocabulary's token and kept in the text; the history renders it
/// back as written; it comes back through the API as the call, whole and streamed, and the
/// agent's next request answers from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deepseek_forced_calls_are_lists_of_marked_calls() {
    let template = include_str!("../src/model/chat/fixtures/deepseek-v3.1.jinja");
    let spec = TinyModelSpec {
        context_length: 8192,
        vocab: TinyVocab::new(VocabStyle::Gpt2 { pre: "deepseek-v3" }),
        ..TinyModelSpec::tiny(Family::Llama, WeightType::Q8_0)
    };
    let (s, reply) = forced_weather_call(spec, template, hearth::engine::ToolFormat::DeepSeek { fenced: false }).await;
    let tokenizer = &s.state.engine().model().tokenizer;
    let prompt = s.state.engine().tokenize_chat_with_tools(&[Message::user(PARIS)], &weather_tools()).unwrap();
    let prompt = tokenizer.decode(&prompt).unwrap();
    assert!(prompt.contains("## Tools\nYou have access to the following tools:\n\n### get_weather\n"), "{prompt:?}");
    let marks = ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"].map(|t| tokenizer.special_token_id(t));
    assert!(marks.iter().all(Option::is_some), "the tiny vocabulary has DeepSeek's marks");
    assert_eq!(&reply.tokens[..2], &[marks[0].unwrap(), marks[1].unwrap()]);
    assert_eq!(&reply.tokens[reply.tokens.len() - 2..], &[marks[3].unwrap(), marks[4].unwrap()]);
    let written = tokenizer.decode(&reply.tokens).unwrap();
    assert!(written.starts_with("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \""), "{written:?}");
    // The agent's next request renders the call back as written.
    let args = written.split("<｜tool▁sep｜>").nth(1).and_then(|a| a.split("<｜tool▁call▁end｜>").next()).unwrap();
    let call = json!({"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": args}});
    next_turn_renders_the_call_back(&s, &reply, &json!({"role": "user", "content": PARIS}), &call).await;
    // (A random model might open reasoning the template closed: `<think>` is kept from it.)
    let opener = tokenizer.special_token_id("<think>").unwrap();
    biased_forced_call_round_trip(&s, json!({opener.to_string(): -100})).await;
}

/// Nemotron Nano 2's, Apriel's and Apertus's templates (llama.cpp's copies) on tiny files: a
/// forced call is a JSON list of one call between the template's marks (Apertus's keyed by the
/// function's name), and comes back through the API as the call, whole and streamed (Apriel's
/// after its reasoning); the agent's next request renders it back as written (the cache holds)
/// and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_list_forced_calls_come_back_between_their_marks() {
    use hearth::engine::ListMarks;
    let cases = [
        (include_str!("../src/model/chat/fixtures/nvidia-nemotron-nano-v2.jinja"), Family::NemotronH, ListMarks::Nemotron, "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \""),
        (include_str!("../src/model/chat/fixtures/apriel-1.6-15b-thinker.jinja"), Family::Llama, ListMarks::Apriel, "<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \""),
        (include_str!("../src/model/chat/fixtures/apertus-8b-instruct.jinja"), Family::Llama, ListMarks::Apertus, "<|tools_prefix|>[{\"get_weather\": {\"city\": \""),
    ];
    for (template, family, marks, start) in cases {
        // (Nemotron Nano 2's prompt opens the reasoning unless the user says `/no_think`, and
        // Apriel's always: the call through the API waits for its end.)
        let question = if marks == ListMarks::Nemotron { "What is the weather in Paris? /no_think" } else { PARIS };
        let spec = TinyModelSpec {
            context_length: 8192,
            ..TinyModelSpec::tiny(family, WeightType::Q8_0)
        };
        let (s, reply) = forced_weather_call(spec, template, hearth::engine::ToolFormat::JsonList(marks)).await;
        let written = s.state.engine().model().tokenizer.decode(&reply.tokens).unwrap();
        assert!(written.starts_with(start), "{marks:?}: {written:?}");
        assert!(written.ends_with(&format!("\"}}}}]{}", marks.close())), "{marks:?}: {written:?}");
        if marks == ListMarks::Apriel {
            apriel_forced_call_waits_for_its_reasoning(&s, &reply).await;
        } else {
            forced_call_round_trip_asking(&s, &reply, question).await;
        }
    }
}

/// Apriel's prompt opens its reasoning, so a call the API forces waits for
/// `[BEGIN FINAL RESPONSE]` (which a tiny model never writes: the reply runs to its length as
/// reasoning, whether split or not); the call the engine forced (`reply`) renders back as
/// written in the agent's next request.
async fn apriel_forced_call_waits_for_its_reasoning(s: &TestServer, reply: &GenerationReport) {
    let user = json!({"role": "user", "content": PARIS});
    for format in ["auto", "none"] {
        let mut body = forced_call_request(&user, &json!([weather_tool()]));
        body["max_tokens"] = json!(40);
        body["reasoning_format"] = json!(format);
        let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
        let text = if format == "auto" { &message(&v)["reasoning_content"] } else { &message(&v)["content"] };
        assert!(!text.as_str().unwrap_or_default().is_empty() && message(&v)["tool_calls"].is_null(), "{v}");
    }
    let written = s.state.engine().model().tokenizer.decode(&reply.tokens).unwrap();
    let list = written.trim_start_matches("<tool_calls>").trim_end_matches("</tool_calls>");
    let args = serde_json::from_str::<Value>(list).unwrap()[0]["arguments"].to_string();
    let call = json!({"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": args}});
    next_turn_renders_the_call_back(s, reply, &user, &call).await;
}

/// The API's forced weather call under `logit_bias` (greedy, room for it): it comes back as
/// the call (a city and a unit of the tool's enums) with no content, streamed with no text
/// chunk showing its markup, and the agent's next request, with the call and its result,
/// answers from the cache.
async fn biased_forced_call_round_trip(s: &TestServer, logit_bias: Value) {
    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let mut body = forced_call_request(&user, &json!([weather_tool()]));
    body["max_tokens"] = json!(300);
    body["logit_bias"] = logit_bias;
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    assert_eq!(message(&v)["content"], Value::Null, "{v}");
    let call = message(&v)["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "get_weather", "{v}");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(["Paris", "Oslo", "Lima"].contains(&args["city"].as_str().unwrap()), "{v}");
    assert!(["C", "F"].contains(&args["unit"].as_str().unwrap()), "{v}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, bytes) = post(&s.app, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, StatusCode::OK);
    let (_, text) = streamed_parts(&bytes);
    assert_eq!(text, "", "no text chunk shows the call's markup: {:?}", sse_chunks(&bytes));
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &next_turn(&user, &call, "sunny", &json!([weather_tool()]))).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert!(v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0, "{v}");
}

/// The API's side of a forced weather call whose greedy reply was `reply`: the same request
/// comes back as the call (a city and a unit of the tool's enums), streamed with no text chunk
/// showing its markup; the agent's next request, with the call and its result, renders the
/// call back as the model wrote it (the cache holds) and answers.
async fn forced_call_round_trip(s: &TestServer, reply: &GenerationReport) {
    forced_call_round_trip_asking(s, reply, PARIS).await;
}

/// The user's question in the forced-call tests.
const PARIS: &str = "What is the weather in Paris?";

/// [`forced_call_round_trip`] where the user asks `question` through the API (the reply was to
/// [`PARIS`]): a question that also switches a template's reasoning off, as Nemotron Nano 2's
/// `/no_think`.
async fn forced_call_round_trip_asking(s: &TestServer, reply: &GenerationReport, question: &str) {
    let user = json!({"role": "user", "content": question});
    let (body, _, call) = forced_call_over_api_asking(s, None, question).await;

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, bytes) = post(&s.app, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, StatusCode::OK);
    let (_, text) = streamed_parts(&bytes);
    assert_eq!(text, "", "no text chunk shows the call's markup: {:?}", sse_chunks(&bytes));
    next_turn_renders_the_call_back(s, reply, &user, &call).await;
}

/// The agent's next request after the user's `user` and the model's call `call` (its greedy
/// reply was `reply`), with the call's result: it answers, the call renders back as the model
/// wrote it, and the prompt comes partly from the cache.
async fn next_turn_renders_the_call_back(s: &TestServer, reply: &GenerationReport, user: &Value, call: &Value) {
    let (engine, tools) = (s.state.engine(), weather_tools());
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &next_turn(user, call, "sunny", &json!([weather_tool()]))).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let written = engine.model().tokenizer.decode(&reply.tokens).unwrap();
    let rendered = engine
        .tokenize_chat_with_tools(
            &[Message::user(PARIS), {
                let mut m = Message::assistant(String::new());
                m.tool_calls = vec![hearth::engine::ToolCall {
                    id: "c1".into(),
                    name: "get_weather".into(),
                    arguments: call["function"]["arguments"].as_str().unwrap().to_owned(),
                }];
                m
            }, {
                // (With its result after it, as the next request has it: Nemotron Nano 2's
                // template renders a last turn of calls otherwise.)
                let mut m = Message::new(hearth::engine::Role::parse("tool"), "sunny");
                m.tool_call_id = Some("c1".into());
                m
            }],
            &tools,
        )
        .unwrap();
    let rendered = engine.model().tokenizer.decode(&rendered).unwrap();
    assert!(rendered.contains(&written), "the call renders back as written: {written:?} in {rendered:?}");
    assert!(v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0, "{v}");
}

/// The API's forced weather call (greedy, room for it; `kwargs` as `chat_template_kwargs`
/// where given): the request, the response, and the call, which must be `get_weather` with a
/// city and a unit of the tool's enums.
async fn forced_call_over_api(s: &TestServer, kwargs: Option<&Value>) -> (Value, Value, Value) {
    forced_call_over_api_asking(s, kwargs, PARIS).await
}

/// [`forced_call_over_api`] where the user asks `question`.
async fn forced_call_over_api_asking(s: &TestServer, kwargs: Option<&Value>, question: &str) -> (Value, Value, Value) {
    let user = json!({"role": "user", "content": question});
    let mut body = forced_call_request(&user, &json!([weather_tool()]));
    body["max_tokens"] = json!(300);
    if let Some(k) = kwargs {
        body["chat_template_kwargs"] = k.clone();
    }
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = message(&v)["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "get_weather", "{v}");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(["Paris", "Oslo", "Lima"].contains(&args["city"].as_str().unwrap()), "{v}");
    assert!(["C", "F"].contains(&args["unit"].as_str().unwrap()), "{v}");
    (body, v, call)
}

/// Granite 3.3's template (llama.cpp's copy): a forced call is `<|tool_call|>` and a list of one
/// call, and comes back through the API as the call; the agent's next request, with the call and
/// its result, renders (the call written into its turn as the model wrote it) and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granite_forced_call_comes_back_and_its_history_renders() {
    let template = include_str!("../src/model/chat/fixtures/granite-3.3-2b-instruct.jinja");
    let s = server_for(TinyModelSpec::tiny(Family::Granite, WeightType::Q8_0), Some(template));
    assert_eq!(s.state.engine().tool_format(), hearth::engine::ToolFormat::Granite);
    let tools = json!([weather_tool()]);
    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let mut body = forced_call_request(&user, &tools);
    body["max_tokens"] = json!(300);
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = v["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "get_weather", "{v}");
    let second = next_turn(&user, &call, "{\"sky\": \"clear\"}", &tools);
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &second).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached > 0, "the first request's prompt is served from the cache: {v}");
}

/// OpenAI's Responses API, on the same servers.
#[path = "structured/responses.rs"]
mod responses;

/// Anthropic's Messages API, on the same servers.
#[path = "structured/anthropic.rs"]
mod anthropic;

/// Ollama's API, on the same servers.
#[path = "structured/ollama.rs"]
mod ollama;

/// gpt-oss's template on a tiny gpt-oss file (harmony's special tokens): a forced call is a
/// harmony commentary message to `functions.get_weather` and comes back as the call, whole
/// and streamed; the agent's next request, with the call and its result, renders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpt_oss_forced_call_is_a_harmony_message_and_comes_back() {
    let s = server_for(TinyModelSpec::tiny(Family::GptOss, WeightType::Q8_0), None);
    let engine = s.state.engine();
    assert_eq!(engine.tool_format(), hearth::engine::ToolFormat::Harmony);
    let tools = weather_tools();
    let p1 = engine
        .tokenize_chat_with_tools(&[Message::user("What is the weather in Paris?")], &tools)
        .unwrap();
    let reply = forced_reply(engine, &tools, p1, 300).await;
    // Harmony's header tokens are kept in the text (the parser reads them); `<|call|>` stops.
    assert!(
        reply.text.starts_with("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \""),
        "{:?}",
        reply.text
    );
    assert!(reply.text.ends_with('}'), "{:?}", reply.text);

    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let mut body = forced_call_request(&user, &json!([weather_tool()]));
    body["max_tokens"] = json!(300);
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    assert!(message(&v)["content"].is_null(), "{v}");
    let call = &message(&v)["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{v}");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(["Paris", "Oslo", "Lima"].contains(&args["city"].as_str().unwrap()), "{v}");

    // Streamed: no text chunk shows the call's markup; one chunk carries the call.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, bytes) = post(&s.app, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, StatusCode::OK);
    let (reasoning, text) = streamed_parts(&bytes);
    assert_eq!((reasoning.as_str(), text.as_str()), ("", ""), "{:?}", sse_chunks(&bytes));
    let chunks = sse_chunks(&bytes);
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(calls.len(), 1, "{chunks:?}");
    assert_eq!(calls[0]["function"]["arguments"], call["function"]["arguments"], "greedy, the same call");

    // The agent's next request renders (the call as a harmony message to `functions.get_weather`,
    // the result from `functions.get_weather`) and reuses the cached system and user turns.
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &next_turn(&user, call, "sunny", &json!([weather_tool()]))).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert!(v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0, "{v}");

    // `reasoning_effort` reaches the template (its system message's `Reasoning: …`).
    let rendered = |effort: Option<&str>| {
        let mut kwargs = serde_json::Map::new();
        if let Some(e) = effort {
            kwargs.insert("reasoning_effort".into(), json!(e));
        }
        engine.chat_prompt(&[Message::user("Hi")], &[], &kwargs).unwrap().ids.len() as u64
    };
    assert_ne!(rendered(Some("minimal")), rendered(None), "the tiny vocabulary spells the two apart");
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "minimal", "max_tokens": 1});
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], rendered(Some("minimal")), "{v}");
    let bad = json!({"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "max"});
    let (status, v) = post_json(&s.app, "/v1/chat/completions", &bad).await;
    assert_eq!((status, v["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("reasoning_effort")), "{v}");
}
