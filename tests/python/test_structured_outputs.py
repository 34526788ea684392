"""Structured outputs from Python (vLLM's StructuredOutputsParams and GuidedDecodingParams):
sampled at temperature 1 on a tiny random model, every output is checked by an oracle that
knows nothing of the engine: json.loads plus the small schema checker below, re.fullmatch,
membership in the choices, a hand-written depth count for a recursive grammar."""

import json
import re

import pytest

from kestrel import GuidedDecodingParams, SamplingParams, StructuredOutputsParams

# Bounded strings and arrays: a random model ends only where the schema leaves nothing else.
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "height": {"type": "number"},
        "member": {"type": "boolean"},
        "role": {"enum": ["admin", "user", "guest", "ünïcødé 🚀"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10},
                           "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["zip"],
            "additionalProperties": False,
        },
        "nickname": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
    },
    "required": ["name", "age", "role", "tags"],
    "additionalProperties": False,
}
REGEX = r"[A-Z][a-z]{1,8} (19|20)[0-9]{2}"
CHOICES = ["yes", "no", "maybe 🚀"]
SEEDS = range(8)


def schema_errors(value, schema, where="$"):
    """What is wrong with `value` under `schema`, for the keywords SCHEMA uses."""
    if "anyOf" in schema:
        if all(schema_errors(value, s, where) for s in schema["anyOf"]):
            return [f"{where}: matches no anyOf branch"]
        return []
    if "enum" in schema:
        return [] if value in schema["enum"] else [f"{where}: {value!r} not in the enum"]
    kind = schema["type"]
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    if kind in ("integer", "number"):
        ok = isinstance(value, int if kind == "integer" else (int, float)) and not isinstance(value, bool)
        if not ok:
            return [f"{where}: {value!r} is not an {kind}"]
        low, high = schema.get("minimum", value), schema.get("maximum", value)
        return [] if low <= value <= high else [f"{where}: {value} out of [{low}, {high}]"]
    if not isinstance(value, types[kind]):
        return [f"{where}: {value!r} is not a {kind}"]
    errors = []
    if kind == "string":
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
            errors.append(f"{where}: length {len(value)} out of bounds")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
    elif kind == "array":
        if len(value) > schema.get("maxItems", len(value)):
            errors.append(f"{where}: {len(value)} items")
        for i, item in enumerate(value):
            errors += schema_errors(item, schema["items"], f"{where}[{i}]")
    elif kind == "object":
        errors += [f"{where}: {k} missing" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k not in schema["properties"]:
                errors.append(f"{where}: unexpected {k}")
            else:
                errors += schema_errors(v, schema["properties"][k], f"{where}.{k}")
    return errors


def sampled(structured, seed, max_tokens=1500, **kwargs):
    return SamplingParams(temperature=1.0, seed=seed, max_tokens=max_tokens,
                          structured_outputs=structured, **kwargs)


def test_the_checker_catches_what_it_should():
    good = {"name": "Ann", "age": 30, "role": "user", "tags": [], "address": {"zip": "12345"}}
    assert schema_errors(good, SCHEMA) == []
    for bad in ({**good, "age": 151}, {**good, "age": True}, {**good, "role": "root"},
                {**good, "tags": ["toolong"]}, {**good, "address": {"zip": "1234"}},
                {**good, "extra": 1}, {k: v for k, v in good.items() if k != "name"},
                {**good, "nickname": "toolong"}):
        assert schema_errors(bad, SCHEMA), bad


@pytest.mark.parametrize("schema", [SCHEMA, json.dumps(SCHEMA)], ids=["dict", "string"])
def test_json_schema_outputs_validate(text_llm, schema):
    params = [sampled(StructuredOutputsParams(json=schema), seed) for seed in SEEDS]
    outputs = text_llm.generate(["Describe a person as JSON:"] * len(params), params, use_tqdm=False)
    names = set()
    for out in outputs:
        assert out.outputs[0].finish_reason == "stop", out["text"]
        value = json.loads(out["text"])
        assert schema_errors(value, SCHEMA) == [], out["text"]
        names.add(value["name"])
    assert len(names) > len(SEEDS) // 2  # temperature 1 varies the outputs


def test_regex_and_choice_outputs(text_llm):
    params = [sampled(StructuredOutputsParams(regex=REGEX), seed) for seed in SEEDS]
    for out in text_llm.generate(["Name and year:"] * len(params), params, use_tqdm=False):
        assert out.outputs[0].finish_reason == "stop"
        assert re.fullmatch(REGEX, out["text"]), out["text"]
    params = [sampled(StructuredOutputsParams(choice=CHOICES), seed, n=2) for seed in SEEDS]
    seen = set()
    for out in text_llm.generate(["Pick one:"] * len(params), params, use_tqdm=False):
        for c in out.outputs:
            assert c.text in CHOICES
            seen.add(c.text)
    assert len(seen) > 1


# Lists of digits nested in lists, at most two items a list: recursive, and bounded.
GRAMMAR = """root ::= list
list ::= "[" (item ("," item)?)? "]"   # one or two items, or none
item ::= [0-9] | list"""


def nesting(text):
    """How deep the brackets of `text` nest (a digit inside one list is 2: the list and the item)."""
    depth = deepest = 0
    for c in text:
        depth += (c == "[") - (c == "]")
        deepest = max(deepest, depth)
    return deepest


def test_grammar_outputs_are_nested_lists(text_llm):
    params = [sampled(StructuredOutputsParams(grammar=GRAMMAR), seed) for seed in SEEDS]
    params.append(SamplingParams(temperature=1.0, seed=99, max_tokens=1500,
                                 guided_decoding=GuidedDecodingParams(grammar=GRAMMAR)))
    for out in text_llm.generate(["Nested lists:"] * len(params), params, use_tqdm=False):
        assert out.outputs[0].finish_reason == "stop", out["text"]
        value = json.loads(out["text"])
        assert isinstance(value, list), out["text"]
        # list is at most 6 deep along a path (ebnf_grammar.h's first nesting, which fits).
        assert nesting(out["text"]) <= 6, out["text"]
        assert re.fullmatch(r"[\[\],0-9]+", out["text"]), out["text"]


def test_json_object_outputs_that_end_are_objects(text_llm):
    params = [sampled(StructuredOutputsParams(json_object=True), seed, max_tokens=200) for seed in SEEDS]
    ended = 0
    for out in text_llm.generate(["JSON:"] * len(params), params, use_tqdm=False):
        if out.outputs[0].finish_reason == "stop":
            assert isinstance(json.loads(out["text"]), dict), out["text"]
            ended += 1
    assert ended > 0


def test_guided_decoding_alias_and_chat(text_llm):
    params = SamplingParams(temperature=1.0, seed=3, max_tokens=100,
                            guided_decoding=GuidedDecodingParams(regex=REGEX, backend="xgrammar"))
    [out] = text_llm.chat([{"role": "user", "content": "Name and year?"}], params, use_tqdm=False)
    assert re.fullmatch(REGEX, out["text"]), out["text"]


def test_stream_gives_the_text_of_generate(text_llm):
    params = sampled(StructuredOutputsParams(json=SCHEMA), seed=11)
    [expected] = text_llm.generate("Describe a person as JSON:", params, use_tqdm=False)
    stream = text_llm.stream("Describe a person as JSON:", params)
    text = "".join(stream)
    assert text == expected["text"]
    assert stream.output.outputs[0].finish_reason == "stop"
    assert schema_errors(json.loads(text), SCHEMA) == []


@pytest.mark.parametrize("structured, match", [
    (StructuredOutputsParams(regex="a", choice=["b"]), "give one"),
    (StructuredOutputsParams(), "asks for nothing"),
    (StructuredOutputsParams(choice=[]), "non-empty list"),
    (StructuredOutputsParams(json="{not json"), "structured_outputs.json"),
    (StructuredOutputsParams(grammar=['root ::= "a"']), "must be a string"),
], ids=["two", "none", "empty-choice", "bad-json", "grammar"])
def test_bad_forms_raise_value_error_when_made(structured, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(structured_outputs=structured)


def test_both_names_at_once_is_a_value_error():
    with pytest.raises(ValueError, match="give one"):
        SamplingParams(structured_outputs=StructuredOutputsParams(regex="a"),
                       guided_decoding=GuidedDecodingParams(regex="a"))


def test_what_the_compiler_refuses_raises_value_error_at_generate(text_llm, tiny_llm):
    refused = [
        (StructuredOutputsParams(json={"type": "string", "format": "ipv6"}), "format 'ipv6'"),
        (StructuredOutputsParams(regex="(?=a)b"), "structured_outputs.regex"),
        (StructuredOutputsParams(grammar="root ::= item\nitem ::= x"),
         "rule 'x' is used but not defined at line 2, column 10"),
    ]
    for structured, match in refused:
        with pytest.raises(ValueError, match=match):
            text_llm.generate("Hi", SamplingParams(structured_outputs=structured), use_tqdm=False)
    with pytest.raises(ValueError, match="min_tokens"):
        text_llm.generate("Hi", SamplingParams(min_tokens=2, structured_outputs=StructuredOutputsParams(
            regex="ab")), use_tqdm=False)
    with pytest.raises(ValueError, match="tokenizer"):
        tiny_llm.generate([[1, 2]], SamplingParams(structured_outputs=StructuredOutputsParams(
            regex="ab")), use_tqdm=False)
    # Nothing of a refused call stays queued: the engine goes on.
    assert text_llm.generate("Hi", SamplingParams(max_tokens=2), use_tqdm=False)[0].finished
