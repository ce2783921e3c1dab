#!/usr/bin/env bash
# The official `openai`, `anthropic` and `ollama` Python clients the client tests drive hearth with,
# installed once from the package index into a cache directory (no virtualenv needed:
# `pip install --target`).
#
#   source .ci/python-client.sh    # sets HEARTH_TEST_OPENAI (a PYTHONPATH entry) for `cargo test`
#   .ci/python-client.sh           # prints the directory
#
# The cache directory: $HEARTH_PYTHON_CACHE, else ~/.cache/hearth-test-python.

HEARTH_OPENAI_VERSION=3.54.0
HEARTH_ANTHROPIC_VERSION=2.14.0
HEARTH_OLLAMA_VERSION=0.6.3

hearth_python_client() (
    set -euo pipefail
    local root="${HEARTH_PYTHON_CACHE:-$HOME/.cache/hearth-test-python}"
    local dir="$root/openai-$HEARTH_OPENAI_VERSION-anthropic-$HEARTH_ANTHROPIC_VERSION-ollama-$HEARTH_OLLAMA_VERSION"
    if [ -f "$dir/.complete" ]; then
        echo "$dir"
        return 0
    fi
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
    fi
    mkdir -p "$root"
    rm -rf "$dir.tmp"
    echo "python-client: installing openai==$HEARTH_OPENAI_VERSION, anthropic==$HEARTH_ANTHROPIC_VERSION and ollama==$HEARTH_OLLAMA_VERSION into $dir" >&2
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts \
        --root-user-action=ignore --only-binary :all: \
        --target "$dir.tmp" "openai==$HEARTH_OPENAI_VERSION" "anthropic==$HEARTH_ANTHROPIC_VERSION" "ollama==$HEARTH_OLLAMA_VERSION" >&2
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    touch "$dir/.complete"
    echo "$dir"
)

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    HEARTH_TEST_OPENAI="$(hearth_python_client)"
    export HEARTH_TEST_OPENAI
else
    hearth_python_client
fi
