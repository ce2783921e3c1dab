#!/usr/bin/env python3
"""Records llama.cpp's fill-in-the-middle answers (`/infill`) on the tiny code model of
tests/server.rs.

    HEARTH_WRITE_TINY_MODELS=DIR cargo test --release --test server fill_in_the_middle_matches_llama_cpp
    scripts/record-llama-infill.py LLAMA_BIN_DIR DIR [--out tests/data]

The model is a Qwen2-layer file over a vocabulary with Qwen2.5-Coder's FIM tokens
(`TinyModelSpec::coder`, f32), written by hearth's testkit. `llama-server` (K/V f32, flash
attention off, a context of 512 and batches of 256, so that no input here is cut and the extra
files are kept) answers each request of `REQUESTS` greedily: the prompt it built (as text and
its token count), the reply's token ids and its text.

Writes tests/data/llama-cpp-infill.json with the llama.cpp version, the command and the file's
size (the test writes the file again from the same spec and checks it). Only the Python
standard library is used.
"""

import argparse
import os
import pathlib
import sys

from llama_server import post, start, version, write_json

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = "tiny-coder-f32.gguf"
REQUESTS = [
    {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n    return c\n"},
    {"input_prefix": "the cat ", "input_suffix": " on the mat", "prompt": "sat",
     "input_extra": [{"filename": "notes.txt", "text": "a mat\n"}, {"text": "hello world"}]},
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("models_dir")
    ap.add_argument("--out", default=str(ROOT / "tests/data"))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    path = os.path.join(a.models_dir, MODEL)
    args = ["-t", str(a.threads), "-c", "512", "-b", "256", "-ub", "256", "-np", "1",
            "-ctk", "f32", "-ctv", "f32", "-fa", "off"]
    proc, port = start(a.bin_dir, path, args)
    answers = []
    try:
        for body in REQUESTS:
            r = post(port, "/infill", {**body, "n_predict": 8, "temperature": 0, "return_tokens": True,
                                       "cache_prompt": False})
            answers.append({"prompt": r["prompt"], "tokens_evaluated": r["tokens_evaluated"],
                            "tokens": r["tokens"], "content": r["content"]})
            print(f"{r['tokens_evaluated']} prompt tokens -> {r['tokens']}", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait()
    data = {"llama_cpp": version(a.bin_dir), "recorded_by": "scripts/record-llama-infill.py",
            "command": " ".join(["llama-server", "-m", MODEL, *args]), "file": MODEL,
            "bytes": os.path.getsize(path), "requests": REQUESTS, "answers": answers}
    write_json(os.path.join(a.out, "llama-cpp-infill.json"), data)


if __name__ == "__main__":
    main()
