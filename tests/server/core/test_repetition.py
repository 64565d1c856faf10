"""The degenerate-repetition guard: on strings, and in post-processing, which every front uses."""

from __future__ import annotations

import pytest

from redraft.server.core import inference, postprocess
from redraft.server.core.context import text_snapshot
from redraft.server.core.repetition import cut_loop, loop_start
from redraft.server.core.settings import ServerConfig


@pytest.mark.parametrize("text", [
    "get('sys', 'file', 'file', 'file', 'file",  # redraft-ar on the README's example
    "self.log = self.log = self.log = self.log",
    "foo(x, x, x, x, x, x, x, x",
    "return None, None, None, None, None",
])
def test_a_completion_that_ends_in_a_loop_leaves_nothing(text):
    assert loop_start(text) is not None
    assert cut_loop(text) == ""


@pytest.mark.parametrize("text", [
    "getLogger(__name__)",
    "[0, 0, 0, 0, 0, 0, 0]",  # repeats, then ends: written on purpose
    "return None, None, None, None",  # too short a run to call a loop
    "# ------------------------------",  # one character over and over is one token
    "a.b.c.d.e.f.g.h",
    "x = y = z",
    "",
])
def test_code_that_repeats_on_purpose_is_kept(text):
    assert loop_start(text) is None
    assert cut_loop(text) == text


def test_the_lines_before_a_loop_are_kept():
    text = "total = 0\n    for x in xs:\n        x = x\n        x = x\n        x = x\n        x = x"
    assert cut_loop(text) == "total = 0\n    for x in xs:"
    assert loop_start("x = 1\n    y = 2") is None


def test_post_processing_drops_a_looping_completion():
    # The README's example: the file ends at the cursor, so an unclosed string there is unfinished
    # input, not a parse error that would drop the completion anyway.
    text = "import logging\n\n\nclass Store:\n    def __init__(self):\n        self.log = logging."
    snap, _ = text_snapshot("file:///store.py", text, len(text), ServerConfig(drafts="off"), path="store.py")
    ctx = inference.document_windows(snap)
    assert postprocess.finish(snap, ctx, "getLogger(__name__)") == postprocess.Edit("getLogger(__name__)", 0)
    assert postprocess.finish(snap, ctx, "get('sys', 'file', 'file', 'file', 'file") is None
