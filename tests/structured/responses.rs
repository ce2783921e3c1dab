//! OpenAI's Responses API (`/v1/responses`) on the tiny models: a turn continued through
//! `previous_response_id` is the same prompt, and the same greedy reply, as the whole history
//! sent to `/v1/chat/completions`, and is served from the prefix cache; the streamed events
//! come in OpenAI's order and spell the same reply; a forced call comes back as a
//! `function_call` item whose replay hits the cache; a thinking model's reasoning is a
//! `reasoning` item; bad input is a 400 naming the field that queues nothing.

use super::*;

/// A Responses request in the shape OpenAI's SDK sends it.
fn weather_tool_flat() -> Value {
    let nested = weather_tool();
    let mut flat = nested["function"].clone();
    flat["type"] = json!("function");
    flat
}

async fn get(app: &Router, uri: &str, method: Method) -> (StatusCode, Value) {
    let request = Request::builder().method(method).uri(uri).body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// The `output_text` of a response's message items, joined (the SDK's `output_text`).
fn output_text(v: &Value) -> String {
    v["output"]
        .as_array()
        .unwrap_or_else(|| panic!("no output: {v}"))
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

/// A streamed response's events: (the `event:` name, the data), in order.
fn events(bytes: &[u8]) -> Vec<(String, Value)> {
    let text = String::from_utf8_lossy(bytes);
    text.split("\n\n")
        .filter(|e| e.lines().any(|l| l.starts_with("data: ")))
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_owned();
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("");
            (name, serde_json::from_str(data).unwrap_or_else(|err| panic!("{err}: {data}")))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_continued_by_its_id_is_the_chat_with_the_whole_history() {
    let s = server(Some(QWEN_TEMPLATE));
    let first = json!({
        "instructions": "Answer briefly.",
        "input": "What is the capital of France?",
        "temperature": 0,
        "max_output_tokens": 12,
    });
    let (status, r1) = post_json(&s.app, "/v1/responses", &first).await;
    assert_eq!(status, StatusCode::OK, "{r1}");
    assert_eq!(r1["object"], "response");
    assert!(r1["id"].as_str().unwrap().starts_with("resp_"), "{r1}");
    assert_eq!(r1["instructions"], "Answer briefly.");
    assert_eq!(r1["max_output_tokens"], 12);
    let item = &r1["output"][0];
    assert_eq!((item["type"].as_str(), item["role"].as_str()), (Some("message"), Some("assistant")), "{r1}");
    assert!(item["id"].as_str().unwrap().starts_with("msg_"), "{r1}");
    let text1 = output_text(&r1);
    let usage = &r1["usage"];
    let prompt1 = usage["input_tokens"].as_u64().unwrap();
    assert_eq!(usage["total_tokens"].as_u64(), Some(prompt1 + usage["output_tokens"].as_u64().unwrap()));
    if usage["output_tokens"] == 12 {
        assert_eq!((r1["status"].as_str(), r1["incomplete_details"]["reason"].as_str()), (Some("incomplete"), Some("max_output_tokens")));
    } else {
        assert_eq!(r1["status"], "completed", "{r1}");
    }

    // The same turn as a chat: the same prompt and the same greedy reply.
    let system = json!({"role": "system", "content": "Answer briefly."});
    let user1 = json!({"role": "user", "content": "What is the capital of France?"});
    let chat = json!({"messages": [system, user1], "temperature": 0, "max_tokens": 12});
    let (_, c1) = post_json(&s.app, "/v1/chat/completions", &chat).await;
    assert_eq!(c1["usage"]["prompt_tokens"].as_u64(), Some(prompt1));
    assert_eq!(message(&c1)["content"], text1.as_str());

    // The next turn sends only what is new; the history comes from the store and the cache.
    let second = json!({
        "previous_response_id": r1["id"],
        "instructions": "Answer briefly.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "And of Norway?"}]}],
        "temperature": 0,
        "max_output_tokens": 12,
    });
    let (status, r2) = post_json(&s.app, "/v1/responses", &second).await;
    assert_eq!(status, StatusCode::OK, "{r2}");
    assert_eq!(r2["previous_response_id"], r1["id"]);
    let cached = r2["usage"]["input_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached >= prompt1 / 16 * 16, "cached {cached} of the first turn's {prompt1} tokens: {r2}");
    let chat2 = json!({
        "messages": [system, user1, {"role": "assistant", "content": text1}, {"role": "user", "content": "And of Norway?"}],
        "temperature": 0,
        "max_tokens": 12,
    });
    let (_, c2) = post_json(&s.app, "/v1/chat/completions", &chat2).await;
    assert_eq!(c2["usage"]["prompt_tokens"], r2["usage"]["input_tokens"], "{c2} {r2}");
    assert_eq!(message(&c2)["content"], output_text(&r2).as_str());

    // Stored: retrieved as it was returned, until deleted.
    let uri = format!("/v1/responses/{}", r1["id"].as_str().unwrap());
    assert_eq!(get(&s.app, &uri, Method::GET).await, (StatusCode::OK, r1.clone()));
    let (status, deleted) = get(&s.app, &uri, Method::DELETE).await;
    assert_eq!((status, &deleted["deleted"]), (StatusCode::OK, &json!(true)), "{deleted}");
    assert_eq!(get(&s.app, &uri, Method::GET).await.0, StatusCode::NOT_FOUND);
    let (status, v) = post_json(&s.app, "/v1/responses", &second).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("previous_response_id"), "{v}");

    // `store: false` keeps nothing.
    let mut unstored = first.clone();
    unstored["store"] = json!(false);
    let (_, r3) = post_json(&s.app, "/v1/responses", &unstored).await;
    assert_eq!(r3["store"], false);
    let uri = format!("/v1/responses/{}", r3["id"].as_str().unwrap());
    assert_eq!(get(&s.app, &uri, Method::GET).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_response_sends_openais_events_in_order() {
    let s = server(Some(QWEN_TEMPLATE));
    let body = json!({"input": "Name three colours.", "temperature": 0, "max_output_tokens": 10});
    let (_, whole) = post_json(&s.app, "/v1/responses", &body).await;
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, bytes) = post(&s.app, "/v1/responses", &streamed).await;
    assert_eq!(status, StatusCode::OK);
    let events = events(&bytes);
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str(), "the event name is the type");
        assert_eq!(data["sequence_number"], i, "{data}");
    }
    let mut kinds: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    kinds.dedup();
    let last = if whole["status"] == "completed" { "response.completed" } else { "response.incomplete" };
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            last,
        ]
    );
    let deltas: String = events.iter().filter_map(|(_, d)| d["delta"].as_str()).collect();
    assert_eq!(deltas, output_text(&whole), "the stream spells the whole reply");
    let (_, end) = events.last().unwrap();
    let response = &end["response"];
    assert_eq!(response["id"], events[0].1["response"]["id"], "one response id throughout");
    assert_eq!(output_text(response), deltas);
    assert_eq!(response["usage"], whole["usage"].clone().tap_cached(response));
    let item_id = &events[2].1["item"]["id"];
    assert_eq!(&response["output"][0]["id"], item_id);
    // Stored when the stream ends.
    let uri = format!("/v1/responses/{}", response["id"].as_str().unwrap());
    assert_eq!(get(&s.app, &uri, Method::GET).await, (StatusCode::OK, response.clone()));
}

/// The second request's `cached_tokens` may differ from the first's (the first filled the cache).
trait TapCached {
    fn tap_cached(self, other: &Value) -> Value;
}

impl TapCached for Value {
    fn tap_cached(mut self, other: &Value) -> Value {
        self["input_tokens_details"]["cached_tokens"] = other["usage"]["input_tokens_details"]["cached_tokens"].clone();
        self
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_call_is_a_function_call_item_and_its_replay_hits_the_cache() {
    let s = server(Some(QWEN_TEMPLATE));
    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let body = json!({
        "input": [user],
        "tools": [weather_tool_flat(), {"type": "function", "name": "get_time"}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "temperature": 0,
        "max_output_tokens": 100,
    });
    let (status, r1) = post_json(&s.app, "/v1/responses", &body).await;
    assert_eq!(status, StatusCode::OK, "{r1}");
    let output = r1["output"].as_array().unwrap();
    assert_eq!(output.len(), 1, "only the call: {r1}");
    let call = &output[0];
    assert_eq!(call["type"], "function_call", "{r1}");
    assert_eq!(call["name"], "get_weather");
    assert!(call["call_id"].as_str().unwrap().starts_with("call_"), "{r1}");
    assert!(call["id"].as_str().unwrap().starts_with("fc_"), "{r1}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(["Paris", "Oslo", "Lima"].contains(&args["city"].as_str().unwrap()), "{args}");

    // A stateless agent replays the output items with the result: the prefix cache serves
    // the first request's prompt (the call renders to the tokens the model wrote).
    let prompt1 = r1["usage"]["input_tokens"].as_u64().unwrap();
    let mut input = vec![user.clone()];
    input.extend(output.iter().cloned());
    input.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": "{\"sky\": \"clear\"}"}));
    let next = json!({"input": input, "tools": body["tools"], "temperature": 0, "max_output_tokens": 6});
    let (status, r2) = post_json(&s.app, "/v1/responses", &next).await;
    assert_eq!(status, StatusCode::OK, "{r2}");
    let cached = r2["usage"]["input_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached >= prompt1 / 16 * 16, "cached {cached} of {prompt1}: {r2}");
    // The same through previous_response_id: the same prompt.
    let by_id = json!({
        "previous_response_id": r1["id"],
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "{\"sky\": \"clear\"}"}],
        "tools": body["tools"],
        "temperature": 0,
        "max_output_tokens": 6,
    });
    let (status, r3) = post_json(&s.app, "/v1/responses", &by_id).await;
    assert_eq!(status, StatusCode::OK, "{r3}");
    assert_eq!(r3["usage"]["input_tokens"], r2["usage"]["input_tokens"]);
    assert_eq!(output_text(&r3), output_text(&r2));

    // Streamed: the call's item, its arguments whole, no text.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, bytes) = post(&s.app, "/v1/responses", &streamed).await;
    let events = events(&bytes);
    let args_done = events
        .iter()
        .find(|(n, _)| n == "response.function_call_arguments.done")
        .unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(args_done.1["arguments"], call["arguments"], "greedy: the same call");
    assert!(!events.iter().any(|(n, _)| n == "response.output_text.delta"), "{events:?}");
    assert_eq!(events.last().unwrap().1["response"]["output"][0]["type"], "function_call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thinking_models_reasoning_is_a_reasoning_item() {
    let s = server(Some(OPEN_THINK_TEMPLATE));
    let body = json!({"input": "Why is the sky blue?", "temperature": 1.0, "seed": 7, "max_output_tokens": 12, "ignore_eos": true});
    let chat = json!({
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
        "temperature": 1.0, "seed": 7, "max_tokens": 12, "ignore_eos": true,
    });
    let (_, c) = post_json(&s.app, "/v1/chat/completions", &chat).await;
    let (status, r) = post_json(&s.app, "/v1/responses", &body).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let reasoning = &r["output"][0];
    assert_eq!(reasoning["type"], "reasoning", "{r}");
    assert_eq!(reasoning["content"][0]["text"], message(&c)["reasoning_content"], "{r}");
    assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 12, "{r}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, bytes) = post(&s.app, "/v1/responses", &streamed).await;
    let events = events(&bytes);
    let deltas: String = events
        .iter()
        .filter(|(n, _)| n == "response.reasoning_text.delta")
        .filter_map(|(_, d)| d["delta"].as_str())
        .collect();
    assert_eq!(deltas, reasoning["content"][0]["text"].as_str().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_schema_text_format_holds_and_bad_requests_are_400s_naming_the_field() {
    let s = server(Some(QWEN_TEMPLATE));
    let body = json!({
        "input": "Describe a person.",
        "temperature": 1.0,
        "seed": 5,
        "max_output_tokens": 200,
        "text": {"format": {"type": "json_schema", "name": "person", "schema": person_schema(), "strict": true}},
    });
    let (status, r) = post_json(&s.app, "/v1/responses", &body).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["status"], "completed", "{r}");
    assert_person(&serde_json::from_str(&output_text(&r)).unwrap());
    assert_eq!(r["text"]["format"]["name"], "person");

    let before = s.state.engine().stats().requests.submitted;
    for (patch, param) in [
        (json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}), "input[0].content"),
        (json!({"input": []}), "input"),
        (json!({"input": 5}), "input"),
        (json!({"tools": [{"type": "web_search"}]}), "tools[0].type"),
        (json!({"tools": [{"type": "function", "description": "no name"}]}), "tools[0].name"),
        (json!({"tools": [{"type": "function", "name": "f", "parameters": {"type": "strnig"}}]}), "tools[0].parameters"),
        (json!({"tools": [weather_tool_flat()], "tool_choice": {"type": "function", "name": "nope"}}), "tool_choice"),
        (json!({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "strnig"}}}}), "text.format"),
        (json!({"text": {"format": {"type": "yaml"}}}), "text.format.type"),
        (json!({"instructions": 3}), "instructions"),
        (json!({"background": true}), "background"),
        (json!({"max_output_tokens": 0}), "max_output_tokens"),
        (json!({"temperature": -1}), "temperature"),
    ] {
        let mut bad = json!({"input": "hi", "max_output_tokens": 4});
        for (k, v) in patch.as_object().unwrap() {
            bad[k] = v.clone();
        }
        let (status, v) = post_json(&s.app, "/v1/responses", &bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert_eq!(v["error"]["param"], param, "{bad}: {v}");
    }
    assert_eq!(s.state.engine().stats().requests.submitted, before, "nothing was queued");
    let (status, _) = post_json(&s.app, "/v1/responses", &json!({"input": "hi", "previous_response_id": "resp_nope"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
