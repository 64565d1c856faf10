"""Next edits where no rule applies: the line after the user's edit, written again by the model.

When the rules (nextedit.py) find nothing to follow, the model may still see what the edit
implies right below it: the first non-blank line after the edit is masked and filled with
the edit history ahead of the context (as completions see it), one line at most. What it
writes becomes a proposal only when it differs from the line, the model was confident
writing it (mean log-prob per token >= MIN_SCORE) and it clears the same judging bar as every
other proposal (inference.judge_edits, the `edit_margin` setting).

Off by default (the `nextEditRefill` setting; `redraft eval next-edit --refill` measures it):
on the release pairs it lowered precision (README). Runs on the executor; one engine call
of at most REFILL_TOKENS span tokens plus one judging pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from redraft.engine import CancelFlag, Cancelled, EngineError

from . import extra
from .document import Document, body
from .history import EditEvent
from .inference import EDIT_PREFIX_CHARS, EDIT_SUFFIX_CHARS, _window, can_judge_edits, judge_edits
from .nextedit import LineEdit, small_edit

REFILL_TOKENS = 24  # one line of code
REFILL_REACH = 2  # rows after the edit searched for a non-blank line
MIN_SCORE = -0.5  # mean log-prob per token of the written line (incl. its end): ~0.6 per token
CACHE_KEY = "redraft-refill"  # its context differs from any document's completions


def refill_row(doc: Document, event: EditEvent) -> int | None:
    """The row the model may rewrite after `event`: the first non-blank one after the rows
    the event touched, within REFILL_REACH rows."""
    for row in range(event.last_line + 1, min(event.last_line + 1 + REFILL_REACH, len(doc.lines))):
        if body(doc.lines[row]).strip():
            return row
    return None


def refill_edits(engine, lines: Sequence[str], row: int, events: list[EditEvent], margin: float,
                 flag: CancelFlag | None = None) -> list[LineEdit]:
    """The model's rewrite of `row` as a proposal, when it is confident and the rewrite
    clears the judging bar; else nothing. Raises nothing on a cancelled flag: returns []."""
    if not can_judge_edits(engine) or not 0 <= row < len(lines):
        return []
    original = body(lines[row])
    indent = original[:len(original) - len(original.lstrip())]
    prefix = _window("".join(lines[:row]), EDIT_PREFIX_CHARS, from_end=True) + indent
    suffix = "\n" + _window("".join(lines[row + 1:]), EDIT_SUFFIX_CHARS, from_end=False)
    sampler = engine.sampler.with_(span=REFILL_TOKENS, lengths=())
    try:
        c = engine.infill(prefix, suffix, extra.edit_history(events), sampler=sampler, cancel=flag,
                          cache_key=CACHE_KEY, stop=lambda text: "\n" in text)
    except (Cancelled, EngineError):  # a newer edit, or a remote engine away (it counts its failures)
        return []
    written = c.text.split("\n", 1)[0].rstrip()
    if c.abstained or c.score < MIN_SCORE or not written.strip() or indent + written == original:
        return []
    start, end, text = small_edit(original, indent + written)
    proposal = LineEdit(row, start, end, text, original, indent + written)
    return judge_edits(engine, lines, [proposal], events, margin, flag)
