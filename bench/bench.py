"""nano-vLLM's bench.py on kestrel's Python package: the same script with `from kestrel import`.

256 sequences of random token ids (lengths uniform in 100..1024), outputs of 100..1024 tokens
with ignore_eos, temperature 0.6, all drawn by Python's random after seed(0): the workload
`kestrel bench` rebuilds in C++ token for token (src/core/python_random.h), so the two
throughputs compare the Python layer with the CLI (scripts/python_bench_compare.sh).

    PYTHONPATH=build/python python3 bench/bench.py --model ~/models/Qwen3-0.6B
"""

import argparse
import json
import os
import time
from random import randint, seed

from kestrel import LLM, SamplingParams


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.expanduser("~/huggingface/Qwen3-0.6B/"))
    ap.add_argument("--num-seqs", type=int, default=256)
    ap.add_argument("--max-input-len", type=int, default=1024)
    ap.add_argument("--max-output-len", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-model-len", type=int, default=4096)  # nano-vLLM's
    ap.add_argument("--device", default="auto")
    ap.add_argument("--kv-cache-memory", type=int, default=None, help="CPU: KV cache bytes")
    ap.add_argument("--json", help="also write the result to this JSON file")
    args = ap.parse_args()

    seed(args.seed)
    extra = {} if args.kv_cache_memory is None else {"kv_cache_memory_bytes": args.kv_cache_memory}
    llm = LLM(args.model, enforce_eager=False, max_model_len=args.max_model_len,
              device=args.device, **extra)

    prompt_token_ids = [[randint(0, 10000) for _ in range(randint(100, args.max_input_len))]
                        for _ in range(args.num_seqs)]
    sampling_params = [SamplingParams(temperature=0.6, ignore_eos=True,
                                      max_tokens=randint(100, args.max_output_len))
                       for _ in range(args.num_seqs)]
    # nano-vLLM warms up with the text "Benchmark: "; token ids work without a tokenizer too.
    llm.generate([[1, 2, 3, 4]], SamplingParams(), use_tqdm=False)
    t = time.time()
    outputs = llm.generate(prompt_token_ids, sampling_params, use_tqdm=False)
    t = time.time() - t
    total_tokens = sum(sp.max_tokens for sp in sampling_params)
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    assert generated == total_tokens, f"generated {generated} tokens, expected {total_tokens}"
    throughput = total_tokens / t
    print(f"Total: {total_tokens}tok, Time: {t:.2f}s, Throughput: {throughput:.2f}tok/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": llm.device, "num_seqs": args.num_seqs,
                       "prompt_tokens": sum(len(p) for p in prompt_token_ids),
                       "output_tokens": total_tokens, "total_s": t, "output_tok_s": throughput}, f)


if __name__ == "__main__":
    main()
