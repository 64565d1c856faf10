"""Where the editor has already closed brackets or quotes right of the cursor: what the model
sees, and the drafts that seed it."""

from __future__ import annotations

import pytest

from redraft.server.core import context
from redraft.server.core.context import Mode, own_drafts, text_snapshot
from redraft.server.core.inference import answer, answer_from_drafts, model_view, usable_drafts
from redraft.server.core.settings import ServerConfig


DOCSTRINGS = ('def f(a, b):\n    """Return the sum of both values, as a float."""\n\n\n'
              'def g(a, b):\n    """Return the sum |"""\n')


def seeds(text: str, cursor: str = "|", config: ServerConfig = ServerConfig()):
    """The snapshot, the model's windows and the seeded drafts' texts at the `cursor` marker."""
    at = text.index(cursor)
    snap, doc = text_snapshot("file:///t.py", text.replace(cursor, ""), at, config, "python")
    snap = own_drafts(snap, doc, config)
    ctx = context.build(snap, lambda s: len(s) // 3 + 1)
    return snap, model_view(snap, ctx), [d.text for d in usable_drafts(snap, ctx)]


def test_auto_closed_brackets_are_left_out_of_the_model_suffix_and_drafts_seed_whole():
    text = 'import os\n\npath = os.path.join(base, "data")\nother = os.path.join(|)\nend = 1\n'
    snap, seen, texts = seeds(text)
    assert snap.mode is Mode.ARGS and snap.closers_only
    assert seen.suffix == "\nend = 1\n"  # the editor's ")" is not shown to the model
    assert texts and texts[0] == 'base, "data")'  # the span writes the line to its end


def test_a_docstring_draft_seeds_whole_before_the_hidden_closing_quotes():
    text = DOCSTRINGS
    snap, seen, texts = seeds(text)
    assert snap.mode is Mode.LINE and snap.closers_only
    assert not seen.suffix.startswith('"""')
    assert texts == ['of both values, as a float."""']


def test_text_after_the_closers_stays_in_the_suffix_and_drafts_seed_only_what_comes_before():
    text = 'total = sum(values, start)\nother = sum(|), 2\n'
    snap, seen, texts = seeds(text)
    assert not snap.closers_only
    assert seen.suffix.startswith("), 2")
    assert texts == ["values, start"]  # the draft's ")" is the suffix's: never written twice


def test_a_draft_without_closers_is_seeded_whole():
    text = "value = compute(alpha, beta)\nresult = compute(alpha, beta)\nother = comp|\n"
    snap, seen, texts = seeds(text)
    assert not snap.closers_only and seen.suffix.startswith("\n")
    assert texts and texts[0] == "ute(alpha, beta)"


def test_inside_strings_completes_unless_turned_off():
    text = DOCSTRINGS
    at = text.index("|")
    doc_text = text.replace("|", "")
    on, _ = text_snapshot("file:///t.py", doc_text, at, ServerConfig(), "python")
    off, _ = text_snapshot("file:///t.py", doc_text, at, ServerConfig(strings=False), "python")
    assert on.mode is Mode.LINE and on.in_string
    assert (off.mode, off.reason) == (Mode.NONE, "string")
    snap, doc = text_snapshot("file:///t.py", doc_text, at, ServerConfig(drafts="only"), "python")
    got = answer_from_drafts(own_drafts(snap, doc, ServerConfig(drafts="only")))
    assert got.edit is not None and (got.edit.text, got.edit.replace) == ('of both values, as a float."""', 3)


def test_drafts_answer_inside_strings_without_the_model():
    text = DOCSTRINGS
    at = text.index("|")
    snap, doc = text_snapshot("file:///t.py", text.replace("|", ""), at, ServerConfig(), "python")
    got = answer(object(), own_drafts(snap, doc, ServerConfig()))  # an engine that would fail if called
    assert not got.ran_model and got.source == "buffer"
    assert got.edit is not None and got.edit.text == 'of both values, as a float."""'
    code, doc = text_snapshot("file:///t.py", "x = compute(1)\ny = comp\n", 23, ServerConfig(), "python")
    assert not code.in_string


@pytest.mark.parametrize("language, field, prose", [
    ("python", 'label = f"{count + |}"\n', 'label = f"{count} total |"\n'),
    ("javascript", "const label = `${count + |}`;\n", "const label = `${count} total |`;\n"),
])
def test_a_field_inside_a_string_is_code_not_text(language, field, prose):
    """The cursor in an f-string field or a template substitution writes code: the model and the
    parse check see it as such; in the string's text around it, the string counts."""
    for text, in_string in ((field, False), (prose, True)):
        snap, _ = text_snapshot("file:///t", text.replace("|", ""), text.index("|"), ServerConfig(), language)
        assert snap.mode is Mode.LINE and snap.in_string is in_string, text
