//! Anthropic's Messages API (`/v1/messages`) on the tiny models: a turn is the chat route's
//! prompt and greedy reply in Anthropic's shapes; a forced call comes back as a `tool_use`
//! block, and the next turn (the block sent back with its `tool_result`) is served from the
//! prefix cache; the streamed events come in Anthropic's order and spell the same reply; a stop
//! sequence is reported; a thinking model's reasoning is a `thinking` block; bad input is a
//! 400 in Anthropic's error shape that queues nothing.

use super::*;

fn weather_tool_anthropic() -> Value {
    let f = &weather_tool()["function"];
    json!({"name": f["name"], "description": f["description"], "input_schema": f["parameters"]})
}

/// A streamed message's events: (the `event:` name, the data), in order.
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

/// The text blocks of a message, joined.
fn text(v: &Value) -> String {
    v["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {v}"))
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// All the prompt's tokens: Anthropic counts the cached ones apart.
fn prompt_tokens(v: &Value) -> u64 {
    v["usage"]["input_tokens"].as_u64().unwrap() + v["usage"]["cache_read_input_tokens"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_tool_use_is_the_chats_call_and_its_result_turn_hits_the_cache() {
    let s = server(Some(QWEN_TEMPLATE));
    let body = json!({
        "model": "tiny",
        "system": [{"type": "text", "text": "You are a weather bot."}],
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [weather_tool_anthropic()],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "temperature": 0,
        "max_tokens": 100,
    });
    let (status, m1) = post_json(&s.app, "/v1/messages", &body).await;
    assert_eq!(status, StatusCode::OK, "{m1}");
    assert_eq!((m1["type"].as_str(), m1["role"].as_str()), (Some("message"), Some("assistant")));
    assert!(m1["id"].as_str().unwrap().starts_with("msg_"), "{m1}");
    assert_eq!(m1["stop_reason"], "tool_use", "{m1}");
    let blocks = m1["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 1, "{m1}");
    let call = &blocks[0];
    assert_eq!((call["type"].as_str(), call["name"].as_str()), (Some("tool_use"), Some("get_weather")));
    assert!(["Paris", "Oslo", "Lima"].contains(&call["input"]["city"].as_str().unwrap()), "{m1}");

    // The same turn through the chat route: the same prompt, the same greedy call.
    let system = json!({"role": "system", "content": "You are a weather bot."});
    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let chat = json!({
        "messages": [system, user],
        "tools": [weather_tool()],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 0,
        "max_tokens": 100,
    });
    let (_, c1) = post_json(&s.app, "/v1/chat/completions", &chat).await;
    assert_eq!(Some(prompt_tokens(&m1)), c1["usage"]["prompt_tokens"].as_u64());
    let chat_args: Value = serde_json::from_str(message(&c1)["tool_calls"][0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(call["input"], chat_args);

    // The agent's next turn: the block sent back, then its result. Served from the cache.
    let mut next = body.clone();
    next["tool_choice"] = json!({"type": "auto"});
    next["max_tokens"] = json!(6);
    next["messages"] = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "sunny"}]},
    ]);
    let (status, m2) = post_json(&s.app, "/v1/messages", &next).await;
    assert_eq!(status, StatusCode::OK, "{m2}");
    let first = prompt_tokens(&m1);
    let cached = m2["usage"]["cache_read_input_tokens"].as_u64().unwrap();
    assert!(cached >= first / 16 * 16, "cached {cached} of the first turn's {first}: {m2}");
    let (status, counted) = post_json(&s.app, "/v1/messages/count_tokens", &next).await;
    assert_eq!(status, StatusCode::OK, "{counted}");
    assert_eq!(counted["input_tokens"].as_u64(), Some(prompt_tokens(&m2)));

    // Streamed: the call as one tool_use block, its input whole.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, bytes) = post(&s.app, "/v1/messages", &streamed).await;
    let events = events(&bytes);
    let partial: String = events.iter().filter_map(|(_, d)| d["delta"]["partial_json"].as_str()).collect();
    assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), call["input"]);
    let delta = &events.iter().find(|(n, _)| n == "message_delta").unwrap().1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_message_sends_anthropics_events_in_order_and_stops_at_a_sequence() {
    let s = server(Some(QWEN_TEMPLATE));
    let body = json!({
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Name three colours."}]}],
        "temperature": 0,
        "max_tokens": 12,
    });
    let (status, whole) = post_json(&s.app, "/v1/messages", &body).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, bytes) = post(&s.app, "/v1/messages", &streamed).await;
    assert_eq!(status, StatusCode::OK);
    let events = events(&bytes);
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "the event name is the type");
    }
    let mut kinds: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    kinds.dedup();
    assert_eq!(
        kinds,
        ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    );
    let deltas: String = events.iter().filter_map(|(_, d)| d["delta"]["text"].as_str()).collect();
    assert_eq!(deltas, text(&whole), "the stream spells the whole reply");
    let delta = &events.iter().find(|(n, _)| n == "message_delta").unwrap().1;
    assert_eq!(delta["delta"]["stop_reason"], whole["stop_reason"]);
    assert_eq!(delta["usage"]["output_tokens"], whole["usage"]["output_tokens"]);
    let start = &events[0].1["message"];
    assert_eq!(start["usage"]["input_tokens"].as_u64(), Some(prompt_tokens(&whole)));

    // A stop sequence inside that reply: the text before it, and which one stopped it.
    let reply = text(&whole);
    let chars: Vec<char> = reply.chars().collect();
    assert!(chars.len() >= 4, "{reply:?}");
    let cut: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let mut stopped = body.clone();
    stopped["stop_sequences"] = json!(["\u{1}never", cut]);
    let (_, m) = post_json(&s.app, "/v1/messages", &stopped).await;
    assert_eq!((m["stop_reason"].as_str(), m["stop_sequence"].as_str()), (Some("stop_sequence"), Some(cut.as_str())), "{m}");
    assert_eq!(text(&m), reply[..reply.find(&cut).unwrap()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thinking_models_reasoning_is_a_thinking_block() {
    let s = server(Some(OPEN_THINK_TEMPLATE));
    let chat = json!({
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
        "temperature": 1.0, "seed": 7, "max_tokens": 12, "ignore_eos": true,
    });
    let (_, c) = post_json(&s.app, "/v1/chat/completions", &chat).await;
    let (status, m) = post_json(&s.app, "/v1/messages", &chat).await;
    assert_eq!(status, StatusCode::OK, "{m}");
    assert_eq!(m["content"][0]["type"], "thinking", "{m}");
    assert_eq!(m["content"][0]["thinking"], message(&c)["reasoning_content"], "{m}");
    assert_eq!(m["stop_reason"], "max_tokens");
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    let (_, bytes) = post(&s.app, "/v1/messages", &streamed).await;
    let thinking: String = events(&bytes).iter().filter_map(|(_, d)| d["delta"]["thinking"].as_str()).collect();
    assert_eq!(thinking, m["content"][0]["thinking"].as_str().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_anthropic_errors_that_queue_nothing() {
    let s = server(Some(QWEN_TEMPLATE));
    let before = s.state.engine().stats().requests.submitted;
    for (patch, names) in [
        (json!({"max_tokens": null}), "max_tokens"),
        (json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}), "messages[0].content[0]"),
        (json!({"messages": [{"role": "system", "content": "x"}]}), "messages[0].role"),
        (json!({"messages": []}), "messages"),
        (json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}), "tools[0].type"),
        (json!({"tools": [{"name": "f", "input_schema": {"type": "strnig"}}]}), "tools[0].input_schema"),
        (json!({"tools": [weather_tool_anthropic()], "tool_choice": {"type": "tool", "name": "nope"}}), "tool_choice"),
        (json!({"temperature": -1}), "temperature"),
        (json!({"output_config": {"format": {"type": "json_schema", "schema": {"type": "strnig"}}}}), "output_config.format"),
        (json!({"output_config": {"format": {"type": "yaml"}}}), "output_config.format"),
    ] {
        let mut bad = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
        for (k, v) in patch.as_object().unwrap() {
            bad[k] = v.clone();
        }
        let (status, v) = post_json(&s.app, "/v1/messages", &bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert_eq!((v["type"].as_str(), v["error"]["type"].as_str()), (Some("error"), Some("invalid_request_error")), "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(names), "{names}: {v}");
    }
    assert_eq!(s.state.engine().stats().requests.submitted, before, "nothing was queued");
    let (status, v) = post_json(&s.app, "/v1/messages", &json!({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})).await;
    assert_eq!((status, v["error"]["type"].as_str()), (StatusCode::NOT_FOUND, Some("not_found_error")), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_format_schema_holds() {
    let s = server(Some(QWEN_TEMPLATE));
    let body = json!({
        "messages": [{"role": "user", "content": "Describe a person."}],
        "temperature": 1.0,
        "seed": 5,
        "max_tokens": 200,
        "output_config": {"format": {"type": "json_schema", "schema": person_schema()}},
    });
    let (status, m) = post_json(&s.app, "/v1/messages", &body).await;
    assert_eq!(status, StatusCode::OK, "{m}");
    assert_eq!(m["stop_reason"], "end_turn", "{m}");
    assert_person(&serde_json::from_str(&text(&m)).unwrap());
}
