"""The engine behind the server, on its own single-thread executor.

Inference owns the loaded Engine and the executor that every engine call runs on (never
pygls' thread pool, which also serves the stdin reader). One worker keeps engine calls
serial, so the engine's per-document key/value caches need no locks. `load` swaps in a
new model in the background and keeps the old one when loading fails (every failure,
typed or not, ends in `load_error`, one sentence naming the problem and what is served).

One completion pipeline for every front end: `answer` (the LSP job, `redraft complete`,
`redraft eval infill`, the HTTP API): context windows, one `engine.infill` seeded with the
snapshot's drafts (cache_key = the document's URI so keys/values survive keystrokes),
post-processing. With drafts set to "only", or while no model is loaded, the best draft
answers alone. `fill` is its engine call, which the HTTP rewrite route shares; `judge_edits`
is the model's half of next-edit suggestions (nextedit.py finds the candidates).

It knows nothing of LSP messages; it sees Snapshots and returns Answers.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

from redraft.engine import DEFAULT_MODEL, CancelFlag, Cancelled, Completion, Engine, EngineError, SamplerConfig, Stats

from . import context, extra, postprocess
from .context import Context, Draft, Mode, Snapshot
from .history import EditEvent
from .nextedit import LineEdit
from .postprocess import Edit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """What the completion pipeline gives for one snapshot."""

    edit: Edit | None
    ran_model: bool
    engine_ms: float = 0.0
    raw: str = ""  # the engine's text before post-processing (for logs)
    source: str = ""  # what the edit came from: "model", or a draft's source (buffer, open, recent)
    kept: int = 0  # draft tokens the model kept
    abstained: bool = False  # the model found no candidate likely enough to show
    stats: Stats | None = None  # the engine's, when it ran
    score: float | None = None  # the engine's mean log-prob of what it chose


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
            self.load_error = None  # back to the model that is loaded
            return None
        t0 = time.perf_counter()
        try:
            engine = Engine.load(model or DEFAULT_MODEL, device=device, dtype=dtype)
        except (EngineError, ValueError, OSError, RuntimeError) as e:  # typed: the message names the problem
            return self._failed(model, str(e))
        except Exception as e:  # a checkpoint no check foresaw: the server still keeps what it has
            log.exception("loading %r", model or DEFAULT_MODEL)
            return self._failed(model, f"{type(e).__name__}: {e}")
        _warm_up(engine)
        self.engine, self.loaded, self.load_error = engine, key, None
        log.info("loaded %s on %s in %.0f ms", engine.name, device, (time.perf_counter() - t0) * 1000)
        return None

    def _failed(self, model: str | None, why: str) -> str:
        """Keep the engine there is; the error (for stats, the client's one message, the HTTP
        API's 503) says what failed and what is served meanwhile."""
        keeping = (f"still serving {self.engine.name!r}" if self.engine is not None
                   else "no model is loaded")
        self.load_error = f"could not load model {model or DEFAULT_MODEL!r}: {why}; {keeping}"
        log.error("%s", self.load_error)
        return self.load_error

    def forget(self, uri: str) -> None:
        """Drop a closed document's keys/values (on the executor, where the engine lives)."""
        self.executor.submit(lambda: self.engine is not None and self.engine.forget(uri))

    def answer(self, snap: Snapshot, flag: CancelFlag, on_preview: Callable[[str, int, int], None] | None = None
               ) -> Answer:
        """The completion job, on the executor, with whatever model is loaded now."""
        return answer(self.engine, snap, flag, on_preview)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


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


def answer(engine: Engine | None, snap: Snapshot, flag: CancelFlag | None = None,
           on_preview: Callable[[str, int, int], None] | None = None, sampler: SamplerConfig | None = None
           ) -> Answer:
    """The completion pipeline: what a snapshot gets shown. Never raises Cancelled: a
    cancelled job returns no edit. `on_preview(text, step, masked)` sees the engine's text
    after every denoising step; `sampler` stands in for the engine's own settings in this
    call only (an HTTP request's temperature or seed)."""
    if (flag is not None and flag.is_set()) or snap.mode is Mode.NONE:
        return Answer(None, False)
    mode = snap.config.drafts
    if mode == "only" or (engine is None and mode != "off"):
        return answer_from_drafts(snap)
    if engine is None:
        return Answer(None, False)
    return run_engine(engine, snap, flag, on_preview, sampler)


def answer_from_drafts(snap: Snapshot) -> Answer:
    """The best draft that survives post-processing, without a model."""
    ctx = context.build(snap, _chars_as_tokens)
    for d in snap.drafts:
        edit = postprocess.finish(snap, ctx, d.text)
        if edit is not None:
            return Answer(edit, False, raw=d.text, source=d.source)
    return Answer(None, False)


def usable_drafts(snap: Snapshot, ctx: context.Context) -> tuple[Draft, ...]:
    """The drafts as they would be shown (post-processed), those that would not be dropped: a
    draft that repeats the suffix or breaks the parse is no candidate worth a batch row."""
    out = []
    for d in snap.drafts:
        edit = postprocess.finish(snap, ctx, d.text)
        if edit is not None and edit.replace == 0:
            out.append(replace(d, text=edit.text))
    return tuple(out)


def run_engine(engine: Engine, snap: Snapshot, flag: CancelFlag | None = None,
               on_preview: Callable[[str, int, int], None] | None = None,
               sampler: SamplerConfig | None = None) -> Answer:
    """The model's half of `answer`: windows, drafts (per the settings), the engine call
    stopped at the end of the unit, post-processing."""
    span_max = max(snap.config.line_tokens, snap.config.block_tokens)
    ctx = context.build(snap, engine.count_tokens, engine.context_budget(span_max))
    drafts = usable_drafts(snap, ctx) if snap.config.drafts == "seeded" else ()
    try:
        result = fill(engine, snap, ctx, ctx.span, [d.text for d in drafts], flag, on_preview, sampler,
                      stop=partial(postprocess.unit_ended, snap))
    except Cancelled:
        return Answer(None, False)
    st = result.stats
    source = drafts[st.draft].source if 0 <= st.draft < len(drafts) else "model"
    if result.abstained:
        return Answer(None, True, st.total_ms, source=source, abstained=True, stats=st, score=result.score)
    edit = postprocess.finish(snap, ctx, result.text)
    return Answer(edit, True, st.total_ms, result.text, source, st.draft_kept, stats=st, score=result.score)


def fill(engine: Engine, snap: Snapshot, ctx: Context, span: int, drafts: list[str], flag: CancelFlag | None,
         on_preview: Callable[[str, int, int], None] | None = None, sampler: SamplerConfig | None = None,
         stop: Callable[[str], bool] | None = None) -> Completion:
    """One engine call on a snapshot's windows: `span` tokens seeded with `drafts`, with the
    sampler settings the server's config asks for. Raises Cancelled."""
    sampler = (sampler or engine.sampler).with_(span=span, lengths=())
    if snap.config.threshold is not None:
        sampler = sampler.with_(threshold=snap.config.threshold)
    stream = None if on_preview is None else (lambda d: on_preview(d.text, d.step, d.masked))
    return engine.infill(ctx.prefix, ctx.suffix, ctx.extra, drafts=drafts, sampler=sampler, cancel=flag,
                         cache_key=snap.uri, on_preview=stream, stop=stop,
                         lookup=snap.lookup if snap.config.cache else None)


def _chars_as_tokens(text: str) -> int:
    return int(len(text) / context.CHARS_PER_TOKEN) + 1


EDIT_PREFIX_CHARS, EDIT_SUFFIX_CHARS = 800, 300  # windows around a proposal's line (scoring only)


def can_judge_edits(engine: Engine | None) -> bool:
    """Whether the engine can compare a line as it is with a proposed edit of it."""
    return engine is not None and engine.info().scores_edits


def judge_edits(engine: Engine | None, lines: tuple[str, ...], proposals: list[LineEdit], events: list[EditEvent],
                margin: float, flag: CancelFlag | None = None) -> list[LineEdit]:
    """The model's half of next-edit suggestions: the proposals it prefers to the line as it
    is, by at least `margin` in mean log-prob ("no edit" wins every tie), with the document's
    edit events shown ahead. An engine that cannot judge leaves the rules' proposals as they
    are. Runs on the executor."""
    if not can_judge_edits(engine):
        return list(proposals)
    history = extra.edit_history(events)
    kept = []
    for p in proposals:
        if flag is not None and flag.is_set():
            return []
        prefix = _window("".join(lines[:p.row]), EDIT_PREFIX_CHARS, from_end=True)
        suffix = _window("".join(lines[p.row + 1:]), EDIT_SUFFIX_CHARS, from_end=False)
        as_is, edited = engine.score(prefix, "\n" + suffix, [p.original, p.proposed], extra=history)
        if edited >= as_is + margin:
            kept.append(p)
    return kept


def _window(text: str, chars: int, from_end: bool) -> str:
    """At most `chars` characters of `text`, cut at a line start."""
    if len(text) <= chars:
        return text
    if from_end:
        cut = text[-chars:]
        return cut[cut.find("\n") + 1:]
    cut = text[:chars]
    return cut[:cut.rfind("\n") + 1]
