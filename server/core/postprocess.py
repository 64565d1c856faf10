"""Post-processing: from the engine's raw span text to an edit worth showing, or nothing.

In order: cut at the end of the syntactic unit (LINE/ARGS: the first line; BLOCK: the
indented body, or up to the closing brace, at most `max_lines` lines), cut a degenerate
repetition at the end (repetition.py: the lines before the loop, or nothing), keep the editor's
indentation, drop text that repeats the suffix (the rest of the line, or the next lines),
let the completion replace auto-closed brackets and quotes right of the cursor instead
of duplicating them (`Edit.replace` characters), and reject a completion whose insertion
adds parse errors (a block: cut to its first whole lines that add none, where some do). Returns
None when nothing is left.

Parse errors are checked twice. Tree-sitter counts errors in the context window with and
without the completion. A count alone is blind where the user's unfinished line already
breaks the window (an unclosed "(" is one large error, which any completion may replace
with another), and tree-sitter-python accepts some invalid code (`x = y:` followed by a
line parses as an annotated assignment). So for Python, CPython's own parser also reads
the window through the completed line, from the first statement start above the cursor
from which it parses: an error at or after the cursor line that the text without the
completion did not have rejects the completion, while input that is only unfinished (an
open bracket, a header awaiting its body, a string cut short) is fine. At ~950 cursors in
35 stdlib modules, a wrong ":" or ")" after the true rest of the line was caught 93% of
the time (by the count alone 30-40%), and no true rest of a line was rejected that the
count alone had accepted.

A request checks several candidates (drafts, the model's text, a completed name) in the same
windows, so the window's own error count is parsed once and kept (a few recent windows; a
window cut inside a docstring takes tree-sitter 5-7 ms to read on the development machine).
Text that cannot leave a string (no quote, backtick, backslash, brace or line end) inserted
where the document has the cursor in a string's text (not in an f-string field) cannot add an
error, so it is not parsed at all.

Works on the frozen Snapshot and Context only; it knows nothing of LSP (the caller turns
`Edit` into UTF-16 ranges) or of the engine.
"""

from __future__ import annotations

import ast
import codeop
import re
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import tree_sitter

from .context import Context, Mode, Snapshot
from .languages import (BACKTICK_STRINGS, CLOSERS, OPEN_CLOSE, QUOTES, count_errors, enclosing_blocks,
                        new_parser)
from .repetition import cut_loop


@dataclass(frozen=True)
class Edit:
    text: str  # inserted at the cursor
    replace: int  # characters right of the cursor that `text` replaces (auto-closed brackets/quotes)


def indent_width(line: str) -> int:
    """Columns of a line's indentation, a tab counted as 4: how the unit cut compares lines."""
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip(" "))


@dataclass(frozen=True)
class Unit:
    """Where a completion's syntactic unit ends: the one rule the server cuts and stops by,
    and the evaluation scores by (eval/metrics.py)."""

    mode: Mode
    header_indent: str  # indentation of the block's header line (BLOCK)
    max_lines: int  # lines of a BLOCK body at most
    braces: bool = False  # blocks close with "}" (not by indentation)
    right: str = ""  # the cursor line right of the cursor
    indented: bool = False  # the editor already indented the cursor: the first line's indent goes

    @classmethod
    def of(cls, snap: Snapshot) -> "Unit":
        return cls(snap.mode, snap.header_indent, snap.config.max_lines, not snap.syntax.indent_blocks, snap.right,
                   bool(snap.left) and snap.left.strip() == "")

    def cut(self, text: str) -> str:
        """`text` cut at the end of the unit (LINE/ARGS: the first line; BLOCK: the indented
        body, or up to the closing brace, at most `max_lines` lines)."""
        text = text.replace("\x00", "").replace("\r\n", "\n")
        if self.mode in (Mode.LINE, Mode.ARGS):
            return text.split("\n", 1)[0].rstrip()
        lines = text.split("\n")
        if self.indented:  # don't indent twice
            lines[0] = lines[0].lstrip(" \t")
        header = indent_width(self.header_indent)
        kept, tail = [lines[0]], None
        for line in lines[1:]:
            if len(kept) >= self.max_lines:
                break
            if line.strip() and indent_width(line) <= header:  # dedent: the body ended
                if self.braces and line.strip().startswith("}"):
                    # The block's own closing brace: keep it unless one is already right of the cursor,
                    # in which case end on the header's indentation so that brace lands in place.
                    tail = self.header_indent if self.right.strip().startswith("}") else line
                break
            kept.append(line)
        while len(kept) > 1 and not kept[-1].strip():
            kept.pop()
        if not any(ln.strip() for ln in kept):
            return ""
        return "\n".join(kept + ([tail] if tail is not None else []))

    def ended(self, text: str) -> bool:
        """True once `text`, a completion so far, already holds the end of the unit `cut`
        keeps (the engine then stops: the rest would be cut anyway)."""
        if self.mode in (Mode.LINE, Mode.ARGS):
            return "\n" in text
        lines = text.split("\n")
        header = indent_width(self.header_indent)
        for n, line in enumerate(lines):
            if n and line.strip() and indent_width(line) <= header:
                return True  # a dedent (settled once the line has a non-blank character)
        return len(lines) - 1 >= self.max_lines  # that many complete lines

    def __call__(self, text: str) -> bool:
        """`ended`: a Unit is the engine's stop rule itself, which a remote engine's client can
        send as data (wire.py) where a closure could not travel."""
        return self.ended(text)


def trim_unit(snap: Snapshot, text: str) -> str:
    """Cut `text` at the end of the syntactic unit the snapshot's mode asks for."""
    return Unit.of(snap).cut(text)


def unit_ended(snap: Snapshot, text: str) -> bool:
    """True once `text` already holds the end of the snapshot's unit."""
    return Unit.of(snap).ended(text)


def drop_suffix_repeats(snap: Snapshot, ctx: Context, text: str, replace: int) -> str:
    """Remove the part of `text` that repeats what already follows the cursor (after the
    `replace` auto-closed characters the completion takes over)."""
    rest = snap.right[replace:].rstrip()
    if "\n" not in text:
        head = text[:-len(rest)] if rest else text
        if rest and text.endswith(rest) and head and _unclosed(head) <= _unclosed(text):
            return head  # (unless the repeated tail closes a bracket the completion opened)
        if rest and rest.startswith(text.rstrip()):
            return ""  # the line already says it
        return text
    following = [ln.strip() for ln in ctx.suffix.split("\n")[1:] if ln.strip()]
    if following:
        lines = text.split("\n")
        for i in range(1, len(lines)):
            if lines[i].strip() and lines[i].strip() == following[0]:
                return "\n".join(lines[:i]).rstrip(" \t")
    return text


def _unclosed(text: str) -> int:
    stack: list[str] = []
    for ch in text:
        if ch in OPEN_CLOSE:
            stack.append(OPEN_CLOSE[ch])
        elif ch in CLOSERS and stack and stack[-1] == ch:
            stack.pop()
    return len(stack)


def closers_replaced(text: str, right: str) -> int:
    """How many auto-closed brackets/quotes at the start of `right` the completion itself closes."""
    ahead = ""
    for ch in right:
        if ch in CLOSERS or ch in QUOTES:
            ahead += ch
        else:
            break
    if not ahead:
        return 0
    stack: list[str] = []
    j = 0
    for ch in text:
        if ch in OPEN_CLOSE:
            stack.append(OPEN_CLOSE[ch])
        elif ch in CLOSERS:
            if stack and stack[-1] == ch:
                stack.pop()
            elif j < len(ahead) and ahead[j] == ch:
                j += 1
        elif ch in QUOTES:
            if stack and stack[-1] == ch:
                stack.pop()
            elif j < len(ahead) and ahead[j] == ch:
                j += 1
            else:
                stack.append(ch)
    return j


def adds_errors(snap: Snapshot, ctx: Context, text: str, replace: int) -> bool:
    """True when the window with `text` inserted parses with more errors than without, or
    (Python) when the completed statement has a syntax error the unfinished one had not."""
    grammar = snap.syntax.grammar
    if grammar is None:
        return False
    parser = new_parser(grammar)
    python = snap.syntax.name == "python"
    head = enclosing_blocks(ctx.prefix + ctx.suffix) if python else ""
    before = (head + ctx.prefix + ctx.suffix).encode("utf-8", "replace")
    after = (head + ctx.prefix + text + ctx.suffix[replace:]).encode("utf-8", "replace")
    tree = parser.parse(after)
    if count_errors(tree) > _errors_of(snap.syntax.name, parser, before):
        return True
    # CPython's reading only finishing a line already started (`if len(inde` + completion): on a
    # fresh line it rejected right next lines and blocks (held-out next_line exact 0.07 -> 0.04)
    started = ctx.prefix.rsplit("\n", 1)[-1].strip() != ""
    return python and started and _breaks_python(snap, ctx, text, replace, tree, head.count("\n"))


# Error counts of recent windows without a completion: (language, window bytes) -> count.
_WINDOW_ERRORS: OrderedDict[tuple[str, bytes], int] = OrderedDict()
_WINDOW_ERRORS_KEPT = 8  # a request's candidates share one; the engine's thread and the loop may interleave
_window_lock = threading.Lock()


def _errors_of(language: str, parser: tree_sitter.Parser, window: bytes) -> int:
    key = (language, window)
    with _window_lock:
        if key in _WINDOW_ERRORS:
            _WINDOW_ERRORS.move_to_end(key)
            return _WINDOW_ERRORS[key]
    errors = count_errors(parser.parse(window))  # outside the lock: parsing takes milliseconds
    with _window_lock:
        _WINDOW_ERRORS[key] = errors
        while len(_WINDOW_ERRORS) > _WINDOW_ERRORS_KEPT:
            _WINDOW_ERRORS.popitem(last=False)
    return errors


# Characters that can end a string (quotes, backticks, line ends) or start something inside one
# (f-string fields and template substitutions, escapes).
_LEAVES_STRING = frozenset("\"'`\\{}\n\r")


# What can end a comment (a line comment at the line's end, a block comment at `*/`) or nest
# another (Rust's block comments nest).
_LEAVES_COMMENT = ("\n", "\r", "*/", "/*")


def inert_in_prose(snap: Snapshot, text: str) -> bool:
    """Whether `text` inserted at the cursor stays plain string or comment content: the cursor
    is inside a string or a comment and the text holds nothing that could end it or open a
    field. Such text cannot change the parse, so it is not checked (a window cut inside a
    JSDoc block reads as broken code, and the check then blamed every completion)."""
    if snap.in_string:
        if snap.quote:  # only the string's own quote ends it: `'` in a docstring is prose
            leaves = _LEAVES_STRING - (QUOTES - {snap.quote})
        else:
            leaves = _LEAVES_STRING if snap.syntax.name in BACKTICK_STRINGS else _LEAVES_STRING - {"`"}
        return not any(ch in leaves for ch in text)
    return snap.in_comment and not any(s in text for s in _LEAVES_COMMENT)


# Parse only (no bytecode, so no constant folding); unfinished input raises "incomplete input".
_PARSE_FLAGS = ast.PyCF_ONLY_AST | codeop.PyCF_DONT_IMPLY_DEDENT | codeop.PyCF_ALLOW_INCOMPLETE_INPUT
# Invalid escapes and the like warn while parsing; they are no syntax errors. A filter set once
# for this source name (warnings.catch_warnings would swap the process's filters under other
# threads' feet: the checks run on the engine's thread).
_SOURCE_NAME = "<redraft-completion>"
# CPython 3.11 keeps the AST builder's depth counter per interpreter, not per call: two threads
# building ASTs at once can end one of them in "SystemError: AST constructor recursion depth
# mismatch" (python/cpython#106905). The server's own parses take turns; one from elsewhere in
# the process is retried once, then gives no verdict.
_parse_lock = threading.Lock()
warnings.filterwarnings("ignore", module=re.escape(_SOURCE_NAME))


def _breaks_python(snap: Snapshot, ctx: Context, text: str, replace: int, tree: tree_sitter.Tree,
                   head_rows: int = 0) -> bool:
    """True when CPython finds a syntax error at or after the cursor line, one the text without
    the completion did not have, reading from the first statement start in the window from which
    the text above the cursor line parses. `tree` is the window's with the completion in it,
    below `head_rows` lines of enclosing blocks."""
    lines = ctx.prefix.split("\n")  # window rows up to the cursor, the cursor line's left part last
    row = len(lines) - 1
    # Statement starts: the window's first row, the whole document's (the unfinished line may
    # make that tree start one inside the cursor's statement), the completed window's; none
    # indented deeper than the cursor line (its block ends before the cursor).
    found = max(0, _statement_start(tree, row + head_rows, len(lines[-1].encode("utf-8", "replace"))) - head_rows)
    indent = indent_width(lines[-1])
    starts = sorted({r for r in (0, found, *(a - ctx.first_row for a in snap.anchors if ctx.first_row <= a <= snap.row))
                     if 0 <= r <= row and indent_width(lines[r]) <= indent})
    rest = ctx.suffix[replace:].split("\n", 1)[0]
    start = starts[0] if starts else row
    for _ in range(_RESTARTS):
        head = "\n".join(lines[start:])
        cursor = (row - start + 1, len(_dedent(head).rsplit("\n", 1)[-1]) + 1)  # (line, column), 1-based
        before = _python_error(_dedent(head + ctx.suffix.split("\n", 1)[0]))
        if before is not None and before[0] < cursor[0]:  # broken above (a window starting in a docstring):
            start = next((r for r in starts if r > start + before[0] - 1), None)  # from past the breakage
            if start is None:
                return False
            continue
        after = _python_error(_dedent(head + text + rest), open_string=True)
        if after is None or after[0] < cursor[0]:
            return False
        # The user's unfinished text may hold an error already (an unterminated string): the
        # completion is to blame only when the first error now lies further on.
        return before is None or (before <= cursor and after > before)
    return False


_RESTARTS = 8  # statement starts tried past text above the cursor that does not parse


def _statement_start(tree: tree_sitter.Tree, row: int, column: int) -> int:
    """The row where the statement holding (row, column) starts: a mid-statement start would
    read as an unmatched bracket."""
    node = tree.root_node.descendant_for_point_range((row, column), (row, column))
    while node is not None and node.parent is not None and node.parent.type not in ("module", "block", "ERROR"):
        node = node.parent
    return row if node is None or node.parent is None else min(row, node.start_point[0])


def _dedent(source: str) -> str:
    """`source` moved left by its first line's indentation (continuation lines indented less lose theirs)."""
    lines = source.split("\n")
    indent = lines[0][:len(lines[0]) - len(lines[0].lstrip(" \t"))]
    return "\n".join(ln[len(indent):] if ln.startswith(indent) else ln.lstrip(" \t") for ln in lines)


def _python_error(source: str, open_string: bool = False) -> tuple[int, int] | None:
    """(line, column) of CPython's first syntax error in `source`; None when it parses or is only
    unfinished (an open bracket, a block header awaiting its body, a trailing operator; with
    `open_string`, a string left open on the last line, as a completion cut short leaves one)."""
    try:
        _parse(source)
    except SyntaxError as e:
        lines = source.split("\n")
        line, col = e.lineno or len(lines), e.offset or 0
        if e.msg == "incomplete input" or (line >= len(lines) and (
                col > len(lines[-1]) or (open_string and e.msg.startswith("unterminated string literal")))):
            return None  # on the last line, past its last character or in an open string: it goes on
        return line, col
    except (ValueError, MemoryError, RecursionError, SystemError):  # null bytes, absurd nesting: no verdict
        return None
    return None


def _parse(source: str) -> None:
    with _parse_lock:
        try:
            compile(source, _SOURCE_NAME, "exec", _PARSE_FLAGS)
        except SystemError:  # another thread's AST build crossed this one (see _parse_lock)
            compile(source, _SOURCE_NAME, "exec", _PARSE_FLAGS)


COMMENT_END = "*/"


def before_comment_end(snap: Snapshot, text: str) -> str:
    """Inside a block comment whose `*/` follows the cursor on its line, the completion up to
    its own `*/` (copied from a comment that ended there), without the space the line already
    has before it: the comment's end stays the document's."""
    if not snap.in_comment or not snap.right.lstrip().startswith(COMMENT_END) or COMMENT_END not in text:
        return text
    text = text[:text.index(COMMENT_END)]
    return text.rstrip() if snap.right[:1].isspace() else text


def finish(snap: Snapshot, ctx: Context, raw: str) -> Edit | None:
    text = before_comment_end(snap, cut_loop(trim_unit(snap, raw)))
    replace = closers_replaced(text, snap.right)
    text = drop_suffix_repeats(snap, ctx, text, replace)
    if not text.strip():
        return None
    replace = min(replace, closers_replaced(text, snap.right))
    if not inert_in_prose(snap, text) and adds_errors(snap, ctx, text, replace):
        return first_lines_that_parse(snap, ctx, text)
    return Edit(text, replace)


BLOCK_CUTS = 4  # cuts of a block tried at most: each parses the window again
_OPENS = (":", "{", "(", "[", ",", "\\", "=", "->")  # a line ending so waits for more


def first_lines_that_parse(snap: Snapshot, ctx: Context, text: str) -> Edit | None:
    """A block that adds a parse error, cut to the most of its first whole lines that add none:
    a body whose first lines are right is worth showing without the broken line that follows
    them. Never a cut whose last line opens something it does not close (a header, a bracket,
    a continued expression); at most BLOCK_CUTS cuts tried, the longest first. None for other
    units, or when no cut stands."""
    if snap.mode is not Mode.BLOCK:
        return None
    lines = text.split("\n")
    tried = 0
    for k in range(len(lines) - 1, 0, -1):
        cut = "\n".join(lines[:k]).rstrip()
        if not cut.strip() or cut.endswith(_OPENS) or _unclosed(cut) > 0:
            continue
        if tried == BLOCK_CUTS:
            return None
        tried += 1
        replace = closers_replaced(cut, snap.right)
        if not adds_errors(snap, ctx, cut, replace):
            return Edit(cut, replace)
    return None
