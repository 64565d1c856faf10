"""The token-level format of redraft's own models: special tokens, layout, extra context.

One place for training and serving alike. Both shipped models (diffusion and its
autoregressive twin) read the same sequence:

    [extra] <|fim_suffix|> suffix <|fim_prefix|> prefix <|fim_middle|> span

Stable parts first: typing at the cursor only appends to the prefix, so every key/value
before it survives a keystroke. Extra context (edit history, definitions from other files)
changes rarely and comes first; the suffix's positions do not move while the user types.
The span is the masked region (diffusion) or the continuation (autoregressive); it ends
with <|endoftext|>, which also pads variable-length spans.

Edit history (`render_history`), oldest event first, each event a removed/added line block:

    <|history|>-old line
    +new line
    <|history|>-...
    <|file_sep|>

Definitions from other files (`render_definition`): `<|file_sep|>path\\n` and the text.

Knows nothing of documents or editors: an edit event is a pair of texts.
"""

from __future__ import annotations

from typing import Sequence

END = "<|endoftext|>"  # end of span and padding after it
MASK = "<|mask|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_SUFFIX = "<|fim_suffix|>"
FIM_MIDDLE = "<|fim_middle|>"
FILE_SEP = "<|file_sep|>"
HISTORY = "<|history|>"
SPECIAL_TOKENS = [END, MASK, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, FILE_SEP, HISTORY]

LAYOUT = ["extra", "suffix", "prefix", "span"]
SEGMENT_TOKENS = {"suffix": FIM_SUFFIX, "prefix": FIM_PREFIX, "span": FIM_MIDDLE}

EVENT_LINES = 6  # lines of an edit event's removed and of its added text shown


def render_history(events: Sequence[tuple[str, str]]) -> str:
    """Edit events as (removed text, added text), oldest first -> the history block.

    An event whose both sides are only whitespace is left out; each side shows at most
    EVENT_LINES lines. "" when no event is left.
    """
    out = []
    for removed, added in events:
        if not removed.strip() and not added.strip():
            continue
        lines = ("".join(f"-{ln}\n" for ln in removed.splitlines()[:EVENT_LINES])
                 + "".join(f"+{ln}\n" for ln in added.splitlines()[:EVENT_LINES]))
        out.append(HISTORY + lines)
    return "".join(out) + FILE_SEP if out else ""


def render_definition(path: str, text: str) -> str:
    """A definition from another file: its path on the separator's line, then its text."""
    return f"{FILE_SEP}{path}\n{text}"
