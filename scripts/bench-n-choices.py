#!/usr/bin/env python3
"""Several choices of one prompt (`n`), and several prompts in one request: `hearth --headless`
against `llama-server` on one GGUF.

    scripts/bench-n-choices.py LLAMA_BIN_DIR HEARTH_BIN MODEL.gguf \\
        [--n 4] [--prompt-tokens 2048] [--max-tokens 16] [--threads 2] [--runs 3]

Each server gets `/v1/completions` requests of fresh prompts (`--prompt-tokens` random token
ids, never sent before) sampled with a seed, one request at a time: one prompt with `n: 1`, one
prompt with `n: --n`, and `--n` prompts in one request (a batch, `n: 1`). For `n`, both servers
compute the prompt once and start the other choices from its K/V (hearth: the others read its
blocks from the prefix cache; llama-server, `-np --n` slots: its `n_cmpl` children copy the
first slot's state); a batch's prompts run side by side (hearth's engine batch; llama-server's
slots). Reported, best of `--runs` (the servers alternate): each request's seconds, and how
much longer it took than one prompt's one choice. Only the Python standard library is used.
"""

import argparse
import os
import random
import sys
import tempfile
import time

from llama_server import hearth_start, post, start


def timed(port, prompt, n, max_tokens, expect):
    """One `/v1/completions` request of `n` choices of `prompt` (one prompt or a list), `expect`
    choices in all; (seconds, its usage)."""
    t = time.perf_counter()
    r = post(port, "/v1/completions", {"prompt": prompt, "n": n, "max_tokens": max_tokens,
                                       "temperature": 0.8, "seed": 5, "ignore_eos": True})
    secs = time.perf_counter() - t
    choices = r.get("choices") or []
    assert len(choices) == expect, f"{expect} choices asked, {len(choices)} answered: {r}"
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
        cases = {"n=1": (1, 1), f"n={a.n}": (1, a.n), f"{a.n} prompts": (a.n, 1)}
        best = {(name, case): float("inf") for name in servers for case in cases}
        try:
            for run in range(a.runs):
                for case, (prompts, n) in cases.items():
                    fresh = [[rng.randrange(300, a.max_id) for _ in range(a.prompt_tokens)] for _ in range(prompts)]
                    prompt = fresh[0] if prompts == 1 else fresh
                    for name, (_, port) in servers.items():
                        secs, usage = timed(port, prompt, n, a.max_tokens, prompts * n)
                        best[(name, case)] = min(best[(name, case)], secs)
                        print(f"run {run + 1} {name} {case}: {secs:.3f} s, usage {usage}", file=sys.stderr)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait()
    print(f"model {os.path.basename(a.model)}, a {a.prompt_tokens}-token prompt, {a.max_tokens} tokens per "
          f"choice, {a.threads} threads, llama-server -np {a.n}; best of {a.runs}")
    print("| request | hearth s | llama.cpp s | hearth / llama.cpp | hearth / its n=1 | llama.cpp / its n=1 |")
    print("|---|---:|---:|---:|---:|---:|")
    for case in cases:
        h, l = best[("hearth", case)], best[("llama.cpp", case)]
        print(f"| {case} | {h:.3f} | {l:.3f} | {h / l:.2f} | {h / best[('hearth', 'n=1')]:.2f} | "
              f"{l / best[('llama.cpp', 'n=1')]:.2f} |")


if __name__ == "__main__":
    main()
