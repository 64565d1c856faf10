"""One open document's state in the session: its text and tree, edit history, draft index
(filed as the text changes, within the message's budget), the suggestion last answered for
it (the basis of type-through), the next edits computed and offered for it, and the timers
and jobs that work on it in the background.

The Session (session.py) owns a DocState per open document and drives it; nothing here
speaks LSP or runs the engine.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..core import drafts as draft_index
from ..core import nextedit
from ..core.context import Snapshot
from ..core.document import Change, Document
from ..core.history import EditHistory
from ..core.offers import Offers
from ..core.postprocess import Edit


@dataclass(frozen=True)
class Suggestion:
    """What the client was last given for a document: the basis of type-through."""

    row: int
    left: str  # the cursor line left of the cursor, when it was answered
    right: str
    nlines: int
    edit: Edit


@dataclass
class DocState:
    doc: Document
    index: draft_index.DraftIndex | None  # None while the document is over drafts.MAX_INDEX_BYTES
    history: EditHistory = field(default_factory=EditHistory)
    shown: Suggestion | None = None
    expect: tuple[int, str, str] | None = None  # after an accept: (row, left, right) the buffer will show
    event_before: nextedit.Before | None = None  # the text around the newest edit event as it began
    edits: tuple[int, list] | None = None  # (version, next-edit proposals) computed for that version
    edits_job: tuple[int, asyncio.Future] | None = None  # (version, its computation) while it runs
    offers: Offers = field(default_factory=Offers)  # next edits given to the client, and moved past
    edit_timer: asyncio.TimerHandle | None = None  # the debounced next-edit computation
    prefetch: tuple[int, int, int, asyncio.Future] | None = None  # (version, row, col, job) computed ahead
    file_budget: int = 0  # characters the draft index may still file now, for the message being applied
    filing: asyncio.Handle | None = None  # the next slice of pending draft-index filing

    def on_change(self, change: Change) -> None:
        if self.index is None:
            return
        if self.doc.size_bytes > draft_index.MAX_INDEX_BYTES:
            self.index = None  # rebuilt once the document is small enough again
            self.doc.note_limit("index", f"over {draft_index.MAX_INDEX_BYTES >> 20} MB: no drafts from it")
            return
        filed = self.index.filed_chars
        self.index.replace_lines(change.line, change.old_lines,
                                 self.doc.lines[change.line:change.line + change.new_lines],
                                 file_chars=max(self.file_budget, 0))
        self.file_budget -= self.index.filed_chars - filed


def type_through(st: DocState, snap: Snapshot) -> Edit | None:
    """The rest of the suggestion on screen when the user typed a prefix of it."""
    s = st.shown
    if s is None or s.row != snap.row or s.nlines != snap.nlines:
        return None
    left, right = snap.left, snap.right
    if right != s.right or not left.startswith(s.left):
        return None
    typed = left[len(s.left):]
    text = s.edit.text
    if "\n" in typed or not text.startswith(typed) or len(typed) >= len(text):
        return None
    return Edit(text[len(typed):], s.edit.replace)


def rows_touched(changes, nlines: int) -> tuple[int, int]:
    """First and last row a message's content changes touch (all rows for a whole-text one),
    in the document as it is before them."""
    first, last = nlines, -1
    for rng, _ in changes:
        if rng is None:
            return 0, nlines - 1
        first = min(first, max(0, min(rng[0], nlines - 1)))
        last = max(last, max(0, min(rng[2], nlines - 1)))
    return (first, last) if last >= 0 else (0, -1)
