"""The context builder: what to ask the engine for at a cursor.

`take_snapshot` runs on the event loop, where the document and its tree are current: it
decides the mode at the cursor from the tree (or from the text, for plain-text documents)
and freezes what background work needs into an immutable Snapshot (the lines are a tuple
of immutable strings, so later edits cannot reach it). `build` runs on the inference
thread: it cuts the prefix and suffix windows at line boundaries within a token budget,
then back to the nearest statement boundaries (from the tree, frozen as row numbers), and
picks the span budget for the mode.

Modes: LINE (finish the rest of the line), BLOCK (a new block body after ':' or '{'), ARGS
(inside an argument list) and NONE (mid-identifier with word characters right of the
cursor, inside a string or a comment unless enabled, other text right of the cursor,
binary-looking text): NONE answers nothing without running the model. Inside a comment only
LINE applies (a comment line ending in ':' or '(' opens no block).

Size: nothing here reads the whole document. A snapshot freezes only the lines within
`snapshot_lines(config)` rows of the cursor (more than the windows can take: whole lines of at
least one character each within the token budget, 3,074 each side at the default budget),
and statement rows only there; the cursor line is examined at most LONG_LINE_CHARS each side
of the cursor (binary text, open parentheses) and drafts match at most DRAFT_BEFORE_CHARS
before it; a window made of one huge line is cut before it is tokenized. For documents of
ordinary size the snapshot holds every line and nothing changes.

It knows nothing of LSP messages or the engine beyond a token-counting function.
"""

from __future__ import annotations

import bisect
import enum
import re
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Callable, NamedTuple

from . import draftsearch as draft_search
from .drafts import DraftIndex
from .linecopy import plain_copy_at
from .copying import CopyLookup
from .document import Document, body, utf8_len
from .languages import (ARGUMENT_TYPES, CLOSERS, COMMENT_TYPES, FIELD_TYPES, QUOTES, STRING_TYPES, Syntax,
                        children_in_rows, syntax_for)
from .review import Review, prose_in_tree
from .scope import Scope, scope_at
from .settings import ServerConfig

_INDENT = re.compile(r"[ \t]*")
CHARS_PER_TOKEN = 3.0  # first estimate for code; the window is then checked with the real tokenizer
# The cursor line is examined this many characters each side of the cursor: a longer line is
# minified or generated text, and scanning it per keystroke is what a 5 MB line must not cost.
LONG_LINE_CHARS = 4096
# A single piece (a line) longer than this many times its token budget in characters is cut
# before the real tokenizer counts it: no code tokenizes at 24 characters per token.
CUT_FACTOR = 8
CUT_GRID = 64  # characters: where a prefix window that starts inside one long line may start


class Mode(str, enum.Enum):
    LINE = "line"
    BLOCK = "block"
    ARGS = "args"
    NONE = "none"


@dataclass(frozen=True)
class Snapshot:
    uri: str
    version: int
    syntax: Syntax
    lines: tuple[str, ...]  # the document's rows first .. first + len(lines) - 1 (a window around the cursor)
    row: int  # the cursor's row in the document
    col: int  # character index into the line body
    mode: Mode
    reason: str  # why this mode (for logs and tests)
    header_indent: str  # indentation of the line that opens the block (BLOCK), else of the cursor line
    config: ServerConfig
    extra: str = ""  # extra context (extra.py), ahead of the prefix
    drafts: tuple[Draft, ...] = ()  # continuations of matching code, best first (drafts.py)
    anchors: tuple[int, ...] = ()  # rows where statements start (windows are cut there)
    first: int = 0  # document row of lines[0]
    nlines: int = -1  # lines in the document (-1: len(lines), the whole document)
    lookup: CopyLookup | None = None  # the cache model's lookup over the drafts' indexes (copying.py)
    in_string: bool = False  # the cursor is in the text of a string or docstring, not in an f-string field (drafts answer there: inference.py)
    in_comment: bool = False  # the cursor is in a comment (drafts answer there too)
    quote: str = ""  # the quote that ends the string the cursor is in, where the grammar shows it
    scope: Scope | None = None  # the names in scope at the cursor, in code (scope.py)

    @property
    def in_prose(self) -> bool:
        """Inside a string or a comment: text for people, where drafts answer alone."""
        return self.in_string or self.in_comment

    def __post_init__(self) -> None:
        if self.nlines < 0:
            object.__setattr__(self, "nlines", self.first + len(self.lines))

    def line(self, row: int) -> str:
        """Document row `row`, which must lie in the window."""
        return self.lines[row - self.first]

    @cached_property
    def left(self) -> str:  # (cached: post-processing reads it after every denoising step)
        return body(self.line(self.row))[:self.col]

    @cached_property
    def right(self) -> str:
        return body(self.line(self.row))[self.col:]

    @cached_property
    def closers_only(self) -> bool:
        """The rest of a line or argument list is nothing but closing brackets and quotes (an
        editor's auto-closed `)`, `"]`, a docstring's quotes). The model is not shown them
        (inference.model_view): it writes the line to its end, as where nothing follows the cursor,
        and the edit replaces those it closes itself (postprocess.closers_replaced)."""
        rest = self.right.rstrip()
        return self.mode in (Mode.LINE, Mode.ARGS) and bool(rest) and all(ch in CLOSERS or ch in QUOTES for ch in rest)


@dataclass(frozen=True)
class Draft:
    """A proposed completion from the code itself, frozen for the inference thread."""

    text: str
    source: str  # buffer | open | recent
    foreign: tuple[str, ...] = ()  # names it uses that are not in scope at the cursor (review.py)
    guesses: tuple[str, ...] = ()  # for each foreign name, the one likely meant instead ("": none known)


@dataclass(frozen=True)
class Context:
    prefix: str
    suffix: str
    extra: str
    span: int  # engine span budget in tokens
    first_row: int  # first line of the prefix window
    last_row: int  # last line of the suffix window


def _indent(line: str) -> str:
    return _INDENT.match(line).group()


def _binary(text: str) -> bool:
    if "\x00" in text:
        return True
    controls = sum(1 for ch in text if ch < " " and ch not in "\t\r\n")
    return controls > max(2, len(text) // 20)


def _ancestors(doc: Document, row: int, col: int):
    """(node, cursor point) pairs from the smallest named node at the cursor up to the root
    (points compare as byte offsets do, without summing the lines above)."""
    bc = utf8_len(doc.lines[row][:col])
    node = doc.tree.root_node.named_descendant_for_point_range((row, max(bc - 1, 0)), (row, bc))
    while node is not None:
        yield node, (row, bc)
        node = node.parent


class Detected(NamedTuple):
    mode: Mode
    reason: str
    header_indent: str
    in_string: bool = False
    in_comment: bool = False
    quote: str = ""  # in a string: the quote character that would end it ("" when unknown)


def _opening_quote(doc: Document, node) -> str:
    """The quote character a string node opens with, past a prefix such as Python's `rb` or
    Rust's `r#` ("" when it does not start with a quote: a grammar's inner content node)."""
    row, bcol = node.start_point
    start = doc.char_col(row, bcol)
    head = doc.lines[row][start:start + 8].lstrip("rRbBuUfFtT#@")
    return head[:1] if head[:1] in QUOTES else ""


def detect(doc: Document, row: int, col: int, config: ServerConfig) -> Detected:
    """The mode at a cursor inside `doc`, why, the header indentation, and whether the cursor
    is inside a string or a comment."""
    line = doc.line_body(row)
    indent = _indent(line)
    at = col
    if len(line) > 2 * LONG_LINE_CHARS:  # minified or generated: only the text around the cursor counts
        cut = max(0, col - LONG_LINE_CHARS)
        line, at = line[cut:col + LONG_LINE_CHARS], col - cut
    left, right = line[:at], line[at:]
    if _binary(line) or _binary(left[-200:]):
        return Detected(Mode.NONE, "binary", "")
    if right[:1].isalnum() or right[:1] == "_":
        return Detected(Mode.NONE, "mid-identifier", "")
    in_args = in_string = in_field = in_comment = False
    quote = ""
    if doc.tree is not None:
        for node, b in _ancestors(doc, row, col):  # innermost first
            if node.type in COMMENT_TYPES and node.start_point < b <= node.end_point:
                if not config.comments:
                    return Detected(Mode.NONE, "comment", "")
                in_comment = True
            elif node.type in FIELD_TYPES and node.start_point < b < node.end_point:
                in_field = True  # code inside a string: the strings around it do not count
            elif node.type in STRING_TYPES and node.start_point < b < node.end_point and not in_field:
                if not config.strings:
                    return Detected(Mode.NONE, "string", "", True)
                in_string = True
                quote = _opening_quote(doc, node) or quote  # the outermost string node tells
            elif node.type in ARGUMENT_TYPES and node.start_point < b < node.end_point:
                in_args = True
    # An unclosed "(" parses as an ERROR node, not an argument list: the text tells then.
    in_args = in_args or _open_parens(left) > 0
    rest = right.strip()
    only_closers = all(ch in CLOSERS or ch in QUOTES or ch in ";,: " for ch in rest)
    if in_comment:  # prose (or commented-out code): the rest of the line, nothing more
        if only_closers or rest == "*/":  # (a block comment's end: the completion goes before it)
            return Detected(Mode.LINE, "rest of a comment line", indent, in_comment=True)
        return Detected(Mode.NONE, "text right of the cursor", "", in_comment=True)
    if in_string:  # prose too: a docstring's `Args:` or `:param config:` opens no block
        if only_closers:
            return Detected(Mode.LINE, "rest of a string line", indent, True, quote=quote)
        return Detected(Mode.NONE, "text right of the cursor", "", True, quote=quote)
    openers = doc.syntax.block_openers
    if left.strip() == "" and not rest:
        prev = _previous_nonblank(doc, row)
        if prev is not None and body(doc.lines[prev]).rstrip().endswith(openers):
            return Detected(Mode.BLOCK, "new line after a block opener", _indent(doc.line_body(prev)), in_string,
                            quote=quote)
    if left.rstrip().endswith(openers) and (not rest or rest in ("}",)) and not in_args:
        return Detected(Mode.BLOCK, "after a block opener", indent, in_string, quote=quote)
    if in_args:
        return Detected(Mode.ARGS, "argument list", indent, in_string, quote=quote)
    if only_closers:
        return Detected(Mode.LINE, "rest of line", indent, in_string, quote=quote)
    return Detected(Mode.NONE, "text right of the cursor", "", in_string, quote=quote)


def _open_parens(left: str) -> int:
    depth = 0
    for ch in left:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
    return depth


def _previous_nonblank(doc: Document, row: int) -> int | None:
    for r in range(row - 1, max(-1, row - 50), -1):
        if doc.lines[r].strip():
            return r
    return None


@dataclass(frozen=True)
class AskedMode:
    """What a caller without an editor asks for instead of the mode found at the cursor.

    `mode` replaces the detected mode (the evaluation knows each sample's unit), or, with
    `only_if_none`, replaces only NONE (an HTTP client asks for whatever follows the cursor;
    binary text still answers nothing). `header_indent` is the block header's indentation
    (default: the cursor line's, as `detect` gives it)."""

    mode: Mode
    reason: str
    header_indent: str | None = None
    only_if_none: bool = False


def take_snapshot(doc: Document, row: int, col: int, config: ServerConfig, extra: str = "",
                  drafts: tuple[Draft, ...] = (), asked: AskedMode | None = None) -> Snapshot:
    mode, reason, indent, in_string, in_comment, quote = detect(doc, row, col, config)
    if asked is not None and (not asked.only_if_none or (mode is Mode.NONE and reason != "binary")):
        reason = f"{asked.reason}, {reason}" if asked.only_if_none else asked.reason
        mode, indent = asked.mode, _indent(doc.line_body(row)) if asked.header_indent is None else asked.header_indent
    reach = snapshot_lines(config)
    first, end = max(0, row - reach), min(len(doc.lines), row + reach + 1)
    if first > 0 or end < len(doc.lines):
        doc.note_limit("snapshot", f"over {reach} lines each side of the cursor: snapshots keep a window")
    scope = None if mode is Mode.NONE or in_string or in_comment else scope_at(doc, row, col)
    return Snapshot(doc.uri, doc.version, doc.syntax, tuple(doc.lines[first:end]), row, col, mode, reason, indent,
                    config, extra, drafts, statement_rows(doc, row, first=first, last=end), first, len(doc.lines),
                    in_string=in_string, in_comment=in_comment, quote=quote, scope=scope)


# Post-processing judges a completion in windows of at least this many tokens (estimated from
# characters; the `contextTokens` setting where larger): the model's window is sized for encode
# time and may end inside the list a completion opens, which would then read as an error.
CHECK_TOKENS = 1024


def check_tokens(config: ServerConfig) -> int:
    """The budget of the windows post-processing judges completions in (pipeline.document_windows)."""
    return max(config.context_tokens, CHECK_TOKENS)


def snapshot_lines(config: ServerConfig) -> int:
    """Lines each side of the cursor a snapshot keeps: more than `build` can take, which is whole
    lines of at least one character (1 / CHARS_PER_TOKEN tokens by its estimate) within the
    largest budget (the check windows'), plus the cursor line's part and a last line without a
    terminator."""
    return int(check_tokens(config) * CHARS_PER_TOKEN) + 2


DRAFT_CONTEXT_LINES = 8  # lines above the cursor a draft's match may reach back into
# Characters before the cursor a draft's match may cover: matches past ~50 characters are
# nearly always right already (drafts.py), and this keeps a 5 MB line from being compared.
DRAFT_BEFORE_CHARS = 4096
# The plain copy's window (linecopy.py): its nearest match above, its first below.
PLAIN_ABOVE_CHARS, PLAIN_BELOW_CHARS = 16384, 4096


@dataclass(frozen=True)
class Copies:
    """Where copies for a cursor come from: the text before it and the indexes to search."""

    before: str
    sources: tuple[draft_search.DraftSource, ...]
    kind: str | None  # the cursor's syntactic kind (drafts of the same kind rank higher)
    lines: int  # lines of each continuation
    around: tuple[str, str] = ("", "")  # bounded text before and after the cursor, for the plain copy
    review: Review | None = None  # what may be offered at the cursor (review.py)

    def drafts(self, limit: int) -> tuple[Draft, ...]:
        # Twice as many looked up: the review may turn some down (code copied into a comment).
        wanted = limit if self.review is None else 2 * limit
        found: list[Draft] = []
        for c in draft_search.lookup(self.before, self.sources, lines=self.lines, kind=self.kind, limit=wanted):
            draft = self._reviewed(c.text, c.source, (c.uri, c.row, c.col))
            if draft is not None and all(d.text != draft.text for d in found):  # (renamed ones may meet)
                found.append(draft)
            if len(found) == limit:
                return tuple(found)
        if self.lines > 1:
            return tuple(found)
        # Last on a line: the plain copy (linecopy.py), whose short keys and matches below the
        # cursor answer where the index finds nothing.
        copied = plain_copy_at(*self.around)
        if copied is None or any(d.text == copied[0] for d in found):
            return tuple(found)
        draft = self._reviewed(copied[0], "buffer", self._place(copied[1]))
        return tuple(found) if draft is None or any(d.text == draft.text for d in found) else (*found, draft)

    def _reviewed(self, text: str, source: str, origin: tuple[str, int, int] | None) -> Draft | None:
        if self.review is None:
            return Draft(text, source)
        at = self.review.index_of(self.sources, source, origin)
        got = None if at is None else self.review.draft(text, origin, *at)
        return None if got is None else Draft(got[0], source, got[1], got[2])

    def _place(self, at: int) -> tuple[str, int, int] | None:
        return None if self.review is None else self.review.place(self.around, at)

    def lookup(self) -> CopyLookup:
        """The cache model's lookup; one line more than drafts, so that it knows how lines end."""
        return CopyLookup(self.before, self.sources, self.lines + 1)


def find_drafts(doc: Document, index: DraftIndex | None, row: int, col: int, mode: Mode, max_lines: int,
                others: list[tuple[str, DraftIndex]] = (),
                recent: list[tuple[str, int]] = (), limit: int = 4) -> tuple[Draft, ...]:
    """Drafts for a cursor: continuations of the longest matches of the text before it in this
    document (`index`, kept in step with `doc`), in other open documents ((uri, index) pairs)
    and in recent snippets ((text, first row) pairs), ranked by draftsearch.lookup."""
    return copies(doc, index, row, col, mode, max_lines, others, recent).drafts(limit)


def copies(doc: Document, index: DraftIndex | None, row: int, col: int, mode: Mode, max_lines: int,
           others: list[tuple[str, DraftIndex]] = (), recent: list[tuple[str, int]] = (),
           workspace: list[tuple[str, DraftIndex]] = ()) -> Copies:
    """The text before a cursor and the indexes to search for code that continues it (see
    `find_drafts`; `workspace`: (uri, index) of files that are not open, workspace.py)."""
    line = doc.lines[row]
    before = [line[max(0, col - DRAFT_BEFORE_CHARS):col]]
    size = len(before[0])
    for r in range(row - 1, max(-1, row - DRAFT_CONTEXT_LINES - 1), -1):
        if size >= DRAFT_BEFORE_CHARS:
            break
        before.append(doc.lines[r])
        size += len(doc.lines[r])
    before = "".join(reversed(before))[-DRAFT_BEFORE_CHARS:]
    tree = doc.tree
    kind = None if tree is None else draft_search.syntactic_kind(tree, row, utf8_len(line[:col]))
    sources = []
    if index is not None:  # None: the document is too large to index (drafts.MAX_INDEX_BYTES)
        sources.append(draft_search.DraftSource(index, "buffer", doc.uri, (row, col),
                                               kind_at=None if tree is None else draft_search.tree_kind_at(tree, index)))
    sources += [draft_search.DraftSource(ix, "open", uri) for uri, ix in others]
    sources += [draft_search.recent_source(text, doc.uri, first) for text, first in recent]
    sources += [draft_search.DraftSource(ix, "workspace", uri) for uri, ix in workspace]
    around = _around(doc, row, col) if mode is not Mode.BLOCK else ("", "")
    review = None
    if tree is not None:
        review = Review(doc, row, col, prose_in_tree(tree, row, utf8_len(line[:col])))
    return Copies(before, tuple(sources), kind, max_lines if mode is Mode.BLOCK else 1, around, review)


def _around(doc: Document, row: int, col: int) -> tuple[str, str]:
    """The document's text before the cursor (PLAIN_ABOVE_CHARS at most, whole lines but the
    cursor's) and after it (PLAIN_BELOW_CHARS at most): bounded, whatever the document's size."""
    line = doc.lines[row]
    above, r = [line[max(0, col - PLAIN_ABOVE_CHARS):col]], row - 1
    size = len(above[0])
    while r >= 0 and size < PLAIN_ABOVE_CHARS:
        above.append(doc.lines[r])
        size += len(doc.lines[r])
        r -= 1
    below, size, r = [line[col:col + PLAIN_BELOW_CHARS]], len(line) - col, row + 1
    while r < len(doc.lines) and size < PLAIN_BELOW_CHARS:
        below.append(doc.lines[r])
        size += len(doc.lines[r])
        r += 1
    return "".join(reversed(above))[-PLAIN_ABOVE_CHARS:], "".join(below)[:PLAIN_BELOW_CHARS]


def text_snapshot(uri: str, text: str, cursor: int, config: ServerConfig, language: str = "",
                  path: str = "", asked: AskedMode | None = None) -> tuple[Snapshot, Document]:
    """The server's snapshot of a whole text with the cursor at character `cursor`, and the
    document made for it (the CLI, the evaluation and the HTTP API, which have no editor)."""
    doc = Document(uri, text, 1, language, syntax_for(language, path or uri))
    before = text[:cursor]
    row, col = before.count("\n"), len(before) - (before.rfind("\n") + 1)
    return take_snapshot(doc, row, col, config, asked=asked), doc


def own_drafts(snap: Snapshot, doc: Document, config: ServerConfig,
               index: DraftIndex | None = None,
               workspace: list[tuple[str, DraftIndex]] = ()) -> Snapshot:
    """The snapshot with drafts and the cache model's lookup from its own document only (per
    the drafts and cache settings), and from `workspace` files when given (the evaluation's)."""
    if config.drafts == "off" and not config.cache:
        return snap
    index = index or DraftIndex(doc.lines)
    found = copies(doc, index, snap.row, snap.col, snap.mode, config.max_lines, workspace=workspace)
    return replace(snap, drafts=() if config.drafts == "off" else found.drafts(config.max_drafts),
                   lookup=found.lookup() if config.cache else None)


def _fit(pieces, budget: int, count: Callable[[str], int], from_end: bool) -> str:
    """Join as many whole pieces (lines, nearest the cursor first) as fit in `budget` tokens."""
    taken: list[str] = []
    est = 0.0
    for p in pieces:
        cost = len(p) / CHARS_PER_TOKEN
        if taken and est + cost > budget:
            break
        taken.append(p)
        est += cost
    text = "".join(reversed(taken) if from_end else taken)
    most = int(budget * CHARS_PER_TOKEN) * CUT_FACTOR
    if len(taken) == 1 and len(text) > most:  # one huge line: no need to tokenize all of it
        text = text[_grid(len(text) - most):] if from_end else text[:most]
        taken = [text]
    real = count(text)
    while real > budget and len(taken) > 1:  # the estimate was low: drop far lines proportionally
        taken = taken[:max(1, int(len(taken) * budget / real) - 1)]
        text = "".join(reversed(taken) if from_end else taken)
        real = count(text)
    if real > budget:  # one piece alone is too long (e.g. a 20k-character line): cut inside it
        keep = int(budget * CHARS_PER_TOKEN)
        text = text[_grid(len(text) - keep):] if from_end else text[:keep]
    return text


def _grid(cut: int) -> int:
    """`cut` rounded up to a multiple of CUT_GRID (0 if negative): a prefix window cut inside
    one long line starts there, so its start stays put while the user types and the engine
    reuses its keys/values."""
    return -(-max(cut, 0) // CUT_GRID) * CUT_GRID


def window_tokens(config: ServerConfig, limit: int | None = None) -> int:
    """The context a request may carry, in tokens: the `contextTokens` setting within `limit`
    (the engine's `context_budget`, what the model was trained on), None: no model's limit."""
    return config.context_tokens if limit is None else min(config.context_tokens, limit)


def build(snap: Snapshot, count: Callable[[str], int], limit: int | None = None) -> Context:
    cfg = snap.config
    total = window_tokens(cfg, limit)
    extra = snap.extra
    if extra:
        used = count(extra)
        if used > int(total * cfg.extra_share):
            extra, used = "", 0  # cut nowhere inside: a cut would move with every keystroke
        total -= used
    suffix_budget = max(8, int(total * cfg.suffix_share))
    prefix_budget = max(8, total - suffix_budget)
    lines, row, at = snap.lines, snap.row, snap.row - snap.first  # `at`: the cursor row in the window
    line = lines[at]
    left, rest_of_line = line[:snap.col], line[snap.col:]

    def before():
        yield left
        for r in range(at - 1, -1, -1):
            yield lines[r]

    def after():
        yield rest_of_line
        for r in range(at + 1, len(lines)):
            yield lines[r]

    prefix = _fit(before(), prefix_budget, count, from_end=True)
    suffix = _fit(after(), suffix_budget, count, from_end=False)
    span = cfg.block_tokens if snap.mode is Mode.BLOCK else cfg.line_tokens
    first = row - prefix.count("\n")
    last = row + suffix.count("\n")
    # At syntax-node boundaries: drop the partial statement at either end of the window (when
    # that keeps most of it), so the model never starts mid-statement and the prefix window's
    # start only moves when it crosses a whole node, which keeps its keys/values reusable.
    start = _anchor_after(snap.anchors, first, row)
    if start is not None and start > first and (start - first) * 2 < row - first:
        prefix = prefix[_nth_newline(prefix, start - first) + 1:]
        first = start
    end = _anchor_before(snap.anchors, last, row)
    # (Not where the window reaches the document's end: nothing is cut there, and the statement
    # starts come from a parse the unfinished line breaks, which may file the closing `]` of a
    # list below the cursor as a partial statement of its own.)
    if end is not None and end <= last and (last + 1 - end) * 2 < last - row and last < snap.nlines - 1:
        suffix = suffix[:_nth_newline(suffix, end - row) + 1]
        last = end - 1
    return Context(prefix, suffix, extra, span, first, last)


def _anchor_after(anchors: tuple[int, ...], first: int, row: int) -> int | None:
    """The first statement start at or after `first` (and at or before the cursor row)."""
    i = bisect.bisect_left(anchors, first)
    return anchors[i] if i < len(anchors) and anchors[i] <= row else None


def _anchor_before(anchors: tuple[int, ...], last: int, row: int) -> int | None:
    """The last statement start in (row, last + 1]: the window ends just before it."""
    i = bisect.bisect_right(anchors, last + 1) - 1
    return anchors[i] if i >= 0 and anchors[i] > row + 1 else None


def _nth_newline(text: str, n: int) -> int:
    """Index of the n-th (1-based) newline in `text`."""
    at = -1
    for _ in range(n):
        at = text.index("\n", at + 1)
    return at


def statement_rows(doc: Document, row: int, depth: int = 3, first: int = 0, last: int | None = None
                   ) -> tuple[int, ...]:
    """Rows where statements start: the top-level nodes, and down the nodes that hold `row`
    (class, function, ...), their bodies' statements, `depth` levels deep; only nodes that
    reach into rows first..last (the snapshot's window) are visited."""
    if doc.tree is None:
        return ()
    rows: set[int] = set()
    node = doc.tree.root_node
    for _ in range(depth):
        holder = None
        for child in children_in_rows(node, first, last):
            if not child.is_named:
                continue
            start, end = child.start_point[0], child.end_point[0]
            rows.add(start)
            if start < row <= end:
                holder = child
        if holder is None:
            break
        node = holder.child_by_field_name("body") or holder
    return tuple(sorted(rows))
