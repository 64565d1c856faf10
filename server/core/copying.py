"""The cache model's text lookup: continuations of code that matches the text before a position.

The engine's cache model (engine/cachemodel.py) asks, while it denoises, what follows the
longest matches of the text before the cursor plus what the span holds so far. The answer
comes from the same incremental draft indexes as the drafts (the document, the other open
documents, snippets of recent edits), so nothing is rebuilt per keystroke: a `CopyLookup` is
made with the snapshot and only reads the indexes, under each index's lock, on the engine's
thread while the event loop keeps editing them.

Locality weights (the most local confident scope wins): a match in the cursor's own document
or in a recent edit counts fully, one in another open document half.
"""

from __future__ import annotations

from collections.abc import Sequence

from redraft.engine import Continuation

from . import draftsearch as draft_search

SOURCE_WEIGHT = {"buffer": 1.0, "recent": 1.0, "open": 0.5, "workspace": 0.5}
PER_SOURCE = 8  # matches per index and query
LIMIT = 12  # distinct continuations per query
BEFORE_CHARS = 4096  # of the text before the position, at most (as for drafts)


class CopyLookup:
    """lookup(typed) -> continuations after the cursor's text `before` plus `typed`."""

    def __init__(self, before: str, sources: Sequence[draft_search.DraftSource], lines: int,
                 per_source: int = PER_SOURCE, limit: int = LIMIT) -> None:
        # (no syntactic kinds: the tree belongs to the event loop, this runs on the engine's thread)
        self.before, self.sources, self.lines = before, tuple(sources), max(lines, 1)
        self.per_source, self.limit = per_source, limit

    def __call__(self, typed: str) -> list[Continuation]:
        text = (self.before + typed)[-BEFORE_CHARS:]
        found = draft_search.lookup(text, self.sources, lines=self.lines, limit=self.limit,
                                   per_source=self.per_source, distinct=False)
        return [Continuation(c.text, c.matched, SOURCE_WEIGHT.get(c.source, 0.5)) for c in found]
