"""Drives `hearth --headless` with the official `openai` client: a two-step tool call (the
request with `tools`, the tool's result sent back, the final answer), whole and streamed, and
a `response_format` JSON schema, then the sampling fields (penalties, `logit_bias`,
`parallel_tool_calls`), then `n` seeded choices whole and streamed and a batch of prompts, then the same tool call through the Responses API
(`client.responses`: `previous_response_id`, streamed events, retrieve and delete). Run by
tests/openai_client.rs:

    python3 openai_tools.py BASE_URL MODEL

Exits non-zero (an assertion) on anything OpenAI's clients would not accept.
"""

import json
import sys

import openai
from openai import OpenAI

base_url, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base_url, api_key="unused")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TOOL_CHOICE = {"type": "function", "function": {"name": "get_weather"}}


def first_call(messages, stream):
    """The first step: the model must call get_weather. Returns (id, name, arguments, cached)."""
    args = dict(model=model, messages=messages, tools=[WEATHER], tool_choice=TOOL_CHOICE,
                temperature=0, max_tokens=120)
    if not stream:
        r = client.chat.completions.create(**args)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        calls = choice.message.tool_calls
        assert calls and len(calls) == 1, choice.message
        c = calls[0]
        assert c.type == "function", c
        return c.id, c.function.name, c.function.arguments
    parts = {}
    finish = None
    for chunk in client.chat.completions.create(stream=True, **args):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for tc in delta.tool_calls or []:
            p = parts.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                p["id"] = tc.id
            if tc.function and tc.function.name:
                p["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                p["arguments"] += tc.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls", finish
    assert list(parts) == [0], parts
    p = parts[0]
    return p["id"], p["name"], p["arguments"]


def two_steps(stream):
    messages = [
        {"role": "system", "content": "You are a helpful assistant. Use the tools when needed."},
        {"role": "user", "content": "What is the weather like in Paris today?"},
    ]
    call_id, name, arguments = first_call(messages, stream)
    assert call_id.startswith("call_"), call_id
    assert name == "get_weather", name
    args = json.loads(arguments)
    assert args["city"] in ("Paris", "London", "Tokyo") and args["unit"] in ("celsius", "fahrenheit"), args
    messages.append({
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    })
    messages.append({"role": "tool", "tool_call_id": call_id,
                     "content": json.dumps({"city": args["city"], "temperature": 21, "sky": "sunny"})})
    final = dict(model=model, messages=messages, tools=[WEATHER], temperature=0, max_tokens=40)
    if stream:
        text = ""
        usage = None
        for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **final):
            if chunk.usage:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
    else:
        r = client.chat.completions.create(**final)
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls"), r
        text = r.choices[0].message.content or ""
        usage = r.usage
    assert usage is not None and usage.prompt_tokens > 0, usage
    cached = usage.prompt_tokens_details.cached_tokens
    assert cached > 0, f"the second step reused nothing of the first: {usage}"
    print(f"stream={stream}: called {name}({arguments}); answer {text!r}; cached {cached}/{usage.prompt_tokens}")


def schema_output():
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "score": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["city", "score"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Rate Paris from 0 to 9 as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "rating", "schema": schema, "strict": True}},
        temperature=0,
        max_tokens=40,
    )
    v = json.loads(r.choices[0].message.content)
    assert v["city"] in ("Paris", "Rome") and 0 <= v["score"] <= 9, v
    print(f"json_schema: {v}")



def sampling_fields():
    """OpenAI's penalties, logit_bias and parallel_tool_calls as the client sends them."""
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is the weather like in Tokyo?"}],
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        logit_bias={0: -100},
        temperature=0,
        max_tokens=120,
    )
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1, r
    print(f"sampling fields: called {calls[0].function.name}({calls[0].function.arguments})")

def several_choices():
    """`n` seeded choices, whole and streamed: the client reads each choice by its index, and
    the streamed texts are the whole response's (choice i is seeded seed + i either way)."""
    args = dict(model=model, messages=[{"role": "user", "content": "Name a colour."}],
                n=3, seed=11, temperature=0.9, max_tokens=12)
    r = client.chat.completions.create(**args)
    assert [c.index for c in r.choices] == [0, 1, 2], r
    whole = [c.message.content for c in r.choices]
    streamed = ["", "", ""]
    usage = None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **args):
        for c in chunk.choices:
            streamed[c.index] += c.delta.content or ""
        usage = chunk.usage or usage
    assert streamed == whole, (streamed, whole)
    assert usage is not None and usage.prompt_tokens == r.usage.prompt_tokens, (usage, r.usage)
    assert usage.completion_tokens == r.usage.completion_tokens, (usage, r.usage)
    print(f"n=3: {whole!r}")
    # Several prompts in one completions request (a batch), n of each, prompt by prompt.
    c = client.completions.create(model=model, prompt=["The sky is", "Water is"], n=2, temperature=0, max_tokens=6)
    assert [x.index for x in c.choices] == [0, 1, 2, 3], c
    alone = [client.completions.create(model=model, prompt=p, temperature=0, max_tokens=6).choices[0].text
             for p in ("The sky is", "Water is")]
    assert [x.text for x in c.choices] == [alone[0], alone[0], alone[1], alone[1]], (c.choices, alone)
    print(f"two prompts, n=2: {[x.text for x in c.choices]!r}")


def responses_api():
    """The tool call through `client.responses`: the call as a function_call item, its result
    sent with `previous_response_id` (the history is the server's, and its cache's), the
    answer streamed through the SDK's helper, then retrieve and delete."""
    tool = {"type": "function", **WEATHER["function"]}
    r1 = client.responses.create(
        model=model,
        instructions="You are a helpful assistant. Use the tools when needed.",
        input="What is the weather like in Paris today?",
        tools=[tool],
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0,
        max_output_tokens=120,
    )
    assert r1.status == "completed", r1
    calls = [item for item in r1.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather", r1.output
    call = calls[0]
    args = json.loads(call.arguments)
    assert args["city"] in ("Paris", "London", "Tokyo"), args
    follow = dict(
        model=model,
        previous_response_id=r1.id,
        instructions="You are a helpful assistant. Use the tools when needed.",
        input=[{"type": "function_call_output", "call_id": call.call_id,
                "output": json.dumps({"city": args["city"], "temperature": 21, "sky": "sunny"})}],
        tools=[tool],
        temperature=0,
        max_output_tokens=40,
    )
    r2 = client.responses.create(**follow)
    cached = r2.usage.input_tokens_details.cached_tokens
    assert cached > 0, f"the second step reused nothing of the first: {r2.usage}"
    # Streamed (the raw events: the SDK's `responses.stream` helper accepts only a
    # `response.completed` end, and a tiny model may run to max_output_tokens instead).
    deltas, final = "", None
    for event in client.responses.create(stream=True, **follow):
        if event.type == "response.output_text.delta":
            deltas += event.delta
        elif event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert final is not None and final.status == r2.status, final
    assert final.output_text == deltas == r2.output_text, (final.output_text, deltas, r2.output_text)
    assert client.responses.retrieve(r1.id).id == r1.id
    client.responses.delete(r1.id)
    try:
        client.responses.retrieve(r1.id)
        raise AssertionError("a deleted response was still retrieved")
    except openai.NotFoundError:
        pass
    print(f"responses: called {call.name}({call.arguments}); answer {r2.output_text!r}; "
          f"cached {cached}/{r2.usage.input_tokens}")


two_steps(stream=False)
two_steps(stream=True)
schema_output()
sampling_fields()
several_choices()
responses_api()
print("ok")
