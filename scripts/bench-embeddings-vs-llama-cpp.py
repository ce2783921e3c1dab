#!/usr/bin/env python3
"""Embedding throughput: `hearth --headless` against `llama-server --embeddings` on one GGUF.

    scripts/bench-embeddings-vs-llama-cpp.py LLAMA_BIN_DIR HEARTH_BIN MODEL.gguf \\
        [--pooling last] [--inputs 64] [--tokens 128] [--batch 16] [--threads 2] [--runs 3]

Both servers run on the same file with the same pooling (`--pooling`, over the file's) and
threads; each is sent `--inputs` inputs of `--tokens` token ids (random ids below `--max-id`, the
same for both), `--batch` inputs per `/v1/embeddings` request, one request at a time. llama-server
gets `--batch` parallel slots (`--llama-parallel` to change), so it can batch a request's inputs
as hearth's engine does.

Measured, per server, best of `--runs` (the two servers alternate):
- cold: fresh inputs every run (nothing either server has seen), prompt tokens per second;
- repeated: the last run's inputs sent again (what a re-indexing client sends for unchanged
  documents): hearth's last-token pooling is served from its prefix cache; llama-server's slots
  keep their last prompt.
It also checks that the two servers' vectors for the same input agree (cosine similarity).
Only the Python standard library is used.
"""

import argparse
import math
import os
import random
import sys
import tempfile
import time

from llama_server import hearth_start, post, start


def embed_all(port, inputs, batch):
    """Sends `inputs` `batch` at a time; (seconds, prompt tokens, vectors)."""
    vectors, tokens = [], 0
    t = time.perf_counter()
    for i in range(0, len(inputs), batch):
        r = post(port, "/v1/embeddings", {"input": inputs[i:i + batch]})
        vectors += [d["embedding"] for d in sorted(r["data"], key=lambda d: d["index"])]
        tokens += r["usage"]["prompt_tokens"]
    return time.perf_counter() - t, tokens, vectors


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama_bin_dir")
    ap.add_argument("hearth_bin")
    ap.add_argument("model")
    ap.add_argument("--pooling", default="last", choices=["mean", "cls", "last"])
    ap.add_argument("--inputs", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-id", type=int, default=10000)
    ap.add_argument("--llama-parallel", type=int, default=None,
                    help="llama-server's slots (-np); default: --batch")
    a = ap.parse_args()
    rng = random.Random(7)

    def fresh():
        return [[rng.randrange(300, a.max_id) for _ in range(a.tokens)] for _ in range(a.inputs)]

    slots = a.llama_parallel or a.batch
    ctx = slots * (a.tokens + 16)
    llama_args = ["--embeddings", "--pooling", a.pooling, "-t", str(a.threads), "-c", str(ctx),
                  "-np", str(slots), "-b", "2048", "-ub", "2048"]
    with tempfile.TemporaryDirectory() as data_dir:
        servers = {
            "hearth": hearth_start(a.hearth_bin, a.model, a.threads, data_dir, ["--pooling", a.pooling]),
            "llama.cpp": start(a.llama_bin_dir, a.model, llama_args),
        }
        try:
            best = {name: 0.0 for name in servers}
            last_inputs, vectors = None, {}
            for run in range(a.runs):
                inputs = fresh()
                for name, (_, port) in servers.items():
                    secs, tokens, vecs = embed_all(port, inputs, a.batch)
                    best[name] = max(best[name], tokens / secs)
                    vectors[name] = vecs
                    print(f"run {run + 1} {name}: {tokens} tokens in {secs:.2f} s, {tokens / secs:.1f} tokens/s",
                          file=sys.stderr)
                last_inputs = inputs
            cos = min(cosine(x, y) for x, y in zip(vectors["hearth"], vectors["llama.cpp"]))
            repeated = {}
            for name, (_, port) in servers.items():
                secs, tokens, _ = embed_all(port, last_inputs, a.batch)
                repeated[name] = tokens / secs
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait()
    print(f"model {os.path.basename(a.model)}, pooling {a.pooling}, {a.inputs} inputs of {a.tokens} tokens, "
          f"{a.batch} per request, {a.threads} threads, llama-server -np {slots}; "
          f"lowest cosine similarity hearth/llama.cpp {cos:.6f}")
    print("| inputs | hearth tokens/s | llama.cpp tokens/s | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| cold (best of {a.runs}) | {best['hearth']:.1f} | {best['llama.cpp']:.1f} | "
          f"{best['hearth'] / best['llama.cpp']:.2f} |")
    print(f"| repeated | {repeated['hearth']:.1f} | {repeated['llama.cpp']:.1f} | "
          f"{repeated['hearth'] / repeated['llama.cpp']:.2f} |")


if __name__ == "__main__":
    main()
