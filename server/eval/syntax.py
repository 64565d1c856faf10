"""Python syntax through tree-sitter: parse errors and candidate expression/statement spans.

Counts ERROR and MISSING nodes of a text, tells whether replacing a region with new text
adds parse errors, and lists the spans of syntax nodes that make sensible infill targets
(calls, operators, comprehensions, right-hand sides, conditions, return/raise/assert ...),
SAFIM-style. Offsets in and out are character offsets into Python `str`s; tree-sitter's
byte offsets stay inside this module.

It knows only Python (the `tree-sitter-python` grammar, packaged on PyPI; nothing is
downloaded at run time). It knows nothing of models, cursors or metrics.
"""

from __future__ import annotations

from functools import lru_cache

import tree_sitter
import tree_sitter_python

from ..core import languages

# Node types that stand for one expression or one simple statement. Spans of these are
# what the `node` evaluation kind removes and asks the model to rebuild.
NODE_TYPES = frozenset({
    "call", "argument_list", "attribute", "subscript",
    "binary_operator", "boolean_operator", "comparison_operator", "not_operator", "unary_operator",
    "conditional_expression", "lambda", "await", "parenthesized_expression",
    "list", "tuple", "dictionary", "set",
    "list_comprehension", "dictionary_comprehension", "set_comprehension", "generator_expression",
    "return_statement", "raise_statement", "assert_statement", "delete_statement",
})
# (parent type, field name): a child in that field is a target whatever its own type,
# e.g. the right side of `x = ...` or the condition of `if ...:`.
NODE_FIELDS = frozenset({
    ("assignment", "right"), ("augmented_assignment", "right"),
    ("if_statement", "condition"), ("elif_clause", "condition"), ("while_statement", "condition"),
})
NODE_MAX_LINES = 3
NODE_CHARS = (4, 200)


@lru_cache(maxsize=1)
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))


def parse(text: str) -> tree_sitter.Tree:
    return _parser().parse(text.encode("utf-8"))


def count_errors(text: str) -> int:
    """ERROR plus MISSING nodes in the parse of `text`."""
    return languages.count_errors(parse(text))


def syntax_valid(text: str, start: int, end: int, replacement: str, errors_before: int | None = None) -> bool:
    """True when `text` with [start, end) replaced by `replacement` has no more parse errors
    than `text` itself (pass `errors_before` to skip re-parsing the original)."""
    before = count_errors(text) if errors_before is None else errors_before
    return count_errors(text[:start] + replacement + text[end:]) <= before


def _char_offsets(text: str, data: bytes):
    """A function from a UTF-8 byte offset (on a character boundary) to a character offset."""
    if len(data) == len(text):  # ASCII: bytes and characters coincide
        return lambda b: b
    at = {}
    pos = 0
    for i, ch in enumerate(text):
        at[pos] = i
        pos += len(ch.encode("utf-8"))
    at[pos] = len(text)
    return at.__getitem__


def node_spans(text: str) -> list[tuple[int, int]]:
    """Sorted, distinct (start, end) character spans of target nodes: a type in NODE_TYPES or
    a child in one of NODE_FIELDS, free of parse errors, spanning 1..NODE_MAX_LINES lines and
    NODE_CHARS[0]..NODE_CHARS[1] characters."""
    data = text.encode("utf-8")
    char = _char_offsets(text, data)
    tree = _parser().parse(data)
    spans = set()
    for node in languages.walk(tree.root_node):
        targets = [node] if node.type in NODE_TYPES else []
        for parent, field in NODE_FIELDS:
            if node.type == parent:
                child = node.child_by_field_name(field)
                if child is not None:
                    targets.append(child)
        for t in targets:
            if t.has_error or t.is_missing:
                continue
            if t.end_point.row - t.start_point.row + 1 > NODE_MAX_LINES:
                continue
            start, end = char(t.start_byte), char(t.end_byte)
            if NODE_CHARS[0] <= end - start <= NODE_CHARS[1]:
                spans.add((start, end))
    return sorted(spans)
