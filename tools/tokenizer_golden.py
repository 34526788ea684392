#!/usr/bin/env python3
"""Golden token ids from Hugging Face `tokenizers` for the kestrel tokenizer tests.

Needs the `tokenizers` Python package (not installed on the CI machine; run it where it is,
e.g. the GPU machine). Reads tests/data/tokenizer/corpus.jsonl (tools/tokenizer_corpus.py)
and writes, per tokenizer, a JSON-lines file:

  line 1: {"meta": {...}}  versions and sha256 of the inputs
  then, one per corpus string (same order):
    {"id": n, "ids": [...],               encode(text, add_special_tokens=False).ids
     "prefix": [...], "suffix": [...],    encode(text, add_special_tokens=True).ids
                                          == prefix + ids + suffix (checked here)
     "decoded": str,                      decode(ids_special, skip_special_tokens=False),
                                          present only when it differs from text
     "decoded_skip": str}                 decode(ids_special, skip_special_tokens=True),
                                          present only when it differs from "decoded"
  then decode cases on random id lists (byte tokens that form invalid UTF-8, added tokens,
  ids past the vocabulary):
    {"decode_ids": [...], "text": str, "text_skip": str}
  then id_to_token samples:
    {"token_id": n, "token": str or null}

With --bench, also times single-threaded HF encode over the corpus repeated --repeat times
(the same text tokenizer_bench --corpus --repeat builds) and writes hf_bench.json.

Usage:
  TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 RAYON_RS_NUM_CPUS=1 \
  python3 tools/tokenizer_golden.py --qwen3 path/tokenizer.json --llama3 path/tokenizer.json \
      --out-dir tests/data/tokenizer [--bench out.json --repeat 16]
"""
import argparse
import hashlib
import json
import os
import random
import sys
import time

# Single-threaded HF: set before tokenizers is imported (its thread pool reads them once).
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("RAYON_RS_NUM_CPUS", "1")

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_corpus(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def split_special(plain, special):
    """Finds prefix/suffix with special == prefix + plain + suffix, or None."""
    n = len(plain)
    for start in range(len(special) - n + 1):
        if special[start:start + n] == plain:
            return special[:start], special[start + n:]
    return None


def golden_for(name, tok_path, corpus, corpus_sha, out_dir):
    tok = Tokenizer.from_file(tok_path)
    rows = []
    for entry in corpus:
        text = entry["text"]
        plain = tok.encode(text, add_special_tokens=False).ids
        special = tok.encode(text, add_special_tokens=True).ids
        row = {"id": entry["id"], "ids": plain}
        parts = split_special(plain, special)
        if parts is None:
            row["ids_special"] = special
        else:
            row["prefix"], row["suffix"] = parts
        decoded = tok.decode(special, skip_special_tokens=False)
        decoded_skip = tok.decode(special, skip_special_tokens=True)
        if decoded != text:
            row["decoded"] = decoded
        if decoded_skip != decoded:
            row["decoded_skip"] = decoded_skip
        rows.append(row)

    rng = random.Random(7)
    vocab = tok.get_vocab(with_added_tokens=True)
    size = max(vocab.values()) + 1
    added = sorted(tok.get_added_tokens_decoder().keys())
    single_char = sorted(i for t, i in vocab.items() if len(t) == 1)
    decode_rows = []
    for case in range(400):
        ids = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.45:
                ids.append(rng.choice(single_char))  # lone bytes: invalid / partial UTF-8
            elif r < 0.6:
                ids.append(rng.choice(added))
            elif r < 0.62:
                ids.append(size + rng.randint(0, 1000))  # past the vocabulary
            else:
                ids.append(rng.randrange(size))
        row = {"decode_ids": ids}
        try:
            row["text"] = tok.decode(ids, skip_special_tokens=False)
            row["text_skip"] = tok.decode(ids, skip_special_tokens=True)
        except Exception as e:  # recorded so the C++ test knows HF refused
            row["error"] = str(e)
        decode_rows.append(row)

    token_rows = []
    for tid in sorted(set(rng.randrange(size + 10) for _ in range(300)) | set(added[:5])):
        token_rows.append({"token_id": tid, "token": tok.id_to_token(tid)})

    meta = {
        "tokenizers_version": tokenizers.__version__,
        "python": sys.version.split()[0],
        "tokenizer_json_sha256": sha256(tok_path),
        "corpus_sha256": corpus_sha,
        "count": len(rows),
        "vocab_size": size,
    }
    out = os.path.join(out_dir, "golden_%s.jsonl" % name)
    with open(out, "w", encoding="ascii", newline="\n") as f:
        f.write(json.dumps({"meta": meta}) + "\n")
        for row in rows + decode_rows + token_rows:
            f.write(json.dumps(row, ensure_ascii=True, separators=(",", ":")) + "\n")
    print("%s: %d strings, %d decode cases -> %s (%d bytes)" %
          (name, len(rows), len(decode_rows), out, os.path.getsize(out)))


# Corpus categories that look like real text (the rest stress odd corners).
NATURAL = ("prose", "code", "chat", "cjk", "script")


def bench_texts(corpus, repeat):
    """The two benchmark texts; tokenizer_bench builds the same ones."""
    everything = [e["text"] for e in corpus]
    natural = [e["text"] for e in corpus if e["cat"] in NATURAL]
    total = sum(len(s.encode("utf-8")) for s in everything) * repeat
    nat_bytes = sum(len(s.encode("utf-8")) for s in natural)
    nat_repeat = max(1, -(-total // nat_bytes))  # ceil: about as many bytes as "all"
    return {"all": everything * repeat, "natural": natural * nat_repeat}


def bench_for(name, tok_path, corpus, repeat):
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(tok_path)
    result = {"load_s": time.perf_counter() - t0}

    def best_of(fn, reps=3):
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            n = fn()
            best = min(best, time.perf_counter() - t)
        return best, n

    for label, lines in bench_texts(corpus, repeat).items():
        nbytes = sum(len(s.encode("utf-8")) for s in lines)
        tok.encode_batch(lines[:len(corpus)], add_special_tokens=False)  # warm the BPE cache
        runs = {
            "encode_per_line": lambda: sum(len(tok.encode(s, add_special_tokens=False).ids)
                                           for s in lines),
            "encode_batch": lambda: sum(len(e.ids) for e in
                                        tok.encode_batch(lines, add_special_tokens=False)),
        }
        if hasattr(tok, "encode_batch_fast"):
            runs["encode_batch_fast"] = lambda: sum(
                len(e.ids) for e in tok.encode_batch_fast(lines, add_special_tokens=False))
        entry = {"bytes": nbytes, "lines": len(lines)}
        for run_name, fn in runs.items():
            s, ntok = best_of(fn)
            entry[run_name] = {"seconds": s, "tokens": ntok, "MB_per_s": nbytes / s / 1e6}
        result[label] = entry
    print(name, json.dumps(result))
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests/data/tokenizer/corpus.jsonl"))
    ap.add_argument("--qwen3", required=True)
    ap.add_argument("--llama3", required=True)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "tests/data/tokenizer"))
    ap.add_argument("--bench", help="write HF single-thread timings (JSON) here")
    ap.add_argument("--repeat", type=int, default=16)
    ap.add_argument("--skip-golden", action="store_true", help="only run the benchmark")
    args = ap.parse_args()

    corpus = load_corpus(args.corpus)
    corpus_sha = sha256(args.corpus)
    print("tokenizers", tokenizers.__version__, "threads env:",
          {k: os.environ.get(k) for k in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS",
                                          "RAYON_RS_NUM_CPUS")})
    if not args.skip_golden:
        for name, path in [("qwen3", args.qwen3), ("llama3", args.llama3)]:
            golden_for(name, path, corpus, corpus_sha, args.out_dir)
    if args.bench:
        result = {"tokenizers_version": tokenizers.__version__, "repeat": args.repeat,
                  "mode": "single thread (TOKENIZERS_PARALLELISM=false, RAYON_NUM_THREADS=1)"}
        for name, path in [("qwen3", args.qwen3), ("llama3", args.llama3)]:
            result[name] = bench_for(name, path, corpus, args.repeat)
        with open(args.bench, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
