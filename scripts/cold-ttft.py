#!/usr/bin/env python3
"""Cold time-to-first-token through the OpenAI chat API: hearth against llama-server.

    scripts/cold-ttft.py --gguf MODEL.gguf --llama-server PATH [--hearth PATH]
                         [--threads N] [--requests N] [--system-chars N]

Starts `hearth --headless` and `llama-server` on the same GGUF, one after
the other, each alone on the machine with the same thread count, and sends
each the same streamed chat requests: a system prompt of about
`--system-chars` characters plus a short question, `max_tokens` 1. Every
request's system prompt starts with its own number, so no request finds any
of its prompt in either server's cache (cold), while both servers see the
same texts. TTFT is measured by this one client from sending the request to
the first streamed content chunk. Prints the median and best per server and
the ratio hearth / llama-server (target ≤ 1.0).

Only the Python standard library is used.
"""

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

WORDS = (
    "You are a careful assistant for a small engineering team. Answer briefly, cite the "
    "file you rely on, and say when you are unsure. The team works on a build system, a "
    "scheduler, a storage layer and a web front end; questions may touch any of them. "
)


def system_prompt(i, chars):
    text = f"Session {i}. "
    while len(text) < chars:
        text += WORDS
    return text[:chars]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, timeout=300):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/v1/models")
            r = c.getresponse()
            if r.status == 200:
                return json.loads(r.read())["data"][0]["id"]
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server did not become ready")


def ttft(port, model, system, question):
    body = json.dumps(
        {
            "model": model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ],
            "max_tokens": 1,
            "temperature": 0,
            "stream": True,
        }
    )
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    first = None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        choices = json.loads(data).get("choices") or []
        if first is None and choices and (choices[0].get("delta") or {}).get("content"):
            first = time.perf_counter() - t0
    c.close()
    if first is None:
        raise RuntimeError("no content chunk came back")
    return first


def run(cmd, port, args):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        model = wait_ready(port, proc)
        # One warm-up request (page faults, thread start), not counted.
        ttft(port, model, system_prompt(-1, args.system_chars), "Warm up.")
        times = []
        for i in range(args.requests):
            times.append(ttft(port, model, system_prompt(i, args.system_chars), "Which layer stores files?"))
        return times
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--hearth", default="target/release/hearth")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--system-chars", type=int, default=6000)
    args = ap.parse_args()

    results = {}
    with tempfile.TemporaryDirectory() as data:
        port = free_port()
        results["hearth"] = run(
            [args.hearth, "--headless", "-m", args.gguf, "--port", str(port), "--threads", str(args.threads),
             "--data-dir", data, "--disk-cache-gib", "0"],
            port,
            args,
        )
    port = free_port()
    results["llama-server"] = run(
        [args.llama_server, "-m", args.gguf, "--port", str(port), "-t", str(args.threads), "-tb",
         str(args.threads), "--no-warmup", "-np", "1"],
        port,
        args,
    )
    print(f"cold TTFT, {args.system_chars}-character system prompt, {args.requests} requests, "
          f"{args.threads} threads, {os.path.basename(args.gguf)}")
    print("| server | median ms | best ms |")
    print("|---|---:|---:|")
    for name, t in results.items():
        print(f"| {name} | {statistics.median(t) * 1e3:.1f} | {min(t) * 1e3:.1f} |")
    ratio = statistics.median(results["hearth"]) / statistics.median(results["llama-server"])
    print(f"hearth / llama-server (median): {ratio:.2f} (target <= 1.0: {'met' if ratio <= 1.0 else 'missed'})")


if __name__ == "__main__":
    sys.exit(main())
