"""Drafts from the code itself: the longest other match of the text before the cursor.

Code repeats itself, so continuing the longest earlier (or later) match of the text before
the cursor, found elsewhere in the same file, in other open files or in recently edited
regions, is often right (prompt-lookup decoding). A `DraftIndex` keeps one document's lines
indexed as they are edited; `lookup` (draftsearch.py) asks several indexes
and ranks what they propose.

Index: every position whose preceding character is not whitespace is filed under the
KEY_CHARS characters before it in the whole text (a key may reach back over line ends).
`find` strips the trailing whitespace of `before` (whitespace alone is no evidence, and the
rest of it must simply follow the match), looks up the key that ends the remainder, checks
that the stripped whitespace follows, and extends each candidate backwards line by line.
Each line is an object: an edit re-files only the lines it replaced (plus the next line when
the characters its keys reach back into changed); filed positions of replaced lines are
dropped lazily, and rows are refreshed lazily after lines were inserted or removed, so an
edit never re-hashes the file.

Blocks of BULK_CHARS or more (a document opening, a paste, pending slices) are filed in one
numpy pass into sorted runs (keyruns.py: ~0.2 s per MB on the 2-core development machine,
4-7x faster than filing position by position in Python); smaller edits go to per-key buckets. `find` reads both. Runs keep the entries of replaced lines until they outnumber the
live ones, then drop them in one pass.

Size: filing is bounded per call: given `file_chars`, the constructor and `replace_lines` file
that many characters of new lines now and leave the rest pending; `file_pending` files the
next slice (the server runs one per event-loop turn) and `find` sees only what is filed so
far. Without `file_chars` everything is filed at once. The server keeps no index for documents
over MAX_INDEX_BYTES (drafts then come from other open documents and recent edits).

It knows nothing of LSP, models or requests.
"""

from __future__ import annotations

import struct
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import keyruns
from .document import body, split_lines
from .keyruns import KEY_CHARS

# Positions are filed under KEY_CHARS (6) characters: the shortest findable match.
# On stdlib code (bench_drafts.py --accuracy) the best match continues the line exactly for
# ~6% of cursors when it is 4-5 characters long, ~8-10% at 6-11, ~20% at 16-23 and over 2/3
# past 48. Matches shorter than 6 are mostly an identifier fragment and nearly never right, and
# 6-character keys keep buckets ~3x smaller than 4-character ones, so 6 is the floor.
MIN_CHARS = 6
# Live positions examined per find, newest filed first. Only boilerplate keys (indentation
# plus one letter, "======") hold more; on stdlib code the cap costs no exact continuation.
SCAN_CAP = 512
# Documents over this many bytes get no index: its entries hold 16 bytes per character of text
# (key and entry) and a larger file is seldom one being typed in.
MAX_INDEX_BYTES = 1 << 20
# Characters filed per call when the caller bounds it: ~8,000 lines of typical code, so nearly
# every document is indexed whole on open (~45 ms on the 2-core machine).
FILE_NOW_CHARS = 256 << 10
# Characters filed per later slice, ~3 ms: a message waits for at most one slice at each of the
# few event-loop turns it takes to read and answer.
FILE_SLICE_CHARS = 16 << 10
# Blocks of lines at least this long are filed in one numpy pass (keyruns.py); below it the
# per-position Python loop costs less than the pass's fixed overhead (~50 us).
BULK_CHARS = 256
# Replaced lines' characters in runs before their dead entries are dropped (and at least as
# many as the live ones): a pass over every run, ~2 ms per 100k entries.
COMPACT_CHARS = 64 << 10
_WS = " \t\r\n\f\v"
_COLUMN = (1 << 32) - 1  # the column bits of a bucket entry
_pack = struct.Struct("=q").pack  # one bucket entry, as memoryview.cast("q") reads it
_ENTRY = 8  # bytes


class _Line:
    __slots__ = ("text", "row", "uid", "alive", "in_run")

    def __init__(self, text: str, row: int, uid: int):
        self.text = text
        self.row = row
        self.uid = uid  # its number in bucket entries
        self.alive = True
        self.in_run = False  # filed into a run (its entries there die with it)


@dataclass(frozen=True)
class Match:
    row: int  # where the continuation starts in the indexed document (char index in the line)
    col: int
    matched: int  # characters of `before` that match the text preceding (row, col)


def _common_suffix(a: str, b: str) -> int:
    la, lb = len(a), len(b)
    n = la if la < lb else lb
    k = 0
    while k < n and k < 16 and a[la - 1 - k] == b[lb - 1 - k]:  # most differ within a few
        k += 1
    if k < 16 or k == n:
        return k
    lo, hi = k, n  # a long run: binary search on slices, compared at C speed
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[la - mid:] == b[lb - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class DraftIndex:
    """Incremental index of one document's lines (each keeps its "\\n"; the last has none)."""

    def __init__(self, lines: Sequence[str], file_chars: int | None = None) -> None:
        self._uid = 0
        self._live: dict[int, _Line] = {}  # uid -> line, for lines still in the document
        self._lines = [self._new(t, i) for i, t in enumerate(lines or [""])]
        self._stale_from = len(self._lines)  # rows from here on may be out of date
        # key -> entries (line uid << 32 | column) packed as native int64, oldest first. A
        # bytearray holds no references, so the garbage collector neither tracks nor counts it:
        # a megabyte of code files ~150k keys, and as lists they set off a full collection
        # (~150 ms in the server) every ~0.5 s while filing and slowed every later one.
        self._buckets: dict[str, bytearray] = {}
        self._limits: dict[str, int] = {}  # bucket length that triggers dropping dead entries
        # Blocks filed at once, sorted by key (keyruns.py); sizes fall geometrically, oldest first.
        self._runs: list[keyruns.Run] = []
        self._run_chars = 0  # characters of lines filed into runs
        self._run_dead = 0  # of those, characters of lines since replaced
        self._pending: deque[_Line] = deque()  # lines not filed yet, in document order
        self.filed_chars = 0  # characters of lines filed so far (the work done, for callers' budgets)
        # Held while the index changes and while `lookup` reads it: the cache model reads it on
        # the engine's thread while the event loop edits it.
        self.lock = threading.Lock()
        self._file_lines(0, self._lines, "", file_chars)

    # -- reading -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._lines)

    def line(self, row: int) -> str:
        return self._lines[row].text

    @property
    def text(self) -> str:
        return "".join(ln.text for ln in self._lines)

    def positions(self) -> tuple[int, int]:
        """(live, filed) positions in the buckets: filed ones of replaced lines are dropped lazily."""
        live = total = 0
        for b in self._buckets.values():
            with memoryview(b) as mv, mv.cast("q") as entries:
                total += len(entries)
                live += sum(1 for x in entries if x >> 32 in self._live)
        for run in self._runs:
            total += len(run)
            live += sum(1 for x in run.entries.tolist() if x >> 32 in self._live)
        return live, total

    @property
    def pending(self) -> int:
        """Lines not filed yet (some may have been replaced since)."""
        return len(self._pending)

    def continuation(self, row: int, col: int, lines: int = 1) -> str:
        """The rest of line `row` from `col`, plus the next `lines - 1` lines, without terminators."""
        end = min(row + max(lines, 1), len(self._lines))
        parts = [body(self._lines[row].text)[col:]]
        parts += [body(self._lines[r].text) for r in range(row + 1, end)]
        return "\n".join(parts)

    # -- editing -------------------------------------------------------------------------

    def replace_lines(self, start: int, old_count: int, new_lines: Sequence[str],
                      file_chars: int | None = None) -> None:
        """Lines start .. start+old_count-1 became `new_lines`; at most `file_chars` characters
        of them are filed now (all when None), the rest wait for `file_pending`."""
        with self.lock:
            self._replace_lines(start, old_count, new_lines, file_chars)

    def _replace_lines(self, start: int, old_count: int, new_lines: Sequence[str], file_chars: int | None) -> None:
        lines = self._lines
        if not (0 <= start <= len(lines) and 0 <= old_count <= len(lines) - start):
            raise ValueError(f"lines {start}+{old_count} outside a document of {len(lines)}")
        end = start + old_count
        old_ctx = self._context(end)
        for ln in lines[start:end]:
            self._kill(ln)
        new = [self._new(t, start + i) for i, t in enumerate(new_lines)]
        lines[start:end] = new
        if len(new) != old_count:
            self._stale_from = min(self._stale_from, start + len(new))
        ctx = self._file_lines(start, new, self._context(start), file_chars)
        if self._run_dead > max(COMPACT_CHARS, self._run_chars - self._run_dead):
            self._compact()
        if ctx == old_ctx:
            return
        # The keys of the first positions of the following lines reach into the changed text.
        row, reach = start + len(new), 0
        while row < len(lines) and reach < KEY_CHARS:
            old = lines[row]
            self._kill(old)
            ln = lines[row] = self._new(old.text, row)
            self._file(ln, ctx)
            ctx = (ctx + ln.text)[-KEY_CHARS:]
            reach += len(ln.text)
            row += 1

    def _file_lines(self, start: int, new: list[_Line], ctx: str, budget: int | None) -> str:
        """File `new` (rows start..) within `budget` characters, the rest pending; returns the
        last KEY_CHARS characters of `new` after `ctx`."""
        now = len(new)
        if budget is not None:  # the lines that start within the budget
            now = 0
            while now < len(new) and budget > 0:
                budget -= len(new[now].text)
                now += 1
        self._file_block(new[:now], ctx)
        if now < len(new):
            self._pending.extend(new[now:])
            return self._context(start + len(new))
        return (ctx + "".join(ln.text for ln in new[-KEY_CHARS - 1:]))[-KEY_CHARS:]  # 6 lines hold a "\n" each

    def _file_block(self, block: list[_Line], ctx: str) -> None:
        """File consecutive lines whose first keys reach back into `ctx`: in one run when they are
        long enough, else position by position."""
        if not block:
            return
        chars = sum(len(ln.text) for ln in block)
        if chars < BULK_CHARS:
            for ln in block:
                self._file(ln, ctx)
                ctx = (ctx + ln.text)[-KEY_CHARS:]
            return
        self.filed_chars += chars
        self._run_chars += chars
        starts, at = [], len(ctx)
        for ln in block:
            ln.in_run = True
            starts.append(at)
            at += len(ln.text)
        text = ctx + "".join(ln.text for ln in block)
        runs = self._runs
        runs.append(keyruns.build(text, len(ctx), starts, [ln.uid for ln in block]))
        while len(runs) > 1 and len(runs[-1]) >= len(runs[-2]) // 2:  # few runs, each merge linear
            newer = runs.pop()
            runs[-1] = runs[-1].merged(newer)

    def _compact(self) -> None:
        """Drop the runs' entries of replaced lines."""
        live = np.fromiter(self._live.keys(), dtype=np.int64, count=len(self._live))
        live.sort()
        self._runs = [r for r in (run.keep(live) for run in self._runs) if len(r)]
        self._run_chars -= self._run_dead
        self._run_dead = 0

    def file_pending(self, max_chars: int = FILE_SLICE_CHARS) -> bool:
        """File pending lines, about `max_chars` characters of them; True while some remain."""
        with self.lock:
            return self._file_pending(max_chars)

    def _file_pending(self, max_chars: int) -> bool:
        pending = self._pending
        block: list[_Line] = []  # lines on consecutive rows, filed together
        row = -1
        while pending and max_chars > 0:
            ln = pending.popleft()
            if not ln.alive:
                continue  # replaced meanwhile: its replacement was filed (or queued) then
            r = self._row(ln)
            if block and r != row + 1:
                self._file_block(block, self._context(row - len(block) + 1))
                block = []
            block.append(ln)
            row = r
            max_chars -= len(ln.text)
        if block:
            self._file_block(block, self._context(row - len(block) + 1))
        return bool(pending)

    def _new(self, text: str, row: int) -> _Line:
        self._uid += 1
        ln = self._live[self._uid] = _Line(text, row, self._uid)
        return ln

    def _kill(self, ln: _Line) -> None:
        ln.alive = False
        del self._live[ln.uid]
        if ln.in_run:
            self._run_dead += len(ln.text)

    def _context(self, row: int) -> str:
        """The last KEY_CHARS characters before line `row`."""
        ctx, r = "", row - 1
        while r >= 0 and len(ctx) < KEY_CHARS:
            ctx = self._lines[r].text + ctx
            r -= 1
        return ctx[-KEY_CHARS:]

    def _file(self, ln: _Line, ctx: str) -> None:
        t = ln.text
        self.filed_chars += len(t)
        s = ctx + t
        shift = len(ctx)  # s index of column 0
        last = len(t) - 1 if t.endswith("\n") else len(t)  # a position after "\n" is the next row's 0
        buckets, limits, live = self._buckets, self._limits, self._live
        uid = ln.uid << 32
        for c in range(max(1, KEY_CHARS - shift), last + 1):
            e = shift + c
            if s[e - 1] in _WS:
                continue
            key = s[e - KEY_CHARS:e]
            b = buckets.get(key)
            if b is None:
                buckets[key] = bytearray(_pack(uid | c))
                continue
            b += _pack(uid | c)
            if len(b) > limits.get(key, 16 * _ENTRY):
                with memoryview(b) as mv, mv.cast("q") as entries:
                    b = buckets[key] = bytearray(b"".join(_pack(x) for x in entries if x >> 32 in live))
                limits[key] = max(16 * _ENTRY, 2 * len(b))

    def _row(self, ln: _Line) -> int:
        lines = self._lines
        r = ln.row
        if r < len(lines) and lines[r] is ln:
            return r
        for r in range(self._stale_from, len(lines)):
            lines[r].row = r
        self._stale_from = len(lines)
        return ln.row

    # -- searching -----------------------------------------------------------------------

    def find(self, before: str, *, exclude: tuple[int, int] | None = None, limit: int = 8,
             min_chars: int = MIN_CHARS, ignore_indent: bool = False) -> list[Match]:
        """Positions whose preceding text matches the end of `before` longest, best first.

        A match covers `before`'s trailing whitespace plus at least max(min_chars, KEY_CHARS)
        characters before it. `exclude` (the cursor) is never returned; ties go to rows
        nearest to it. With `ignore_indent`, the backward match goes on past lines that differ
        only in leading whitespace (`matched` then counts `before`'s characters consumed).
        """
        anchor = before.rstrip(_WS)
        ws = before[len(anchor):]
        if len(anchor) < KEY_CHARS or limit <= 0:
            return []
        key = anchor[-KEY_CHARS:]
        entries: list[int] = []  # oldest filed first: the runs, then the buckets' later edits
        if self._runs:
            k = keyruns.key_of(key)
            for run in self._runs:
                entries += run.lookup(k)
        bucket = self._buckets.get(key)
        if bucket:
            with memoryview(bucket) as mv, mv.cast("q") as filed:
                entries += filed.tolist()
        if not entries:
            return []
        need = max(min_chars, KEY_CHARS)
        parts = split_lines(anchor)
        found = self._scan(entries, anchor, ws, parts, exclude, need, ignore_indent)
        found.sort()
        return [Match(r, c, -m) for m, _, r, c in found[:limit]]

    def _scan(self, entries, anchor: str, ws: str, parts: list[str], exclude: tuple[int, int] | None,
              need: int, ignore_indent: bool) -> list[tuple[int, int, int, int]]:
        """(-matched, distance, row, col) of the live entries of a bucket that match well enough."""
        tail, floor = anchor[-need:], len(ws) + need
        probe = anchor[-KEY_CHARS - 1] if len(anchor) > KEY_CHARS else None
        lines, n = self._lines, len(self._lines)
        near = exclude[0] if exclude else 0
        found: list[tuple[int, int, int, int]] = []
        live, by_uid = 0, self._live
        for entry in reversed(entries):  # newest filed first: recently edited lines are near the cursor
            ln = by_uid.get(entry >> 32)
            if ln is None:
                continue  # replaced since
            c = entry & _COLUMN
            live += 1
            if live > SCAN_CAP:
                break
            t = ln.text
            # Cheap rejections first: a match too short within the line (an indentation skip
            # would need whitespace where the shortest acceptable match begins).
            if c >= need and t[c - need:c] != tail and not (ignore_indent and t[c - need] in " \t"):
                continue
            row = ln.row
            if row >= n or lines[row] is not ln:
                row = self._row(ln)
            pos = self._follow(row, c, ws) if ws else (row, c)
            if pos is None or pos == exclude:
                continue
            k = c - KEY_CHARS - 1
            if k >= 0 and t[k] != probe and not (ignore_indent and t[k] in " \t"):
                m = len(ws) + KEY_CHARS  # differs just before the key
            else:
                m = len(ws) + self._extend(parts, row, c, ignore_indent)
            if m >= floor:
                found.append((-m, abs(pos[0] - near), *pos))
        return found

    def _follow(self, row: int, col: int, ws: str) -> tuple[int, int] | None:
        """The position after `ws` when it follows (row, col), else None."""
        lines = self._lines
        while ws:
            t = lines[row].text
            seg = t[col:col + len(ws)]
            if not ws.startswith(seg) or not seg:
                return None
            ws = ws[len(seg):]
            col += len(seg)
            if col == len(t) and t.endswith("\n"):
                if row + 1 == len(lines):
                    return None
                row, col = row + 1, 0
            elif ws:
                return None
        return row, col

    def _extend(self, parts: list[str], row: int, col: int, ignore_indent: bool) -> int:
        """Characters of "".join(parts) that match the text before (row, col), from the end."""
        lines = self._lines
        i = len(parts) - 1
        a, d = parts[i], lines[row].text[:col]
        m = 0
        while True:
            if a != d:
                s = _common_suffix(a, d)
                # Lines that differ only in leading whitespace match when indentation is ignored.
                if not (ignore_indent and i > 0 and row > 0 and _blank(a[:len(a) - s])
                        and _blank(d[:len(d) - s])):
                    return m + s
            m += len(a)
            if i == 0 or row == 0:
                return m
            i, row = i - 1, row - 1
            a, d = parts[i], lines[row].text


def _blank(s: str) -> bool:
    return not s.strip(" \t")
