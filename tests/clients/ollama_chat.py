"""The official `ollama` Python client against hearth's Ollama routes (/api/...).

Usage: ollama_chat.py http://ADDR/v1 MODEL. The model routes describe the loaded model; a chat
whole and streamed spells the same greedy text; generate with `raw`; `format` as a JSON Schema;
a tool conversation as an agent built on this client sends it (a Python function as the tool,
the call sent back without an id, the result by the tool's name); an unknown model is the
client's ResponseError with status 404. Prints `ok` at the end.
"""

import json
import sys

import ollama

url, _ = sys.argv[1], sys.argv[2]
client = ollama.Client(host=url.rsplit("/v1", 1)[0])

listed = client.list()
assert len(listed.models) == 1, listed
name = listed.models[0].model
shown = client.show(name)
assert "completion" in shown.capabilities, shown.capabilities
assert shown.details.format == "gguf", shown.details
arch = shown.modelinfo["general.architecture"]
context = shown.modelinfo[f"{arch}.context_length"]
running = client.ps()
assert running.models[0].context_length == context, (running, context)
assert client.show(f"{name}:latest").details == shown.details

messages = [{"role": "user", "content": "List the first five prime numbers."}]
options = {"temperature": 0, "num_predict": 24}
whole = client.chat(model=name, messages=messages, options=options)
assert whole.done and whole.done_reason in ("stop", "length"), whole
assert whole.message.role == "assistant" and whole.message.content, whole
assert whole.prompt_eval_count > 0 and whole.eval_count > 0, whole
parts = list(client.chat(model=name, messages=messages, options=options, stream=True))
streamed = "".join(p.message.content or "" for p in parts)
assert streamed == whole.message.content, (streamed, whole.message.content)
assert parts[-1].done and parts[-1].eval_count == whole.eval_count, parts[-1]
print(f"chat: {whole.message.content!r}")

generated = client.generate(model=name, prompt="The capital of France is", raw=True, options={"temperature": 0, "num_predict": 8})
assert generated.response and (generated.eval_count == 8 or generated.done_reason == "stop"), generated
print(f"generate: {generated.response!r}")

schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["a"], "additionalProperties": False}
formatted = client.chat(
    model=name,
    messages=[{"role": "user", "content": 'Give a JSON object with an integer "a".'}],
    format=schema,
    options={"temperature": 0, "num_predict": 200},
)
assert formatted.done_reason == "stop", formatted
assert json.loads(formatted.message.content)["a"] in range(10), formatted.message.content


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
      city: The city's name
    """
    return "sunny"


history = messages + [
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": get_weather("Paris"), "tool_name": "get_weather"},
]
answered = client.chat(model=name, messages=history, tools=[get_weather], options={"temperature": 0, "num_predict": 8})
assert answered.done and answered.prompt_eval_count > whole.prompt_eval_count, answered

try:
    client.chat(model="no-such-model", messages=messages)
except ollama.ResponseError as e:
    assert e.status_code == 404, e
else:
    raise AssertionError("an unknown model was answered")
print("ok")
