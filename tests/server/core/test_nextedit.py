"""Next-edit intents and proposals on real documents and grammars, without a model."""

from __future__ import annotations

import pytest

from redraft.server.core import nextedit
from redraft.server.core.document import Document
from redraft.server.core.languages import syntax_for

CODE = '''import math


def area(radius):
    return math.pi * radius ** 2


class Shape:
    def volume(self, height, radius):
        base = area(radius)
        self.radius = radius
        other(radius=radius)
        return base * height + radius


def use():
    return area(2.0) + area(3.0) + area()
'''


def edited(text: str, row: int, old: str, new: str, language: str = "python", occurrence: int = 0):
    doc = Document(f"file:///t.{language}", text, 1, language, syntax_for(language))
    before = list(doc.lines)
    line = doc.lines[row]
    col = -1
    for _ in range(occurrence + 1):
        col = line.index(old, col + 1)
    doc.apply([((row, col, row, col + len(old)), new)], 2)
    return before, doc


def test_a_parameter_rename_reaches_its_uses_in_the_function_only():
    before, doc = edited(CODE, 8, "radius", "r")
    it = nextedit.intent(before, doc, 8, 8)
    assert (it.kind, it.old, it.new, it.row) == ("replace", "radius", "r", 8)
    props = nextedit.proposals(it, doc)
    assert [(p.row, p.proposed.strip()) for p in props] == [
        (9, "base = area(r)"), (10, "self.radius = r"), (11, "other(radius=r)"), (12, "return base * height + r")]
    first = props[0]
    assert first.original[first.start:first.end] == "radius" and first.text == "r"  # the name alone


def test_renaming_a_function_reaches_its_callers_anywhere():
    before, doc = edited(CODE, 3, "area", "surface")
    props = nextedit.proposals(nextedit.intent(before, doc, 3, 3), doc)
    assert {p.row for p in props} == {9, 16}
    assert [p for p in props if p.row == 16][0].proposed == "    return surface(2.0) + surface(3.0) + surface()"


def test_an_appended_parameter_reaches_the_calls():
    before, doc = edited(CODE, 3, "radius)", "radius, scale)")
    it = nextedit.intent(before, doc, 3, 3)
    assert (it.kind, it.new, it.name) == ("append_param", ", scale", "area")
    props = {p.row: p.proposed.strip() for p in nextedit.proposals(it, doc)}
    assert props == {9: "base = area(radius, scale)", 16: "return area(2.0, scale) + area(3.0, scale) + area(scale)"}


def test_a_changed_literal_reaches_lines_of_the_same_shape():
    text = "RETRIES = {\n    'get': 3,\n    'put': 3,\n    'post': 3,\n    'x': [3, 4],\n}\n"
    before, doc = edited(text, 1, "3", "5")
    props = nextedit.proposals(nextedit.intent(before, doc, 1, 1), doc)
    assert [(p.row, p.proposed) for p in props] == [(2, "    'put': 5,"), (3, "    'post': 5,")]


@pytest.mark.parametrize("old,new", [("math.pi", "3.14"), ("** 2", "* radius")])
def test_edits_that_imply_nothing_elsewhere(old, new):
    before, doc = edited(CODE, 4, old, new)
    it = nextedit.intent(before, doc, 4, 4)
    assert it is None or nextedit.proposals(it, doc) == []


def test_small_edit_covers_whole_tokens():
    assert nextedit.small_edit("x = compute(alpha)", "x = compute(alphabet)") == (12, 17, "alphabet")
    assert nextedit.small_edit("f(a)", "f(a, b)") == (3, 3, ", b")
    assert nextedit.small_edit("same", "same") == (4, 4, "")


def test_braces_language_rename():
    js = "function scale(value, factor) {\n  const out = value * factor;\n  return out + value;\n}\n"
    before, doc = edited(js, 0, "value", "v", language="javascript")
    props = nextedit.proposals(nextedit.intent(before, doc, 0, 0), doc)
    assert [p.proposed for p in props] == ["  const out = v * factor;", "  return out + v;"]


def test_edit_margin_keeps_an_edit_scoring_at_least_the_text_plus_the_margin():
    """`editMargin`'s meaning, as the README and settings state it: an edit is kept when its
    mean log-prob is >= the text's as it is + the margin; raising the margin is stricter."""
    from pathlib import Path

    from redraft.engine import Engine
    from redraft.server.core.inference import EDIT_PREFIX_CHARS, EDIT_SUFFIX_CHARS, _window, judge_edits
    from redraft.server.core.settings import ServerConfig

    engine = Engine.load()
    lines = ("def total(prices):\n", "    return sum(prices)\n", "\n", "print(total([1, 2]))\n")
    p = nextedit.LineEdit(3, 6, 11, "totals", lines[3].rstrip("\n"), "print(totals([1, 2]))")
    prefix = _window("".join(lines[:3]), EDIT_PREFIX_CHARS, from_end=True)
    suffix = _window("".join(lines[4:]), EDIT_SUFFIX_CHARS, from_end=False)
    as_is, edited = engine.score(prefix, "\n" + suffix, [p.original, p.proposed])
    gap = edited - as_is
    assert judge_edits(engine, lines, [p], [], gap - 0.01) == [p]
    assert judge_edits(engine, lines, [p], [], gap + 0.01) == []
    default = ServerConfig().edit_margin
    readme = Path(__file__).resolve().parents[3].joinpath("README.md").read_text(encoding="utf-8")
    assert default == -1.0 and "`editMargin` (default −1.0" in readme.replace("\n", " ")
