"""What the user did with the next edits offered: moved past, taken, withheld, reversed."""

from __future__ import annotations

from redraft.server.core import offers
from redraft.server.core.document import Change
from redraft.server.core.history import EditHistory
from redraft.server.core.nextedit import LineEdit, small_edit
from redraft.server.core.offers import Offers, reverses

LINES = ["x = 1\n", "y = 1\n", "z = 1\n"]


def proposal(row: int, original: str, proposed: str, whole: bool = False) -> LineEdit:
    return LineEdit(row, *small_edit(original, proposed), original, proposed, whole)


def history(*changes: tuple[int, str, str]) -> list:
    """One event of single-line changes (row, removed, inserted)."""
    h = EditHistory()
    for row, removed, inserted in changes:
        h.record(Change(row, 1, 1, removed, inserted), 0.0)
    return h.recent()


def test_an_edit_moved_past_twice_in_one_event_is_withheld_until_a_new_event():
    o = Offers()
    p = proposal(1, "y = 1", "y = 2")
    for version, expected in ((2, 1), (3, 1)):
        assert o.withhold([p], [])[0] == [p]
        o.offer(version, [p])
        assert o.after_change(LINES, version + 1, new_event=False) == expected
    assert o.withhold([p], []) == ([], 1, 0)
    o.after_change(LINES, 5, new_event=True)  # nothing offered: a new event still forgets
    assert o.withhold([p], []) == ([p], 0, 0)


def test_a_taken_edit_counts_none_moved_past_and_a_line_edited_otherwise_is_not_passed():
    o = Offers()
    taken, other = proposal(0, "x = 1", "x = 2"), proposal(2, "z = 1", "z = 2")
    o.offer(2, [taken, other])
    assert o.after_change(["x = 2\n", "y = 1\n", "z = 1\n"], 3, new_event=False) == 0
    o.offer(3, [other, proposal(1, "y = 1", "y = 2")])
    assert o.after_change(["x = 2\n", "y = 1\n", "z = 3\n"], 4, new_event=False) == 1  # z rewritten by hand
    assert o.passed == {offers.edit_key(proposal(1, "y = 1", "y = 2")): 1}


def test_one_of_a_whole_set_withheld_withholds_the_set():
    o = Offers()
    a, b = proposal(0, "f(a)", "f(b)", whole=True), proposal(2, "f(a)", "f(b)", whole=True)
    lone = proposal(1, "y = 1", "y = 2")
    o.passed[offers.edit_key(a)] = offers.PASS_LIMIT
    assert o.withhold([a, b, lone], []) == ([lone], 2, 0)


def test_the_memory_is_bounded():
    o = Offers()
    many = [proposal(r, "y = 1", "y = 2") for r in range(offers.PASSED_KEYS + 10)]
    o.offer(2, many)
    o.after_change(["y = 1\n"] * len(many), 3, new_event=False)
    assert len(o.passed) == offers.PASSED_KEYS
    assert offers.edit_key(many[-1]) in o.passed and offers.edit_key(many[0]) not in o.passed


def test_reversals_put_back_what_an_event_changed_on_that_line():
    back = proposal(1, "y = 1", "y = 2")
    assert reverses(back, history((1, "2", "1")))
    assert reverses(back, history((1, "= 2", "= 1")))  # shared ends aside
    assert not reverses(back, history((2, "2", "1")))  # another line
    assert not reverses(back, history((1, "3", "1")))  # not what was there
    assert not reverses(proposal(1, "y = 1", "y = 3"), history((1, "2", "1")))
    rename = proposal(4, "    return rad", "    return radius")
    assert reverses(rename, history((4, "s", ""), (4, "u", ""), (4, "i", "")))  # backspaced
    o = Offers()
    assert o.withhold([back, proposal(2, "z = 1", "z = 2")], history((1, "2", "1"))) == (
        [proposal(2, "z = 1", "z = 2")], 0, 1)
