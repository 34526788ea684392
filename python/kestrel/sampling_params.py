"""SamplingParams: how one request's tokens are chosen and when it stops.

The fields and their meaning are the C++ engine's (include/kestrel/sampling_params.h),
with nano-vLLM's and vLLM's names. The engine checks the values when the object is made:
a value out of range raises ValueError with the engine's message.

Structured outputs are vLLM's: structured_outputs=StructuredOutputsParams(json=..., regex=...,
choice=[...], json_object=True), or the older guided_decoding=GuidedDecodingParams(...). The
engine reads them as the server reads its structured_outputs field (src/structured/
spec_fields.h); their form is checked here, the constraint is compiled at generate over the
model's vocabulary, where an unsupported schema keyword raises ValueError.
"""

import json as _json
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _kestrel
from ._checks import set_field


@dataclass
class StructuredOutputsParams:
    """What each sample's text must be; give exactly one. json: a JSON schema (a dict, or a
    string holding one); regex: a regular expression the whole text matches; choice: the
    text is one of these strings; grammar: a GBNF grammar (rules `name ::= ...`, the text
    matches `root`) or a Lark one (`name: ...`, `start`); recursive rules nest at most 6 deep; json_object: any JSON object."""
    json: Union[None, str, Dict[str, Any], bool] = None
    regex: Optional[str] = None
    choice: Optional[List[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None

    def _to_json(self) -> str:
        """The object as vLLM's HTTP field spells it, for the engine's reader."""
        return _json.dumps({k: v for k, v in asdict(self).items()
                            if v is not None and k in _STRUCTURED_KEYS})


_STRUCTURED_KEYS = ("json", "regex", "choice", "grammar", "json_object")


@dataclass
class GuidedDecodingParams(StructuredOutputsParams):
    """vLLM's name before 0.10 (SamplingParams.guided_decoding). backend: any name selects
    the one backend here, as the server's guided_decoding_backend does."""
    backend: Optional[str] = None


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
    # OpenAI's and vLLM's: token id -> bias in [-100, 100], added to its logit before the
    # penalties (ids are checked against the model's vocabulary at generate)
    logit_bias: Optional[Dict[int, float]] = None
    logprobs: Optional[int] = None  # most likely tokens to return per position, 0..20
    # vLLM's: each prompt token's logprob given the tokens before it, with this many most
    # likely tokens in its place, 0..20 (RequestOutput.prompt_logprobs). The prompt is
    # computed whole for it (no prefix-cache hits).
    prompt_logprobs: Optional[int] = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True  # special tokens left out of the text
    detokenize: bool = True  # False: token ids only, empty text
    structured_outputs: Optional[StructuredOutputsParams] = None  # vLLM >= 0.10
    guided_decoding: Optional[StructuredOutputsParams] = None  # its older name

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = _as_list("stop", self.stop)
        _check_stop(self.stop)
        self.stop_token_ids = _as_list("stop_token_ids", self.stop_token_ids)
        _check_logit_bias(self.logit_bias)
        if isinstance(self.seed, (int, float)) and not 0 <= self.seed < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {self.seed}")
        self._to_cpp().validate()
        structured = self._structured()
        if structured is not None:
            _kestrel.check_structured_outputs(*structured)

    def _structured(self) -> Optional[Tuple[str, str]]:
        """The structured-outputs request as (JSON text, the name errors give it), or None."""
        if self.structured_outputs is not None and self.guided_decoding is not None:
            raise ValueError("'structured_outputs' and 'guided_decoding' both constrain the "
                             "output: give one")
        for name in _STRUCTURED_FIELDS:
            value = getattr(self, name)
            if value is not None:
                if not isinstance(value, StructuredOutputsParams):
                    raise TypeError(f"{name} must be a StructuredOutputsParams, "
                                    f"got {type(value).__name__}")
                return value._to_json(), name
        return None

    def _to_cpp(self, engine: Optional["_kestrel.Engine"] = None) -> "_kestrel.SamplingParams":
        """The engine's SamplingParams; with `engine`, the structured-outputs constraint
        compiled for its model (ValueError when the compiler refuses it)."""
        p = _kestrel.SamplingParams()
        for f in fields(self):
            if f.name not in _STRUCTURED_FIELDS:
                value = getattr(self, f.name)
                if f.name == "logit_bias":  # the engine's list of (id, bias) pairs
                    _check_logit_bias(value)  # perhaps set after __post_init__
                    value = list(value.items()) if value else []
                if f.name == "stop":  # perhaps set after __post_init__
                    _check_stop(value)
                set_field(p, f"SamplingParams.{f.name}", f.name, value)
        structured = self._structured() if engine is not None else None
        if structured is not None:
            engine.constrain(p, *structured)
        return p

    @classmethod
    def _from_cpp(cls, p: "_kestrel.SamplingParams") -> "SamplingParams":
        values = {f.name: getattr(p, f.name) for f in fields(cls)
                  if f.name not in _STRUCTURED_FIELDS}
        values["logit_bias"] = dict(values["logit_bias"]) or None
        return cls(**values)


def _check_logit_bias(logit_bias) -> None:
    if logit_bias is not None and not isinstance(logit_bias, dict):
        raise TypeError("SamplingParams.logit_bias must be a dict of token id to bias, "
                        f"got {type(logit_bias).__name__}")


def _check_stop(stop) -> None:
    """pybind11 would take bytes (b"\\xff" too) as stop text: each stop string is a str."""
    for s in stop if isinstance(stop, (list, tuple)) else [] if stop is None else [stop]:
        if not isinstance(s, str):
            raise TypeError("SamplingParams.stop must be a string or a list of strings, got "
                            f"{type(s).__name__} {repr(s)[:40]}")


def _as_list(name: str, value) -> list:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"SamplingParams.{name} must be a list, got {type(value).__name__}")
    return list(value)


# Python-side fields: the engine gets them as a compiled constraint (SamplingParams.constraint).
_STRUCTURED_FIELDS = ("structured_outputs", "guided_decoding")
