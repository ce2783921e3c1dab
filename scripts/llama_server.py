"""A llama-server (or `hearth --headless`) child process for the measuring scripts (llama-kv-error.py,
record-llama-references.py, the tokenizer recorders): start one on a free loopback port, wait
for /health, POST JSON, ask for one greedy token and its log-probabilities, write a reference;
and what the tokenizer recorders share. Only the Python standard library
is used."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request


def post(port, path, body):
    """POSTs `body` as JSON to the server on `port`; its JSON answer."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        return json.loads(r.read())


def next_token(port, ids):
    """llama.cpp's greedy next token after the token ids `ids` and its top 10 log-probabilities,
    or None where it reports none: llama-server keeps back the text, and with it the
    probabilities, of a token that ends in an incomplete UTF-8 sequence (a lone byte token of a
    tiny vocabulary), which is why the recorders ask one position at a time instead of decoding
    in one request."""
    r = post(port, "/completion", {"prompt": ids, "n_predict": 1, "temperature": 0, "n_probs": 10,
                                   "ignore_eos": True, "return_tokens": True, "cache_prompt": False})
    tok = r["tokens"][0]
    probs = r.get("completion_probabilities") or []
    if not probs:
        return tok, None
    assert probs[0]["id"] == tok, (probs[0]["id"], tok)
    return tok, [[t["id"], t["logprob"]] for t in probs[0]["top_logprobs"]]


def write_json(path, data):
    """Writes a recorded reference: compact JSON and a final line break."""
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)


def version(bin_dir):
    """`llama-server --version` on one line: what the recorded references name."""
    r = subprocess.run([f"{bin_dir}/llama-server", "--version"], capture_output=True, text=True)
    return " ".join((r.stdout + r.stderr).split())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def amx():
    """Whether this CPU has AMX's int8 tiles."""
    try:
        with open("/proc/cpuinfo") as f:
            return "amx_int8" in f.read()
    except OSError:
        return False


def hearth_start(binary, model, threads, data_dir, args=()):
    """`hearth --headless` on `model` on a free port (CPU, `threads`, an empty config, its data
    in `data_dir`, then `args`); (process, port) once it says where it serves."""
    config = os.path.join(data_dir, "empty-config.toml")
    open(config, "w").close()
    cmd = [binary, "--config", config, "--offline", "--headless", "--port", "0", "--device", "cpu",
           "--threads", str(threads), *args, "--model", model]
    env = dict(os.environ, HEARTH_DATA_DIR=os.path.join(data_dir, "data"), RUST_LOG="warn")
    env.pop("HEARTH_API_KEY", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    found = []

    def read():
        for line in proc.stderr:
            if " at http://" in line and not found:
                found.append(line.split(" at http://", 1)[1].split("/", 1)[0])

    threading.Thread(target=read, daemon=True).start()
    for _ in range(1200):
        if found:
            return proc, int(found[0].rsplit(":", 1)[1])
        if proc.poll() is not None:
            sys.exit(f"hearth exited with {proc.returncode}: {' '.join(cmd)}")
        time.sleep(0.1)
    proc.kill()
    sys.exit(f"hearth did not start: {' '.join(cmd)}")


def start(bin_dir, model, args, cwd=None):
    """Starts `llama-server -m model args…` on a free port; (process, port) once /health answers.
    Exits the script with the command line if the server dies or never answers."""
    port = free_port()
    cmd = [f"{bin_dir}/llama-server", "-m", model, "--port", str(port), "--no-webui", *args]
    # On a CPU with AMX, llama.cpp (0.3.36's, built native) repacks Q8_0 weights for its AMX
    # kernels, which crash on these tiny files: keep them as stored (its AVX2 kernels).
    if amx():
        cmd.append("--no-repack")
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except Exception:
            if proc.poll() is not None:
                sys.exit(f"llama-server exited with {proc.returncode}: {' '.join(cmd)}")
        time.sleep(0.5)
    proc.kill()
    sys.exit(f"llama-server did not start: {' '.join(cmd)}")


# Text of many kinds for the tokenizer references: accents, CJK, emoji, digits, runs of spaces,
# tabs and line breaks, contractions, code.
TOKENIZER_TEXTS = [
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "café naïve résumé Ærøskøbing Größe über mañana",
    "日本語のテキスト、中文字符、한국어 문장",
    "emoji 🎉🚀✨ crab 🦀 family 👩\u200d👩\u200d👧 flag 🇫🇷 heart ❤️",
    "12345 3.14159 1,000,000 2024-06-01 0.5e-10 9999999999",
    "spaces    between\twords\t\ttabs\n\n\nnewlines  trailing   ",
    "   leading spaces",
    " ",
    "\n",
    "\n\n",
    "a\n\n\nb",
    "\r\nwindows\r\nlines\r\n",
    "I'm sure they've done it; we'll see. DON'T SHOUT, YOU'RE LOUD. it's 'quoted'",
    "fn main() {\n    let x: Vec<u32> = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n",
    "def f(a, b):\n\treturn a ** b  # power\n",
    "The model reads the prompt and the answer.",
    "the the the then there these",
]


def tokenize_cases(port, texts):
    """For each text, llama-server's /tokenize (special tokens in the text recognised, nothing
    added) and /detokenize of those ids: [{text, ids, detokenized}]."""
    cases = []
    for text in texts:
        ids = [t["id"] if isinstance(t, dict) else t for t in
               post(port, "/tokenize", {"content": text, "add_special": False, "parse_special": True})["tokens"]]
        back = post(port, "/detokenize", {"tokens": ids})["content"]
        cases.append({"text": text, "ids": ids, "detokenized": back})
    return cases
