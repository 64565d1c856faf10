"""The draft index against a brute-force search over random edit sequences, and the ranking of
drafts from several documents. Pure Python except the syntactic-kind tests (real grammar)."""

from __future__ import annotations

import random

import pytest

from redraft.server.core import drafts, draftsearch
from redraft.server.core.document import Document, split_lines, utf8_len
from redraft.server.core.drafts import KEY_CHARS, DraftIndex, Match
from redraft.server.core.draftsearch import DraftSource, lookup, recent_source, syntactic_kind, tree_kind_at
from redraft.server.core.languages import new_parser, syntax_for

WS = " \t\r\n\f\v"
PIECES = ["a", "b", "ab", "ab", "x", ".", "(", ")", " ", "  ", "\t", "é", "😀", "\n", "\n", "\n    "]


def suffix_len(a: str, b: str) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def position(text: str, offset: int) -> tuple[int, int]:
    row = text.count("\n", 0, offset)
    return row, offset - (text.rfind("\n", 0, offset) + 1)


def naive(text: str, before: str, min_chars: int, exclude=None) -> list[tuple[int, int, int]]:
    """(matched, row, col) of every acceptable match, by brute force over the whole text."""
    ws = before[len(before.rstrip(WS)):]
    floor = len(ws) + max(min_chars, KEY_CHARS)
    out = []
    for o in range(len(text) + 1):
        m = suffix_len(before, text[:o])
        pos = position(text, o)
        if m >= floor and pos != exclude:
            out.append((m, *pos))
    return out


def indent_match(before: str, prefix: str) -> int:
    """Reference for ignore_indent: lines equal up to leading blanks count as matching whole."""
    anchor = before.rstrip(WS)
    ws = len(before) - len(anchor)
    b, p = split_lines(anchor), split_lines(prefix[:len(prefix) - ws])
    m = 0
    for k in range(1, min(len(b), len(p)) + 1):
        a, d = b[-k], p[-k]
        more = k < len(b) and k < len(p)
        if a == d or (more and a.lstrip(" \t") == d.lstrip(" \t")):
            m += len(a)
            if more:
                continue
            return ws + m
        return ws + m + suffix_len(a, d)
    return ws + m


def random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(n))


def char_edit(lines: list[str], a: int, b: int, new: str) -> tuple[int, int, list[str]]:
    """The line-level report of replacing characters a..b of "".join(lines) by `new`."""
    text = "".join(lines)
    (sl, sc), (el, ec) = position(text, a), position(text, b)
    out = split_lines(lines[sl][:sc] + new + lines[el][ec:])
    if out[-1] == "" and el + 1 < len(lines):
        out.pop()
    return sl, el - sl + 1, out


def random_before(rng: random.Random, text: str) -> tuple[str, tuple[int, int] | None]:
    o = rng.randrange(len(text) + 1)
    before = text[max(0, o - rng.randrange(1, 40)):o]
    kind = rng.random()
    if kind < 0.2:
        return random_text(rng, rng.randrange(1, 12)), None
    if kind < 0.4:
        before = random_text(rng, 3) + before  # the longest match is then rarely the cursor's own
    if kind > 0.85:
        before += rng.choice([" ", "\n", "\n  ", "  "])
    return before, position(text, o)


def check_find(idx: DraftIndex, text: str, before: str, exclude, min_chars: int, limit: int) -> None:
    got = idx.find(before, exclude=exclude, limit=limit, min_chars=min_chars)
    want = naive(text, before, min_chars, exclude)
    assert [m.matched for m in got] == sorted((m for m, _, _ in want), reverse=True)[:limit], before
    for m in got:
        assert (m.matched, m.row, m.col) in want
        assert (m.row, m.col) != exclude


@pytest.mark.parametrize("seed", range(5))
def test_common_suffix_against_a_char_loop(seed):
    rng = random.Random(seed)
    for _ in range(50):
        shared = random_text(rng, rng.randrange(0, 80))
        a, b = random_text(rng, rng.randrange(0, 5)) + shared, random_text(rng, rng.randrange(0, 5)) + shared
        assert drafts._common_suffix(a, b) == suffix_len(a, b)


@pytest.fixture(params=["buckets", "runs"])
def filing(request, monkeypatch):
    """Both ways of filing: position by position into buckets (small edits), and in numpy runs
    (blocks; here every block, with dead entries dropped as soon as there are any)."""
    if request.param == "runs":
        monkeypatch.setattr(drafts, "BULK_CHARS", 1)
        monkeypatch.setattr(drafts, "COMPACT_CHARS", 0)
    return request.param


@pytest.mark.parametrize("seed", range(60))
def test_find_agrees_with_brute_force_over_random_edits(seed, filing):
    rng = random.Random(seed)
    text = random_text(rng, rng.randrange(0, 120))
    lines = split_lines(text)
    idx = DraftIndex(lines, file_chars=rng.choice([None, 0, 10]))
    for _ in range(25):
        if rng.random() < 0.3:
            idx.file_pending(rng.choice([1, 5, 40]))
        a = rng.randrange(len(text) + 1)
        b = min(len(text), a + rng.choice([0, 0, 1, 3, 20, 60]))
        new = random_text(rng, rng.choice([0, 1, 1, 2, 8, 30]))
        start, count, new_lines = char_edit(lines, a, b, new)
        idx.replace_lines(start, count, new_lines, file_chars=rng.choice([None, None, 0, 4]))
        while idx.file_pending(rng.choice([1, 8, 1000])):
            pass
        lines[start:start + count] = new_lines
        text = text[:a] + new + text[b:]
        assert idx.text == text and len(idx) == len(lines)
        for _ in range(4):
            before, exclude = random_before(rng, text)
            check_find(idx, text, before, exclude, rng.choice([1, KEY_CHARS, 8]), rng.choice([1, 3, 50]))


@pytest.mark.parametrize("seed", range(30))
def test_indent_insensitive_matches_are_real_and_no_shorter(seed):
    rng = random.Random(1000 + seed)
    body = ["x.a(b)\n", "ab = x\n", "a(x)\n", "b.ab\n", "(a)\n"]
    lines = [rng.choice(["", "  ", "    ", "\t"]) + rng.choice(body) for _ in range(30)]
    text = "".join(lines)
    idx = DraftIndex(split_lines(text))
    for _ in range(20):
        before, exclude = random_before(rng, text)
        exact = idx.find(before, exclude=exclude, limit=1)
        loose = idx.find(before, exclude=exclude, limit=5, ignore_indent=True)
        if exact:
            assert loose and loose[0].matched >= exact[0].matched
        for m in loose:
            o = sum(len(t) for t in lines[:m.row]) + m.col
            assert m.matched == indent_match(before, text[:o])


def test_indentation_difference_is_skipped_only_when_asked():
    idx = DraftIndex(split_lines("if ready:\n    go(now)\n    stop()\nz\n        go(now)\n        stop(x)\n"))
    before = "if ready:\n    go(now)\n    stop("
    exact = idx.find(before, exclude=(2, 9))
    assert [(m.row, m.col) for m in exact] == [(5, 13)]
    loose = idx.find(before, exclude=(2, 9), ignore_indent=True)
    assert loose[0] == Match(5, 13, len("\n    go(now)\n    stop("))  # up to "z\n"


def test_document_edits_keep_the_index_in_step():
    d = Document("file:///t.py", "def f(a):\n    return a\n", 1, "python", syntax_for("python"))
    idx = DraftIndex(d.lines)
    edits = [((1, 11, 1, 12), "b + 1"), ((2, 0, 2, 0), "x = 'é😀'\n\n"), ((2, 5, 2, 8), "ü"),
             ((0, 0, 1, 0), ""), ((0, 4, 0, 4), "(\n"), ((0, 0, 9, 0), "")]
    for v, edit in enumerate(edits, start=2):
        for ch in d.apply([edit], v):
            idx.replace_lines(ch.line, ch.old_lines, d.lines[ch.line:ch.line + ch.new_lines])
        assert idx.text == d.text


def test_rows_follow_inserted_and_removed_lines():
    lines = [f"v{i} = compute_value({i})\n" for i in range(50)] + ["done()"]
    idx = DraftIndex(lines)
    idx.replace_lines(10, 0, ["# one\n", "# two\n", "# three\n"])
    assert idx.find("v49 = compute_value(")[0] == Match(52, 20, 20)
    idx.replace_lines(0, 5, [])
    assert idx.find("v49 = compute_value(")[0] == Match(47, 20, 20)
    assert idx.find("= compute_value(", exclude=(47, 20), limit=1)[0].row == 46  # nearest tie


def test_cursor_position_is_excluded():
    text = "total = price * count\nsubtotal = price * "
    idx = DraftIndex(split_lines(text))
    got = idx.find("subtotal = price * ", exclude=(1, 19))
    assert got == [Match(0, 16, 16)]  # "total = price * ": all but "sub"
    assert idx.find("subtotal = price * ", exclude=None)[0] == Match(1, 19, 19)


def test_whitespace_tail_matches_the_previous_line_end():
    text = "for x in xs:\n    handle(x)\n\nfor x in xs:\n    "
    idx = DraftIndex(split_lines(text))
    got = idx.find("for x in xs:\n    ", exclude=(4, 4))
    assert got == [Match(1, 4, 17)]
    assert idx.continuation(1, 4) == "handle(x)"
    assert idx.find("\n    ", exclude=(4, 4)) == []  # whitespace alone is no evidence


def test_continuation():
    idx = DraftIndex(split_lines("alpha(beta)\r\ngamma\n\ndelta"))
    assert idx.continuation(0, 6) == "beta)"
    assert idx.continuation(0, 11, lines=1) == ""
    assert idx.continuation(0, 6, lines=3) == "beta)\ngamma\n"
    assert idx.continuation(2, 0, lines=9) == "\ndelta"


def test_empty_document_and_out_of_range_edits():
    idx = DraftIndex([])
    assert len(idx) == 1 and idx.text == ""
    assert idx.find("anything at all") == []
    assert lookup("anything at all", [DraftSource(idx)]) == []
    with pytest.raises(ValueError):
        idx.replace_lines(1, 1, ["x"])
    idx.replace_lines(0, 1, ["print(value)\n", "print("])
    assert idx.find("int(", exclude=(1, 6)) == []  # shorter than KEY_CHARS
    assert idx.find("print(", exclude=(1, 6)) == [Match(0, 6, 6)]
    assert idx.find("x = print(", exclude=(1, 6))[0] == Match(0, 6, 6)


def test_very_long_line():
    rng = random.Random(7)
    line = "".join(rng.choice("abcdefgh (),.") for _ in range(20_000))
    idx = DraftIndex([line + "\n", "zz" + line[:15_000]])
    got = idx.find("zz" + line[:15_000], exclude=(1, 15_002))
    assert got[0] == Match(0, 15_000, 15_000)
    assert idx.continuation(0, 15_000) == line[15_000:]
    idx.replace_lines(0, 1, [line[:10_000] + "Q" + line[10_001:] + "\n"])
    assert idx.find("zz" + line[:15_000], exclude=(1, 15_002))[0].matched == 15_000 - 10_001


def test_non_ascii_text():
    text = "naïve = «café»  # ☕ 😀\nrésumé = «café»  # ☕ 😀 ok\nprix = «ca"
    idx = DraftIndex(split_lines(text))
    got = idx.find("x = «ca", exclude=(2, 10))
    assert {(m.row, m.col) for m in got} == {(0, 11), (1, 12)}
    assert idx.continuation(1, 12) == "fé»  # ☕ 😀 ok"
    assert idx.find("»  # ☕ 😀", exclude=(0, 21)) == [Match(1, 22, 8)]
    assert idx.find("# ☕ 😀") == []  # five characters: too short


def test_dead_positions_are_dropped_as_a_line_is_retyped():
    idx = DraftIndex(["value = other(x)\n", "end"])
    line = "result = compute(alpha, beta)"
    for n in range(1, len(line) + 1):
        for _ in range(30):
            idx.replace_lines(1, 1, [line[:n]])
    live, total = idx.positions()
    assert total <= 2 * live + 32 * len(idx._buckets)
    assert idx.find("x = compute(alpha, ") == [Match(1, 24, 18)]


# -- lookup --------------------------------------------------------------------------------


def source(text: str, kind: str = "buffer", uri: str = "file:///a.py", cursor=None, **kw) -> DraftSource:
    return DraftSource(DraftIndex(split_lines(text)), kind, uri, cursor, **kw)


def test_lookup_longer_match_wins_and_dedupes():
    text = ("a = make(x, y)\nb = make(x, z)\nc = make(x, z)\nb = make(x, z)\n"
            "b = make(x, ")
    got = lookup("b = make(x, ", [source(text, cursor=(4, 12))], limit=4)
    assert [c.text for c in got] == ["z)", "y)"]
    assert got[0].matched == 12 and got[0].row == 3  # nearest of the longest
    assert got[1].matched == 11 and got[1].score == 11.0


def test_lookup_buffer_over_open_over_recent_distance():
    before = "w = load(path, "
    buf = source("w = load(path, strict=True)\nw = load(path, ", cursor=(1, 15))
    other = source("w = load(path, mode='rb')\n", "open", "file:///b.py")
    got = lookup(before, [other, buf])
    assert [(c.source, c.text) for c in got] == [("buffer", "strict=True)"), ("open", "mode='rb')")]
    snippet = recent_source("w = load(path, cache=False)\n", "file:///a.py", first_row=40)
    got = lookup(before, [other, snippet], limit=1)
    assert got[0].source == "recent" and got[0].row == 40 and got[0].uri == "file:///a.py"


def test_lookup_longer_open_match_beats_shorter_buffer_match():
    buf = source("y = cfg.get(k)\nz = cfg.get(", cursor=(1, 12))
    other = source("z = cfg.get(key, None)\n", "open", "file:///b.py")
    got = lookup("z = cfg.get(", [buf, other])
    assert [c.text for c in got] == ["key, None)", "k)"]


def test_lookup_drops_empty_continuations_and_excludes_the_cursor():
    buf = source("run(job)\nrun(job)  \nrun(job)", cursor=(2, 8))
    got = lookup("x\nrun(job)", [buf], lines=1)
    assert got == []  # the only other matches continue with nothing (or blanks)
    got = lookup("x\nrun(job)", [buf], lines=2)
    assert [c.text for c in got] == ["  \nrun(job)", "\nrun(job)  "]


def test_recent_snippet_excludes_the_cursor_in_document_rows():
    snippet = recent_source("w = load(path, a)\nw = load(path, b)", "file:///a.py", first_row=10,
                            cursor=(11, 15))
    got = lookup("w = load(path, ", [snippet])
    assert [(c.text, c.row) for c in got] == [("a)", 10)]


def test_lookup_nearer_snippet_first():
    far = recent_source("q = parse(text, strict)\n", "file:///a.py", first_row=300)
    near = recent_source("q = parse(text, loose)\n", "file:///a.py", first_row=20)
    cur = source("x\n" * 10 + "q = parse(text, ", cursor=(10, 16))
    got = lookup("q = parse(text, ", [cur, far, near])
    assert [c.text for c in got] == ["strict)", "loose)"]  # a snippet source has no cursor: no distance
    far, near = (DraftSource(s.index, "recent", s.uri, (10, 16), s.first_row) for s in (far, near))
    got = lookup("q = parse(text, ", [cur, far, near])
    assert [(c.text, c.row) for c in got] == [("loose)", 20), ("strict)", 300)]


PY = """class Store:
    def get(self, key):
        if key in self.items:
            return self.items[key]
        return None

def get(key):
    if key in cache:
        return cache_lookup(key)
    return None

class Other:
    def put(self, key):
        if key in cache:
            ret
"""


def test_syntactic_kind_names_enclosing_constructs():
    tree = new_parser(syntax_for("python").grammar).parse(PY.encode())
    assert syntactic_kind(tree, 3, 19) == "if_statement/function_definition"
    assert syntactic_kind(tree, 8, 15) == "if_statement/function_definition"
    assert syntactic_kind(tree, 3, 19, depth=3) == "if_statement/function_definition/class_definition"
    assert syntactic_kind(tree, 0, 3) == ""
    assert syntactic_kind(tree, 14, 15, depth=3) == "if_statement/function_definition/class_definition"


KINDS = """class A:
    def f(self):
        return self.x + 1

def g():
    return self.x * 2

class B:
    def h(self):
        return self.x"""


def test_lookup_prefers_the_cursors_kind():
    tree = new_parser(syntax_for("python").grammar).parse(KINDS.encode())
    idx = DraftIndex(split_lines(KINDS))
    cursor = (9, 21)
    kind = syntactic_kind(tree, 9, utf8_len(idx.line(9)[:21]))
    assert kind == "function_definition/class_definition"
    plain = lookup("return self.x", [DraftSource(idx, cursor=cursor)])
    assert [(c.text, c.matched) for c in plain] == [(" * 2", 13), (" + 1", 13)]  # nearest first
    ranked = DraftSource(idx, cursor=cursor, kind_at=tree_kind_at(tree, idx))
    same = lookup("return self.x", [ranked], kind=kind)
    assert [(c.text, c.score) for c in same] == [(" + 1", 13 + draftsearch.SAME_KIND_BONUS), (" * 2", 13.0)]
