#!/usr/bin/env python3
"""Records llama.cpp's sentence embeddings and rerank scores on the tiny models of tests/embeddings.rs.

    HEARTH_WRITE_TINY_MODELS=DIR cargo test --release --test embeddings embeddings_match_llama_cpp
    scripts/record-llama-embeddings.py LLAMA_BIN_DIR DIR [--out tests/data]

The models are Qwen3-layer files as Qwen3-Embedding's are (`qwen3.pooling_type` mean, cls or
last; `tokenizer.ggml.add_eos_token` true), in f32 and Q8_0, written by hearth's testkit
(`TinyModelSpec::embedding`). For each, `llama-server --embeddings` (pooling from the file, K/V
f32, flash attention off) answers one `/v1/embeddings` request with every input of `INPUTS`:
token-id lists, used as they are, and texts, which llama.cpp tokenizes with BOS and EOS as the
file says. Its vectors are unit length (its default `embd_normalize` 2), as hearth's. The
`tiny-gemma-embed-*` files are EmbeddingGemma's (`TinyModelSpec::gemma_embedding`: Gemma 3's
layer attending both ways, a symmetric window in its local layer, mean pooling, two dense
projections after it).

The rerankers (`TinyModelSpec::reranker`, f32 and Q8_0: pooling type rank, a classifier head of
two labels, a rerank template) are served by `llama-server --rerank` and asked `/v1/rerank` for
`QUERY` against `DOCUMENTS`: each document's score (the softmax's "yes" probability), by index.

Writes tests/data/llama-cpp-embeddings.json with the llama.cpp version, the command and each
file's size (the test writes the files again from the same specs and checks it).

    scripts/record-llama-embeddings.py LLAMA_BIN_DIR --real SmolLM2-135M-Instruct.Q4_1.gguf

    HEARTH_WRITE_TINY_MODELS=DIR cargo test --release --test encoders encoder_embeddings_match_llama_cpp
    scripts/record-llama-embeddings.py LLAMA_BIN_DIR DIR --encoders

records instead, on the tiny encoders of tests/encoders.rs (`bert` and `nomic-bert` files, mean-
and cls-pooled, f32 and Q8_0: `TinyModelSpec::encoder`, a WordPiece vocabulary; and `bert` files
as XLM-RoBERTa's are, `TinyModelSpec::encoder_xlmr`, a SentencePiece Unigram vocabulary), the
vectors of `ENCODER_INPUTS` and the ids `/tokenize` gives each text with special tokens ([CLS] ...
[SEP], or <s> ... </s>), and on the XLM-RoBERTa-shaped ones also the ids of the Unigram fixture's
texts; and the scores `llama-server --rerank` gives `DOCUMENTS` for `QUERY` on the tiny
cross-encoders (`TinyModelSpec::encoder_reranker`: BERT's and XLM-RoBERTa's, a one-logit head on
the first row), into tests/data/llama-cpp-encoders.json.

    scripts/record-llama-embeddings.py LLAMA_BIN_DIR --real SmolLM2-135M-Instruct.Q4_1.gguf

records instead, on that real file (a chat model: the pooling given by `--pooling`), the mean- and
last-token-pooled vectors of `REAL_TEXTS` into tests/data/llama-cpp-embeddings-real.json.
Only the Python standard library is used.
"""

import argparse
import json
import os
import pathlib
import sys

from llama_server import post, start, version, write_json

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS = ["tiny-embed-mean-f32.gguf", "tiny-embed-cls-f32.gguf", "tiny-embed-last-f32.gguf",
          "tiny-embed-mean-q8_0.gguf", "tiny-embed-last-q8_0.gguf", "tiny-gemma-embed-f32.gguf",
          "tiny-gemma-embed-q8_0.gguf"]
RERANK_MODELS = ["tiny-rerank-f32.gguf", "tiny-rerank-q8_0.gguf"]
QUERY = "what does the cat sit on"
DOCUMENTS = ["the cat sat on the mat", "stock prices fell today", "a mat lay under the cat", "hello"]
ENCODER_MODELS = ["tiny-bert-mean-f32.gguf", "tiny-bert-cls-q8_0.gguf", "tiny-bert-mean-q6_k.gguf", "tiny-nomic-mean-f32.gguf",
                  "tiny-nomic-mean-q8_0.gguf", "tiny-xlmr-cls-f32.gguf", "tiny-xlmr-mean-q8_0.gguf",
                  "tiny-nomic-moe-mean-f32.gguf", "tiny-nomic-moe-mean-q8_0.gguf", "tiny-jina-v3-mean-f32.gguf",
                  "tiny-jina-v3-cls-q8_0.gguf", "tiny-jina-v2-mean-f32.gguf", "tiny-jina-v2-mean-q8_0.gguf",
                  "tiny-jina-v2-code-mean-f32.gguf", "tiny-modern-bert-mean-f32.gguf", "tiny-modern-bert-cls-q8_0.gguf"]
# Cross-encoders (`TinyModelSpec::encoder_reranker`: pooling type rank, a one-logit head on the
# first row), asked `/v1/rerank` for `QUERY` against `DOCUMENTS` as the rerankers are.
ENCODER_RERANK_MODELS = ["tiny-bert-rerank-f32.gguf", "tiny-xlmr-rerank-f32.gguf", "tiny-xlmr-rerank-q8_0.gguf",
                         "tiny-xlmr-rerank-q4_k.gguf", "tiny-bert-rerank-q6_k.gguf",
                         "tiny-jina-v2-rerank-f32.gguf", "tiny-modern-bert-rerank-mean-f32.gguf",
                         "tiny-modern-bert-rerank-cls-q8_0.gguf"]
# The texts of the Unigram vocabulary's fixture, which the XLM-RoBERTa-shaped files (`tiny-xlmr-*`)
# also tokenize (`unigram_tokens`).
UNIGRAM_FIXTURE = ROOT / "src/model/testkit/vocab/unigram.json"
ENCODER_INPUTS = [
    [2, 17, 40, 99, 23, 250, 11, 3],
    "the cat sat on the mat",
    "An Embedding is ONE vector for a whole text, isn't it?",
    "Café naïve: déjà vu... (100% sure) — 東京 and x+y=z!",
    "zzzqqq unknownish words [MASK] here",
    "fill the <mask> in,\t<mask>and<mask>  <mask>",
]
REAL_TEXTS = ["The capital of France is Paris.", "List the first five prime numbers.",
              "fn main() { println!(\"hello\"); }"]
INPUTS = [
    [5, 17, 40, 99, 3, 250, 11],
    [(i * 37 + 11) % 256 for i in range(60)],
    "the cat sat on the mat",
    "An embedding is one vector for a whole text.",
]


def ask(a, path, mode, ctx, route, body):
    """Starts `llama-server -m path` in `mode` (`--embeddings`, with `--pooling` if given, or
    `--rerank`) with K/V f32 and flash attention off, POSTs `body` to `route`, stops it; (the
    answer, the command line as recorded)."""
    args = [*mode, "-t", str(a.threads), "-c", str(ctx), "-b", str(ctx), "-ub", str(ctx), "-np", "1",
            "-ctk", "f32", "-ctv", "f32", "-fa", "off"]
    proc, port = start(a.bin_dir, path, args)
    try:
        r = post(port, route, body)
    finally:
        proc.terminate()
        proc.wait()
    return r, " ".join(["llama-server", "-m", os.path.basename(path), *args])


def vectors_of(r):
    return [d["embedding"] for d in sorted(r["data"], key=lambda d: d["index"])]


def record_real(a):
    data = {"llama_cpp": version(a.bin_dir), "recorded_by": "scripts/record-llama-embeddings.py --real",
            "file": os.path.basename(a.real), "bytes": os.path.getsize(a.real), "texts": REAL_TEXTS, "pooling": {}}
    for pooling in ["mean", "last"]:
        r, command = ask(a, a.real, ["--embeddings", "--pooling", pooling], 512, "/v1/embeddings", {"input": REAL_TEXTS})
        data["pooling"][pooling] = {"command": command, "prompt_tokens": r["usage"]["prompt_tokens"],
                                    "embeddings": vectors_of(r)}
        print(f"{pooling}: {r['usage']['prompt_tokens']} tokens", file=sys.stderr)
    write_json(os.path.join(a.out, "llama-cpp-embeddings-real.json"), data)


def record_encoders(a):
    data = {"llama_cpp": version(a.bin_dir), "recorded_by": "scripts/record-llama-embeddings.py --encoders",
            "inputs": ENCODER_INPUTS, "models": {}}
    for name in ENCODER_MODELS:
        path = os.path.join(a.models_dir, name)
        args = ["--embeddings", "-t", str(a.threads), "-c", "128", "-b", "128", "-ub", "128", "-np", "1",
                "-ctk", "f32", "-ctv", "f32", "-fa", "off"]
        proc, port = start(a.bin_dir, path, args)
        try:
            r = post(port, "/v1/embeddings", {"input": ENCODER_INPUTS})
            tokens = [post(port, "/tokenize", {"content": t, "add_special": True})["tokens"]
                      for t in ENCODER_INPUTS if isinstance(t, str)]
            unigram_tokens = None
            if "xlmr" in name:
                texts = [t["text"] for t in json.loads(UNIGRAM_FIXTURE.read_text())["texts"]]
                unigram_tokens = [{"text": t, "tokens": post(port, "/tokenize", {"content": t, "add_special": True})["tokens"]}
                                  for t in texts]
        finally:
            proc.terminate()
            proc.wait()
        vectors = vectors_of(r)
        assert len(vectors) == len(ENCODER_INPUTS), r
        data["models"][name] = {"bytes": os.path.getsize(path), "prompt_tokens": r["usage"]["prompt_tokens"],
                                "command": " ".join(["llama-server", "-m", name, *args]), "tokens": tokens,
                                "embeddings": vectors}
        if unigram_tokens is not None:
            data["models"][name]["unigram_tokens"] = unigram_tokens
        print(f"{name}: {len(vectors)} vectors of {len(vectors[0])}; tokens {tokens}", file=sys.stderr)
    data["rerank"] = {"query": QUERY, "documents": DOCUMENTS, "models": {}}
    for name in ENCODER_RERANK_MODELS:
        path = os.path.join(a.models_dir, name)
        args = ["--rerank", "-t", str(a.threads), "-c", "128", "-b", "128", "-ub", "128", "-np", "1",
                "-ctk", "f32", "-ctv", "f32", "-fa", "off"]
        proc, port = start(a.bin_dir, path, args)
        try:
            r = post(port, "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS})
        finally:
            proc.terminate()
            proc.wait()
        scores = [None] * len(DOCUMENTS)
        for res in r["results"]:
            scores[res["index"]] = res["relevance_score"]
        assert None not in scores, r
        data["rerank"]["models"][name] = {"bytes": os.path.getsize(path), "prompt_tokens": r["usage"]["prompt_tokens"],
                                          "command": " ".join(["llama-server", "-m", name, *args]), "scores": scores}
        print(f"{name}: scores {scores}", file=sys.stderr)
    write_json(os.path.join(a.out, "llama-cpp-encoders.json"), data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("models_dir", nargs="?")
    ap.add_argument("--real", help="a real GGUF: record its mean- and last-pooled vectors instead")
    ap.add_argument("--encoders", action="store_true", help="record the tiny encoders' vectors instead")
    ap.add_argument("--out", default=str(ROOT / "tests/data"))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.real:
        record_real(a)
        return
    if a.encoders:
        record_encoders(a)
        return
    data = {"llama_cpp": version(a.bin_dir), "recorded_by": "scripts/record-llama-embeddings.py",
            "inputs": INPUTS, "models": {}}
    for name in MODELS:
        path = os.path.join(a.models_dir, name)
        r, command = ask(a, path, ["--embeddings"], 256, "/v1/embeddings", {"input": INPUTS})
        vectors = vectors_of(r)
        assert len(vectors) == len(INPUTS), r
        data["models"][name] = {"bytes": os.path.getsize(path), "prompt_tokens": r["usage"]["prompt_tokens"],
                                "command": command, "embeddings": vectors}
        print(f"{name}: {len(vectors)} vectors of {len(vectors[0])}", file=sys.stderr)
    data["rerank"] = {"query": QUERY, "documents": DOCUMENTS, "models": {}}
    for name in RERANK_MODELS:
        path = os.path.join(a.models_dir, name)
        r, command = ask(a, path, ["--rerank"], 256, "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS})
        scores = [None] * len(DOCUMENTS)
        for res in r["results"]:
            scores[res["index"]] = res["relevance_score"]
        assert None not in scores, r
        data["rerank"]["models"][name] = {"bytes": os.path.getsize(path), "prompt_tokens": r["usage"]["prompt_tokens"],
                                          "command": command, "scores": scores}
        print(f"{name}: scores {scores}", file=sys.stderr)
    write_json(os.path.join(a.out, "llama-cpp-embeddings.json"), data)


if __name__ == "__main__":
    main()
