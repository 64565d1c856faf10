"""Completing inside comments: the rest of the line, from drafts alone, unless turned off."""

from __future__ import annotations

import pytest

from redraft.server.core import postprocess
from redraft.server.core.context import Mode, own_drafts, text_snapshot
from redraft.server.core.inference import answer
from redraft.server.core.settings import ServerConfig

RUST = ("/// Returns the number of matches found in the haystack.\n"
        "fn count() -> usize { 0 }\n\n"
        "/// Returns the number of |\n"
        "fn total() -> usize { 0 }\n")
GO = ("// Open returns the file named by path, opened for reading.\n"
      "func Open(path string) {}\n\n"
      "// Create returns the file named by |\n"
      "func Create(path string) {}\n")
PYTHON = ("# Keep the cache small: evict the oldest entry first.\n"
          "cache = {}\n"
          "# Keep the cache small: |\n")


def snapshot(text: str, language: str, config: ServerConfig = ServerConfig()):
    at = text.index("|")
    snap, doc = text_snapshot(f"file:///t.{language}", text.replace("|", ""), at, config, language)
    return own_drafts(snap, doc, config)


@pytest.mark.parametrize("text, language, rest", [
    (RUST, "rust", "matches found in the haystack."),
    (GO, "go", "path, opened for reading."),
    (PYTHON, "python", "evict the oldest entry first."),
])
def test_a_comment_line_is_completed_from_drafts_without_the_model(text, language, rest):
    snap = snapshot(text, language)
    assert (snap.mode, snap.in_comment, snap.in_string) == (Mode.LINE, True, False)
    got = answer(object(), snap)  # an engine that would fail if it were called
    assert not got.ran_model and got.source == "buffer"
    assert got.edit is not None and got.edit.text == rest


def test_comments_turned_off_answer_nothing():
    snap = snapshot(RUST, "rust", ServerConfig(comments=False))
    assert (snap.mode, snap.reason) == (Mode.NONE, "comment")
    assert answer(object(), snap).edit is None


def test_a_comment_ending_like_a_block_header_is_still_one_line():
    """`# Example:` or `// call f(` inside a comment open no block and no argument list."""
    for text, language in (("x = 1\n# Example:|\n", "python"), ("// call open(|\nfunc f() {}\n", "go")):
        snap = snapshot(text, language)
        assert (snap.mode, snap.in_comment) == (Mode.LINE, True), text


def test_text_right_of_the_cursor_in_a_comment_answers_nothing():
    snap = snapshot("// a comment | (that goes on)\nfunc f() {}\n", "go")
    assert snap.mode is Mode.NONE and snap.in_comment


def test_code_after_a_comment_is_not_in_it():
    snap = snapshot("# a comment\nvalue = compu|\n", "python")
    assert not snap.in_comment and snap.mode is Mode.LINE


TS_DOC = ("import { Stream } from './stream';\n\n"
          "/**\n"
          " * Builds a stream that fails with the given error as soon as a reader subscribes.\n"
          " * The error is sent immediately upon subscription.\n"
          " *\n"
          " * <span class=\"note\">It fails and does nothing else</span>\n"
          " */\n"
          "export function failing(error: Error): Stream { return new Stream(error); }\n\n"
          "/**\n"
          " * Builds a stream that ends immediately upon sub|\n"
          " */\n"
          "export function empty(): Stream { return new Stream(); }\n")


def test_a_jsdoc_line_is_completed():
    snap = snapshot(TS_DOC, "typescript")
    assert snap.in_comment and snap.mode is Mode.LINE
    got = answer(object(), snap)
    assert got.edit is not None and got.edit.text == "scription."


@pytest.mark.parametrize("language, text, inert", [
    ("rust", "matches found in the `haystack`.", True),
    ("rust", "matches */ found", False),  # would end a block comment
    ("go", "matches\nfound", False),  # would end a line comment
])
def test_what_can_end_a_comment_is_checked(language, text, inert):
    snap = snapshot("// count the |\nfn f() {}\n" if language == "rust" else "// count the |\nfunc f() {}\n", language)
    assert snap.in_comment
    assert postprocess.inert_in_prose(snap, text) is inert


@pytest.mark.parametrize("language, text, inert", [
    ("python", 'x = "see |"\n', True), ("javascript", 'const x = "see |";\n', True),
    ("javascript", "const x = `see |`;\n", False), ("go", "var x = `see |`\n", False),
])
def test_a_backtick_ends_only_a_string_it_opened(language, text, inert):
    snap = snapshot(text, language)
    assert snap.in_string
    assert postprocess.inert_in_prose(snap, "``code`` here") is inert


@pytest.mark.parametrize("language, text", [
    ("go", 'var x = "see |"\n'), ("go", "var x = `see |`\n"), ("rust", 'let x = "see |";\n'),
    ("c", 'char *x = "see |";\n'), ("java", 'class A { String x = "see |"; }\n'),
])
def test_string_literals_of_every_grammar_count_as_strings(language, text):
    assert snapshot(text, language).in_string


@pytest.mark.parametrize("language, line", [
    ("go", "/* the total |*/"), ("c", "/* the total | */"), ("typescript", "/** the total | */"),
])
def test_a_block_comment_is_completed_before_its_end_on_the_line(language, line):
    text = f"/* the total count of items */\nx = 1;\n{line}\ny = 2;\n"
    snap = snapshot(text, language)
    assert snap.mode is Mode.LINE and snap.in_comment
    got = answer(object(), snap)
    assert got.edit is not None and got.edit.replace == 0
    done = snap.left + got.edit.text + snap.right
    assert done == line.replace("|", "count of items ").replace("  */", " */")  # one "*/", its space kept


def test_between_the_parts_of_a_concatenated_string_is_code():
    """Python reads `"a"` then `"b"` on the next line as one concatenated string: a cursor
    after the first closing quote is in the dictionary's code, where a key's value follows."""
    text = 'EMOJI = {\n    "dolls": "🎎",\n}\nOTHER = {\n    "dolls"|\n    "train": "🚄",\n}\n'
    snap = snapshot(text, "python")
    assert not snap.in_string and snap.mode is Mode.LINE
    got = answer(None, snap)
    assert got.edit is not None and got.edit.text == ': "🎎",'


@pytest.mark.parametrize("language, text, quote", [
    ("python", 'def f():\n    """Return the |"""\n', '"'), ("python", "x = rb'see |'\n", "'"),
    ("python", "x = f\"see {a} |\"\n", '"'), ("go", "var x = `see |`\n", "`"), ("rust", 'let x = r#"see |"#;\n', '"'),
])
def test_the_quote_that_ends_the_string_is_known(language, text, quote):
    assert snapshot(text, language).quote == quote


def test_a_different_quote_inside_a_string_is_prose():
    """In a docstring opened with `\"\"\"`, an apostrophe cannot end it: the copy is not parse-checked."""
    snap = snapshot('def f():\n    """Return the |"""\n', "python")
    assert snap.in_string
    assert postprocess.inert_in_prose(snap, "user's name.")
    assert not postprocess.inert_in_prose(snap, 'user" name.')
    single = snapshot("x = 'see |'\n", "python")
    assert not postprocess.inert_in_prose(single, "user's name.")
