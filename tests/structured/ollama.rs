//! Ollama's API (`/api/chat`, `/api/generate`, the model routes) on the tiny models: a chat is
//! the chat route's prompt and greedy reply in Ollama's shapes, streamed as lines of JSON by
//! default; a forced call comes back as `tool_calls` with object arguments, and the next turn
//! (sent back as Ollama's clients send it, without ids) renders the chat route's prompt and is
//! served from the prefix cache; `format` holds; a thinking model's reasoning is `thinking`
//! and `think: false` reaches the template; generate is a one-message chat, `raw` the
//! completions route, and `context` continues a reply; bad input is a 400 in Ollama's error
//! shape that queues nothing.

use super::*;

/// Prompt tokens the prefix cache has served so far.
fn hits(s: &TestServer) -> u64 {
    let c = s.state.engine().stats().cache;
    c.hit_tokens_device + c.hit_tokens_host
}

/// The lines of an NDJSON body, each parsed.
fn lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

/// A streamed reply's lines: the pieces of `field` (`content` of the message, or `response`)
/// joined, and the last line, which must be the only one `done`.
fn streamed(bytes: &[u8], chat: bool) -> (String, Value) {
    let lines = lines(bytes);
    let (last, pieces) = lines.split_last().unwrap_or_else(|| panic!("no lines"));
    assert_eq!(last["done"], true, "{last}");
    assert!(pieces.iter().all(|l| l["done"] == false && l["created_at"].is_string()), "{lines:?}");
    let text = pieces
        .iter()
        .filter_map(|l| if chat { l["message"]["content"].as_str() } else { l["response"].as_str() })
        .collect();
    (text, last.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_is_the_chat_routes_prompt_and_reply_whole_and_streamed() {
    let s = server(Some(QWEN_TEMPLATE));
    let messages = json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name three colours."},
    ]);
    let body = json!({"model": "tiny:latest", "messages": messages, "stream": false, "options": {"temperature": 0, "num_predict": 10}});
    let (status, whole) = post_json(&s.app, "/api/chat", &body).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    assert_eq!(whole["model"], "tiny:latest", "the name as sent: {whole}");
    assert_eq!((whole["done"].as_bool(), whole["done_reason"].as_str()), (Some(true), Some("length")), "{whole}");
    assert_eq!(whole["message"]["role"], "assistant");
    assert_eq!(whole["eval_count"], 10, "{whole}");
    for field in ["total_duration", "load_duration", "prompt_eval_duration", "eval_duration"] {
        assert!(whole[field].is_u64(), "{field}: {whole}");
    }
    let chat = json!({"messages": messages, "temperature": 0, "max_tokens": 10});
    let (_, c) = post_json(&s.app, "/v1/chat/completions", &chat).await;
    assert_eq!(whole["message"]["content"], message(&c)["content"], "{whole} {c}");
    assert_eq!(whole["prompt_eval_count"], c["usage"]["prompt_tokens"]);

    // Streamed by default, one object a line.
    let mut body = body.clone();
    body.as_object_mut().unwrap().remove("stream");
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/chat")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = s.app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/x-ndjson");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let (text, last) = streamed(&bytes, true);
    assert_eq!(text, whole["message"]["content"].as_str().unwrap());
    assert_eq!((last["done_reason"].as_str(), last["eval_count"].as_u64()), (Some("length"), Some(10)), "{last}");
    assert_eq!(last["message"]["content"], "");

    // No messages: the model is loaded, nothing runs.
    let before = s.state.engine().stats().requests.submitted;
    let (status, v) = post_json(&s.app, "/api/chat", &json!({"model": "tiny", "messages": []})).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!((v["done"].as_bool(), v["done_reason"].as_str()), (Some(true), Some("load")), "{v}");
    assert_eq!(s.state.engine().stats().requests.submitted, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_call_comes_back_as_tool_calls_and_its_result_turn_hits_the_cache() {
    let s = server(Some(QWEN_TEMPLATE));
    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let body = json!({
        "model": "tiny",
        "messages": [user],
        "tools": [weather_tool()],
        "tool_choice": "required",
        "stream": false,
        "options": {"temperature": 0, "num_predict": 100},
    });
    let (status, first) = post_json(&s.app, "/api/chat", &body).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["done_reason"], "stop", "{first}");
    let calls = first["message"]["tool_calls"].as_array().unwrap_or_else(|| panic!("no calls: {first}"));
    assert_eq!(calls.len(), 1, "{first}");
    let call = &calls[0]["function"];
    assert_eq!(call["name"], "get_weather");
    assert!(["Paris", "Oslo", "Lima"].contains(&call["arguments"]["city"].as_str().unwrap()), "an object: {first}");

    // Streamed: one line carries the call, whole.
    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let (_, bytes) = post(&s.app, "/api/chat", &streamed_body).await;
    let carried: Vec<Value> = lines(&bytes).into_iter().filter(|l| l["message"]["tool_calls"].is_array()).collect();
    assert_eq!(carried.len(), 1, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(carried[0]["message"]["tool_calls"][0]["function"], *call);

    // The next turn as Ollama's clients send it: the call without an id, the result by name.
    let history = json!([
        user,
        {"role": "assistant", "content": "", "tool_calls": [{"function": call}]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
    ]);
    let next = json!({"model": "tiny", "messages": history, "tools": [weather_tool()], "stream": false, "options": {"temperature": 0, "num_predict": 6}});
    let cached_before = hits(&s);
    let (status, second) = post_json(&s.app, "/api/chat", &next).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    let hit = hits(&s) - cached_before;
    let first_prompt = first["prompt_eval_count"].as_u64().unwrap();
    assert!(hit >= first_prompt / 16 * 16, "the first turn's {first_prompt} tokens are cached; {hit} were served");

    // The same history through the chat route, its call under the id hearth gave it.
    let arguments = call["arguments"].to_string();
    let openai = json!({
        "messages": [
            user,
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call00000", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "call00000", "name": "get_weather", "content": "sunny"},
        ],
        "tools": [weather_tool()],
        "temperature": 0,
        "max_tokens": 6,
    });
    let (_, c) = post_json(&s.app, "/v1/chat/completions", &openai).await;
    assert_eq!(second["prompt_eval_count"], c["usage"]["prompt_tokens"], "{second} {c}");
    assert_eq!(second["message"]["content"], message(&c)["content"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_holds_and_a_thinking_models_reasoning_is_thinking() {
    let s = server(None);
    for seed in 0..3u64 {
        let body = json!({
            "messages": [{"role": "user", "content": format!("Describe person {seed}.")}],
            "format": person_schema(),
            "stream": false,
            "options": {"temperature": 1.0, "seed": seed, "num_predict": 200},
        });
        let (status, v) = post_json(&s.app, "/api/chat", &body).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        let text = v["message"]["content"].as_str().unwrap();
        assert_person(&serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")));
    }
    let body = json!({"prompt": "data:", "format": "json", "stream": false, "options": {"temperature": 0, "num_predict": 64}});
    let (status, v) = post_json(&s.app, "/api/generate", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let parsed: Value = serde_json::from_str(v["response"].as_str().unwrap()).unwrap_or_else(|e| panic!("{e}: {v}"));
    assert!(parsed.is_object(), "{v}");

    // A template that opens the reasoning: the tiny model never closes it, so all is thinking.
    let s = server(Some(OPEN_THINK_TEMPLATE));
    let body = json!({
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
        "stream": false,
        "options": {"temperature": 1.0, "seed": 7, "num_predict": 12},
    });
    let (status, v) = post_json(&s.app, "/api/chat", &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let thinking = v["message"]["thinking"].as_str().unwrap_or_else(|| panic!("no thinking: {v}"));
    assert!(!thinking.is_empty());
    assert_eq!(v["message"]["content"], "", "{v}");
    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let (_, bytes) = post(&s.app, "/api/chat", &streamed_body).await;
    let joined: String = lines(&bytes).iter().filter_map(|l| l["message"]["thinking"].as_str()).collect();
    assert_eq!(joined.trim(), thinking);

    // `think: false` is Qwen3's `enable_thinking: false`.
    let s = server(Some(QWEN3_TEMPLATE));
    let hi = json!({"messages": [{"role": "user", "content": "Hi"}], "stream": false, "options": {"temperature": 0, "num_predict": 2}});
    let (_, thinks) = post_json(&s.app, "/api/chat", &hi).await;
    let mut off = hi.clone();
    off["think"] = json!(false);
    let (status, not) = post_json(&s.app, "/api/chat", &off).await;
    assert_eq!(status, StatusCode::OK, "{not}");
    let kwargs = json!({"enable_thinking": false}).as_object().unwrap().clone();
    let expected = s.state.engine().chat_prompt(&[Message::user("Hi")], &[], &kwargs).unwrap();
    assert_eq!(not["prompt_eval_count"].as_u64(), Some(expected.ids.len() as u64));
    assert!(not["prompt_eval_count"].as_u64() > thinks["prompt_eval_count"].as_u64());
    let mut on = hi.clone();
    on["think"] = json!(true);
    let (status, v) = post_json(&s.app, "/api/chat", &on).await;
    assert_eq!(status, StatusCode::OK, "{v}");

    // Reasoning asked of a model whose template has none: Ollama's 400.
    let s = server(None);
    assert!(s.state.engine().model().info.reasoning.is_none());
    for (route, mut body) in [("/api/chat", hi.clone()), ("/api/generate", json!({"prompt": "Hi", "stream": false}))] {
        body["think"] = json!(true);
        let (status, v) = post_json(&s.app, route, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{route}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| e.contains("does not support thinking")), "{route}: {v}");
        body["think"] = json!(false);
        let (status, v) = post_json(&s.app, route, &body).await;
        assert_eq!(status, StatusCode::OK, "{route}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_is_a_chat_of_one_message_raw_is_the_prompt_and_context_continues() {
    let s = server(Some(QWEN_TEMPLATE));
    let body = json!({"prompt": "Count to three.", "system": "Be brief.", "stream": false, "options": {"temperature": 0, "num_predict": 8}});
    let (status, g) = post_json(&s.app, "/api/generate", &body).await;
    assert_eq!(status, StatusCode::OK, "{g}");
    let chat = json!({
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to three."}],
        "temperature": 0,
        "max_tokens": 8,
    });
    let (_, c) = post_json(&s.app, "/v1/chat/completions", &chat).await;
    assert_eq!(g["response"], message(&c)["content"], "{g} {c}");
    assert_eq!(g["prompt_eval_count"], c["usage"]["prompt_tokens"]);
    let context: Vec<u64> = g["context"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(context.len() as u64, g["prompt_eval_count"].as_u64().unwrap() + g["eval_count"].as_u64().unwrap());

    // Streamed: the same text, `context` on the last line.
    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let (_, bytes) = post(&s.app, "/api/generate", &streamed_body).await;
    let (text, last) = streamed(&bytes, false);
    assert_eq!(text, g["response"].as_str().unwrap());
    assert_eq!(last["context"], g["context"]);

    // `context` continues: its ids, then the next turn's prompt; the completions route on the
    // same ids gives the same reply.
    let next = json!({"prompt": "And to four?", "context": context, "stream": false, "options": {"temperature": 0, "num_predict": 6}});
    let (status, g2) = post_json(&s.app, "/api/generate", &next).await;
    assert_eq!(status, StatusCode::OK, "{g2}");
    let ids: Vec<u64> = g2["context"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(&ids[..context.len()], &context[..]);
    let prompt = &ids[..g2["prompt_eval_count"].as_u64().unwrap() as usize];
    let completion = json!({"prompt": prompt, "temperature": 0, "max_tokens": 6});
    let (_, c2) = post_json(&s.app, "/v1/completions", &completion).await;
    assert_eq!(g2["response"], c2["choices"][0]["text"], "{g2} {c2}");

    // raw: the prompt as it is, as /v1/completions takes it; no context comes back.
    let raw = json!({"prompt": "Once upon a time", "raw": true, "stream": false, "options": {"temperature": 0, "num_predict": 6}});
    let (status, r) = post_json(&s.app, "/api/generate", &raw).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let (_, c3) = post_json(&s.app, "/v1/completions", &json!({"prompt": "Once upon a time", "temperature": 0, "max_tokens": 6})).await;
    assert_eq!(r["response"], c3["choices"][0]["text"]);
    assert!(r.get("context").is_none(), "{r}");

    // No prompt: loaded.
    let (_, l) = post_json(&s.app, "/api/generate", &json!({"model": "tiny"})).await;
    assert_eq!(l["done_reason"], "load", "{l}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ollama_requests_are_errors_in_its_shape_that_queue_nothing() {
    let s = server(Some(QWEN_TEMPLATE));
    let before = s.state.engine().stats().requests.submitted;
    let user = json!([{"role": "user", "content": "hi"}]);
    for (body, status, mentions) in [
        (json!({"messages": user, "options": {"temperature": "hot"}}), StatusCode::BAD_REQUEST, "options.temperature"),
        (json!({"messages": user, "options": {"num_predict": 0}}), StatusCode::BAD_REQUEST, "num_predict"),
        (json!({"messages": user, "format": "yaml"}), StatusCode::BAD_REQUEST, "format"),
        (json!({"messages": user, "format": {"type": "strnig"}}), StatusCode::BAD_REQUEST, "format"),
        (json!({"messages": user, "think": "max"}), StatusCode::BAD_REQUEST, "think"),
        (json!({"messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}), StatusCode::BAD_REQUEST, "images"),
        (json!({"messages": [{"role": "robot", "content": "hi"}]}), StatusCode::BAD_REQUEST, "messages[0].role"),
        (json!({"messages": user, "tools": [{"type": "function"}]}), StatusCode::BAD_REQUEST, "tools[0]"),
        (json!({"model": "llama3", "messages": user}), StatusCode::NOT_FOUND, "llama3"),
    ] {
        let (got, v) = post_json(&s.app, "/api/chat", &body).await;
        assert_eq!(got, status, "{body}: {v}");
        let error = v["error"].as_str().unwrap_or_else(|| panic!("Ollama's shape: {v}"));
        assert!(error.contains(mentions), "{body}: {error}");
    }
    for body in [json!({"prompt": "x", "suffix": "y"}), json!({"prompt": "x", "template": "{{ .Prompt }}"}), json!({"prompt": "x", "context": [-1]})] {
        let (got, v) = post_json(&s.app, "/api/generate", &body).await;
        assert_eq!(got, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }
    let (got, v) = post_json(&s.app, "/api/chat", &json!({"messages": user, "options": {"num_ctx": 99999, "mirostat": 2, "temperature": 0, "num_predict": 1}, "keep_alive": "5m", "stream": false})).await;
    assert_eq!(got, StatusCode::OK, "options hearth does not act on are ignored: {v}");
    assert_eq!(s.state.engine().stats().requests.submitted, before + 1, "only the good request was queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_routes_describe_the_loaded_model() {
    let s = server(Some(QWEN_TEMPLATE));
    let get = |uri: &'static str| {
        let app = s.app.clone();
        async move {
            let request = Request::builder().uri(uri).body(Body::empty()).unwrap();
            let response = app.oneshot(request).await.unwrap();
            let status = response.status();
            (status, response.into_body().collect().await.unwrap().to_bytes())
        }
    };
    let (status, root) = get("/").await;
    assert_eq!((status, &root[..]), (StatusCode::OK, &b"Ollama is running"[..]));
    let (_, version) = get("/api/version").await;
    let version: Value = serde_json::from_slice(&version).unwrap();
    assert!(version["version"].as_str().unwrap().starts_with("0."), "{version}");
    let (_, tags) = get("/api/tags").await;
    let tags: Value = serde_json::from_slice(&tags).unwrap();
    let m = &tags["models"][0];
    assert_eq!((m["name"].as_str(), m["model"].as_str()), (Some("tiny"), Some("tiny")), "{tags}");
    assert_eq!(m["details"]["format"], "gguf");
    assert_eq!(m["details"]["family"], "qwen2");
    assert_eq!(m["details"]["quantization_level"], "Q8_0");
    assert!(m["size"].as_u64().unwrap() > 0 && m["modified_at"].is_string(), "{m}");
    let (_, ps) = get("/api/ps").await;
    let ps: Value = serde_json::from_slice(&ps).unwrap();
    assert_eq!(ps["models"][0]["context_length"].as_u64(), Some(s.state.engine().model_info().context_length as u64));

    let (status, show) = post_json(&s.app, "/api/show", &json!({"model": "tiny:latest"})).await;
    assert_eq!(status, StatusCode::OK, "{show}");
    assert_eq!(show["template"].as_str(), Some(QWEN_TEMPLATE));
    assert_eq!(show["capabilities"], json!(["completion", "tools"]));
    assert_eq!(show["model_info"]["general.architecture"], "qwen2");
    assert!(show["model_info"]["qwen2.context_length"].is_u64(), "{show}");
    let (status, v) = post_json(&s.app, "/api/show", &json!({"name": "llama3"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");

    let (status, v) = post_json(&s.app, "/api/pull", &json!({"model": "tiny"})).await;
    assert_eq!((status, v["status"].as_str()), (StatusCode::OK, Some("success")), "{v}");
    let (status, v) = post_json(&s.app, "/api/pull", &json!({"model": "llama3"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");
    let (status, v) = post_json(&s.app, "/api/create", &json!({"model": "mine", "from": "tiny"})).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{v}");
    assert!(v["error"].as_str().unwrap().contains("--model"), "{v}");
}
