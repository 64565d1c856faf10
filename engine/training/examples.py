"""Training rows shaped like the job: a cursor, a removed middle, the model fills it.

Every row is `extra <suf> suffix <pre> prefix <mid> span` (engine/prompt.py), cut from a file at
a character position, so spans start and end mid-token:
  rest_of_line  cursor mid-line, the rest of the line removed
  lines         1-3 whole lines from the start of a line or its indentation
  block         the 1-8 line body after a line ending in ':'
  chars         a random run of characters
  rename        an identifier renamed at one line (shown in an edit-history header); the
                middle is a later line with the same identifier, to be renamed likewise
Copy-rich rows (copy_example, a share early in training so copying heads form):
  recur         the cursor at an identifier that already occurs in the prefix, the middle
                the rest of that line
  repeat        1-8 lines of the file written twice in a row (S S), the cursor inside the
                second copy, the middle the rest of that line: the answer is in plain sight
The autoregressive twin reads the middle then <|endoftext|>; the diffusion model reads a
span of the middle, <|endoftext|>, and padding, partly masked (train.py).
"""

from __future__ import annotations

import json
import keyword
import random
import re
from pathlib import Path
from dataclasses import dataclass

from ..prompt import END, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, render_history

KINDS = (("rest_of_line", 0.35), ("lines", 0.2), ("block", 0.15), ("chars", 0.2), ("rename", 0.1))
COPY_KINDS = (("recur", 0.5), ("repeat", 0.5))
IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
RESERVED = set(keyword.kwlist) | {"self", "cls", "None", "True", "False", "print", "len", "str", "int"}
PREFIX_CHARS, SUFFIX_CHARS, MIDDLE_CHARS = 2400, 900, 400


@dataclass
class Example:
    kind: str
    extra: str
    prefix: str
    middle: str
    suffix: str


def _is_code(line: str) -> bool:
    return len(line.strip()) >= 8 and not line.lstrip().startswith(("#", '"', "'"))


def _code_lines(lines: list[str]) -> list[int]:
    return [i for i, ln in enumerate(lines) if _is_code(ln)]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _cut(text: str, start: int, end: int, kind: str, extra: str = "") -> Example:
    end = min(end, start + MIDDLE_CHARS)
    return Example(kind, extra, text[max(0, start - PREFIX_CHARS):start], text[start:end],
                   text[end:end + SUFFIX_CHARS])


def _lines(text: str) -> tuple[list[str], list[int], list[int]]:
    """The text's lines, the offset each starts at (plus the end), and the rows holding code."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    return lines, starts, _code_lines(lines)


def sample_example(text: str, rng: random.Random) -> Example | None:
    kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
    lines, starts, code = _lines(text)
    if not code:
        return None
    if kind == "rest_of_line":
        i = rng.choice(code)
        body = lines[i].rstrip("\r\n").rstrip()
        col = rng.randint(_indent(body), len(body) - 1)
        return _cut(text, starts[i] + col, starts[i] + len(body), kind)
    if kind == "lines":
        i = rng.choice(code)
        n = rng.randint(1, 3)
        col = 0 if rng.random() < 0.5 else _indent(lines[i])
        end = starts[min(i + n, len(lines))] - 1  # keep the last newline in the suffix
        return _cut(text, starts[i] + col, max(end, starts[i] + col), kind)
    if kind == "block":
        heads = [i for i in code if lines[i].rstrip().endswith(":") and i + 1 < len(lines)]
        if not heads:
            return None
        i = rng.choice(heads)
        base, j = _indent(lines[i]), i + 1
        while j < len(lines) and j - i <= 8 and (not lines[j].strip() or _indent(lines[j]) > base):
            j += 1
        if j == i + 1:
            return None
        return _cut(text, starts[i + 1], starts[j] - 1, kind)
    if kind == "chars":
        start = rng.randrange(len(text))
        return _cut(text, start, start + int(rng.expovariate(1 / 40)) + 1, kind)
    return _rename(text, lines, starts, code, rng)


def copy_example(text: str, rng: random.Random) -> Example | None:
    """A row whose middle recurs in the visible prefix (COPY_KINDS)."""
    lines, starts, code = _lines(text)
    if not code:
        return None
    kind = rng.choices([k for k, _ in COPY_KINDS], [w for _, w in COPY_KINDS])[0]
    if kind == "recur":
        return _recur(text, lines, starts, code, rng)
    return _repeat(text, lines, starts, code, rng)


def _recur(text, lines, starts, code, rng) -> Example | None:
    """Cursor at an identifier seen earlier in the prefix window; the middle is the rest of the line."""
    for i in rng.sample(code, min(20, len(code))):  # a few tries: most lines have one
        body = lines[i].rstrip("\r\n").rstrip()
        hits = [m for m in IDENT.finditer(body) if m.group() not in RESERVED and len(m.group()) > 2]
        rng.shuffle(hits)
        for m in hits:
            at = starts[i] + m.start()
            if re.search(rf"\b{re.escape(m.group())}\b", text[max(0, at - PREFIX_CHARS):at]):
                return _cut(text, at, starts[i] + len(body), "recur")
    return None


def _repeat(text, lines, starts, code, rng) -> Example | None:
    """Lines i..i+n written twice; the cursor inside the second copy (Bi-Induct's S S rows)."""
    i = rng.choice(code)
    n = min(rng.randint(1, 8), len(lines) - i)
    a, b = starts[i], starts[i + n]
    if not text[a:b].endswith("\n"):
        return None
    doc = text[:b] + text[a:b] + text[b:]
    j = rng.choice([k for k in range(i, i + n) if _is_code(lines[k])] or [i])
    body = lines[j].rstrip("\r\n").rstrip()
    col = rng.randint(_indent(body), max(_indent(body), len(body) - 1))
    at = b + starts[j] - a  # line j's start in the second copy
    return _cut(doc, at + col, at + len(body), "repeat")


def _rename(text, lines, starts, code, rng) -> Example | None:
    """Rename a name on one line; the middle is a later line using it, renamed too."""
    uses: dict[str, list[int]] = {}
    for i in code:
        # First-seen order, not a set's: a set of strings iterates by the process's hash seed,
        # so the same seed would draw other rows (and other validation batches) in each run.
        for name in dict.fromkeys(IDENT.findall(lines[i])):
            if name not in RESERVED and len(name) > 1:
                uses.setdefault(name, []).append(i)
    names = [n for n, at in uses.items() if len(at) >= 2]
    if not names:
        return None
    old = rng.choice(names)
    first, target = sorted(rng.sample(uses[old], 2))
    new = _new_name(old, rng, [n for n in uses if n != old])
    pattern = re.compile(rf"\b{re.escape(old)}\b")
    before = lines[first].rstrip("\r\n")
    after = pattern.sub(new, before)
    history = render_history([(before, after)])
    edited = text[:starts[first]] + pattern.sub(new, lines[first]) + text[starts[first + 1]:]
    shift = len(after) - len(before)
    t0 = starts[target] + shift
    body = lines[target].rstrip("\r\n")
    col = _indent(body)
    ex = _cut(edited, t0 + col, t0 + len(body), "rename", history)
    ex.middle = pattern.sub(new, ex.middle)
    return ex


def _new_name(old: str, rng: random.Random, others: list[str]) -> str:
    choice = rng.random()
    if choice < 0.3 and others:
        return rng.choice(others)
    if choice < 0.5:
        return old + rng.choice(["_new", "2", "_value", "s", "_list", "_count"])
    if choice < 0.7 and "_" in old.strip("_"):
        head, *rest = old.split("_")
        return head + "".join(p.capitalize() for p in rest)
    if choice < 0.85 and len(old) > 3:
        return old[: max(2, len(old) // 2)]
    return rng.choice(["value", "item", "data", "result", "node", "key", "name", "count", "index"]) + \
        ("_" + old if rng.random() < 0.5 else "")


@dataclass
class EncodedExample:
    """An example as one row of token ids."""

    ids: list[int]  # whole row, no padding
    span_at: int  # index of the first span token (the token before it is <|fim_middle|>)
    middle: int  # number of true middle tokens
    span: int  # span length including the end token and padding


def encode_example(ex: Example, tok, T: int, rng: random.Random, *, pad_span: bool) -> EncodedExample:
    """Tokenize into one row of at most T tokens; `pad_span` adds padding after the end token."""
    tid = tok.token_to_id
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids if s else []
    # Caps that bind only for short rows (tests); at T = 512 they are 120 / 96 / 160 tokens.
    middle = enc(ex.middle)[:min(120, T // 4)]
    span = middle + [tid(END)]
    if pad_span:
        span += [tid(END)] * rng.randint(0, 24)
    extra = enc(ex.extra)[-min(96, T // 5):]
    suffix = enc(ex.suffix)[: min(rng.randint(16, 160), T // 3)]
    room = T - len(span) - len(extra) - len(suffix) - 3
    prefix = enc(ex.prefix)[-room:] if room > 0 else []
    ids = extra + [tid(FIM_SUFFIX)] + suffix + [tid(FIM_PREFIX)] + prefix + [tid(FIM_MIDDLE)]
    return EncodedExample(ids + span, len(ids), len(middle), len(span))


def load_distilled(path: Path, end: int, T: int) -> list[EncodedExample]:
    """Rows written by `redraft train distill` as EncodedExample rows (span = the twin's middle and an end token)."""
    rows = []
    with Path(path).open() as f:
        for line in f:
            d = json.loads(line)
            ids = d["ctx"] + d["middle"] + [end]
            if len(ids) <= T:
                rows.append(EncodedExample(ids, len(d["ctx"]), len(d["middle"]), len(d["middle"]) + 1))
    return rows
