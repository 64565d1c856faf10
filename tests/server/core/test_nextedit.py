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


def test_a_rename_is_offered_whole_with_every_use_however_many():
    uses = "".join(f"    total += count * {i}\n" for i in range(12))
    text = f"def tally(count):\n    total = 0\n{uses}    return total, count\n"
    before, doc = edited(text, 0, "count", "n")
    props = nextedit.proposals(nextedit.intent(before, doc, 0, 0), doc)
    assert len(props) == 13 > nextedit.MAX_PROPOSALS and all(p.whole for p in props)
    assert "count" not in "".join(p.proposed for p in props)


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


def score_gain(engine, lines, p) -> float:
    """The model's mean log-prob of the proposed line minus the line as it is, between the
    windows the server uses for judging (written out here, so the windows are pinned too)."""
    from redraft.server.core.inference import EDIT_PREFIX_CHARS, EDIT_SUFFIX_CHARS, _window

    prefix = _window("".join(lines[:p.row]), EDIT_PREFIX_CHARS, from_end=True)
    suffix = _window("".join(lines[p.row + 1:]), EDIT_SUFFIX_CHARS, from_end=False)
    as_is, proposed = engine.score(prefix, "\n" + suffix, [p.original, p.proposed])
    return proposed - as_is


def test_edit_margin_keeps_an_edit_scoring_at_least_the_text_plus_the_margin():
    """`editMargin`'s meaning, as the README and settings state it: an edit is kept when its
    mean log-prob is >= the text's as it is + the margin; raising the margin is stricter."""
    from pathlib import Path

    from redraft.engine import Engine
    from redraft.server.core.inference import judge_edits
    from redraft.server.core.settings import ServerConfig

    engine = Engine.load()
    lines = ("def total(prices):\n", "    return sum(prices)\n", "\n", "print(total([1, 2]))\n")
    p = nextedit.LineEdit(3, 6, 11, "totals", lines[3].rstrip("\n"), "print(totals([1, 2]))")
    gap = score_gain(engine, lines, p)
    assert judge_edits(engine, lines, [p], [], gap - 0.01) == [p]
    assert judge_edits(engine, lines, [p], [], gap + 0.01) == []
    default = ServerConfig().edit_margin
    readme = Path(__file__).resolve().parents[3].joinpath("README.md").read_text(encoding="utf-8")
    assert default == -1.0 and "`editMargin` (default −1.0" in readme.replace("\n", " ")


def test_a_rename_is_judged_as_one_change_all_uses_kept_or_none():
    """The model judges a rename's nearest uses together: either every use is offered or none,
    even where the same uses judged one by one would split."""
    from redraft.engine import Engine
    from redraft.server.core.inference import judge_edits

    engine = Engine.load()
    body = ["    total = 0\n", "    for item in items:\n", "        total += item.price\n",
            "    print(items)\n", "    log(items, total)\n", "    return total, len(items)\n"]
    text = "def bill(items):\n" + "".join(body)
    before, doc = edited(text, 0, "items", "rows")
    props = nextedit.proposals(nextedit.intent(before, doc, 0, 0), doc)
    assert len(props) == 4 and all(p.whole for p in props)
    lines = tuple(doc.lines)
    gains = [score_gain(engine, lines, p) for p in props]
    mean = sum(gains) / len(gains)
    assert min(gains) < mean - 0.01  # one by one, a margin at the mean would drop some uses
    assert judge_edits(engine, lines, props, [], mean - 0.005) == props
    assert judge_edits(engine, lines, props, [], mean + 0.005) == []


# -- change propagation: the same token-level change where it recurs --------------------------

def propose(text: str, row: int, old: str, new: str, occurrence: int = 0) -> list[tuple[int, str]]:
    before, doc = edited(text, row, old, new, occurrence=occurrence)
    it = nextedit.intent(before, doc, row, row)
    return [(p.row, p.proposed) for p in nextedit.proposals(it, doc)] if it is not None else []


def test_a_deletion_recurs_in_the_same_kind_of_node_only():
    text = ('class A(object):\n    pass\n\n\n'
            'class B(object):\n    """Like class C(object): but not."""\n\n\n'
            'def f(object):\n    return isinstance(object, (object))\n\n\n'
            '# class D(object): a comment\n'
            'class E (object):\n    pass\n')
    assert propose(text, 0, "(object)", "") == [(4, "class B:"), (13, "class E:")]


def test_an_insertion_goes_between_the_same_neighbours_in_the_same_kind_of_node():
    text = ("def a(timeout, retries):\n    pass\n\n\n"
            "def b(timeout):\n    call(timeout)\n    s = 'f(timeout)'\n\n\n"
            "def c(delay, timeout=3):\n    pass\n")
    assert propose(text, 0, "timeout", "timeout: float") == [(4, "def b(timeout: float):")]


def test_a_substitution_of_a_token_run_recurs_between_matching_neighbours():
    text = ("x = run(cmd, shell=True)\n"
            "y = run(other, shell=True)\n"
            "z = run(cmd, shell=True, check=True)\n"
            "flags = dict(shell=True)\n"
            "msg = 'run(cmd, shell=True)'\n")
    # ", shell=True" dropped: the other calls follow, before ")" or ","; the keyword that is
    # a dict's, first in its list (a different left neighbour), and the string do not
    assert propose(text, 0, ", shell=True", "") == [(1, "y = run(other)"), (2, "z = run(cmd, check=True)")]


def test_a_change_with_more_places_than_the_limit_comes_whole():
    classes = "".join(f"class C{i}(object):\n    pass\n\n\n" for i in range(12))
    before, doc = edited(classes, 0, "(object)", "")
    props = nextedit.proposals(nextedit.intent(before, doc, 0, 0), doc)
    assert len(props) == 11 > nextedit.MAX_PROPOSALS and all(p.whole for p in props)
    assert all(p.proposed == f"class C{i}:" for i, p in enumerate(props, start=1))
    few = "".join(f"class C{i}(object):\n    pass\n\n\n" for i in range(3))
    before, doc = edited(few, 0, "(object)", "")
    assert [p.whole for p in nextedit.proposals(nextedit.intent(before, doc, 0, 0), doc)] == [False, False]


def test_a_name_the_function_only_uses_is_renamed_in_the_whole_file_but_not_in_its_import():
    text = ("from typing import List\n\n\n"
            "def a(xs: List[int]) -> List[int]:\n    return xs\n\n\n"
            "def b(ys: List[str]):\n    return ys\n")
    # one `List` of row 3 becomes `list`: the uses on other rows anywhere follow (the same
    # row is the user's), the import stays
    before, doc = edited(text, 3, "List", "list")
    props = nextedit.proposals(nextedit.intent(before, doc, 3, 3), doc)
    assert [(p.row, p.proposed) for p in props] == [(7, "def b(ys: list[str]):")]
    assert all(p.whole for p in props)


def test_undoing_the_previous_edit_proposes_nothing():
    """A rename at the signature, its use renamed (a separate event), then that undone: the
    undo would otherwise read as a rename of `r` back to `radius` and propose the signature."""
    from redraft.server.core.history import EditHistory

    doc = Document("file:///u.py", "def area(radius):\n    return radius\n", 1, "python", syntax_for("python"))
    history = EditHistory()
    for at, (rng, text) in enumerate([((0, 9, 0, 15), "r"), ((1, 11, 1, 17), "r")]):
        for change in doc.apply([(rng, text)], at + 2):
            history.record(change, 10.0 * at)
    assert doc.lines[:2] == ["def area(r):\n", "    return r\n"]
    accepted = list(doc.lines)
    for change in doc.apply([((1, 11, 1, 12), "radius")], 4):
        history.record(change, 30.0)  # the undo, an event of its own
    events = history.recent()
    assert len(events) == 3
    assert nextedit.candidates(accepted, doc, events[-1], events[-2]) == []
    assert [p.proposed for p in nextedit.candidates(accepted, doc, events[-1])] == ["def area(radius):"]


def test_an_insertion_needs_the_same_token_after_it_and_is_not_made_twice():
    text = ("parser = OptionParser(usage)\n"
            "other = OptionParser()\n"
            "names = sorted(usage)\n"
            "again = optparse.OptionParser()\n")
    assert propose(text, 0, "OptionParser", "optparse.OptionParser") == [(1, "other = optparse.OptionParser()")]
    calls = ("sign(max_age)\n"
             "sign(max_age)\n"
             "sign(max_age=max_age)\n")
    assert propose(calls, 0, "max_age", "max_age=max_age") == [(1, "sign(max_age=max_age)")]


def test_a_module_name_replaced_by_a_dotted_one_follows_its_uses_not_its_import():
    text = ("import urlparse\n\n\n"
            "def split(url):\n    parts = urlparse.urlsplit(url)\n    return parts\n\n\n"
            "def join(base, url):\n    return urlparse.urljoin(base, url)\n")
    assert propose(text, 4, "urlparse", "urllib.parse") == [(9, "    return urllib.parse.urljoin(base, url)")]


def test_a_name_bound_again_is_renamed_from_there_on_only():
    text = ("def canonical(version):\n"
            "    if not isinstance(version, Version):\n"
            "        version = Version(version)\n"
            "    parts = [version.epoch]\n"
            "    return version\n")
    assert propose(text, 2, "version", "parsed") == [(3, "    parts = [parsed.epoch]"), (4, "    return parsed")]


def test_a_parameter_appended_with_more_calls_than_the_limit_reaches_them_all():
    calls = "".join(f"total{i} = area({i}.0)\n" for i in range(12))
    before, doc = edited("def area(radius):\n    return radius\n\n\n" + calls, 0, "radius)", "radius, scale)")
    props = nextedit.proposals(nextedit.intent(before, doc, 0, 0), doc)
    assert len(props) == 12 > nextedit.MAX_PROPOSALS and all(p.whole for p in props)
    assert all(p.proposed.endswith(".0, scale)") for p in props)


# -- one event, several token runs -----------------------------------------------------------

def line_replaced(text: str, row: int, new_line: str) -> list[tuple[int, str]]:
    """Row `row` replaced whole (as an editor sends a line it rewrote), then every proposal."""
    doc = Document("file:///t.py", text, 1, "python", syntax_for("python"))
    before = list(doc.lines)
    doc.apply([((row, 0, row, len(doc.lines[row].rstrip("\n"))), new_line)], 2)
    return [(p.row, p.proposed) for p in nextedit.proposals(nextedit.intents(before, doc, row, row), doc)]


def test_insertions_made_together_follow_together_where_each_applies():
    text = ("def area(width, height):\n    return width * height\n\n\n"
            "def volume(width, height, depth):\n    return area(width, height) * depth\n\n\n"
            "def label(height):\n    return str(height)\n\n\n"
            "width, height = 3, 4\n")
    # both parameters annotated: the other signatures take what applies to them, the call's
    # arguments and the assignment's targets (other kinds of node) nothing
    assert line_replaced(text, 0, "def area(width: float, height: float):") == [
        (4, "def volume(width: float, height: float, depth):"), (8, "def label(height: float):")]


def test_a_rewrite_in_parts_is_not_followed_part_by_part():
    text = ("def check(data):\n    if not is_bytes(data):\n        raise TypeError(data)\n"
            "    return is_bytes(data)\n")
    # `is_bytes(x)` -> `isinstance(x, bytes)` is no rename plus an argument
    assert line_replaced(text, 1, "    if not isinstance(data, bytes):") == []
    # `not x` -> `x is None`: no deletion of `not` elsewhere
    text = "if not options:\n    pass\nif not isinstance(a, B):\n    pass\n"
    assert line_replaced(text, 0, "if options is None:") == []


def test_requoting_a_string_requotes_the_strings_nearby_that_read_the_same():
    text = ("A = 'x'\nB = 'y'\nC = \"it's\"\nD = 'say \"hi\"'\n# E = 'a comment'\n"
            "F = '''doc'''\nG = f('z', b'w')\n")
    # not a string holding the new quote, a comment, a triple quote; bytes literals too
    assert line_replaced(text, 0, 'A = "x"') == [(1, 'B = "y"'), (6, 'G = f("z", b"w")')]


def test_requoting_reaches_past_the_limit_as_one_set():
    text = "".join(f"K{i} = 'k{i}'\n" for i in range(20))
    props = line_replaced(text, 0, 'K0 = "k0"')
    assert [r for r, _ in props] == list(range(1, 20)) and props[-1] == (19, 'K19 = "k19"')


@pytest.mark.parametrize("original,proposed", [("    y = f(b)", "     z"), ("a = b", "a  = b"), ("f(x)", "f( x )"),
                                               ("x = 1", "x = 1  # one"), ("  pass", "pass")])
def test_small_edit_reproduces_the_proposed_line_when_the_spacing_changes(original, proposed):
    start, end, text = nextedit.small_edit(original, proposed)
    assert original[:start] + text + original[end:] == proposed


def test_requoting_a_docstring_requotes_the_other_triple_quoted_strings():
    text = ("def f():\n    '''Add.'''\n\n\ndef g():\n    '''\n    Sub.\n    '''\n\n\n"
            "def h():\n    '''Say \"\"\"hi\"\"\".'''\n    x = \"'''\"  # not a triple quote\n")
    # not the string holding the new triple quote (it would end early), not a triple inside a
    # one-line string
    assert line_replaced(text, 1, '    """Add."""') == [(5, '    """'), (7, '    """')]


def test_an_annotation_before_a_default_is_spaced_as_the_user_spaced_it():
    text = ("def load(self, s, salt=None):\n    pass\n\n\n"
            "def dump(self, obj, salt=None, fp=None):\n    pass\n\n\n"
            "def keep(self, salt = None):\n    pass\n")
    # `salt=None` -> `salt: bytes = None`: the others get the spaces around `=` too
    assert line_replaced(text, 0, "def load(self, s, salt: bytes = None):") == [
        (4, "def dump(self, obj, salt: bytes = None, fp=None):"), (8, "def keep(self, salt: bytes = None):")]
