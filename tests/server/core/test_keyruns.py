"""Sorted runs of filed positions (keyruns.py) against per-position references, and the draft
index dropping their dead entries."""

from __future__ import annotations

import random

import numpy as np
import pytest

from redraft.server.core import drafts, keyruns
from redraft.server.core.drafts import DraftIndex, Match
from redraft.server.core.keyruns import KEY_CHARS, build, key_of

ALPHABET = "ab(x .\n\té€😀☕\u03ff\u0400"


def codes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


@pytest.mark.parametrize("seed", range(5))
def test_vector_keys_agree_with_key_of(seed):
    rng = random.Random(seed)
    for _ in range(200):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(KEY_CHARS, 40)))
        keys = keyruns._keys(codes(text))
        assert len(keys) == len(text) - KEY_CHARS + 1
        assert [int(k) for k in keys] == [key_of(text[j:j + KEY_CHARS]) for j in range(len(keys))]


def test_keys_are_exact_below_u0400_and_hashed_apart_above():
    assert key_of("abcdef") != key_of("abcdeg")
    assert key_of("\u03ff" * 6) < 1 << 60  # exact
    assert key_of("\u0400" * 6) >= 1 << 63  # hashed: never equal to an exact key
    assert len({key_of(s) for s in ("ab😀cde", "ab😀cdf", "😀abcde", "abcde😀")}) == 4


@pytest.mark.parametrize("seed", range(10))
def test_build_files_what_position_by_position_filing_files(seed):
    """Every key's entries, in order, as the per-position loop files them into buckets."""
    rng = random.Random(seed)
    text = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 300)))
    lines = text.split("\n")
    lines = [t + "\n" for t in lines[:-1]] + [lines[-1]]
    ctx = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 7)))
    ctx = (ctx + "\n")[-KEY_CHARS:] if ctx else ""
    ref = DraftIndex([""])  # only its per-position filing is used, on lines of its own
    uids, starts, at = [], [], len(ctx)
    for i, t in enumerate(lines):
        ln = drafts._Line(t, i, 100 + i)
        ref._file(ln, (ctx + "".join(lines[:i]))[-KEY_CHARS:])
        uids.append(ln.uid)
        starts.append(at)
        at += len(t)
    run = build(ctx + text, len(ctx), starts, uids)
    want = {}
    for key, b in ref._buckets.items():
        got = [e for e in memoryview(b).cast("q").tolist() if e >> 32 >= 100]
        if got:
            want[key_of(key)] = got
    assert len(run) == sum(len(v) for v in want.values())
    assert list(run.keys) == sorted(run.keys)
    for k, entries in want.items():
        assert run.lookup(k) == entries


def test_merge_keeps_older_entries_first_and_keep_filters_by_line():
    a = build("abcdefgh abcdefgh", 0, [0], [1])
    b = build("xabcdefgh", 0, [0], [2])
    m = a.merged(b)
    assert list(m.keys) == sorted(m.keys) and len(m) == len(a) + len(b)
    assert m.lookup(key_of("abcdef")) == [1 << 32 | 6, 1 << 32 | 15, 2 << 32 | 7]
    assert m.keep(np.array([2], dtype=np.int64)).lookup(key_of("abcdef")) == [2 << 32 | 7]
    assert m.lookup(key_of("zzzzzz")) == []


def test_a_document_opens_in_runs_and_retyped_lines_leave_no_dead_entries(monkeypatch):
    monkeypatch.setattr(drafts, "COMPACT_CHARS", 1000)
    lines = [f"value_{i} = compute(alpha, {i})\n" for i in range(400)] + ["done()"]
    idx = DraftIndex(lines)
    assert idx._runs and not idx._buckets  # one block, filed at once
    assert idx.find("value_39 = compute(alpha, 39", exclude=(39, 28), limit=1) == [Match(399, 29, 21)]
    for r in range(400):  # every line retyped: small edits, filed into buckets
        idx.replace_lines(r, 1, [f"item_{r} = compute(beta, {r})\n"])
    # The run's entries died with their lines and were dropped once they outnumbered COMPACT_CHARS
    # and the live ones (the run holds ~11k entries, the last line's 6 live).
    assert sum(len(r) for r in idx._runs) <= 1000 + len("done()")
    assert idx.find("value_39 = compute(alpha, 39") == []
    assert idx.find("item_39 = compute(beta, 39", exclude=(39, 26), limit=1) == [Match(399, 27, 20)]
