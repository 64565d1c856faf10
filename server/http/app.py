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
                            --engine-url` clients: this server's engine, on its executor; only
                            with a token or `Access.engine_routes` (403 otherwise)

Who may ask (access.py, before any route): on a loopback-bound server only loopback Host
names and those `Access.hosts` allows (421 otherwise: DNS rebinding), and never a web page
(an Origin header) unless `Access.origins` allows its origin (403; those allowed get CORS
headers). Bodies are JSON only (415), at most `max_body` (413), arriving within
`body_timeout` (408), nested at most 64 deep, valid Unicode (bodies.py, 400). A connection
must send its request's head within `head_timeout` seconds of opening, or of its previous
answer, or it is closed (`make_server`).

A completion goes the LSP server's way: prefix and suffix become a document with the cursor
between them, a snapshot (the mode at the cursor, except that "nothing" becomes LINE: an HTTP
client asks for whatever follows the cursor), drafts from the same text, `inference.answer`
(windows, seeded denoising, the unit-end stop, post-processing), then the client's stop
strings. The text's language is the body's `language` (an extension of the originals) when
it names one; else the file the prompt names (a repository-level header's path, Mercury's
current_file_path) by its extension; else what the text clearly shows (a shebang, lines only one
language writes: core/guess_language.py); else it is plain text, which has no parse-error check.
Answers not streamed name it in Server-Timing (`language;desc=python`).
max_tokens caps the span budget below the server's per-mode default, never above it (a
longer span only slows a line down). A next edit masks the region and re-fills it seeded
with the region's own text as a draft; "no edit" (the fill equals the region) is JSON null.

`stream: true` streams server-sent events (`data: {...}` chunks, then `data: [DONE]`) on
the /v1 routes and newline-delimited JSON on /api/generate, as Ollama does (its default is to
stream). `diffusing: true` (implies streaming) sends the engine's whole draft after every
denoising step, Mercury's way: each chunk replaces the last; the last holds the final text.
A request that names a model gets that model (models.py): the loaded one, or a shipped one
loaded on its first request and kept (one beside the loaded one); /api/tags and /v1/models
list exactly those names. Errors are JSON in each family's shape: bad JSON or fields 400,
missing or wrong bearer token 401, a web page 403, a model not served here 404 (with the
available names), a body over `max_body` 413, a body slower than `body_timeout` 408, a body
that is not JSON 415, a foreign Host 421, no model 503. One boundary (`Api.route`, api.py) holds every route: anything
else, before or during a stream, is logged, counted for the route (`errors_by_route`) and
answered 500 in the family's shape (an error event once a stream has started), never with a
traceback. A client that disconnects sets its job's CancelFlag: a queued job never starts, a
running one stops at the next denoising step (`cancelled`; `jobs_queued`, `jobs_running` go
back to 0). Answers not streamed say the engine's share in a `Server-Timing: engine;dur=MS` header.

Here: the app and its server. The routes are ollama_routes.py and openai_routes.py, what
they share (the boundary, bodies, jobs, streams, error shapes) api.py, the models they answer
with models.py, the engine side (snapshots, engine calls) engine.py. It knows nothing of LSP.
"""

from __future__ import annotations

import socket

import h11
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..core import wire
from ..core.inference import Inference
from ..core.settings import ServerConfig
from . import ollama_routes as ollama
from . import openai_routes as openai
from .access import Access, Guard
from .api import INTERNAL, OLLAMA, OPENAI, Api, error
from .engine import ApiError
from .engine_routes import engine_off, engine_routes

__all__ = ["INTERNAL", "Access", "build_app", "listen", "make_server"]

MAX_BODY = 1 << 20  # bytes; Zed's prompts are a few kB
BODY_TIMEOUT_S = 10.0
HEAD_TIMEOUT_S = 5.0  # a request's head (line and headers) arrives in one write from any real client
MAX_HEAD_BYTES = 16 << 10  # h11's own default, said here: a longer head is refused (400) as it arrives
ROUTES = [("/api/generate", ollama.generate, OLLAMA, "POST"), ("/api/tags", ollama.tags, OLLAMA, "GET"),
          ("/api/show", ollama.show, OLLAMA, "POST"), ("/v1/completions", openai.completions, OPENAI, "POST"),
          ("/v1/fim/completions", openai.completions, OPENAI, "POST"),
          ("/v1/edit/completions", openai.edit, OPENAI, "POST"), ("/v1/models", openai.models, OPENAI, "GET"),
          ("/v1/redraft/stats", openai.stats, OPENAI, "GET")]


def build_app(inference: Inference, config: ServerConfig, token: str | None = None,
              max_body: int = MAX_BODY, body_timeout: float = BODY_TIMEOUT_S, access: Access | None = None
              ) -> Starlette:
    """The ASGI app. With a `token`, every request must carry `Authorization: Bearer TOKEN`.
    `access` says which Hosts and web origins beyond loopback callers are answered, and whether
    the engine protocol is served without a token (access.py; default: none, no).
    Its counters are `app.state.stats` (an HttpCounters), also served at /v1/redraft/stats;
    the models it answers with, `app.state.models` (a Models)."""
    access = access or Access()
    api = Api(inference, config, token, max_body, body_timeout)
    served = token is not None or access.engine_routes

    def refused(status: int) -> None:
        api.stats.add("requests")
        api.stats.reject(status)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        if not served and request.url.path.startswith(wire.PREFIX + "/"):  # (routes mounted later answer first)
            refused(403)
            return engine_off()
        family = OLLAMA if request.url.path.startswith("/api/") else OPENAI
        what = "no route" if status == 404 else "method not allowed:"
        refused(status)
        return error(ApiError(status, f"{what} {request.method} {request.url.path}"), family)

    engine = engine_routes(lambda: inference.engine, token, executor=inference.executor,
                           budget_s=config.max_time / 1000, body_timeout=body_timeout) if served else []
    # The guard runs first; CORS only answers the origins the user allowed (the guard refused the rest).
    middleware = [Middleware(Guard, access=access, on_refusal=refused)]
    if access.origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(access.origins), allow_methods=["GET", "POST"],
                                     allow_headers=["authorization", "content-type"]))
    app = Starlette(routes=[Route(path, api.route(handler, family, path, counted=handler is not openai.stats),
                                  methods=[method]) for path, handler, family, method in ROUTES] + engine,
                    middleware=middleware, exception_handlers={404: not_found, 405: not_found})
    app.state.stats, app.state.models = api.stats, api.models
    return app


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


def make_server(app: Starlette, log_level: str = "WARNING", head_timeout: float = HEAD_TIMEOUT_S):
    """A uvicorn server for `app` that logs through `logging` only: with LSP on stdio, stdout
    belongs to the protocol, and uvicorn's own log set-up would print access lines there.
    A connection that has not sent a whole request head `head_timeout` seconds after it opened
    (or after its previous answer) is closed: uvicorn has no such timeout of its own, and a
    client that sends half a head would hold its connection forever."""
    import uvicorn

    class Protocol(_HeadTimeout):
        timeout = head_timeout
    config = uvicorn.Config(app, log_config=None, log_level=log_level.lower(), access_log=log_level == "DEBUG",
                            lifespan="off", timeout_graceful_shutdown=2, http=Protocol, timeout_keep_alive=5,
                            h11_max_incomplete_event_size=MAX_HEAD_BYTES)
    return uvicorn.Server(config)


class _HeadTimeout(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's head (`timeout` seconds)."""

    timeout = HEAD_TIMEOUT_S
    _head_timer = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(self.timeout, self._expire)

    def _expire(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():  # still no whole head
            self.transport.close()
