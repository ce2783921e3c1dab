"""Drives `hearth --headless`'s /v1/messages with the official `anthropic` client, as a coding
agent built for Claude would: a forced tool call, its result sent back with the whole history
(served from the prefix cache), the answer streamed through the SDK's helper,
`count_tokens`, and a JSON-schema reply (`output_config.format`). Run by tests/openai_client.rs:

    python3 anthropic_messages.py BASE_URL MODEL

BASE_URL is the server's OpenAI base (`http://ADDR/v1`); Anthropic's client adds `/v1` itself.
Exits non-zero (an assertion) on anything Anthropic's clients would not accept.
"""

import json
import sys

import anthropic

base_url, model = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key="unused")

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
SYSTEM = "You are a helpful assistant. Use the tools when needed."
# This SDK no longer sends sampling fields; hearth still reads them (older agents send them).
GREEDY = {"temperature": 0}

messages = [{"role": "user", "content": "What is the weather like in Paris today?"}]
m1 = client.messages.create(model=model, max_tokens=120, system=SYSTEM, messages=messages, tools=[WEATHER],
                            tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY)
assert m1.stop_reason == "tool_use", m1
uses = [b for b in m1.content if b.type == "tool_use"]
assert len(uses) == 1 and uses[0].name == "get_weather", m1.content
call = uses[0]
assert call.input["city"] in ("Paris", "London", "Tokyo") and call.input["unit"] in ("celsius", "fahrenheit"), call.input

messages += [
    {"role": "assistant", "content": m1.content},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                  "content": json.dumps({"city": call.input["city"], "temperature": 21, "sky": "sunny"})}]},
]
final = dict(model=model, max_tokens=40, system=SYSTEM, messages=messages, tools=[WEATHER], extra_body=GREEDY)
m2 = client.messages.create(**final)
assert m2.stop_reason in ("end_turn", "max_tokens", "tool_use"), m2
cached = m2.usage.cache_read_input_tokens
assert cached and cached > 0, f"the second step reused nothing of the first: {m2.usage}"
text = "".join(b.text for b in m2.content if b.type == "text")

streamed = ""
with client.messages.stream(**final) as stream:
    for piece in stream.text_stream:
        streamed += piece
    last = stream.get_final_message()
assert streamed == text == "".join(b.text for b in last.content if b.type == "text"), (streamed, text, last)
assert last.stop_reason == m2.stop_reason, (last.stop_reason, m2.stop_reason)

counted = client.messages.count_tokens(model=model, system=SYSTEM, messages=messages, tools=[WEATHER])
assert counted.input_tokens == m2.usage.input_tokens + cached, (counted, m2.usage)

rating = client.messages.create(
    model=model, max_tokens=40, extra_body=GREEDY,
    messages=[{"role": "user", "content": "Rate Paris from 0 to 9 as JSON."}],
    output_config={"format": {"type": "json_schema", "schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]},
                       "score": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["city", "score"], "additionalProperties": False}}},
)
v = json.loads(rating.content[0].text)
assert v["city"] in ("Paris", "Rome") and 0 <= v["score"] <= 9, v

try:
    client.messages.create(model=model, max_tokens=10, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    raise AssertionError("an image was accepted")
except anthropic.BadRequestError as e:
    assert "image" in str(e), e

print(f"anthropic: called {call.name}({json.dumps(call.input)}); answer {text!r}; cached {cached}/{counted.input_tokens}")
print("ok")
