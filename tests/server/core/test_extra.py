"""Extra context (definitions from other open documents, finished edits) and the unit-end
stop, on real documents and grammars, without a model."""

from __future__ import annotations

import pytest

from redraft.server.core import extra, postprocess
from redraft.server.core.context import Mode, build, take_snapshot
from redraft.server.core.document import Document
from redraft.server.core.history import EditHistory
from redraft.server.core.languages import syntax_for
from redraft.server.core.settings import ServerConfig

SHAPES = '''import math


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def area(self):
        return math.pi * self.radius ** 2


@cache
def unit_circle():
    return Circle(1.0)
'''

UTILS_JS = '''function clamp(value, lo, hi) {
  return Math.min(Math.max(value, lo), hi);
}

class Range {
  constructor(lo, hi) { this.lo = lo; this.hi = hi; }
}
'''


def doc(uri: str, text: str, language: str) -> Document:
    return Document(uri, text, 1, language, syntax_for(language, uri))


@pytest.mark.parametrize("uri,text,language,names", [
    ("file:///shapes.py", SHAPES, "python", {"Circle", "__init__", "area", "unit_circle"}),
    ("file:///utils.js", UTILS_JS, "javascript", {"clamp", "Range"}),
    ("file:///notes.txt", "def helper(x):\n  pass\nfunc run() {}\n", "plaintext", {"helper", "run"}),
])
def test_definitions_by_name(uri, text, language, names):
    defs = extra.definitions(doc(uri, text, language), {})
    assert names <= set(defs)
    first = defs[sorted(names)[0]]
    assert first.text.splitlines()[0] == text.splitlines()[first.row]


def test_definitions_are_cached_per_version():
    cache: dict = {}
    d = doc("file:///shapes.py", SHAPES, "python")
    a = extra.definitions(d, cache)
    assert extra.definitions(d, cache) is a
    d.apply([((13, 0, 13, 0), "def another():\n    pass\n")], 2)
    assert "another" in extra.definitions(d, cache)


def test_definitions_of_names_near_the_cursor_from_other_documents():
    shapes = doc("file:///lib/shapes.py", SHAPES, "python")
    here = doc("file:///app.py", "from shapes import Circle\n\nc = Circle(2.0)\nprint(c.\n", "python")
    text = extra.build(here, [shapes], [], 3, 8, 4000, {})
    assert text.startswith("<|file_sep|>/lib/shapes.py\nclass Circle:\n")
    assert "unit_circle" not in text  # not used near the cursor
    # typing more of the line does not change it (its keys/values stay cached)
    assert extra.build(here, [shapes], [], 3, 7, 4000, {}) == text


def test_a_name_defined_here_needs_no_other_definition():
    shapes = doc("file:///lib/shapes.py", SHAPES, "python")
    here = doc("file:///app.py", "class Circle:\n    pass\n\nc = Circle(2.0)\n", "python")
    assert extra.build(here, [shapes], [], 3, 15, 4000, {}) == ""


def test_budget_keeps_whole_definitions():
    shapes = doc("file:///lib/shapes.py", SHAPES, "python")
    here = doc("file:///app.py", "x = Circle(1)\ny = unit_circle()\n", "python")
    full = extra.build(here, [shapes], [], 1, 17, 4000, {})
    cut = extra.build(here, [shapes], [], 1, 17, len(full) - 1, {})
    assert full.count("<|file_sep|>") == 2 and cut.count("<|file_sep|>") == 1 and full.startswith(cut)


def test_history_shows_finished_edits_only():
    d = doc("file:///a.py", "a = 1\nb = 2\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\nz = 0\n", "python")
    h = EditHistory()
    t = 0.0
    for rng, text in (((0, 4, 0, 5), "10"), ((20, 4, 20, 5), "9")):
        for change in d.apply([(rng, text)], 2):
            h.record(change, t)
        t += 5.0
    text = extra.finished_history(h.recent(), cursor_row=20)  # the second edit is still at the cursor
    assert text == "<|history|>-1\n+10\n<|file_sep|>"
    assert extra.finished_history(h.recent(), cursor_row=10).count("<|history|>") == 2


def test_extra_context_takes_at_most_its_share():
    d = doc("file:///a.py", "x = 1\ny = ", "python")
    snap = take_snapshot(d, 1, 4, ServerConfig(context_tokens=100, extra_share=0.25), extra="E" * 90)
    count = len  # one token per character
    assert build(snap, count).extra == ""  # 90 > 25: left out whole rather than cut
    snap = take_snapshot(d, 1, 4, ServerConfig(context_tokens=100, extra_share=0.25), extra="E" * 20)
    ctx = build(snap, count)
    assert ctx.extra == "E" * 20 and len(ctx.prefix) + len(ctx.suffix) <= 80


@pytest.mark.parametrize("text,row,col,so_far,ended", [
    ("x = f(", 0, 6, "a, b)", False),
    ("x = f(", 0, 6, "a, b)\nnext", True),
    ("def f(a):\n    ", 1, 4, "return a", False),
    ("def f(a):\n    ", 1, 4, "if a:\n        return a\n    return 0\n", False),
    ("def f(a):\n    ", 1, 4, "if a:\n        return a\n    return 0\ndef g", True),
])
def test_unit_ended(text, row, col, so_far, ended):
    snap = take_snapshot(doc("file:///u.py", text, "python"), row, col, ServerConfig())
    assert snap.mode in (Mode.LINE, Mode.ARGS, Mode.BLOCK)
    assert postprocess.unit_ended(snap, so_far) is ended


def test_windows_are_cut_at_statement_boundaries():
    funcs = "".join(f"def f{i}(a, b):\n    x = a + {i}\n    y = b * {i}\n    return x + y\n\n\n" for i in range(40))
    text = funcs + "def target(v):\n    return \n\n\n" + funcs.replace("def f", "def g")
    d = doc("file:///w.py", text, "python")
    row = text[:text.index("    return \n\n\n")].count("\n")
    snap = take_snapshot(d, row, 11, ServerConfig(context_tokens=300, suffix_share=0.3))
    ctx = build(snap, lambda t: len(t) // 3 + 1)
    assert ctx.prefix.startswith("def f") and ctx.prefix.endswith("def target(v):\n    return ")
    assert ctx.suffix.endswith("    return x + y\n\n\n")  # whole functions, none cut in half
    assert ctx.first_row == text[:text.index(ctx.prefix)].count("\n")
    # a slightly larger budget keeps the same start: it moves by whole functions only
    assert build(snap, lambda t: len(t) // 3 - 1).prefix == ctx.prefix
    # Without a tree the window is cut at lines only.
    plain = take_snapshot(doc("file:///w.txt", text, "plaintext"), row, 11, ServerConfig(context_tokens=300))
    assert plain.anchors == ()


def test_serving_shows_history_and_definitions_in_the_engines_prompt_format():
    """The server renders nothing itself: history and definitions come from the engine's
    prompt module, the one training renders its rows with."""
    from redraft.engine import prompt
    d = doc("file:///a.py", "a = 1\nb = 2\n" + "\n" * 30 + "z = 0\n", "python")
    h = EditHistory()
    edits = (((0, 4, 0, 5), "10"), ((1, 0, 1, 0), "   \n"), ((20, 0, 20, 0), "".join(f"q{i}\n" for i in range(9))))
    for t, (rng, text) in enumerate(edits):
        for change in d.apply([(rng, text)], t + 2):
            h.record(change, 5.0 * t)
    events = h.recent()
    assert len(events) == 3
    shown = extra.edit_history(events)
    assert shown == prompt.render_history([(ev.removed, ev.inserted) for ev in events])
    assert shown.count(prompt.HISTORY) == 2  # the blank event is not shown
    assert f"+q{prompt.EVENT_LINES - 1}\n" in shown and f"+q{prompt.EVENT_LINES}\n" not in shown
    assert shown.endswith(prompt.FILE_SEP)

    other = doc("file:///lib/shapes.py", "class Circle:\n    def area(self):\n        return 3\n", "python")
    here = doc("file:///main.py", "c = Circle()\nc.", "python")
    full = extra.build(here, [other], [], 1, 2, 4000, {})
    assert prompt.render_definition("/lib/shapes.py", "class Circle:\n    def area(self):\n        return 3\n") in full
