"""One open document: its lines, version, language, and a tree-sitter tree kept in step.

Edits arrive as LSP ranges in UTF-16 code units; the document turns them into Python
character indices, applies them to its list of lines, tells the tree what moved
(`tree.edit`, in UTF-8 bytes and byte columns) and re-parses incrementally, reading the
text line by line through a callback so that a keystroke in a large file never re-encodes
the whole file.

Size: an edit costs the lines it touches (list splices aside, which are memmoves), and the
document's size is kept per edit, never summed. Documents beyond MAX_PARSE_BYTES keep no
tree (plain-text contexts); like every other size limit (drafts.MAX_INDEX_BYTES,
extra.MAX_DOC_BYTES, nextedit's windows, context.SNAPSHOT_LINES), crossing it is logged
once per document (`Document.note_limit`).

Lines are split on "\\n" only and keep their terminator; a line's *body* drops "\\n" and a
trailing "\\r". Out-of-range edit positions are clamped to the document, as editors do. Lone
UTF-16 surrogates (which JSON can carry but UTF-8 cannot) become U+FFFD as text arrives, so
that encoding a line for the parser or the tokenizer never fails.

It knows nothing of models, requests or the LSP transport.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable

import tree_sitter

from .languages import Syntax, new_parser

log = logging.getLogger(__name__)

_SURROGATE = re.compile("[\ud800-\udfff]")  # lone surrogates, which only a hostile client sends

# Larger documents get plain-text contexts. A full parse runs on the event loop: ~180 ms for
# 1 MB of stdlib Python on the 2-core development machine (once, on open or a large paste);
# an incremental re-parse after a keystroke ~3 ms at 1 MB, ~7 ms when the edit changes how
# the rest of the file parses (an unclosed bracket). Both are C work, bounded by this size.
MAX_PARSE_BYTES = 1 << 20
READ_CHUNK = 1 << 10  # bytes handed to the parser per read, about: a keystroke's re-parse reads ~100 times


def without_surrogates(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (the text itself when it has none)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


def split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [s + "\n" for s in lines[:-1]] + [lines[-1]]


def body(line: str) -> str:
    """A line without its terminator."""
    if line.endswith("\n"):
        line = line[:-1]
    return line[:-1] if line.endswith("\r") else line


def utf16_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-16-le")) // 2


def utf16_to_index(s: str, units: int) -> int | None:
    """Character index of UTF-16 column `units` in `s`; None when past its end or negative.
    A column inside a surrogate pair rounds to the character after it."""
    if units < 0:
        return None
    if s.isascii():
        return units if units <= len(s) else None
    if _SURROGATE.search(s, 0, units) is None:
        # The first `units` characters hold at least `units` UTF-16 units: encoding only those
        # keeps a column on a very long line at C speed. A cut inside a pair leaves its high
        # surrogate, which decodes as one character: the one after the pair.
        head = s[:units].encode("utf-16-le")
        if len(head) < 2 * units:
            return None
        return len(head[:2 * units].decode("utf-16-le", "surrogatepass"))
    n = 0  # lone surrogates (which could pair up when encoded): count character by character
    for i, ch in enumerate(s):
        if n >= units:
            return i
        n += 2 if ord(ch) > 0xFFFF else 1
    return len(s) if units <= n else None


def utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8"))


@dataclass(frozen=True)
class Change:
    """One applied edit, in character coordinates, for the edit history."""

    line: int  # first line touched
    old_lines: int  # lines the replaced range spanned
    new_lines: int  # lines the inserted text spans
    removed: str
    inserted: str


class Document:
    def __init__(self, uri: str, text: str, version: int, language_id: str, syntax: Syntax):
        self.uri = uri
        self.version = version
        self.language_id = language_id
        self.syntax = syntax
        self.lines = split_lines(without_surrogates(text))
        self._blen = [utf8_len(s) for s in self.lines]  # UTF-8 bytes per line, kept per edit
        self._size = sum(self._blen)  # their sum, kept per edit
        self._noted: set[str] = set()  # size limits already logged for this document
        self._parser = new_parser(syntax.grammar) if syntax.grammar is not None else None
        self.tree: tree_sitter.Tree | None = None
        self._reparse(full=True)

    # -- reading -------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return "".join(self.lines)

    @property
    def size_bytes(self) -> int:
        return self._size

    def note_limit(self, what: str, message: str) -> bool:
        """Log `message` the first time this document crosses the size limit `what`; True then."""
        if what in self._noted:
            return False
        self._noted.add(what)
        log.info("%s: %s", self.uri, message)
        return True

    def line_body(self, row: int) -> str:
        return body(self.lines[row])

    def char_position(self, line: int, character: int) -> tuple[int, int] | None:
        """(row, character index) of an LSP position, or None when it lies outside the document."""
        if not 0 <= line < len(self.lines):
            return None
        col = utf16_to_index(self.line_body(line), character)
        return None if col is None else (line, col)

    def char_col(self, row: int, bcol: int) -> int:
        """The character index of a tree-sitter byte column on `row`."""
        return len(self.lines[row].encode()[:bcol].decode("utf-8", "replace"))

    def byte_point(self, row: int, col: int) -> tuple[int, tuple[int, int]]:
        """(byte offset, (row, byte column)) of a character position, for tree-sitter."""
        bcol = utf8_len(self.lines[row][:col])
        return sum(self._blen[:row]) + bcol, (row, bcol)

    # -- editing -------------------------------------------------------------------------

    def apply(self, changes: list[tuple[tuple[int, int, int, int] | None, str]], version: int,
              on_change: Callable[[Change], None] | None = None) -> list[Change]:
        """Apply LSP content changes in order: ((start line, start utf16, end line, end utf16) or
        None for the whole text, new text). Re-parses once at the end. `on_change` sees each
        change right after it is applied (lines change.line .. + new_lines are then the new ones)."""
        applied: list[Change] = []
        full = False
        for rng, text in changes:
            text = without_surrogates(text)
            if rng is None:
                old = self.text
                self.lines = split_lines(text)
                self._blen = [utf8_len(s) for s in self.lines]
                self._size = sum(self._blen)
                applied.append(Change(0, old.count("\n") + 1, len(self.lines), old, text))
                full = True
            else:
                applied.append(self._edit(*self._clamp(*rng), text))
            if on_change is not None:
                on_change(applied[-1])
        self.version = version
        self._reparse(full=full)
        return applied

    def _clamp(self, sl: int, sc: int, el: int, ec: int) -> tuple[int, int, int, int]:
        last = len(self.lines) - 1

        def one(line: int, units: int) -> tuple[int, int]:
            if line > last:
                return last, len(self.line_body(last))
            line = max(line, 0)
            b = self.line_body(line)
            col = utf16_to_index(b, max(units, 0))
            return line, len(b) if col is None else col

        start, end = one(sl, sc), one(el, ec)
        if end < start:
            start, end = end, start
        return (*start, *end)

    def _edit(self, sl: int, sc: int, el: int, ec: int, text: str) -> Change:
        lines = self.lines
        head, tail = lines[sl][:sc], lines[el][ec:]
        joined = "".join(lines[sl:el + 1])
        removed = joined[len(head):len(joined) - len(tail)]
        new = split_lines(head + text + tail)
        if self.tree is not None:
            start_byte, start_pt = self.byte_point(sl, sc)
            old_end_byte, old_end_pt = self.byte_point(el, ec)
            if "\n" in text:
                new_end_pt = (sl + text.count("\n"), utf8_len(text[text.rfind("\n") + 1:]))
            else:
                new_end_pt = (sl, start_pt[1] + utf8_len(text))
            self.tree.edit(start_byte=start_byte, old_end_byte=old_end_byte,
                           new_end_byte=start_byte + utf8_len(text), start_point=start_pt,
                           old_end_point=old_end_pt, new_end_point=new_end_pt)
        if new[-1] == "" and el + 1 < len(lines):
            new.pop()  # `tail` ended with "\n": the next line is untouched, not a new empty one
        lines[sl:el + 1] = new
        blen = [utf8_len(s) for s in new]
        self._size += sum(blen) - sum(self._blen[sl:el + 1])
        self._blen[sl:el + 1] = blen
        return Change(sl, el - sl + 1, len(new), removed, text)

    def _read(self, _byte: int, point: tuple[int, int]) -> bytes:
        """The text from `point` on, for the parser: the rest of its line and the next lines up
        to READ_CHUNK bytes (fewer calls back into Python than a line per read)."""
        row, col = point
        lines = self.lines
        if row >= len(lines):
            return b""
        out = lines[row].encode("utf-8")[col:]
        if len(out) >= READ_CHUNK:
            return out
        parts, size = [out], len(out)
        for r in range(row + 1, min(len(lines), row + READ_CHUNK)):
            parts.append(lines[r].encode("utf-8"))
            size += len(parts[-1])
            if size >= READ_CHUNK:
                break
        return b"".join(parts)

    def _reparse(self, full: bool) -> None:
        if self._parser is None:
            return
        if self._size > MAX_PARSE_BYTES:
            self.note_limit("parse", f"over {MAX_PARSE_BYTES >> 20} MB: no syntax tree, plain-text contexts")
            self.tree = None
            return
        old = None if full else self.tree
        try:
            self.tree = self._parser.parse(self._read) if old is None else self._parser.parse(self._read, old)
        except Exception as e:  # a parser failure must not lose the document: plain text instead
            log.warning("%s: parse failed (%s); plain-text contexts", self.uri, e)
            self.tree = None
