"""RemoteEngine: the Engine interface, served by an engine elsewhere over the engine protocol v1.

`redraft serve --engine-url URL` puts one in the Inference's place of an in-process Engine:
contexts, drafts and post-processing stay here, text goes to the engine (a GPU box running
`redraft serve --http`, or the Ray Serve cluster). Its calls block (httpx), on the Inference's
executor thread like every engine call, never on the event loop.

  name, info()         from GET /info, fetched by `connect()` (Inference.load) or by the first
                       call that needs it; `info()` itself never touches the network
  sampler, with_sampler(**changes)   the engine's defaults, with this side's changes on top
  context_budget(span) max(1, context_limit - span - context_overhead), from /info
  count_tokens(text)   no tokenizer here: a conservative estimate (more tokens than most code
                       takes, so windows fit; the engine trims whatever is still over)
  infill, infill_batch one streamed POST /infill; previews go to `on_preview` as they come;
                       the CancelFlag is watched while the stream is open and closes it (the
                       server then cancels); raises Cancelled like the in-process engine.
                       A `stop` that is a postprocess.Unit travels as data; any other callable
                       cuts the text here. The cache model's `lookup` does not travel.
  score, forget        POST /score, /forget (forget is best effort)

Every request names its document by `x-session-id`: a salted sha256 of the cache key (the
URI; the salt is random per process), never the path itself. A newer request for the same
cache key closes the older one's stream. The engine is not trusted: what it sends is read in
bounded pieces (wire.lines / wire.body: a line, an event, a stream, an answer each have a cap;
no compressed bodies), and a stream is cut at the request's own deadline (its CancelFlag's) as
well as at `timeout_s`, so a hostile or broken engine costs the editor neither memory nor its
time budget; `cut_off` counts the streams cut so. Failures (refused, timed out, 5xx, a protocol
error, an answer over a cap, a stream cut before its result) raise RemoteUnavailable within
`timeout_s` (the budget's cut, within the budget); after a few in a row
the circuit breaker (breaker.py) fails requests at once until a probe gets through. A 401 is
no outage: TokenRejected says the token was refused. `on_health(up, why)` hears when an outage
begins and when it ends (once each). httpx is imported when the first RemoteEngine is made.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

from redraft.engine import Cancelled, Completion, EngineError, Preview, SamplerConfig

from . import wire
from .breaker import Breaker
from .postprocess import Unit

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0  # a whole request, from sending it to its result
CONNECT_TIMEOUT_S = 2.0
# Characters per token for the estimate: ~5% of 2 kB windows of Python (this repository, the
# json package) have fewer than 2.93 per token with the shipped tokenizer, none under 2.66.
# Characters beyond ASCII count as half a token per extra UTF-8 byte as well.
CHARS_PER_TOKEN = 2.75
_WATCH_S = 0.005  # how often open streams are checked for cancellation and their deadline
_DRAIN_S = 0.05  # after its result, how long the end of a stream's body is waited for (then it is cut)
_ERROR_BODY_CHARS = 300
_ERROR_BODY_BYTES = 64 << 10  # of an error answer, read at most
_SALT = secrets.token_bytes(16)


class RemoteUnavailable(EngineError):
    """The remote engine did not answer (refused, timed out, failed, or the circuit is open)."""


class TokenRejected(RemoteUnavailable):
    """The remote engine answered 401: the token is missing or wrong. Not an outage."""


def session_id(cache_key: str) -> str:
    """The opaque document id sent as x-session-id (stable within this process only)."""
    return hashlib.sha256(_SALT + cache_key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class _Request:
    prefix: str
    suffix: str = ""
    extra: str = ""
    drafts: tuple[str, ...] = ()


class _Refused(Exception):
    """The engine answered with an error status (in the response or as an error event)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class _Stream:
    """One open request: cut (its socket shut down, which wakes the blocked reader) when its
    CancelFlag is set or its budget runs out (the flag's `expired()`), when its deadline passes
    or when a newer request supersedes it."""

    def __init__(self, cancel: Any, deadline: float):
        self.cancel, self.deadline = cancel, deadline
        self.reason: str | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self.reason is not None:
                self._shut()

    def detach(self) -> None:
        with self._lock:
            self._sock = None

    def cut(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
                self._shut()

    def check(self, now: float) -> None:
        if self.cancel is not None and getattr(self.cancel, "expired", _never)():
            self.cut("budget")  # (first: at the budget's end the scheduler cancels the flag as well)
        elif self.cancel is not None and self.cancel.is_set():
            self.cut("cancelled")
        elif now >= self.deadline:
            self.cut("timeout")

    def _shut(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Watchdog:
    """One thread for the process that checks every open stream every _WATCH_S (idle otherwise)."""

    def __init__(self) -> None:
        self._streams: set[_Stream] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, s: _Stream) -> None:
        with self._cond:
            self._streams.add(s)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="redraft-remote-watch", daemon=True)
                self._thread.start()
            self._cond.notify()

    def unwatch(self, s: _Stream) -> None:
        with self._cond:
            self._streams.discard(s)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._streams:
                    self._cond.wait()
                current = list(self._streams)
            now = time.monotonic()
            for s in current:
                s.check(now)
            time.sleep(_WATCH_S)


_WATCHDOG = _Watchdog()


def _never() -> bool:
    return False


def _cut_at_stop(text: str, stop: Callable[[str], bool]) -> str:
    """`text` up to the shortest prefix at which `stop` says the unit has ended."""
    for k in range(1, len(text) + 1):
        if stop(text[:k]):
            return text[:k]
    return text


class RemoteEngine:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = TIMEOUT_S,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, breaker: Breaker | None = None,
                 on_health: Callable[[bool, str], None] | None = None):
        import httpx
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"an engine URL starts with http:// or https://, got {url!r}")
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError("engine timeouts must be positive")
        self._httpx = httpx
        self.url = url.rstrip("/")
        self.path = None  # no checkpoint folder on this side
        self.timeout_s, self.connect_timeout_s = timeout_s, min(connect_timeout_s, timeout_s)
        self.breaker = breaker or Breaker()
        self.on_health = on_health
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s,
                                    limits=httpx.Limits(max_connections=32, max_keepalive_connections=8))
        self._info: wire.RemoteInfo | None = None
        self._overrides: dict[str, Any] = {}
        self._open: dict[str, _Stream] = {}  # cache key -> its open stream
        self._lock = threading.Lock()
        self._down = False  # in an outage (told through on_health)
        self.failures = 0  # requests that failed (outage-like: refused, timed out, 5xx, broken)
        self.fast_failures = 0  # requests the open breaker failed without trying
        self.cut_off = 0  # answers the client stopped reading: over a size cap, or past the request's budget
        self.last_error: str | None = None

    # -- what it is -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._info.name if self._info is not None else self.url

    def info(self) -> wire.RemoteInfo:
        """The engine's /info as last fetched; RemoteUnavailable before it ever answered."""
        if self._info is None:
            raise RemoteUnavailable(f"the engine at {self.url} has not answered yet")
        return self._info

    def connect(self) -> wire.RemoteInfo:
        """Fetch /info now (through the breaker)."""
        self._info = wire.decode_info(self._call("GET", wire.INFO, None))
        return self._info

    @property
    def known(self) -> bool:
        """Whether its /info was read already (then asking for budgets sends nothing)."""
        return self._info is not None

    def _known(self) -> wire.RemoteInfo:
        return self._info if self._info is not None else self.connect()

    @property
    def sampler(self) -> SamplerConfig:
        return self._known().sampler.with_(**self._overrides)

    def with_sampler(self, **changes) -> SamplerConfig:
        SamplerConfig().with_(**changes)  # a bad name or value fails here, not in every request
        self._overrides.update(changes)
        return self.sampler

    def context_budget(self, span: int) -> int:
        return self._known().context_budget(span)

    def count_tokens(self, text: str) -> int:
        extra_bytes = len(text.encode("utf-8", "surrogatepass")) - len(text)
        return int(len(text) / CHARS_PER_TOKEN + extra_bytes / 2) + 1

    def status(self) -> dict:
        """For stats: where it points, the breaker's state and the failures so far."""
        return {"url": self.url, **self.breaker.as_dict(), "failures": self.failures,
                "fast_failures": self.fast_failures, "cut_off": self.cut_off, "down": self._down,
                "last_error": self.last_error}

    def close(self) -> None:
        self._client.close()

    # -- calls ----------------------------------------------------------------------------

    def infill(self, prefix: str, suffix: str = "", extra: str = "", *, drafts=(), sampler: SamplerConfig | None = None,
               on_preview: Callable[[Preview], None] | None = None, cancel=None, cache_key: str = "default",
               stop: Callable[[str], bool] | None = None, lookup: Any = None) -> Completion:
        return self.infill_batch([_Request(prefix, suffix, extra, tuple(drafts))], sampler=sampler,
                                 on_preview=on_preview, cancel=cancel, cache_key=cache_key, stop=stop)[0]

    def infill_batch(self, requests: list, *, sampler: SamplerConfig | None = None,
                     on_preview: Callable[[Preview], None] | None = None, cancel=None, cache_key: str = "default",
                     stop: Callable[[str], bool] | None = None) -> list[Completion]:
        if not requests:
            return []
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        unit = stop if isinstance(stop, Unit) else None
        body = wire.encode_infill(requests, sampler or self.sampler, cache_key, unit, on_preview is not None)
        completions = self._stream(body, cache_key, on_preview, cancel)
        if len(completions) != len(requests):
            raise self._failed(f"the engine at {self.url} answered {len(completions)} completions for "
                               f"{len(requests)} requests")
        if stop is not None and unit is None:  # a rule that cannot travel: applied to the text here
            for c in completions:
                c.text = _cut_at_stop(c.text, stop)
        return completions

    def score(self, prefix: str, suffix: str, texts: list[str], extra: str = "") -> list[float]:
        if not texts:
            return []
        scores = wire.decode_scores(self._call("POST", wire.SCORE, wire.encode_score(prefix, suffix, texts, extra)))
        if len(scores) != len(texts):
            raise self._failed(f"the engine at {self.url} answered {len(scores)} scores for {len(texts)} texts")
        return scores

    def forget(self, cache_key: str) -> None:
        """Best effort: an engine that is away drops the keys/values by itself in time."""
        try:
            self._call("POST", wire.FORGET, wire.encode_forget(cache_key), cache_key)
        except RemoteUnavailable as e:
            log.debug("forget: %s", e)

    # -- transport --------------------------------------------------------------------------

    def _headers(self, cache_key: str | None) -> dict:
        # identity: a compressed body would expand past the caps before they could see it
        out = {"x-request-id": secrets.token_hex(8), "content-type": "application/json",
               "accept-encoding": "identity"}
        if cache_key is not None:
            out["x-session-id"] = session_id(cache_key)
        return out

    def _admit(self) -> None:
        if not self.breaker.allow():
            self.fast_failures += 1
            raise RemoteUnavailable(f"the engine at {self.url} is unavailable (after {self.breaker.threshold} "
                                    f"failures in a row; next try in {self.breaker.retry_in():.1f} s): "
                                    f"{self.last_error}")

    def _call(self, method: str, path: str, body: dict | None, cache_key: str | None = None) -> Any:
        """One request with a JSON answer (at most wire.MAX_BODY_BYTES), within the timeout."""
        self._admit()
        stream = _Stream(None, time.monotonic() + self.timeout_s)
        try:
            with self._open_request(method, path, body, cache_key, stream) as r:
                data = wire.loads(wire.body(r.iter_raw()), "answer")
                stream.detach()
        except Exception as e:
            raise self._outcome(e, stream) from None
        finally:
            _WATCHDOG.unwatch(stream)
        self._ok()
        return data

    def _stream(self, body: dict, cache_key: str, on_preview, cancel) -> list[Completion]:
        """POST /infill and read its events until the result; see _outcome for what fails how."""
        self._admit()
        stream = _Stream(cancel, time.monotonic() + self.timeout_s)
        with self._lock:
            older, self._open[cache_key] = self._open.get(cache_key), stream
        if older is not None:
            older.cut("superseded")
        try:
            with self._open_request("POST", wire.INFILL, body, cache_key, stream) as r:
                result = _read(wire.lines(r.iter_raw()), stream, on_preview)
                if stream.reason is None:
                    stream.detach()  # read to its end: the connection goes back to the pool whole
        except Exception as e:
            raise self._outcome(e, stream) from None
        finally:
            _WATCHDOG.unwatch(stream)
            with self._lock:
                if self._open.get(cache_key) is stream:
                    del self._open[cache_key]
        self._ok()
        return result

    @contextmanager
    def _open_request(self, method: str, path: str, body: dict | None, cache_key: str | None, stream: _Stream):
        """The response to one request, its body unread, its socket watched by `stream`: an
        error status raises _Refused (with the head of its body)."""
        httpx = self._httpx
        # Until its headers arrive the socket is httpx's alone: each read then waits at most
        # what is left of the request's budget (the watchdog takes over from the headers on).
        wait = self.timeout_s
        budget_end = getattr(stream.cancel, "deadline", None)
        if isinstance(budget_end, (int, float)):
            wait = min(wait, max(0.001, budget_end - time.monotonic()))
        timeout = httpx.Timeout(wait, connect=min(self.connect_timeout_s, wait))
        _WATCHDOG.watch(stream)  # from the start: an engine that accepts and never answers is cut too
        with self._client.stream(method, path, content=None if body is None else wire.dumps(body),
                                 headers=self._headers(cache_key), timeout=timeout) as r:
            stream.attach(_socket_of(r))
            if r.headers.get("content-encoding", "identity").lower() != "identity":
                raise wire.WireError(f"the answer is compressed ({r.headers['content-encoding']}), "
                                     f"which this client does not accept")
            if r.status_code != 200:
                raise _Refused(r.status_code, _error_text(_head(r.iter_raw(), _ERROR_BODY_BYTES)))
            yield r

    def _outcome(self, e: Exception, stream: _Stream | None) -> Exception:
        """The exception a failed request raises, with the breaker and health told."""
        httpx = self._httpx
        reason = None if stream is None else stream.reason
        if reason is None and stream is not None and getattr(stream.cancel, "expired", _never)():
            reason = "budget"  # (a read timed out at the budget before the watchdog cut it)
        if isinstance(e, Cancelled) or reason in ("cancelled", "superseded"):
            self.breaker.released()
            return Cancelled()
        if reason == "budget":  # the request's own budget, not the engine's fault: drafts answer
            self.breaker.released()
            self.cut_off += 1
            log.info("the engine at %s was cut off at the request's time budget", self.url)
            return RemoteUnavailable(f"the engine at {self.url} did not answer within the request's time budget")
        if isinstance(e, wire.TooLarge):
            self.cut_off += 1
            log.warning("the engine at %s was cut off: %s", self.url, e)
            return self._failed(f"the engine at {self.url} was cut off: {e}")
        if reason == "timeout" or isinstance(e, httpx.TimeoutException):
            return self._failed(f"the engine at {self.url} did not answer within {self.timeout_s:g} s")
        if isinstance(e, _Refused):
            return self._refused(e)
        if isinstance(e, httpx.ConnectError):
            return self._failed(f"cannot connect to the engine at {self.url}: {e}")
        if isinstance(e, (httpx.HTTPError, OSError)):
            return self._failed(f"the connection to the engine at {self.url} broke: {e or type(e).__name__}")
        if isinstance(e, wire.WireError):
            return self._failed(f"the engine at {self.url} broke the protocol: {e}")
        log.exception("remote engine call")  # a bug here, not an outage there: still no answer
        return self._failed(f"the call to the engine at {self.url} failed: {type(e).__name__}: {e}")

    def _refused(self, e: _Refused) -> Exception:
        if e.status == 401:
            self.breaker.succeeded()  # it is up; the token is the problem
            why = (f"the engine at {self.url} rejected the token (401): "
                   f"{'check --token' if 'authorization' in self._client.headers else 'it needs --token'}")
            self._health(False, why)
            return TokenRejected(why)
        if e.status >= 500:
            return self._failed(f"the engine at {self.url} failed ({e.status}): {e.message}")
        self.breaker.succeeded()  # it answered: a request it refuses is no outage
        return RemoteUnavailable(f"the engine at {self.url} refused the request ({e.status}): {e.message}")

    def _failed(self, why: str) -> RemoteUnavailable:
        self.failures += 1
        self.last_error = why
        self.breaker.failed()
        self._health(False, why)
        return RemoteUnavailable(why)

    def _ok(self) -> None:
        self.breaker.succeeded()
        self._health(True, "")

    def _health(self, up: bool, why: str) -> None:
        with self._lock:
            changed = self._down == up
            self._down = not up
        if changed and self.on_health is not None:
            try:
                self.on_health(up, why)
            except Exception:  # a listener's bug must not fail the engine call
                log.exception("remote engine health listener")


def _read(lines, stream: _Stream, on_preview: Callable[[Preview], None] | None) -> list[Completion]:
    """The events of one infill stream up to its result (raises _Refused for an error event,
    RemoteProtocolError-like WireError when it ends first, Cancelled when cut for that)."""
    for event, data in wire.read_events(lines):
        if stream.reason is not None:
            break
        if event == "preview":
            if on_preview is not None:
                on_preview(wire.decode_preview(data))
        elif event == "result":
            result = wire.decode_result(data)
            stream.deadline = min(stream.deadline, time.monotonic() + _DRAIN_S)
            try:  # nothing follows but the end of the body (then the connection is reused)
                for _ in lines:
                    pass
            except Exception:  # more did, or the end lingered: the socket is cut, the result stands
                stream.cut("drained")
            return result
        elif event == "error":
            raise _Refused(*wire.decode_error(data))
    if stream.reason is not None:
        raise TimeoutError() if stream.reason in ("timeout", "budget") else Cancelled()
    raise wire.WireError("the stream ended before its result")


def _head(chunks, max_bytes: int) -> str:
    """The first `max_bytes` of a body (the rest is never read: the connection is closed)."""
    out = bytearray()
    for chunk in chunks:
        out += chunk[:max_bytes - len(out)]
        if len(out) >= max_bytes:
            break
    return out.decode("utf-8", "replace")


def _socket_of(response) -> socket.socket | None:
    network = response.extensions.get("network_stream")
    return None if network is None else network.get_extra_info("socket")


def _error_text(body: str) -> str:
    """The message of an error body ({"status", "message"}, or anything else, shortened)."""
    try:
        return wire.decode_error(wire.loads(body))[1]
    except (wire.WireError, TypeError):
        return body.strip()[:_ERROR_BODY_CHARS] or "no message"
