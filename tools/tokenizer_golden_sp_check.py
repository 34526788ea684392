#!/usr/bin/env python3
"""Checks golden_{mistral,gemma3}.jsonl (written by tools/tokenizer_golden_sp.mjs with the JS
implementations) against Hugging Face `tokenizers` itself, where it is installed (the GPU
machine). Prints every row where HF differs and exits non-zero if any does.

  python3 tools/tokenizer_golden_sp_check.py mistral=<dir with tokenizer.json> gemma3=<dir>
"""
import json
import os
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def check(name, model_dir):
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    with open(os.path.join(ROOT, "tests/data/tokenizer/corpus.jsonl"), encoding="utf-8") as f:
        corpus = [json.loads(line)["text"] for line in f]
    bad = checked = 0
    with open(os.path.join(ROOT, "tests/data/tokenizer/golden_%s.jsonl" % name), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    for row in rows:
        problems = []
        if "ids" in row:
            text = row["text"] if "text" in row else corpus[row["id"]]
            plain = tok.encode(text, add_special_tokens=False).ids
            special = tok.encode(text, add_special_tokens=True).ids
            if plain != row["ids"]:
                problems.append(("encode", plain))
            if special != row["ids_special"]:
                problems.append(("encode_special", special))
            decoded = tok.decode(row["ids_special"], skip_special_tokens=False)
            if decoded != row.get("decoded", text):
                problems.append(("decode", decoded))
            skip = tok.decode(row["ids_special"], skip_special_tokens=True)
            if skip != row.get("decoded_skip", row.get("decoded", text)):
                problems.append(("decode_skip", skip))
        elif "decode_ids" in row:
            for key, flag in (("text", False), ("text_skip", True)):
                got = tok.decode(row["decode_ids"], skip_special_tokens=flag)
                if got != row[key]:
                    problems.append((key, got))
        elif "token_id" in row:
            if tok.id_to_token(row["token_id"]) != row["token"]:
                problems.append(("id_to_token", tok.id_to_token(row["token_id"])))
        else:
            continue
        checked += 1
        if problems:
            bad += 1
            if bad <= 30:
                print(name, "DIFF", json.dumps(row, ensure_ascii=True)[:300], "HF:",
                      json.dumps(problems, ensure_ascii=True)[:600])
    print("%s: tokenizers %s, %d rows checked, %d differ" % (name, tokenizers.__version__, checked, bad))
    return bad


def main():
    bad = 0
    for arg in sys.argv[1:]:
        name, model_dir = arg.split("=", 1)
        bad += check(name, model_dir)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
