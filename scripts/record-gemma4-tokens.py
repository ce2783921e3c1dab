#!/usr/bin/env python3
"""Records how llama.cpp tokenizes text with the tiny Gemma 4 vocabulary (`tokenizer.ggml.model =
"gemma4"`, written by hearth's testkit) and what it gives back for each id list: the reference
`tests/tokenizer.rs` holds hearth's Gemma 4 tokenizer to.

    HEARTH_WRITE_TINY_MODELS=DIR cargo test --test tiny_llama_cpp tiny_models_match_llama_cpp
    scripts/record-gemma4-tokens.py LLAMA_BIN_DIR DIR/tiny-gemma4-q8_0.gguf [--out tests/data]

llama-server's /tokenize (special tokens in the text recognised, nothing added) and /detokenize.
Writes tests/data/llama-cpp-gemma4-tokens.json. Only the Python standard library is used.
"""

import argparse
import json
import os
import pathlib

from llama_server import TOKENIZER_TEXTS, start, tokenize_cases, version

ROOT = pathlib.Path(__file__).resolve().parent.parent

TEXTS = TOKENIZER_TEXTS + [
    "<|turn>user\nHi there!<turn|>\n<|turn>model\n",
    "<|channel>thought\nsome thinking<channel|>The answer.",
    "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_response>",
    "text before<bos>text after <eos> and  <|turn>  spaced",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("model")
    ap.add_argument("--out", default=str(ROOT / "tests/data"))
    a = ap.parse_args()
    proc, port = start(a.bin_dir, a.model, ["-t", "2", "-c", "512", "-np", "1"])
    try:
        cases = tokenize_cases(port, TEXTS)
    finally:
        proc.terminate()
        proc.wait()
    data = {"llama_cpp": version(a.bin_dir), "recorded_by": "scripts/record-gemma4-tokens.py", "cases": cases}
    out = os.path.join(a.out, "llama-cpp-gemma4-tokens.json")
    with open(out, "w") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
