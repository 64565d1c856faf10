"""Next edits that know when to stop: what the user did with the edits offered, and which
proposals are therefore not offered (again).

Two kinds are withheld:
  * moved past: an edit offered for one version of a document that the next change left
    untouched — the document changed elsewhere, the edit's line still reads as it did — counts
    once; one moved past PASS_LIMIT times for the same edit event is not offered again until a
    new event starts (a change the user makes elsewhere or after a pause). An offered edit the
    change applied (any of a set) means the user is taking them: nothing is counted then.
  * reversals: a proposal that would put back what one of the document's recent edit events
    changed on its line (`b = 1` back to `b = 2` right after the user wrote `b = 1`). A tool
    the user trusts does not propose undoing what they just did.
A proposal of a set that comes whole (every use of a renamed name) withholds the whole set: a
part of one would leave the code broken.

Size: all of it runs on the event loop. A change compares one line per edit offered (at most
a whole rename's, nextedit.MAX_RENAME_ROWS), a proposal is checked against the history's few
events (each read up to MAX_REVERSAL_CHARS), and PASSED_KEYS proposals at most are remembered.

Pure bookkeeping over text: knows nothing of LSP, requests or the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .document import body
from .history import EditEvent
from .nextedit import LineEdit, shared_ends

PASS_LIMIT = 2  # times an edit is moved past, for one edit event, before it is withheld
PASSED_KEYS = 512  # edits remembered for the newest event (a whole rename is at most 256 rows)
# An event that replaced or inserted more than this is no line's edit: a proposal (one line) never undoes it.
MAX_REVERSAL_CHARS = 2000


def edit_key(p: LineEdit) -> tuple[int, int, int, str]:
    """What identifies a proposal between versions: its range and its text."""
    return p.row, p.start, p.end, p.text


@dataclass
class Offers:
    """One document's next edits as the user met them: those last offered (and on which
    version), and how often each was moved past during the newest edit event."""

    offered: tuple[int, tuple[LineEdit, ...]] | None = None
    passed: dict[tuple[int, int, int, str], int] = field(default_factory=dict)

    def offer(self, version: int, proposals: Sequence[LineEdit]) -> None:
        """The client was given `proposals` for `version` (none: nothing to follow up)."""
        self.offered = (version, tuple(proposals)) if proposals else None

    def after_change(self, lines: Sequence[str], version: int, new_event: bool) -> int:
        """A change reached the document (now `lines`, at `version`): how many of the edits
        offered before it the user moved past. A new edit event forgets what was moved past."""
        moved = 0
        if self.offered is not None and self.offered[0] != version:
            offered, self.offered = self.offered[1], None
            rows = [body(lines[p.row]) if p.row < len(lines) else None for p in offered]
            if not any(now == p.proposed for now, p in zip(rows, offered)):  # none taken
                passed = [p for now, p in zip(rows, offered) if now == p.original]
                moved = len(passed)
                if not new_event:
                    self._remember(passed)
        if new_event:
            self.passed.clear()
        return moved

    def _remember(self, passed: list[LineEdit]) -> None:
        for p in passed:
            key = edit_key(p)
            self.passed[key] = self.passed.pop(key, 0) + 1  # newest last
            while len(self.passed) > PASSED_KEYS:
                del self.passed[next(iter(self.passed))]

    def withhold(self, proposals: Sequence[LineEdit], events: Sequence[EditEvent],
                 reversals: bool = True) -> tuple[list[LineEdit], int, int]:
        """(the proposals to offer, how many were withheld as moved past, how many as
        reversals of a recent event): see the module's notes. `reversals=False` skips that
        check (proposals already checked)."""
        dropped = {i for i, p in enumerate(proposals) if self.passed.get(edit_key(p), 0) >= PASS_LIMIT}
        reversed_ = {i for i, p in enumerate(proposals) if reversals and i not in dropped and reverses(p, events)}
        if any(proposals[i].whole for i in dropped | reversed_):
            dropped |= {i for i, p in enumerate(proposals) if p.whole and i not in reversed_}
        kept = [p for i, p in enumerate(proposals) if i not in dropped and i not in reversed_]
        return kept, len(dropped), len(reversed_)


def reverses(p: LineEdit, events: Sequence[EditEvent]) -> bool:
    """Whether proposal `p` would undo what one of `events` did on its line: that event
    replaced what `p` would put back with what `p` would remove (their shared ends aside:
    `= 2` -> `= 1` is `2` -> `1`; text backspaced a character at a time counts reversed too)."""
    removed, added = _core(p.original[p.start:p.end], p.text)
    if not (removed or added):
        return False
    for ev in events:
        if not ev.first_line <= p.row <= ev.last_line or _size(ev) > MAX_REVERSAL_CHARS:
            continue
        was = ev.removed
        for gone in {was, was[::-1]}:
            if _core(gone, ev.inserted) == (added, removed):
                return True
    return False


def _core(old: str, new: str) -> tuple[str, str]:
    """`old` and `new` without the characters they share at either end."""
    p, q = shared_ends(old, new)
    return old[p:len(old) - q], new[p:len(new) - q]


def _size(ev: EditEvent) -> int:
    """Characters the event removed and inserted, counted only up to the cap (an event may
    hold a large paste)."""
    total = 0
    for c in ev.changes:
        total += len(c.removed) + len(c.inserted)
        if total > MAX_REVERSAL_CHARS:
            break
    return total
