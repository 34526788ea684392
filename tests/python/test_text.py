"""Text prompts, streaming, chat and the tokenizer, on a tiny model with the Qwen3 tokenizer."""

import subprocess

import pytest

from kestrel import SamplingParams

PROMPT = "The capital of France is"
# Random weights: sampling with a seed gives varied, reproducible text.
SAMPLED = SamplingParams(temperature=1.0, seed=7, max_tokens=30, ignore_eos=True)


def test_text_prompt_same_as_cli(text_llm, text_model, kestrel_bin):
    [out] = text_llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=12), use_tqdm=False)
    tokenizer = text_llm.get_tokenizer()
    assert out.prompt == PROMPT and out.prompt_token_ids == tokenizer.encode(PROMPT)
    assert out["text"] == tokenizer.decode(out["token_ids"])
    stdout = subprocess.run(
        [str(kestrel_bin), "generate", "--model", str(text_model), "--device", "cpu",
         "--temperature", "0", "--max-tokens", "12", "--prompt", PROMPT],
        check=True, capture_output=True, text=True).stdout
    line = next(l for l in stdout.splitlines() if "token ids:" in l)
    assert out["token_ids"] == [int(t) for t in line.split("token ids:")[1].split()]


def test_stream_yields_the_text_of_generate(text_llm):
    [expected] = text_llm.generate(PROMPT, SAMPLED, use_tqdm=False)
    stream = text_llm.stream(PROMPT, SAMPLED)
    pieces = list(stream)
    assert len(pieces) > 1
    assert "".join(pieces) == expected["text"]
    assert stream.output["token_ids"] == expected["token_ids"]
    assert stream.output.outputs[0].finish_reason == "length"


def test_stream_left_early_frees_the_llm(text_llm):
    for piece in text_llm.stream(PROMPT, SAMPLED):
        break
    stream = text_llm.stream(PROMPT, SAMPLED)
    next(stream)
    with pytest.raises(RuntimeError, match="already generating"):
        text_llm.generate([PROMPT], SAMPLED, use_tqdm=False)
    stream.close()
    assert text_llm.generate([PROMPT], SAMPLED, use_tqdm=False)[0].finished


def test_stop_strings_same_in_stream_and_generate(text_llm):
    [full] = text_llm.generate(PROMPT, SAMPLED, use_tqdm=False)
    stop = full["text"][10:14]
    params = SamplingParams(temperature=1.0, seed=7, max_tokens=30, ignore_eos=True, stop=stop)
    [cut] = text_llm.generate(PROMPT, params, use_tqdm=False)
    assert cut.outputs[0].finish_reason == "stop"
    assert cut["text"] == full["text"][:full["text"].index(stop)]
    assert "".join(text_llm.stream(PROMPT, params)) == cut["text"]


def test_chat_applies_the_template(text_llm):
    messages = [{"role": "user", "content": "Hello"}]
    tokenizer = text_llm.get_tokenizer()
    rendered = tokenizer.apply_chat_template(messages)
    assert rendered.startswith("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")
    [out] = text_llm.chat(messages, SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    assert out.prompt == rendered
    assert out.prompt_token_ids == tokenizer.apply_chat_template(messages, tokenize=True)
    [direct] = text_llm.generate({"prompt_token_ids": out.prompt_token_ids},
                                 SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    assert out["token_ids"] == direct["token_ids"]
    two = text_llm.chat([messages, messages + [{"role": "assistant", "content": "Hi"},
                                               {"role": "user", "content": "More"}]],
                        SamplingParams(max_tokens=4), use_tqdm=False,
                        chat_template_kwargs={"enable_thinking": False})
    assert len(two) == 2 and "<think>" in two[0].prompt


def test_tokenizer_round_trip(text_llm):
    tokenizer = text_llm.get_tokenizer()
    ids = tokenizer.encode("héllo wörld 🙂")
    assert tokenizer.decode(ids) == "héllo wörld 🙂"
    assert tokenizer.decode(tokenizer.encode("<|im_end|>"), skip_special_tokens=False) == "<|im_end|>"


def test_no_tokenizer_is_a_value_error(tiny_llm):
    with pytest.raises(ValueError, match="tokenizer"):
        tiny_llm.get_tokenizer().encode("hi")
    with pytest.raises(ValueError, match="tokenizer"):
        tiny_llm.stream([1, 2, 3], SamplingParams())


def test_stop_reason_names_the_stop_token(text_llm):
    # The unstopped sample is the reference: stopping at its 4th token's id must end there.
    [full] = text_llm.generate(PROMPT, SAMPLED, use_tqdm=False)
    stop_id = full.outputs[0].token_ids[3]
    first = full.outputs[0].token_ids.index(stop_id)
    params = SamplingParams(temperature=1.0, seed=7, max_tokens=30, ignore_eos=True,
                            stop_token_ids=[stop_id])
    [out] = text_llm.generate(PROMPT, params, use_tqdm=False)
    assert out.outputs[0].finish_reason == "stop"
    assert out.outputs[0].stop_reason == stop_id
    assert out.outputs[0].token_ids == full.outputs[0].token_ids[:first + 1]
    assert full.outputs[0].stop_reason is None  # ended by length


def test_detokenize_false_gives_ids_only(text_llm):
    [with_text] = text_llm.generate(PROMPT, SAMPLED, use_tqdm=False)
    params = SamplingParams(temperature=1.0, seed=7, max_tokens=30, ignore_eos=True,
                            detokenize=False)
    [ids_only] = text_llm.generate(PROMPT, params, use_tqdm=False)
    assert ids_only.outputs[0].token_ids == with_text.outputs[0].token_ids
    assert ids_only.outputs[0].text == ""
    assert SamplingParams().skip_special_tokens and SamplingParams().detokenize


# transformers' rendering, by Python's jinja2 in transformers' environment (tools/render_jinja.py).
def jinja2_render(template, **context):
    import json
    import sys
    from conftest import ROOT
    job = json.dumps({"template": template, "context": context})
    return subprocess.run([sys.executable, str(ROOT / "tools/render_jinja.py")], input=job,
                          capture_output=True, text=True, check=True).stdout


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_chat_with_tools_renders_as_jinja2(text_llm):
    import json
    from conftest import QWEN3_TOKENIZER
    template = json.loads((QWEN3_TOKENIZER / "tokenizer_config.json").read_text())["chat_template"]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    expected = jinja2_render(template, messages=messages, tools=[WEATHER_TOOL], add_generation_prompt=True)
    assert "get_weather" in expected and "<tools>" in expected
    tokenizer = text_llm.get_tokenizer()
    assert tokenizer.apply_chat_template(messages, tools=[WEATHER_TOOL]) == expected
    [out] = text_llm.chat(messages, SamplingParams(max_tokens=2), use_tqdm=False, tools=[WEATHER_TOOL])
    assert out.prompt == expected


def test_chat_continues_the_final_message(text_llm):
    # Qwen3's template keeps an assistant message's text as it is: the prompt ends inside it,
    # trailing space included (transformers' continue_final_message), where the usual
    # rendering closes the turn.
    messages = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "One, two, "}]
    tokenizer = text_llm.get_tokenizer()
    whole = tokenizer.apply_chat_template(messages, add_generation_prompt=False)
    assert "One, two, <|im_end|>" in whole
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=False, continue_final_message=True)
    assert prompt == whole[:whole.index("<|im_end|>", whole.index("One, two, "))]
    assert prompt.endswith("One, two, ")
    [out] = text_llm.chat(messages, SamplingParams(max_tokens=2), use_tqdm=False,
                          add_generation_prompt=False, continue_final_message=True)
    assert out.prompt == prompt
    with pytest.raises(ValueError, match="cannot both be true"):
        text_llm.chat(messages, use_tqdm=False, continue_final_message=True)
    with pytest.raises(ValueError, match="does not appear"):
        tokenizer.apply_chat_template(messages, add_generation_prompt=False, continue_final_message=True,
                                      chat_template="{% for m in messages %}{{ m.role }}{% endfor %}")


def test_chat_template_given_by_the_caller(text_llm):
    template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"
    messages = [{"role": "user", "content": "Hi"}]
    [out] = text_llm.chat(messages, SamplingParams(max_tokens=2), use_tqdm=False, chat_template=template)
    assert out.prompt == jinja2_render(template, messages=messages, add_generation_prompt=True) == "[user] Hi\n[assistant] "
    with pytest.raises(ValueError, match="line 1"):
        text_llm.chat(messages, use_tqdm=False, chat_template="{% if %}")
    with pytest.raises(TypeError, match="chat_template"):
        text_llm.chat(messages, use_tqdm=False, chat_template=3)
