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

One completion pipeline for every front end: `answer` (the LSP job, `redraft complete`,
`redraft eval infill`, the HTTP API): context windows, one `engine.infill` seeded with the
snapshot's drafts (cache_key = the document's URI so keys/values survive keystrokes),
post-processing. With drafts set to "only", or while no model is loaded, the best draft
answers alone; so does a remote engine that does not answer (RemoteUnavailable: the answer is
marked `fallback`), or nothing when drafts are off. `fill` is its engine call, which the HTTP rewrite route shares; `judge_edits`
is the model's half of next-edit suggestions (nextedit.py finds the candidates); it proposes
nothing while a remote engine is away (no unjudged guesses).

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
import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Callable

import redraft.engine
from redraft.engine import CancelFlag, Cancelled, EngineError, SamplerConfig, Stats

from . import context, extra, names, postprocess
from .context import Context, Draft, Mode, Snapshot
from .heap import HeapTrim
from .history import EditEvent
from .nextedit import MAX_PROPOSALS, LineEdit
from .postprocess import Edit
from .remote import TIMEOUT_S, RemoteEngine, RemoteUnavailable

if TYPE_CHECKING:
    from redraft.engine import Completion, Engine

log = logging.getLogger(__name__)


def __getattr__(name: str):
    """`Engine` and `DEFAULT_MODEL`, imported (with torch) on first use."""
    if name in ("Engine", "DEFAULT_MODEL"):
        return getattr(redraft.engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    fallback: bool = False  # the (remote) engine did not answer: drafts (or nothing) stood in


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
    # Inside strings (docstrings, mostly prose) the model added nothing to its drafts on the
    # validation packages, at ~150 ms a request against ~2 (docs/evaluation.md): the drafts answer alone.
    if mode == "only" or (mode == "seeded" and snap.in_string) or (engine is None and mode != "off"):
        return answer_from_drafts(snap)
    if engine is None:
        return Answer(None, False)
    try:
        return run_engine(engine, snap, flag, on_preview, sampler)
    except RemoteUnavailable as e:
        log.debug("%s: %s", snap.uri, e)
        if (flag is not None and flag.is_set()) or mode == "off":
            return Answer(None, False, fallback=True)
        return replace(answer_from_drafts(snap), fallback=True)


def answer_from_drafts(snap: Snapshot) -> Answer:
    """The best draft that survives post-processing, without a model; at a partly typed name
    that the draft (or no draft) leaves an unknown word, the known name alone (names.py)."""
    ctx = document_windows(snap)
    found = Answer(None, False)
    for d in snap.drafts:
        edit = postprocess.finish(snap, ctx, d.text)
        if edit is not None:
            found = Answer(edit, False, raw=d.text, source=d.source)
            break
    if snap.config.names and not snap.in_string:
        rest = names.forced_name(snap, "" if found.edit is None else found.edit.text)
        edit = postprocess.finish(snap, ctx, rest) if rest else None
        if edit is not None:
            return Answer(edit, False, raw=rest, source="name")
    return found


def usable_drafts(snap: Snapshot, ctx: context.Context) -> tuple[Draft, ...]:
    """The drafts as they would be shown (post-processed), those that would not be dropped: a
    draft that repeats the suffix or breaks the parse is no candidate worth a batch row. Where
    the suffix holds the characters a draft replaces (text other than closers follows the
    cursor), the draft would write them twice: it seeds the span only without them, when they
    end it."""
    out = []
    for d in snap.drafts:
        edit = postprocess.finish(snap, ctx, d.text)
        if edit is None:
            continue
        text = edit.text
        if edit.replace and not snap.closers_only:  # then the model does not see those closers
            closed = snap.right[:edit.replace]
            if not text.endswith(closed) or not text[:-len(closed)].strip():
                continue
            text = text[:-len(closed)]
        out.append(replace(d, text=text))
    return tuple(out)


def run_engine(engine: Engine, snap: Snapshot, flag: CancelFlag | None = None,
               on_preview: Callable[[str, int, int], None] | None = None,
               sampler: SamplerConfig | None = None) -> Answer:
    """The model's half of `answer`: windows, drafts (per the settings), the engine call
    stopped at the end of the unit, post-processing."""
    span_max = max(snap.config.line_tokens, snap.config.block_tokens)
    ctx = context.build(snap, engine.count_tokens, engine.context_budget(span_max))
    check = document_windows(snap)
    drafts = usable_drafts(snap, check) if snap.config.drafts == "seeded" else ()
    try:
        result = fill(engine, snap, model_view(snap, ctx), ctx.span, [d.text for d in drafts], flag, on_preview,
                      sampler, stop=postprocess.Unit.of(snap))
    except Cancelled:
        return Answer(None, False)
    st = result.stats
    source = drafts[st.draft].source if 0 <= st.draft < len(drafts) else "model"
    edit = None if result.abstained else postprocess.finish(snap, check, result.text)
    if snap.config.names:
        rest = names.forced_name(snap, "" if edit is None else edit.text)
        if rest:
            return after_name(engine, snap, ctx, check, rest, drafts, st.total_ms, flag, on_preview, sampler)
    if result.abstained:
        return Answer(None, True, st.total_ms, source=source, abstained=True, stats=st, score=result.score)
    return Answer(edit, True, st.total_ms, result.text, source, st.draft_kept, stats=st, score=result.score)


def after_name(engine: Engine, snap: Snapshot, ctx: Context, check: Context, rest: str, drafts: tuple[Draft, ...],
               spent_ms: float, flag: CancelFlag | None = None,
               on_preview: Callable[[str, int, int], None] | None = None,
               sampler: SamplerConfig | None = None) -> Answer:
    """The answer once the word at the cursor is completed by `rest` (names.forced_name): the
    model writes the rest of the line after the name, seeded with the drafts that begin with
    it. Where it abstains, or its line does not survive post-processing, the name alone is
    shown (a name the code uses is evidence enough). Source "name"."""
    view = model_view(snap, ctx)
    view = replace(view, prefix=view.prefix + rest)
    seeds = [d.text[len(rest):] for d in drafts if d.text.startswith(rest) and len(d.text) > len(rest)]
    stream = None if on_preview is None else (lambda text, step, masked: on_preview(rest + text, step, masked))
    try:
        result = fill(engine, snap, view, ctx.span, seeds, flag, stream, sampler, stop=postprocess.Unit.of(snap))
    except Cancelled:
        return Answer(None, False)
    st = result.stats
    texts = ([] if result.abstained else [rest + result.text]) + [rest]
    edit, raw = None, rest
    for text in texts:
        edit = postprocess.finish(snap, check, text)
        if edit is not None:
            raw = text
            break
    return Answer(edit, True, spent_ms + st.total_ms, raw, "name", st.draft_kept, stats=st, score=result.score)


def document_windows(snap: Snapshot) -> Context:
    """The windows post-processing judges a completion in, whoever wrote it (a draft, the copy
    baseline, the model): sized in characters from the settings' budget, wider than the model's
    token-sized ones, which may end inside the list a completion opens (`names = [`) and make it
    read as an error. Held-out: 86 of 94 right drafts survived the check in the model's windows,
    92 in these (docs/evaluation.md)."""
    return context.build(snap, _chars_as_tokens)


def model_view(snap: Snapshot, ctx: Context) -> Context:
    """The windows as the model sees them: auto-closed brackets and quotes right of the cursor
    left out (Snapshot.closers_only), so the span is the whole rest of the line, and the suffix
    stays the same while they change. Post-processing keeps the document's own windows."""
    if snap.closers_only and ctx.suffix.startswith(snap.right):
        return replace(ctx, suffix=ctx.suffix[len(snap.right):])
    return ctx


def fill(engine: Engine, snap: Snapshot, ctx: Context, span: int, drafts: list[str], flag: CancelFlag | None,
         on_preview: Callable[[str, int, int], None] | None = None, sampler: SamplerConfig | None = None,
         stop: Callable[[str], bool] | None = None) -> Completion:
    """One engine call on a snapshot's windows: `span` tokens seeded with `drafts`, with the
    sampler settings the server's config asks for. Raises Cancelled."""
    sampler = (sampler or engine.sampler).with_(span=span, lengths=())
    if snap.mode in (Mode.LINE, Mode.ARGS) and not sampler.give_up_after and math.isfinite(sampler.min_score):
        sampler = sampler.with_(give_up_after=LINE_STEPS)
    if snap.config.threshold is not None:
        sampler = sampler.with_(threshold=snap.config.threshold)
    stream = None if on_preview is None else (lambda d: on_preview(d.text, d.step, d.masked))
    return engine.infill(ctx.prefix, ctx.suffix, ctx.extra, drafts=drafts, sampler=sampler, cancel=flag,
                         cache_key=snap.uri, on_preview=stream, stop=stop,
                         lookup=snap.lookup if snap.config.cache else None)


# Denoising steps a line (or argument list) may take before the request abstains
# (SamplerConfig.give_up_after). On 400 line cursors of the validation and held-out packages
# none of the 13 that ran 8 steps or more was right, and they took up to 1.3 s; on the
# validation ones a budget of 8, 6 or 5 steps left every answer as it was, 4 changed one and
# 3 lost a right one. Blocks keep every step: the model writes them at about a token a step.
# Only for engines that abstain at all (a finite min_score, as the shipped model's): a
# checkpoint set to always answer is not made to give up by a budget chosen for another.
LINE_STEPS = 5


def _chars_as_tokens(text: str) -> int:
    return int(len(text) / context.CHARS_PER_TOKEN) + 1


# Windows around a proposal's line (scoring only). Each judged place costs one pass over them:
# 800 / 300 characters judged held-out renames alike at twice the cost (p50 182 vs 84 ms).
EDIT_PREFIX_CHARS, EDIT_SUFFIX_CHARS = 300, 100


def can_judge_edits(engine: Engine | RemoteEngine | None) -> bool:
    """Whether the engine can compare a line as it is with a proposed edit of it. A remote
    engine that has not answered yet may: `judge_edits` asks it (and keeps nothing meanwhile)."""
    if engine is None:
        return False
    try:
        return engine.info().scores_edits
    except RemoteUnavailable:
        return True


def judge_edits(engine: Engine | None, lines: tuple[str, ...], proposals: list[LineEdit], events: list[EditEvent],
                margin: float, flag: CancelFlag | None = None) -> list[LineEdit]:
    """The model's half of next-edit suggestions: the proposals it prefers to the line as it
    is, by at least `margin` in mean log-prob ("no edit" wins every tie), with the document's
    edit events shown ahead. Proposals marked `whole` (a rename's uses) are one decision: kept
    all together when their nearest MAX_PROPOSALS pass on average, else none. An engine that
    cannot judge leaves the rules' proposals as they are; a remote engine that does not answer
    keeps none (an unjudged proposal is a guess). Runs on the executor."""
    if not can_judge_edits(engine):
        return list(proposals)
    try:
        return _judge(engine, lines, proposals, events, margin, flag)
    except RemoteUnavailable as e:
        log.debug("next edits not judged: %s", e)
        return []


def _judge(engine: Engine | RemoteEngine, lines: tuple[str, ...], proposals: list[LineEdit],
           events: list[EditEvent], margin: float, flag: CancelFlag | None) -> list[LineEdit]:
    history = extra.edit_history(events)

    def gain(p: LineEdit) -> float:
        prefix = _window("".join(lines[:p.row]), EDIT_PREFIX_CHARS, from_end=True)
        suffix = _window("".join(lines[p.row + 1:]), EDIT_SUFFIX_CHARS, from_end=False)
        as_is, edited = engine.score(prefix, "\n" + suffix, [p.original, p.proposed], extra=history)
        return edited - as_is

    kept, whole = [], [p for p in proposals if p.whole]
    for p in [p for p in proposals if not p.whole]:
        if flag is not None and flag.is_set():
            return []
        if gain(p) >= margin:
            kept.append(p)
    gains = []
    for p in whole[:MAX_PROPOSALS]:  # nearest first
        if flag is not None and flag.is_set():
            return []
        gains.append(gain(p))
    if gains and sum(gains) / len(gains) >= margin:
        kept.extend(whole)
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
