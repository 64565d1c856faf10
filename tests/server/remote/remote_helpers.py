"""What the remote-engine tests share: uvicorn on a free loopback port, the engine routes over
a tiny engine, and a scripted fake of the protocol's server that records what it saw."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from redraft.engine import Completion, SamplerConfig, Stats
from redraft.server.core import wire
from redraft.server.core.context import own_drafts, text_snapshot
from redraft.server.core.settings import ServerConfig
from redraft.server.http.engine_routes import engine_routes
from serving import Running  # noqa: F401  (the tests import it from here)

TOKEN = "t0ken"
CONFIG = ServerConfig(line_tokens=6, block_tokens=8, max_lines=2, context_tokens=256)
# A draft answers at the cursor: the same call earlier in the file.
TEXT = "x = compute(alpha, beta)\ny = scale(gamma)\nz = compute(al\n"
CURSOR = TEXT.rindex("compute(al") + len("compute(al")
DRAFT = "pha, beta)"


def engine_app(get_engine, token: str | None = TOKEN) -> Starlette:
    """The engine routes alone over `get_engine()`, engine calls serial on one thread."""
    return Starlette(routes=engine_routes(get_engine, token, executor=ThreadPoolExecutor(1)))


def snapshot(config: ServerConfig = CONFIG, text: str = TEXT, cursor: int = CURSOR, uri: str = "file:///w/a.py"):
    snap, doc = text_snapshot(uri, text, cursor, config, "python")
    return own_drafts(snap, doc, config)


def until(check, timeout: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.01)
    return value


class Fake:
    """A protocol server whose infill behaviour follows the request's prefix:

      "hang..."  one preview (when asked), then nothing until the client leaves
      "cut..."   one preview, then the connection breaks (an exception mid-body)
      "short..." one preview, then the body ends without a result
      else       two previews, then a result whose text is the prefix reversed

    `fail_status` answers every request with that status instead; `token` requires a bearer
    token. It counts requests (`calls`), streams open and those the client left (`left`), and
    keeps the headers it saw."""

    def __init__(self, token: str | None = None):
        self.token = token
        self.fail_status: int | None = None
        self.calls = 0
        self.open = 0
        self.left = 0
        self.headers: list[dict] = []
        self.bodies: list[dict] = []
        self.slow_score_s = 0.0
        self.app = Starlette(routes=[Route(wire.INFO, self.info, methods=["GET"]),
                                     Route(wire.INFILL, self.infill, methods=["POST"]),
                                     Route(wire.SCORE, self.score, methods=["POST"])])

    def _refused(self, request: Request):
        self.calls += 1
        self.headers.append(dict(request.headers))
        if self.token is not None and request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse(wire.encode_error(401, "wrong token"), status_code=401)
        if self.fail_status is not None:
            return JSONResponse(wire.encode_error(self.fail_status, "scripted failure"), status_code=self.fail_status)
        return None

    async def info(self, request: Request):
        refused = self._refused(request)
        return refused or JSONResponse({"protocol": 1, "name": "fake", "parameters": 7, "dtype": "float32",
                                        "device": "cpu", "scores_edits": True, "context_limit": 512,
                                        "context_overhead": 6, "sampler": wire.encode_sampler(SamplerConfig())})

    async def score(self, request: Request):
        refused = self._refused(request)
        if refused:
            return refused
        await asyncio.sleep(self.slow_score_s)
        _, _, texts, _ = wire.decode_score(await request.json())
        return JSONResponse(wire.encode_scores([-float(len(t)) for t in texts]))

    async def infill(self, request: Request):
        refused = self._refused(request)
        if refused:
            return refused
        body = await request.json()
        self.bodies.append(body)
        prefix, previews = body["requests"][0]["prefix"], body["previews"]

        def preview(step: int, text: str) -> str:
            return wire.sse("preview", {"request": 0, "step": step, "text": text, "masked": 3 - step})

        async def events():
            self.open += 1
            finished = False
            try:
                if previews:
                    yield preview(1, prefix[:1])
                if prefix.startswith("hang"):
                    await asyncio.sleep(60)
                elif prefix.startswith("cut"):
                    await asyncio.sleep(0.05)
                    raise RuntimeError("scripted: the connection breaks")
                elif prefix.startswith("short"):
                    finished = True
                    return
                if previews:
                    yield preview(2, prefix[:2])
                done = Completion(prefix[::-1], [1, 2], [0.5, 0.25], 2, Stats(steps=2, total_ms=1.5), score=-0.5)
                yield wire.sse("result", wire.encode_result([done]))
                finished = True
            finally:
                self.open -= 1
                if not finished:
                    self.left += 1
        return StreamingResponse(events(), media_type="text/event-stream")
