"""The server's text machinery without a process: documents and their trees, edit history,
context modes, post-processing (bracket replace, suffix de-duplication, block trimming,
parse-error rejection). Real tree-sitter grammars, no model."""

from __future__ import annotations

import pytest
import tree_sitter

from redraft.server.core import postprocess
from redraft.server.core.context import Mode, build, take_snapshot
from redraft.server.core.document import Change, Document, utf16_to_index
from redraft.server.core.history import EditHistory
from redraft.server.core.languages import supported, syntax_for
from redraft.server.core.settings import ServerConfig, parse

CFG = ServerConfig()


def doc(text: str, language: str = "python") -> Document:
    return Document(f"file:///t.{language}", text, 1, language, syntax_for(language))


def finish(text: str, row: int, col: int, raw: str, language: str = "python"):
    d = doc(text, language)
    snap = take_snapshot(d, row, col, CFG)
    return snap, postprocess.finish(snap, build(snap, lambda s: len(s) // 3 + 1), raw)


@pytest.mark.parametrize("language", supported())
def test_every_grammar_loads_from_its_wheel(language):
    assert syntax_for(language).grammar is not None


def test_incremental_edits_match_a_fresh_parse():
    d = doc("def f(a):\n    return a\n")
    edits = [((1, 11, 1, 12), "b + 1"), ((2, 0, 2, 0), "x = 'é😀'\n"), ((2, 5, 2, 8), "ü"),
             ((0, 0, 1, 0), ""), ((0, 4, 0, 4), "(\n")]
    for v, (rng, text) in enumerate(edits, start=2):
        d.apply([(rng, text)], v)
        fresh = tree_sitter.Parser(d.syntax.grammar).parse(d.text.encode())
        assert str(d.tree.root_node) == str(fresh.root_node)
    assert d.text == "    (\nreturn b + 1\nx = 'ü'\n"


def test_utf16_columns():
    assert utf16_to_index("é😀x", 3) == 2 and utf16_to_index("é😀x", 4) == 3
    assert utf16_to_index("é😀x", 5) is None and utf16_to_index("abc", -1) is None
    d = doc("a😀b\n", "plaintext")
    d.apply([((0, 3, 0, 4), "X")], 2)
    assert d.text == "a😀X\n"


def test_history_groups_nearby_edits_within_a_second():
    h = EditHistory()
    h.record(Change(10, 1, 1, "", "a"), now=0.0)
    h.record(Change(12, 1, 1, "", "b"), now=0.5)  # near in space and time: same event
    h.record(Change(40, 1, 1, "", "c"), now=0.6)  # far: new event
    h.record(Change(41, 1, 1, "", "d"), now=2.0)  # near but late: new event
    assert [e.inserted for e in h.recent()] == ["ab", "c", "d"]
    for i in range(10):
        h.record(Change(100 * i, 1, 1, "", str(i)), now=10.0 + i)
    assert len(h.recent()) == 6


@pytest.mark.parametrize("text,row,col,mode", [
    ("x = foo(\n", 0, 8, Mode.ARGS),
    ("def f():\n", 0, 8, Mode.BLOCK),
    ("def f():\n    \n", 1, 4, Mode.BLOCK),
    ("x = \n", 0, 4, Mode.LINE),
    ("x = abc\n", 0, 4, Mode.NONE),  # word characters right of the cursor
    ("# note\n", 0, 6, Mode.LINE),  # comment: the rest of its line (drafts answer, test_comments.py)
    ("s = 'abc'\n", 0, 6, Mode.NONE),  # string
])
def test_modes(text, row, col, mode):
    assert take_snapshot(doc(text), row, col, CFG).mode is mode


def test_brace_language_block_and_args():
    d = doc("function f() {}\nlet y = g(\n", "javascript")
    assert take_snapshot(d, 0, 14, CFG).mode is Mode.BLOCK
    assert take_snapshot(d, 1, 10, CFG).mode is Mode.ARGS


def test_auto_closed_bracket_is_replaced_not_duplicated():
    _, e = finish("x = foo()\n", 0, 8, "a, b) + 1")
    assert e == postprocess.Edit("a, b) + 1", 1)  # the range extends over the existing ")"
    _, e = finish("x = foo()\n", 0, 8, "a, (b)")
    assert e == postprocess.Edit("a, (b)", 0)  # balanced inside: the ")" on screen stays
    _, e = finish('x = f("")\n', 0, 7, 'abc")')
    assert e == postprocess.Edit('abc")', 2)


def test_text_repeating_the_suffix_is_dropped():
    _, e = finish("x = foo()\n", 0, 8, "a)")
    assert e == postprocess.Edit("a)", 1)  # its ")" is the one on screen, not a second one
    _, e = finish("x = foo() + 1\n", 0, 8, "a) + 1")
    assert e == postprocess.Edit("a)", 1)  # the repeated rest of the line is dropped
    _, e = finish("x = foo(a)\n", 0, 8, "a")  # exactly what is already there
    assert e is None
    _, e = finish("def f():\n    \n    return x\n", 1, 4, "y = 1\n    return x\n    z")
    assert e == postprocess.Edit("y = 1", 0)


def test_rest_of_line_keeps_one_line_and_block_keeps_the_body():
    _, e = finish("x = \n", 0, 4, "1\ny = 2")
    assert e.text == "1"
    _, e = finish("def f():\n    \n", 1, 4, "    a = 1\n    return a\nprint(f())")
    assert e.text == "a = 1\n    return a"  # editor's indentation kept, stops at the dedent
    _, e = finish("function f() {}\n", 0, 14, "\n  return 1;\n}\nfoo()", "javascript")
    assert e.text == "\n  return 1;\n"  # the "}" on screen closes it


def test_completion_adding_parse_errors_is_rejected():
    _, e = finish("print(x)\n", 0, 8, " +* )")
    assert e is None
    _, e = finish("print(x)\n", 0, 8, " or y")
    assert e == postprocess.Edit(" or y", 0)


def test_settings_parse_keeps_defaults_for_bad_values():
    cfg, problems = parse({"redraft": {"maxLines": 0, "threshold": 0.5, "bogus": 1, "enable": {"go": False}}})
    assert cfg.max_lines == CFG.max_lines and cfg.threshold == 0.5
    assert not cfg.enabled("go") and cfg.enabled("python")
    assert len(problems) == 2
    assert parse("nonsense")[0] == CFG
