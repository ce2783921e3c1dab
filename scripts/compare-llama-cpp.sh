#!/usr/bin/env bash
# Greedy text of `hearth run` against llama.cpp's `llama-completion --temp 0`
# on the same GGUF, for a few prompts with clear answers.
#
#   scripts/compare-llama-cpp.sh LLAMA_BIN_DIR MODEL.gguf [MODEL.gguf ...]
#
# Prints one line per (model, prompt): `same` or `DIFFERS` with both texts.
# Exits 1 if any differ. Quantized greedy text can flip at a near-tie with
# any change of float order; these prompts have clear margins on SmolLM2
# ("Monday, Tuesday, Wednesday," and "def add(a, b):" do not: their top two
# logits lie within 0.05 of each other in hearth and in candle, and llama.cpp
# takes the other one).
set -euo pipefail
bin="$1"; shift
hearth="${HEARTH:-target/release/hearth}"
n="${TOKENS:-8}"
prompts=(
  "The capital of France is"
  "1, 2, 3, 4, 5, 6,"
  "The opposite of hot is"
  "The first three letters of the alphabet are"
  "The largest planet in the solar system is"
  "Water is made of hydrogen and"
)
status=0
for model in "$@"; do
  for p in "${prompts[@]}"; do
    ours=$("$hearth" run -m "$model" -p "$p" -n "$n" --temperature 0 --disk-cache-gib 0 2>/dev/null)
    theirs=$("$bin/llama-completion" -m "$model" -p "$p" -n "$n" --temp 0 -no-cnv \
      --no-display-prompt --no-warmup 2>/dev/null)
    theirs="${theirs% \[end of text\]}"   # llama-completion marks the end of generation
    if [[ "$ours" == "$theirs" ]]; then
      echo "same     $(basename "$model")  $p"
    else
      echo "DIFFERS  $(basename "$model")  $p"
      echo "  hearth:    ${ours@Q}"
      echo "  llama.cpp: ${theirs@Q}"
      status=1
    fi
  done
done
exit $status
