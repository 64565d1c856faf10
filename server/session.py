"""The Session: every piece of the server's mutable state, and the one keystroke path.

It owns the open documents (text, tree, edit history, the suggestion last answered for
type-through), the settings, the counters, the scheduler and the inference back end.
Edit notifications only mutate it and return. `complete` takes a frozen snapshot on the
event loop, answers from the suggestion on screen when the user typed a prefix of it
(no model run), and otherwise hands the snapshot to the scheduler, which runs the engine
on its own executor.

It speaks in rows, character indices and UTF-16 columns, not in LSP message types: the
LSP layer (lsp.py) converts at the edge.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial

from . import settings
from .context import Mode, Snapshot, take_snapshot
from .document import Document, utf16_len
from .history import EditHistory
from .inference import Inference
from .languages import syntax_for
from .postprocess import Edit
from .scheduler import Scheduler
from .stats import Counters

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Suggestion:
    """What the client was last given for a document: the basis of type-through."""

    row: int
    left: str  # the cursor line left of the cursor, when it was answered
    right: str
    nlines: int
    edit: Edit


@dataclass(frozen=True)
class Proposal:
    """An answer in LSP terms: replace (row, start)..(row, end) (UTF-16 columns) with `text`."""

    row: int
    start: int
    end: int
    text: str


@dataclass
class DocState:
    doc: Document
    history: EditHistory = field(default_factory=EditHistory)
    shown: Suggestion | None = None


class Session:
    def __init__(self, config: settings.ServerConfig, inference: Inference, clock=time.monotonic):
        self.config = config
        self.inference = inference
        self.clock = clock
        self.docs: dict[str, DocState] = {}
        self.stats = Counters()
        self.scheduler = Scheduler(inference.executor)

    # -- settings ------------------------------------------------------------------------

    def configure(self, options) -> tuple[list[str], bool]:
        """Apply client settings; returns the problems found (those fields keep their values)
        and whether the model, device or dtype changed (the caller then reloads)."""
        new, problems = settings.parse(options, self.config)
        old, self.config = self.config, new
        return problems, (new.model, new.device, new.dtype) != (old.model, old.device, old.dtype)

    def load_model(self) -> Future:
        c = self.config
        return self.inference.load(c.model, c.device, c.dtype)

    # -- documents -----------------------------------------------------------------------

    def open(self, uri: str, text: str, version: int, language_id: str) -> None:
        doc = Document(uri, text, version, language_id, syntax_for(language_id, uri))
        self.docs[uri] = DocState(doc)

    def change(self, uri: str, version: int, changes) -> None:
        st = self.docs.get(uri)
        if st is None:
            log.warning("change for %s, which is not open: ignored", uri)
            return
        if version <= st.doc.version:
            # Applied anyway: the edits are the truth the client shows; only the number is off.
            log.warning("%s: version %d after %d (out of order)", uri, version, st.doc.version)
        now = self.clock()
        for change in st.doc.apply(changes, version):
            st.history.record(change, now)

    def close(self, uri: str) -> None:
        if self.docs.pop(uri, None) is not None:
            self.scheduler.supersede(uri)
            self.inference.forget(uri)

    # -- completion ----------------------------------------------------------------------

    async def complete(self, uri: str, line: int, character: int) -> Proposal | None:
        self.stats.requests += 1
        t0 = time.perf_counter()
        st = self.docs.get(uri)
        if st is None:
            log.info("inline completion for %s, which is not open", uri)
            return self._empty()
        pos = st.doc.char_position(line, character)
        if pos is None:
            log.info("%s: position %d:%d is outside the document", uri, line, character)
            return self._empty()
        if not (self.config.enabled(st.doc.language_id) and self.config.enabled(st.doc.syntax.name)):
            return self._empty()
        snap = take_snapshot(st.doc, *pos, self.config)
        edit = self._type_through(st, snap)
        if edit is not None:
            self.scheduler.supersede(uri)  # a newer request: whatever ran for the old text is stale
            self.stats.type_through += 1
        elif snap.mode is Mode.NONE:
            self.scheduler.supersede(uri)
            log.debug("%s: nothing to complete (%s)", uri, snap.reason)
            return self._empty()
        else:
            try:
                done, outcome = await self.scheduler.run(uri, partial(self.inference.complete, snap))
            except asyncio.CancelledError:
                self.stats.cancelled += 1
                raise
            if not done:
                self.stats.cancelled += 1
                return None
            if outcome.ran_model:
                self.stats.model_runs += 1
            edit = outcome.edit
        self.stats.latencies.append((time.perf_counter() - t0) * 1000)
        if edit is None:
            return self._empty()
        st = self.docs.get(uri)
        if st is not None:  # the document may have closed while the engine ran
            st.shown = Suggestion(snap.row, snap.left, snap.right, len(snap.lines), edit)
        self.stats.answered += 1
        start = utf16_len(snap.left)
        return Proposal(snap.row, start, start + utf16_len(snap.right[:edit.replace]), edit.text)

    def _empty(self) -> None:
        self.stats.empty += 1
        return None

    @staticmethod
    def _type_through(st: DocState, snap: Snapshot) -> Edit | None:
        """The rest of the suggestion on screen when the user typed a prefix of it."""
        s = st.shown
        if s is None or s.row != snap.row or s.nlines != len(snap.lines):
            return None
        left, right = snap.left, snap.right
        if right != s.right or not left.startswith(s.left):
            return None
        typed = left[len(s.left):]
        text = s.edit.text
        if "\n" in typed or not text.startswith(typed) or len(typed) >= len(text):
            return None
        return Edit(text[len(typed):], s.edit.replace)

    # -- feedback ------------------------------------------------------------------------

    def shown(self) -> None:
        self.stats.shown += 1

    def accepted(self, uri: str | None = None) -> None:
        self.stats.accepted += 1
        if uri in self.docs:
            self.docs[uri].shown = None  # accepted text is in the buffer now

    def partially_accepted(self) -> None:
        self.stats.partially_accepted += 1

    def snapshot_stats(self) -> dict:
        self.stats.peak_in_flight = self.scheduler.peak_in_flight
        d = self.stats.as_dict()
        d["documents"] = len(self.docs)
        d["model"] = None if self.inference.engine is None else self.inference.engine.name
        d["model_error"] = self.inference.load_error
        return d
