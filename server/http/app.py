"""The HTTP front: Ollama-, OpenAI- and Inception-style routes over the one engine.

`build_app(inference, config, token)` makes a Starlette app; `listen` and `make_server` run it
on uvicorn. The CLI runs it alone, or on a thread beside the LSP server on stdio, sharing
the Inference: one engine, one model in memory, one executor every engine call runs on.

  POST /api/generate        Ollama: a FIM prompt in a family's template (templates.py) or
                            prompt + suffix; options.num_predict, temperature, stop
  GET  /api/tags, POST /api/show   Ollama's model listing and details (Zed's provider asks)
  POST /v1/completions      OpenAI: prompt + suffix, or a template prompt; max_tokens,
                            temperature, stop, n
  POST /v1/fim/completions  Inception: prompt + suffix, answered like /v1/completions
  POST /v1/edit/completions Inception next edit: a chat body whose user message holds
                            Mercury's prompt tags; the rewritten code_to_edit region, or
                            JSON null for "no edit"
  GET  /v1/models
  GET  /v1/redraft/stats    the HTTP side's counters (stats.py), with `model`, `model_error` and,
                            with a remote engine, `remote` (its breaker's state and failures)
  /v1/redraft/engine/...    the engine protocol (engine_routes.py), for `redraft serve
                            --engine-url` clients: this server's engine, on its executor

A completion goes the LSP server's way: prefix and suffix become a document with the cursor
between them, a snapshot (the mode at the cursor, except that "nothing" becomes LINE: an HTTP
client asks for whatever follows the cursor), drafts from the same text, `inference.answer`
(windows, seeded denoising, the unit-end stop, post-processing), then the client's stop
strings. The text is plain unless the body names a `language` (an extension of the originals)
or the prompt a file (Mercury's current_file_path); plain text has no parse-error check.
max_tokens caps the span budget below the server's per-mode default, never above it (a
longer span only slows a line down). A next edit masks the region and re-fills it seeded
with the region's own text as a draft; "no edit" (the fill equals the region) is JSON null.

`stream: true` streams server-sent events (`data: {...}` chunks, then `data: [DONE]`) on
the /v1 routes and newline-delimited JSON on /api/generate, as Ollama does (its default is to
stream). `diffusing: true` (implies streaming) sends the engine's whole draft after every
denoising step, Mercury's way: each chunk replaces the last; the last holds the final text.
Errors are JSON in each family's shape: bad JSON or fields 400, missing or wrong bearer token
401, unknown model 404 (with the available names), body over `max_body` 413, a body slower
than `body_timeout` 408, no model 503. One boundary (`_Api.route`) holds every route: anything
else, before or during a stream, is logged, counted for the route (`errors_by_route`) and
answered 500 in the family's shape (an error event once a stream has started), never with a
traceback. A client that disconnects sets its job's CancelFlag: a queued job never starts, a
running one stops at the next denoising step (`cancelled`; `jobs_queued`, `jobs_running` go
back to 0). Answers not streamed say the engine's share in a `Server-Timing: engine;dur=MS` header.

It knows nothing of LSP; the engine side (snapshots, engine calls) is engine.py.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
import time
import uuid
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from redraft.engine import DEFAULT_MODEL, SHIPPED, CancelFlag, Cancelled, EngineError, Stats, resolve

from ..core.inference import Inference
from ..core.pipeline import engine_deadline
from ..core.remote import RemoteEngine
from ..core.settings import ServerConfig
from . import templates
from .engine import ApiChoice, ApiError, complete_fim, rewrite
from .engine_routes import engine_routes
from .stats import HttpCounters


log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # bytes; Zed's prompts are a few kB
BODY_TIMEOUT_S = 10.0
OLLAMA, OPENAI = "ollama", "openai"
INTERNAL = "internal error (see the server's log)"
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               405: "invalid_request_error", 408: "timeout_error", 413: "request_too_large", 500: "server_error",
               503: "unavailable"}


class _Gone(Exception):
    """The client disconnected before its answer was ready."""


# -- the HTTP side (runs on the event loop) -----------------------------------------------


def build_app(inference: Inference, config: ServerConfig, token: str | None = None,
              max_body: int = MAX_BODY, body_timeout: float = BODY_TIMEOUT_S) -> Starlette:
    """The ASGI app. With a `token`, every request must carry `Authorization: Bearer TOKEN`.
    Its counters are `app.state.stats` (an HttpCounters), also served at /v1/redraft/stats."""
    api = _Api(inference, config, token, max_body, body_timeout)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        family = OLLAMA if request.url.path.startswith("/api/") else OPENAI
        what = "no route" if status == 404 else "method not allowed:"
        api.stats.add("requests")
        api.stats.reject(status)
        return _error(ApiError(status, f"{what} {request.method} {request.url.path}"), family)

    routes = [("/api/generate", api.generate, OLLAMA, "POST"), ("/api/tags", api.tags, OLLAMA, "GET"),
              ("/api/show", api.show, OLLAMA, "POST"), ("/v1/completions", api.completions, OPENAI, "POST"),
              ("/v1/fim/completions", api.completions, OPENAI, "POST"),
              ("/v1/edit/completions", api.edit, OPENAI, "POST"), ("/v1/models", api.models, OPENAI, "GET"),
              ("/v1/redraft/stats", api.stats_route, OPENAI, "GET")]
    app = Starlette(routes=[Route(path, api.route(handler, family, path), methods=[method])
                            for path, handler, family, method in routes]
                    + engine_routes(lambda: inference.engine, token, executor=inference.executor),
                    exception_handlers={404: not_found, 405: not_found})
    app.state.stats = api.stats
    return app


class _Api:
    def __init__(self, inference: Inference, config: ServerConfig, token: str | None, max_body: int,
                 body_timeout: float):
        self.inference, self.config, self.token, self.max_body = inference, config, token, max_body
        self.body_timeout = body_timeout
        self.stats = HttpCounters()

    def route(self, handler, family: str, path: str):
        """The one boundary of every route: typed refusals in the family's shape and counted by
        status, a client that left counted as cancelled, anything else logged, counted for
        `path` and answered 500; a stream gets the same boundary around its body. The stats
        route counts only its errors, so reading the counters does not change them."""
        stats = self.stats if handler != self.stats_route else HttpCounters()  # (a scratch copy)

        async def endpoint(request: Request) -> Response:
            stats.add("requests")
            try:
                self._authorize(request)
                response = await handler(request)
            except ApiError as e:
                stats.reject(e.status)
                return _error(e, family)
            except templates.BadRequest as e:
                stats.reject(400)
                return _error(ApiError(400, str(e)), family)
            except _Gone:
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
        return _error(ApiError(500, INTERNAL), family)

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
            error = _error_body(ApiError(500, INTERNAL), family)
            yield _sse(error) if sse else json.dumps(error) + "\n"
        finally:
            self.stats.add("streams_open", -1)

    # -- routes --------------------------------------------------------------------------

    async def generate(self, request: Request) -> Response:
        body = await self._json(request)
        model = self._model(body)
        fim, p = templates.ollama_params(body)
        job = partial(complete_fim, self.inference, fim, p, self.config)

        def line(text: str, done: bool, choice: ApiChoice | None = None) -> dict:
            out = {"model": model, "created_at": _now(), "response": text, "done": done}
            if choice is not None:
                st = choice.stats or Stats()
                out.update(done_reason=choice.finish, total_duration=int(st.total_ms * 1e6),
                           prompt_eval_count=st.context_tokens, eval_count=st.span_tokens)
            return out

        if not fim.prefix and not fim.suffix:  # Ollama's way to load a model: nothing to complete
            return JSONResponse({**line("", True), "done_reason": "load"})
        if not (p.stream or p.diffusing):
            c = (await self._run(request, job))[0]
            return JSONResponse(line(c.text, True, c), headers=_timing([c]))

        async def ndjson() -> AsyncIterator[str]:
            async for kind, item in self._events(job, p.diffusing):
                if kind == "preview":
                    yield json.dumps(line(item[1], False)) + "\n"
                elif kind == "error":
                    yield json.dumps({"error": item.message}) + "\n"
                else:
                    c = item[0]
                    if not p.diffusing:
                        yield json.dumps(line(c.text, False)) + "\n"
                    yield json.dumps(line(c.text if p.diffusing else "", True, c)) + "\n"
        return StreamingResponse(ndjson(), media_type="application/x-ndjson")

    async def completions(self, request: Request) -> Response:
        body = await self._json(request)
        model = self._model(body)
        fim, p = templates.openai_params(body)
        job = partial(complete_fim, self.inference, fim, p, self.config)
        head = {"id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
                "model": model}
        if not (p.stream or p.diffusing):
            choices = await self._run(request, job)
            return JSONResponse({**head, "choices": [{"text": c.text, "index": i, "logprobs": None,
                                                      "finish_reason": c.finish} for i, c in enumerate(choices)],
                                 "usage": _usage(choices)}, headers=_timing(choices))

        def chunk(i: int, text: str, finish: str | None = None) -> str:
            return _sse({**head, "choices": [{"text": text, "index": i, "logprobs": None, "finish_reason": finish}]})
        return self._sse_response(job, chunk, p.diffusing)

    async def edit(self, request: Request) -> Response:
        """Inception's next edit, in the chat-completions shape: `choices[0].message.content` is
        the rewritten code_to_edit region, or null when there is no edit (a string would be
        ambiguous: the region may well read "None"). Streamed, the chunks' `delta.content`
        says the same; with `diffusing` the last one with content holds the final answer."""
        body = await self._json(request)
        model = self._model(body)
        ep, p = templates.edit_prompt(body)
        job = lambda flag, on_preview: [rewrite(self.inference, ep, p, self.config, flag, on_preview)]  # noqa: E731
        head = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
                "model": model}
        if not (p.stream or p.diffusing):
            c = (await self._run(request, job))[0]
            return JSONResponse({**head, "choices": [{"index": 0, "message": {"role": "assistant", "content": c.text},
                                                      "finish_reason": c.finish}], "usage": _usage([c])},
                                headers=_timing([c]))

        def chunk(i: int, text: str | None, finish: str | None = None) -> str:
            delta = {"role": "assistant", "content": text} if text or text is None or finish is None else {}
            return _sse({**head, "object": "chat.completion.chunk",
                         "choices": [{"index": i, "delta": delta, "finish_reason": finish}]})
        return self._sse_response(job, chunk, p.diffusing)

    async def tags(self, request: Request) -> Response:
        return JSONResponse({"models": [{"name": name, "model": name, **self._describe(name)}
                                        for name in self._names()]})

    async def show(self, request: Request) -> Response:
        body = await self._json(request)
        self._model(body)
        name = templates.field(body, "model", str, "").removesuffix(":latest") or self._names()[0]
        info = self._describe(name)
        return JSONResponse({"modelfile": "", "parameters": "", "template": "", "details": info["details"],
                             "model_info": {}, "capabilities": ["completion", "insert"],
                             "modified_at": info["modified_at"]})

    async def stats_route(self, request: Request) -> Response:
        engine = self.inference.engine
        return JSONResponse({**self.stats.as_dict(), "model": None if engine is None else engine.name,
                             "model_error": self.inference.load_error,
                             **({"remote": engine.status()} if isinstance(engine, RemoteEngine) else {})})

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": int(time.time()), "owned_by": "redraft"}
            for name in self._names()]})

    # -- helpers -------------------------------------------------------------------------

    def _authorize(self, request: Request) -> None:
        if self.token is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            raise ApiError(401, "missing or wrong bearer token (send 'Authorization: Bearer TOKEN')",
                           headers={"WWW-Authenticate": "Bearer"})

    async def _json(self, request: Request) -> dict:
        size = request.headers.get("content-length", "")
        too_big = ApiError(413, f"the body is over {self.max_body} bytes")
        if size.isdigit() and int(size) > self.max_body:
            raise too_big
        chunks, total = [], 0
        try:
            async with asyncio.timeout(self.body_timeout):  # a client that trickles its body holds nothing up
                async for chunk in request.stream():
                    total += len(chunk)
                    if total > self.max_body:
                        raise too_big
                    chunks.append(chunk)
        except TimeoutError:
            raise ApiError(408, f"the body took over {self.body_timeout:g} s to arrive") from None
        except ClientDisconnect:
            raise _Gone() from None
        try:
            body = json.loads(b"".join(chunks))
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the body is not valid JSON: {e}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        return body

    def _names(self) -> list[str]:
        """The loaded model's name (or the configured one, while it loads), then the shipped ones."""
        engine = self.inference.engine
        first = engine.name if engine is not None else _configured(self.config.model)
        return list(dict.fromkeys([first, *SHIPPED]))

    def _model(self, body: dict) -> str:
        """The name to answer with; 404 for a model not served here. Every listed name is served
        by the one loaded model, and the answer names it."""
        asked = templates.field(body, "model", str, "")
        names = self._names()
        if asked and asked.removesuffix(":latest") not in names:
            raise ApiError(404, f"model {asked!r} not found; available: {', '.join(names)}", available=names)
        if self.inference.engine is None and self.inference.load_error:  # 503 now rather than inside a stream
            raise ApiError(503, self.inference.load_error)
        return names[0]  # (while the model loads, a job waits behind the load on the executor)

    def _describe(self, name: str) -> dict:
        engine = self.inference.engine
        loaded = engine is not None and engine.name == name
        folder = engine.path if loaded else _shipped_folder(name)
        files = list(folder.glob("*.safetensors")) if folder is not None else []
        stamp = max((f.stat().st_mtime for f in files), default=0.0)
        try:
            info = engine.info() if loaded else None
        except EngineError:  # a remote engine that has not answered yet
            info = None
        return {"modified_at": datetime.fromtimestamp(stamp, timezone.utc).isoformat().replace("+00:00", "Z"),
                "size": sum(f.stat().st_size for f in files),
                "digest": uuid.uuid5(uuid.NAMESPACE_URL, f"{name}:{stamp}").hex,
                "details": {"parent_model": "", "format": "safetensors", "family": "redraft", "families": ["redraft"],
                            "parameter_size": f"{info.parameters / 1e6:.1f}M" if info else "",
                            "quantization_level": info.dtype if info else ""}}

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

    async def _run(self, request: Request, job) -> list[ApiChoice]:
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
            raise _Gone()
        return fut.result()

    async def _events(self, job, previews: bool) -> AsyncIterator[tuple[str, Any]]:
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

    def _sse_response(self, job, chunk: Callable[..., str], diffusing: bool) -> StreamingResponse:
        async def events() -> AsyncIterator[str]:
            async for kind, item in self._events(job, diffusing):
                if kind == "preview":
                    yield chunk(*item)
                elif kind == "error":
                    yield _sse(_error_body(item, OPENAI))
                    return
                else:
                    for i, c in enumerate(item):
                        if not diffusing:
                            yield chunk(i, c.text)
                        yield chunk(i, c.text if diffusing else "", c.finish)
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone (the body was read: what comes next is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _error_body(e: ApiError, family: str) -> dict:
    if family == OLLAMA:
        return {"error": e.message, **e.extra}
    return {"error": {"message": e.message, "type": ERROR_TYPES.get(e.status, "error"), "param": None,
                      "code": e.status, **e.extra}}


def _error(e: ApiError, family: str) -> JSONResponse:
    return JSONResponse(_error_body(e, family), status_code=e.status, headers=e.headers)


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _timing(choices: list[ApiChoice]) -> dict:
    """W3C Server-Timing: the engine's share of the request (clients and benchmarks read it)."""
    return {"Server-Timing": f"engine;dur={sum(c.engine_ms for c in choices):.2f}"}


def _usage(choices: list[ApiChoice]) -> dict:
    prompt = max((c.stats.context_tokens for c in choices if c.stats), default=0)
    done = sum(c.stats.span_tokens for c in choices if c.stats)
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}


def _configured(model: str | None) -> str:
    """The name Engine.load will give a model: a folder's name, or the name itself."""
    if not model:
        return DEFAULT_MODEL
    path = Path(model).expanduser()
    return path.name if path.is_dir() else model


def _shipped_folder(name: str) -> Path | None:
    if name not in SHIPPED:
        return None
    try:
        return resolve(name)
    except EngineError:
        return None


# -- serving --------------------------------------------------------------------------------


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (OSError when it cannot be), for `make_server().run`."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)  # connections queue from now on, even before the server accepts them
    except OSError:
        sock.close()
        raise
    return sock


def make_server(app: Starlette, log_level: str = "WARNING"):
    """A uvicorn server for `app` that logs through `logging` only: with LSP on stdio, stdout
    belongs to the protocol, and uvicorn's own log set-up would print access lines there."""
    import uvicorn
    config = uvicorn.Config(app, log_config=None, log_level=log_level.lower(), access_log=log_level == "DEBUG",
                            lifespan="off", timeout_graceful_shutdown=2)
    return uvicorn.Server(config)
