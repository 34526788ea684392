"""What generate() and chat() return.

One object serves both communities' scripts: vLLM's attributes (out.outputs[0].text,
out.prompt_token_ids, out.outputs[0].logprobs, out.finished) and nano-vLLM's dict
(out["text"], out["token_ids"]), which is sample 0's text and generated ids.
"""

from collections.abc import Mapping
from typing import Dict, List, NamedTuple, Optional, Union


class Logprob(NamedTuple):
    """vLLM's Logprob: one candidate token at one generated (or prompt) position."""

    logprob: float
    rank: int  # 1 = most likely
    decoded_token: Optional[str] = None


class CompletionOutput:
    """One sample: vLLM's CompletionOutput."""

    def __init__(self, index: int, text: str, token_ids: List[int], finish_reason: Optional[str],
                 logprobs: Optional[List[Dict[int, Logprob]]],
                 stop_reason: Union[None, str, int] = None):
        self.index = index
        self.text = text
        self.token_ids = token_ids
        self.finish_reason = finish_reason  # "stop", "length" or "abort"
        # With finish_reason "stop": the stop string or stop token id that ended the sample
        # (None for the end-of-sequence token), as vLLM's.
        self.stop_reason = stop_reason
        # Per generated token: {token_id: Logprob} for the sampled token and the requested
        # most likely ones. None unless SamplingParams.logprobs was set.
        self.logprobs = logprobs
        self.cumulative_logprob = (
            None if logprobs is None else sum(lp[t].logprob for lp, t in zip(logprobs, token_ids)))

    def finished(self) -> bool:
        return self.finish_reason is not None

    def __eq__(self, other):
        return isinstance(other, CompletionOutput) and vars(self) == vars(other)

    __hash__ = None

    def __repr__(self):
        return (f"CompletionOutput(index={self.index}, text={self.text!r}, "
                f"token_ids={self.token_ids}, finish_reason={self.finish_reason!r})")


class RequestOutput(Mapping):
    """One prompt's result: vLLM's RequestOutput, readable as nano-vLLM's dict."""

    _KEYS = ("text", "token_ids")

    def __init__(self, request_id: str, prompt: Optional[str], prompt_token_ids: List[int],
                 outputs: List[CompletionOutput], finished: bool, num_cached_tokens: int,
                 prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]] = None):
        self.request_id = request_id
        self.prompt = prompt  # None for token-id prompts
        self.prompt_token_ids = prompt_token_ids
        # vLLM's, with SamplingParams.prompt_logprobs: one entry per prompt token, None for the
        # first (nothing comes before it), then {token_id: Logprob} for the prompt token and
        # the requested most likely ones. None when not asked for.
        self.prompt_logprobs = prompt_logprobs
        self.outputs = outputs
        self.finished = finished
        self.num_cached_tokens = num_cached_tokens

    # nano-vLLM: {"text": ..., "token_ids": [...]}
    def __getitem__(self, key):
        if key not in self._KEYS:
            raise KeyError(key)
        return getattr(self.outputs[0], key)

    def __iter__(self):
        return iter(self._KEYS)

    def __len__(self):
        return len(self._KEYS)

    # Mapping's __eq__ would compare only the two keys; outputs are values, compare all.
    def __eq__(self, other):
        if isinstance(other, RequestOutput):
            return vars(self) == vars(other)
        return Mapping.__eq__(self, other)

    __hash__ = None

    def __repr__(self):
        return (f"RequestOutput(request_id={self.request_id!r}, prompt={self.prompt!r}, "
                f"prompt_token_ids={self.prompt_token_ids}, outputs={self.outputs}, "
                f"finished={self.finished})")
