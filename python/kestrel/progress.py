"""The progress bar of generate(use_tqdm=True): the C++ LLM::generate's, redrawn here
because Python runs the steps (see llm.py). One line on stderr, only when it is a
terminal, at most every 100 ms: requests done and prompt/generated tokens per second.
"""

import sys
import time


class ProgressBar:
    _WIDTH = 30

    def __init__(self, total: int, enabled: bool):
        self._total = total
        self._enabled = enabled and total > 0 and sys.stderr.isatty()
        self._last = 0.0
        self._drawn = False

    def update(self, done: int, prefill_tps: float, decode_tps: float):
        if not self._enabled:
            return
        now = time.monotonic()
        if done < self._total and now - self._last < 0.1:
            return
        self._last = now
        filled = self._WIDTH * done // self._total
        sys.stderr.write(f"\rGenerating [{'=' * filled}{' ' * (self._WIDTH - filled)}] "
                         f"{done}/{self._total}  prefill {prefill_tps:.0f} tok/s  "
                         f"decode {decode_tps:.0f} tok/s")
        self._drawn = True
        if done == self._total:
            sys.stderr.write("\n")
            self._drawn = False
        sys.stderr.flush()

    def close(self):
        """Ends the line of a bar left unfinished (an error, Ctrl-C)."""
        if self._drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._drawn = False
