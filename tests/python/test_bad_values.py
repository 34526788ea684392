"""Bad values of every SamplingParams field and of LLM.generate's arguments: each is a
ValueError or TypeError that names the field, raised at once; never a crash or a hang, and
the engine goes on serving afterwards (the Python side of tests/server/fuzz_test.cc)."""

import re
import signal

import pytest

from kestrel import SamplingParams, StructuredOutputsParams

NAN, INF = float("nan"), float("inf")
NOT_NUMBERS = ["0.5", [1], {}, object(), None, b"1"]

# Each float field's values out of its range (the engine's SamplingParams::validate).
OUT_OF_RANGE = {
    "temperature": [-0.1, -1e309], "top_p": [0.0, -1.0, 1.5], "min_p": [-0.1, 1.5],
    "presence_penalty": [-2.5, 3.0, 1e6], "frequency_penalty": [-3.0, 2**64],
    "repetition_penalty": [0.0, -1.0],
}
INTS = ["top_k", "n", "min_tokens"]
OPTIONAL_INTS = ["seed", "max_tokens", "logprobs", "prompt_logprobs"]
BOOLS = ["ignore_eos", "include_stop_str_in_output", "skip_special_tokens", "detokenize"]
STRUCTURED = ["structured_outputs", "guided_decoding"]


def cases():
    for name, bad in OUT_OF_RANGE.items():
        for v in NOT_NUMBERS + [NAN, INF, -INF, 1e309] + bad:
            yield name, v
    for name in INTS + OPTIONAL_INTS:
        for v in [v for v in NOT_NUMBERS if v is not None or name in INTS] + [
                1.5, NAN, INF, 2**64, -2**64, -2**31 - 1]:
            yield name, v
    for name in ["n", "max_tokens", "logprobs", "prompt_logprobs", "seed", "min_tokens"]:
        yield name, -1
    for name, v in [("n", 2**31), ("top_k", -5), ("logprobs", 21), ("prompt_logprobs", 21),
                    ("max_tokens", 0), ("max_tokens", 2**63)]:
        yield name, v
    for name in BOOLS:
        for v in ["yes", [], {}, object(), b"1"]:
            yield name, v
    for v in [5, [5], [None], ["\ud800"], {"a"}, [b"x"], [["a"]], b"x"]:
        yield "stop", v
    for v in [5, ["a"], [1.5], [-1], [2**64], [None], "1", {1}]:
        yield "stop_token_ids", v
    for v in [[(5, 1.0)], {"5": 1.0}, {5: "x"}, {5: NAN}, {5: INF}, {5: 101.0}, {5: -1e309},
              {-1: 1.0}, {2**64: 1.0}, {1.5: 1.0}, {None: 1.0}, 5, "x"]:
        yield "logit_bias", v
    for v in ["json", {"json": {}}, 5, StructuredOutputsParams(),
              StructuredOutputsParams(json={"type": "object"}, regex="a"),
              StructuredOutputsParams(grammar=5), StructuredOutputsParams(choice="yes"),
              StructuredOutputsParams(choice=[]), StructuredOutputsParams(json=5),
              StructuredOutputsParams(regex=5), StructuredOutputsParams(json_object="yes"),
              StructuredOutputsParams(json="not json")]:
        for name in STRUCTURED:
            yield name, v


def short(value) -> str:
    """A stable test id: object() reprs hold addresses."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))[:30]


def case_id(case):
    name, value = case
    return f"{name}={short(value)}"


class Deadline:
    """Fails the test, instead of hanging it, past `seconds`."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        def expire(signum, frame):
            raise TimeoutError(f"no answer within {self.seconds} s")
        self.old = signal.signal(signal.SIGALRM, expire)
        signal.alarm(self.seconds)

    def __exit__(self, *exc):
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.old)


@pytest.mark.parametrize("case", list(cases()), ids=case_id)
def test_bad_field_value_is_an_error_naming_it(case):
    name, value = case
    with Deadline(10), pytest.raises((ValueError, TypeError)) as e:
        SamplingParams(**{name: value})
    # The structured forms' own errors name their key (regex, choice, ...).
    names = [name, "structured", "json", "regex", "choice", "grammar"] \
        if name in STRUCTURED else [name]
    assert any(n in str(e.value) for n in names), f"{name}: {e.value!r}"


# The same values set on a made SamplingParams (dataclasses do not check assignments) are
# caught when generate hands it to the engine.
ASSIGNED = [(n, v) for n, v in cases() if n not in STRUCTURED]


def test_bad_values_assigned_later_fail_at_generate(text_llm):
    for name, value in ASSIGNED:
        p = SamplingParams(max_tokens=2)
        setattr(p, name, value)
        try:
            with Deadline(10):
                text_llm.generate(["Hi"], p, use_tqdm=False)
        except (ValueError, TypeError) as e:
            assert name in str(e) or "stop" in str(e), f"{name}={value!r}: {e!r}"
        else:
            pytest.fail(f"{name}={value!r} was accepted by generate")
    out = text_llm.generate(["Hi"], SamplingParams(max_tokens=2), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 2


# Checked at generate, against the model: its vocabulary, its tokenizer, its context.
AT_GENERATE = [
    ("stop", [""]), ("stop_token_ids", [10**6]), ("logit_bias", {10**6: 1.0}),
    ("structured_outputs", StructuredOutputsParams(regex="(")),
    ("structured_outputs", StructuredOutputsParams(json={"type": "nothing"})),
    ("guided_decoding", StructuredOutputsParams(regex="a{1000000}")),
]


@pytest.mark.parametrize("case", AT_GENERATE, ids=case_id)
def test_values_checked_at_generate_are_errors_naming_them(text_llm, case):
    name, value = case
    p = SamplingParams(**{name: value})
    with Deadline(20), pytest.raises((ValueError, TypeError)) as e:
        text_llm.generate(["Hi"], p, use_tqdm=False)
    names = [name, "regex", "json", "schema"] if name in STRUCTURED else [name]
    assert any(n in str(e.value) for n in names), f"{name}: {e.value!r}"


BAD_PROMPTS = [None, 5, 1.5, b"bytes", [[-1]], [[10**6]], [[2**70]], [["a"]], [[1.5]], [[]],
               [[None]], [{"prompt_token_ids": "x"}], [{"prompt": 5}], [{"nothing": 1}],
               ["\ud800"], [""], [object()], {"prompt_token_ids": [-5]},
               [[1] * 100_000]]


@pytest.mark.parametrize("prompt", BAD_PROMPTS, ids=short)
def test_bad_prompts_are_errors(text_llm, prompt):
    with Deadline(20), pytest.raises((ValueError, TypeError)):
        text_llm.generate(prompt, SamplingParams(max_tokens=2), use_tqdm=False)


@pytest.mark.parametrize("params", ["x", 5, [SamplingParams(), "x"], [], {"max_tokens": 2}],
                         ids=short)
def test_bad_sampling_params_argument_is_an_error(text_llm, params):
    with Deadline(10), pytest.raises((ValueError, TypeError)):
        text_llm.generate(["Hi", "there"], params, use_tqdm=False)


def test_engine_serves_after_the_bad_calls(text_llm):
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    a = text_llm.generate(["Hello"], greedy, use_tqdm=False)[0].outputs[0].token_ids
    b = text_llm.generate(["Hello"], greedy, use_tqdm=False)[0].outputs[0].token_ids
    assert a == b and len(a) == 4
