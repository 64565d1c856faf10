"""Per-document edit history, grouped into events the way Zed groups them.

Each applied change joins the newest event when it lands within MERGE_SECONDS of it and
within MERGE_LINES of the lines it touched; otherwise it opens a new event. At most
MAX_EVENTS are kept, oldest dropped first. Events are what the context builder may show
the model as "recent edits" and what next-edit search starts from.

It knows nothing of LSP, models or tree-sitter; time comes from the caller (monotonic
seconds) so tests need no sleeping.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .document import Change

MERGE_SECONDS = 1.0
MERGE_LINES = 8
MAX_EVENTS = 6


@dataclass
class EditEvent:
    first_line: int  # lines the event touched, in the document as it is after the event
    last_line: int
    started: float
    updated: float
    changes: list[Change] = field(default_factory=list)

    @property
    def inserted(self) -> str:
        return "".join(c.inserted for c in self.changes)

    @property
    def removed(self) -> str:
        return "".join(c.removed for c in self.changes)


class EditHistory:
    def __init__(self, max_events: int = MAX_EVENTS) -> None:
        self.events: deque[EditEvent] = deque(maxlen=max_events)

    def record(self, change: Change, now: float) -> bool:
        """Add a change; True when it opened a new event."""
        first = change.line
        last = change.line + max(change.new_lines, 1) - 1
        shift = change.new_lines - change.old_lines
        for ev in self.events:  # lines below the change moved
            if ev.first_line > change.line:
                ev.first_line = max(change.line, ev.first_line + shift)
                ev.last_line = max(ev.first_line, ev.last_line + shift)
        if self.events:
            ev = self.events[-1]
            near = first <= ev.last_line + MERGE_LINES and last >= ev.first_line - MERGE_LINES
            if near and now - ev.updated <= MERGE_SECONDS:
                ev.first_line, ev.last_line = min(ev.first_line, first), max(ev.last_line, last)
                ev.updated = now
                ev.changes.append(change)
                return False
        self.events.append(EditEvent(first, last, now, now, [change]))
        return True

    def recent(self) -> list[EditEvent]:
        return list(self.events)
