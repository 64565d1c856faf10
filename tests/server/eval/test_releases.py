"""Next edits on real edits: scenarios from two release folders, and their scoring."""

import pytest

from redraft.server.core.document import body
from redraft.server.core.nextedit import LineEdit
from redraft.server.eval import releases
from redraft.server.eval.releases import (build_scenarios, format_table, release_files, release_pairs, run, score,
                                          user_change)

OLD = '''"""Shapes."""


class Circle(object):
    pass


class Square(object):
    pass


class Triangle(object):
    pass
'''

NEW = OLD.replace("(object)", "")


@pytest.fixture
def root(tmp_path):
    for version, text in (("1.0", OLD), ("1.10", NEW)):
        pkg = tmp_path / "shapes" / version / "shapes"
        pkg.mkdir(parents=True)
        (pkg / "base.py").write_text(text)
        (pkg / "same.py").write_text("x = 1\n")  # unchanged: no scenarios
        (pkg / "tests").mkdir()
        (pkg / "tests" / "test_base.py").write_text(text)  # test folders are left out
    (tmp_path / "shapes" / "1.10" / "shapes" / "added.py").write_text("y = 2\n")  # in one release only
    return tmp_path


def _scenarios(root):
    files = release_files(root / "shapes" / "1.0", root / "shapes" / "1.10")
    return files, build_scenarios("shapes", files)


def _edit(p_row: int, original: str, proposed: str) -> LineEdit:
    from redraft.server.core.nextedit import small_edit
    s, e, t = small_edit(original, proposed)
    return LineEdit(p_row, s, e, t, original, proposed)


def test_scenarios_are_the_hunks_in_turn(root):
    files, scenarios = _scenarios(root)
    assert [f.path for f in files] == ["shapes/base.py"]
    assert [(h.old_start, h.old_end) for h in files[0].hunks] == [(3, 4), (7, 8), (11, 12)]
    assert [s.edit for s in scenarios] == [0, 1, 2]
    assert scenarios[0].others == [1, 2]
    assert scenarios[1].others == [0, 2]
    # The user's edit as an editor sends it: "(object)" deleted on row 3.
    assert user_change(scenarios[0]) == ((3, 12, 3, 20), "")


def test_limit_draws_deterministically(root):
    files, _ = _scenarios(root)
    one = build_scenarios("shapes", files, limit=2, seed=3)
    assert len(one) == 2 and [s.edit for s in one] == [s.edit for s in build_scenarios("shapes", files, 2, 3)]


def test_whitespace_and_large_hunks_are_not_edits(tmp_path):
    old = "a = 1\nb = 2\n\n\nc = 3\n" + "".join(f"v{i} = {i}\n" for i in range(6))
    new = "a = 1\nb  = 2\n\nc = 3\n" + "".join(f"w{i} = {i}\n" for i in range(6))
    for version, text in (("1", old), ("2", new)):
        (tmp_path / version).mkdir()
        (tmp_path / version / "m.py").write_text(text)
    files = release_files(tmp_path / "1", tmp_path / "2")
    assert len(files[0].hunks) >= 2
    assert build_scenarios("m", files) == []


def test_score_right_wrong_and_reversal(root):
    _, scenarios = _scenarios(root)
    s = scenarios[0]
    doc, _, props, _ = releases.propose(None, "".join(s.file.old), [user_change(s)], -1.0)
    lines = doc.lines
    assert body(lines[3]) == "class Circle:"
    right = _edit(7, "class Square(object):", "class Square:")
    wrong = _edit(11, "class Triangle(object):", "class Triangle(objects):")
    elsewhere = _edit(4, "    pass", "    return")  # a line the release leaves as it is
    undo = _edit(3, "class Circle:", "class Circle(object):")
    sc = score(s, lines, [right, wrong, elsewhere, undo])
    assert (sc.proposals, sc.right, sc.closer, sc.reversals) == (4, 1, 1, 1)
    assert (sc.others, sc.recovered) == (2, 1)  # Square recovered, Triangle not
    # The same token change recurs in both other hunks: the ceiling.
    assert sc.recur_hunks == 2
    both = score(s, lines, [right, _edit(11, "class Triangle(object):", "class Triangle:")])
    assert (both.right, both.recovered, both.reversals) == (2, 2, 0)


def test_undoing_elsewhere_is_a_reversal(root):
    _, scenarios = _scenarios(root)
    s = scenarios[1]  # Square edited; putting "(object)" back on another class undoes it
    doc, _, _, _ = releases.propose(None, "".join(s.file.old), [user_change(s)], -1.0)
    put_back = _edit(3, "class Circle(object):", "class Circle(object)(object):")
    assert score(s, doc.lines, [put_back]).reversals == 1


def test_run_over_a_root_and_one_pair(root):
    assert [label for label, _, _ in release_pairs(root)] == ["shapes 1.0->1.10"]  # versions, not strings
    rep = run(root, None, None, limit=10, seed=0, margin=-1.0)
    r = rep["packages"]["shapes 1.0->1.10"]
    assert r["scenarios"] == 3 and rep["overall"]["scenarios"] == 3
    assert r["recurs"] == 1.0 and r["recur_hunks"] == 1.0
    if r["proposals"]:  # whatever the rules propose is scored, never reversing the user
        assert r["reversal"] == 0.0
    table = format_table(rep)
    assert "shapes 1.0->1.10" in table and "overall" in table
    pair = run(root / "shapes" / "1.0", root / "shapes" / "1.10", None, 10, 0, -1.0)
    assert list(pair["packages"]) == ["shapes 1.0->1.10"]
    with pytest.raises(ValueError):
        run(root / "missing", None, None, 10, 0, -1.0)


def test_rows_after_an_edit_that_drops_a_line_shift(tmp_path):
    old = "from __future__ import division\n\n\nclass A(object):\n    pass\n"
    new = "\n\nclass A:\n    pass\n"
    for version, text in (("1", old), ("2", new)):
        (tmp_path / version).mkdir()
        (tmp_path / version / "m.py").write_text(text)
    files = release_files(tmp_path / "1", tmp_path / "2")
    s = build_scenarios("m", files)[0]
    assert s.edit == 0 and s.others == [1]
    doc, _, _, _ = releases.propose(None, "".join(s.file.old), [user_change(s)], -1.0)
    assert body(doc.lines[2]) == "class A(object):"  # one row up once the import is gone
    sc = score(s, doc.lines, [_edit(2, "class A(object):", "class A:")])
    assert (sc.right, sc.recovered, sc.reversals) == (1, 1, 0)
    assert score(s, doc.lines, [_edit(3, "    pass", "    ...")]).right == 0


def test_the_user_replaces_whole_words(tmp_path):
    old = "def f(timestamp, a):\n    return g(timestamp)\n"
    new = "def f(ts_int, a, b):\n    return g(timestamp)\n"
    for version, text in (("1", old), ("2", new)):
        (tmp_path / version).mkdir()
        (tmp_path / version / "m.py").write_text(text)
    s = build_scenarios("m", release_files(tmp_path / "1", tmp_path / "2"))[0]
    assert user_change(s) == ((0, 6, 0, 18), "ts_int, a, b")  # not "imestamp, a" -> "s_int, a, b"
