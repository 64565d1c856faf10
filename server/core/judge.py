"""The model's half of next-edit suggestions: `judge_edits` compares each line as it is with
the edits proposed for it (nextedit.py finds the candidates) and keeps those the model
prefers; it proposes nothing while a remote engine is away (no unjudged guesses), and
judges no further once the request's time budget is spent (CancelFlag.deadline). Runs on
the inference executor.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from redraft.engine import CancelFlag

from . import extra
from .history import EditEvent
from .nextedit import MAX_PROPOSALS, LineEdit
from .pipeline import out_of_time
from .remote import RemoteEngine, RemoteUnavailable

if TYPE_CHECKING:
    from redraft.engine import Engine

log = logging.getLogger(__name__)


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
        if out_of_time(flag):  # the budget is spent: what was judged stands, the rest is dropped
            return kept
        if gain(p) >= margin:
            kept.append(p)
    gains = []
    for p in whole[:MAX_PROPOSALS]:  # nearest first
        if flag is not None and flag.is_set():
            return []
        if out_of_time(flag):  # a whole set is one decision: unjudged, none of it
            return kept
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
