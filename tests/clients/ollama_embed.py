"""The official `ollama` Python client's embeddings against hearth on an embedding model.

Usage: ollama_embed.py http://ADDR/v1 MODEL. `embed` gives unit vectors in order (`dimensions`
the first values renormalized); the older `embeddings` the same vector before normalizing;
`show` says the model embeds. Prints `ok` at the end.
"""

import math
import sys

import ollama

url, _ = sys.argv[1], sys.argv[2]
client = ollama.Client(host=url.rsplit("/v1", 1)[0])
name = client.list().models[0].model
assert client.show(name).capabilities == ["embedding"]


def norm(v):
    return math.sqrt(sum(x * x for x in v))


e = client.embed(model=name, input=["the cat sat", "hello world"])
assert len(e.embeddings) == 2, e
assert all(abs(norm(v) - 1) < 1e-4 for v in e.embeddings), [norm(v) for v in e.embeddings]
assert e.prompt_eval_count > 0, e
short = client.embed(model=name, input="hello world", dimensions=8).embeddings[0]
assert len(short) == 8 and abs(norm(short) - 1) < 1e-4, short
legacy = client.embeddings(model=name, prompt="hello world").embedding
unit = [x / norm(legacy) for x in legacy]
assert max(abs(a - b) for a, b in zip(unit, e.embeddings[1])) < 1e-3
print("ok")
