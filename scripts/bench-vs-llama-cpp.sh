#!/usr/bin/env bash
# hearth bench decode against llama-bench on the same GGUF files and thread
# count, in one run: prefill 512, prefill 2048, decode 128 from an empty
# context and after 512 tokens. Prints README's table (tokens/s and ratios).
#
#   scripts/bench-vs-llama-cpp.sh LLAMA_BIN_DIR THREADS MODEL.gguf [MODEL.gguf ...]
#
# Each hearth number is `hearth bench decode`'s (best of its 3 runs); each
# llama.cpp number is llama-bench's mean of 3 repetitions. The two are run
# back to back per test, so a slow patch of a noisy machine hits both.
set -euo pipefail
bin="$1"; threads="$2"; shift 2
hearth="${HEARTH:-target/release/hearth}"

# hearth bench decode's "| hearth | prefill | decode |" row: field 1 or 2.
ours() { # prompt decode field
  "$hearth" bench decode --gguf "$model" --prompt-tokens "$1" --decode-tokens "$2" \
    --no-reference --threads "$threads" 2>/dev/null | awk -F'|' -v f="$3" '$2 ~ /hearth/ {gsub(/ /, "", $(f+2)); print $(f+2)}'
}
# On a CPU with AMX, llama.cpp 0.3.36 (built native) repacks Q8_0 weights for its AMX kernels,
# which crash (SIGSEGV) on these files: there it runs them as stored (`--repack 0`, its
# AVX-512 kernels).
repack=()
if grep -q amx_int8 /proc/cpuinfo 2>/dev/null; then repack=(--repack 0); fi
# llama-bench's mean t/s for one test.
theirs() { # llama-bench args...
  "$bin/llama-bench" -m "$model" -t "$threads" -r 3 "${repack[@]}" "$@" 2>/dev/null \
    | awk -F'|' '/(pp|tg)[0-9]/ {split($(NF-1), a, "±"); gsub(/ /, "", a[1]); print a[1]}'
}
row() { # name ours theirs
  printf '| %s | %s | %s | %s | %s |\n' "$label" "$1" "$2" "$3" "$(awk -v a="$2" -v b="$3" 'BEGIN {printf "%.2f", a / b}')"
}

echo "| GGUF | test | hearth | llama.cpp | ratio |"
echo "|---|---|---:|---:|---:|"
for model in "$@"; do
  label=$(basename "$model" .gguf)
  row "prefill 512" "$(ours 512 1 1)" "$(theirs -p 512 -n 0)"
  row "prefill 2048" "$(ours 2048 1 1)" "$(theirs -p 2048 -n 0)"
  row "decode 128 (empty context)" "$(ours 1 128 2)" "$(theirs -p 0 -n 128)"
  row "decode 128 after 512" "$(ours 512 128 2)" "$(theirs -p 0 -n 128 -d 512)"
done
