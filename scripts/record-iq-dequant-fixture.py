#!/usr/bin/env python3
"""Writes src/model/gguf/fixtures/iq-dequant.json: random blocks of the IQ1/IQ2/IQ3 and TQ
types and their values as gguf-py (llama.cpp's Python package, an implementation of its own
of ggml's decoders) dequantizes them. `model::gguf::iq`'s tests compare hearth's decoding
with it.

    python3 -m venv /tmp/np && /tmp/np/bin/pip install numpy pyyaml
    /tmp/np/bin/python scripts/record-iq-dequant-fixture.py LLAMA_CPP_SRC > src/model/gguf/fixtures/iq-dequant.json

LLAMA_CPP_SRC: llama.cpp's source (the llama-cpp-python sdist's vendor/llama.cpp).
"""
import json
import random
import struct
import sys

sys.path.insert(0, sys.argv[1] + "/gguf-py")
import numpy as np  # noqa: E402
from gguf.constants import GGMLQuantizationType as T, GGML_QUANT_SIZES  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

# Where each type keeps its f16 scale `d` (IQ1_M: in the top nibbles of its four scale words).
D_AT = {"IQ2_XXS": 0, "IQ2_XS": 0, "IQ2_S": 0, "IQ3_XXS": 0, "IQ3_S": 0, "IQ1_S": 0, "TQ1_0": 52, "TQ2_0": 64}
BLOCKS = 3


def block(name: str, rng: random.Random) -> bytes:
    size = GGML_QUANT_SIZES[T[name]][1]
    b = bytearray(rng.getrandbits(8) for _ in range(size))
    d = np.float16(rng.choice([-1, 1]) * rng.uniform(0.001, 0.1)).view(np.uint16).item()
    if name == "IQ1_M":
        for i in range(4):
            (w,) = struct.unpack_from("<H", b, 48 + 2 * i)
            w = (w & 0x0FFF) | (((d >> (4 * i)) & 0xF) << 12)
            struct.pack_into("<H", b, 48 + 2 * i, w)
    else:
        struct.pack_into("<H", b, D_AT[name], d)
    return bytes(b)


def main() -> None:
    rng = random.Random(13)
    out = {}
    for name in ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0"]:
        raw = b"".join(block(name, rng) for _ in range(BLOCKS))
        values = dequantize(np.frombuffer(raw, dtype=np.uint8), T[name]).astype(np.float32)
        out[name] = {"hex": raw.hex(), "values": [float(v) for v in values]}
    json.dump(out, sys.stdout, separators=(",", ":"))
    print()


main()
