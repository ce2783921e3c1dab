#!/usr/bin/env python3
"""Writes the tiny Unigram (SentencePiece) vocabulary hearth's testkit lays out as XLM-RoBERTa's.

    pip install sentencepiece==0.2.1
    scripts/make-unigram-fixture.py [--out src/model/testkit/vocab/unigram.json]

SentencePiece trains a unigram model on the testkit's `TRAINING_TEXT` (read out of
src/model/testkit/vocab/train.rs) with a normalization rule table of its own (`RULES`: full-width
letters and digits, ligatures, a decomposed accent, spaces of other widths, deleted zero-width
characters), which SentencePiece compiles into a `precompiled_charsmap` (the XOR-compressed double
array and replacement strings that XLM-RoBERTa's, T5's and bge-m3's files carry, in a few hundred
bytes instead of their 237 KB). The JSON holds the model's pieces, scores and kinds in
SentencePiece's id order, its normalizer flags, the charsmap (base64), and SentencePiece's own ids
for `TEXTS`, which `tests/tokenizer.rs` compares with hearth's (llama.cpp's ids for some come from
`scripts/record-llama-embeddings.py --encoders`). The layout llama.cpp's converter gives an
XLM-RoBERTa vocabulary (`<s> <pad> </s> <unk>` first, pieces one id later) is the testkit's.
"""

import argparse
import base64
import json
import pathlib
import re
import tempfile

import sentencepiece as spm

ROOT = pathlib.Path(__file__).resolve().parent.parent
VOCAB_SIZE = 420
# (source code points, replacement code points): SentencePiece's normalization_rule_tsv.
RULES = (
    [([0xFF21 + i], [0x41 + i]) for i in range(26)]
    + [([0xFF41 + i], [0x61 + i]) for i in range(26)]
    + [([0xFF10 + i], [0x30 + i]) for i in range(10)]
    + [
        ([0xFB01], [0x66, 0x69]),        # ﬁ -> fi
        ([0xFB02], [0x66, 0x6C]),        # ﬂ -> fl
        ([0x65, 0x301], [0xE9]),         # e + combining acute -> é
        ([0x61, 0x300], [0xE0]),         # a + combining grave -> à
        ([0x2026], [0x2E, 0x2E, 0x2E]),  # … -> ...
        ([0x00A0], [0x20]),              # no-break space
        ([0x3000], [0x20]),              # ideographic space
        ([0x2003], [0x20]),              # em space
        ([0x200B], []),                  # zero-width space: deleted
        ([0xFEFF], []),                  # byte-order mark: deleted
        ([0x2460], [0x31]),              # ① -> 1
        ([0x2461], [0x32]),              # ② -> 2
        ([0x2122], [0x54, 0x4D]),        # ™ -> TM
        ([0x9], [0x20]),                 # tab -> space
        ([0xA], [0x20]),                 # newline -> space
    ]
)
TEXTS = [
    "the cat sat on the mat",
    "Hello, world! Hello again, world.",
    "  leading, trailing and   inner   spaces  ",
    "Ｆｕｌｌ－ｗｉｄｔｈ ＨＥＬＬＯ ｗｏｒｌｄ １２３",
    "ﬁne ﬂowers… café cafe\u0301 voila\u0300",
    "no\u00a0break\u3000ideographic\u2003em spaces",
    "zero\u200bwidth\ufeffmarks ① ② ™",
    "Tabs\tand\nnewlines\n\nhere",
    "日本語のテキストです。東京は日本の首都です。",
    "Emoji 🎉🚀 and unknown ÆØÅ þ ð letters",
    "fn main() { let x = 3.14159; }",
    "Le café est très bon, et la crème brûlée aussi.",
    "Die Größe der Straße ist schön.",
    "",
    "   ",
    "x",
]


def training_text():
    src = (ROOT / "src/model/testkit/vocab/train.rs").read_text()
    m = re.search(r'pub const TRAINING_TEXT: &str = r#"(.*?)"#;', src, re.S)
    return m.group(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", default=str(ROOT / "src/model/testkit/vocab/unigram.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        (d / "text.txt").write_text(training_text())
        (d / "rules.tsv").write_text("".join(
            " ".join(f"{c:X}" for c in src) + "\t" + " ".join(f"{c:X}" for c in dst) + "\n"
            for src, dst in RULES))
        spm.SentencePieceTrainer.train(
            input=str(d / "text.txt"), model_prefix=str(d / "m"), model_type="unigram",
            vocab_size=VOCAB_SIZE, hard_vocab_limit=False, character_coverage=1.0,
            normalization_rule_tsv=str(d / "rules.tsv"), split_digits=False,
            num_threads=1, seed_sentencepiece_size=100000, minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=str(d / "m.model"))
        from sentencepiece import sentencepiece_model_pb2 as pb
        proto = pb.ModelProto()
        proto.ParseFromString((d / "m.model").read_bytes())
    kind = lambda i: ("unknown" if sp.IsUnknown(i) else "control" if sp.IsControl(i)
                      else "unused" if sp.IsUnused(i) else "byte" if sp.IsByte(i) else "normal")
    ns = proto.normalizer_spec
    out = {
        "made_by": "scripts/make-unigram-fixture.py",
        "sentencepiece": spm.__version__,
        "pieces": [sp.IdToPiece(i) for i in range(sp.vocab_size())],
        "scores": [sp.GetScore(i) for i in range(sp.vocab_size())],
        "kinds": [kind(i) for i in range(sp.vocab_size())],
        "add_dummy_prefix": ns.add_dummy_prefix,
        "remove_extra_whitespaces": ns.remove_extra_whitespaces,
        "escape_whitespaces": ns.escape_whitespaces,
        "precompiled_charsmap": base64.b64encode(ns.precompiled_charsmap).decode(),
        "texts": [{"text": t, "sentencepiece_ids": sp.EncodeAsIds(t)} for t in TEXTS],
    }
    pathlib.Path(a.out).write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(a.out, sp.vocab_size(), "pieces,", len(ns.precompiled_charsmap), "charsmap bytes")


if __name__ == "__main__":
    main()
