"""Next-edit candidates: after an edit, the matching edits it implies elsewhere in the file.

From the newest edit event and the lines as they were before it, `intents` finds what the
user did as token-level changes (runs of tokens replaced, removed or inserted, common tokens
trimmed, each with its neighbouring tokens; several only when each stands on its own, as
insertions and requoted strings do). `proposals` turns them into candidate edits at the
places where they recur (sites.py: renames in the binding scope, call sites of a signature
that gained a parameter, same-shape lines of a changed literal, strings in the quote the user
switched to, and any other change where the removed tokens recur between matching neighbours
in the same kind of node), the changes that meet on one line made there together. A rename comes whole or not at all, and so does any change with more places than
MAX_PROPOSALS: a partial set would leave the code broken. Each proposal is a whole line as
it is and as it would be, plus the small edit between them (trimmed at token boundaries, so
a rename shows as the new name). Lines the event itself touched are never proposed, nor
anything after an event that undoes the one before; the model then judges each proposal
(or each whole set, as one) against the lines as they are (inference.judge_edits).

Size: it runs on the event loop after the typing pauses, so every step is bounded. `intent`
reads the lines the event touched (at most MAX_EVENT_LINES of them, from a `Before` window
saved when the event began), drops the lines and then the tokens both sides share, and
diffs what is left only when it is small (MAX_INTENT_CHARS of lines, MAX_INTENT_TOKENS
tokens a side); larger events propose nothing. The site searches have their own bounds
(sites.py), once per token run of the event (at most MAX_INTENT_OPS runs: up to four times
one search's worst case). A skipped event is logged once per document.

Pure text and tree logic: knows nothing of LSP, requests or the engine.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .document import Document, body
from .history import EditEvent
from .intents import Intent
from .sites import (DOTTED, IDENT, LITERAL, MAX_CHANGE_ROWS, MAX_RENAME_ROWS, call_sites, change_sites, context_type,
                    def_name, identifier_sites, requote_sites, requoted, same_shape_sites)
from .sites import tokens as _tokens

MAX_PROPOSALS = 8  # each costs one judging pass (~12 ms on a 2-core CPU)
# An event touching more lines than this proposes nothing (no rule follows from a rewrite of a
# region that size; a full-text change of an ordinary document still fits). Also the rows a
# `Before` window keeps each side of an edit, so ordinary documents are saved whole.
MAX_EVENT_LINES = 2000
# What is diffed of an event, once the lines both sides share are dropped: the rest of its
# lines (a few hundred tokens of regex tokenizing, ~1 ms), then the differing token runs
# (SequenceMatcher is quadratic: 256 x 256 tokens costs ~10 ms at worst, a one-token rename
# ~0.1 ms). A substitution the rules can follow is a name, a literal or a short argument.
MAX_INTENT_CHARS = 8 << 10
MAX_INTENT_TOKENS = 256
# An event changing more token runs than this is a rewrite: nothing follows from it.
MAX_INTENT_OPS = 4


@dataclass(frozen=True)
class LineEdit:
    row: int
    start: int  # character range on the row that `text` replaces
    end: int
    text: str
    original: str  # the line body as it is
    proposed: str  # the line body after the edit
    whole: bool = False  # one of a set offered together or not at all (every use of a renamed name)


@dataclass(frozen=True)
class Before:
    """Rows first .. first + len(lines) - 1 of a document as they were before an edit, and how
    many lines it had then: what `intent` reads of the text an event replaced."""

    first: int
    lines: Sequence[str]
    total: int

    @classmethod
    def whole(cls, lines: Sequence[str]) -> Before:
        return cls(0, lines, len(lines))

    @classmethod
    def around(cls, lines: Sequence[str], first_row: int, last_row: int) -> Before:
        """A copy of rows first_row..last_row and MAX_EVENT_LINES each side of them (nothing
        when they alone are more than MAX_EVENT_LINES: such an event proposes nothing)."""
        if last_row - first_row >= MAX_EVENT_LINES:
            return cls(first_row, (), len(lines))
        start = max(0, first_row - MAX_EVENT_LINES)
        return cls(start, lines[start:last_row + MAX_EVENT_LINES + 1], len(lines))


def candidates(before: Before | Sequence[str], doc: Document, event: EditEvent,
               previous: EditEvent | None = None) -> list[LineEdit]:
    """The rules' half of next-edit suggestions: the edits the newest edit `event` implies,
    `before` being the lines as they were when it began, or a window of them (the model then
    judges them: inference.judge_edits). Nothing when `event` undoes the `previous` one.
    Every front end comes through here."""
    if previous is not None and undoes(event, previous):
        return []
    return proposals(intents(before, doc, event.first_line, min(event.last_line, len(doc.lines) - 1)), doc)


def undoes(event: EditEvent, previous: EditEvent) -> bool:
    """Whether `event` puts back what `previous` changed at the same place: it inserts what
    that one removed (in one change, or backspaced a character at a time) and removes what
    it inserted. A change the user takes back is never proposed elsewhere."""
    if event.first_line != previous.first_line or not (event.inserted or event.removed):
        return False
    took_back = previous.removed in (event.inserted, event.inserted[::-1])
    return took_back and event.removed in (previous.inserted, previous.inserted[::-1])


def _drop_shared_lines(old_lines, new_lines):
    """(lines dropped at the top, old, new) without the lines both sides share at either end,
    for a large region only: those lines hold no token of a substitution (no token spans
    lines), so only the others need reading."""
    if sum(map(len, old_lines)) + sum(map(len, new_lines)) <= 2 * MAX_INTENT_CHARS:
        return 0, old_lines, new_lines
    top, bottom = shared_ends(old_lines, new_lines)
    return top, old_lines[top:len(old_lines) - bottom], new_lines[top:len(new_lines) - bottom]


def shared_ends(a: Sequence, b: Sequence, key=lambda x: x) -> tuple[int, int]:
    """How many items `a` and `b` share at their start, then at their end (not overlapping)."""
    p, n = 0, min(len(a), len(b))
    while p < n and key(a[p]) == key(b[p]):
        p += 1
    q = 0
    while q < n - p and key(a[-1 - q]) == key(b[-1 - q]):
        q += 1
    return p, q


def intent(before: Before | Sequence[str], doc: Document, first_row: int, last_row: int) -> Intent | None:
    """The one substitution the newest event made (see `intents`), or None when it made none
    or several."""
    found = intents(before, doc, first_row, last_row)
    return found[0] if len(found) == 1 and found[0].ops == 1 else None


def intents(before: Before | Sequence[str], doc: Document, first_row: int, last_row: int) -> list[Intent]:
    """The substitutions the newest event made: `before` holds the document's lines as they
    were when it began (all of them, or a `Before` window), rows first_row..last_row of `doc`
    are what it touched now. One per differing token run (an event that annotates two
    parameters made two), at most MAX_INTENT_OPS of them, the same one once; runs that span
    lines are left out (proposals are line edits). Empty for an event too large to diff (see
    the module's size notes)."""
    if not isinstance(before, Before):
        before = Before.whole(before)
    old_last = last_row + (before.total - len(doc.lines))
    if first_row >= len(doc.lines) or old_last < first_row - 1:
        return []
    if max(last_row, old_last) - first_row >= MAX_EVENT_LINES \
            or first_row < before.first or old_last >= before.first + len(before.lines):
        doc.note_limit("intent", f"an edit over {MAX_EVENT_LINES} lines: no next edits for it")
        return []
    old_lines = before.lines[first_row - before.first:old_last + 1 - before.first]
    new_lines = doc.lines[first_row:last_row + 1]
    top, old_lines, new_lines = _drop_shared_lines(old_lines, new_lines)
    if sum(map(len, old_lines)) + sum(map(len, new_lines)) > 2 * MAX_INTENT_CHARS:
        doc.note_limit("intent", f"an edit of over {MAX_INTENT_CHARS} characters: no next edits for it")
        return []
    ev = _Event("".join(old_lines), "".join(new_lines), first_row, first_row + top, last_row, before)
    a, b = ev.a, ev.b
    p, q = shared_ends(a, b, key=lambda t: t[0])  # then the tokens both sides share; the rest is diffed
    if max(len(a), len(b)) - p - q > MAX_INTENT_TOKENS:
        doc.note_limit("intent", f"an edit of over {MAX_INTENT_TOKENS} tokens: no next edits for it")
        return []
    ops = [(tag, i1 + p, i2 + p, j1 + p, j2 + p) for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
        a=[t[0] for t in a[p:len(a) - q]], b=[t[0] for t in b[p:len(b) - q]], autojunk=False).get_opcodes()
        if tag != "equal"]
    if not 0 < len(ops) <= MAX_INTENT_OPS:
        return []
    found: list[Intent] = []
    halves = 0  # runs that are half of a change (a bracket opened, not closed)
    for op in ops:
        it = _op_intent(ev, op, doc)  # None: it spans lines (no line edit follows from it)
        if it is not None and not _balanced(it):
            halves += 1
        elif it is not None and all(_key(it) != _key(o) for o in found):
            found.append(replace(it, ops=len(ops)))
    if len(ops) == 1 or len(found) == 1 and _all_same(ops, ev):
        return found
    # Several token runs: followed only when each stands on its own, as insertions (an
    # annotation for each parameter) and requoted strings do. Anything else is one rewrite in parts: `is_bytes(x)` ->
    # `isinstance(x, bytes)` is no rename plus an argument, `not x` -> `x is None` no deletion
    # of `not`. What changed inside a comment or a string belongs to the prose around it.
    if halves or any(it.old and not requoted(it.old, it.new) or it.context in _PROSE for it in found):
        return []
    return found


_PROSE = ("comment", "string", "string_content")
_OPEN, _CLOSE = "([{", ")]}"


def _balanced(it: Intent) -> bool:
    """Whether the removed and the inserted text each close every bracket they open: a run
    that does not (`Tuple[str, ` of `Tuple[str, int]` -> `int`) is half of a change."""
    for text in (it.old, it.new):
        depth = 0
        for ch in text:
            depth += (ch in _OPEN) - (ch in _CLOSE)
            if depth < 0:
                return False
        if depth:
            return False
    return True


def _all_same(ops: list, ev: _Event) -> bool:
    """Every token run of the event is the same change (a name renamed on two lines)."""
    runs = {(tuple(t[0] for t in ev.a[i1:i2]), tuple(t[0] for t in ev.b[j1:j2])) for _, i1, i2, j1, j2 in ops}
    return len(runs) == 1


@dataclass
class _Event:
    """One edit event's text as it was and is (lines both share dropped), tokenized once, and
    the tree of the text as it was, parsed at most once for all of its token runs."""

    old_text: str
    new_text: str
    first_row: int  # rows the event touched, current text
    top: int  # row of old_text's / new_text's first line
    last_row: int
    before: Before
    old_context: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.a, self.b = _tokens(self.old_text), _tokens(self.new_text)


def _key(it: Intent) -> tuple:
    return it.kind, it.old, it.new, it.left, it.right, it.context


def _op_intent(ev: _Event, op: tuple, doc: Document) -> Intent | None:
    """The Intent of one differing token run `op` (a difflib opcode over ev.a / ev.b)."""
    tag, i1, i2, j1, j2 = op
    a, b, old_text, new_text = ev.a, ev.b, ev.old_text, ev.new_text
    old = old_text[a[i1][1]:a[i2 - 1][2]] if i2 > i1 else ""
    new = new_text[b[j1][1]:b[j2 - 1][2]] if j2 > j1 else ""
    at = b[j1][1] if j1 < len(b) else len(new_text)  # where the change is (or was) in the text now
    end = b[j2 - 1][2] if j2 > j1 else at
    row = ev.top + new_text[:at].count("\n")
    col = at - (new_text.rfind("\n", 0, at) + 1)
    if tag == "insert" and new.startswith(",") and j2 < len(b) and b[j2][0] == ")":
        name = def_name(doc, row)
        if name:
            return Intent("append_param", "", new, row, col, ev.first_row, ev.last_row, name)
    if "\n" in old or "\n" in new:
        return None  # proposals are line edits
    left = b[j1 - 1] if j1 > 0 and "\n" not in new_text[b[j1 - 1][2]:at] else None
    right = b[j2] if j2 < len(b) and "\n" not in new_text[end:b[j2][1]] else None
    gap = new_text[left[2]:right[1]] if left and right else new
    after = new_text[right[2]:] if right else ""
    it = Intent("replace", old, new, row, col, ev.first_row, ev.last_row, after_dot=new_text[at - 1:at] == ".",
                left=left[0] if left else "", right=right[0] if right else "", gap=gap,
                right_space=after[:len(after) - len(after.lstrip(" \t"))])
    if follows_as_change(it) and doc.syntax.grammar is not None:
        # the same span of the text as it was: from the left neighbour to the right one
        start = a[i1 - 1][1] if left else (a[i1][1] if i2 > i1 else a[i1 - 1][2] if i1 else 0)
        stop = a[i2][2] if right else (a[i2 - 1][2] if i2 > i1 else start)
        old_row = ev.top + old_text[:start].count("\n")
        old_start = old_text.rfind("\n", 0, start) + 1
        it = replace(it, context=context_type(doc.syntax.grammar, ev.before.lines, old_row - ev.before.first,
                                              start - old_start, stop - old_start, ev.old_context))
    return it


def is_rename(it: Intent) -> bool:
    """A name replaced by a name, or by a dotted one (`urlparse` -> `urllib.parse`)."""
    return it.kind == "replace" and bool(IDENT.match(it.old) and DOTTED.match(it.new))


def follows_as_change(it: Intent) -> bool:
    """Whether `proposals` follows this intent with the general change rule (not a rename,
    a literal or an appended parameter)."""
    return it.kind == "replace" and not is_rename(it) and not (LITERAL.match(it.old) and it.new) \
        and not requoted(it.old, it.new)


def proposals(intent: Intent | Sequence[Intent], doc: Document, limit: int = MAX_PROPOSALS) -> list[LineEdit]:
    """Candidate edits, nearest first, for one intent or all of an event's. A rename comes
    whole (every use in its scope) or not at all; so does any other change with more than
    `limit` places (an appended parameter's calls too), within MAX_CHANGE_ROWS; a changed
    literal gives its `limit` nearest same-shape lines (a partial set of those breaks nothing).
    Whole sets are marked `whole`. The token runs of one event that recur on one line are made
    there together (the same annotation of two parameters)."""
    found = [intent] if isinstance(intent, Intent) else list(intent)
    if not found:
        return []
    by_row: dict[int, list[tuple[int, int, str]]] = {}
    whole = False
    for it in found:
        rows, it_whole = _rows_to_change(it, doc, limit)
        whole = whole or it_whole
        for row, edits in rows.items():
            taken = by_row.setdefault(row, [])
            taken.extend(e for e in edits if not any(e[0] < t[1] and t[0] < e[1] or e[:2] == t[:2] for t in taken))
    first = found[0]
    out = []
    for row in sorted(by_row, key=lambda r: (abs(r - first.row), r))[:None if whole else limit]:
        original = body(doc.lines[row])
        proposed, shift = original, 0
        for start, end, text in sorted(by_row[row]):
            proposed = proposed[:start + shift] + text + proposed[end + shift:]
            shift += len(text) - (end - start)
        s, e, t = small_edit(original, proposed)
        out.append(LineEdit(row, s, e, t, original, proposed, whole))
    return out


def _rows_to_change(intent: Intent, doc: Document, limit: int) -> tuple[dict[int, list[tuple[int, int, str]]], bool]:
    """{row: replacements} where one intent recurs, and whether they must come whole."""
    whole, cap, nearest = False, MAX_CHANGE_ROWS, 0  # nearest: keep this many nearest rows only
    if intent.kind == "append_param":
        found = call_sites(intent, doc)
    elif is_rename(intent) and doc.tree is not None:
        found, whole, cap = identifier_sites(intent, doc), True, MAX_RENAME_ROWS
    elif follows_as_change(intent):
        found = change_sites(intent, doc)
    elif requoted(intent.old, intent.new):  # the nearest MAX_CHANGE_ROWS: a partial set breaks nothing
        found, nearest = requote_sites(intent, doc, MAX_CHANGE_ROWS), MAX_CHANGE_ROWS
    else:
        found, nearest = same_shape_sites(intent, doc, limit), limit
    by_row: dict[int, list[tuple[int, int, str]]] = {}
    for row, start, end, text in found:
        if not intent.first_row <= row <= intent.last_row:  # never what the user just typed
            by_row.setdefault(row, []).append((start, end, text))
    if nearest:
        by_row = {r: by_row[r] for r in sorted(by_row, key=lambda r: (abs(r - intent.row), r))[:nearest]}
    elif len(by_row) > cap:
        doc.note_limit("change", f"a change with over {cap} lines to follow: not offered")
        return {}, False
    return by_row, whole or len(by_row) > limit


def small_edit(original: str, proposed: str) -> tuple[int, int, str]:
    """(start, end, text): the part of `original` that changes, widened to whole tokens."""
    a, b = _tokens(original), _tokens(proposed)
    i = 0
    while i < min(len(a), len(b)) and a[i][0] == b[i][0] and a[i][1] == b[i][1]:
        i += 1
    j = 0
    while (j < min(len(a), len(b)) - i and a[-1 - j][0] == b[-1 - j][0]
           and len(original) - a[-1 - j][1] == len(proposed) - b[-1 - j][1]):
        j += 1
    start = a[i][1] if i < len(a) else len(original)
    end = a[len(a) - j - 1][2] if len(a) - j > i else start
    bstart = b[i][1] if i < len(b) else len(proposed)
    bend = b[len(b) - j - 1][2] if len(b) - j > i else bstart
    if len(a) - j <= i:  # pure insertion: anchor at the next token of the original
        start = end = a[i][1] if i < len(a) else len(original)
        bend = bstart + (len(proposed) - len(original))
    if original[:start] + proposed[bstart:bend] + original[end:] != proposed:
        # the spacing between tokens changed too: the characters both share at either end
        p, q = shared_ends(original, proposed)
        return p, len(original) - q, proposed[p:len(proposed) - q]
    return start, end, proposed[bstart:bend]


class Rows(Sequence):
    """A frozen window of a document's lines addressed by document row, for background work
    that reads near a few rows only (the model judging proposals): `len` is the document's,
    a slice is cut to the window, a single row outside it raises IndexError."""

    def __init__(self, lines: Sequence[str], first: int, last: int) -> None:
        self.first = max(0, first)
        self._lines = tuple(lines[self.first:last + 1])
        self._total = len(lines)

    def __len__(self) -> int:
        return self._total

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self._total)
            if step != 1:
                raise ValueError("Rows slices take every row")
            return self._lines[max(start - self.first, 0):max(stop - self.first, 0)]
        row = key + self._total if key < 0 else key
        if not self.first <= row < self.first + len(self._lines):
            raise IndexError(f"row {key} is outside the window")
        return self._lines[row - self.first]
