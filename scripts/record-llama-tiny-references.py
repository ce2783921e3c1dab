#!/usr/bin/env python3
"""Records llama.cpp's outputs on the tiny random models of tests/tiny_llama_cpp.rs.

    HEARTH_WRITE_TINY_MODELS=DIR cargo test --release --test tiny_llama_cpp   # writes the models
    scripts/record-llama-tiny-references.py LLAMA_BIN_DIR DIR [--out tests/data]

For each model (Q8_0, written by hearth's testkit: a `qwen3moe` and a Mixtral-layout `llama`
file with 8 experts, 2 per token; a Qwen3 file with YaRN rope scaling; Phi-3 files, plain and
with LongRoPE factors and partial rotary, whose context of 512 picks the long factors in one
and the short in the other; a Ministral 3 file with YaRN and attention temperature; a SmolLM3
file whose fourth layer skips rope; a Granite file with its four multipliers; a Gemma 2 file
with soft caps on attention scores and logits and a local first layer; an ERNIE 4.5 file;
OLMo 2 files, one with OLMo 3's local layer and YaRN; EXAONE 4.0 files, one with the 32B's 64
layers; GLM-4 files, one with M-RoPE sections; a GLM-4.5 file: a dense layer, then sigmoid-routed
experts with a selection bias and a shared expert; a gpt-oss file: attention sinks, biases, a
local first layer, biased experts with a clamped SwiGLU; Gemma 4 files (the E models' and the
26B-A4B's layouts); DeepSeek-V2 files (latent attention in GLM-4.7-Flash's, V2-Lite's and the
older one-`attn_kv_b` layouts, in Q8_0 and in f32, and as `mistral4`); Qwen3-VL's language models (`qwen3vl`,
`qwen3vlmoe`: M-RoPE sections, deepstack layers) and Qwen2-VL's (`qwen2vl`); an ERNIE 4.5 MoE file (`ernie4_5-moe`); a Seed-OSS file (`seed_oss`); Qwen3.5 files (`qwen35`: gated delta net layers; `qwen35moe`: with experts and a gated shared expert; Q8_0 and f32); Qwen3-Next files (`qwen3next`: V heads grouped by Q/K head, `ssm_ba`, and the older `ssm_in`); LFM2 files (`lfm2`: short convolutions beside attention; `lfm2moe`: with sigmoid-routed experts after a dense layer); Cohere files (`cohere2`: a LayerNorm read by attention and MLP in parallel, local layers and a global one without rope; `command-r`: every layer global); Qwen2 MoE files (`qwen2moe`: softmax-routed experts, not renormalized, beside a gated shared expert; Q8_0 and f32); EXAONE 3.5 files (`exaone`: NeoX pairs, `rope_freqs`; Q8_0 and f32) an InternLM2 file (`internlm2`); OLMoE files (`olmoe`: Q and K normalized whole, experts not renormalized; Q8_0 and f32); Arcee AFM files (`arcee`: an ungated squared-ReLU MLP; Q8_0 and f32); MiniCPM files (`minicpm`: Granite's multipliers from the file, and the older files' defaults); Granite 4.0 hybrid files (`granitehybrid`: Mamba-2 layers beside attention, dense and with experts) a Granite 3 MoE file (`granitemoe`); Nemotron-H files (`nemotron_h`: Mamba-2, attention and MLP layers; `nemotron_h_moe`: with
sigmoid-routed ungated experts beside a shared expert, and with latent projections); and, rewritten by the testkit's
`requantize` in types candle cannot write, a Llama file all IQ4_NL, a Qwen3 file all IQ4_XS, a
Qwen3 MoE and a gpt-oss file with MXFP4 experts, a Llama file with each of the IQ1, IQ2, IQ3
and TQ types; Llama files all Q3_K and all Q2_K),
llama-server with K/V
f32 and flash attention
off (so f32 is really f32) decodes 24 greedy tokens after each of a few fixed token-id prompts
(`ignore_eos`), one request per position, and reports the top 10 log-probabilities at each
(where llama-server gives them; see `llama_server.next_token`): teacher-forced on llama.cpp's own tokens, which is
what the test compares. The prompts are byte
tokens (ids below 256, every tiny vocabulary's first 256), so they need no tokenizer. The
test writes the models again from the same specs and checks their size against the one
recorded here.

Writes tests/data/llama-cpp-tiny.json with the llama.cpp version and the command used.
Only the Python standard library is used.
"""

import argparse
import os
import pathlib
import sys

from llama_server import next_token, start, version, write_json

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS = ["tiny-qwen3moe-q8_0.gguf", "tiny-mixtral-q8_0.gguf", "tiny-qwen3-yarn-q8_0.gguf",
          "tiny-phi3-q8_0.gguf", "tiny-phi3-longrope-long-q8_0.gguf", "tiny-phi3-longrope-short-q8_0.gguf",
          "tiny-mistral3-q8_0.gguf", "tiny-smollm3-q8_0.gguf", "tiny-granite-q8_0.gguf",
          "tiny-gemma2-q8_0.gguf", "tiny-ernie4_5-q8_0.gguf", "tiny-olmo2-q8_0.gguf",
          "tiny-olmo3-q8_0.gguf", "tiny-exaone4-q8_0.gguf", "tiny-exaone4-32b-layout-q8_0.gguf",
          "tiny-glm4-q8_0.gguf", "tiny-glm4moe-q8_0.gguf", "tiny-glm4-mrope-q8_0.gguf",
          "tiny-llama-iq4_nl.gguf", "tiny-qwen3-iq4_xs.gguf", "tiny-qwen3moe-mxfp4.gguf",
          "tiny-llama-q3_k.gguf", "tiny-llama-q2_k.gguf", "tiny-gpt-oss-q8_0.gguf",
          "tiny-gpt-oss-mxfp4.gguf", "tiny-llama-iq1-iq2-iq3-tq.gguf",
          "tiny-gemma4-q8_0.gguf", "tiny-gemma4-moe-q8_0.gguf",
          "tiny-deepseek2-q8_0.gguf", "tiny-deepseek2-lite-q8_0.gguf", "tiny-deepseek2-kv-b-q8_0.gguf",
          "tiny-deepseek2-f32.gguf", "tiny-deepseek2-lite-f32.gguf", "tiny-deepseek2-kv-b-f32.gguf",
          "tiny-qwen3vl-q8_0.gguf", "tiny-qwen3vlmoe-q8_0.gguf", "tiny-qwen3vl-f32.gguf",
          "tiny-qwen2vl-q8_0.gguf", "tiny-mistral4-q8_0.gguf", "tiny-mistral4-f32.gguf",
          "tiny-ernie4_5-moe-q8_0.gguf", "tiny-seed_oss-q8_0.gguf",
          "tiny-qwen35-q8_0.gguf", "tiny-qwen35-f32.gguf", "tiny-qwen35moe-q8_0.gguf", "tiny-qwen35moe-f32.gguf",
          "tiny-qwen3next-q8_0.gguf", "tiny-qwen3next-f32.gguf", "tiny-qwen3next-ssm-in-f32.gguf",
          "tiny-lfm2-q8_0.gguf", "tiny-lfm2-f32.gguf", "tiny-lfm2moe-q8_0.gguf", "tiny-lfm2moe-f32.gguf",
          "tiny-cohere2-q8_0.gguf", "tiny-cohere2-f32.gguf", "tiny-command-r-q8_0.gguf",
          "tiny-qwen2moe-q8_0.gguf", "tiny-qwen2moe-f32.gguf",
          "tiny-exaone-q8_0.gguf", "tiny-exaone-f32.gguf", "tiny-internlm2-q8_0.gguf",
          "tiny-olmoe-q8_0.gguf", "tiny-olmoe-f32.gguf", "tiny-arcee-q8_0.gguf", "tiny-arcee-f32.gguf",
          "tiny-hunyuan-dense-q8_0.gguf", "tiny-hunyuan-dense-f32.gguf",
          "tiny-hunyuan-moe-q8_0.gguf", "tiny-hunyuan-moe-f32.gguf",
          "tiny-maincoder-q8_0.gguf", "tiny-maincoder-f32.gguf", "tiny-xverse-q8_0.gguf",
          "tiny-orion-q8_0.gguf", "tiny-orion-f32.gguf", "tiny-stablelm-q8_0.gguf", "tiny-stablelm-f32.gguf",
          "tiny-stablelm-12b-layout-q8_0.gguf", "tiny-stablelm-12b-layout-f32.gguf",
          "tiny-command-r-plus-layout-q8_0.gguf",
          "tiny-starcoder2-q8_0.gguf", "tiny-starcoder2-f32.gguf", "tiny-phi2-q8_0.gguf", "tiny-phi2-f32.gguf",
          "tiny-gemma-q8_0.gguf", "tiny-gemma-f32.gguf",
          "tiny-falcon-q8_0.gguf", "tiny-falcon-f32.gguf", "tiny-falcon-40b-layout-q8_0.gguf",
          "tiny-gptneox-q8_0.gguf", "tiny-gptneox-f32.gguf", "tiny-gptneox-sequential-q8_0.gguf",
          "tiny-gpt2-q8_0.gguf", "tiny-gpt2-f32.gguf", "tiny-starcoder-q8_0.gguf",
          "tiny-refact-q8_0.gguf", "tiny-refact-f32.gguf", "tiny-bloom-q8_0.gguf", "tiny-bloom-f32.gguf",
          "tiny-mpt-q8_0.gguf", "tiny-mpt-f32.gguf", "tiny-olmo-q8_0.gguf", "tiny-olmo-f32.gguf",
          "tiny-codeshell-q8_0.gguf", "tiny-codeshell-f32.gguf", "tiny-jais-q8_0.gguf", "tiny-jais-f32.gguf", "tiny-dbrx-q8_0.gguf", "tiny-dbrx-f32.gguf",
          "tiny-baichuan-7b-layout-q8_0.gguf", "tiny-baichuan-7b-layout-f32.gguf", "tiny-baichuan-13b-layout-q8_0.gguf", "tiny-baichuan-13b-layout-f32.gguf", "tiny-chatglm-q8_0.gguf", "tiny-chatglm-f32.gguf",
          "tiny-nemotron-q8_0.gguf", "tiny-nemotron-f32.gguf",
          "tiny-plamo-q8_0.gguf", "tiny-plamo-f32.gguf", "tiny-bailingmoe-q8_0.gguf", "tiny-bailingmoe-f32.gguf", "tiny-bailingmoe2-q8_0.gguf", "tiny-bailingmoe2-f32.gguf", "tiny-dots1-q8_0.gguf", "tiny-dots1-f32.gguf", "tiny-apertus-q8_0.gguf", "tiny-apertus-f32.gguf", "tiny-jais2-q8_0.gguf", "tiny-jais2-f32.gguf", "tiny-exaone-moe-q8_0.gguf", "tiny-exaone-moe-f32.gguf", "tiny-minimax-m2-q8_0.gguf", "tiny-minimax-m2-f32.gguf", "tiny-falcon-h1-q8_0.gguf", "tiny-falcon-h1-f32.gguf", "tiny-smallthinker-q8_0.gguf", "tiny-smallthinker-f32.gguf", "tiny-llama4-q8_0.gguf", "tiny-llama4-f32.gguf", "tiny-deci-q8_0.gguf", "tiny-deci-f32.gguf", "tiny-openelm-q8_0.gguf", "tiny-openelm-f32.gguf", "tiny-minicpm3-q8_0.gguf", "tiny-minicpm3-f32.gguf", "tiny-jamba-q8_0.gguf", "tiny-jamba-f32.gguf", "tiny-afmoe-q8_0.gguf", "tiny-afmoe-f32.gguf", "tiny-gemma3n-q8_0.gguf", "tiny-gemma3n-f32.gguf", "tiny-mellum-q8_0.gguf", "tiny-mellum-f32.gguf", "tiny-nanbeige-q8_0.gguf", "tiny-nanbeige-f32.gguf", "tiny-bitnet-q8_0.gguf", "tiny-bitnet-f32.gguf", "tiny-deepseek-q8_0.gguf", "tiny-deepseek-f32.gguf", "tiny-qwen-q8_0.gguf", "tiny-qwen-f32.gguf", "tiny-phimoe-q8_0.gguf", "tiny-phimoe-f32.gguf",
          "tiny-minicpm-q8_0.gguf", "tiny-minicpm-defaults-f32.gguf",
          "tiny-granitehybrid-q8_0.gguf", "tiny-granitehybrid-f32.gguf", "tiny-granitehybrid-moe-q8_0.gguf",
          "tiny-granitehybrid-moe-f32.gguf", "tiny-granitemoe-q8_0.gguf",
          "tiny-nemotron_h-q8_0.gguf", "tiny-nemotron_h-f32.gguf",
          "tiny-nemotron_h_moe-q8_0.gguf", "tiny-nemotron_h_moe-f32.gguf",
          "tiny-nemotron_h_moe-latent-q8_0.gguf", "tiny-nemotron_h_moe-latent-f32.gguf"]


def prompts():
    """Three fixed prompts of 5, 17 and 40 byte-token ids (an LCG)."""
    x, out = 12345, []
    for n in (5, 17, 40):
        ids = []
        for _ in range(n):
            x = (x * 1103515245 + 12345) % (1 << 31)
            ids.append((x >> 16) % 256)
        out.append(ids)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("models_dir")
    ap.add_argument("--out", default=str(ROOT / "tests/data"))
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    data = {"llama_cpp": version(a.bin_dir),
            "recorded_by": "scripts/record-llama-tiny-references.py", "models": {}}
    for name in MODELS:
        path = os.path.join(a.models_dir, name)
        args = ["-t", str(a.threads), "-c", "512", "-np", "1", "-ctk", "f32", "-ctv", "f32", "-fa", "off"]
        proc, port = start(a.bin_dir, path, args)
        try:
            cases = []
            for ids in prompts():
                tokens, tops = [], []
                for _ in range(a.tokens):
                    tok, top = next_token(port, ids + tokens)
                    tokens.append(tok)
                    tops.append(top)
                cases.append({"prompt_ids": ids, "tokens": tokens, "top_logprobs": tops})
        finally:
            proc.terminate()
            proc.wait()
        data["models"][name] = {"bytes": os.path.getsize(path),
                                "command": " ".join(["llama-server", "-m", name, *args]), "cases": cases}
        print(f"{name}: {len(cases)} prompts", file=sys.stderr)
    write_json(os.path.join(a.out, "llama-cpp-tiny.json"), data)


if __name__ == "__main__":
    main()
