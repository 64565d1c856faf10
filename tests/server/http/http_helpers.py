"""What the HTTP tests share: a real uvicorn server on a thread, SSE parsing, a slowed engine."""

from __future__ import annotations

import json
import threading
import time

from redraft.server.core.settings import ServerConfig
from redraft.server.http.app import listen, make_server

CONFIG = ServerConfig(line_tokens=6, block_tokens=6, max_lines=2)
TOKEN = "s3cret"


class Running:
    """uvicorn serving `app` on a free local port, on a thread."""

    def __init__(self, app):
        self.sock = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = make_server(app)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started:
            assert time.time() < deadline, "the server did not start"
            time.sleep(0.01)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


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
