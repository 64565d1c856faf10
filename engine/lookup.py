"""The text lookup the cache model reads: continuations of code that matches the text before
a position. The caller (the server) provides the lookup; the cache model (cachemodel.py) turns
its answers into next-token predictions. Torch-free, so that a caller can build lookups
without importing torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Continuation:
    """What follows one match of the text before a position."""

    text: str
    matched: int  # characters of the text before the position the match covers
    weight: float = 1.0  # locality: the cursor's own document counts most


# lookup(typed) -> continuations after the cursor's text plus `typed` (the span's text so far)
Lookup = Callable[[str], Sequence[Continuation]]
