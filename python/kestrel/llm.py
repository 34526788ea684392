"""LLM: the offline API, as nano-vLLM and vLLM spell it, over the C++ engine.

Generation runs one engine step per call into C++ (a session, python/batch_session.h),
with the GIL released during the step. Python thus regains control between steps: Ctrl-C
raises KeyboardInterrupt there and the unfinished requests are aborted, leaving the LLM
usable; the progress bar is drawn there; streams yield there.

Not thread-safe, like the C++ LLM: one generate() or stream at a time per LLM (another one
meanwhile raises RuntimeError).
"""

import functools
import numbers
import operator
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _kestrel
from ._checks import check_text, set_field, short
from .outputs import CompletionOutput, Logprob, RequestOutput
from .progress import ProgressBar
from .sampling_params import SamplingParams
from .stream import TextStream
from .tokenizer import Messages, Tokenizer

Prompt = Union[str, List[int], Dict[str, Any]]
Params = Union[None, SamplingParams, Sequence[SamplingParams]]


def _check_model_dir(path: str):
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model directory not found: {path}")
    for name in ("config.json",):
        if not os.path.isfile(os.path.join(path, name)):
            raise FileNotFoundError(f"{name} not found in the model directory {path}")
    if not any(os.path.isfile(os.path.join(path, n))
               for n in ("model.safetensors", "model.safetensors.index.json")):
        raise FileNotFoundError(
            f"no model.safetensors or model.safetensors.index.json in {path}")


class LLM:
    def __init__(self, model: Union[str, os.PathLike], enforce_eager: bool = False,
                 tensor_parallel_size: int = 1, **kwargs):
        """Loads a Hugging Face model directory. Keyword arguments are EngineConfig's fields
        (include/kestrel/engine_config.h): device ("auto", "cpu", "cuda"), max_num_seqs,
        max_num_batched_tokens, max_model_len, gpu_memory_utilization, ...

        FileNotFoundError: no such directory, or no config.json or weights in it.
        TypeError: an unknown keyword or a value of the wrong type.
        tensor_parallel_size > 1 starts ranks 1..N-1 as `python -m kestrel._worker`.
        RuntimeError: the engine could not load the model (its message says why)."""
        path = os.fspath(model)
        _check_model_dir(path)
        config = _kestrel.EngineConfig()
        # The engine starts its other ranks as this interpreter running kestrel._worker.
        config.tp_worker_command = [sys.executable, "-m", "kestrel._worker"]
        config.enforce_eager = enforce_eager
        config.tensor_parallel_size = tensor_parallel_size
        for key, value in kwargs.items():
            if key.startswith("_") or not hasattr(config, key):
                known = sorted(k for k in dir(config) if not k.startswith("_"))
                raise TypeError(f"LLM() got an unexpected keyword argument {key!r} "
                                f"(EngineConfig fields: {', '.join(known)})")
            set_field(config, f"LLM argument {key!r}", key, value)
        self._engine = _kestrel.Engine(path, config)

    @property
    def device(self) -> str:
        return self._engine.device

    def get_tokenizer(self) -> Tokenizer:
        """ValueError from its methods when the model directory has no tokenizer.json."""
        return Tokenizer(self._engine)

    def get_default_sampling_params(self) -> SamplingParams:
        """SamplingParams with generation_config.json's values (vLLM's default)."""
        return SamplingParams._from_cpp(self._engine.default_sampling_params())

    def generate(self, prompts: Union[Prompt, Sequence[Prompt]], sampling_params: Params = None,
                 use_tqdm: bool = True) -> List[RequestOutput]:
        """One RequestOutput per prompt, in order. A prompt is text, a list of token ids, or
        vLLM's {"prompt": text} / {"prompt_token_ids": ids}; one prompt alone is a list of one.
        sampling_params: one for all, one per prompt, or None for the model's defaults.
        ValueError (nothing runs) for a bad prompt or parameter, TypeError for a value of the
        wrong type (both name the prompt or parameter); KeyboardInterrupt aborts."""
        if isinstance(prompts, (str, dict)) or (
                isinstance(prompts, (list, tuple)) and prompts and isinstance(prompts[0], numbers.Integral)):
            prompts = [prompts]
        if isinstance(prompts, (bytes, bytearray)) or not _iterable(prompts):
            raise TypeError("prompts must be a prompt (str, list of token ids, dict) or a list of "
                            f"them, got {type(prompts).__name__}")
        texts, ids = [], []
        for i, p in enumerate(prompts):
            text, token_ids = self._prompt(p, i)
            texts.append(text)
            ids.append(token_ids)
        return self._run(texts, ids, sampling_params, use_tqdm)

    def chat(self, messages: Union[Messages, Sequence[Messages]], sampling_params: Params = None,
             use_tqdm: bool = True, *, chat_template: Optional[str] = None,
             add_generation_prompt: bool = True, continue_final_message: bool = False,
             tools: Optional[List[Dict[str, Any]]] = None,
             chat_template_kwargs: Optional[Dict[str, Any]] = None) -> List[RequestOutput]:
        """Generates replies to one conversation ([{"role": ..., "content": ...}, ...]) or a
        list of them, rendered with the model's chat template or `chat_template` (Jinja
        source), as vLLM's LLM.chat does: `tools` go to the template (the reply is text; calls
        are not parsed out of it), continue_final_message=True with add_generation_prompt=False
        has the model continue the last message, chat_template_kwargs become template
        variables (enable_thinking=False, ...)."""
        if not isinstance(messages, (list, tuple)):
            raise TypeError(f"messages must be a list of message dicts, or a list of such lists, "
                            f"got {type(messages).__name__}")
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        for c in conversations:
            if not isinstance(c, (list, tuple)):
                raise TypeError(f"messages must be a list of message dicts, or a list of such "
                                f"lists, got a list of {type(c).__name__}")
        tokenizer = self.get_tokenizer()
        if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
            raise TypeError(f"chat_template_kwargs must be a dict or None, "
                            f"got {type(chat_template_kwargs).__name__}")
        texts = [tokenizer.apply_chat_template(c, add_generation_prompt=add_generation_prompt,
                                               continue_final_message=continue_final_message,
                                               chat_template=chat_template, tools=tools,
                                               **(chat_template_kwargs or {}))
                 for c in conversations]
        ids = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
        return self._run(texts, ids, sampling_params, use_tqdm)

    def stream(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None) -> TextStream:
        """Text of one request piece by piece: `for piece in llm.stream("Hi", sp): print(piece,
        end="")`. The pieces join to the text generate() returns; the iterator's .output is
        the full RequestOutput once it is exhausted. Needs a tokenizer; n must be 1."""
        text, ids = self._prompt(prompt, 0)
        if sampling_params is not None and not isinstance(sampling_params, SamplingParams):
            raise TypeError(f"sampling_params must be a SamplingParams or None, "
                            f"got {type(sampling_params).__name__}")
        params = sampling_params if sampling_params is not None else self.get_default_sampling_params()
        session = self._engine.start_stream(ids, params._to_cpp(self._engine))
        wrap = functools.partial(self._wrap, prompt_logprobs=params.prompt_logprobs is not None)
        return TextStream(session, wrap, text)

    def _prompt(self, prompt: Prompt, index: int):
        """(text or None, token ids) of prompt number `index`."""
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                return prompt.get("prompt"), self._token_ids(prompt["prompt_token_ids"], index)
            if "prompt" not in prompt:
                raise ValueError(f"prompt {index}: a dict prompt needs 'prompt' or "
                                 f"'prompt_token_ids', got keys {sorted(map(str, prompt))}")
            prompt = prompt["prompt"]
        if isinstance(prompt, str):
            if not self._engine.has_tokenizer:
                raise ValueError("text prompts need tokenizer.json in the model directory; "
                                 "pass token ids instead")
            return prompt, self._engine.encode(check_text(f"prompt {index}", prompt), True)
        return None, self._token_ids(prompt, index)

    def _token_ids(self, ids, index: int) -> List[int]:
        if isinstance(ids, (str, bytes, bytearray, dict)) or not _iterable(ids):
            raise TypeError(f"prompt {index} must be text, a list of token ids or a dict, "
                            f"got {type(ids).__name__}")
        out = []
        vocab_size = self._engine.vocab_size
        for position, token in enumerate(ids):
            try:
                if isinstance(token, bool):
                    raise TypeError
                token = operator.index(token)
            except TypeError:
                raise TypeError(f"prompt {index}: token ids must be integers, got "
                                f"{type(token).__name__} {short(token)} at position {position}") from None
            if not 0 <= token < vocab_size:
                raise ValueError(f"prompt {index}: token {token} at position {position} is outside "
                                 f"the vocabulary [0, {vocab_size})")
            out.append(token)
        return out

    def _run(self, texts, ids, sampling_params: Params, use_tqdm: bool) -> List[RequestOutput]:
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params]
        if isinstance(sampling_params, (str, bytes, dict)) or not _iterable(sampling_params):
            raise TypeError("sampling_params must be a SamplingParams, a list of them or None, "
                            f"got {type(sampling_params).__name__}")
        sampling_params = list(sampling_params)
        for i, p in enumerate(sampling_params):
            if not isinstance(p, SamplingParams):
                raise TypeError(f"sampling_params[{i}] must be a SamplingParams, "
                                f"got {type(p).__name__}")
        session = self._engine.start(ids, [p._to_cpp(self._engine) for p in sampling_params])
        results: List[Optional[RequestOutput]] = [None] * len(ids)
        bar = ProgressBar(len(ids), use_tqdm)
        done = 0
        try:
            while not session.done:
                for index, out in session.step():
                    params = sampling_params[index if len(sampling_params) > 1 else 0]
                    results[index] = self._wrap(out, texts[index],
                                                prompt_logprobs=params.prompt_logprobs is not None)
                    done += 1
                bar.update(done, session.prefill_tps, session.decode_tps)
        finally:
            session.abort()  # after Ctrl-C or an error: nothing of this call stays queued
            bar.close()
        return results

    def _wrap(self, out, prompt: Optional[str], prompt_logprobs: bool = False) -> RequestOutput:
        """`prompt_logprobs`: whether the request asked for them (vLLM's list, else None)."""
        return RequestOutput(
            request_id=out.request_id, prompt=prompt, prompt_token_ids=out.prompt_token_ids,
            outputs=[CompletionOutput(c.index, c.text, c.token_ids, c.finish_reason or None,
                                      self._logprobs(c.logprobs) if c.logprobs else None,
                                      c.stop_reason)
                     for c in out.outputs],
            finished=out.finished, num_cached_tokens=out.num_cached_tokens,
            prompt_logprobs=([None] + self._logprobs(out.prompt_logprobs)) if prompt_logprobs else None)

    def _logprobs(self, positions) -> List[Dict[int, Logprob]]:
        """Per position (generated or prompt): {token_id: Logprob} for the position's token and
        the most likely ones."""
        def piece(token_id):
            if not self._engine.has_tokenizer:
                return None
            return self._engine.decode([token_id], False)

        result = []
        for pos in positions:
            entry = {tid: Logprob(lp, rank + 1, piece(tid)) for rank, (tid, lp) in enumerate(pos.top)}
            if pos.token_id not in entry:
                entry[pos.token_id] = Logprob(pos.logprob, pos.rank, piece(pos.token_id))
            result.append(entry)
        return result


def _iterable(value) -> bool:
    try:
        iter(value)
        return True
    except TypeError:
        return False
