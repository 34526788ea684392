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
from kestrel import LLM


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
