"""Scoring one infill completion against the removed text, and where its unit ends.

Per sample, for a completion already cut at the end of its unit (`cut`):
  exact_match       rest_of_line: the first line, trailing whitespace stripped, equals the
                    expected text stripped the same way; next_line / block: every line
                    compared with trailing whitespace stripped, trailing blank lines
                    ignored; node: every line compared with trailing whitespace stripped
  correct_prefix    longest common prefix length / len(expected)
  edit_similarity   1 - Levenshtein distance / max(len(a), len(b)); 1.0 when both are empty
Syntax validity needs the whole file and lives in syntax.py.

`cut` and `unit_ended` are the server's own unit-end rule (postprocess.Unit), so a sample is
scored by where the server ends what it shows: `unit_ended(kind, t)` is true as soon as the
text so far fixes where `cut` ends, so decoding can stop there and the cut of what it
produced is the same as the cut of a longer continuation.

Knows nothing of models, files or tree-sitter.
"""

from __future__ import annotations

import os

from rapidfuzz.distance import Levenshtein

from ..core.context import Mode
from ..core.postprocess import Unit
from .samples import BLOCK_LINES


# -- where a unit ends ----------------------------------------------------------------------

def unit(kind: str, header_indent: int = 0) -> Unit | None:
    """The server's unit-end rule (postprocess.Unit) for a sample kind: rest_of_line and
    next_line end with their first line, block with its body (a dedent, or BLOCK_LINES[1]
    lines); node has no rule (the whole span counts)."""
    if kind in ("rest_of_line", "next_line"):
        return Unit(Mode.LINE, "", 1)
    if kind == "block":
        return Unit(Mode.BLOCK, " " * max(header_indent, 0), BLOCK_LINES[1])
    if kind == "node":
        return None
    raise ValueError(f"unknown kind {kind!r}")


def cut(kind: str, text: str, header_indent: int = 0) -> str:
    """The completion up to the end of its unit."""
    rule = unit(kind, header_indent)
    return text if rule is None else rule.cut(text)


def unit_ended(kind: str, text: str, header_indent: int = 0) -> bool:
    """True once `text` (a completion so far) already contains the end of its unit."""
    rule = unit(kind, header_indent)
    return rule is not None and rule.ended(text)


# -- scores ----------------------------------------------------------------------------------

def _norm_lines(text: str, drop_trailing_blank: bool) -> list[str]:
    lines = [line.rstrip() for line in text.split("\n")]
    while drop_trailing_blank and lines and not lines[-1]:
        lines.pop()
    return lines


def exact_match(kind: str, completion: str, expected: str) -> bool:
    if kind == "rest_of_line":
        return completion.split("\n", 1)[0].rstrip() == expected.split("\n", 1)[0].rstrip()
    if kind in ("next_line", "block"):
        return _norm_lines(completion, True) == _norm_lines(expected, True)
    if kind == "node":
        return _norm_lines(completion, False) == _norm_lines(expected, False)
    raise ValueError(f"unknown kind {kind!r}")


def correct_prefix(completion: str, expected: str) -> float:
    """Share of `expected` that `completion` gets right before its first mistake."""
    if not expected:
        return 1.0
    return len(os.path.commonprefix([completion, expected])) / len(expected)


def edit_similarity(a: str, b: str) -> float:
    longest = max(len(a), len(b))
    if longest == 0:
        return 1.0
    return 1.0 - Levenshtein.distance(a, b) / longest
