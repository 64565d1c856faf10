"""Degenerate repetition: a completion that ends in the same short group of tokens over and
over (`get('sys', 'file', 'file', 'file', 'file`), the known failure of greedy decoding in a
small model, which runs until its span budget is spent.

A loop ends the text: the completion ran out mid-repetition. Code that repeats itself and then
stops (`[0, 0, 0, 0]`, a closing bracket after it) ends in something else and passes, and
runs of one character (`# -----`, `)))`) are one token here. Where the loop begins on a later
line than the first, the complete lines before it are kept; otherwise nothing is left (as
Copilot drops repetitive completions rather than showing them).

Works on strings only; post-processing (postprocess.finish) applies it to every candidate,
for every front.
"""

from __future__ import annotations

import re

MAX_PERIOD = 8  # tokens in the repeated group at most
MIN_REPEATS = 3  # whole groups in the run at least
MIN_TOKENS = 8  # a run this short is not a loop (`None, None, None, None`)

# Words, numbers, and runs of one punctuation character; whitespace separates and is dropped.
_TOKEN = re.compile(r"\w+|([^\w\s])\1*")


def loop_start(text: str) -> int | None:
    """Where a degenerate repetition that ends `text` begins (a character offset), or None."""
    found = [(m.group(), m.start()) for m in _TOKEN.finditer(text)]
    tokens = [t for t, _ in found]
    n, best = len(tokens), None
    for period in range(1, MAX_PERIOD + 1):
        start = n - period
        while start > 0 and tokens[start - 1] == tokens[start - 1 + period]:
            start -= 1
        run = n - start
        if run >= max(MIN_REPEATS * period, MIN_TOKENS) and (best is None or start < best):
            best = start
    return None if best is None else found[best][1]


def cut_loop(text: str) -> str:
    """`text` without a degenerate repetition at its end: the complete lines before the line
    the loop begins on, or "" when it begins on the first."""
    at = loop_start(text)
    if at is None:
        return text
    line_start = text.rfind("\n", 0, at)
    return text[:line_start].rstrip() if line_start > 0 else ""
