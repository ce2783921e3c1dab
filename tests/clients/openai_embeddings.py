"""Drives `hearth --headless` serving an embedding model with the official `openai` client:
`client.embeddings.create` with its default encoding (the SDK asks for base64 and decodes it),
with floats, with `dimensions`, and a bad request as the SDK's exception. Run by
tests/openai_client.rs:

    python3 openai_embeddings.py BASE_URL MODEL

Exits non-zero (an assertion) on anything OpenAI's clients would not accept.
"""

import math
import sys

import openai
from openai import OpenAI

base_url, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base_url, api_key="unused")


def norm(v):
    return math.sqrt(sum(x * x for x in v))


texts = ["the cat sat on the mat", "hello world", "the cat sat on the mat"]
r = client.embeddings.create(model=model, input=texts)
assert r.object == "list", r
assert [d.index for d in r.data] == [0, 1, 2], r.data
vectors = [d.embedding for d in r.data]
assert all(len(v) == len(vectors[0]) > 0 for v in vectors), [len(v) for v in vectors]
assert all(abs(norm(v) - 1) < 1e-3 for v in vectors), [norm(v) for v in vectors]
assert max(abs(a - b) for a, b in zip(vectors[0], vectors[2])) < 1e-3, "the same text twice"
assert vectors[0] != vectors[1]
assert r.usage.prompt_tokens == r.usage.total_tokens > 0, r.usage
print(f"embeddings (base64 by default): {len(vectors)} of {len(vectors[0])}, {r.usage.prompt_tokens} tokens")

f = client.embeddings.create(model=model, input="hello world", encoding_format="float")
assert max(abs(a - b) for a, b in zip(f.data[0].embedding, vectors[1])) < 1e-3, "float and base64 differ"
print("embeddings as floats: the same vector")

d = client.embeddings.create(model=model, input=["hello world"], dimensions=8)
assert len(d.data[0].embedding) == 8 and abs(norm(d.data[0].embedding) - 1) < 1e-3, d.data[0].embedding
print("dimensions=8: a unit vector of 8")

try:
    client.embeddings.create(model=model, input="")
    raise AssertionError("an empty input was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "input", e.body
    print(f"empty input: 400 ({e.body['message']})")

print("ok")
