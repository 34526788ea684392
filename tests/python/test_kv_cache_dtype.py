"""kv_cache_dtype through the Python API (docs/kv_cache.md): vLLM's names, an fp8 cache on
the CPU, and a clear error for an unknown name."""

import pytest

from conftest import CPU, HF_TINY


def test_fp8_kv_cache_generates_and_reports_its_dtype(hf_tiny):
    from kestrel import LLM, SamplingParams
    _, prompts, _ = hf_tiny
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    outs = {}
    for name in ("auto", "fp8", "fp8_e4m3"):
        llm = LLM(HF_TINY, kv_cache_dtype=name, **CPU)
        outs[name] = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
        assert all(len(t) == 8 for t in outs[name])
    # The two names are the same setting: the same cache, the same tokens.
    assert outs["fp8"] == outs["fp8_e4m3"]


def test_unknown_kv_cache_dtype_names_the_accepted_ones():
    from kestrel import LLM
    with pytest.raises(RuntimeError, match="auto, bf16, fp8, fp8_e4m3; got 'FP8'"):
        LLM(HF_TINY, kv_cache_dtype="FP8", **CPU)
