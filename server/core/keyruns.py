"""Sorted runs of a draft index's filed positions, built with numpy in one pass.

Filing a document position by position in Python costs ~0.75 s per MB (drafts.py), which the
server paid on the event loop when a document opened. A run files a whole block of lines at
once: every position's key (the KEY_CHARS characters before it) becomes a 64-bit integer, and
the positions are sorted by key, so a lookup is two binary searches. Keys whose characters are
all below U+0400 (nearly all code) are exact, ten bits per character; any other key is a
64-bit polynomial hash with the top bit set, so the two kinds never meet and a hash collision
would need two distinct non-Latin keys to agree on 63 bits.

Entries are the index's own (line uid << 32 | column). Within one key a run keeps document
order, and a merge keeps the older run's entries first, as the index's buckets do. Dead
entries (of replaced lines) stay until `keep` filters them. Knows nothing of lines or edits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KEY_CHARS = 6
_BITS = 10  # per character of an exact key: 6 x 10 = 60 bits
_EXACT_BELOW = 1 << _BITS
_HASHED = 1 << 63  # marks a hashed key (exact keys stay below 2**60)
_MUL = 0x100000001B3  # FNV-1's 64-bit prime (odd)
_M64 = (1 << 64) - 1


def key_of(chars: str) -> int:
    """The integer key of KEY_CHARS characters, as `build` computes it."""
    codes = [ord(c) for c in chars]
    if max(codes) < _EXACT_BELOW:
        k = 0
        for c in codes:
            k = k << _BITS | c
        return k
    h = 0
    for c in codes:
        h = (h * _MUL + c) & _M64
    return h | _HASHED


def _keys(codes: np.ndarray) -> np.ndarray:
    """key_of for every KEY_CHARS-character window of `codes` (uint32 code points): the key of
    codes[j:j + KEY_CHARS] at j."""
    n = len(codes) - KEY_CHARS + 1
    c = codes.astype(np.uint64)
    keys = np.zeros(n, dtype=np.uint64)
    for i in range(KEY_CHARS):
        keys = (keys << np.uint64(_BITS)) | c[i:i + n]
    big = np.concatenate([[0], np.cumsum(codes >= _EXACT_BELOW)])
    wide = np.flatnonzero(big[KEY_CHARS:] - big[:n] > 0)  # windows holding a wide character
    if len(wide):
        h = np.zeros(len(wide), dtype=np.uint64)
        for i in range(KEY_CHARS):
            h = h * np.uint64(_MUL) + c[wide + i]  # wraps mod 2**64, as key_of masks
        keys[wide] = h | np.uint64(_HASHED)
    return keys


@dataclass(frozen=True)
class Run:
    keys: np.ndarray  # uint64, sorted
    entries: np.ndarray  # int64, the entry of each key (document order within a key)

    def __len__(self) -> int:
        return len(self.entries)

    def lookup(self, key: int) -> list[int]:
        """The entries filed under `key`, oldest first."""
        k = np.uint64(key)
        lo = int(np.searchsorted(self.keys, k, side="left"))
        hi = int(np.searchsorted(self.keys, k, side="right"))
        return self.entries[lo:hi].tolist() if hi > lo else []

    def keep(self, live_uids: np.ndarray) -> "Run":
        """Only the entries of lines whose uid is in `live_uids` (sorted int64)."""
        alive = np.isin(self.entries >> 32, live_uids, assume_unique=False)
        return Run(self.keys[alive], self.entries[alive])

    def merged(self, newer: "Run") -> "Run":
        """This run and a newer one as one; within a key this run's entries come first."""
        keys = np.concatenate([self.keys, newer.keys])
        order = np.argsort(keys, kind="stable")  # two sorted runs: a linear merge
        return Run(keys[order], np.concatenate([self.entries, newer.entries])[order])


def build(text: str, ctx: int, line_starts: list[int], uids: list[int]) -> Run:
    """A run of the positions of `text[ctx:]`, whose lines start at `line_starts` (offsets in
    `text`, the first == ctx) with uids `uids`; `text[:ctx]` is the context their first keys
    reach back into. A position (just after a character) is filed when that character is not
    whitespace and KEY_CHARS characters precede it; its column counts from its line's start."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    if len(codes) < KEY_CHARS:
        return Run(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64))
    ends = np.arange(max(KEY_CHARS, ctx + 1), len(codes) + 1)  # a position = the offset after its char
    prev = codes[ends - 1]
    ends = ends[(prev != 32) & ((prev < 9) | (prev > 13))]  # not after " \t\n\v\f\r"
    keys = _keys(codes)[ends - KEY_CHARS]
    starts = np.asarray(line_starts, dtype=np.int64)
    line = np.searchsorted(starts, ends - 1, side="right") - 1  # the line holding the char before
    entries = (np.asarray(uids, dtype=np.int64)[line] << 32) | (ends - starts[line])
    order = np.argsort(keys, kind="stable")
    return Run(keys[order], entries[order])
