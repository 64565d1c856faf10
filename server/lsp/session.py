"""The Session: every piece of the server's mutable state, and the one keystroke path.

It owns the open documents (a DocState each, docstate.py: text, tree, edit history, draft
index, the suggestion last answered for type-through), the settings, the counters, the
scheduler and the inference back end. Edit notifications only mutate it and return.
`inline_completion` takes a frozen snapshot on the event loop (with the extra context and
the drafts looked up there, where the documents are current), answers from the suggestion on
screen when the user typed a prefix of it (no model run), and otherwise hands the snapshot to
the scheduler, which runs the engine on its own executor. While the process's first model
loads (that load holds the executor), the drafts answer at once on the event loop instead of
queueing behind it. After an accept, the next completion is computed ahead of time at the end
of the accepted text.

Size: nothing here grows with the document. An edit costs the lines it touched: the draft
index files at most drafts.FILE_NOW_CHARS of them per message and the rest in later slices
of drafts.FILE_SLICE_CHARS, taken while no engine job runs (cancelled on close); documents
over drafts.MAX_INDEX_BYTES keep no index. What a later next-edit search needs of the text
as it was is a window around the edit (nextedit.Before), and the model judges proposals on
a window around them (nextedit.Rows). Snapshots, drafts, extra context and next edits are
bounded in their own modules. Every limit crossed is logged once per document.

It speaks in rows, character indices and UTF-16 columns, not in LSP message types: the
LSP layer (lsp.py) converts at the edge.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Callable

from ..core import drafts as draft_index
from ..core import extra, nextedit, settings
from ..core.context import Copies, Mode, Snapshot, copies, take_snapshot, window_tokens
from ..core.document import Document, body, utf16_len
from ..core.inference import (EDIT_PREFIX_CHARS, EDIT_SUFFIX_CHARS, Answer, Inference, answer_from_drafts,
                              can_judge_edits)
from ..core.judge import Judging
from ..core.languages import syntax_for
from ..core.refill import refill_edits, refill_row
from ..core.remote import RemoteEngine
from ..core.workspace import Workspace, uri_path
from .docstate import DocState, Suggestion, rows_touched, type_through
from .scheduler import Scheduler
from .stats import Counters

MAX_ROOTS = 32  # workspace folders indexed for drafts; each is listed in the background

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InlineAnswer:
    """An inline completion in LSP terms: replace (row, start)..(row, end) (UTF-16 columns)
    with `text`."""

    row: int
    start: int
    end: int
    text: str


PREVIEW = "redraft/preview"  # the engine's text after each denoising step, for clients that ask
EDIT_DEBOUNCE = 0.3  # seconds of quiet after an edit before next edits are computed ahead
# Pending draft-index filing runs in slices (drafts.FILE_SLICE_CHARS, ~3 ms) this many seconds
# apart, so the loop reads messages meanwhile, and only while no engine job runs: a slice holds
# the GIL, which the engine's thread needs between its tensor operations. While the user
# types, the index catches up in the pauses.
FILE_PAUSE = 0.002
FILE_WAIT = 0.02  # seconds before looking again while the engine runs
RECENT_REMOVED = 4  # recent edits whose removed text is searched for drafts
RECENT_MAX_CHARS = 4 << 10  # of each, at most (its head): indexing it costs ~0.5 ms per request


def _head(text: str, chars: int) -> str:
    """The first `chars` characters of `text`, cut after a line end when it is longer."""
    if len(text) <= chars:
        return text
    cut = text.rfind("\n", 0, chars)
    return text[:cut + 1] if cut >= 0 else text[:chars]


class Session:
    def __init__(self, config: settings.ServerConfig, inference: Inference, clock=time.monotonic):
        self.config = config
        self.inference = inference
        self.clock = clock
        self.docs: dict[str, DocState] = {}
        self.stats = Counters()
        self.scheduler = Scheduler(inference.executor)
        self.definitions: extra.DefinitionCache = {}
        # publish(method, params) sends a notification from any thread (set by the LSP layer)
        self.publish = None
        self.heard = 0.0  # time.monotonic() of the newest client message (set by the LSP layer)
        self.workspace: Workspace | None = None  # the client's root folders, indexed for drafts
        self.excluded: set[str] = set()  # open documents redraft never reads (the exclude settings)
        self.trusted = config  # the command line's settings: what the editor's may not loosen (trust.py)
        self.refused: set[str] = set()  # refusals the client was told of (each once)
        self.settings_refused = 0  # settings refused, every time one came

    # -- settings ------------------------------------------------------------------------

    def configure(self, options) -> tuple[list[str], bool]:
        """Apply client settings; returns the problems found (those fields keep their values)
        and whether the model, device, dtype or engine URL changed (the caller then reloads).
        A setting refused for trust (settings.parse_client) is told once, however often it comes."""
        new, problems, refusals = settings.parse_client(options, self.config, self.trusted)
        self.settings_refused += len(refusals)
        problems += [why for why in refusals if why not in self.refused]  # (logged where they are shown)
        if len(self.refused) > 256:  # a bound, whatever a client sends; at worst one is told again
            self.refused.clear()
        self.refused.update(refusals)
        old, self.config = self.config, new
        if new != old:  # a suggestion on screen was made under the old settings: none is typed through
            for st in self.docs.values():
                st.shown = None
        for uri in [u for u in self.docs if new.excludes(u)]:  # excluded now: forgotten, text and all
            self.close(uri)
            self.excluded.add(uri)
        return problems, ((new.model, new.device, new.dtype, new.engine_url)
                          != (old.model, old.device, old.dtype, old.engine_url))

    def set_roots(self, roots: list[str]) -> None:
        """The client's workspace folders (file: URIs or paths): their source files are indexed
        for drafts in the background, unless `workspace_files` is off."""
        if not self.config.workspace_files or self.workspace is not None:
            return
        paths = _folders(roots)
        if paths:
            self.workspace = Workspace(paths, skip=lambda path: self.config.excludes(str(path)))

    def change_roots(self, added: list[str], removed: list[str]) -> None:
        """Folders added to or removed from the client's workspace (one editor, several projects,
        one server): the index starts again over the new set; documents stay open."""
        gone = {p.resolve() for p in _folders(removed)}
        now = [r for r in (self.workspace.roots if self.workspace is not None else []) if r not in gone]
        now += [p for p in _folders(added) if p.resolve() not in now]
        if self.workspace is not None:
            self.workspace.close()
            self.workspace = None
        self.set_roots([str(r) for r in now])

    def load_model(self, wait: Callable[[], None] | None = None) -> Future:
        c = self.config
        return self.inference.load(c.model, c.device, c.dtype, wait, url=c.engine_url)

    # -- documents -----------------------------------------------------------------------

    def open(self, uri: str, text: str, version: int, language_id: str) -> None:
        if self.config.excludes(uri):  # never read: kept out of everything the session holds
            self.close(uri)
            self.excluded.add(uri)
            return
        old = self.docs.get(uri)
        if old is not None and old.filing is not None:
            old.filing.cancel()
        doc = Document(uri, text, version, language_id, syntax_for(language_id, uri))
        st = self.docs[uri] = DocState(doc, None)
        self._reindex(uri, st)
        if self.workspace is not None and self.config.workspace_files:
            self.workspace.prepare(uri)  # index the files nearest it, in the background

    def change(self, uri: str, version: int, changes) -> None:
        st = self.docs.get(uri)
        if st is None:
            if uri not in self.excluded:
                log.warning("change for %s, which is not open: ignored", uri)
            return
        if version <= st.doc.version:
            # Applied anyway: the edits are the truth the client shows; only the number is off.
            log.warning("%s: version %d after %d (out of order)", uri, version, st.doc.version)
        now = self.clock()
        before = nextedit.Before.around(st.doc.lines, *rows_touched(changes, len(st.doc.lines)))
        st.file_budget = draft_index.FILE_NOW_CHARS
        new_event = False
        for change in st.doc.apply(changes, version, on_change=st.on_change):
            if st.history.record(change, now):
                st.event_before, new_event = before, True
        self.stats.edits_moved_past += st.offers.after_change(st.doc.lines, st.doc.version, new_event)
        self._reindex(uri, st)
        # Edits judged for the text before this change are stale: free the engine for the
        # completion that follows (a judged set reads up to 8 places, ~100 ms each on a CPU).
        self.scheduler.supersede(uri + "#edits")
        if st.expect is not None:
            self._prefetch_if_accepted(uri, st)
        self._debounce_edits(uri, st)

    def _reindex(self, uri: str, st: DocState) -> None:
        """(Re)build the draft index when the document fits, and file what is pending in slices
        (FILE_PAUSE apart, none while the engine runs), so that no message waits behind a
        large paste."""
        if st.index is None and st.doc.size_bytes <= draft_index.MAX_INDEX_BYTES:
            st.index = draft_index.DraftIndex(st.doc.lines, file_chars=draft_index.FILE_NOW_CHARS)
        elif st.index is None:
            st.doc.note_limit("index", f"over {draft_index.MAX_INDEX_BYTES >> 20} MB: no drafts from it")
        if st.index is None or not st.index.pending or st.filing is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no server around it (a script or a test): file it all now
            while st.index.file_pending():
                pass
            return

        def file_slice() -> None:
            st.filing = None
            if self.docs.get(uri) is not st or st.index is None:
                return
            if self.scheduler.running:  # the engine is at work: Python on this thread would slow it
                st.filing = loop.call_later(FILE_WAIT, file_slice)
            elif st.index.file_pending():
                st.filing = loop.call_later(FILE_PAUSE, file_slice)
        st.filing = loop.call_later(FILE_PAUSE, file_slice)

    def close(self, uri: str) -> None:
        self.excluded.discard(uri)
        st = self.docs.pop(uri, None)
        if st is not None:
            if st.filing is not None:
                st.filing.cancel()
            if st.edit_timer is not None:
                st.edit_timer.cancel()
            self.scheduler.supersede(uri)
            self.scheduler.supersede(uri + "#edits")
            self.inference.forget(uri)
            self.definitions.pop(uri, None)
            if self.workspace is not None:  # its text on disk may be newer than the workspace's index
                self.workspace.reload(uri)

    # -- completion ----------------------------------------------------------------------

    async def inline_completion(self, uri: str, line: int, character: int) -> InlineAnswer | None:
        self.stats.requests += 1
        t0 = time.perf_counter()
        deadline = time.monotonic() + self.config.max_time / 1000  # the budget counts from arrival
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
        pending = st.prefetch
        if pending is not None and pending[:3] == (st.doc.version, *pos):
            await asyncio.shield(pending[3])  # computed ahead after an accept: its answer is on screen next
        snap = take_snapshot(st.doc, *pos, self.config)
        edit = type_through(st, snap)
        if edit is not None:
            self.scheduler.supersede(uri)  # a newer request: whatever ran for the old text is stale
            self.stats.type_through += 1
        elif snap.mode is Mode.NONE:
            self.scheduler.supersede(uri)
            log.debug("%s: nothing to complete (%s)", uri, snap.reason)
            return self._empty()
        else:
            done, answer = await self._run(st, snap, deadline)
            if not done:
                return None
            edit = answer.edit
            self.stats.engine_latencies.append((time.perf_counter() - t0) * 1000)
        self.stats.latencies.append((time.perf_counter() - t0) * 1000)
        if edit is None:
            return self._empty()
        self.stats.answered += 1
        start = utf16_len(snap.left)
        return InlineAnswer(snap.row, start, start + utf16_len(snap.right[:edit.replace]), edit.text)

    async def _run(self, st: DocState, snap: Snapshot, deadline: float):
        """Run the engine for a snapshot (latest wins) within its budget; remember what it
        answered for type-through."""
        uri = snap.uri
        if self.inference.starting and self.config.drafts != "off":
            return True, self._answer_while_loading(st, snap)
        snap = self._enrich(st, snap)
        on_preview = self._streamer(snap) if self.config.stream_previews and self.publish is not None else None
        try:
            done, answer = await self.scheduler.run(uri, partial(self.inference.answer, snap, on_preview=on_preview),
                                                    deadline)
        except asyncio.CancelledError:
            self.stats.cancelled += 1
            raise
        if not done:
            self.stats.cancelled += 1
            return False, None
        if answer is None:  # its budget ran out before its job answered
            answer = Answer(None, False, expired=True)
        if answer.expired:
            self.stats.budget_expired += 1
        if answer.ran_model:
            self.stats.model_runs += 1
        if answer.fallback:
            self.stats.remote_fallbacks += 1
        self.stats.count_source(answer)
        if answer.edit is not None and self.docs.get(uri) is st:  # it may have closed meanwhile
            st.shown = Suggestion(snap.row, snap.left, snap.right, snap.nlines, answer.edit)
        return True, answer

    def _answer_while_loading(self, st: DocState, snap: Snapshot):
        """The best draft, now, on the event loop (a few milliseconds): the executor is busy
        with the first model load, which takes seconds."""
        self.scheduler.supersede(snap.uri)
        found = self._copies(st, snap)
        answer = answer_from_drafts(replace(snap, drafts=found.drafts(self.config.max_drafts)))
        self.stats.count_source(answer)
        if answer.edit is not None:
            self.stats.answered_loading += 1
            st.shown = Suggestion(snap.row, snap.left, snap.right, snap.nlines, answer.edit)
        return answer

    def _context_limit(self) -> int | None:
        """The loaded engine's context budget for the longest span (as pipeline.run_engine asks
        it), None before one is loaded."""
        engine = self.inference.engine
        if engine is None or (isinstance(engine, RemoteEngine) and not engine.known):  # never a call from here
            return None
        return engine.context_budget(max(self.config.line_tokens, self.config.block_tokens))

    def _enrich(self, st: DocState, snap: Snapshot) -> Snapshot:
        """The snapshot with extra context and drafts, looked up while the documents are current."""
        cfg = self.config
        more = ""
        if cfg.extra_context:
            others = [o.doc for u, o in self.docs.items() if u != snap.uri]
            # chars, for the window the engine will take (build() then checks tokens): built for
            # the setting alone, a model's smaller window dropped the whole segment as too long
            budget = int(window_tokens(cfg, self._context_limit()) * cfg.extra_share * 3)
            more = extra.build(st.doc, others, st.history.recent(), snap.row, snap.col, budget, self.definitions)
        if cfg.drafts == "off" and not cfg.cache:
            return replace(snap, extra=more)
        found = self._copies(st, snap)
        return replace(snap, extra=more, drafts=() if cfg.drafts == "off" else found.drafts(cfg.max_drafts),
                       lookup=found.lookup() if cfg.cache else None)

    def _copies(self, st: DocState, snap: Snapshot) -> Copies:
        others = [(uri, o.index) for uri, o in self.docs.items() if uri != snap.uri and o.index is not None]
        recent = []  # text the user took out (its head, when that was a lot: each is indexed per request)
        for ev in st.history.recent()[-RECENT_REMOVED:]:
            text = _head(ev.removed, RECENT_MAX_CHARS)
            if len(text.strip()) >= draft_index.MIN_CHARS:
                recent.append((text, ev.first_line))
        near = []
        if self.workspace is not None and self.config.workspace_files:
            near = self.workspace.nearest(snap.uri, exclude={p for p in map(uri_path, self.docs) if p is not None})
        return copies(st.doc, st.index, snap.row, snap.col, snap.mode, self.config.max_lines, others, recent, near)

    def _streamer(self, snap: Snapshot):
        publish, uri, version = self.publish, snap.uri, snap.version
        position = {"line": snap.row, "character": utf16_len(snap.left)}

        def on_preview(text: str, step: int, masked: int) -> None:
            publish(PREVIEW, {"uri": uri, "version": version, "position": position,
                                      "step": step, "text": text, "masked": masked})
        return on_preview

    def _empty(self) -> None:
        self.stats.empty += 1
        return None

    # -- next edits ----------------------------------------------------------------------

    async def next_edits(self, uri: str, version: int | None = None) -> tuple[int, list]:
        """(version, proposals) given to the client: the edits the newest edit event implies,
        judged, less those withheld (offers.py). Nothing for a stale version or no event."""
        at, found = await self._edits(uri, version)
        st = self.docs.get(uri)
        if st is not None and st.doc.version == at:
            st.offers.offer(at, found)  # the next change tells whether the user took them
        return at, found

    async def _edits(self, uri: str, version: int | None = None) -> tuple[int, list]:
        """The proposals for the document as it is (computed once per version: a pull while the
        computation runs waits for it, and leaves it running if the pull is cancelled)."""
        st = self.docs.get(uri)
        if st is None or (version is not None and version != st.doc.version):
            return (version or 0), []
        if st.edits is not None and st.edits[0] == st.doc.version:
            return st.edits
        if st.edits_job is None or st.edits_job[0] != st.doc.version or st.edits_job[1].done():
            st.edits_job = (st.doc.version, asyncio.ensure_future(self._compute_edits(uri, st)))
        return await asyncio.shield(st.edits_job[1])

    async def _compute_edits(self, uri: str, st: DocState) -> tuple[int, list]:
        doc, events = st.doc, st.history.recent()
        if not events or st.event_before is None:
            return doc.version, []
        at = doc.version
        found = nextedit.candidates(st.event_before, doc, events[-1], events[-2] if len(events) > 1 else None)
        ruled, found = bool(found), self._withhold(st, found, events)  # never judged when withheld
        reach = max(EDIT_PREFIX_CHARS, EDIT_SUFFIX_CHARS) + 1  # lines of >= 1 character: all the judge reads
        engine = self.inference.engine
        judged = True
        if found and can_judge_edits(engine):
            rows = nextedit.Rows(doc.lines, min(p.row for p in found) - reach, max(p.row for p in found) + reach)
            judged, found = await self._judge(uri, at, Judging(engine, rows, found, events, self.config.edit_margin))
        elif not ruled and self.config.next_edit_refill and can_judge_edits(engine) \
                and (row := refill_row(doc, events[-1])) is not None:
            rows = nextedit.Rows(doc.lines, row - reach, row + reach)
            # One fill, which a budget would cut to a partial line: the next change cancels it.
            job = partial(refill_edits, engine, rows, row, events, self.config.edit_margin)
            judged, found = await self.scheduler.run(uri + "#edits", job)
            found = [] if found is None else self._withhold(st, found, events)  # checked as the rules' were
        if not judged:
            self.stats.edits_dropped += 1
            return at, []
        st = self.docs.get(uri)
        if st is None or st.doc.version != at:
            return at, []  # the document moved on meanwhile: never answer for a stale version
        st.edits = (at, found)
        self.stats.edits_proposed += len(found)
        return at, found

    async def _judge(self, uri: str, at: int, judging: Judging) -> tuple[bool, list]:
        """(False, []) when the document moved past version `at`, else (True, what stands). Each place is
        its own engine job, so an inline completion asked meanwhile runs before the next one;
        the set has its own budget (next_edit_time), not the inline request's."""
        deadline = time.monotonic() + self.config.next_edit_time / 1000
        while (p := judging.pending()) is not None:
            st = self.docs.get(uri)
            if st is None or st.doc.version != at:
                return False, []
            done, gain = await self.scheduler.run(uri + "#edits", partial(judging.score, p), deadline)
            if not done:
                return False, []
            if gain is None:  # the budget ran out: what was judged stands
                self.stats.edits_late += 1
                break
            judging.record(gain)
        return True, judging.result()

    def _withhold(self, st: DocState, found: list, events: list) -> list:
        kept, withheld, reversals = st.offers.withhold(found, events)
        self.stats.edits_withheld += withheld
        self.stats.edits_reversals += reversals
        return kept

    def _debounce_edits(self, uri: str, st: DocState) -> None:
        """Compute next edits once the typing pauses (EDIT_DEBOUNCE s), ready for the request."""
        if st.edit_timer is not None:
            st.edit_timer.cancel()
            st.edit_timer = None
        if not self.config.next_edit:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        st.edit_timer = loop.call_later(EDIT_DEBOUNCE, lambda: loop.create_task(self._quiet_edits(uri)))

    async def _quiet_edits(self, uri: str) -> None:
        try:
            await self._edits(uri)
        except Exception:  # background work: log and count it, never break the session
            log.exception("next edits for %s", uri)
            self.stats.count_error("redraft/nextEditsAhead")

    # -- feedback ------------------------------------------------------------------------

    def shown(self) -> None:
        self.stats.shown += 1

    def accepted(self, uri: str | None = None) -> None:
        """The accept command: count it and compute the next completion ahead of time at the end
        of the accepted text (now if the buffer already shows it, else after the edit arrives)."""
        self.stats.accepted += 1
        st = self.docs.get(uri) if uri is not None else None
        if st is None or st.shown is None:
            return
        s, st.shown = st.shown, None  # accepted text is in the buffer now
        lines = (s.left + s.edit.text).split("\n")
        st.expect = (s.row + len(lines) - 1, lines[-1], s.right[s.edit.replace:])
        self._prefetch_if_accepted(uri, st)

    def _prefetch_if_accepted(self, uri: str, st: DocState) -> None:
        row, left, right = st.expect
        if row >= len(st.doc.lines) or body(st.doc.lines[row]) != left + right:
            return  # not (yet) what the accept produces; the next change checks again
        st.expect = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        snap = take_snapshot(st.doc, row, len(left), self.config)
        if snap.mode is Mode.NONE:
            return
        job = loop.create_task(self._run(st, snap, time.monotonic() + self.config.max_time / 1000))
        st.prefetch = (st.doc.version, row, len(left), job)
        self.stats.prefetched += 1

    def partially_accepted(self) -> None:
        self.stats.partially_accepted += 1

    def document(self, uri: str) -> dict:
        """The server's copy of an open document ({} when it is not open)."""
        st = self.docs.get(uri)
        return {} if st is None else {"uri": uri, "version": st.doc.version, "text": st.doc.text}

    def snapshot_stats(self) -> dict:
        self.stats.peak_in_flight = self.scheduler.peak_in_flight
        d = self.stats.as_dict()
        d["documents"] = len(self.docs)
        d["excluded"] = len(self.excluded)
        d["settings_refused"] = self.settings_refused
        d["model"] = None if self.inference.engine is None else self.inference.engine.name
        d["model_state"] = self.inference.state
        d["model_error"] = self.inference.load_error
        engine = self.inference.engine
        d["remote"] = engine.status() if isinstance(engine, RemoteEngine) else None
        d["workspace"] = None if self.workspace is None else self.workspace.stats()
        return d


def _folders(roots: list[str]) -> list[Path]:
    """The folders among file: URIs or paths (other schemes, files and missing paths dropped),
    at most MAX_ROOTS of them."""
    paths = [p for p in (uri_path(r) if "://" in r else Path(r) for r in roots[:MAX_ROOTS] if r) if p is not None]
    return [p for p in paths if p.is_dir()]
