"""What the HTTP tests share: a real uvicorn server on a thread, SSE parsing, a slowed engine."""

from __future__ import annotations

import json

from redraft.server.core.settings import ServerConfig
from serving import Running  # noqa: F401  (the tests import it from here)

CONFIG = ServerConfig(line_tokens=6, block_tokens=6, max_lines=2, max_time=60_000)  # budgets: their own tests
TOKEN = "s3cret"


def on_engine(inference, fn):
    """Run `fn` on the inference executor, as the server does."""
    return inference.executor.submit(fn).result(timeout=60)


def sse(text: str) -> list:
    events = [line[len("data: "):] for line in text.split("\n\n") if line.strip()]
    assert all(not e.startswith("data:") for e in events)
    return [e if e == "[DONE]" else json.loads(e) for e in events]


def calls_until_free(inference, state) -> int:
    """Model calls made from now until the executor can run a new job."""
    before = state["calls"]
    inference.executor.submit(lambda: None).result(timeout=60)
    return state["calls"] - before
