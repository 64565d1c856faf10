"""Size limits of the core: per-keystroke and per-request work stays bounded on huge documents.

Each test counts the work a guarded step did (tokens, lines, characters handed on) rather
than timing it, and checks that what still applies keeps answering the same.
"""

from __future__ import annotations

import difflib
import logging
import random

import pytest

from redraft.engine import prompt
from redraft.server.core import context, drafts, draftsearch, extra, nextedit, sites
from redraft.server.core.context import Draft, Mode, Snapshot, build, find_drafts, statement_rows, take_snapshot
from redraft.server.core.document import Document, split_lines, utf8_len, utf16_to_index
from redraft.server.core.history import EditHistory
from redraft.server.core.languages import syntax_for, walk, walk_rows
from redraft.server.core.settings import ServerConfig

CFG = ServerConfig()


def doc(text: str, language: str = "python", uri: str = "file:///big.py") -> Document:
    return Document(uri, text, 1, language, syntax_for(language))


def functions(n: int, start: int = 0) -> str:
    return "".join(f"def f{i}(a, b):\n    return a + b * {i}\n" for i in range(start, start + n))


@pytest.fixture
def counted(monkeypatch):
    """Tokens nextedit tokenizes and the sequence lengths it diffs, as the guarded code runs."""
    seen = {"tokens": 0, "diffed": []}
    tokens, matcher = nextedit._tokens, difflib.SequenceMatcher

    def counting_tokens(text):
        out = tokens(text)
        seen["tokens"] += len(out)
        return out

    def bounded_matcher(a=(), b=(), **kw):
        seen["diffed"].append(max(len(a), len(b)))
        assert len(a) <= nextedit.MAX_INTENT_TOKENS and len(b) <= nextedit.MAX_INTENT_TOKENS, "unbounded diff"
        return matcher(a=a, b=b, **kw)

    monkeypatch.setattr(nextedit, "_tokens", counting_tokens)
    monkeypatch.setattr(nextedit.difflib, "SequenceMatcher", bounded_matcher)
    return seen


# -- next-edit intent -------------------------------------------------------------------------


def test_a_fifty_thousand_token_replacement_is_skipped_without_diffing_it(counted, caplog):
    d = doc(functions(600))
    before = list(d.lines)
    old_end = len(d.lines) - 1
    pasted = "".join(f"v{i} = f(a, b, c, d, e, g, h, {i}) + k(m, n) * p - q / r % s\n" for i in range(1500))
    assert len(sites.TOKEN.findall(pasted)) >= 50_000
    d.apply([((0, 0, old_end, 0), pasted)], 2)
    with caplog.at_level(logging.INFO):
        assert nextedit.intent(before, d, 0, 1500) is None
        assert nextedit.intent(before, d, 0, 1500) is None
    assert counted["tokens"] == 0 and counted["diffed"] == []  # skipped before tokenizing
    assert sum("no next edits" in r.getMessage() for r in caplog.records) == 1  # once per document


def test_a_replacement_over_the_token_cap_is_skipped_after_trimming(counted):
    d = doc("x = 1\n" + "y = [" + ", ".join(map(str, range(300))) + "]\n" + "z = 2\n")
    before = list(d.lines)
    d.apply([((1, 5, 1, len(d.lines[1]) - 2), ", ".join(f"n{i}" for i in range(300)))], 2)
    assert nextedit.intent(before, d, 1, 1) is None
    assert counted["diffed"] == []  # 600 differing tokens: no quadratic diff
    assert counted["tokens"] < 2000


def test_a_small_edit_in_a_large_region_is_still_found_from_its_lines_alone(counted):
    d = doc(functions(1500))  # 3,000 lines, about 60 KB: a whole-text change of all of it
    before = list(d.lines)
    text = d.text.replace("def f700(a, b):", "def f700(a, b, c):")
    d.apply([(None, text)], 2)
    it = nextedit.intent(before, d, 0, len(d.lines) - 1)
    assert it is None  # the event spans more than MAX_EVENT_LINES: skipped
    d = doc(functions(900))  # 1,800 lines: within the event cap, over the character cap
    before = list(d.lines)
    d.apply([(None, d.text.replace("return a + b * 700\n", "return a - b * 700\n"))], 2)
    counted["tokens"] = 0
    it = nextedit.intent(before, d, 0, len(d.lines) - 1)
    assert (it.kind, it.old, it.new, it.row) == ("replace", "+", "-", 1401)
    assert counted["tokens"] <= 2 * len(sites.TOKEN.findall(d.lines[1401]))  # that line, both sides


def test_a_small_edit_still_proposes_what_it_did_before():
    d = doc("def area(radius):\n    r2 = radius * radius\n    return radius\n")
    before = nextedit.Before.around(d.lines, 0, 0)
    d.apply([((0, 9, 0, 15), "r")], 2)
    it = nextedit.intent(before, d, 0, 0)
    assert (it.kind, it.old, it.new) == ("replace", "radius", "r")
    assert [p.proposed for p in nextedit.proposals(it, d)] == ["    r2 = r * r", "    return r"]


def test_a_before_window_holds_only_the_rows_around_the_edit():
    lines = split_lines(functions(50_000))
    b = nextedit.Before.around(lines, 60_000, 60_001)
    assert b.first == 60_000 - nextedit.MAX_EVENT_LINES and b.total == len(lines)
    assert len(b.lines) == 2 * nextedit.MAX_EVENT_LINES + 2
    assert nextedit.Before.around(lines, 0, 50_000).lines == ()  # a huge range keeps nothing
    d = doc("".join(lines))
    d.apply([((60_000, 4, 60_000, 10), "g30000")], 2)
    it = nextedit.intent(b, d, 60_000, 60_000)
    assert (it.old, it.new, it.row) == ("f30000", "g30000", 60_000)
    far = nextedit.Before.around(lines, 10, 10)  # a window that does not hold the event: nothing
    assert nextedit.intent(far, d, 60_000, 60_000) is None


def test_same_shape_sites_scan_nearest_first_and_stop_when_enough_are_found(monkeypatch):
    d = doc("w = scale(x, 2.5)\n" * 20_000, "plaintext", "file:///big.txt")
    before = list(d.lines)
    row = 10_000
    d.apply([((row, 13, row, 16), "3.5")], 2)
    scanned = []
    tokens = nextedit._tokens
    monkeypatch.setattr(nextedit, "_tokens", lambda t: scanned.append(t) or tokens(t))
    monkeypatch.setattr(sites, "tokens", lambda t: scanned.append(t) or tokens(t))
    it = nextedit.intent(before, d, row, row)
    assert (it.old, it.new) == ("2.5", "3.5")
    scanned.clear()
    props = nextedit.proposals(it, d)
    assert [p.row for p in props] == [9999, 10001, 9998, 10002, 9997, 10003, 9996, 10004]
    # the edited line, the old text, the rows read (one past the last found), two per proposal
    assert len(scanned) <= 3 + 3 * nextedit.MAX_PROPOSALS  # not 20,000 lines


def test_a_far_line_of_the_same_shape_is_still_found_and_shape_checks_are_capped(monkeypatch):
    filler = "pass\n" * 5000
    d = doc("TIMEOUT = wait(3.5)\n" + filler + "RETRY = wait(3.5)\n", "plaintext", "file:///far.txt")
    before = list(d.lines)
    d.apply([((0, 15, 0, 18), "9.0")], 2)
    props = nextedit.proposals(nextedit.intent(before, d, 0, 0), d)
    assert [(p.row, p.proposed) for p in props] == [(5001, "RETRY = wait(9.0)")]
    # 10,000 lines hold the old text but none has the edited line's shape: checks stop at the cap
    d = doc("v = f(3.5)\n" + "3.5 if a else [b, c, d, e, f, g]\n" * 10_000, "plaintext", "file:///cap.txt")
    before = list(d.lines)
    d.apply([((0, 6, 0, 9), "4.5")], 2)
    it = nextedit.intent(before, d, 0, 0)
    calls, matcher = [], difflib.SequenceMatcher
    monkeypatch.setattr(nextedit.difflib, "SequenceMatcher", lambda *a, **k: calls.append(1) or matcher(*a, **k))
    assert nextedit.proposals(it, d) == []
    assert len(calls) == sites.MAX_SHAPE_CHECKS


def test_a_rename_whose_scope_reaches_past_the_rows_searched_is_not_offered(caplog):
    text = "LIMIT = 10\n" + functions(sites.SITE_ROWS) + "print(LIMIT)\n"
    d = doc(text)
    before = list(d.lines)
    d.apply([((0, 0, 0, 5), "MAXIMUM")], 2)
    it = nextedit.intent(before, d, 0, 0)
    assert (it.old, it.new) == ("LIMIT", "MAXIMUM")
    with caplog.at_level(logging.INFO):
        assert nextedit.proposals(it, d) == []  # the far use would be left behind: nothing
    assert "rename" in caplog.text
    near = doc("LIMIT = 10\n" + functions(10) + "print(LIMIT)\n")
    before = list(near.lines)
    near.apply([((0, 0, 0, 5), "MAXIMUM")], 2)
    props = nextedit.proposals(nextedit.intent(before, near, 0, 0), near)
    assert [(p.proposed, p.whole) for p in props] == [("print(MAXIMUM)", True)]


def test_identifier_sites_walk_only_rows_near_the_edit():
    d = doc(functions(9_000))  # 18,000 lines, under MAX_PARSE_BYTES
    assert d.tree is not None
    row = 9_000
    seen = sum(1 for _ in walk_rows(d.tree.root_node, row - sites.SITE_ROWS, row + sites.SITE_ROWS))
    total = sum(1 for _ in walk(d.tree.root_node))
    assert seen < total / 3
    inside = {(n.start_point, n.type) for n in walk(d.tree.root_node)
              if n.end_point[0] >= row - 5 and n.start_point[0] <= row + 5}
    assert inside == {(n.start_point, n.type) for n in walk_rows(d.tree.root_node, row - 5, row + 5)}


def test_rows_read_like_the_document_near_the_window():
    lines = split_lines(functions(1000))
    rows = nextedit.Rows(lines, 500, 900)
    assert len(rows) == len(lines) and rows[700] == lines[700]
    assert "".join(rows[:600])[-800:] == "".join(lines[:600])[-800:]
    assert "".join(rows[601:]).startswith("".join(lines[601:650]))
    with pytest.raises(IndexError):
        rows[10]


# -- snapshots and context windows -------------------------------------------------------------


def test_a_snapshot_of_a_huge_document_freezes_a_window_and_builds_the_same_context(caplog):
    d = doc(functions(60_000), "plaintext", "file:///big.txt")
    row = 70_000
    with caplog.at_level(logging.INFO):
        snap = take_snapshot(d, row, 4, CFG)
        take_snapshot(d, row + 1, 4, CFG)
    reach = context.snapshot_lines(CFG)
    assert len(snap.lines) == 2 * reach + 1 and snap.first == row - reach and snap.nlines == len(d.lines)
    assert sum("snapshots keep a window" in r.getMessage() for r in caplog.records) == 1
    whole = Snapshot(snap.uri, snap.version, snap.syntax, tuple(d.lines), row, 4, snap.mode, snap.reason,
                     snap.header_indent, CFG)
    assert (snap.left, snap.right) == (whole.left, whole.right)
    chars = lambda t: t.count("\n") + 1  # the cheapest tokens: the window's worst case
    assert build(snap, chars) == build(whole, chars)
    assert build(snap, len) == build(whole, len)


def test_an_ordinary_document_is_snapshot_whole():
    d = doc(functions(800))
    snap = take_snapshot(d, 700, 4, CFG)
    assert snap.lines == tuple(d.lines) and snap.first == 0


def test_statement_rows_visit_only_the_window():
    d = doc(functions(9_000))
    row = 9_001
    got = statement_rows(d, row, first=row - 100, last=row + 100)
    assert got and all(row - 101 <= r <= row + 100 for r in got)  # (a node may start just above)
    assert {r for r in got if r >= row - 100} == {r for r in statement_rows(d, row) if row - 100 <= r <= row + 100}


def test_a_five_megabyte_line_is_examined_only_around_the_cursor(monkeypatch):
    line = "a=[1,2,3];" * 500_000
    d = doc(line + "\nb = f(", "plaintext", "file:///min.txt")
    looked = []
    binary = context._binary
    monkeypatch.setattr(context, "_binary", lambda t: looked.append(len(t)) or binary(t))
    snap = take_snapshot(d, 0, len(line), CFG)
    assert snap.mode is Mode.LINE and max(looked) <= 2 * context.LONG_LINE_CHARS
    assert take_snapshot(d, 1, 6, CFG).mode is Mode.ARGS
    counted = []

    def count(text):
        counted.append(len(text))
        return len(text) // 3 + 1
    ctx = build(snap, count)
    assert max(counted) <= int(CFG.context_tokens * context.CHARS_PER_TOKEN) * context.CUT_FACTOR
    assert ctx.prefix and line.endswith(ctx.prefix) and len(ctx.prefix) <= CFG.context_tokens * 3
    # The window's start moves once per CUT_GRID characters typed, so keys/values are reused.
    starts = set()
    for k in range(1, 2 * context.CUT_GRID + 1):
        d.apply([((0, len(line) + k - 1, 0, len(line) + k - 1), "x")], k + 1)
        prefix = build(take_snapshot(d, 0, len(line) + k, CFG), count).prefix
        assert prefix.endswith("x" * k) or prefix == "x" * len(prefix)
        starts.add(len(line) + k - len(prefix))
    assert len(starts) <= 3


def test_drafts_match_a_bounded_stretch_before_the_cursor(monkeypatch):
    line = "call(alpha, beta); " * 300_000
    d = doc(line + "\n" + "call(alpha, ", "plaintext", "file:///min.txt")
    asked = []
    lookup = draftsearch.lookup
    monkeypatch.setattr(draftsearch, "lookup", lambda before, *a, **kw: asked.append(len(before)) or lookup(before, *a, **kw))
    index = drafts.DraftIndex(split_lines(line[:10_000] + "\n" + "call(alpha, "))
    got = find_drafts(d, index, 1, 12, Mode.ARGS, 8)
    assert asked == [context.DRAFT_BEFORE_CHARS]
    assert got and got[0].text.startswith("beta)")
    # No index (too large): nothing from it, only the plain copy (linecopy.py), which reads a
    # bounded window: the rest of the big line after its last "call(alpha, ".
    assert find_drafts(d, None, 1, 12, Mode.ARGS, 8) == (Draft("beta); ", "buffer"),)


# -- extra context -----------------------------------------------------------------------------


def test_definitions_of_a_document_over_the_limit_are_not_read(caplog):
    big = doc(functions(8_000), uri="file:///big.py")
    assert big.size_bytes > extra.MAX_DOC_BYTES
    cache: extra.DefinitionCache = {}
    with caplog.at_level(logging.INFO):
        assert extra.definitions(big, cache) == {}
        big.version = 2
        assert extra.definitions(big, cache) == {}
    assert sum("no definitions" in r.getMessage() for r in caplog.records) == 1
    assert "f3" in extra.definitions(doc(functions(10), uri="file:///small.py"), cache)


def test_names_near_a_minified_line_read_its_end_only():
    line = "".join(f"v{i}=w{i};" for i in range(500_000))
    d = doc(line + "\n", "plaintext", "file:///min.txt")
    names = extra.names_near(d, 0, len(line))
    assert "v499999" in names and "v0" not in names
    assert len(names) < extra.NEAR_CHARS // 4


def test_a_huge_edit_event_renders_like_its_first_lines():
    history = EditHistory()
    d = doc("x = 1\n")
    pasted = "y = 2\n" * 100_000
    for ch in d.apply([((0, 0, 0, 0), pasted)], 2):
        history.record(ch, 0.0)
    minified = "z=3;" * 1_000_000
    for ch in d.apply([((0, 0, 0, 0), minified)], 3):
        history.record(ch, 10.0)
    text = extra.edit_history(history.recent())
    assert text == prompt.render_history([("", "y = 2\n" * prompt.EVENT_LINES),
                                          ("", minified[:extra.SHOWN_CHARS])])
    random.seed(3)
    alphabet = ["a", " ", "\n", "\r\n", "\x0b", "b\n", "\u2028"]
    for _ in range(2000):  # an ordinary event renders exactly as before
        a, b = ("".join(random.choice(alphabet) for _ in range(random.randint(0, 30))) for _ in range(2))
        assert prompt.render_history([(extra._shown(a), extra._shown(b))]) == prompt.render_history([(a, b)])


# -- documents and the draft index ------------------------------------------------------------


class _Walked(list):
    """A list that counts how often it is walked whole."""
    walks = 0

    def __iter__(self):
        _Walked.walks += 1
        return super().__iter__()


def test_document_size_is_kept_per_edit_and_the_parse_limit_is_logged_once(caplog):
    d = doc("x = 1\n")
    random.seed(5)
    d._blen = _Walked(d._blen)
    d.apply([((0, 0, 0, 0), "y = 2\n")], 2)
    assert d.size_bytes == 12 and _Walked.walks == 0  # no sum over the lines per edit or per call
    with caplog.at_level(logging.INFO):
        d.apply([((1, 0, 1, 0), "é = 'ünï' # 😀\n" * 80_000)], 2)
        assert d.tree is None
        d.apply([((5, 0, 7, 3), "abc")], 3)
        d.apply([((0, 0, 0, 0), "z")], 4)
        for v in range(5, 40):
            r = random.randrange(len(d.lines))
            d.apply([((r, 0, min(r + 3, len(d.lines) - 1), 2), random.choice(["", "q\n", "ü😀\n\n"]))], v)
        assert d.size_bytes == sum(utf8_len(s) for s in d.lines)
        d.apply([(None, "small = 1\n")], 50)
    assert d.size_bytes == len("small = 1\n") and d.tree is not None  # parsed again once small
    assert sum("no syntax tree" in r.getMessage() for r in caplog.records) == 1


def test_utf16_columns_on_long_lines_match_counting_characters():
    def reference(s, units):
        if units < 0:
            return None
        n = 0
        for i, ch in enumerate(s):
            if n >= units:
                return i
            n += 2 if ord(ch) > 0xFFFF else 1
        return len(s) if units <= n else None
    random.seed(7)
    for alphabet in (["a", "é", "😀", "中"], ["a", "😀", "\ud800", "\udc00"]):
        for _ in range(3000):
            s = "".join(random.choice(alphabet) for _ in range(random.randint(0, 9)))
            for units in range(-1, 20):
                assert utf16_to_index(s, units) == reference(s, units), (s, units)
    long = "é😀" * 1_000_000
    assert utf16_to_index(long, 3 * 700_000 + 1) == 2 * 700_000 + 1


def test_the_draft_index_files_within_its_budget_and_catches_up():
    lines = split_lines(functions(5_000) + "tail_marker = compute(alpha)\n")
    budget = 4096
    idx = drafts.DraftIndex(lines[:2], file_chars=budget)
    idx.replace_lines(1, 1, lines[1:], file_chars=budget)
    assert idx.filed_chars <= len(lines[0]) + len(lines[1]) + budget + max(map(len, lines)) and idx.pending > 1000
    assert idx.find("tail_marker = comp") == []  # not filed yet
    slices = 0
    while idx.file_pending(4096):
        slices += 1
    assert slices > 20 and idx.pending == 0
    whole = drafts.DraftIndex(lines)
    for before in ("tail_marker = comp", "def f4321(a, b):\n    return a + b", "    return a + b * 12"):
        assert idx.find(before, limit=20) == whole.find(before, limit=20)
    live, total = idx.positions()
    assert live == whole.positions()[0] and total >= live
