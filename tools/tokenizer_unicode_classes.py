#!/usr/bin/env python3
"""Dumps which code points Hugging Face `tokenizers` puts in \\p{L}, \\p{N} and \\s.

HF runs Split patterns through its bundled Oniguruma, whose Unicode tables may be newer than
the PCRE2 kestrel links. This asks HF itself: for each class it splits the string of every
code point (surrogates excluded) with Split(Regex(class), "removed") and records the code
points that were removed. Writes tests/data/tokenizer/onig_classes.json:

  {"tokenizers_version": ..., "classes": {"L": [[lo, hi], ...], "N": [...], "s": [...]}}

tools/tokenizer_unicode_gen.py turns it into src/tokenizer/unicode_fixups.inc, and
tests/tokenizer/regex_test.cc checks kestrel's regex against it for every code point.

Usage (where `tokenizers` is installed):
  python3 tools/tokenizer_unicode_classes.py --out tests/data/tokenizer/onig_classes.json
"""
import argparse
import json
import os

import tokenizers
from tokenizers import Regex, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSES = {"L": r"\p{L}", "N": r"\p{N}", "s": r"\s"}


def to_ranges(cps):
    out = []
    for c in cps:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def members(pattern):
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    text = "".join(map(chr, cps))
    kept = pre_tokenizers.Split(Regex(pattern), behavior="removed").pre_tokenize_str(text)
    # Offsets are character offsets in the Python bindings; fall back to bytes if not.
    char_offsets = all(text[a:b] == piece for piece, (a, b) in kept[:50])
    if not char_offsets:
        raw = text.encode("utf-8")
        byte_to_char = {}
        pos = 0
        for i, ch in enumerate(text):
            byte_to_char[pos] = i
            pos += len(ch.encode("utf-8"))
        byte_to_char[pos] = len(text)
        assert raw  # byte offsets index the UTF-8 encoding
        kept = [(p, (byte_to_char[a], byte_to_char[b])) for p, (a, b) in kept]
    removed = bytearray(b"\x01") * len(cps)
    for piece, (a, b) in kept:
        assert text[a:b] == piece, (pattern, a, b)
        for i in range(a, b):
            removed[i] = 0
    return to_ranges([cps[i] for i in range(len(cps)) if removed[i]])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/tokenizer/onig_classes.json"))
    args = ap.parse_args()
    classes = {name: members(pattern) for name, pattern in CLASSES.items()}
    # Sanity: letters, digits and the space are where they must be.
    def has(name, cp):
        return any(lo <= cp <= hi for lo, hi in classes[name])
    assert has("L", ord("a")) and has("N", ord("7")) and has("s", ord(" ")) and not has("L", ord("7"))
    with open(args.out, "w") as f:
        json.dump({"tokenizers_version": tokenizers.__version__, "classes": classes}, f,
                  separators=(",", ":"))
        f.write("\n")
    print("classes:", {k: (len(v), sum(hi - lo + 1 for lo, hi in v)) for k, v in classes.items()})


if __name__ == "__main__":
    main()
