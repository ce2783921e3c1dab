#!/usr/bin/env python3
"""Records llama.cpp's next-token log-probabilities past Llama 4's first chunk boundary.

    HEARTH_WRITE_TINY_MODELS=DIR cargo test --release --test tiny_llama_cpp   # writes the models
    scripts/record-llama4-long-reference.py LLAMA_BIN_DIR DIR [--out tests/data]

Llama 4's local layers attend within chunks of 8,192 positions and its global layers' queries
take a temperature from position 8,191 on: both act only in prompts longer than the tiny
tests' others. On `tiny-llama4-long-f32.gguf` (the tiny f32 Llama 4 file with a context of
16,384), llama-server with K/V f32 and flash attention off (so f32 is really f32) reads the
first n byte-token ids of one fixed prompt of 8,210 (id i is (i * 7919 + 523648) % 256) for
each n from 8,181 to 8,210 (either side of the boundary) and reports its greedy next token and
top 10 log-probabilities, one request per n; `tests/tiny_llama_cpp.rs` compares hearth's at
the same positions, teacher-forced on the prompt itself.

Writes tests/data/llama-cpp-llama4-long.json. Only the Python standard library is used.
"""

import argparse
import os
import pathlib
import sys

from llama_server import next_token, start, version, write_json

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = "tiny-llama4-long-f32.gguf"
PROMPT_LEN = 8210
FIRST = 8181


def prompt():
    return [(i * 7919 + 523648) % 256 for i in range(PROMPT_LEN)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("models_dir")
    ap.add_argument("--out", default=str(ROOT / "tests/data"))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    path = os.path.join(a.models_dir, MODEL)
    args = ["-t", str(a.threads), "-c", "16384", "-np", "1", "-ctk", "f32", "-ctv", "f32", "-fa", "off"]
    ids = prompt()
    positions = []
    proc, port = start(a.bin_dir, path, args)
    try:
        for n in range(FIRST, PROMPT_LEN + 1):
            tok, top = next_token(port, ids[:n])
            positions.append({"n": n, "token": tok, "top_logprobs": top})
            print(f"{n}: {tok}", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait()
    data = {"llama_cpp": version(a.bin_dir), "recorded_by": "scripts/record-llama4-long-reference.py",
            "model": MODEL, "bytes": os.path.getsize(path),
            "command": " ".join(["llama-server", "-m", MODEL, *args]),
            "prompt": f"{PROMPT_LEN} ids, id i = (i * 7919 + 523648) % 256", "positions": positions}
    write_json(os.path.join(a.out, "llama-cpp-llama4-long.json"), data)


if __name__ == "__main__":
    main()
