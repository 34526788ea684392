#!/usr/bin/env python3
"""Builds the Hugging Face oracle fixture under tests/data/hf/.

Needs torch and transformers (the GPU machine has both; CPU is enough, everything is tiny).
For each model it writes <out>/<name>/:
  config.json, generation_config.json (as save_pretrained writes them), model.safetensors,
  expected.json = {
    "prompts":  [[ids]],                       random ids, lengths 1, 7, 16, 33, 64
    "logits":   [[[V floats] per position] per prompt]   float32, 7 significant digits
    "greedy":   [[20 ids] per prompt]           model.generate, do_sample=False, no EOS stop
    "min_margin": [top1 - top2 logit over the 20 greedy steps, per prompt],
    "rope_inv_freq": [...], "rope_attention_scaling": float,   HF's rotary tables
    "transformers_version", "torch_version", "weights_dtype"
  }
Expected values come from the model re-loaded from the saved files with
from_pretrained(dtype=float32, attn_implementation="eager"), so the bf16/f16 copies are
checked in fp32 against exactly the rounded weights the engine reads.

Usage: python3 tools/make_hf_fixture.py --out tests/data/hf
"""
import argparse
import copy
import json
import math
import os
import random
import sys
import traceback

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

PROMPT_LENGTHS = [1, 7, 16, 33, 64]
NEW_TOKENS = 20
# Greedy tokens must win by at least this much (logits have a std of ~8), so that an
# engine whose fp32 arithmetic differs from torch's in the last bits still picks the same
# token at every step.
MIN_MARGIN = 0.1
MAX_PROMPT_TRIES = 300


def qwen3_tiny(**over):
    kw = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
              bos_token_id=None, eos_token_id=2,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    kw.update(over)
    return Qwen3Config(**kw)


def model_specs():
    """(name, model class, config, saved dtype, seed)."""
    return [
        ("qwen3_tiny", Qwen3ForCausalLM, qwen3_tiny(), torch.float32, 1),
        ("qwen3_tiny_bf16", Qwen3ForCausalLM, qwen3_tiny(), torch.bfloat16, 1),
        ("qwen3_tiny_f16", Qwen3ForCausalLM, qwen3_tiny(), torch.float16, 1),
        ("qwen3_yarn", Qwen3ForCausalLM,
         qwen3_tiny(num_hidden_layers=2, max_position_embeddings=128,
                    rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                     "original_max_position_embeddings": 32}),
         torch.float32, 2),
        ("qwen2_tiny", Qwen2ForCausalLM,
         Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                     rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False,
                     bos_token_id=1, eos_token_id=2,
                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         torch.float32, 3),
        ("llama_tiny", LlamaForCausalLM,
         LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=128,
                     rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
                     eos_token_id=[2, 3],
                     rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 32}),
         torch.float32, 4),
    ]


def reinit(model, seed, embed_std):
    """Weights with O(1) activations and sharp logits; never zero, biases included.

    With tied embeddings the input embedding of the last token also scores the next token,
    so a large embedding makes the model repeat its last token forever. A small embedding
    (embed_std) keeps that term small next to the layers' output, and a final norm weight
    of 1/embed_std brings the logits back to a std of ~8.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name == "model.norm.weight":
                p.copy_((1.0 + 0.1 * noise) / embed_std)
            elif name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(embed_std * noise)
            elif "lm_head" in name:
                p.copy_(noise)
            else:
                p.copy_(noise / math.sqrt(p.shape[1]))


def greedy_manual(model, ids):
    """Argmax decoding recomputing the whole sequence each step; returns tokens, min margin."""
    seq = list(ids)
    out, margin = [], float("inf")
    for _ in range(NEW_TOKENS):
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
        top = torch.topk(logits, 2)
        margin = min(margin, float(top.values[0] - top.values[1]))
        tok = int(top.indices[0])
        out.append(tok)
        seq.append(tok)
    return out, margin


def rope_tables(model, log):
    try:
        rope = model.model.rotary_emb
        return {"rope_inv_freq": [round7(v) for v in rope.inv_freq.float().tolist()],
                "rope_attention_scaling": round7(float(rope.attention_scaling))}
    except Exception as e:  # informative only; the logits are the oracle
        log(f"  WARNING: no rotary tables: {e!r}")
        return {}


def round7(x):
    return float(f"{x:.7g}")


# Continuations with fewer distinct tokens than this test little (a model stuck on one token).
MIN_DISTINCT = 5


def build(name, cls, config, dtype, seed, out_root, log):
    # Untied models already give varied continuations with embed_std 1; tied ones need a
    # smaller embedding (see reinit). The first scale whose continuations all vary is kept.
    scales = [0.25, 0.125, 0.0625] if config.tie_word_embeddings else [1.0]
    for i, embed_std in enumerate(scales):
        expected = build_once(name, cls, config, dtype, seed, embed_std, out_root, log)
        distinct = [len(set(g)) for g in expected["greedy"]]
        log(f"  embed_std {embed_std}: distinct tokens per continuation {distinct}")
        if min(distinct) >= MIN_DISTINCT:
            break
        if i + 1 == len(scales):
            log(f"  WARNING: {name}: continuations stay repetitive at every scale")
    out_dir = os.path.join(out_root, name)
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
    size = sum(os.path.getsize(os.path.join(out_dir, n)) for n in os.listdir(out_dir))
    log(f"  {name}: {size / 1e6:.2f} MB")


def build_once(name, cls, config, dtype, seed, embed_std, out_root, log):
    out_dir = os.path.join(out_root, name)
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(seed)
    model = cls(copy.deepcopy(config))
    reinit(model, seed, embed_std)
    model.eval()
    to_save = model if dtype == torch.float32 else copy.deepcopy(model).to(dtype)
    to_save.save_pretrained(out_dir)

    with open(os.path.join(out_dir, "config.json")) as f:
        saved_cfg = json.load(f)
    want = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    got = saved_cfg.get("dtype", saved_cfg.get("torch_dtype"))
    if got != want:
        log(f"  WARNING: saved config dtype {got!r}, expected {want!r}")
    log(f"  config.json: {json.dumps(saved_cfg, sort_keys=True)}")
    files = sorted(os.listdir(out_dir))
    log(f"  saved {files}")

    # The oracle: what HF computes from the files on disk, in fp32.
    ref = cls.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    log(f"  attn_implementation={ref.config._attn_implementation}")
    V = ref.config.vocab_size

    dtype_salt = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}[dtype]
    rng = random.Random(1000 + seed * 17 + dtype_salt)
    prompts, logits_all, greedy_all, margins, generate_ok = [], [], [], [], True
    gen_cfg = ref.generation_config
    gen_cfg.do_sample = False
    gen_cfg.max_new_tokens = NEW_TOKENS
    gen_cfg.min_new_tokens = None
    gen_cfg.eos_token_id = None  # never stop early, never suppress a token
    gen_cfg.pad_token_id = 0
    gen_cfg.temperature = None
    gen_cfg.top_p = None
    gen_cfg.top_k = None
    for length in PROMPT_LENGTHS:
        for attempt in range(MAX_PROMPT_TRIES):
            ids = [rng.randrange(V) for _ in range(length)]
            manual, margin = greedy_manual(ref, ids)
            if margin >= MIN_MARGIN:
                break
        else:
            log(f"  WARNING: length {length}: no prompt with margin >= {MIN_MARGIN}")
        x = torch.tensor([ids])
        logits = ref(input_ids=x).logits[0].float()
        gen = ref.generate(x, attention_mask=torch.ones_like(x), generation_config=gen_cfg)
        gen = gen[0].tolist()
        assert gen[:length] == ids, "generate changed the prompt"
        gen = gen[length:]
        if gen != manual:
            generate_ok = False
            log(f"  WARNING: length {length}: generate {gen} != manual argmax {manual}")
        log(f"  prompt len {length}: {attempt + 1} tries, min margin {margin:.3f}, "
            f"logit std {float(logits.std()):.2f}, greedy {gen}")
        prompts.append(ids)
        logits_all.append([[round7(v) for v in row] for row in logits.tolist()])
        greedy_all.append(gen)
        margins.append(round7(margin))

    expected = {
        "prompts": prompts,
        "logits": logits_all,
        "greedy": greedy_all,
        "min_margin": margins,
        "generate_matches_argmax": generate_ok,
        **rope_tables(ref, log),
        "weights_dtype": want,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "embed_std": embed_std,
    }
    return expected


README = """# HF oracle fixture

Tiny random-weight models saved by Hugging Face transformers, with HF's float32 logits for
every prompt position and HF's greedy continuations. Made by `tools/make_hf_fixture.py`
(read its docstring for the format of expected.json):

    python3 tools/make_hf_fixture.py --out tests/data/hf

run on the GPU machine (CPU arithmetic; no network) with transformers {tv}, torch {pv},
Python {py}. Models:

| folder | architecture | what it exercises |
| --- | --- | --- |
| qwen3_tiny | Qwen3ForCausalLM, vocab 512, hidden 64, 3 layers, 4 heads, 2 KV heads, head_dim 32, MLP 128, tied, rope_theta 1e4 | head_dim != hidden/heads, q/k norm, GQA, tied lm_head |
| qwen3_tiny_bf16 | same weights saved in bfloat16 | BF16 loading (expected logits computed in fp32 from the rounded weights) |
| qwen3_tiny_f16 | same weights saved in float16 | F16 loading, likewise |
| qwen3_yarn | Qwen3, 2 layers, rope yarn factor 4, original_max_position_embeddings 32 | yarn inv_freq and attention scaling |
| qwen2_tiny | Qwen2ForCausalLM, 2 layers, head_dim 16, untied, rope_theta 1e6 | q/k/v bias, no q/k norm, separate lm_head |
| llama_tiny | LlamaForCausalLM, 2 layers, 1 KV head, untied, rope llama3 (factor 8, original 32), max_position_embeddings 128, eos [2, 3] | llama3 RoPE, GQA 4:1 |

Weights are re-drawn after construction (norms 1 + 0.1 N(0,1), biases 0.1 N(0,1),
lm_head N(0,1), other matrices N(0,1)/sqrt(fan_in); embeddings N(0,1) when untied, and
when tied N(0, embed_std^2) with the final norm scaled by 1/embed_std) so logits have a
std of ~8. With tied embeddings and embed_std 1 every continuation was one token repeated;
the script tries embed_std 0.25, 0.125, 0.0625 and keeps the first whose continuations all
have at least 5 distinct tokens, else the last (expected.json's embed_std; a few tied-model
continuations still repeat a token for long stretches, which the logits still check). Each
prompt is re-drawn until every greedy step wins by at least {margin} (see min_margin).
Greedy decoding ignores EOS (generation_config.eos_token_id set to None before generate) and
was cross-checked against a plain argmax loop (generate_matches_argmax).
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/hf")
    ap.add_argument("--only", default="", help="comma-separated model names")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    os.makedirs(args.out, exist_ok=True)

    def log(msg):
        print(msg, flush=True)

    log(f"transformers {transformers.__version__}, torch {torch.__version__}")
    failed = []
    for name, cls, config, dtype, seed in model_specs():
        if args.only and name not in args.only.split(","):
            continue
        log(f"== {name}")
        try:
            build(name, cls, config, dtype, seed, args.out, log)
        except Exception:  # keep going: one broken model should not cost the others
            traceback.print_exc()
            failed.append(name)
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(README.format(tv=transformers.__version__, pv=torch.__version__,
                              py=sys.version.split()[0], margin=MIN_MARGIN))
    total = 0
    for root, _, names in os.walk(args.out):
        total += sum(os.path.getsize(os.path.join(root, n)) for n in names)
    log(f"total {total / 1e6:.2f} MB; failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
