"""Local counters behind the HTTP API's `GET /v1/redraft/stats`, the HTTP side of the LSP
server's `redraft/stats`: requests and how they ended, errors per route, clients that left,
and the engine jobs queued or running now.

The event loop and the inference thread both update them, so every change takes one lock.
Nothing here leaves the machine. It knows nothing of HTTP beyond a route's path and a status.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class HttpCounters:
    requests: int = 0  # requests to the API's routes (the stats route aside)
    answered: int = 0  # answered in full: a 2xx body, or a stream that reached its end
    rejected: dict = field(default_factory=dict)  # "status" -> requests refused with it (400, 401, 404, 408, 413, 503)
    errors: int = 0  # requests that failed inside the server (logged, answered 500)
    errors_by_route: dict = field(default_factory=dict)  # route -> errors
    cancelled: int = 0  # requests whose client left before the answer; their job was cancelled
    jobs: int = 0  # engine jobs submitted
    budget_expired: int = 0  # jobs that reached their time budget (max_time): stopped early, or never ran
    jobs_queued: int = 0  # submitted and not started, now
    jobs_running: int = 0  # on the inference thread, now
    streams_open: int = 0  # streamed answers still being sent, now
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def reject(self, status: int) -> None:
        with self._lock:
            key = str(status)  # as JSON writes it
            self.rejected[key] = self.rejected.get(key, 0) + 1

    def count_error(self, route: str) -> None:
        with self._lock:
            self.errors += 1
            self.errors_by_route[route] = self.errors_by_route.get(route, 0) + 1

    def job_started(self) -> None:
        with self._lock:
            self.jobs_queued -= 1
            self.jobs_running += 1

    def as_dict(self) -> dict:
        with self._lock:
            return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.__dict__.items()
                    if not k.startswith("_")}
