"""Reviewing a copied draft before it is offered at a cursor: where it came from, what it names.

Two rules, both about the place a draft lands in:

- In a comment or a string (a docstring) only prose belongs: a draft copied from code there
  (`:param config: ` continued from the `def` line as `Optional[Config] = None) -> T:`) is not
  offered; one copied from another comment or string is.
- In code, a draft's names must exist at the cursor (scope.py). A draft copied from a function
  of the same document whose parameters line up with the cursor's function's, same places and
  same written types (`union: Type, data, config` against `mapping: Type, data, config`), gets
  the cursor's names for those parameters. Names still foreign after that are the draft's
  `foreign`, each with the name likely meant instead where one is known (`guesses`: the
  parameter in the same place, untyped); the pipeline lets the model revise them (the guess
  seeded, or a mask token, `masked`) or, where no model runs, shows the draft only up to its
  first foreign name (`before_foreign`).

`Review` lives on the event loop, where the documents and trees are current, and is made per
request (context.copies). The text helpers (`mentions`, `masked`, `renamed`, `before_foreign`)
are the pipeline's too, on its thread. It knows nothing of models or LSP.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from .document import Document, utf8_len
from .drafts import DraftIndex
from .languages import COMMENT_TYPES, FIELD_TYPES, STRING_TYPES, new_parser, syntax_for
from .scope import ABSENT, LOCAL, Scope, bound_in, head_text, imported_in, params_at, scope_at, standing, unknown

PROSE_TYPES = COMMENT_TYPES | STRING_TYPES
ABOVE_LINES, BELOW_LINES = 100, 10  # of another document, parsed to tell whether a place is prose
ORIGIN_LINES = 300  # of another document above a draft's origin, parsed for the names it binds there
HEADER_LINES = 80  # of another document's first lines, parsed for its imports


_KEYWORD = re.compile(r"\s*=(?!=)")


def spans(text: str, name: str) -> list[tuple[int, int]]:
    """Where `text` names `name` as a bare name: not after `.` or `::`, and not as a keyword
    argument's name (`f(name=...)`, `, name=`; an assignment `name = ...` is a use)."""
    out = []
    for m in re.finditer(rf"(?<![\w$.])(?<!::){re.escape(name)}(?![\w$])", text):
        if _KEYWORD.match(text, m.end()) and text[:m.start()].rstrip()[-1:] in ("(", ","):
            continue
        out.append(m.span())
    return out


def mentions(text: str, names: tuple[str, ...]) -> bool:
    """Whether `text` names any of `names` as a bare name."""
    return any(spans(text, n) for n in names)


MIN_CUT_CHARS = 8  # of a first line cut short before a foreign name, kept only from this long


def before_foreign(text: str, names: tuple[str, ...]) -> str:
    """`text` up to its first bare occurrence of `names`: the lines before the one it stands on,
    or, on the first line, the text before it when that says something (`register(cls,`, not
    `return`); "" otherwise. What is offered stops short of a name that does not exist here."""
    at = min((s[0] for n in names for s in spans(text, n)), default=-1)
    if at < 0:
        return text
    line_start = text.rfind("\n", 0, at)
    if line_start >= 0:
        return text[:line_start].rstrip()
    return long_enough(text[:at])


def long_enough(cut: str) -> str:
    """A first line cut short, when what is left says something (MIN_CUT_CHARS); else ""."""
    cut = cut.rstrip()
    return cut if "\n" in cut or len(cut.strip()) >= MIN_CUT_CHARS else ""


def _replaced(text: str, names: tuple[str, ...], by, with_space: bool = False) -> str:
    """`text` with each bare occurrence of `names` replaced by `by(name, spaced)` (`spaced`: a
    space before it replaced too, which `with_space` asks for where there is one)."""
    found = sorted((s, name) for name in names for s in spans(text, name))
    out, at = [], 0
    for (start, end), name in found:
        if start < at:
            continue
        spaced = with_space and start > at and text[start - 1] == " "
        out += [text[at:start - spaced], by(name, spaced)]
        at = end
    return "".join(out) + text[at:]


def renamed(text: str, renames: dict[str, str]) -> str:
    return _replaced(text, tuple(renames), lambda name, _: renames[name])


def masked(text: str, names: tuple[str, ...], mask: str) -> str:
    """`text` with each bare occurrence of `names` replaced by one `mask` token, a space before
    it included: the model writes ` mapping` as one token, as it read such names in training.
    (More masks than the name it means make the model pad them with text of its own.)"""
    return _replaced(text, names, lambda *_: mask, with_space=True)


def _width(line: str) -> int:
    """The indentation of a line, in columns."""
    expanded = line.expandtabs(4)
    return len(expanded) - len(expanded.lstrip(" "))


def prose_in_tree(tree, row: int, byte_col: int) -> bool:
    """Whether the text just before (row, byte_col) lies in a comment or a string's text (not in
    an f-string field or template substitution)."""
    point_a, point_b = (row, max(byte_col - 1, 0)), (row, byte_col)
    node = tree.root_node.named_descendant_for_point_range(point_a, point_b)
    while node is not None:
        if node.type in FIELD_TYPES:
            return False
        if node.type in PROSE_TYPES and node.start_point <= point_a and point_b <= node.end_point:
            return True
        node = node.parent
    return False


def prose_in_lines(lines: list[str], row: int, col: int, uri: str) -> bool:
    """`prose_in_tree` for a place in lines that have no tree at hand (another document's index):
    a few lines around it are parsed alone."""
    syntax = syntax_for(None, uri)
    if syntax.grammar is None or not 0 <= row < len(lines):
        return False
    first = max(0, row - ABOVE_LINES)
    text = "".join(lines[first:row + BELOW_LINES])
    tree = new_parser(syntax.grammar).parse(text.encode("utf-8", "replace"))
    return prose_in_tree(tree, row - first, utf8_len(lines[row][:col]))


@dataclass
class Review:
    """The review of the drafts for one cursor of `doc` (see the module's docstring)."""

    doc: Document
    row: int
    col: int
    prose: bool  # the cursor is in a comment or a string's text

    @cached_property
    def scope(self) -> Scope | None:
        return None if self.prose else scope_at(self.doc, self.row, self.col)

    @cached_property
    def head(self) -> str:
        scope = self.scope
        return "" if scope is None else head_text(self.doc.lines, 0, scope, self.row, self.col)

    def draft(self, text: str, origin: tuple[str, int, int] | None, index: DraftIndex | None = None,
              first_row: int = 0) -> tuple[str, tuple[str, ...], tuple[str, ...]] | None:
        """The draft to offer for `text`, copied from `origin` (uri, row, col; None: unknown) of
        this document or of `index` (whose first line is document row `first_row`), the names in
        it that are foreign here, and for each the name most likely meant instead ("" when none
        is known: `_renames`); None when it is not to be offered at all."""
        if self.prose:
            return (text, (), ()) if origin is not None and self._prose_at(origin, index, first_row) else None
        scope = self.scope
        if scope is None:
            return text, (), ()
        checked = self._unit(text)

        def known(name: str) -> str:
            how = self._standing(name)
            if how == ABSENT and scope.open and index is not None and origin is not None:
                how = LOCAL if self._bound_at_origin(name, origin, index, first_row) else ABSENT
            return how
        foreign = unknown(scope, self.doc.syntax, self.head, checked, known=known)
        guesses: dict[str, str] = {}
        if foreign and origin is not None and origin[0] == self.doc.uri and index is None:
            renames, guesses = self._renames(foreign, origin[1], origin[2])
            if renames:
                text = renamed(text, renames)
                foreign = unknown(scope, self.doc.syntax, self.head, self._unit(text), known=known)
        return text, foreign, tuple(guesses.get(name, "") for name in foreign)

    def _unit(self, text: str) -> str:
        """The part of a draft that can be shown here: its lines up to the first one indented less
        than the cursor's line (the block the cursor is in ends there; postprocess cuts it so).
        What follows may bind names (a next function's parameters) the shown part uses."""
        line = self.doc.lines[self.row]
        base = _width(line[:self.col]) if not line[:self.col].strip() else _width(line)
        lines = text.split("\n")
        for i in range(1, len(lines)):
            if lines[i].strip() and _width(lines[i]) < base:
                return "\n".join(lines[:i])
        return text

    def index_of(self, sources, source: str, origin: tuple[str, int, int] | None
                 ) -> tuple[DraftIndex | None, int] | None:
        """(index, its first row) of the draft source a candidate came from ((None, 0) for this
        document, which has its tree; None when it is not among `sources`)."""
        if source == "buffer" or origin is None:
            return None, 0
        uri, row, _ = origin
        for src in sources:
            if src.source == source and src.uri == uri and (
                    source != "recent" or src.first_row <= row < src.first_row + len(src.index)):
                return src.index, src.first_row
        return None

    def place(self, around: tuple[str, str], at: int) -> tuple[str, int, int]:
        """(uri, row, col) of character `at` of `around` (the text before and after the cursor)."""
        before, after = around
        if at < len(before):
            back = before.count("\n", at)
            col = self.col - (len(before) - at) if back == 0 else at - before.rfind("\n", 0, at) - 1
            return self.doc.uri, self.row - back, col
        k = at - len(before)
        down = after.count("\n", 0, k)
        col = self.col + k if down == 0 else k - after.rfind("\n", 0, k) - 1
        return self.doc.uri, self.row + down, col

    def _standing(self, name: str) -> str:
        cache = self.__dict__.setdefault("_standings", {})
        if name not in cache:
            cache[name] = standing(self.doc, name)
        return cache[name]

    def _bound_at_origin(self, name: str, origin: tuple[str, int, int], index: DraftIndex, first_row: int) -> bool:
        """Whether the document a draft was copied from (another one) binds `name` as a local
        near there, or imports it: in an open scope, a name this document never mentions may
        be the package's, or that function's own, or a package that file imports and this one
        does not."""
        uri, row, _ = origin
        r = row - first_row
        with index.lock:
            text = "".join(index.line(i) for i in range(max(0, r - ORIGIN_LINES), min(len(index), r + BELOW_LINES)))
            header = "".join(index.line(i) for i in range(min(len(index), HEADER_LINES)))
        syntax = syntax_for(None, uri)
        if bound_in(syntax, text, name):
            return True
        imports = self.__dict__.setdefault("_imports", {})
        if uri not in imports:
            imports[uri] = imported_in(syntax, header)
        return name in imports[uri]

    def _renames(self, foreign: tuple[str, ...], row: int, col: int) -> tuple[dict[str, str], dict[str, str]]:
        """Foreign names that are parameters of the function the draft was copied from, each to
        the cursor's function's parameter at the same place, where both take as many: as renames
        where the others are alike and the two at that place have the same written type
        (`union: Type` and `mapping: Type`); else as guesses only. Untyped, a name in the same
        place is too often another thing (`format` against `level`) to be shown without the
        model; the guess is the model's to judge (pipeline.usable_drafts)."""
        here = self.scope.params if self.scope is not None else ()
        there = params_at(self.doc, row, col)
        if not here or len(here) != len(there):
            return {}, {}
        theirs = {name for name, _ in there}
        differ = [i for i, (a, b) in enumerate(zip(here, there)) if a[0] != b[0]]
        renames, guesses = {}, {}
        for i in differ:
            (new, new_type), (old, old_type) = here[i], there[i]
            if old in foreign and new not in theirs:
                guesses[old] = new
                if new_type and new_type == old_type:
                    renames[old] = new
        return (renames if len(renames) == len(differ) else {}), guesses

    def _prose_at(self, origin: tuple[str, int, int], index: DraftIndex | None, first_row: int) -> bool:
        uri, row, col = origin
        if index is None:
            if uri != self.doc.uri or self.doc.tree is None or not 0 <= row < len(self.doc.lines):
                return False
            return prose_in_tree(self.doc.tree, row, utf8_len(self.doc.lines[row][:col]))
        r = row - first_row
        with index.lock:
            lines = [index.line(i) for i in range(max(0, r - ABOVE_LINES), min(len(index), r + BELOW_LINES))]
        return prose_in_lines(lines, r - max(0, r - ABOVE_LINES), col, uri)
