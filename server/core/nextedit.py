"""Next-edit candidates: after an edit, the matching edits it implies elsewhere in the file.

From the newest edit event and the lines as they were before it, `intent` finds what the
user did as a token substitution (old -> new, common tokens trimmed) or a token insertion.
`proposals` turns it into candidate edits, bounded in number, nearest first:
  * an identifier replaced: its other occurrences as identifiers (tree-sitter), within the
    function that holds the edit, or the whole file for a top-level name;
  * a parameter appended to a function's signature: the same text appended to the
    argument lists of that function's calls;
  * a literal or other token run replaced: lines of the same shape holding the same run.
Each proposal is a whole line as it is and as it would be, plus the small edit between them
(trimmed at token boundaries, so a rename shows as the new name). Lines the event itself
touched are never proposed (nothing the user just typed is undone); the model then judges
each proposal against the line as it is (inference.judge_edits).

Size: it runs on the event loop after the typing pauses, so every step is bounded. `intent`
reads the lines the event touched (at most MAX_EVENT_LINES of them, from a `Before` window
saved when the event began), drops the lines and then the tokens both sides share, and
diffs what is left only when it is small (MAX_INTENT_CHARS of lines, MAX_INTENT_TOKENS
tokens a side); larger events propose nothing. Candidate sites are searched within
SITE_ROWS rows of the edit (tree walks through a cursor, so nodes outside cost nothing),
on lines of at most MAX_LINE_CHARS. Larger documents than that window simply get their
nearest proposals; a skipped event is logged once per document.

Pure text and tree logic: knows nothing of LSP, requests or the engine.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .document import Document, body
from .history import EditEvent
from .languages import walk_rows

TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d[\w.]*|\"[^\"\n]*\"|'[^'\n]*'|\S")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
LITERAL = re.compile(r"\d[\w.]*\Z|\"[^\"\n]*\"\Z|'[^'\n]*'\Z")
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
# Candidate sites lie within this many rows of the edit: scanning a row costs ~0.5 us, walking
# a row's tree nodes ~10 us. Proposals are nearest first, so this only matters past it.
SITE_ROWS = 2000
MAX_LINE_CHARS = 2000  # longer lines (minified, data) are never compared for shape
SHAPE_RATIO = 0.8  # token-shape similarity for "lines like the edited one" (literals alike)
SCOPES = ("function_definition", "function_declaration", "method_definition", "method_declaration",
          "function_item", "arrow_function", "lambda", "class_definition")


@dataclass(frozen=True)
class Intent:
    kind: str  # "replace" | "append_param"
    old: str  # replaced text ("" for an insertion)
    new: str
    row: int  # row of the edit in the current text
    col: int  # its column
    first_row: int  # rows the event touched, current text
    last_row: int
    name: str = ""  # append_param: the function's name
    after_dot: bool = False  # the replaced identifier was an attribute (x.old)


@dataclass(frozen=True)
class LineEdit:
    row: int
    start: int  # character range on the row that `text` replaces
    end: int
    text: str
    original: str  # the line body as it is
    proposed: str  # the line body after the edit


def _tokens(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in TOKEN.finditer(text)]


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


def candidates(before: Before | Sequence[str], doc: Document, event: EditEvent) -> list[LineEdit]:
    """The rules' half of next-edit suggestions: the edits the newest edit `event` implies,
    `before` being the lines as they were when it began, or a window of them (the model then
    judges them: inference.judge_edits). Every front end comes through here."""
    found = intent(before, doc, event.first_line, min(event.last_line, len(doc.lines) - 1))
    return proposals(found, doc) if found is not None else []


def _drop_shared_lines(old_lines, new_lines):
    """(lines dropped at the top, old, new) without the lines both sides share at either end,
    for a large region only: those lines hold no token of a substitution (no token spans
    lines), so only the others need reading."""
    if sum(map(len, old_lines)) + sum(map(len, new_lines)) <= 2 * MAX_INTENT_CHARS:
        return 0, old_lines, new_lines
    top, n = 0, min(len(old_lines), len(new_lines))
    while top < n and old_lines[top] == new_lines[top]:
        top += 1
    bottom = 0
    while bottom < n - top and old_lines[-1 - bottom] == new_lines[-1 - bottom]:
        bottom += 1
    return top, old_lines[top:len(old_lines) - bottom], new_lines[top:len(new_lines) - bottom]


def intent(before: Before | Sequence[str], doc: Document, first_row: int, last_row: int) -> Intent | None:
    """The substitution the newest event made: `before` holds the document's lines as they
    were when it began (all of them, or a `Before` window), rows first_row..last_row of `doc`
    are what it touched now. None for no single substitution, and for an event too large to
    diff (see the module's size notes)."""
    if not isinstance(before, Before):
        before = Before.whole(before)
    old_last = last_row + (before.total - len(doc.lines))
    if first_row >= len(doc.lines) or old_last < first_row - 1:
        return None
    if max(last_row, old_last) - first_row >= MAX_EVENT_LINES \
            or first_row < before.first or old_last >= before.first + len(before.lines):
        doc.note_limit("intent", f"an edit over {MAX_EVENT_LINES} lines: no next edits for it")
        return None
    old_lines = before.lines[first_row - before.first:old_last + 1 - before.first]
    new_lines = doc.lines[first_row:last_row + 1]
    top, old_lines, new_lines = _drop_shared_lines(old_lines, new_lines)
    if sum(map(len, old_lines)) + sum(map(len, new_lines)) > 2 * MAX_INTENT_CHARS:
        doc.note_limit("intent", f"an edit of over {MAX_INTENT_CHARS} characters: no next edits for it")
        return None
    old_text, new_text = "".join(old_lines), "".join(new_lines)
    a, b = _tokens(old_text), _tokens(new_text)
    # Then the tokens both sides share at either end; what is left is diffed.
    p, n = 0, min(len(a), len(b))
    while p < n and a[p][0] == b[p][0]:
        p += 1
    q = 0
    while q < n - p and a[-1 - q][0] == b[-1 - q][0]:
        q += 1
    if max(len(a), len(b)) - p - q > MAX_INTENT_TOKENS:
        doc.note_limit("intent", f"an edit of over {MAX_INTENT_TOKENS} tokens: no next edits for it")
        return None
    ops = [(tag, i1 + p, i2 + p, j1 + p, j2 + p) for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
        a=[t[0] for t in a[p:len(a) - q]], b=[t[0] for t in b[p:len(b) - q]], autojunk=False).get_opcodes()
        if tag != "equal"]
    if len(ops) != 1:
        return None
    tag, i1, i2, j1, j2 = ops[0]
    old = old_text[a[i1][1]:a[i2 - 1][2]] if i2 > i1 else ""
    new = new_text[b[j1][1]:b[j2 - 1][2]] if j2 > j1 else ""
    at = b[j1][1] if j2 > j1 else (b[j1][1] if j1 < len(b) else len(new_text))
    row = first_row + top + new_text[:at].count("\n")
    col = at - (new_text.rfind("\n", 0, at) + 1)
    if tag == "replace" and old and new:
        return Intent("replace", old, new, row, col, first_row, last_row, after_dot=new_text[at - 1:at] == ".")
    if tag == "insert" and new.startswith(",") and j2 < len(b) and b[j2][0] == ")":
        name = _def_name(doc, row)
        if name:
            return Intent("append_param", "", new, row, col, first_row, last_row, name)
    return None


def _def_name(doc: Document, row: int) -> str:
    """Name of the function whose signature is on `row` (tree-sitter), else ''."""
    if doc.tree is None:
        return ""
    line = doc.lines[row]
    node = doc.tree.root_node.named_descendant_for_point_range((row, len(line) - len(line.lstrip())),
                                                                (row, len(line.encode()) - 1))
    while node is not None and not node.type.endswith(("function_definition", "function_declaration",
                                                         "function_item", "method_declaration")):
        node = node.parent
    if node is None or node.start_point[0] != row:
        return ""
    name = node.child_by_field_name("name")
    return name.text.decode() if name is not None and name.text else ""


def proposals(intent: Intent, doc: Document, limit: int = MAX_PROPOSALS) -> list[LineEdit]:
    if intent.kind == "append_param":
        found = _call_sites(intent, doc)
    elif IDENT.match(intent.old) and IDENT.match(intent.new) and doc.tree is not None:
        found = _identifier_sites(intent, doc)
    else:
        found = _same_shape_sites(intent, doc)
    by_row: dict[int, list[tuple[int, int, str]]] = {}
    for row, start, end, text in found:
        if not intent.first_row <= row <= intent.last_row:  # never what the user just typed
            by_row.setdefault(row, []).append((start, end, text))
    out = []
    for row in sorted(by_row, key=lambda r: (abs(r - intent.row), r))[:limit]:
        original = body(doc.lines[row])
        proposed, shift = original, 0
        for start, end, text in sorted(by_row[row]):
            proposed = proposed[:start + shift] + text + proposed[end + shift:]
            shift += len(text) - (end - start)
        s, e, t = small_edit(original, proposed)
        out.append(LineEdit(row, s, e, t, original, proposed))
    return out


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
    return start, end, proposed[bstart:bend]


def _scope(doc: Document, row: int, col: int):
    """The function (or class) holding the edit when it is inside one, else the whole tree."""
    bcol = len(body(doc.lines[row])[:col].encode())
    node = doc.tree.root_node.named_descendant_for_point_range((row, bcol), (row, bcol))
    while node is not None and node.type not in SCOPES:
        node = node.parent
    return node if node is not None else doc.tree.root_node


def _identifier_sites(intent: Intent, doc: Document):
    scope = _scope(doc, intent.row, intent.col)
    if scope.type != "module" and scope.start_point[0] == intent.row and _def_name(doc, intent.row) == intent.new:
        scope = doc.tree.root_node  # the function itself was renamed: its callers are anywhere
    old = intent.old.encode()
    for node in walk_rows(scope, intent.row - SITE_ROWS, intent.row + SITE_ROWS):
        if node.type in ("identifier", "field_identifier", "property_identifier", "type_identifier") \
                and node.text == old:
            row, bcol = node.start_point
            line, col = doc.lines[row], doc.char_col(row, bcol)
            keyword = node.parent is not None and node.parent.type == "keyword_argument" \
                and node.parent.child_by_field_name("name") == node  # f(old=...) names the callee's parameter
            if (line[col - 1:col] == ".") == intent.after_dot and not keyword:  # a local is not an attribute
                yield row, col, col + len(intent.old), intent.new


def _call_sites(intent: Intent, doc: Document):
    if doc.tree is None:
        return
    for node in walk_rows(doc.tree.root_node, intent.row - SITE_ROWS, intent.row + SITE_ROWS):
        if node.type not in ("call", "call_expression"):
            continue
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or args is None or fn.text is None:
            continue
        name = fn.text.decode("utf-8", "replace").rsplit(".", 1)[-1]
        if name != intent.name or args.start_point[0] != args.end_point[0]:
            continue  # one-line argument lists only: the edit stays on one row
        row, bcol = args.end_point
        col = doc.char_col(row, bcol - 1)  # before ")"
        empty = args.named_child_count == 0
        text = intent.new.lstrip(", ") if empty else intent.new
        yield row, col, col, text


def _shape(tokens: list[str]) -> list[str]:
    return ["L" if LITERAL.match(t) else t for t in tokens]


def _same_shape_sites(intent: Intent, doc: Document):
    line = body(doc.lines[intent.row])
    if len(line) > MAX_LINE_CHARS:
        return
    edited = _shape([t[0] for t in _tokens(line)])
    old_tokens = [t[0] for t in _tokens(intent.old)]
    lines = doc.lines
    for row in range(max(0, intent.row - SITE_ROWS), min(len(lines), intent.row + SITE_ROWS + 1)):
        if intent.old not in lines[row] or len(lines[row]) > MAX_LINE_CHARS + 2:
            continue
        line = body(lines[row])
        toks = _tokens(line)
        words = [t[0] for t in toks]
        if difflib.SequenceMatcher(a=edited, b=_shape(words), autojunk=False).ratio() < SHAPE_RATIO:
            continue
        n = len(old_tokens)
        for k in range(len(words) - n + 1):
            if words[k:k + n] == old_tokens:
                yield row, toks[k][1], toks[k + n - 1][2], intent.new


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
