"""The model's half of next-edit suggestions: `judge_edits` compares each line as it is with
the edits proposed for it (nextedit.py finds the candidates) and keeps those the model
prefers; it proposes nothing while a remote engine is away (no unjudged guesses), and
judges no further once the request's time budget is spent (CancelFlag.deadline). Runs on
the inference executor.
"""

from __future__ import annotations

import logging
import math
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
    keeps none (an unjudged proposal is a guess). Runs on the executor, in one go; the language
    server runs the same Judging one place per executor job instead (session.py)."""
    if not can_judge_edits(engine):
        return list(proposals)
    judging = Judging(engine, lines, proposals, events, margin)
    while (p := judging.pending()) is not None:
        if flag is not None and flag.is_set():
            return []
        if out_of_time(flag):  # the budget is spent: what was judged stands
            break
        judging.record(judging.score(p))
    return judging.result()


class Judging:
    """One judgement of a set of proposals, a place at a time: `pending()` is the next one to
    score (None once decided), `score(p)` runs the model on it (the executor's part), `record`
    keeps its gain, `result()` what stands, at any point: the single places judged and kept,
    and a whole set only once judged in full."""

    def __init__(self, engine: Engine | RemoteEngine, lines: tuple[str, ...], proposals: list[LineEdit],
                 events: list[EditEvent], margin: float):
        self.engine, self.lines, self.margin = engine, lines, margin
        self.history = extra.edit_history(events)
        self.single = [p for p in proposals if not p.whole]
        self.whole = [p for p in proposals if p.whole]
        self.queue = self.single + self.whole[:MAX_PROPOSALS]  # a whole set: its nearest first
        self.gains: list[float] = []
        self.away = False  # a remote engine did not answer: nothing is kept

    def pending(self) -> LineEdit | None:
        return None if self.away or len(self.gains) == len(self.queue) else self.queue[len(self.gains)]

    def score(self, p: LineEdit, flag: CancelFlag | None = None) -> float:
        """The proposal's gain over the line as it is (NaN: a remote engine that did not answer)."""
        prefix = _window("".join(self.lines[:p.row]), EDIT_PREFIX_CHARS, from_end=True)
        suffix = _window("".join(self.lines[p.row + 1:]), EDIT_SUFFIX_CHARS, from_end=False)
        try:
            as_is, edited = self.engine.score(prefix, "\n" + suffix, [p.original, p.proposed], extra=self.history)
        except RemoteUnavailable as e:
            log.debug("next edits not judged: %s", e)
            return math.nan
        return edited - as_is

    def record(self, gain: float) -> None:
        self.away = self.away or math.isnan(gain)
        self.gains.append(gain)

    def result(self) -> list[LineEdit]:
        if self.away:
            return []
        n = len(self.single)
        kept = [p for p, g in zip(self.single, self.gains[:n]) if g >= self.margin]
        whole = self.gains[n:]
        if whole and len(whole) == len(self.queue) - n and sum(whole) / len(whole) >= self.margin:
            kept.extend(self.whole)
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
