"""SamplingParams: how one request's tokens are chosen and when it stops.

The fields and their meaning are the C++ engine's (include/kestrel/sampling_params.h),
with nano-vLLM's and vLLM's names. The engine checks the values when the object is made:
a value out of range raises ValueError with the engine's message.
"""

from dataclasses import dataclass, field, fields
from typing import List, Optional, Union

from . import _kestrel


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 or 0: all tokens
    min_p: float = 0.0
    seed: Optional[int] = None  # reproducible sampling for this request
    n: int = 1  # independent samples of the prompt
    # nano-vLLM's default (vLLM's is 16). None: up to the model's context length.
    max_tokens: Optional[int] = 64
    min_tokens: int = 0
    ignore_eos: bool = False
    stop: Union[None, str, List[str]] = None  # text that ends a sample (needs a tokenizer)
    stop_token_ids: Optional[List[int]] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logprobs: Optional[int] = None  # most likely tokens to return per position, 0..20
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True  # special tokens left out of the text
    detokenize: bool = True  # False: token ids only, empty text

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {self.seed}")
        self._to_cpp().validate()

    def _to_cpp(self) -> "_kestrel.SamplingParams":
        p = _kestrel.SamplingParams()
        for f in fields(self):
            setattr(p, f.name, getattr(self, f.name))
        return p

    @classmethod
    def _from_cpp(cls, p: "_kestrel.SamplingParams") -> "SamplingParams":
        return cls(**{f.name: getattr(p, f.name) for f in fields(cls)})
