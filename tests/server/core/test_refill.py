"""The model's rewrite of the line after an edit (refill.py), on a real tiny checkpoint."""

from __future__ import annotations

import math

import pytest

import tiny
from redraft.server.core import refill
from redraft.server.core.document import Document
from redraft.server.core.history import EditHistory
from redraft.server.core.languages import syntax_for

TEXT = "def f(a, b):\n    x = compute(a)\n\n    y = compute(b)\n    return x + y\n"


def edited(text: str, rng, new: str):
    doc = Document("file:///t.py", text, 1, "python", syntax_for("python"))
    history = EditHistory()
    for change in doc.apply([(rng, new)], 2):
        history.record(change, 0.0)
    return doc, history.recent()


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from redraft.engine import Engine
    e = Engine.load(tiny.make_family(tmp_path_factory.mktemp("refill") / "m", "redraft", seed=3), dtype="float32")
    e.with_sampler(min_score=float("-inf"), abstain_margin=math.inf)  # a random model: never abstain
    return e


def test_the_row_rewritten_is_the_first_non_blank_one_after_the_edit():
    doc, events = edited(TEXT, (1, 8, 1, 15), "measure")
    assert refill.refill_row(doc, events[-1]) == 3  # row 2 is blank
    doc, events = edited(TEXT, (4, 4, 4, 10), "yield")
    assert refill.refill_row(doc, events[-1]) is None  # the last line: nothing after it


def test_the_models_line_is_proposed_only_when_it_clears_the_bar(engine, monkeypatch):
    doc, events = edited(TEXT, (1, 8, 1, 15), "measure")
    monkeypatch.setattr(refill, "MIN_SCORE", -math.inf)
    lines = tuple(doc.lines)
    props = refill.refill_edits(engine, lines, 3, events, margin=-100.0)
    assert len(props) == 1
    p = props[0]
    assert p.row == 3 and p.original == "    y = compute(b)"
    assert p.proposed != p.original and p.proposed.startswith("    ") and "\n" not in p.proposed
    assert p.original[:p.start] + p.text + p.original[p.end:] == p.proposed
    assert refill.refill_edits(engine, lines, 3, events, margin=100.0) == []  # the judging bar
    monkeypatch.setattr(refill, "MIN_SCORE", 0.0)  # no model is that sure: nothing proposed
    assert refill.refill_edits(engine, lines, 3, events, margin=-100.0) == []


def test_no_engine_that_can_judge_no_rewrite():
    doc, events = edited(TEXT, (1, 8, 1, 15), "measure")
    assert refill.refill_edits(None, tuple(doc.lines), 3, events, margin=-100.0) == []
