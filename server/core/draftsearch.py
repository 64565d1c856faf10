"""Looking drafts up in several documents: `lookup` asks the indexes of the cursor's document,
other open ones, recent snippets and workspace files (drafts.DraftIndex each) for what
continues the text before the cursor, and ranks what they propose; `syntactic_kind` names the
construct a position sits in, so a candidate in the cursor's kind of construct ranks higher.

It knows nothing of LSP, models or requests; tree-sitter only through `syntactic_kind`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .document import split_lines, utf8_len
from .drafts import MIN_CHARS, DraftIndex

if TYPE_CHECKING:
    import tree_sitter

SAME_KIND_BONUS = 8.0  # a candidate in the cursor's syntactic kind counts as this many chars longer
SOURCE_RANK = {"buffer": 0, "recent": 1, "open": 2, "workspace": 3}
_FAR = 1 << 30  # distance of a candidate from another document


# -- looking up drafts in several documents ------------------------------------------------


@dataclass(frozen=True)
class DraftCandidate:
    text: str
    source: str  # "buffer" | "open" | "recent" | "workspace"
    uri: str
    row: int  # where the continuation starts in its document
    col: int
    matched: int
    score: float


@dataclass(frozen=True)
class DraftSource:
    """One index to search: the cursor's document, another open one, a recent snippet or a file
    of the workspace that is not open."""

    index: DraftIndex
    source: str = "buffer"  # "buffer" | "open" | "recent" | "workspace"
    uri: str = ""
    cursor: tuple[int, int] | None = None  # (row, col) of the cursor when it is in this document
    first_row: int = 0  # document row of the index's first line (snippets)
    kind_at: Callable[[int, int], str | None] | None = None  # kind at an index (row, col)


def recent_source(text: str, uri: str, first_row: int = 0,
                  cursor: tuple[int, int] | None = None) -> DraftSource:
    """A throwaway index of a small snippet (lines `first_row`.. of `uri`)."""
    return DraftSource(DraftIndex(split_lines(text)), "recent", uri, cursor, first_row)


def lookup(before: str, sources: Sequence[DraftSource], *, lines: int = 1, limit: int = 4,
           kind: str | None = None, min_chars: int = MIN_CHARS, per_source: int = 8,
           ignore_indent: bool = True, distinct: bool = True) -> list[DraftCandidate]:
    """Ranked drafts continuing `before`, the text before the cursor, deduplicated by text
    unless not `distinct` (the cache model counts how many matches agree).

    Rank: matched characters (plus SAME_KIND_BONUS when a source's `kind_at` agrees with
    `kind`), then source (buffer, recent, open), then distance to the cursor.
    """
    ranked = []
    for src in sources:
        exclude = None
        if src.cursor is not None:
            exclude = (src.cursor[0] - src.first_row, src.cursor[1])
        with src.index.lock:
            found = [(m, src.index.continuation(m.row, m.col, lines))
                     for m in src.index.find(before, exclude=exclude, limit=per_source, min_chars=min_chars,
                                             ignore_indent=ignore_indent)]
        for m, text in found:
            if not text.strip():
                continue
            score = float(m.matched)
            if kind is not None and src.kind_at is not None and src.kind_at(m.row, m.col) == kind:
                score += SAME_KIND_BONUS
            row = src.first_row + m.row
            far = abs(row - src.cursor[0]) if src.cursor is not None else _FAR
            ranked.append(((-score, SOURCE_RANK.get(src.source, 3), far),
                           DraftCandidate(text, src.source, src.uri, row, m.col, m.matched, score)))
    ranked.sort(key=lambda r: r[0])
    out: list[DraftCandidate] = []
    seen: set[str] = set()
    for _, cand in ranked:
        if cand.text not in seen or not distinct:
            seen.add(cand.text)
            out.append(cand)
            if len(out) == limit:
                break
    return out


# -- syntactic kinds (optional: only callers holding a tree-sitter tree use these) ---------

_CONTAINERS = frozenset({"block", "module", "program", "source_file", "translation_unit", "ERROR",
                         "compound_statement", "statement_block", "declaration_list", "class_body",
                         "field_declaration_list", "expression_statement"})


def syntactic_kind(tree: tree_sitter.Tree, row: int, byte_col: int, depth: int = 2) -> str:
    """The types of the `depth` nearest named ancestors of the character before a position that
    begin on an earlier row, bare containers skipped: the construct its line sits in. Nodes
    that begin on the row itself are left out: at the cursor that row is half typed."""
    point = (row, max(byte_col - 1, 0))  # nodes that end at a position do not contain it
    node = tree.root_node.named_descendant_for_point_range(point, point)
    types: list[str] = []
    while node is not None and len(types) < depth:
        if node.start_point[0] < row and node.type not in _CONTAINERS:
            types.append(node.type)
        node = node.parent
    return "/".join(types)


def tree_kind_at(tree: tree_sitter.Tree, index: DraftIndex) -> Callable[[int, int], str | None]:
    """`DraftSource.kind_at` for a document whose tree matches `index`'s lines."""
    def kind_at(row: int, col: int) -> str | None:
        return syntactic_kind(tree, row, utf8_len(index.line(row)[:col]))
    return kind_at
