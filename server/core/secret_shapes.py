"""The shapes of common credentials inside ordinary files: AWS key ids, GitHub, GitLab, Slack,
Stripe, Google, OpenAI, Anthropic, npm, PyPI, Hugging Face and SendGrid tokens, JSON web
tokens, Azure storage keys and PEM private keys.

A secret file (exclude.py) is never read at all; a token pasted into ordinary source is found
only by its shape. Each pattern has a fixed prefix or structure of its own, so ordinary code
does not match (no entropy guessing: a hash or a UUID is not a secret). `redact` blanks the
lines that hold one (a private key from its BEGIN line through its END line), keeping the line
count, before a file's text feeds drafts; `contains` tells whether a text holds one.

Pure: knows nothing of LSP, HTTP or the engine.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate

# (literals one of which every match holds, pattern): a pattern runs only on a text holding
# one of its literals, so ordinary code costs a few substring searches, not a regex scan.
SHAPES = (
    (("AKIA", "ASIA", "ABIA", "ACCA", "A3T"), r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b"),  # AWS key id
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b"),  # GitHub tokens
    (("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{60,255}\b"),  # GitHub fine-grained token
    (("glpat-",), r"\bglpat-[A-Za-z0-9_-]{20,}"),  # GitLab personal access token
    (("xox",), r"\bxox[abeoprs]-[A-Za-z0-9-]{10,}"),  # Slack tokens
    (("hooks.slack.com",), r"hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+"),  # Slack
    (("k_live_",), r"\b[rs]k_live_[A-Za-z0-9]{20,}"),  # Stripe live keys
    (("AIza",), r"\bAIza[A-Za-z0-9_-]{35}\b"),  # Google API key
    (("T3BlbkFJ",), r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{16,}T3BlbkFJ[A-Za-z0-9_-]{16,}"),  # OpenAI
    (("sk-ant-",), r"\bsk-ant-[a-z]+\d*-[A-Za-z0-9_-]{40,}"),  # Anthropic
    (("npm_",), r"\bnpm_[A-Za-z0-9]{36}\b"),  # npm
    (("pypi-AgEIcHlwaS5vcmc",), r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}"),  # PyPI
    (("hf_",), r"\bhf_[A-Za-z0-9]{34,}\b"),  # Hugging Face
    (("SG.",), r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b"),  # SendGrid
    (("eyJ",), r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),  # JSON web token
    (("AccountKey=",), r"AccountKey=[A-Za-z0-9+/]{80,}={0,2}"),  # Azure storage connection string
    (("PRIVATE KEY",), r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),  # PEM private key
)
_SHAPES = [(literals, re.compile(pattern)) for literals, pattern in SHAPES]
KEY_BEGIN = _SHAPES[-1][1]
KEY_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")


def _found(text: str) -> list[re.Pattern]:
    return [pattern for literals, pattern in _SHAPES
            if any(x in text for x in literals) and pattern.search(text) is not None]


def contains(text: str) -> bool:
    """Whether a text holds a credential of a known shape or a private key's first line."""
    return bool(_found(text))


def redact(text: str) -> str:
    """The text with every line holding a credential blanked, and a private key's lines from
    BEGIN through END (to the end of the text when it has none); as many lines as before."""
    found = _found(text)
    if not found:
        return text
    lines = text.split("\n")
    starts = list(accumulate((len(ln) + 1 for ln in lines[:-1]), initial=0))  # each line's offset
    blank = set()
    for pattern in found:
        for m in pattern.finditer(text):
            first = bisect_right(starts, m.start()) - 1
            last = len(lines) - 1
            if pattern is KEY_BEGIN:  # the key's body lines too
                end = KEY_END.search(text, m.end())
                last = last if end is None else bisect_right(starts, end.start()) - 1
            else:
                last = bisect_right(starts, m.end() - 1) - 1
            blank.update(range(first, last + 1))
    return "\n".join("" if i in blank else ln for i, ln in enumerate(lines))
