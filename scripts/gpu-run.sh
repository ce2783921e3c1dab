#!/usr/bin/env bash
# The CUDA path on a lent GPU (issue 13), prepared here and run there.
#
# A lease is 30 minutes and the GPU machine has no Rust toolchain and no
# network, so everything is built here first, with `--features cuda` (the
# CUDA 13.0 compiler from NVIDIA's wheels, `.ci/cuda-toolchain.sh`; PTX for
# Hopper, compute capability 90; x86-64-v3 code, which the GPU machine's CPU
# runs, and hearth's matmul picks AVX-512 there at run time if it has it).
#
# Here:
#   scripts/gpu-run.sh pack     build the release binary and the test binaries that
#                               touch CUDA (tests/cuda_kernels.rs, tests/cuda_engine.rs,
#                               tests/real_llama_cpp.rs), strip and xz them into
#                               target/gpu-pack/ (about 45 MiB) beside a copy of this
#                               script; the library's unit tests (every CPU kernel path,
#                               AVX-512 among them) into target/gpu-unit/
#   scripts/gpu-run.sh models   split SmolLM2-135M-Instruct Q4_1 (HEARTH_TEST_MODELS, or
#                               .ci/fetch-models.sh's cache) into target/gpu-model-1, -2, …:
#                               the first sized to travel beside the pack, the others
#                               each under what one call carries beside the working tree
#
# There, one device call each, in this order (the machine stays warm 30 s between
# calls, and what a call leaves in /tmp/hearth-gpu stays while it is warm; the
# script itself travels with the working tree). As run on 2026-12-04, H200:
#   carry ["target/gpu-pack", "target/gpu-model-1"] (150 s):
#       bash scripts/gpu-run.sh stash-model; bash scripts/gpu-run.sh tests; bash scripts/gpu-run.sh bench
#   carry ["target/gpu-model-2"] (10 s):
#       bash scripts/gpu-run.sh stash-model
#   carry ["target/gpu-model-3"] (the last part; the model is joined and checked; 60 s):
#       bash scripts/gpu-run.sh stash-model; bash scripts/gpu-run.sh real-tests; bash scripts/gpu-run.sh real-model
#   optionally, carry ["target/gpu-unit"]: bash scripts/gpu-run.sh unit
# Each writes its log under $OUT (tests.log; bench.log and bench-gpu.json: `hearth bench
# gpu`'s every figure; real-tests.log: SmolLM2 teacher-forced against llama.cpp's
# references on CUDA; real-model.log with devices.json: `hearth bench devices`, CUDA
# against the CPU teacher-forced, the same prompts through `hearth run` on both, the
# server's /metrics on CUDA, and SmolLM2's prefill and decode against candle) and the
# machine's description (machine.txt). Each step has its own time limit; the three calls
# took about 4½ of a session's 15 minutes of device time, the start included.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
work=/tmp/hearth-gpu
model=SmolLM2-135M-Instruct.Q4_1.gguf

die() {
    echo "gpu-run: $*" >&2
    exit 1
}

# Linking with `--features cuda` needs the CUDA libraries (cudarc links them;
# candle's MoE kernels need the runtime), but NVIDIA's wheels here hold only
# the runtime, and there is no driver. So the link uses stubs, as the CUDA
# toolkit's own `lib/stubs` do: for each library, a shared object under its
# real soname that defines every symbol our objects leave undefined. At run
# time the loader finds the real libraries by those sonames.
link_stubs() {
    local target="$1" dir="$2"
    rm -rf "$dir" && mkdir -p "$dir"
    local syms="$dir/undefined.txt"
    for f in "$target"/release/deps/lib*.rlib "$target"/release/build/candle-kernels-*/out/*.a; do
        nm -u "$f" 2>/dev/null
    done | awk '{print $NF}' | sort -u > "$syms"
    stub() { # library soname pattern
        grep -E "$3" "$syms" | sed 's/.*/void &(void) {}/' > "$dir/$1.c"
        cc -shared -fPIC -o "$dir/$1.so" -Wl,-soname,"$2" "$dir/$1.c" || die "could not build the $1 stub"
    }
    stub libcuda libcuda.so.1 '^cu[A-Z]'
    stub libcublas libcublas.so.13 '^cublas([^L]|L[^t])'
    stub libcublasLt libcublasLt.so.13 '^cublasLt'
    stub libcurand libcurand.so.10 '^curand'
    stub libnvrtc libnvrtc.so.13 '^nvrtc'
    ln -s "$CUDA_ROOT/lib/libcudart.so.13" "$dir/libcudart.so"
}

pack() {
    cd "$here/.." || die "no repository above $here"
    [ -f Cargo.toml ] || die "run it from the repository (scripts/gpu-run.sh pack)"
    # shellcheck source=/dev/null
    source .ci/cuda-toolchain.sh || die "the CUDA compiler could not be installed"
    export RUSTFLAGS="-C target-cpu=x86-64-v3"
    local target=target/cuda out=target/gpu-pack
    echo "building with --features cuda into $target (the first build compiles candle's kernels with nvcc: 20-30 minutes on 2 cores)" >&2
    # Compiles everything; only the links need the stubs (LIBRARY_PATH is not part of
    # cargo's fingerprint, so setting it rebuilds nothing).
    cargo build --release --features cuda --target-dir "$target" --lib || die "build failed"
    link_stubs "$target" "$PWD/$target/link-stubs"
    export LIBRARY_PATH="$PWD/$target/link-stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"
    cargo build --release --features cuda --target-dir "$target" || die "release build failed"
    local json="$target/gpu-tests.json"
    cargo test --release --features cuda --no-run --target-dir "$target" \
        --lib --test cuda_kernels --test cuda_engine --test real_llama_cpp --message-format=json > "$json" ||
        die "test build failed"
    rm -rf "$out" && mkdir -p "$out"
    cp scripts/gpu-run.sh "$out/"
    strip -o "$out/hearth" "$target/release/hearth"
    # Each test executable under its target's name: lib (the unit tests), cuda_kernels, cuda_engine.
    python3 - "$out" "$json" <<'PY' || die "could not find the test executables"
import json, subprocess, sys
out, listing = sys.argv[1], sys.argv[2]
for line in open(listing):
    if not line.startswith("{"):
        continue
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
        name = "lib" if "lib" in msg["target"]["kind"] else msg["target"]["name"]
        subprocess.run(["strip", "-o", f"{out}/test-{name}", msg["executable"]], check=True)
PY
    xz -T2 -6 "$out"/hearth "$out"/test-*
    # The unit tests (all on the CPU) travel on their own: the pack leaves room for the model.
    rm -rf target/gpu-unit && mkdir -p target/gpu-unit && mv "$out/test-lib.xz" target/gpu-unit/
    du -ab "$out" target/gpu-unit
    local size
    size=$(du -sb "$out" | cut -f1)
    [ "$size" -lt $((64 * 1024 * 1024)) ] || die "the pack is $size bytes, over the 64 MiB a call carries"
    echo "ready: carry [\"$out\"] and run: bash $out/gpu-run.sh tests" >&2
}

models() {
    cd "$here/.." || die "no repository above $here"
    local src="${HEARTH_TEST_MODELS:-${HEARTH_MODEL_CACHE:-$HOME/.cache/hearth-test-models}}/$model"
    [ -f "$src" ] || die "$src is missing: run .ci/fetch-models.sh"
    [ -d target/gpu-pack ] || die "run pack first: the first part travels beside the pack"
    # What one call carries: 64 MiB with the working tree (tracked and untracked, not ignored).
    local limit=$((64 * 1024 * 1024 - 2 * 1024 * 1024)) tree pack
    tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | awk 'END {print $1}')
    pack=$(du -sb target/gpu-pack | cut -f1)
    local first=$((limit - tree - pack)) rest=$((limit - tree)) size offset=0 n=1
    [ "$first" -gt 0 ] || die "the pack ($pack bytes) leaves no room for a part of the model"
    size=$(stat -c %s "$src")
    rm -rf target/gpu-model-*
    while [ "$offset" -lt "$size" ]; do
        local len=$rest
        [ "$n" -eq 1 ] && len=$first
        mkdir -p "target/gpu-model-$n"
        tail -c +$((offset + 1)) "$src" | head -c "$len" > "target/gpu-model-$n/$model.part$n"
        offset=$((offset + len))
        n=$((n + 1))
    done
    echo $((n - 1)) > "target/gpu-model-$((n - 1))/$model.parts"
    sha256sum "$src" | cut -d' ' -f1 > "target/gpu-model-$((n - 1))/$model.sha256"
    du -ab target/gpu-model-*
}

# --- on the GPU machine ---------------------------------------------------

out_dir() {
    OUT="${OUT:-$work/out}"
    mkdir -p "$OUT"
}

setup() {
    out_dir
    mkdir -p "$work/bin" "$work/data"
    if [ ! -x "$work/bin/hearth" ]; then
        local pack=target/gpu-pack
        [ -f "$pack/hearth.xz" ] || pack="$here"
        [ -f "$pack/hearth.xz" ] || die "no pack in target/gpu-pack and nothing unpacked in $work: carry target/gpu-pack"
        for f in "$pack"/*.xz; do
            xz -T0 -dc "$f" > "$work/bin/$(basename "$f" .xz)" && chmod +x "$work/bin/$(basename "$f" .xz)"
        done
    fi
    # A unit test reads fixtures under the path the crate was built at.
    [ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
    # The CUDA 13 libraries of the nvidia-* packages beside PyTorch.
    local dirs
    dirs="$(python3 -m pip show -f nvidia-cublas nvidia-cuda-runtime nvidia-curand nvidia-cuda-nvrtc 2>/dev/null |
        awk '/^Location:/ {loc = $2} /\.so/ {print loc "/" $1}' | xargs -r -n1 dirname | sort -u | paste -sd:)"
    [ -n "$dirs" ] || echo "gpu-run: no nvidia-* pip packages found; relying on the system's CUDA libraries" >&2
    # The driver's libcuda, where the loader's cache does not know it.
    if ! ldconfig -p | grep -q 'libcuda\.so\.1'; then
        for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
            [ -e "$d/libcuda.so.1" ] && dirs="${dirs:+$dirs:}$d" && break
        done
    fi
    export LD_LIBRARY_PATH="${dirs}${dirs:+${LD_LIBRARY_PATH:+:}}${LD_LIBRARY_PATH:-}"
    export HEARTH_DATA_DIR="$work/data"
    {
        date -u
        nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv 2>&1
        lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core"
        echo "x86 flags: $(grep -o -w -E 'avx2|avx512f|avx512bw|avx512_vnni|avx_vnni' /proc/cpuinfo | sort -u | paste -sd' ')"
        echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    } > "$OUT/machine.txt"
}

tests() {
    setup
    # No device fails the CUDA tests instead of skipping them.
    export HEARTH_REQUIRE_CUDA=1
    {
        local status=0
        # The CUDA tests; each binary under its own limit (the unit tests, all on the CPU,
        # are `unit`: CI runs them too, on a CPU without AVX-512).
        for t in cuda_kernels:45 cuda_engine:150; do
            echo "== ${t%%:*}"
            timeout "${t##*:}" "$work/bin/test-${t%%:*}" --test-threads 8 || { status=1; echo "== ${t%%:*}: FAILED"; }
        done
        [ "$status" -eq 0 ]
    } 2>&1 | tee "$OUT/tests.log"
}

unit() {
    setup
    if [ ! -x "$work/bin/test-lib" ]; then
        [ -f target/gpu-unit/test-lib.xz ] || die "carry target/gpu-unit for the unit tests"
        xz -T0 -dc target/gpu-unit/test-lib.xz > "$work/bin/test-lib" && chmod +x "$work/bin/test-lib"
    fi
    timeout 60 "$work/bin/test-lib" --test-threads 16 2>&1 | tee "$OUT/unit.log"
}

bench() {
    setup
    local h="$work/bin/hearth" extra=()
    # SmolLM2-135M Q4_1 too, where its parts have all arrived on this machine.
    [ -f "$work/models/$model" ] && extra=(--gguf "$work/models/$model")
    {
        echo "== bench gpu: copies, prefill/decode at batch 1 and 16 vs candle, TTFT of 8,192 tokens from every tier"
        timeout 230 "$h" --device cuda bench gpu "${extra[@]}" --decode-tokens 64 --repeats 2 \
            --json "$OUT/bench-gpu.json"
        echo "== decode, CPU (our matmul on this CPU's widest path)"
        timeout 30 "$h" --device cpu bench decode --prompt-tokens 256 --decode-tokens 32 --repeats 2 --no-reference
    } 2>&1 | tee "$OUT/bench.log"
}

# Moves whichever parts of the model this call carried into $work/models; once the last
# has come (it says how many there are), joins them and checks the whole file.
stash_model() {
    setup
    mkdir -p "$work/models"
    local d m="$work/models/$model"
    for d in target/gpu-model-*; do
        [ -d "$d" ] && cp "$d"/"$model".* "$work/models/"
    done
    if [ -f "$m.parts" ] && [ ! -f "$m" ]; then
        local n i
        n=$(cat "$m.parts")
        for i in $(seq 1 "$n"); do
            [ -f "$m.part$i" ] || die "part $i of $n is missing: carry each target/gpu-model-N in turn"
        done
        for i in $(seq 1 "$n"); do cat "$m.part$i"; done > "$m.joining"
        [ "$(sha256sum "$m.joining" | cut -d' ' -f1)" = "$(cat "$m.sha256")" ] ||
            die "the joined model does not match its checksum"
        mv "$m.joining" "$m" && rm -f "$m".part*
    fi
    ls -l "$work/models" | tee "$OUT/stash.log"
}

real_model() {
    setup
    local m="$work/models/$model"
    [ -f "$m" ] || die "the model is not here: carry each target/gpu-model-N in turn with stash-model"
    {
        # The two devices multiply with different kernels (ours on the CPU, candle's on CUDA),
        # so a near-tie may break either way: `bench devices` decides, teacher-forced, whether
        # each difference is one (exit status 1 where the CPU's choice was clear).
        local status=0
        echo "== bench devices: CUDA against the CPU, the chat prompts below, 32 greedy tokens each"
        timeout 60 "$work/bin/hearth" --device cuda bench devices --gguf "$m" --tokens 32 \
            --json "$OUT/devices.json" || status=1
        # The same prompts through the whole engine (`hearth run`) on each device: the same text,
        # or a difference bench devices found too (then it said whether it is a near-tie).
        local i=0
        for p in "What is the capital of France?" "Write a Python function that returns the square of a number." \
            "List the first five prime numbers." "Explain in two sentences why the sky is blue."; do
            for d in cpu cuda; do
                echo "== $d: $p"
                timeout 20 "$work/bin/hearth" --device "$d" run -m "$m" --chat -p "$p" -n 32 --temperature 0 \
                    --disk-cache-gib 0 --host-cache-gib 1 > "$work/text-$d.txt" || status=1
                cat "$work/text-$d.txt"
            done
            if cmp -s "$work/text-cpu.txt" "$work/text-cuda.txt"; then
                echo "== same greedy text on the CPU and on CUDA"
            elif python3 -c "import json, sys; r = json.load(open(sys.argv[1]))['replies'][$i]; sys.exit(r['first_difference'] is None)" \
                "$OUT/devices.json" 2>/dev/null; then
                echo "== different greedy text on the CPU and on CUDA, as bench devices found (its verdict above)"
            else
                echo "== DIFFERENT greedy text on the CPU and on CUDA through the engine, where bench devices found none"
                status=1
            fi
            i=$((i + 1))
        done
        serve "$m" || status=1
        for b in 1 16; do
            echo "== decode at batch $b on CUDA: ours against candle-transformers' quantized_llama"
            timeout 40 "$work/bin/hearth" --device cuda bench decode --gguf "$m" --batch "$b" \
                --prompt-tokens 512 --decode-tokens 64 --repeats 2 --json "$OUT/decode-smollm2-b$b.json" || status=1
        done
        [ "$status" -eq 0 ]
    } 2>&1 | tee "$OUT/real-model.log"
}

# The headless server on CUDA: /metrics' memory split (the device's own figures) before and
# after one chat request, and the request's reply.
serve() {
    local m="$1" port=8089
    echo "== the server on CUDA: /metrics' memory split before and after a chat request"
    "$work/bin/hearth" --device cuda --headless -m "$m" --port "$port" --host-cache-gib 1 --disk-cache-gib 0 \
        > "$work/server.log" 2>&1 &
    local pid=$!
    timeout 40 python3 - "$port" <<'PY'
import json, sys, time, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
for _ in range(150):
    try:
        urllib.request.urlopen(base + "/health", timeout=1)
        break
    except Exception:
        time.sleep(0.2)
def metrics(what):
    print(f"-- /metrics, {what}")
    for line in urllib.request.urlopen(base + "/metrics").read().decode().splitlines():
        if line.startswith(("hearth_memory", "hearth_cache_blocks", "hearth_kv")):
            print(line)
metrics("idle")
body = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 16, "temperature": 0}
req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"})
reply = json.load(urllib.request.urlopen(req, timeout=30))
print("-- reply:", json.dumps(reply["choices"][0]["message"]["content"]), reply["usage"])
metrics("after the request")
PY
    local status=$?
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    [ "$status" -eq 0 ] || tail -20 "$work/server.log"
    return "$status"
}

# tests/real_llama_cpp.rs on the GPU: SmolLM2 teacher-forced on llama.cpp's recorded replies,
# with the CPU's tolerances (the Gemma 3 file does not travel).
real_tests() {
    setup
    [ -f "$work/models/$model" ] || die "the model is not here: carry each target/gpu-model-N in turn with stash-model"
    HEARTH_TEST_DEVICE=cuda HEARTH_TEST_MODELS="$work/models" timeout 60 "$work/bin/test-real_llama_cpp" \
        smollm2 --nocapture 2>&1 | tee "$OUT/real-tests.log"
}

case "${1:-}" in
    pack) pack ;;
    models) models ;;
    tests) tests ;;
    unit) unit ;;
    bench) bench ;;
    stash-model) stash_model ;;
    real-model) real_model ;;
    real-tests) real_tests ;;
    *) die "usage: $0 pack|models (here) or tests|unit|bench|stash-model|real-model|real-tests (on the GPU machine)" ;;
esac
