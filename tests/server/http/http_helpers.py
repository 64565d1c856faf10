"""What the HTTP tests share: a real uvicorn server on a thread, `redraft serve --http` as a
process, raw requests, SSE parsing, a slowed engine."""

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


class ServeProcess:
    """`redraft serve --http PORT --model MODEL *extra` as a user runs it, on a free loopback port:
    its stderr kept in `log` (read on a thread, so a full pipe never stalls it), `rss()` its
    resident memory. Stop it with `stop()`."""

    def __init__(self, model, *extra: str, timeout: float = 120):
        import os
        import socket
        import subprocess
        import sys
        import threading
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "redraft.server.cli", "serve", "--http", str(self.port),
                                      "--model", str(model), *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        self.log: list[str] = []
        started = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.log.append(line)
                if "answering at" in line:
                    started.set()
            started.set()
        threading.Thread(target=drain, daemon=True).start()
        if not started.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise AssertionError("the server did not start:\n" + "".join(self.log))

    def rss(self) -> int:
        """Resident memory in bytes (VmRSS)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            kb = next(line for line in f if line.startswith("VmRSS:")).split()[1]
        return int(kb) * 1024

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


def raw_request(port: int, data: bytes, timeout: float = 30) -> tuple[int, bytes]:
    """(status, body) of one request written byte for byte (Host and all, as the caller wrote
    it); the connection is closed after it (`Connection: close` is the caller's to send)."""
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        reply = b""
        while part := sock.recv(65536):
            reply += part
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body
