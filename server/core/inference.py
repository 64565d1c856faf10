"""The engine behind the server, on its own single-thread executor.

Inference owns the loaded Engine and the executor that every engine call runs on (never
pygls' thread pool, which also serves the stdin reader). One worker keeps engine calls
serial, so the engine's per-document key/value caches need no locks. `load` swaps in a
new model in the background and keeps the old one when loading fails (every failure,
typed or not, ends in `load_error`, one sentence naming the problem and what is served).
A load that a newer one supersedes before it finishes is dropped unused, and asking again
for the model that is loading joins that load. `state` says where loading stands
(loading / ready / failed); `starting` holds until the first load that counts settles, the
time in which a front may answer from drafts rather than queue behind the load.

`answer` runs the one completion pipeline (pipeline.py) with whatever engine is loaded;
the model's half of next edits is judge.py's. Both are re-exported here, where the fronts
have always found them.

`load(..., url=URL)` puts a RemoteEngine (remote.py) in the engine's place instead of loading
a model: "loading" is fetching its /info. When that fails, `load_error` says so, but the
RemoteEngine stays: later requests try again through its circuit breaker, and the first one
that gets an answer clears the error. `on_remote(up, why)`, when set, hears when a remote
engine's outage begins and ends (from the engine's thread).

It knows nothing of LSP messages; it sees Snapshots and returns Answers. It imports torch
only when a model loads (`Engine` and `DEFAULT_MODEL` are looked up on first use), so a front
starts serving drafts while torch is still being imported on the executor.
"""

from __future__ import annotations

import gc
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Callable

import redraft.engine
from redraft.engine import CancelFlag, EngineError

from .context import Snapshot
from .heap import HeapTrim
from .judge import EDIT_PREFIX_CHARS, EDIT_SUFFIX_CHARS, _window, can_judge_edits, judge_edits  # noqa: F401
from .pipeline import (LINE_STEPS, Answer, after_name, answer, answer_from_drafts, document_windows,  # noqa: F401
                       fill, model_view, run_engine, usable_drafts)
from .remote import TIMEOUT_S, RemoteEngine, RemoteUnavailable

if TYPE_CHECKING:
    from redraft.engine import Engine

log = logging.getLogger(__name__)


def __getattr__(name: str):
    """`Engine` and `DEFAULT_MODEL`, imported (with torch) on first use."""
    if name in ("Engine", "DEFAULT_MODEL"):
        return getattr(redraft.engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Inference:
    def __init__(self, engine_token: str | None = None, engine_timeout_s: float = TIMEOUT_S) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="redraft-infer")
        self._trim = HeapTrim()
        self.engine: Engine | RemoteEngine | None = None
        self.loaded: tuple | None = None  # (model, device, dtype, url) of `engine`
        self.engine_token, self.engine_timeout_s = engine_token, engine_timeout_s  # of remote engines
        self.on_remote: Callable[[bool, str], None] | None = None
        self._remote: RemoteEngine | None = None  # the newest remote engine made
        self.load_error: str | None = None
        self._asked = 0  # loads asked for (each one's number); the newest wins
        self._finished = 0  # the number of the newest load that has returned
        self._settled = False  # a load that counts has finished, well or not
        self._pending: tuple[tuple[str | None, str, str], Future] | None = None  # the newest load asked for

    def load(self, model: str | None, device: str, dtype: str, wait: Callable[[], None] | None = None,
             url: str | None = None) -> Future:
        """Load a model on the executor (queued before any later request); the future's result
        is an error message, or None on success (or when a newer load superseded it). Asking
        for the model that is loading now returns that load's future. `wait()`, when given,
        runs first on the executor (a front holding the load back while it answers something
        more urgent); a newer load asked for meanwhile supersedes this one before it begins.
        With a `url`, the engine is remote (model, device and dtype are the remote's business):
        the result is None even when it does not answer yet (`load_error` says so; the outage
        is told through `on_remote`, once)."""
        key = (model, device, dtype, url)
        if self._pending is not None and self._pending[0] == key and not self._pending[1].done():
            return self._pending[1]
        self._asked += 1
        future = self.executor.submit(self._load, key, self._asked, wait)
        self._pending = (key, future)
        return future

    @property
    def loading(self) -> bool:
        return self._finished < self._asked

    @property
    def starting(self) -> bool:
        """No load has settled yet: the process has had no model so far and one is on its way."""
        return not self._settled and self.loading

    @property
    def state(self) -> str:
        """Where loading stands: "loading" while a load runs or waits, then "failed"
        (`load_error` says why, and what is served) or "ready"; "none" before any load."""
        if self.loading:
            return "loading"
        if self.load_error is not None:
            return "failed"
        return "ready" if self.engine is not None else "none"

    def _load(self, key: tuple, number: int, wait: Callable[[], None] | None) -> str | None:
        try:
            if wait is not None:
                wait()
            return self._load_now(key, number)
        finally:
            self._finished = number

    def _load_now(self, key: tuple, number: int) -> str | None:
        model, device, dtype, url = key
        if number != self._asked:  # a newer load is queued behind this one
            return None
        if url is not None:
            return self._connect(key, number)
        if self.loaded == key and self.engine is not None:
            self._settled, self.load_error = True, None  # back to the model that is loaded
            return None
        from redraft.engine import DEFAULT_MODEL, Engine  # torch, the first time
        t0 = time.perf_counter()
        try:
            engine = Engine.load(model or DEFAULT_MODEL, device=device, dtype=dtype)
        except (EngineError, ValueError, OSError, RuntimeError) as e:  # typed: the message names the problem
            return self._failed(model, str(e), number)
        except Exception as e:  # a checkpoint no check foresaw: the server still keeps what it has
            return self._failed(model, f"{type(e).__name__}: {e}", number, trace=True)
        if number != self._asked:  # asked for another model meanwhile: no warm-up, not served
            log.info("loaded %s, not used: another model was asked for meanwhile", engine.name)
            return None
        gc.freeze()  # see _settle_heap: the warm-up allocates, and full collections walked torch
        _warm_up(engine)
        replaced = self.engine is not None
        self._drop_remote()
        self.engine, self.loaded, self.load_error, self._settled = engine, key, None, True
        _settle_heap(replaced)
        log.info("loaded %s on %s in %.0f ms", engine.name, device, (time.perf_counter() - t0) * 1000)
        return None

    def _failed(self, model: str | None, why: str, number: int, trace: bool = False) -> str | None:
        """Keep the engine there is; the error (for stats, the client's one message, the HTTP
        API's 503) says what failed and what is served meanwhile. Logged once, here (with the
        traceback of a failure no check foresaw). Nothing for a load superseded meanwhile."""
        from redraft.engine import DEFAULT_MODEL
        if number != self._asked:
            log.info("could not load model %r (%s); another model was asked for meanwhile", model, why)
            return None
        keeping = (f"still serving {self.engine.name!r}" if self.engine is not None
                   else "no model is loaded")
        self.load_error = f"could not load model {model or DEFAULT_MODEL!r}: {why}; {keeping}"
        self._settled = True
        log.error("%s", self.load_error, exc_info=trace)
        return self.load_error

    def _connect(self, key: tuple, number: int) -> None:
        """A RemoteEngine in the engine's place, its /info fetched; it stays even when it does
        not answer (later requests try again), with `load_error` saying so until one answers."""
        url = key[3]
        engine = self.engine
        if not (isinstance(engine, RemoteEngine) and engine.url == url.rstrip("/")):
            try:
                engine = RemoteEngine(url, token=self.engine_token, timeout_s=self.engine_timeout_s)
            except ValueError as e:  # not a URL: nothing to keep trying
                self.load_error, self._settled = f"cannot use the engine at {url!r}: {e}", True
                log.error("%s", self.load_error)
                return None
            engine.on_health = partial(self._remote_health, engine)
            self._remote = engine
        try:
            info = engine.connect()
            error = None
        except RemoteUnavailable as e:
            info, error = None, f"{e}; answering from drafts until it answers"
        if number != self._asked:  # another engine was asked for meanwhile
            return None
        if self.engine is not engine:
            self._drop_remote()
            self.engine = engine
        self.loaded, self.load_error, self._settled = key, error, True
        if error is None:
            log.info("using %s at %s", info.name, engine.url)
        else:
            log.warning("%s", error)
        return None

    def _remote_health(self, engine: RemoteEngine, up: bool, why: str) -> None:
        """A remote engine's outage began (up False) or ended; for the newest one, the front hears."""
        if engine is not self._remote:
            return
        if up and self.engine is engine:
            self.load_error = None
        if self.on_remote is not None:
            self.on_remote(up, why)

    def _drop_remote(self) -> None:
        if isinstance(self.engine, RemoteEngine):
            self.engine.close()
            if self._remote is self.engine:
                self._remote = None

    def forget(self, uri: str) -> None:
        """Drop a closed document's keys/values (on the executor, where the engine lives)."""
        self.executor.submit(lambda: self.engine is not None and self.engine.forget(uri))

    def answer(self, snap: Snapshot, flag: CancelFlag, on_preview: Callable[[str, int, int], None] | None = None
               ) -> Answer:
        """The completion job, on the executor, with whatever model is loaded now."""
        try:
            return answer(self.engine, snap, flag, on_preview)
        finally:
            self._trim.after_job()

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        if isinstance(self.engine, RemoteEngine):
            self.engine.close()
        gc.unfreeze()  # the heap back to the collector (see _settle_heap), for whatever runs on or exits


def _settle_heap(replaced: bool) -> None:
    """After a successful load: every object alive now (torch's modules and the model's among
    them, ~170k) goes into the collector's permanent generation (gc.freeze), so that a full
    collection no longer walks them. One took ~200 ms in a loaded server, a pause landing on
    whichever request happened to allocate then; frozen, ~2 ms. (Frozen before the warm-up
    too, whose token tables set collections off: it took ~0.16 s instead of ~0.37 s.)
    Frozen objects are still freed by reference counting; only cycles among them would stay,
    so when a model replaced another, the heap is unfrozen and collected once first."""
    if replaced:
        gc.unfreeze()
        gc.collect()
    gc.freeze()


WARM_UP_KEY = "redraft-warm-up"


def _warm_up(engine: Engine) -> None:
    """One small request right after loading, so the first user's request does not pay the
    one-time costs of the first calls (thread pools, kernel selection, token tables): ~190 ms
    on the 2-core development machine, measured in a fresh server process."""
    try:
        engine.infill("def add(a, b):\n    return a", "\n", drafts=["+ b"],
                      sampler=engine.sampler.with_(span=8), cache_key=WARM_UP_KEY)
    except (EngineError, ValueError, RuntimeError) as e:  # a model that cannot infill fails later, loudly
        log.warning("warm-up failed: %s", e)
    finally:
        engine.forget(WARM_UP_KEY)
