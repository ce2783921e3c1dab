#!/usr/bin/env python3
"""Records how llama.cpp tokenizes text with tiny byte-level BPE vocabularies whose
`tokenizer.ggml.pre` is one of the DeepSeek splits, Seed-Coder's, Qwen3.5's, Falcon's, BLOOM's, Ling's or Jais 2's (written by hearth's testkit), and with a
tiny SentencePiece vocabulary named as Phi-3 (whose special tokens llama.cpp makes strip the
whitespace after them): the reference `tests/tokenizer.rs` holds hearth's tokenizers for them to.

    HEARTH_WRITE_TINY_MODELS=DIR cargo test --test tokenizer -- pre_tokenizers_match_llama_cpp phi3_special_tokens
    scripts/record-pre-tokens.py LLAMA_BIN_DIR DIR [--out tests/data]

For each `DIR/tiny-pre-NAME.gguf` (NAME: deepseek-v3, deepseek-llm, seed-coder, qwen35, falcon, bloom,
bailingmoe, jais-2, phi-3), llama-server's /tokenize
(nothing added) and /detokenize of each text. Writes tests/data/llama-cpp-pre-tokens.json.
Only the Python standard library is used.
"""

import argparse
import json
import os
import pathlib

from llama_server import TOKENIZER_TEXTS, start, tokenize_cases, version

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAMES = ["deepseek-v3", "deepseek-llm", "seed-coder", "qwen35", "falcon", "bloom", "bailingmoe", "jais-2"]

# Beside the shared texts: the scripts and punctuation DeepSeek LLM's splits single out, and
# punctuation before line breaks (Seed-Coder's keeps them apart); words with combining marks
# (Qwen3.5's keeps them in the word); long runs of spaces (Jais 2's cuts them by powers of two).
TEXTS = TOKENIZER_TEXTS + [
    "Ελληνικά κείμενα, кириллица и ΐ ΰ µ ǅ K Ω ℭ",
    "全角：ＡＢＣ１２３！？「引用」…‘quotes’ “double”",
    "path/to/file.rs:12:5 -> x.y_z(), #tag @user $var %mod ^caret ~tilde `tick`",
    "end;\n}\n\n// done.\r\nOK!\n",
    "हिन्दी में लिखा, தமிழ் எழுத்து, ภาษาไทย",
    "a" + " " * 21 + "b\n" + " " * 7 + "indented(x)\n\n\n" + " " * 600 + "far   ",
]


# Phi-3's: chat turns as its template writes them, whitespace of every kind after and before
# the special tokens, the tokens llama.cpp leaves unstripped (<unk>, <s>, <|endoftext|>).
PHI3_TEXTS = TOKENIZER_TEXTS + [
    "<|user|>\nHello, world!<|end|>\n<|assistant|>\n",
    "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nThe quick brown fox<|end|>\n"
    "<|assistant|>\nIt jumps over the lazy dog.<|end|>\n<|user|>\nAnd then?<|end|>\n<|assistant|>\n",
    "<s><|user|>  \t\n \r\n spaced out<|end|>   \n\n<|assistant|>",
    "</s>  after the end <unk>  kept <s>  kept <|endoftext|>  kept",
    "words before   <|user|>   words after",
    "<|user|><|end|><|assistant|>",
    "<|end|>\n",
    "<|user|>\u000b\u000cvertical tab, form feed",
    "<|user|>\u00a0no-break space<|end|>\u3000ideographic space",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("models_dir")
    ap.add_argument("--out", default=str(ROOT / "tests/data"))
    a = ap.parse_args()
    vocabs = {}
    for name in NAMES + ["phi-3"]:
        model = os.path.join(a.models_dir, f"tiny-pre-{name}.gguf")
        proc, port = start(a.bin_dir, model, ["-t", "2", "-c", "512", "-np", "1"])
        try:
            cases = tokenize_cases(port, PHI3_TEXTS if name == "phi-3" else TEXTS)
        finally:
            proc.terminate()
            proc.wait()
        vocabs[name] = cases
        print(f"{name}: {len(cases)} texts")
    data = {"llama_cpp": version(a.bin_dir), "recorded_by": "scripts/record-pre-tokens.py", "vocabularies": vocabs}
    out = os.path.join(a.out, "llama-cpp-pre-tokens.json")
    with open(out, "w") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
