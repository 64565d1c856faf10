"""The plain copy: the rest of the line after the nearest other occurrence of the cursor line's end.

What a 20-line copy server answers: the longest suffix (LONGEST down to SHORTEST characters) of
the cursor line's text before the cursor that occurs elsewhere in the text around it, its
nearest occurrence above the cursor, else its first below; the answer is the rest of that
occurrence's line when it is not empty. Keys as short as 3 characters and matches below the
cursor reach where the draft index (6-character keys, drafts.py) finds nothing.

The server offers it as the last draft of a line (context.Copies), post-processed and judged
like the others; the evaluation's copy baseline (eval/baseline.py) shows it as it is. Callers
pass bounded text around the cursor: the work is linear in what they pass.
"""

from __future__ import annotations

LONGEST, SHORTEST = 40, 3  # characters of the cursor line's text looked for


def plain_copy(before: str, after: str) -> str | None:
    """The rest of the line after the longest suffix of the cursor line's text in `before` that
    occurs elsewhere in `before + after` (nearest above the cursor, else first below); None
    when none occurs or that occurrence's line ends right after it."""
    found = plain_copy_at(before, after)
    return None if found is None else found[0]


def plain_copy_at(before: str, after: str) -> tuple[str, int] | None:
    """`plain_copy`, and where the copied text starts in `before + after` (whether it was copied
    from code or from a comment is told by its place)."""
    left = before[before.rfind("\n") + 1:]
    for n in range(min(LONGEST, len(left)), SHORTEST - 1, -1):
        key = left[-n:]
        at = before.rfind(key, 0, len(before) - 1)  # not the occurrence that ends at the cursor
        if at >= 0:
            start, text, shift = at + n, before + after, 0
        else:
            below = after.find(key)
            if below < 0:
                continue
            start, text, shift = below + n, after, len(before)
        end = text.find("\n", start)
        rest = text[start:end if end >= 0 else len(text)]
        return (rest, start + shift) if rest else None
    return None
