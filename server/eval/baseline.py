"""The plain-copy baseline of `redraft eval infill`: what the code before the cursor gives alone.

The answer continues the longest earlier match of the text before the cursor in the same
document: that text is indexed on its own (drafts.DraftIndex, so no later text can match),
searched for itself (ties go to the row nearest the cursor), and the top match's
continuation is shown the way the server shows a draft (inference.answer_from_drafts: the
unit-end cut and the post-processing of the snapshot's kind). No model, no ranking among
sources, no other documents; when the top match's continuation does not survive
post-processing the baseline abstains rather than trying the next match.

It is what a user would get from a copy rule without redraft's model, scored on the same
samples with the same metrics, so the mode's row can be read as a ratio over it.
"""

from __future__ import annotations

import time
from dataclasses import replace

from redraft.engine import Stats

from ..core.context import Draft, Mode, Snapshot
from ..core.document import split_lines
from ..core.drafts import DraftIndex
from ..core.inference import Answer, answer_from_drafts

SOURCE = "copy"


def copy_draft(index: DraftIndex, before: str, lines: int) -> str | None:
    """The continuation (`lines` lines) of the longest match of `before` in `index` other than
    at the end of `before` itself, or None when nothing matches."""
    row = before.count("\n")
    col = len(before) - (before.rfind("\n") + 1)
    found = index.find(before, exclude=(row, col), limit=1)
    if not found:
        return None
    return index.continuation(found[0].row, found[0].col, lines)


def copy_answer(snap: Snapshot, before: str) -> Answer:
    """The baseline's answer at a snapshot whose document reads `before` up to the cursor.
    Filing the index is not timed (a server keeps its index up to date as edits arrive);
    the lookup and post-processing are."""
    index = DraftIndex(split_lines(before))
    t0 = time.perf_counter()
    lines = snap.config.max_lines if snap.mode is Mode.BLOCK else 1
    text = copy_draft(index, before, lines)
    got = Answer(None, False)
    if text is not None:  # names off: the baseline is the copy and nothing else, whatever the settings
        got = answer_from_drafts(replace(snap, drafts=(Draft(text, SOURCE),), config=replace(snap.config, names=False)))
    return replace(got, stats=Stats(total_ms=(time.perf_counter() - t0) * 1000))


def ratio(mode: float | None, copy: float | None) -> float | None:
    """mode / copy, None when either is missing or the copy scored 0 (no finite ratio)."""
    if mode is None or not copy:
        return None
    return round(mode / copy, 3)
