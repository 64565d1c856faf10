"""The copy baseline of `redraft eval infill` and the benchmarks: what copying gives alone.

Two copy rules, no model, no other documents:
- the plain copy (core/linecopy.py), what a 20-line copy server does: the longest suffix of
  the cursor line's text before the cursor (40 down to 3 characters) that occurs elsewhere in
  the document, its nearest occurrence above the cursor, else its first below; the answer is
  the rest of that occurrence's line, unchanged, when it is not empty;
- the index copy (`copy_draft`): the longest earlier match of all the text before the cursor
  (drafts.DraftIndex, ties to the row nearest the cursor), continued and post-processed the
  way the server shows a draft (inference.answer_from_drafts).
On a line the plain copy answers first and the index copy where it has nothing; in a block
the index copy (whole lines) comes first. So the baseline answers wherever a plain copy would,
with the plain copy's own text on a line: every ratio over it is a ratio over at least a
plain copy, scored on the same samples with the same metrics.
"""

from __future__ import annotations

import time
from dataclasses import replace

from redraft.engine import Stats

from ..core.context import Draft, Mode, Snapshot
from ..core.document import split_lines
from ..core.drafts import DraftIndex
from ..core.inference import Answer, answer_from_drafts
from ..core.linecopy import plain_copy
from ..core.postprocess import Edit

SOURCE = "copy"
PLAIN = "plain copy"


def copy_draft(index: DraftIndex, before: str, lines: int) -> str | None:
    """The continuation (`lines` lines) of the longest match of `before` in `index` other than
    at the end of `before` itself, or None when nothing matches."""
    row = before.count("\n")
    col = len(before) - (before.rfind("\n") + 1)
    found = index.find(before, exclude=(row, col), limit=1)
    if not found:
        return None
    return index.continuation(found[0].row, found[0].col, lines)


def copy_answer(snap: Snapshot, before: str, after: str = "") -> Answer:
    """The baseline's answer at a snapshot whose document reads `before` up to the cursor and
    `after` from it. Filing the index is not timed (a server keeps its index up to date as
    edits arrive); the lookups and post-processing are."""
    index = DraftIndex(split_lines(before))
    t0 = time.perf_counter()
    block = snap.mode is Mode.BLOCK
    got = _index_copy(snap, index, before) if block else Answer(None, False)
    if got.edit is None:
        plain = plain_copy(before, after)
        got = Answer(Edit(plain, 0), False, raw=plain, source=PLAIN) if plain else Answer(None, False)
    if got.edit is None and not block:
        got = _index_copy(snap, index, before)
    return replace(got, stats=Stats(total_ms=(time.perf_counter() - t0) * 1000))


def _index_copy(snap: Snapshot, index: DraftIndex, before: str) -> Answer:
    lines = snap.config.max_lines if snap.mode is Mode.BLOCK else 1
    text = copy_draft(index, before, lines)
    if text is None:
        return Answer(None, False)
    # names off: the baseline is the copy and nothing else, whatever the settings
    return answer_from_drafts(replace(snap, drafts=(Draft(text, SOURCE),), config=replace(snap.config, names=False)))


def ratio(mode: float | None, copy: float | None) -> float | None:
    """mode / copy, None when either is missing or the copy scored 0 (no finite ratio)."""
    if mode is None or not copy:
        return None
    return round(mode / copy, 3)
