"""TextStream: the pieces of text of one request, as the engine makes them.

Each next() runs engine steps (GIL released) until text is final, so a loop over it
prints as fast as the model writes; Ctrl-C lands between steps. Leaving the loop early,
close() or the object's end aborts the request. Only one stream or generate() runs on an
LLM at a time: another call while a stream is unfinished raises RuntimeError.
"""

from typing import Callable, Optional

from .outputs import RequestOutput


class TextStream:
    def __init__(self, session, wrap: Callable[..., RequestOutput], prompt: Optional[str]):
        self._session = session
        self._wrap = wrap
        self._prompt = prompt
        # The finished RequestOutput (full text, token ids, finish_reason) once exhausted.
        self.output: Optional[RequestOutput] = None

    def __iter__(self):
        return self

    def __next__(self) -> str:
        while self._session is not None:
            text = self._session.step()
            if self._session.done:
                out = self._session.output
                if out is not None:
                    self.output = self._wrap(out, self._prompt)
                self.close()
            if text:
                return text
        raise StopIteration

    def close(self):
        if self._session is not None:
            self._session.abort()
            self._session = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
