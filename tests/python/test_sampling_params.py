"""SamplingParams: every field is checked by the engine; bad values raise ValueError."""

import pytest

from kestrel import SamplingParams

BAD = [
    {"temperature": -0.1}, {"temperature": float("nan")}, {"top_p": 0.0}, {"top_p": 1.5},
    {"top_k": -2}, {"min_p": -0.1}, {"min_p": 1.1}, {"seed": -1}, {"n": 0}, {"max_tokens": 0},
    {"min_tokens": -1}, {"min_tokens": 10, "max_tokens": 5}, {"presence_penalty": 2.5},
    {"frequency_penalty": -3.0}, {"repetition_penalty": 0.0}, {"logprobs": 21},
    {"logprobs": -1}, {"prompt_logprobs": 21}, {"prompt_logprobs": -1},
    {"logit_bias": {5: 101.0}}, {"logit_bias": {-1: 1.0}},
    {"logit_bias": {5: float("nan")}},
]


@pytest.mark.parametrize("kwargs", BAD, ids=lambda k: ",".join(k))
def test_bad_values_raise_value_error(kwargs):
    with pytest.raises(ValueError) as e:
        SamplingParams(**kwargs)
    assert next(iter(kwargs)) in str(e.value)  # the engine's message names the field


def test_good_values_and_normalisation():
    p = SamplingParams(temperature=0, top_p=0.5, top_k=5, min_p=0.1, seed=2**64 - 1, n=2,
                       max_tokens=None, min_tokens=1, ignore_eos=True, stop="END",
                       stop_token_ids=[1], presence_penalty=-2, frequency_penalty=2,
                       repetition_penalty=1.2, logprobs=0, include_stop_str_in_output=True)
    assert p.stop == ["END"] and p.stop_token_ids == [1]
    assert SamplingParams().max_tokens == 64  # nano-vLLM's default


def test_wrong_types_raise_type_error():
    with pytest.raises(TypeError):
        SamplingParams(temperature="hot")
    with pytest.raises(TypeError, match="logit_bias"):
        SamplingParams(logit_bias=[(5, 1.0)])
    with pytest.raises(TypeError, match="logit_bias"):
        SamplingParams(logit_bias={"5": 1.0})
    with pytest.raises(TypeError):
        SamplingParams(stop_token_ids=["a"])
    # Bytes were taken as text by pybind11 (b"\xff" too): a stop string must be a str.
    with pytest.raises(TypeError, match="stop"):
        SamplingParams(stop=[b"x"])
    with pytest.raises(TypeError, match="stop"):
        SamplingParams(stop=["a", 5])


def test_logit_bias_steers_greedy_tokens(tiny_llm):
    """+100 on a token makes it every greedy pick (the fixture's logits are far smaller);
    -100 on the unbiased pick keeps it out; ids past the vocabulary are a ValueError."""
    plain = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    first = tiny_llm.generate([[1, 2, 3]], plain, use_tqdm=False)[0].outputs[0].token_ids[0]
    forced = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logit_bias={7: 100})
    assert tiny_llm.generate([[1, 2, 3]], forced, use_tqdm=False)[0].outputs[0].token_ids == [7] * 6
    banned = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True,
                            logit_bias={first: -100.0})
    assert first not in tiny_llm.generate([[1, 2, 3]], banned, use_tqdm=False)[0].outputs[0].token_ids
    with pytest.raises(ValueError, match="logit_bias"):
        tiny_llm.generate([[1]], SamplingParams(logit_bias={10**6: 1.0}), use_tqdm=False)


def test_request_checks_raise_value_error(tiny_llm, text_llm):
    with pytest.raises(ValueError, match="stop_token_ids"):
        tiny_llm.generate([[1, 2]], SamplingParams(stop_token_ids=[10**6]), use_tqdm=False)
    with pytest.raises(ValueError, match="prompt 1"):
        tiny_llm.generate([[1], [10**6]], SamplingParams(), use_tqdm=False)
    with pytest.raises(ValueError, match="sampling params"):
        tiny_llm.generate([[1], [2], [3]], [SamplingParams()] * 2, use_tqdm=False)
    with pytest.raises(ValueError, match="tokenizer"):
        tiny_llm.generate(["text"], SamplingParams(), use_tqdm=False)
    with pytest.raises(ValueError, match="stop"):
        text_llm.generate(["Hi"], SamplingParams(stop=[""]), use_tqdm=False)
    # Nothing of a refused call stays queued: the engine goes on.
    assert tiny_llm.generate([[1]], SamplingParams(max_tokens=2), use_tqdm=False)[0].finished


def test_fields_assigned_after_construction_are_checked_at_generate(tiny_llm):
    """A dataclass does not check assignments; generate does. A logit_bias list set later was
    an AttributeError ('list' object has no attribute 'items'), a bytes stop string text."""
    p = SamplingParams(max_tokens=2)
    p.logit_bias = [(5, 1.0)]
    with pytest.raises(TypeError, match="logit_bias"):
        tiny_llm.generate([[1, 2]], p, use_tqdm=False)
    p = SamplingParams(max_tokens=2)
    p.stop = [b"x"]
    with pytest.raises(TypeError, match="stop"):
        tiny_llm.generate([[1, 2]], p, use_tqdm=False)
