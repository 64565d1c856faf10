"""Inside docstrings and comments only prose belongs: a draft copied from code there (the `def`
line's `Optional[Config] = None) -> T:` after `:param config: `) is not offered, one copied from
other comment or docstring text is, and a line ending in `:` there opens no block."""

from __future__ import annotations

import pytest

from redraft.server.core.context import Mode, own_drafts, text_snapshot
from redraft.server.core.pipeline import answer
from redraft.server.core.settings import ServerConfig

MARK = "@@"
LOAD = '''def load(path: str, config: Optional[Config] = None) -> T:
    """Load the value stored at `path`.

    :param config: @@
    """
'''


def snapshot(text: str, language: str = "python", config: ServerConfig = ServerConfig()):
    at = text.index(MARK)
    ext = {"python": "py", "typescript": "ts", "go": "go", "rust": "rs"}[language]
    snap, doc = text_snapshot(f"file:///t.{ext}", text.replace(MARK, "", 1), at, config, language)
    return own_drafts(snap, doc, config)


def test_a_docstring_field_gets_no_copy_of_the_def_line():
    snap = snapshot(LOAD)
    assert snap.in_string and snap.mode is Mode.LINE and snap.reason != "after a block opener"
    assert not any("Optional" in d.text or "->" in d.text for d in snap.drafts), snap.drafts
    got = answer(object(), snap)  # an engine that would fail if it were called: prose is the drafts'
    assert not got.ran_model and (got.edit is None or "Optional" not in got.edit.text)


def test_a_docstring_field_is_completed_from_another_docstring():
    text = '''def save(value: T, config: Optional[Config] = None) -> None:
    """Store `value`.

    :param config: the settings to use; the defaults when None.
    """


''' + LOAD
    snap = snapshot(text)
    got = answer(object(), snap)
    assert got.edit is not None and got.edit.text == "the settings to use; the defaults when None."


def test_a_docstring_line_ending_in_a_colon_opens_no_block():
    for text in ('def f(x):\n    """Args:@@\n    """\n', 'def f(x):\n    """Sum.\n\n    Args:\n    @@\n    """\n'):
        snap = snapshot(text)
        assert snap.in_string and snap.mode is not Mode.BLOCK, (text, snap.mode, snap.reason)


@pytest.mark.parametrize("text, language, code", [
    ("config: Optional[Config] = None\n\n\ndef f():\n    # config: @@\n    pass\n", "python", "Optional"),
    ("function f(total: number, rate: number): number {\n  // total: @@\n  return total * rate;\n}\n",
     "typescript", "number"),
    ("func f(total int, rate float64) float64 {\n\t// rate float64@@\n\treturn 0\n}\n", "go", ") float64"),
    ("fn f(total: u32, rate: f64) -> f64 {\n    // total: u32, rate@@\n    0.0\n}\n", "rust", "f64"),
])
def test_a_comment_gets_no_copy_of_code(text, language, code):
    snap = snapshot(text, language)
    assert snap.in_comment and snap.mode is Mode.LINE
    assert not any(code in d.text for d in snap.drafts), snap.drafts
    got = answer(object(), snap)
    assert got.edit is None or code not in got.edit.text


def test_a_comment_is_completed_from_another_comment():
    text = ("func f(total int, rate float64) float64 {\n\t// rate is the share kept, between 0 and 1.\n"
            "\treturn 0\n}\n\nfunc g(total int, rate float64) float64 {\n\t// rate is the @@\n\treturn 0\n}\n")
    snap = snapshot(text, "go")
    got = answer(object(), snap)
    assert got.edit is not None and got.edit.text == "share kept, between 0 and 1."
