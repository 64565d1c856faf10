"""The cache model over the server's draft indexes, against a brute-force count over the whole
text, under random edit sequences; and the lock that lets the engine's thread read an index
the event loop edits."""

from __future__ import annotations

import random
import threading

import pytest

from redraft.engine import CacheModel, Engine
from redraft.server.core.copying import CopyLookup
from redraft.server.core.document import split_lines
from redraft.server.core.drafts import KEY_CHARS, DraftIndex
from redraft.server.core.draftsearch import DraftSource

PIECES = ["foo(bar", "x)", ".baz", "ab", "=", "1", "qux", "\n", "\n"]  # repeats often; no blanks, so no indentation
LINES = 2
SOME = 10_000  # no cap on matches: the reference counts every one


@pytest.fixture(scope="module")
def tok():
    return Engine.load().tokenizer


def random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(n))


def position(text: str, offset: int) -> tuple[int, int]:
    row = text.count("\n", 0, offset)
    return row, offset - (text.rfind("\n", 0, offset) + 1)


def suffix_len(a: str, b: str) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def reference(tok, text: str, cursor: int, min_matched: int) -> dict[int, float]:
    """Next-token weights by brute force: every other position whose preceding text matches the
    text before the cursor for at least min_matched characters votes for the first token of
    what follows it (LINES lines), with weight matched squared."""
    before = text[:cursor].rstrip(" \n")
    tail = text[len(before):cursor]  # trailing whitespace must simply follow (as drafts.find does)
    votes: dict[int, float] = {}
    for o in range(len(text) + 1):
        if o + len(tail) == cursor or not text[o:].startswith(tail):
            continue
        m = suffix_len(before, text[:o])
        if m < KEY_CHARS or m + len(tail) < min_matched:  # (the trailing whitespace counts as matched)
            continue
        rest = text[o + len(tail):].split("\n")
        cont = "\n".join(rest[:LINES])
        if not cont.strip():
            continue
        first = tok.encode(cont)[0]
        votes[first] = votes.get(first, 0.0) + float((m + len(tail)) ** 2)
    total = sum(votes.values())
    return {t: v / total for t, v in votes.items()} if total else {}


@pytest.mark.parametrize("seed", range(12))
def test_prediction_agrees_with_brute_force_counts_over_random_edits(tok, seed):
    rng = random.Random(seed)
    text = random_text(rng, 60)
    idx = DraftIndex(split_lines(text))
    checked = 0
    for _ in range(20):
        a = rng.randrange(len(text) + 1)
        b = min(len(text), a + rng.choice([0, 1, 4, 20]))
        new = random_text(rng, rng.choice([0, 1, 3, 10]))
        text = text[:a] + new + text[b:]
        idx = _edit(idx, text)
        for _ in range(3):
            cursor = rng.randrange(len(text) + 1)
            src = DraftSource(idx, "buffer", cursor=position(text, cursor))
            lookup = CopyLookup(text[:cursor], [src], LINES, per_source=SOME, limit=SOME)
            cache = CacheModel(lookup, tok)
            pred = cache.predict(())
            want = reference(tok, text, cursor, cache.cfg.min_matched)
            got = {} if pred is None else dict(zip(pred.ids.tolist(), pred.probs.tolist()))
            assert got.keys() == want.keys(), (text, cursor)
            for t in want:
                assert got[t] == pytest.approx(want[t], abs=1e-5)
            checked += bool(want)
    assert checked  # some cursors had matches


def _edit(idx: DraftIndex, text: str) -> DraftIndex:
    """The index after the document became `text`: one replace of the lines that differ."""
    old, new = split_lines(idx.text), split_lines(text)
    lo = 0
    while lo < min(len(old), len(new)) and old[lo] == new[lo]:
        lo += 1
    hi = 0
    while hi < min(len(old), len(new)) - lo and old[-1 - hi] == new[-1 - hi]:
        hi += 1
    idx.replace_lines(lo, len(old) - lo - hi, new[lo:len(new) - hi])
    assert idx.text == text
    return idx


def test_lookups_on_another_thread_see_whole_edits(tok):
    """The engine's thread reads while the event loop edits: every continuation it gets is
    one the document held at some moment (never a half-made edit), and nothing raises."""
    a = "value = compute(first, second)\n" * 30
    b = "value = compute(third, fourth)\n" * 30
    idx = DraftIndex(split_lines(a))
    src = DraftSource(idx, "buffer", cursor=(0, 0))
    seen, errors, stop = set(), [], threading.Event()

    def read():
        try:
            while not stop.is_set():
                for c in CopyLookup("value = compute(", [src], 1)(""):
                    seen.add(c.text)
        except Exception as e:  # pragma: no cover - the failure this test exists to catch
            errors.append(e)

    t = threading.Thread(target=read)
    t.start()
    for n in range(300):
        text = b if n % 2 == 0 else a
        idx.replace_lines(0, len(idx), split_lines(text))
    stop.set()
    t.join()
    assert not errors
    assert seen and seen <= {"first, second)", "third, fourth)"}


DOC = ("def area(width, height):\n    return width * height\n\n\n"
       "def volume(width, height, depth):\n    return width * height * depth\n\n\n"
       "def weight(width, height, depth):\n    return width * ")


@pytest.mark.parametrize("cache", [True, False])
def test_the_cache_setting_reaches_the_engine(cache):
    """The server's pipeline hands the engine a lookup over the document's index only when the
    `cache` setting is on; the engine's stats count the lookups it made."""
    from redraft.server.core.context import own_drafts, text_snapshot
    from redraft.server.core.inference import answer
    from redraft.server.core.settings import parse

    config, problems = parse({"cache": cache, "drafts": "off"})
    assert problems == [] and config.cache is cache
    snap, doc = text_snapshot("file:///w.py", DOC, len(DOC), config, "python")
    snap = own_drafts(snap, doc, config)
    assert (snap.lookup is not None) is cache
    engine = Engine.load()
    got = answer(engine, snap, sampler=engine.sampler.with_(min_score=float("-inf")))
    assert got.stats is not None
    assert (got.stats.cache_queries > 0) is cache
    if cache:  # the copy is long and agreed on: it is what the model writes
        assert got.edit is not None and got.edit.text.startswith("height * depth")
    assert parse({"cache": "yes"})[1]  # not a boolean: one problem, the default kept
