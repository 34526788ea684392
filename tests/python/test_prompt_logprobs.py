"""SamplingParams(prompt_logprobs=N): vLLM's RequestOutput.prompt_logprobs, checked against
transformers' logits for the HF fixture's prompts (log_softmax at position i - 1 scores
prompt token i)."""

import json
import math

import pytest

from conftest import HF_TINY
from kestrel import Logprob, SamplingParams


def log_softmax(logits):
    top = max(logits)
    log_sum = top + math.log(sum(math.exp(x - top) for x in logits))
    return [x - log_sum for x in logits]


@pytest.fixture(scope="module")
def hf_logits():
    return json.loads((HF_TINY / "expected.json").read_text())["logits"]


def test_prompt_logprobs_match_transformers(tiny_llm, hf_tiny, hf_logits):
    _, prompts, _ = hf_tiny
    params = SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=2)
    outputs = tiny_llm.generate(prompts, params, use_tqdm=False)
    for p, (prompt, logits, out) in enumerate(zip(prompts, hf_logits, outputs)):
        entries = out.prompt_logprobs
        assert entries is not None and len(entries) == len(prompt), (p, entries)
        assert entries[0] is None  # nothing comes before the first token
        for i in range(1, len(prompt)):
            ref = log_softmax(logits[i - 1])
            token, entry = prompt[i], entries[i]
            where = f"prompt {p}, token {i}"
            assert token in entry, where
            assert all(isinstance(lp, Logprob) for lp in entry.values()), where
            assert 2 <= len(entry) <= 3, (where, entry)  # the top 2, and the token if not in them
            assert entry[token].logprob == pytest.approx(ref[token], abs=2e-3), where
            assert entry[token].logprob <= 0
            # Its rank, allowing for candidates within the tolerance of it.
            above = sum(x > ref[token] + 2e-3 for x in ref)
            near = sum(x > ref[token] - 2e-3 for x in ref)
            assert above + 1 <= entry[token].rank <= max(near, 1), (where, entry[token])
            best = sorted(range(len(ref)), key=lambda t: -ref[t])[:2]
            ranked = {lp.rank: (t, lp.logprob) for t, lp in entry.items()}
            for rank, expected in zip((1, 2), best):
                t, lp = ranked[rank]
                assert lp == pytest.approx(ref[expected], abs=2e-3), (where, rank)
        # The generated tokens are unaffected: greedy as without prompt_logprobs.
        alone = tiny_llm.generate([prompt], SamplingParams(temperature=0, max_tokens=2),
                                  use_tqdm=False)[0]
        assert out.outputs[0].token_ids == alone.outputs[0].token_ids, p
        assert alone.prompt_logprobs is None  # not asked for


def test_prompt_logprobs_zero_and_decoded_tokens(text_llm):
    tokenizer = text_llm.get_tokenizer()
    prompt = "The quick brown fox jumps over the lazy dog"
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    out = text_llm.generate(prompt, SamplingParams(max_tokens=1, prompt_logprobs=0),
                            use_tqdm=False)[0]
    entries = out.prompt_logprobs
    assert len(entries) == len(ids) and entries[0] is None
    for token, entry in zip(ids[1:], entries[1:]):
        assert list(entry) == [token]  # prompt_logprobs=0: the prompt token alone
        assert entry[token].decoded_token == tokenizer.decode([token], skip_special_tokens=False)
        assert entry[token].rank >= 1 and math.isfinite(entry[token].logprob)
    # A stream's final output carries them too.
    stream = text_llm.stream(prompt, SamplingParams(max_tokens=2, prompt_logprobs=1))
    "".join(stream)
    assert len(stream.output.prompt_logprobs) == len(ids)
    assert stream.output.prompt_logprobs[0] is None


def test_prompt_logprobs_out_of_range_is_a_value_error():
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=21)
    with pytest.raises(TypeError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs="2")
