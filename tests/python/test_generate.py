"""generate(): nano-vLLM and vLLM scripts, parity with HF transformers and the C++ API."""

import re
import subprocess

from conftest import CPU
from kestrel import LLM, RequestOutput, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)


def test_nano_vllm_script_matches_transformers(hf_tiny):
    path, prompts, greedy = hf_tiny
    # nano-vLLM's example.py, with token-id prompts (this fixture has no tokenizer).
    llm = LLM(str(path), enforce_eager=True, tensor_parallel_size=1, **CPU)
    outputs = llm.generate(prompts, GREEDY)
    assert [out["token_ids"] for out in outputs] == greedy
    assert all(out["text"] == "" for out in outputs)
    assert dict(outputs[0]) == {"text": "", "token_ids": greedy[0]}


def test_tensor_parallel_matches_transformers(hf_tiny):
    path, prompts, greedy = hf_tiny
    # Ranks 1 and 2.. are this interpreter running kestrel._worker (CPU processes here).
    for tp in (2, 4):
        llm = LLM(str(path), tensor_parallel_size=tp, num_threads=1, **CPU)
        assert [out["token_ids"] for out in llm.generate(prompts, GREEDY, use_tqdm=False)] == greedy
        del llm


def test_vllm_attributes(tiny_llm, hf_tiny):
    _, prompts, greedy = hf_tiny
    outputs = tiny_llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False)
    for out, p, g in zip(outputs, prompts, greedy):
        assert isinstance(out, RequestOutput)
        assert out.finished and out.prompt_token_ids == p and out.prompt is None
        assert out.outputs[0].token_ids == g
        assert out.outputs[0].finish_reason == "length"
        assert out.outputs[0].logprobs is None


def test_one_prompt_alone_is_a_batch_of_one(tiny_llm, hf_tiny):
    _, prompts, greedy = hf_tiny
    [out] = tiny_llm.generate(prompts[1], GREEDY, use_tqdm=False)
    assert out["token_ids"] == greedy[1]


def test_same_tokens_as_the_cli(tiny_llm, hf_tiny, kestrel_bin):
    path, prompts, _ = hf_tiny
    params = SamplingParams(temperature=0.8, seed=11, max_tokens=20, ignore_eos=True)
    ours = tiny_llm.generate(prompts[:3], params, use_tqdm=False)
    cmd = [str(kestrel_bin), "generate", "--model", str(path), "--device", "cpu",
           "--temperature", "0.8", "--seed", "11", "--max-tokens", "20", "--ignore-eos"]
    for p in prompts[:3]:
        cmd += ["--prompt-ids", ",".join(map(str, p))]
    stdout = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    cli = [[int(t) for t in line.split()] for line in re.findall(r"token ids:(.*)", stdout)]
    assert [out["token_ids"] for out in ours] == cli


def test_params_per_prompt_and_n(tiny_llm, hf_tiny):
    _, prompts, greedy = hf_tiny
    params = [GREEDY, SamplingParams(temperature=1.0, seed=3, n=3, max_tokens=5, logprobs=2)]
    a, b = tiny_llm.generate(prompts[:2], params, use_tqdm=False)
    assert a["token_ids"] == greedy[0]
    assert [c.index for c in b.outputs] == [0, 1, 2]
    for c in b.outputs:
        assert len(c.token_ids) == 5 and len(c.logprobs) == 5
        for token, position in zip(c.token_ids, c.logprobs):
            assert token in position and len(position) >= 2
            assert sorted(lp.rank for lp in position.values())[:2] == [1, 2]
        assert c.cumulative_logprob < 0


def test_a_batch_of_256_requests(tiny_llm, hf_tiny):
    _, prompts, greedy = hf_tiny
    batch = [prompts[i % len(prompts)] for i in range(256)]
    outputs = tiny_llm.generate(batch, GREEDY, use_tqdm=True)
    assert [out["token_ids"] for out in outputs] == [greedy[i % len(greedy)] for i in range(256)]


def test_a_second_llm_after_del(hf_tiny):
    path, prompts, greedy = hf_tiny
    for _ in range(2):
        llm = LLM(path, **CPU)
        assert llm.generate(prompts[:1], GREEDY, use_tqdm=False)[0]["token_ids"] == greedy[0]
        del llm
