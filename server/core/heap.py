"""Giving freed memory back to the system in a long-running server.

Each engine call allocates and frees tensors of many sizes (the context grows and shrinks
with the document, spans and batches vary). glibc keeps what is freed in its arenas, and
the resident size of a server typing through documents for an hour creeps up in steps even
though nothing it holds grows. `malloc_trim(0)` returns the free pages; it costs a few
milliseconds, so it runs after an engine job at most once every TRIM_SECONDS, on the
engine's own thread (where the allocations happen). Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time

TRIM_SECONDS = 10.0


def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl): nothing to do
        return None


class HeapTrim:
    def __init__(self, every: float = TRIM_SECONDS, clock=time.monotonic) -> None:
        self.every, self.clock = every, clock
        self.last = clock()
        self.trims = 0
        self._trim = _malloc_trim()

    def after_job(self) -> None:
        now = self.clock()
        if self._trim is None or now - self.last < self.every:
            return
        self.last = now
        self._trim(0)
        self.trims += 1
