"""The engine behind the server, on its own single-thread executor.

Inference owns the loaded Engine and the executor that every engine call runs on (never
pygls' thread pool, which also serves the stdin reader). One worker keeps engine calls
serial, so the engine's per-document key/value caches need no locks. `load` swaps in a
new model in the background and keeps the old one when loading fails; `complete` is the
job the scheduler runs: context windows, one `engine.infill` (cache_key = the document's
URI so keys/values survive keystrokes), post-processing.

It knows nothing of LSP messages; it sees Snapshots and returns Outcomes.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from redraft.engine import DEFAULT_MODEL, CancelFlag, Cancelled, Engine, EngineError

from . import context, postprocess
from .context import Mode, Snapshot
from .postprocess import Edit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    edit: Edit | None
    ran_model: bool
    engine_ms: float = 0.0
    raw: str = ""  # the engine's text before post-processing (for logs)


class Inference:
    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="redraft-infer")
        self.engine: Engine | None = None
        self.loaded: tuple[str | None, str, str] | None = None  # (model, device, dtype) of `engine`
        self.load_error: str | None = None

    def load(self, model: str | None, device: str, dtype: str) -> Future:
        """Load a model on the executor (queued before any later request); the future's result
        is an error message, or None on success."""
        return self.executor.submit(self._load, model, device, dtype)

    def _load(self, model: str | None, device: str, dtype: str) -> str | None:
        key = (model, device, dtype)
        if self.loaded == key and self.engine is not None:
            return None
        t0 = time.perf_counter()
        try:
            engine = Engine.load(model or DEFAULT_MODEL, device=device, dtype=dtype)
        except (EngineError, ValueError, OSError, RuntimeError) as e:
            self.load_error = f"could not load model {model or DEFAULT_MODEL!r}: {e}"
            log.error("%s", self.load_error)
            return self.load_error
        self.engine, self.loaded, self.load_error = engine, key, None
        log.info("loaded %s on %s in %.0f ms", engine.name, device, (time.perf_counter() - t0) * 1000)
        return None

    def forget(self, uri: str) -> None:
        """Drop a closed document's keys/values (on the executor, where the engine lives)."""
        self.executor.submit(lambda: self.engine is not None and self.engine.forget(uri))

    def complete(self, snap: Snapshot, flag: CancelFlag) -> Outcome:
        """Runs on the executor. Never raises Cancelled: a cancelled job returns no edit."""
        engine = self.engine
        if flag.is_set() or engine is None or snap.mode is Mode.NONE:
            return Outcome(None, False)
        span_max = max(snap.config.line_tokens, snap.config.block_tokens)
        ctx = context.build(snap, engine.count_tokens, engine.context_budget(span_max))
        sampler = engine.config.sampler.with_(span=ctx.span, lengths=())
        if snap.config.threshold is not None:
            sampler = sampler.with_(threshold=snap.config.threshold)
        try:
            result = engine.infill(ctx.prefix, ctx.suffix, sampler=sampler, cancel=flag, cache_key=snap.uri)
        except Cancelled:
            return Outcome(None, False)
        edit = postprocess.finish(snap, ctx, result.text)
        return Outcome(edit, True, result.stats.total_ms, result.text)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
