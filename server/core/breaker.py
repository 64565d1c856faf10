"""A circuit breaker: after a few consecutive failures, stop calling a remote engine for a while.

Closed (calls go through) until `threshold` consecutive failures; then open: `allow()` says
no at once, without touching the network, for a cooldown. After it, half-open: exactly one
caller is let through as a probe. The probe's success closes the breaker (and resets the
cooldown); its failure opens it again for twice as long, up to `max_cooldown_s`. A probe that
ends neither way (cancelled) hands its turn to the next caller.

Thread-safe; it knows nothing of HTTP or engines, only outcomes and a clock.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class Breaker:
    def __init__(self, threshold: int = 3, cooldown_s: float = 1.0, max_cooldown_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        if threshold < 1 or cooldown_s <= 0 or max_cooldown_s < cooldown_s:
            raise ValueError("a breaker needs threshold >= 1 and 0 < cooldown_s <= max_cooldown_s")
        self.threshold, self.base_cooldown_s, self.max_cooldown_s = threshold, cooldown_s, max_cooldown_s
        self.clock = clock
        self._lock = threading.Lock()
        self._state = CLOSED
        self._consecutive = 0  # failures since the last success
        self._cooldown = cooldown_s  # of the current (or next) open period
        self._until = 0.0  # clock time at which an open breaker lets a probe through
        self._probing = False  # a half-open breaker's probe is in flight
        self.opened = 0  # times it opened

    @property
    def state(self) -> str:
        with self._lock:
            if self._state == OPEN and self.clock() >= self._until:
                return HALF_OPEN  # (the next caller probes)
            return self._state

    def allow(self) -> bool:
        """Whether a call may go out now; in half-open state only one at a time (the probe)."""
        with self._lock:
            if self._state == CLOSED:
                return True
            if self._state == OPEN:
                if self.clock() < self._until:
                    return False
                self._state = HALF_OPEN
            if self._probing:
                return False
            self._probing = True
            return True

    def succeeded(self) -> None:
        with self._lock:
            self._state, self._consecutive, self._probing = CLOSED, 0, False
            self._cooldown = self.base_cooldown_s

    def failed(self) -> None:
        with self._lock:
            self._consecutive += 1
            if self._state == HALF_OPEN:  # the probe failed: a longer wait
                self._cooldown = min(self._cooldown * 2, self.max_cooldown_s)
                self._open()
            elif self._state == CLOSED and self._consecutive >= self.threshold:
                self._open()

    def released(self) -> None:
        """A call that ended neither in success nor in failure (cancelled): a probe's turn passes on."""
        with self._lock:
            self._probing = False

    def _open(self) -> None:
        self._state, self._probing = OPEN, False
        self._until = self.clock() + self._cooldown
        self.opened += 1

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a probe through (0 when it would now)."""
        with self._lock:
            return max(0.0, self._until - self.clock()) if self._state == OPEN else 0.0

    def as_dict(self) -> dict:
        retry = self.retry_in()
        with self._lock:
            return {"state": self._state if retry or self._state != OPEN else HALF_OPEN,
                    "consecutive_failures": self._consecutive, "opened": self.opened,
                    "cooldown_s": round(self._cooldown, 3), "retry_in_s": round(retry, 3)}
