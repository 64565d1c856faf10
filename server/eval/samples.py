"""Cursor positions for the offline infill evaluation, drawn from Python files with a seed.

A Sample removes one region of one file: the model sees `text[:start]` as the prefix and
`text[end:]` as the suffix and should rebuild `expected == text[start:end]`. Four kinds:

  rest_of_line  cursor mid-line; the rest of that line is removed (lines below stay)
  next_line     cursor at column 0; that line's whole content is removed (its newline stays)
  block         cursor at the first body line of a `...:` header; the 2-8 body lines removed
  node          cursor at the start of an expression/statement node (syntax.node_spans)

Line filter (rest_of_line, next_line): the stripped line has at least MIN_LINE_CHARS
characters and does not start with '#' or a string literal (a quote, optionally after a
prefix such as r, b, f, rb). Columns are 0-based character indexes; rest_of_line draws the
column uniformly from [indent + 2, len(line.rstrip()) - 2].

Deterministic: paths sorted, one random.Random per (seed, kind), so a kind's samples do not
depend on which other kinds are asked for. Knows nothing of models or metrics.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.postprocess import indent_width
from . import syntax

KINDS = ("rest_of_line", "next_line", "block", "node")
SPAN_BUDGET = {"rest_of_line": 32, "next_line": 48, "block": 128, "node": 64}  # tokens
MIN_LINE_CHARS = 8
BLOCK_LINES = (2, 8)  # non-blank body lines of a block sample
_STRING_START = re.compile(r"""[rRbBuUfFtT]{0,2}['"]""")


@dataclass(frozen=True)
class Source:
    path: str  # relative to the evaluated folder, '/'-separated
    text: str


@dataclass(frozen=True)
class Sample:
    kind: str
    file: int  # index into the sources
    line: int  # 0-based line of the cursor
    col: int  # 0-based character column of the cursor
    start: int  # character offset of the cursor
    end: int  # character offset just after the removed region
    expected: str  # the removed text
    # block: the header line's indentation in columns, a tab counted as 4, as the unit cut
    # measures body lines (postprocess.indent_width); -1 for other kinds
    header_indent: int = -1

    def split(self, text: str) -> tuple[str, str]:
        """The buffer the model sees: prefix before the cursor, suffix after the removed region."""
        return text[:self.start], text[self.end:]


def load_sources(folder: Path, suffixes: tuple[str, ...] = (".py",)) -> tuple[list[Source], list[str]]:
    """The files under `folder` (recursive, sorted) whose names end with one of `suffixes`
    (e.g. ".py", ".ts", ".go", ".rs") as Sources, and the paths skipped because they are not
    UTF-8 text."""
    sources, skipped = [], []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith(suffixes)):
        rel = path.relative_to(folder).as_posix()
        try:
            sources.append(Source(rel, path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            skipped.append(rel)
    return sources, skipped


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip())


def qualifies(line: str) -> bool:
    """The line filter of rest_of_line and next_line (see the module docstring)."""
    s = line.strip()
    return len(s) >= MIN_LINE_CHARS and not s.startswith("#") and not _STRING_START.match(s)


def is_block_header(line: str) -> bool:
    s = line.strip()
    return s.endswith(":") and not s.startswith("#") and not _STRING_START.match(s)


def _lines(text: str) -> tuple[list[str], list[int]]:
    """Lines without their '\\n' and the character offset where each starts."""
    lines = text.split("\n")
    offsets, at = [], 0
    for line in lines:
        offsets.append(at)
        at += len(line) + 1
    return lines, offsets


# -- candidates per kind: everything a sample may be drawn from ---------------------------

def _line_candidates(sources: list[Source]) -> list[tuple[int, int]]:
    return [(f, i) for f, src in enumerate(sources) for i, line in enumerate(_lines(src.text)[0]) if qualifies(line)]


def block_body(lines: list[str], header: int) -> tuple[int, int] | None:
    """(first, last) non-blank body lines of the block under line `header`, when it is a header
    whose body (the maximal run of following lines that are blank or indented deeper) has
    BLOCK_LINES non-blank lines; else None."""
    if not is_block_header(lines[header]):
        return None
    h = indent_of(lines[header])
    body = []
    for j in range(header + 1, len(lines)):
        if not lines[j].strip():
            continue
        if indent_of(lines[j]) <= h:
            break
        body.append(j)
    if not BLOCK_LINES[0] <= len(body) <= BLOCK_LINES[1]:
        return None
    return body[0], body[-1]


def _block_candidates(sources: list[Source]) -> list[tuple[int, int, int, int]]:
    out = []
    for f, src in enumerate(sources):
        lines = _lines(src.text)[0]
        for i in range(len(lines)):
            body = block_body(lines, i)
            if body is not None:
                out.append((f, i, *body))
    return out


def _node_candidates(sources: list[Source]) -> list[tuple[int, int, int]]:
    return [(f, start, end) for f, src in enumerate(sources) for start, end in syntax.node_spans(src.text)]


# -- drawing -------------------------------------------------------------------------------

def draw(sources: list[Source], kind: str, n: int, seed: int) -> list[Sample]:
    """Up to `n` samples of `kind` (fewer when the files offer fewer candidates), sorted by
    file and position."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} (choose from {', '.join(KINDS)})")
    rng = random.Random(f"{seed}:{kind}")
    texts = [s.text for s in sources]
    split = [_lines(t) for t in texts]
    out = []
    if kind in ("rest_of_line", "next_line"):
        cands = _line_candidates(sources)
        if kind == "rest_of_line":  # keep lines whose column range is not empty
            cands = [(f, i) for f, i in cands
                     if indent_of(split[f][0][i]) + 2 <= len(split[f][0][i].rstrip()) - 2]
        for f, i in _pick(rng, cands, n):
            line, off = split[f][0][i], split[f][1][i]
            col = rng.randint(indent_of(line) + 2, len(line.rstrip()) - 2) if kind == "rest_of_line" else 0
            out.append(Sample(kind, f, i, col, off + col, off + len(line), line[col:]))
    elif kind == "block":
        for f, header, first, last in _pick(rng, _block_candidates(sources), n):
            lines, offs = split[f]
            start, end = offs[first], offs[last] + len(lines[last])
            out.append(Sample(kind, f, first, 0, start, end, texts[f][start:end], indent_width(lines[header])))
    else:
        for f, start, end in _pick(rng, _node_candidates(sources), n):
            text = texts[f]
            line_start = text.rfind("\n", 0, start) + 1
            out.append(Sample(kind, f, text.count("\n", 0, start), start - line_start, start, end, text[start:end]))
    return sorted(out, key=lambda s: (s.file, s.start, s.end))


def _pick(rng: random.Random, candidates: list, n: int) -> list:
    return rng.sample(candidates, min(n, len(candidates)))
