#!/usr/bin/env python3
"""Records llama.cpp's reference outputs for the real-model tests (tests/real_llama_cpp.rs).

    scripts/record-llama-references.py LLAMA_BIN_DIR MODELS_DIR [--out tests/data]

For SmolLM2-135M-Instruct Q4_1 and Gemma 3 270M Q4_K_M (the files `.ci/fetch-models.sh`
fetches into MODELS_DIR), with llama-server twice per model — K/V f32 with flash attention off
(llama.cpp casts f32 K/V to f16 for its flash-attention op, so only then is f32 really f32) and
llama.cpp's defaults (f16 K/V, flash attention auto) — it records, per prompt:

- the prompt's token ids as llama.cpp tokenizes it (raw text: `/tokenize` with BOS as the
  model asks; chat: the conversation rendered by `/apply-template`, then tokenized), and the
  rendered text of chat prompts;
- `tokens` greedy tokens (`temperature: 0`, `ignore_eos`) and, at every generated position,
  the top 10 log-probabilities (`n_probs: 10`): teacher-forced on llama.cpp's own tokens.

Gemma's GGUF carries no chat template; llama.cpp would fall back to ChatML, so it is given
Gemma 3's own template (src/model/chat/builtin/gemma-3-it.jinja, the one hearth falls back to)
with `--chat-template-file`; SmolLM2's comes from its GGUF. Both render through llama.cpp's
Jinja engine (`--jinja`).

Writes one JSON file per model into --out, with the llama.cpp version and the commands used.
Only the Python standard library is used.
"""

import argparse
import json
import os
import pathlib
import sys

from llama_server import post, start, version

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEMMA_TEMPLATE = ROOT / "src/model/chat/builtin/gemma-3-it.jinja"


def long_prompt():
    """Over 1,500 tokens: facts to look back on across Gemma's 512-token window."""
    lines = [f"Fact {i}: the number {i} times three is {3 * i}." for i in range(1, 121)]
    return "Read these facts carefully.\n" + "\n".join(lines) + "\nQuestion: what is fact 2? Answer: Fact 2:"


RAW = [
    "The capital of France is",
    "1, 2, 3, 4, 5, 6,",
    "The opposite of hot is",
    "Water is made of hydrogen and",
]
CHAT = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "List the first five prime numbers."}],
    [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "Name a color."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Name another one."},
    ],
]
MODELS = {
    "smollm2": {"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "extra": [], "long": False},
    "gemma3": {
        "file": "gemma-3-270m-q4_k_m.gguf",
        "extra": ["--chat-template-file", str(GEMMA_TEMPLATE.relative_to(ROOT))],
        "long": True,
    },
}
KV_RUNS = {
    "f32": ["-ctk", "f32", "-ctv", "f32", "-fa", "off"],
    "default": [],
}


def generate(port, ids, n):
    r = post(port, "/completion", {"prompt": ids, "n_predict": n, "temperature": 0, "n_probs": 10,
                                   "ignore_eos": True, "return_tokens": True, "cache_prompt": False})
    steps = r["completion_probabilities"]
    return {
        "tokens": [s["id"] for s in steps],
        "top_logprobs": [[[t["id"], t["logprob"]] for t in s["top_logprobs"]] for s in steps],
    }


def record(bin_dir, models_dir, name, spec, tokens, threads):
    model = os.path.join(models_dir, spec["file"])
    out = {"model": spec["file"], "tokens": tokens, "runs": {}}
    for kv, flags in KV_RUNS.items():
        args = ["-t", str(threads), "-c", "4096", "-np", "1", "--jinja", *flags, *spec["extra"]]
        proc, port = start(bin_dir, model, args, cwd=ROOT)
        try:
            cases = []
            raws = RAW + ([long_prompt()] if spec["long"] else [])
            for text in raws:
                ids = post(port, "/tokenize", {"content": text, "add_special": True, "parse_special": False})["tokens"]
                cases.append({"kind": "raw", "text": text, "prompt_ids": ids, **generate(port, ids, tokens)})
            for messages in CHAT:
                rendered = post(port, "/apply-template", {"messages": messages})["prompt"]
                ids = post(port, "/tokenize", {"content": rendered, "add_special": True, "parse_special": True})["tokens"]
                cases.append({"kind": "chat", "messages": messages, "rendered": rendered, "prompt_ids": ids,
                              **generate(port, ids, tokens)})
            out["runs"][kv] = {"command": " ".join(["llama-server", "-m", spec["file"], *args]), "cases": cases}
        finally:
            proc.terminate()
            proc.wait()
        print(f"{name} {kv}: {len(cases)} prompts", file=sys.stderr)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("models_dir")
    ap.add_argument("--out", default=str(ROOT / "tests/data"))
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    llama_version = version(a.bin_dir)
    os.makedirs(a.out, exist_ok=True)
    for name, spec in MODELS.items():
        data = {"llama_cpp": llama_version, "recorded_by": "scripts/record-llama-references.py",
                **record(a.bin_dir, a.models_dir, name, spec, a.tokens, a.threads)}
        path = os.path.join(a.out, f"llama-cpp-{name}.json")
        with open(path, "w") as f:
            json.dump(data, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
