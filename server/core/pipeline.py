"""The one completion pipeline for every front end: `answer` (the LSP job, `redraft complete`,
`redraft eval infill`, the HTTP API): context windows, one `engine.infill` seeded with the
snapshot's drafts (cache_key = the document's URI so keys/values survive keystrokes),
post-processing. With drafts set to "only", or while no model is loaded, the best draft
answers alone; so does a remote engine that does not answer (RemoteUnavailable: the answer is
marked `fallback`), or nothing when drafts are off. `fill` is its engine call, which the HTTP
rewrite route shares.

A draft copied from elsewhere may name what does not exist at the cursor (review.py marks those
names `foreign`). The model revises it: the name most likely meant (the cursor function's
parameter in the same place) is seeded in its stead, or a mask token the model fills; its
answer is then held to the names in scope (`in_scope`). Without a model (or with one that cannot
take a mask: a remote engine) such a draft is shown only up to its first foreign name.

A request's time budget rides on its CancelFlag (`deadline`): a job whose budget ran out
before it began answers nothing without touching the engine (`expired`); one that runs out
mid-way stops at the next denoising step with the text committed so far, which is shown only
when its score clears the engine's bar and post-processing accepts it.

It knows nothing of LSP messages; it sees Snapshots and returns Answers.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from redraft.engine import CancelFlag, Cancelled, SamplerConfig, Stats

from . import context, names, postprocess, review, scope
from .context import Context, Draft, Mode, Snapshot
from .postprocess import Edit
from .remote import RemoteUnavailable

if TYPE_CHECKING:
    from redraft.engine import Completion, Engine

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
    fallback: bool = False  # the (remote) engine did not answer: drafts (or nothing) stood in
    expired: bool = False  # the request's time budget ran out before or while the engine ran


# Of a request's time budget, what is kept for the denoising step in progress when the engine's
# deadline passes and for post-processing: the engine is told to stop this much sooner, so that
# the answer is ready by the budget's end.
FINISH_S = 0.04


def engine_deadline(budget_end: float) -> float:
    """The engine's deadline (CancelFlag.deadline) for a request whose budget ends at `budget_end`."""
    return budget_end - FINISH_S


def out_of_time(flag: CancelFlag | None) -> bool:
    """The request's time budget (CancelFlag.deadline) has run out."""
    expired = getattr(flag, "expired", None)
    return expired is not None and expired()


def answer(engine: Engine | None, snap: Snapshot, flag: CancelFlag | None = None,
           on_preview: Callable[[str, int, int], None] | None = None, sampler: SamplerConfig | None = None
           ) -> Answer:
    """The completion pipeline: what a snapshot gets shown. Never raises Cancelled: a
    cancelled job returns no edit. `on_preview(text, step, masked)` sees the engine's text
    after every denoising step; `sampler` stands in for the engine's own settings in this
    call only (an HTTP request's temperature or seed)."""
    if (flag is not None and flag.is_set()) or snap.mode is Mode.NONE:
        return Answer(None, False)
    if out_of_time(flag):  # its budget ran out while it waited: it never reaches the engine
        return Answer(None, False, expired=True)
    mode = snap.config.drafts
    # Inside strings (docstrings, mostly prose) the model added nothing to its drafts on the
    # validation packages, at ~150 ms a request against ~2 (docs/evaluation.md): the drafts answer
    # alone, there and in comments.
    if mode == "only" or (mode == "seeded" and (snap.in_prose or not knows(engine, snap))) or \
            (engine is None and mode != "off"):
        return answer_from_drafts(snap)
    if engine is None:
        return Answer(None, False)
    try:
        found = run_engine(engine, snap, flag, on_preview, sampler)
        return replace(found, expired=True) if out_of_time(flag) else found
    except RemoteUnavailable as e:
        log.debug("%s: %s", snap.uri, e)
        if (flag is not None and flag.is_set()) or mode == "off":
            return Answer(None, False, fallback=True)
        return replace(answer_from_drafts(snap), fallback=True)


def knows(engine: Engine | None, snap: Snapshot) -> bool:
    """Whether the model was trained on the snapshot's language (a model that does not say
    knows them all). Where it was not, its judgement of drafts cost more than it gave: a
    Python-only model on held-out Go rejected drafts that were right (rest of line, drafts
    alone 0.350 / 0.439 exact / prefix, seeded 0.267 / 0.370), so drafts answer alone there."""
    if engine is None:
        return True
    try:
        languages = engine.info().languages
    except RemoteUnavailable:  # a remote engine that has not answered yet: run_engine says so
        return True
    return not languages or snap.syntax.name in languages


def answer_from_drafts(snap: Snapshot) -> Answer:
    """The best draft that survives post-processing, without a model; at a partly typed name
    that the draft (or no draft) leaves an unknown word, the known name alone (names.py)."""
    ctx = document_windows(snap)
    found = Answer(None, False)
    for d in snap.drafts:
        edit = postprocess.finish(snap, ctx, d.text)
        if edit is not None and d.foreign and review.mentions(edit.text, d.foreign):
            # names that do not exist here, and no model to write others: what comes before them
            edit = postprocess.finish(snap, ctx, review.before_foreign(edit.text, d.foreign))
        if edit is not None:
            found = Answer(edit, False, raw=d.text, source=d.source)
            break
    if snap.config.names and not snap.in_prose:
        rest = names.forced_name(snap, "" if found.edit is None else found.edit.text)
        edit = postprocess.finish(snap, ctx, rest) if rest else None
        if edit is not None:
            return Answer(edit, False, raw=rest, source="name")
    return found


def usable_drafts(snap: Snapshot, ctx: context.Context, mask: str | None = None) -> tuple[Draft, ...]:
    """The drafts as they would be shown (post-processed), those that would not be dropped: a
    draft that repeats the suffix or breaks the parse is no candidate worth a batch row. Where
    the suffix holds the characters a draft replaces (text other than closers follows the
    cursor), the draft would write them twice: it seeds the span only without them, when they
    end it. A draft's foreign names (review.py) become the names likely meant instead, where
    one is known, or a `mask` token each for the model to fill; without a mask (no model, or
    one that cannot take it) such a draft is left out."""
    out = []
    for d in snap.drafts:
        edit = postprocess.finish(snap, ctx, d.text)
        if edit is None:
            continue
        text = edit.text
        if d.foreign and review.mentions(text, d.foreign):
            if mask is None:
                continue
            # The name likely meant (a parameter in the same place) is seeded for the model to
            # judge; where none is known, a mask for the model to fill.
            guesses = {name: guess for name, guess in zip(d.foreign, d.guesses) if guess}
            text = review.masked(review.renamed(text, guesses), tuple(n for n in d.foreign if n not in guesses), mask)
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
    mask = mask_text(engine)
    drafts = usable_drafts(snap, check, mask) if snap.config.drafts == "seeded" else ()
    try:
        result = fill(engine, snap, model_view(snap, ctx), ctx.span, [d.text for d in drafts], flag, on_preview,
                      sampler, stop=postprocess.Unit.of(snap))
    except Cancelled:
        return Answer(None, False)
    st = result.stats
    source = drafts[st.draft].source if 0 <= st.draft < len(drafts) else "model"
    edit = None if result.abstained else in_scope(snap, drafts, mask, postprocess.finish(snap, check, result.text))
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
    sampler = _rest_budget(engine, snap, sampler)
    seeds = [d.text[len(rest):] for d in drafts if d.text.startswith(rest) and len(d.text) > len(rest)]
    stream = None if on_preview is None else (lambda text, step, masked: on_preview(rest + text, step, masked))
    if out_of_time(flag):  # no time left for the rest of the line: the name alone
        edit = postprocess.finish(snap, check, rest)
        return Answer(edit, True, spent_ms, rest, "name")
    try:
        result = fill(engine, snap, view, ctx.span, seeds, flag, stream, sampler, stop=postprocess.Unit.of(snap))
    except Cancelled:
        return Answer(None, False)
    st = result.stats
    texts = ([] if result.abstained else [rest + result.text]) + [rest]
    edit, raw = None, rest
    mask = mask_text(engine)
    for text in texts:
        edit = in_scope(snap, drafts, mask, postprocess.finish(snap, check, text))
        if edit is not None:
            raw = text
            break
    return Answer(edit, True, spent_ms + st.total_ms, raw, "name", st.draft_kept, stats=st, score=result.score)


def mask_text(engine: Engine | None) -> str | None:
    """The text of a local engine's mask token: a draft's foreign names are replaced by it, and
    the model fills them (a seeded row's masked positions are denoised like any other). None for
    an engine that cannot take one there (a remote engine, a model without a mask token): such
    drafts are then not offered."""
    tokenizer, cfg = getattr(engine, "tokenizer", None), getattr(engine, "model_config", None)
    mask_id = getattr(cfg, "mask_token_id", None)
    if tokenizer is None or mask_id is None or getattr(cfg, "is_causal", True):
        return None
    text = tokenizer.decode([mask_id])
    return text if text and tokenizer.encode(text) == [mask_id] else None


def in_scope(snap: Snapshot, drafts: tuple[Draft, ...], mask: str | None, edit: Edit | None) -> Edit | None:
    """`edit`, where a masked draft was seeded, as far as its names exist: the model may have
    filled a masked name with one that does not exist at the cursor either, or kept a foreign
    one. Its names must be in scope, bound by itself, or named by the drafts as they were
    offered; the answer stops short of the first that is not (review.before_foreign), or is not
    shown."""
    if edit is None or snap.scope is None or mask is None or not any(mask in d.text for d in drafts):
        return edit
    text = edit.text.split(mask, 1)[0]  # (a mask left unfilled: never shown)
    head = scope.head_text(snap.lines, snap.first, snap.scope, snap.row, snap.col)
    offered = frozenset(w for d in drafts for w in _WORD.findall(d.text.replace(mask, " ")))
    foreign = {name for d in drafts for name in d.foreign}
    unknown = scope.unknown(snap.scope, snap.syntax, head, text, offered - foreign)
    if not unknown and text == edit.text:
        return edit
    cut = review.before_foreign(text, unknown) if unknown else review.long_enough(text)
    return postprocess.finish(snap, document_windows(snap), cut) if cut.strip() else None


_WORD = re.compile(r"[A-Za-z_$][\w$]*")


def document_windows(snap: Snapshot) -> Context:
    """The windows post-processing judges a completion in, whoever wrote it (a draft, the copy
    baseline, the model): sized in characters (context.CHECK_TOKENS), wider than the model's
    token-sized ones, which may end inside the list a completion opens (`names = [`) and make it
    read as an error. Held-out: 86 of 94 right drafts survived the check in the model's windows,
    92 in these (docs/evaluation.md)."""
    wide = replace(snap.config, context_tokens=context.check_tokens(snap.config))
    return context.build(replace(snap, config=wide), _chars_as_tokens)


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
# (SamplerConfig.give_up_after). The shipped model alone on 100 Python line cursors of the
# validation packages, at min_score -1.5: 5 steps answered 18 (exact 0.08, correct prefix
# 0.08), 8 answered 27 (0.08 / 0.11), 12 answered 39 (0.08 / 0.14), 16 answered 40 (the same);
# at its own -2.5 and 12 steps, 69 (0.11 / 0.21); with drafts 0.25 / 0.425 against 0.24 / 0.394
# at 5 steps and -1.5. (The first models ran 8 steps or more only where they were wrong: 5
# suited them.) Blocks keep every step: the model writes them at about a token a step.
# Only for engines that abstain at all (a finite min_score, as the shipped model's): a
# checkpoint set to always answer is not made to give up by a budget chosen for another.
# A line out of those steps abstains. Answering what the model wrote of it so far
# (SamplerConfig.out_of_steps "prefix") raised the model alone's correct prefix on the
# validation packages (Python 0.207 -> 0.227) but what it added were mostly loops and guesses
# ("gagaga...", "None and k is not None and k is not None and"): with drafts, 8 of 400 Python
# answers changed, none right (docs/training-log.md).
LINE_STEPS = 12


# Denoising steps the rest of a line after a completed name may take: the name alone already
# answers, so a line the model is unsure of gives up sooner than a first fill (LINE_STEPS), whose
# 12 steps came on top of the first fill's 12 (~240 ms on a 2-core CPU). On the validation
# packages (rest of line, 100 cursors, seed 3; 6 Python and 3 TypeScript answers were names)
# 6 steps against 12: the same exact and correct prefix in both, Python edit similarity 0.6286 ->
# 0.6266 (one answer), forwards 2.06 -> 1.99 a request.
NAME_REST_STEPS = 6


def _rest_budget(engine: Engine, snap: Snapshot, sampler: SamplerConfig | None) -> SamplerConfig | None:
    """The sampler for `after_name`'s fill: NAME_REST_STEPS on a line, where `fill` would give
    LINE_STEPS; anything else as `fill` decides."""
    base = sampler or engine.sampler
    if snap.mode in (Mode.LINE, Mode.ARGS) and not base.give_up_after and math.isfinite(base.min_score):
        return base.with_(give_up_after=NAME_REST_STEPS)
    return sampler


def _chars_as_tokens(text: str) -> int:
    return int(len(text) / context.CHARS_PER_TOKEN) + 1
