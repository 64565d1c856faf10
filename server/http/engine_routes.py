"""The engine protocol v1 served over HTTP, from any object with the Engine interface.

`engine_routes(get_engine, token)` gives Starlette routes for

  GET  /v1/redraft/engine/info     what the engine is, its context limit, its sampler defaults
  POST /v1/redraft/engine/infill   server-sent events: "preview"s (when asked), then "result"
                                   or "error"
  POST /v1/redraft/engine/score    {"scores": [...]}
  POST /v1/redraft/engine/forget   {}

(the bodies are wire.py's). `build_app` mounts them beside the editor-facing routes when the
server has a token or was told to (`--engine-routes`), so a GPU box running `redraft serve
--http --token T` also serves `redraft serve --engine-url` clients; otherwise `engine_off`
answers 403 there. The cluster's ingress mounts them over its batching engine. `get_engine()`
returns the engine of the moment (None: 503). Engine calls run off the event loop: on `executor` when one is given
(an engine that is not thread-safe, such as the in-process Engine, shares the Inference's one
thread), else each on a thread of its own. A client that disconnects (or a stream closed
because a newer request superseded it) sets the request's CancelFlag: the engine stops at its
next step. Every call has a time budget (`budget_s`, the server's max_time): its CancelFlag's
deadline, so the engine stops at the next denoising step past it and answers what it committed;
a call whose budget ran out while it waited for the engine is not started (503). Bodies are
JSON of at most `max_body` bytes arriving within `body_timeout` (bodies.py), and each call
within engine_limits.py's bounds (span and lengths within the model's context, rows, drafts,
texts); bad bodies are 400 with a message naming the field; a wrong or missing bearer token
401; an engine error 500 (logged) — never a traceback to the client.

It knows the protocol and Starlette; nothing of LSP, documents or post-processing.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from concurrent.futures import Executor
from functools import partial
from typing import Any, AsyncIterator, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from redraft.engine import CancelFlag, Cancelled, EngineError

from ..core import wire
from ..core.pipeline import engine_deadline
from ..core.settings import ServerConfig
from . import bodies
from .engine_limits import LimitError, asked_limit, check_infill, check_score, check_score_tokens, context_limit

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # bytes: the most requests a body may hold (engine_limits), with 4k-token contexts, fit
BODY_TIMEOUT_S = 10.0
INTERNAL = "internal error in the engine (see the server's log)"
OFF = ("the engine protocol is off on this server: start it with --token (clients send it) or "
       "--engine-routes to serve it")


class _Late(Exception):
    """The call's time budget ran out before the engine could start it."""


class _Refusal(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def engine_routes(get_engine: Callable[[], object | None], token: str | None,
                  executor: Executor | None = None, max_body: int = MAX_BODY, budget_s: float | None = None,
                  body_timeout: float = BODY_TIMEOUT_S) -> list[Route]:
    """The protocol's routes; `budget_s` is each call's time budget (default: the server's
    default max_time)."""
    budget = ServerConfig().max_time / 1000 if budget_s is None else budget_s
    api = _EngineApi(get_engine, token, executor, max_body, budget, body_timeout)
    return [Route(wire.INFO, api.guard(api.info), methods=["GET"]),
            Route(wire.INFILL, api.guard(api.infill), methods=["POST"]),
            Route(wire.SCORE, api.guard(api.score), methods=["POST"]),
            Route(wire.FORGET, api.guard(api.forget), methods=["POST"])]


def engine_off() -> Response:
    """What a server that does not serve the protocol answers there: 403, saying how to turn it on."""
    return _error(403, OFF)


def _error(status: int, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(wire.encode_error(status, message), status_code=status, headers=headers)


class _EngineApi:
    def __init__(self, get_engine, token: str | None, executor: Executor | None, max_body: int, budget_s: float,
                 body_timeout: float):
        self.get_engine, self.token, self.executor, self.max_body = get_engine, token, executor, max_body
        self.budget_s, self.body_timeout = budget_s, body_timeout

    def guard(self, handler):
        """The routes' one boundary: refusals as {"status", "message"}, anything else 500."""
        async def endpoint(request: Request) -> Response:
            try:
                self._authorize(request)
                return await handler(request)
            except _Refusal as e:
                return _error(e.status, e.message)
            except ClientDisconnect:
                return Response(status_code=499)
            except Exception:
                log.exception("%s %s", request.method, request.url.path)
                return _error(500, INTERNAL)
        return endpoint

    def _authorize(self, request: Request) -> None:
        if self.token is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            raise _Refusal(401, "missing or wrong bearer token (send 'Authorization: Bearer TOKEN')")

    def _engine(self) -> Any:
        engine = self.get_engine()
        if engine is None:
            raise _Refusal(503, "no engine is loaded here (yet)")
        return engine

    async def _body(self, request: Request) -> Any:
        try:
            bodies.check_type(request)
            return bodies.parse(await bodies.read(request, self.max_body, self.body_timeout))
        except bodies.BodyError as e:
            raise _Refusal(e.status, e.message) from None

    async def _call(self, fn: Callable[[], Any]) -> Any:
        """`fn()` off the event loop; ValueError (bad input the engine refused, or a bound
        passed) is a 400, an EngineError (an engine that cannot serve, such as a proxy whose own
        engine is away) 503, a call out of time before it started 503."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.executor, fn)
        except ValueError as e:
            raise _Refusal(400, str(e)) from None
        except EngineError as e:
            raise _Refusal(503, str(e)) from None
        except _Late as e:
            raise _Refusal(503, str(e)) from None

    def _flag(self) -> CancelFlag:
        """A call's flag, its deadline the budget from now."""
        return CancelFlag(engine_deadline(time.monotonic() + self.budget_s))

    def _late(self) -> _Late:
        return _Late(f"the engine was busy: this call's time budget ({self.budget_s * 1000:g} ms) ran out "
                     f"before it could start")

    async def _limit(self, engine: Any) -> int:
        """The model's context: from an in-process engine's configs at once (a refusal does not
        wait for the engine's thread), else asked on it."""
        limit = context_limit(engine)
        return limit if limit is not None else await self._call(partial(asked_limit, engine))

    # -- routes ------------------------------------------------------------------------------

    async def info(self, request: Request) -> Response:
        engine = self._engine()
        return JSONResponse(await self._call(partial(wire.encode_info, engine)))

    async def score(self, request: Request) -> Response:
        engine = self._engine()
        try:
            prefix, suffix, texts, extra = wire.decode_score(await self._body(request))
            check_score(texts)
        except (wire.WireError, LimitError) as e:
            raise _Refusal(400, str(e)) from None
        limit, flag = await self._limit(engine), self._flag()

        def run() -> list[float]:  # (a score is one forward: the budget decides only whether it starts)
            if flag.expired():
                raise self._late()
            check_score_tokens(engine, texts, limit)
            return engine.score(prefix, suffix, texts, extra=extra)
        return JSONResponse(wire.encode_scores(await self._call(run)))

    async def forget(self, request: Request) -> Response:
        engine = self._engine()
        try:
            key = wire.decode_forget(await self._body(request))
        except wire.WireError as e:
            raise _Refusal(400, str(e)) from None
        await self._call(lambda: engine.forget(key))
        return JSONResponse({})

    async def infill(self, request: Request) -> Response:
        engine = self._engine()
        body = await self._body(request)
        limit = await self._limit(engine)
        try:  # here: a body with the whole sampler (every client's) never asks the engine
            call = wire.decode_infill(body, lambda: engine.sampler)
            check_infill(call, limit)
        except (wire.WireError, LimitError) as e:
            raise _Refusal(400, str(e)) from None
        return StreamingResponse(self._events(engine, call), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    async def _events(self, engine: Any, call: wire.InfillCall) -> AsyncIterator[str]:
        """Previews as the engine makes them, then the result or an error. Leaving this
        generator before the end (the client disconnected: Starlette cancels it) cancels the
        engine call."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        flag = self._flag()

        def on_preview(p) -> None:  # on the engine's thread
            try:
                loop.call_soon_threadsafe(queue.put_nowait, p)
            except RuntimeError:  # the loop is gone: nobody listens
                flag.cancel()

        def run() -> list:
            if flag.expired():  # it waited out its budget: the engine never starts it
                raise self._late()
            return engine.infill_batch(call.requests, sampler=call.sampler,
                                       on_preview=on_preview if call.previews else None, cancel=flag,
                                       cache_key=call.cache_key, stop=call.stop)
        fut = loop.run_in_executor(self.executor, run)
        fut.add_done_callback(lambda f: queue.put_nowait(None))
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # read, so asyncio does not log it
        try:
            while (item := await queue.get()) is not None:
                yield wire.sse("preview", wire.encode_preview(item))
            yield self._outcome(fut)
        finally:
            if not fut.done():  # the client left (or was superseded) mid-stream
                log.debug("infill stream closed early: cancelling its engine call")
            flag.cancel()

    @staticmethod
    def _outcome(fut: asyncio.Future) -> str:
        try:
            return wire.sse("result", wire.encode_result(fut.result()))
        except Cancelled:
            return wire.sse("error", wire.encode_error(499, "cancelled"))
        except _Late as e:
            return wire.sse("error", wire.encode_error(503, str(e)))
        except ValueError as e:
            return wire.sse("error", wire.encode_error(400, str(e)))
        except EngineError as e:
            return wire.sse("error", wire.encode_error(503, str(e)))
        except Exception:
            log.exception("infill")
            return wire.sse("error", wire.encode_error(500, INTERNAL))
