"""AsyncLLM: the engine for asyncio programs (a web service written in Python, an agent that
runs many conversations at once). Each request is an async iterator of RequestOutput, and
the requests in flight share the engine's batches, as the server's clients do; vLLM's
AsyncLLM in outline:

    engine = AsyncLLM("/models/Qwen3-0.6B", device="cpu")
    async for out in engine.generate("Hello", SamplingParams(max_tokens=32), "req-1"):
        print(out.outputs[0].text)          # the text so far (cumulative, as vLLM's)
    engine.shutdown()

The engine runs on a thread of its own (the server's engine loop); one Python thread hands
its outputs to the event loop of the coroutine that asked. Leaving the iteration early
(break and aclose, or cancelling the task) aborts the request.
"""

import asyncio
import itertools
import threading
from typing import AsyncIterator, Dict, List, Optional, Tuple

from .llm import LLM, Prompt
from .outputs import CompletionOutput, RequestOutput
from .sampling_params import SamplingParams

_ABORTED = object()  # queued by abort(): the request ends there


class _Sample:
    """One sample's outputs so far, from the engine's deltas."""

    def __init__(self, index: int):
        self.index = index
        self.text = ""
        self.token_ids: List[int] = []
        self.logprobs: Optional[list] = None
        self.finish_reason: Optional[str] = None
        self.stop_reason = None


class AsyncLLM:
    def __init__(self, model, **kwargs):
        """Loads the model as LLM(model, **kwargs) does (the same arguments and errors) and
        starts the engine's thread. The engine is this object's alone until shutdown()."""
        self._llm = LLM(model, **kwargs)
        self._session = self._llm._engine.start_async()
        self._lock = threading.Lock()
        self._keys = itertools.count()
        self._waiting: Dict[int, Tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._request_keys: Dict[str, int] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._dispatch, name="kestrel-async", daemon=True)
        self._thread.start()

    def get_tokenizer(self):
        return self._llm.get_tokenizer()

    def get_default_sampling_params(self) -> SamplingParams:
        return self._llm.get_default_sampling_params()

    async def generate(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None,
                       request_id: Optional[str] = None) -> AsyncIterator[RequestOutput]:
        """Outputs of one request as they grow, the last with finished=True. A prompt is what
        LLM.generate takes for one. request_id (any unique str; one is made when None) names
        it for abort(). ValueError for a bad prompt or parameter (raised at the first
        iteration), RuntimeError when the engine fails or is shut down."""
        if sampling_params is not None and not isinstance(sampling_params, SamplingParams):
            raise TypeError(f"sampling_params must be a SamplingParams or None, "
                            f"got {type(sampling_params).__name__}")
        params = sampling_params if sampling_params is not None else self.get_default_sampling_params()
        text, ids = self._llm._prompt(prompt, 0)
        cpp_params = params._to_cpp(self._llm._engine)
        key = next(self._keys)
        request_id = str(key) if request_id is None else request_id
        if not isinstance(request_id, str):
            raise TypeError(f"request_id must be a str or None, got {type(request_id).__name__}")
        queue: asyncio.Queue = asyncio.Queue()
        with self._lock:
            if self._closed:
                raise RuntimeError("the AsyncLLM was shut down")
            if request_id in self._request_keys:
                raise ValueError(f"request_id {request_id!r} is already running")
            self._request_keys[request_id] = key
            self._waiting[key] = (asyncio.get_running_loop(), queue)
        samples = [_Sample(i) for i in range(params.n)]
        prompt_logprobs = None
        num_cached = 0
        finished = False
        try:
            self._session.add(key, ids, cpp_params)
            while not finished:
                update = await queue.get()
                if update is _ABORTED:
                    for s in samples:
                        s.finish_reason = s.finish_reason or "abort"
                    finished = True
                elif update.error:
                    finished = True
                    raise (ValueError if update.refused else RuntimeError)(update.error)
                else:
                    for delta in update.samples:
                        s = samples[delta.index]
                        s.text += delta.text
                        s.token_ids += delta.token_ids
                        if params.logprobs is not None:
                            s.logprobs = (s.logprobs or []) + self._llm._logprobs(delta.logprobs)
                        s.finish_reason = delta.finish_reason or None
                        s.stop_reason = delta.stop_reason
                    if update.prompt_logprobs:
                        prompt_logprobs = [None] + self._llm._logprobs(update.prompt_logprobs)
                    num_cached = max(num_cached, update.num_cached_tokens)
                    finished = all(s.finish_reason is not None for s in samples)
                yield RequestOutput(
                    request_id=request_id, prompt=text, prompt_token_ids=ids,
                    outputs=[CompletionOutput(s.index, s.text, list(s.token_ids), s.finish_reason,
                                              list(s.logprobs) if s.logprobs is not None else None,
                                              s.stop_reason)
                             for s in samples],
                    finished=finished, num_cached_tokens=num_cached,
                    prompt_logprobs=prompt_logprobs if params.prompt_logprobs is not None else None)
        finally:
            with self._lock:
                self._waiting.pop(key, None)
                self._request_keys.pop(request_id, None)
            if not finished:
                self._session.abort(key)  # the caller left early or was cancelled

    async def abort(self, request_id: str):
        """Ends a running request: its iteration yields a last output, finish_reason "abort"
        for the unfinished samples. An unknown or finished request_id is ignored."""
        with self._lock:
            key = self._request_keys.get(request_id)
            entry = self._waiting.get(key) if key is not None else None
        if entry is None:
            return
        self._session.abort(key)
        loop, queue = entry
        loop.call_soon_threadsafe(queue.put_nowait, _ABORTED)

    def shutdown(self):
        """Aborts every request (each ends with finish_reason "abort") and stops the engine's
        thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._session.shutdown()
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    def __del__(self):
        if hasattr(self, "_thread"):
            self.shutdown()

    def _dispatch(self):
        """The Python thread that hands the engine's updates to each request's event loop."""
        while True:
            updates = self._session.wait(50)
            for update in updates:
                with self._lock:
                    entry = self._waiting.get(update.key)
                if entry is None:
                    continue  # aborted, or its caller left
                loop, queue = entry
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, update)
                except RuntimeError:
                    pass  # that event loop is closed
            with self._lock:
                if self._closed and not updates:
                    return
