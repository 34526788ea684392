#!/usr/bin/env python3
"""Compares kestrel on the GPU with Hugging Face transformers, live, on a Qwen3-0.6B-shaped
model with random weights (DESIGN.md, "How correctness is known").

Needs torch and transformers with a CUDA device (the GPU machine has both) and a built
kestrel binary. Steps:
  1. `kestrel make-model --preset qwen3-0.6b --out <workdir>/qwen3-0.6b` (kept if present);
  2. random prompts (seeded) of a few lengths;
  3. `kestrel generate --prompt-ids ... --temperature 0 --ignore-eos --logprobs 5` on the
     GPU (graphs on, and again with --enforce-eager);
  4. HF: the model in bf16 on cuda, (a) its own greedy continuation with a KV cache, and
     (b) teacher-forced along kestrel's tokens, in bf16 and in fp32;
  5. checks, per generated step k:
     - where HF fp32's top-2 margin along kestrel's path is >= --margin, kestrel's token is
       HF's argmax (a step with a smaller margin is a near tie that bf16 may break either
       way; it is counted, not judged);
     - kestrel's top-5 log-probabilities are within --logprob-tol of HF fp32's for those ids;
     - HF bf16's own greedy tokens (with its KV cache) equal kestrel's up to HF's first step
       with a margin below --margin (after a near tie the continuations may part for good);
       how many steps that covers is reported;
     and at least --min-clear of all steps must have a clear margin.
Writes hf_live_compare.json and prints a summary; exit status 0 when every check passed.

Usage: python3 tools/hf_live_compare.py --kestrel build-gpu/kestrel --workdir /tmp/hf_live \
           [--out DIR] [--new-tokens 32] [--margin 0.1]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import time

import torch
from transformers import AutoModelForCausalLM

PROMPT_LENGTHS = [5, 64, 300, 1000]


def run_kestrel(args, model_dir, prompts, eager):
    cmd = [args.kestrel, "generate", "--model", model_dir, "--device", "cuda",
           "--temperature", "0", "--ignore-eos", "--max-tokens", str(args.new_tokens),
           "--logprobs", "5", "--max-model-len", "2048", "--gpu-memory-utilization", "0.5"]
    if eager:
        cmd.append("--enforce-eager")
    for p in prompts:
        cmd += ["--prompt-ids", ",".join(map(str, p))]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"kestrel generate failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return parse_generate(proc.stdout, len(prompts)), time.time() - t0


def parse_generate(text, n):
    """[(tokens, [ {id: logprob} per step ])] in prompt order, from generate's output."""
    outs = []
    cur = None
    for line in text.splitlines():
        m = re.match(r"--- \d+ tokens, finish_reason=\w*, token ids:(.*)", line)
        if m:
            cur = ([int(t) for t in m.group(1).split()], [])
            outs.append(cur)
            continue
        m = re.match(r"\s+\[(\d+)\] (\d+) logprob=(\S+) rank=(\d+) top:(.*)", line)
        if m and cur is not None:
            top = {}
            for item in m.group(5).split():
                tid, lp = item.split(":")
                top[int(tid)] = float(lp)
            top[int(m.group(2))] = float(m.group(3))
            cur[1].append(top)
    if len(outs) != n:
        sys.exit(f"parsed {len(outs)} outputs from kestrel generate, expected {n}:\n{text[-2000:]}")
    return outs


@torch.no_grad()
def hf_greedy(model, prompt, steps):
    """HF's own greedy continuation with a KV cache: tokens and top-2 margins."""
    ids = torch.tensor([prompt], device="cuda")
    out = model(input_ids=ids, use_cache=True)
    past, logits = out.past_key_values, out.logits[0, -1].float()
    tokens, margins = [], []
    for _ in range(steps):
        top = torch.topk(logits, 2)
        tok = int(top.indices[0])
        tokens.append(tok)
        margins.append(float(top.values[0] - top.values[1]))
        out = model(input_ids=torch.tensor([[tok]], device="cuda"), past_key_values=past,
                    use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1].float()
    return tokens, margins


@torch.no_grad()
def hf_teacher_forced(model, prompt, tokens):
    """Log-probabilities (fp32) at the positions that predict tokens[k], k = 0..len-1."""
    ids = torch.tensor([prompt + tokens[:-1]], device="cuda")
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:].float()
    return torch.log_softmax(logits, dim=-1), logits


def compare(args, name, kestrel_outs, prompts, hf_bf16, hf_fp32):
    res = {"run": name, "steps": 0, "clear": 0, "clear_mismatches": 0, "max_logprob_diff_fp32": 0.0,
           "max_logprob_diff_bf16": 0.0, "hf_greedy_matched": 0, "hf_greedy_mismatches": 0,
           "prompts": []}
    for i, (prompt, (tokens, tops)) in enumerate(zip(prompts, kestrel_outs)):
        lp32, logits32 = hf_teacher_forced(hf_fp32, prompt, tokens)
        lp16, _ = hf_teacher_forced(hf_bf16, prompt, tokens)
        top2 = torch.topk(logits32, 2, dim=-1)
        margins = (top2.values[:, 0] - top2.values[:, 1]).tolist()
        argmax = top2.indices[:, 0].tolist()
        p = {"prompt_len": len(prompt), "mismatches": []}
        for k, tok in enumerate(tokens):
            res["steps"] += 1
            if margins[k] >= args.margin:
                res["clear"] += 1
                if tok != argmax[k]:
                    res["clear_mismatches"] += 1
                    p["mismatches"].append({"step": k, "kestrel": tok, "hf": argmax[k],
                                            "margin": margins[k]})
            for tid, lp in tops[k].items():
                res["max_logprob_diff_fp32"] = max(res["max_logprob_diff_fp32"],
                                                   abs(lp - float(lp32[k, tid])))
                res["max_logprob_diff_bf16"] = max(res["max_logprob_diff_bf16"],
                                                   abs(lp - float(lp16[k, tid])))
        # HF's own continuation: equal up to its first near tie (after one, the two
        # continuations may part for good); a difference at a clear step is a failure.
        g_tokens, g_margins = hf_greedy(hf_bf16, prompt, len(tokens))
        matched = 0
        for k in range(len(tokens)):
            if g_margins[k] < args.margin:
                break
            if g_tokens[k] != tokens[k]:
                res["hf_greedy_mismatches"] += 1
                p["mismatches"].append({"step": k, "kestrel": tokens[k], "hf_greedy": g_tokens[k],
                                        "margin": g_margins[k]})
                break
            matched += 1
        p["hf_greedy_matched"] = matched
        p["leading_equal"] = next((k for k in range(len(tokens)) if g_tokens[k] != tokens[k]),
                                  len(tokens))
        res["hf_greedy_matched"] += matched
        res["prompts"].append(p)
    res["ok"] = (res["clear_mismatches"] == 0 and res["hf_greedy_mismatches"] == 0
                 and res["clear"] >= args.min_clear * res["steps"]
                 and res["max_logprob_diff_fp32"] <= args.logprob_tol)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kestrel", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--margin", type=float, default=0.1,
                    help="top-2 logit margin below which a step is a near tie")
    ap.add_argument("--logprob-tol", type=float, default=0.15)
    ap.add_argument("--min-clear", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    model_dir = os.path.join(args.workdir, "qwen3-0.6b")
    if not os.path.exists(os.path.join(model_dir, "model.safetensors")):
        os.makedirs(args.workdir, exist_ok=True)
        subprocess.run([args.kestrel, "make-model", "--preset", "qwen3-0.6b", "--out", model_dir],
                       check=True)
    config = json.load(open(os.path.join(model_dir, "config.json")))
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(config["vocab_size"]) for _ in range(n)] for n in PROMPT_LENGTHS]

    runs = {}
    for name, eager in (("graphs", False), ("eager", True)):
        runs[name] = run_kestrel(args, model_dir, prompts, eager)

    hf_bf16 = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
    hf_fp32 = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    results = []
    for name, (outs, seconds) in runs.items():
        r = compare(args, name, outs, prompts, hf_bf16, hf_fp32)
        r["kestrel_seconds"] = seconds
        results.append(r)
    same = [a[0] for a in runs["graphs"][0]] == [b[0] for b in runs["eager"][0]]

    summary = {"model": "qwen3-0.6b (random weights)", "prompt_lengths": PROMPT_LENGTHS,
               "new_tokens": args.new_tokens, "margin": args.margin,
               "logprob_tol": args.logprob_tol, "graphs_equal_eager_tokens": same,
               "runs": results, "torch": torch.__version__,
               "transformers": __import__("transformers").__version__,
               "gpu": torch.cuda.get_device_name(0)}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "hf_live_compare.json"), "w") as f:
            json.dump(summary, f, indent=2)
    ok = all(r["ok"] for r in results)
    for r in results:
        print(f"hf_live {r['run']:6s}: {r['clear']}/{r['steps']} steps with margin >= {args.margin}, "
              f"{r['clear_mismatches']} mismatches there; max |logprob diff| vs HF fp32 "
              f"{r['max_logprob_diff_fp32']:.3f} (bf16 {r['max_logprob_diff_bf16']:.3f}); HF bf16's own "
              f"greedy: {r['hf_greedy_matched']} steps equal before its first near tie, "
              f"{r['hf_greedy_mismatches']} clear-step mismatches; {'OK' if r['ok'] else 'FAILED'}")
    print(f"hf_live: graph and eager tokens {'identical' if same else 'differ (near ties)'}; "
          f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
