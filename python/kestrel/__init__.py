"""kestrel: a C++/CUDA LLM inference engine, used from Python as nano-vLLM and vLLM are.

    from kestrel import LLM, SamplingParams
    llm = LLM("/models/Qwen3-0.6B", device="cpu")
    outputs = llm.generate(["Hello, my name is"], SamplingParams(temperature=0.6, max_tokens=64))
    outputs[0]["text"]            # nano-vLLM
    outputs[0].outputs[0].text    # vLLM

Errors: ValueError for a bad request or parameter (the engine's message), FileNotFoundError
for a missing model directory or files, RuntimeError when the engine fails to load or run.
The engine logs warnings and errors only; set_log_level("info") shows more.
"""

from ._kestrel import set_log_level
from .async_llm import AsyncLLM
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import GuidedDecodingParams, SamplingParams, StructuredOutputsParams
from .stream import TextStream
from .tokenizer import Tokenizer

__all__ = ["LLM", "AsyncLLM", "SamplingParams", "StructuredOutputsParams", "GuidedDecodingParams",
           "RequestOutput", "CompletionOutput", "Logprob", "TextStream", "Tokenizer",
           "set_log_level"]
