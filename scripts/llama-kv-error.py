#!/usr/bin/env python3
"""llama.cpp's own K/V types against its f32 K/V, teacher-forced: the peer's side of
`hearth bench kv`.

    scripts/llama-kv-error.py LLAMA_BIN_DIR MODEL.gguf [--tokens 64] [--threads 2]

For each of hearth's `bench kv` prompts (through the model's chat template, as llama-server
renders it): llama-server with `-ctk f32 -ctv f32` decodes `tokens` greedy tokens; then, for
every K/V type, one llama-server per type is asked, position by position, for the top 20
log-probabilities after the prompt and the f32 reply so far (`n_predict: 1`, `n_probs: 20`;
the server's prompt cache makes each request one new token). Reported per type, as hearth
reports it: the mean and largest absolute difference of the log-probabilities of f32's top 10
tokens, how many positions keep f32's greedy token, and every position that does not, with
f32's top-two log-probability margin there (= its logit margin).

llama-server returns log-probabilities, not logits, which is why both tools compare these.

Flash attention: llama.cpp casts f32 K/V to f16 before its flash-attention op (llama-graph.cpp,
`build_attn_mha`), so with `-fa on` (its CPU default, `auto`) an f32 cache attends exactly as an
f16 one. The f32 baseline and f16/bf16 therefore run with `-fa off`; q8_0 V needs flash
attention in llama.cpp, so q8_0 runs with `-fa on`.
Only the Python standard library is used.
"""

import argparse

from llama_server import post, start

PROMPTS = [  # hearth::bench::KV_BENCH_PROMPTS
    "What is the capital of France?",
    "Write a Python function that returns the square of a number.",
    "List the first five prime numbers.",
    "Explain in two sentences why the sky is blue.",
]
TYPES = ["f32", "f16", "bf16", "q8_0"]


class Server:
    def __init__(self, bin_dir, model, kv, threads):
        args = ["-t", str(threads), "-ctk", kv, "-ctv", kv, "-fa", "on" if kv == "q8_0" else "off",
                "-c", "4096", "-np", "1"]
        self.proc, self.port = start(bin_dir, model, args)

    def close(self):
        self.proc.terminate()
        self.proc.wait()

    def prompt_ids(self, text):
        rendered = post(self.port, "/apply-template", {"messages": [{"role": "user", "content": text}]})["prompt"]
        return post(self.port, "/tokenize", {"content": rendered, "add_special": True, "parse_special": True})["tokens"]

    def greedy(self, ids, n):
        r = post(self.port, "/completion", {"prompt": ids, "n_predict": n, "temperature": 0,
                                            "return_tokens": True, "ignore_eos": True})
        return r["tokens"]

    def top_logprobs(self, ids):
        r = post(self.port, "/completion", {"prompt": ids, "n_predict": 1, "temperature": 0, "n_probs": 20})
        top = r["completion_probabilities"][0]["top_logprobs"]
        return {t["id"]: t["logprob"] for t in top}


def forced(server, cases):
    """Top-20 log-probabilities at every reply position of every case."""
    out = []
    for ids, reply in cases:
        out.append([server.top_logprobs(ids + reply[:i]) for i in range(len(reply))])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    base_server = Server(a.bin_dir, a.model, "f32", a.threads)
    try:
        cases = []
        for p in PROMPTS:
            ids = base_server.prompt_ids(p)
            cases.append((ids, base_server.greedy(ids, a.tokens)))
        base = forced(base_server, cases)
    finally:
        base_server.close()

    print(f"llama.cpp, model: {a.model}, {len(PROMPTS)} prompts x {a.tokens} greedy tokens (f32 K/V), teacher-forced\n")
    print("| K/V | flash attention | mean / max top-10 logprob error | same greedy token |")
    print("|---|---|---:|---:|")
    notes = []
    for kv in TYPES:
        if kv == "f32":
            got = base
        else:
            s = Server(a.bin_dir, a.model, kv, a.threads)
            try:
                got = forced(s, cases)
            finally:
                s.close()
        total, worst, count, same, diverge = 0.0, 0.0, 0, 0, []
        for pi, (g_case, b_case) in enumerate(zip(got, base)):
            for i, (g, b) in enumerate(zip(g_case, b_case)):
                ranked = sorted(b, key=b.get, reverse=True)
                for tok in ranked[:10]:
                    if tok in g:
                        d = abs(g[tok] - b[tok])
                        total, worst, count = total + d, max(worst, d), count + 1
                if max(g, key=g.get) == ranked[0]:
                    same += 1
                else:
                    diverge.append(f"{pi}:{i} ({b[ranked[0]] - b[ranked[1]]:.3f})")
        positions = sum(len(c) for c in base)
        fa = "on" if kv == "q8_0" else "off"
        print(f"| {kv} | {fa} | {total / max(count, 1):.4f} / {worst:.4f} | {same}/{positions} |")
        if diverge:
            notes.append(f"{kv} differs at (prompt:token (f32 margin)): {', '.join(diverge)}")
    for n in notes:
        print("\n" + n)


if __name__ == "__main__":
    main()
