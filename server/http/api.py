"""What every HTTP route shares: the one boundary (`Api.route`), the bearer token, reading a
JSON body within its size and time limits, engine jobs on the inference executor (counted,
cancelled when the client leaves), streaming their previews, and errors in each API family's
shape. The routes themselves are ollama_routes.py and openai_routes.py; app.py wires them.

It knows nothing of LSP; engine jobs come from engine.py.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from datetime import datetime, timezone
from functools import partial
from typing import Any, AsyncIterator, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from redraft.engine import CancelFlag, Cancelled

from ..core.inference import Inference
from ..core.pipeline import engine_deadline
from ..core.settings import ServerConfig
from . import bodies, templates
from .engine import ApiChoice, ApiError, complete_fim, rewrite
from .models import Models
from .stats import HttpCounters

log = logging.getLogger(__name__)

OLLAMA, OPENAI = "ollama", "openai"
INTERNAL = "internal error (see the server's log)"
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error", 413: "request_too_large",
               415: "invalid_request_error", 421: "invalid_request_error", 500: "server_error", 503: "unavailable"}


class Gone(Exception):
    """The client disconnected before its answer was ready."""


class Api:
    def __init__(self, inference: Inference, config: ServerConfig, token: str | None, max_body: int,
                 body_timeout: float):
        self.inference, self.config, self.token, self.max_body = inference, config, token, max_body
        self.body_timeout = body_timeout
        self.stats = HttpCounters()
        self.models = Models(inference, config)

    def route(self, handler, family: str, path: str, counted: bool = True):
        """The one boundary of every route: typed refusals in the family's shape and counted by
        status, a client that left counted as cancelled, anything else logged, counted for
        `path` and answered 500; a stream gets the same boundary around its body. A route not
        `counted` (the stats route) counts only its errors, so reading the counters does not
        change them."""
        stats = self.stats if counted else HttpCounters()  # (a scratch copy)

        async def endpoint(request: Request) -> Response:
            stats.add("requests")
            try:
                self._authorize(request)
                response = await handler(self, request)
            except ApiError as e:
                stats.reject(e.status)
                return error(e, family)
            except templates.BadRequest as e:
                stats.reject(400)
                return error(ApiError(400, str(e)), family)
            except Gone:
                log.debug("%s: the client left; its job was cancelled", path)
                stats.add("cancelled")
                return Response(status_code=499)
            except Exception:
                return self._failed(request, path, family)
            if isinstance(response, StreamingResponse):
                response.body_iterator = self._guarded(response.body_iterator, path, family,
                                                       sse=response.media_type == "text/event-stream")
            else:
                stats.add("answered")
            return response
        return endpoint

    def _failed(self, request: Request, path: str, family: str) -> Response:
        log.exception("%s %s", request.method, path)
        self.stats.count_error(path)
        return error(ApiError(500, INTERNAL), family)

    async def _guarded(self, body: AsyncIterator[str], path: str, family: str, sse: bool) -> AsyncIterator[str]:
        """A stream's body inside the boundary: an exception ends it with an error event in
        the family's shape (the status line has gone); a client that leaves closes it."""
        self.stats.add("streams_open")
        try:
            async for part in body:
                yield part
        except Exception:
            log.exception("%s (streaming)", path)
            self.stats.count_error(path)
            failure = error_body(ApiError(500, INTERNAL), family)
            yield sse_event(failure) if sse else json.dumps(failure) + "\n"
        finally:
            self.stats.add("streams_open", -1)

    # -- requests --------------------------------------------------------------------------

    def _authorize(self, request: Request) -> None:
        if self.token is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            raise ApiError(401, "missing or wrong bearer token (send 'Authorization: Bearer TOKEN')",
                           headers={"WWW-Authenticate": "Bearer"})

    async def json(self, request: Request) -> dict:
        """The body, a JSON object (bodies.py: its type, size, arrival time, depth and text)."""
        try:
            bodies.check_type(request)
            body = bodies.parse(await bodies.read(request, self.max_body, self.body_timeout))
        except bodies.BodyError as e:
            raise ApiError(e.status, e.message) from None
        except ClientDisconnect:
            raise Gone() from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        return body

    # -- engine jobs -----------------------------------------------------------------------

    def fim_job(self, model: str, fim: templates.Fim, p: templates.Params):
        """The job of a completion by the model named `model` (it loads on the executor when it
        is not the loaded one)."""
        return partial(complete_fim, self.inference, fim, p, self.config, engine_of=partial(self.models.engine, model))

    def edit_job(self, model: str, ep: templates.EditPrompt, p: templates.Params):
        def job(flag: CancelFlag, on_preview) -> list[ApiChoice]:
            return [rewrite(self.inference, ep, p, self.config, flag, on_preview,
                            engine_of=partial(self.models.engine, model))]
        return job

    def _submit(self, job, flag: CancelFlag, on_preview) -> asyncio.Future:
        stats = self.stats
        flag.deadline = engine_deadline(time.monotonic() + self.config.max_time / 1000)  # the budget counts from here

        def counted() -> Any:  # on the inference thread
            stats.job_started()
            try:
                return job(flag, on_preview)
            finally:
                stats.add("jobs_running", -1)
                if flag.expired():
                    stats.add("budget_expired")
        try:
            work = self.inference.executor.submit(counted)
        except RuntimeError:  # the executor was shut down
            raise ApiError(503, "the server is shutting down") from None
        stats.add("jobs")
        stats.add("jobs_queued")
        work.add_done_callback(lambda w: w.cancelled() and stats.add("jobs_queued", -1))  # never started
        fut = asyncio.wrap_future(work)
        # A job whose client left ends in Cancelled that nobody reads: mark it read, or asyncio
        # logs it with a traceback when the future is collected.
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        return fut

    async def run(self, request: Request, job) -> list[ApiChoice]:
        """The job's answer; a client that disconnects first cancels it."""
        flag = CancelFlag()
        fut = self._submit(job, flag, None)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({fut, gone}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            flag.cancel()
            self.stats.add("cancelled")
            raise
        finally:
            gone.cancel()
        if not fut.done():
            flag.cancel()
            raise Gone()
        return fut.result()

    async def events(self, job, previews: bool) -> AsyncIterator[tuple[str, Any]]:
        """("preview", (index, text)) after every denoising step (with `previews`), then ("done",
        choices) or ("error", ApiError); an unexpected error raises (the route's boundary
        answers it). Closing the stream (the client left) cancels the job."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        flag = CancelFlag()

        def on_preview(index: int, text: str) -> None:  # on the inference thread
            try:
                loop.call_soon_threadsafe(queue.put_nowait, ("preview", (index, text)))
            except RuntimeError:  # the loop is gone: nobody is listening
                flag.cancel()

        try:
            fut = self._submit(job, flag, on_preview if previews else None)
        except ApiError as e:
            self.stats.reject(e.status)
            yield "error", e
            return
        fut.add_done_callback(lambda f: queue.put_nowait(("end", None)))
        try:
            while (item := await queue.get())[0] == "preview":
                yield item
            try:
                choices = fut.result()
            except ApiError as e:
                self.stats.reject(e.status)
                yield "error", e
                return
            except Cancelled:
                return
            self.stats.add("answered")
            yield "done", choices
        finally:
            if not fut.done():  # the client left mid-stream
                self.stats.add("cancelled")
            flag.cancel()

    def sse_response(self, job, chunk: Callable[..., str], diffusing: bool) -> StreamingResponse:
        async def stream() -> AsyncIterator[str]:
            async for kind, item in self.events(job, diffusing):
                if kind == "preview":
                    yield chunk(*item)
                elif kind == "error":
                    yield sse_event(error_body(item, OPENAI))
                    return
                else:
                    for i, c in enumerate(item):
                        if not diffusing:
                            yield chunk(i, c.text)
                        yield chunk(i, c.text if diffusing else "", c.finish)
            yield "data: [DONE]\n\n"
        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone (the body was read: what comes next is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


# -- answers ------------------------------------------------------------------------------


def error_body(e: ApiError, family: str) -> dict:
    if family == OLLAMA:
        return {"error": e.message, **e.extra}
    return {"error": {"message": e.message, "type": ERROR_TYPES.get(e.status, "error"), "param": None,
                      "code": e.status, **e.extra}}


def error(e: ApiError, family: str) -> JSONResponse:
    return JSONResponse(error_body(e, family), status_code=e.status, headers=e.headers)


def sse_event(obj: dict) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def timing(choices: list[ApiChoice]) -> dict:
    """W3C Server-Timing: the engine's share of the request (clients and benchmarks read it),
    after the language the text was read as (`language;desc=python`; "plaintext" when none),
    which the body names or the server inferred (engine.language_of)."""
    engine = f"engine;dur={sum(c.engine_ms for c in choices):.2f}"
    language = next((c.language for c in choices if c.language), "")
    return {"Server-Timing": f"language;desc={language}, {engine}" if language else engine}


def usage(choices: list[ApiChoice]) -> dict:
    prompt = max((c.stats.context_tokens for c in choices if c.stats), default=0)
    done = sum(c.stats.span_tokens for c in choices if c.stats)
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}
