#!/usr/bin/env python3
"""Several choices of one prompt (`n`): `hearth --headless` against `llama-server` on one GGUF.

    scripts/bench-n-choices.py LLAMA_BIN_DIR HEARTH_BIN MODEL.gguf \\
        [--n 4] [--prompt-tokens 2048] [--max-tokens 16] [--threads 2] [--runs 3]

Each server gets `/v1/completions` requests of a fresh prompt (`--prompt-tokens` random token
ids, never sent before) sampled with a seed, one request at a time: once with `n: 1`, once with
`n: --n`. Both servers compute the prompt once and start the other choices from its K/V
(hearth: the others read its blocks from the prefix cache; llama-server, `-np --n` slots: its
`n_cmpl` children copy the first slot's state). Reported, best of `--runs` (the servers
alternate): each request's seconds, and how much longer `n` choices took than one. Only the
Python standard library is used.
"""

import argparse
import os
import random
import sys
import tempfile
import time

from llama_server import hearth_start, post, start


def timed(port, prompt, n, max_tokens):
    """One `/v1/completions` request of `n` choices; (seconds, its usage)."""
    t = time.perf_counter()
    r = post(port, "/v1/completions", {"prompt": prompt, "n": n, "max_tokens": max_tokens,
                                       "temperature": 0.8, "seed": 5, "ignore_eos": True})
    secs = time.perf_counter() - t
    choices = r.get("choices") or []
    assert len(choices) == n, f"{n} choices asked, {len(choices)} answered: {r}"
    return secs, r.get("usage")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama_bin_dir")
    ap.add_argument("hearth_bin")
    ap.add_argument("model")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-id", type=int, default=10000)
    a = ap.parse_args()
    rng = random.Random(7)
    ctx = a.n * (a.prompt_tokens + a.max_tokens + 64)
    llama_args = ["-t", str(a.threads), "-c", str(ctx), "-np", str(a.n), "-b", "2048", "-ub", "512"]
    with tempfile.TemporaryDirectory() as data_dir:
        servers = {
            "hearth": hearth_start(a.hearth_bin, a.model, a.threads, data_dir),
            "llama.cpp": start(a.llama_bin_dir, a.model, llama_args),
        }
        best = {(name, n): float("inf") for name in servers for n in (1, a.n)}
        try:
            for run in range(a.runs):
                for n in (1, a.n):
                    prompt = [rng.randrange(300, a.max_id) for _ in range(a.prompt_tokens)]
                    for name, (_, port) in servers.items():
                        secs, usage = timed(port, prompt, n, a.max_tokens)
                        best[(name, n)] = min(best[(name, n)], secs)
                        print(f"run {run + 1} {name} n={n}: {secs:.3f} s, usage {usage}", file=sys.stderr)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait()
    print(f"model {os.path.basename(a.model)}, a {a.prompt_tokens}-token prompt, {a.max_tokens} tokens per "
          f"choice, {a.threads} threads, llama-server -np {a.n}; best of {a.runs}")
    print(f"| server | n=1 s | n={a.n} s | n={a.n} / n=1 |")
    print("|---|---:|---:|---:|")
    for name in servers:
        one, many = best[(name, 1)], best[(name, a.n)]
        print(f"| {name} | {one:.3f} | {many:.3f} | {many / one:.2f} |")
    print(f"hearth / llama.cpp at n={a.n}: {best[('hearth', a.n)] / best[('llama.cpp', a.n)]:.2f}")


if __name__ == "__main__":
    main()
