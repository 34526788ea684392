"""How failures reach Python: FileNotFoundError, TypeError, ValueError, RuntimeError; Ctrl-C."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import CPU, HF_TINY
from kestrel import LLM, SamplingParams


def test_missing_model_dir(tmp_path):
    with pytest.raises(FileNotFoundError):
        LLM(tmp_path / "nope", **CPU)
    with pytest.raises(FileNotFoundError, match="config.json"):
        LLM(tmp_path, **CPU)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="safetensors"):
        LLM(tmp_path, **CPU)


def test_bad_model_files_are_runtime_errors(tmp_path):
    config = json.loads((HF_TINY / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(RuntimeError):
        LLM(tmp_path, **CPU)


def test_engine_config_keywords():
    with pytest.raises(TypeError, match="max_num_seq"):
        LLM(HF_TINY, max_num_seq=4, **CPU)
    with pytest.raises(TypeError):
        LLM(HF_TINY, device="cpu", max_num_seqs="four")
    with pytest.raises(RuntimeError, match="does not divide the 4 query heads"):
        LLM(HF_TINY, tensor_parallel_size=3, **CPU)
    llm = LLM(HF_TINY, max_num_seqs=4, block_size=32, enable_prefix_caching=False, **CPU)
    assert llm.device == "cpu"


def test_ctrl_c_interrupts_generate_and_the_llm_goes_on(text_model):
    # Minutes of work unless interrupted (the model's context is 40960 tokens).
    script = textwrap.dedent(f"""
        import sys
        from kestrel import LLM, SamplingParams
        llm = LLM({str(text_model)!r}, device="cpu", kv_cache_memory_bytes=64 << 20)
        print("ready", flush=True)
        try:
            llm.generate([[1, 2, 3]] * 16, SamplingParams(max_tokens=20000, ignore_eos=True),
                         use_tqdm=False)
            print("finished", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        out = llm.generate([[1, 2, 3]], SamplingParams(max_tokens=3), use_tqdm=False)
        print("after", len(out[0]["token_ids"]), flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env=os.environ)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.split() == ["interrupted", "after", "3"]


@pytest.mark.parametrize("kwargs, error, words", [
    ({"top_k": "3"}, TypeError, ["SamplingParams.top_k", "int", "'3'"]),
    ({"temperature": None}, TypeError, ["SamplingParams.temperature", "float"]),
    ({"detokenize": "no"}, TypeError, ["SamplingParams.detokenize", "bool"]),
    ({"stop": [None]}, TypeError, ["SamplingParams.stop"]),
    ({"stop": 5}, TypeError, ["SamplingParams.stop"]),
    ({"stop_token_ids": 5}, TypeError, ["SamplingParams.stop_token_ids"]),
    ({"seed": "3"}, TypeError, ["SamplingParams.seed"]),
    ({"max_tokens": 2**31}, ValueError, ["SamplingParams.max_tokens", "2147483648", "range"]),
    ({"top_k": 2**63}, ValueError, ["SamplingParams.top_k", "range"]),
    ({"stop_token_ids": [2**40]}, ValueError, ["SamplingParams.stop_token_ids", "range"]),
    ({"stop": ["\ud800"]}, ValueError, ["SamplingParams.stop", "surrogate"]),
])
def test_sampling_params_type_errors_name_the_field(kwargs, error, words):
    with pytest.raises(error) as e:
        SamplingParams(**kwargs)
    for word in words:
        assert word in str(e.value)
    assert "incompatible function arguments" not in str(e.value)


def test_sampling_params_changed_after_construction_are_checked_at_generate(tiny_llm):
    p = SamplingParams(max_tokens=2)
    p.seed = -1
    with pytest.raises(ValueError, match="SamplingParams.seed"):
        tiny_llm.generate([[1]], p, use_tqdm=False)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"max_num_seqs": 2.0}, TypeError, ["max_num_seqs", "int"]),
    ({"device": None}, TypeError, ["device", "str"]),
    ({"seed": -1}, ValueError, ["seed", "range"]),
    ({"max_num_seqs": 2**40}, ValueError, ["max_num_seqs", "range"]),
])
def test_engine_config_type_errors_name_the_argument(kwargs, error, words):
    with pytest.raises(error) as e:
        LLM(HF_TINY, **{**CPU, **kwargs})
    for word in words:
        assert word in str(e.value)
    assert "incompatible function arguments" not in str(e.value)


@pytest.mark.parametrize("prompts, error, words", [
    ([[1, 2**31]], ValueError, ["prompt 0", "2147483648", "position 1", "vocabulary"]),
    ([[1], [2.5]], TypeError, ["prompt 1", "position 0", "float"]),
    ([["a"]], TypeError, ["prompt 0", "str"]),
    ([[None]], TypeError, ["prompt 0", "NoneType"]),
    ([[[1, 2]]], TypeError, ["prompt 0", "list"]),
    ([{"text": "hi"}], ValueError, ["prompt 0", "prompt_token_ids"]),
    ([{"prompt_token_ids": 5}], TypeError, ["prompt 0", "int"]),
    (None, TypeError, ["prompts", "NoneType"]),
    (5, TypeError, ["prompts", "int"]),
    (b"hello", TypeError, ["prompts", "bytes"]),
])
def test_bad_prompts_name_the_prompt(tiny_llm, prompts, error, words):
    with pytest.raises(error) as e:
        tiny_llm.generate(prompts, SamplingParams(max_tokens=2), use_tqdm=False)
    for word in words:
        assert word in str(e.value)
    assert "incompatible function arguments" not in str(e.value)
    assert tiny_llm.generate([[1]], SamplingParams(max_tokens=2), use_tqdm=False)[0].finished


@pytest.mark.parametrize("params, words", [
    ({"max_tokens": 2}, ["sampling_params", "dict"]),
    ([None], ["sampling_params[0]", "NoneType"]),
    (5, ["sampling_params", "int"]),
])
def test_bad_sampling_params_arguments_are_type_errors(tiny_llm, params, words):
    with pytest.raises(TypeError) as e:
        tiny_llm.generate([[1]], params, use_tqdm=False)
    for word in words:
        assert word in str(e.value)
    with pytest.raises(TypeError, match="sampling_params"):
        tiny_llm.stream([1], [SamplingParams()])


def test_text_that_is_not_unicode_is_a_value_error(text_llm):
    with pytest.raises(ValueError, match="prompt 0.*surrogate"):
        text_llm.generate(["\ud800abc"], SamplingParams(max_tokens=2), use_tqdm=False)
    with pytest.raises(ValueError, match="surrogate"):
        text_llm.get_tokenizer().encode("\ud800")
    with pytest.raises(ValueError, match="messages.*surrogate"):
        text_llm.chat([{"role": "user", "content": "\ud800"}], use_tqdm=False)
    with pytest.raises(ValueError, match="messages.*NaN|messages.*nan"):
        text_llm.chat([{"role": "user", "content": float("nan")}], use_tqdm=False)
    with pytest.raises(TypeError, match="messages.*bytes"):
        text_llm.chat([{"role": "user", "content": b"hi"}], use_tqdm=False)


@pytest.mark.parametrize("messages, error, words", [
    (None, TypeError, ["messages", "NoneType"]),
    (["hello"], TypeError, ["messages", "str"]),
    ([{"content": "hi"}], ValueError, ["message 0", "role"]),
    ([{"role": "user", "content": "a"}, {"role": 5, "content": "b"}], ValueError,
     ["message 1", "role"]),
    ([{"role": "user", "content": 5}], ValueError, ["message 0", "content"]),
])
def test_bad_chat_messages(text_llm, messages, error, words):
    with pytest.raises(error) as e:
        text_llm.chat(messages, SamplingParams(max_tokens=2), use_tqdm=False)
    for word in words:
        assert word in str(e.value)


def test_chat_content_as_text_parts(text_llm):
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}]
    joined = [{"role": "user", "content": "Hi\nthere"}]
    tok = text_llm.get_tokenizer()
    assert tok.apply_chat_template(parts) == tok.apply_chat_template(joined)
    with pytest.raises(ValueError, match="not a text part"):
        tok.apply_chat_template([{"role": "user", "content": [{"type": "image_url"}]}])


@pytest.mark.parametrize("kwargs, words", [
    ({"max_model_len": -1}, ["max_model_len must be >= 0", "-1"]),
    ({"num_kv_blocks": -1}, ["num_kv_blocks must be >= 0", "-1"]),
    # Was an int overflow inside the step buffers' sizes ("StepInputs: bad capacity").
    ({"max_model_len": 2**31 - 1}, ["max_model_len 2147483647 exceeds", "max_position_embeddings"]),
    # Terabytes of step buffers: an error, not a crash or the OOM killer.
    ({"max_num_seqs": 2**30}, ["max_num_seqs 1073741824", "GiB of step buffers"]),
])
def test_engine_sizes_out_of_range_are_refused(kwargs, words):
    with pytest.raises(RuntimeError) as e:
        LLM(HF_TINY, **{**CPU, **kwargs})
    for word in words:
        assert word in str(e.value)
