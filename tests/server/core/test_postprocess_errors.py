"""Post-processing rejects a completion that adds a parse error, also where the user's
unfinished line already breaks the parse (an unclosed "(" is one large tree-sitter error that
a wrong completion may trade for another) and where tree-sitter-python accepts invalid code.
Through `inference.answer`, the pipeline the LSP, the HTTP API and `redraft complete` share,
with real grammars: drafts from the buffer, and a tiny model whose text is set."""

from __future__ import annotations

from dataclasses import replace

import pytest

from redraft.server.core import inference, postprocess
from redraft.server.core.context import Draft, Mode, build, own_drafts, text_snapshot
from redraft.server.core.settings import ServerConfig

# Names off: these tests are about the parse check, and a rejected draft at a partly typed name
# would otherwise give way to the name (names.py).
DRAFTS_ONLY = ServerConfig(drafts="only", names=False)

# As in textwrap.TextWrapper._wrap_chunks: the line the buffer draft continues.
WRAPPER = '''class Wrapper:
    def wrap(self, chunks):
        lines = []
        if self.max_lines is not None:
            if self.max_lines > 1:
                indent = self.subsequent_indent
            else:
                indent = self.initial_indent
            if len(indent) + len(self.placeholder.lstrip()) > self.width:
                raise ValueError("placeholder too large for max width")
        chunks.reverse()
        while chunks:
            cur_line = []
{typed}
{after}
        return lines
'''


def shown(typed: str, after: str = "            chunks.pop()") -> tuple[list[str], postprocess.Edit | None]:
    """The buffer's drafts at the end of `typed` and what the server shows there."""
    text = WRAPPER.format(typed=typed, after=after)
    cursor = text.index(typed) + len(typed)
    snap, doc = text_snapshot("file:///wrap.py", text, cursor, DRAFTS_ONLY, path="wrap.py")
    snap = own_drafts(snap, doc, DRAFTS_ONLY)
    return [d.text for d in snap.drafts], inference.answer(None, snap).edit


def with_draft(text: str, cursor: int, draft: str) -> postprocess.Edit | None:
    snap, _ = text_snapshot("file:///t.py", text, cursor, DRAFTS_ONLY, path="t.py")
    assert snap.mode is not Mode.NONE
    return inference.answer(None, replace(snap, drafts=(Draft(draft, "buffer"),))).edit


COPIED = "nt) + len(self.placeholder.lstrip()) > self.width:"


@pytest.mark.parametrize("typed", ["            n = len(inde", "            return len(inde",
                                   "            len(inde", "            total += len(inde"])
def test_a_copied_if_condition_is_not_shown_where_its_colon_is_invalid(typed):
    # The draft from the `if` line above makes this line end in ":" where no block can open.
    # Tree-sitter alone counted as many errors with it as with the unclosed "len(" it replaced.
    drafts, edit = shown(typed)
    assert drafts == [COPIED]  # the buffer's only draft, shown until now
    assert edit is None


def test_the_same_text_is_shown_on_an_if_line():
    text = WRAPPER.format(typed="            if len(inde", after="                chunks.pop()")
    assert with_draft(text, text.rindex("if len(inde") + 11, COPIED) == postprocess.Edit(COPIED, 0)


@pytest.mark.parametrize("typed, draft", [
    ("x = len(inde", "nt) > limit:"),  # an assignment ending in ":"
    ("x = len(inde", "nt))"),  # a bracket more than it opens
    ("x = foo(len(inde", "nt) > limit:"),  # ":" inside an open call
    ("x = ", "foo:"),  # tree-sitter-python reads `x = foo:` + the next line as an annotation
    ("    return len(inde", "nt) else:"),
])
def test_no_completion_that_adds_a_syntax_error_is_shown(typed, draft):
    text = f"def f(indent, limit):\n{typed}\n    y = 2\n    return y\n"
    if not typed.startswith(" "):
        text = f"import os\n{typed}\ny = 2\nprint(y)\n"
    assert with_draft(text, text.index(typed) + len(typed), draft) is None


@pytest.mark.parametrize("typed, draft", [
    ("x = len(inde", "nt) + 1"),  # finishes the line
    ("x = foo(len(inde", "nt), b"),  # leaves a bracket open: unfinished, not wrong
    ("if len(inde", "nt) > limit:"),  # a header: its body is the user's next line
    ("x = [i for i in", " range(3)"),
])
def test_valid_or_merely_unfinished_completions_are_shown(typed, draft):
    text = f"import os\n{typed}\ny = 2\nprint(y)\n"
    edit = with_draft(text, text.index(typed) + len(typed), draft)
    assert edit is not None and edit.text == draft


def test_a_continuation_line_of_a_signature_is_judged_with_its_statement():
    # The cursor line alone (`_b=B, _m=M.match):`) would read as an unmatched ")".
    text = "import re\n\ndef scan(s, end, strict=True,\n        _b=1, _m\n    return s\n"
    cursor = text.index("_m") + 2
    edit = with_draft(text, cursor, "=re.match):")
    assert edit is not None and edit.text == "=re.match):"


def test_an_error_elsewhere_in_the_window_is_not_blamed_on_the_completion():
    text = "def f(:\n    pass\n\nx = len(inde\ny = 2\n"
    edit = with_draft(text, text.index("inde") + 4, "nt) + 1")
    assert edit is not None and edit.text == "nt) + 1"


def test_a_window_that_starts_inside_a_docstring_is_read_from_the_next_statement():
    # The prefix window starts inside the docstring.
    config = ServerConfig(drafts="only", names=False, context_tokens=64)
    text = ('def f(indent, limit):\n    """Wrap the text.\n\n'
            + "".join(f"    Line {i} of the docstring, which says what the function does.\n" for i in range(12))
            + '    """\n    width = limit\n    n = len(inde\n    return n\n')
    snap, _ = text_snapshot("file:///t.py", text, text.index("len(inde") + 8, config, path="t.py")
    assert build(snap, lambda s: len(s) // 3 + 1).prefix.startswith("    Line ")
    for draft, shown_text in (("nt) > limit:", None), ("nt) + 1", "nt) + 1")):
        edit = inference.answer(None, replace(snap, drafts=(Draft(draft, "buffer"),))).edit
        assert (edit and edit.text) == shown_text


def test_other_languages_keep_the_tree_sitter_count():
    text = "function f(a) {\n  const x = g(a\n}\n"
    snap, _ = text_snapshot("file:///t.js", text, text.index("g(a") + 3, DRAFTS_ONLY, path="t.js")
    ctx = build(snap, lambda s: len(s) // 3 + 1)
    assert postprocess.finish(snap, ctx, ");") == postprocess.Edit(");", 0)
    text = "function f(a) {\n  const x = g(a);\n}\n"
    snap, _ = text_snapshot("file:///t.js", text, text.index(";") + 1, DRAFTS_ONLY, path="t.js")
    assert postprocess.finish(snap, build(snap, lambda s: len(s) // 3 + 1), " }}") is None


def test_the_models_text_is_checked_the_same_way(tiny_model):
    # The engine's answer goes through the same post-processing as a draft (run_engine).
    from redraft.engine import Engine
    engine = Engine.load(str(tiny_model), device="cpu", dtype="float32")
    infill = engine.infill
    text = WRAPPER.format(typed="            n = len(inde", after="            chunks.pop()")
    snap, _ = text_snapshot("file:///wrap.py", text, text.rindex("len(inde") + 8,
                            ServerConfig(drafts="off", names=False), path="wrap.py")
    for wrote, shown_text in ((COPIED, None), ("nt)", "nt)")):
        engine.infill = lambda *a, wrote=wrote, **k: replace(infill(*a, **k), text=wrote, abstained=False)
        answer = inference.answer(engine, snap)
        assert answer.ran_model and answer.raw == wrote
        assert (answer.edit and answer.edit.text) == shown_text


def test_the_parse_check_neither_warns_nor_changes_the_process_warning_filters():
    """Invalid escapes warn while CPython parses; the check ignores them for its own source
    name only, without swapping the process's filters (other threads run meanwhile)."""
    import warnings

    from redraft.server.core import postprocess

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning would raise here
        warnings.filterwarnings("ignore", module="<redraft-completion>")  # as the module sets it once
        before = list(warnings.filters)
        assert postprocess._python_error('path = "C:\\d"\n') is None
        assert postprocess._python_error("x = y:\nz = 1\n") == (1, 6)
        assert warnings.filters == before


def test_only_a_line_the_user_started_is_read_by_cpython():
    """CPython reads the statement only when the cursor line holds text already: on a fresh line
    it rejected right next lines and blocks on held-out code (a window cut mid-statement), so
    there tree-sitter's error count judges alone. `print "x"` is a statement tree-sitter-python
    accepts (Python 2's) and CPython rejects: it tells the two judges apart."""
    text = "def show(x):\n    if x:\n        \n    return x\n"
    fresh = text.index("        \n") + 8
    assert with_draft(text, fresh, 'print "x"') is not None
    started = text.replace("        \n", "        pri\n")
    assert with_draft(started, started.index("pri\n") + 3, 'nt "x"') is None
    assert with_draft(started, started.index("pri\n") + 3, 'nt("x")') is not None


def test_a_window_cut_at_an_indented_statement_is_read_inside_its_blocks():
    # The prefix window starts at `def store` (indented): tree-sitter read that first line as an
    # error and much of the window with it, so a right `-> None:` counted one error more.
    config = ServerConfig(drafts="only", names=False, context_tokens=160)
    methods = "".join(f"    def store_{i}(self, token: str) -> None:\n        self.items.append(token)\n\n"
                      for i in range(8))
    text = f"class Parser:\n{methods}    def complete(self) \n        self.done = True\n"
    snap, _ = text_snapshot("file:///t.py", text, text.index("complete(self) ") + 15, config, path="t.py")
    window = build(snap, lambda s: len(s) // 3 + 1)
    assert window.prefix.lstrip("\n").startswith("    def store_")
    assert postprocess.enclosing_blocks(window.prefix + window.suffix) == "if 1:\n"
    edit = inference.answer(None, replace(snap, drafts=(Draft("-> None:", "buffer"),))).edit
    assert edit == postprocess.Edit("-> None:", 0)
    assert inference.answer(None, replace(snap, drafts=(Draft("-> None:)", "buffer"),))).edit is None


def test_the_models_text_is_judged_in_the_documents_windows(tiny_model):
    # The model's suffix window ends inside the list its text opens; the document closes it later.
    from redraft.engine import Engine
    engine = Engine.load(str(tiny_model), device="cpu", dtype="float32")
    infill = engine.infill
    items = "".join(f'        "item number {i}",\n' for i in range(16))
    text = f"class Names:\n    names = [\n{items}    ]\n    other_n\n{items}    ]\n\n\nprint(Names.names)\n"
    snap, _ = text_snapshot("file:///t.py", text, text.index("other_n") + 7, ServerConfig(drafts="off"), path="t.py")
    seen = build(snap, engine.count_tokens, engine.context_budget(max(snap.config.line_tokens,
                                                                          snap.config.block_tokens)))
    assert "]" not in seen.suffix  # the model's window ends inside the list
    engine.infill = lambda *a, **k: replace(infill(*a, **k), text="ames = [", abstained=False)
    answer = inference.answer(engine, snap)
    assert answer.ran_model and answer.edit == postprocess.Edit("ames = [", 0)


def test_a_window_that_reaches_the_documents_end_keeps_its_last_lines():
    # The unfinished `day_n` breaks the parse below it; the list's closing `]` on the last line
    # read as a partial statement and was cut off the window, so `ames = [` looked unclosed.
    items = "".join(f'        "{day}",\n' for day in ("", "Mon", "Tue", "Wed"))
    text = f"class Names:\n    day_names = [\n{items}    ]\n\n\nclass Short:\n    day_n\n{items}    ]\n"
    snap, doc = text_snapshot("file:///t.py", text, text.rindex("day_n") + 5, DRAFTS_ONLY, path="t.py")
    snap = own_drafts(snap, doc, DRAFTS_ONLY)
    assert build(snap, lambda s: len(s) // 3 + 1).suffix.rstrip().endswith("]")
    assert [d.text for d in snap.drafts] == ["ames = ["]
    assert inference.answer(None, snap).edit == postprocess.Edit("ames = [", 0)


DOC = '''def run(command):
    """Run `command` in a shell and return its exit status.

    The output goes to the terminal unless
    """
    return 0
'''


def counted_parses(monkeypatch) -> list[int]:
    """Calls of tree-sitter's error count (one per parse the check reads), from now on."""
    calls = []
    real = postprocess.count_errors

    def counting(tree):
        calls.append(1)
        return real(tree)
    monkeypatch.setattr(postprocess, "count_errors", counting)
    return calls


def test_a_requests_candidates_share_one_parse_of_the_window(monkeypatch):
    text = "def f(indent, limit):\n    x = len(inde\n    y = 2\n    return y\n"
    snap, _ = text_snapshot("file:///t.py", text, text.rindex("inde") + 4, DRAFTS_ONLY, path="t.py")
    ctx = inference.document_windows(snap)
    postprocess._WINDOW_ERRORS.clear()  # as if no other request had read this window
    parses = counted_parses(monkeypatch)
    assert postprocess.finish(snap, ctx, "nt) + 1") == postprocess.Edit("nt) + 1", 0)
    assert postprocess.finish(snap, ctx, "nt) > limit:") is None
    assert postprocess.finish(snap, ctx, "nt, limit)") == postprocess.Edit("nt, limit)", 0)
    assert len(parses) == 3 + 1  # each candidate, and the window without one once


def test_plain_text_inside_a_docstring_is_shown_unparsed_and_a_quote_is_still_checked(monkeypatch):
    cursor = DOC.index("unless") + len("unless")
    snap, _ = text_snapshot("file:///d.py", DOC, cursor, DRAFTS_ONLY, path="d.py")
    assert snap.in_string and snap.mode is not Mode.NONE
    ctx = inference.document_windows(snap)
    parses = counted_parses(monkeypatch)
    assert postprocess.finish(snap, ctx, " quiet is set.") == postprocess.Edit(" quiet is set.", 0)
    assert parses == []  # cannot leave the string: no parse
    assert postprocess.finish(snap, ctx, ' quiet."""') is None  # ends the docstring: the rest breaks
    assert parses  # checked


LOOP = "def parse(items):\n    out = []\n    for item in items:\n        "


@pytest.mark.parametrize("draft,want", [
    # the first lines stand, the broken one after them goes
    ("out.append(item)\n        out.sort(key=)\n    return out", "out.append(item)"),
    ("item = item.strip()\n        out.append(item)\n        if item ==:\n            break", "item = item.strip()\n        out.append(item)"),
    # a cut never ends on a line that opens more (a header whose body was the broken part)
    ("out.append(item)\n        if item:\n            return =", "out.append(item)"),
    # nothing stands: nothing is shown
    ("out.append(item))\n        return out", None),
    ("if item ==:\n            out.append(item)", None),
])
def test_a_block_that_breaks_is_cut_to_its_first_lines_that_parse(draft, want):
    snap, _ = text_snapshot("file:///t.py", LOOP, len(LOOP), DRAFTS_ONLY, path="t.py")
    assert snap.mode is Mode.BLOCK
    got = with_draft(LOOP, len(LOOP), draft)
    assert (None if got is None else got.text) == want


def test_only_blocks_are_cut_a_line_that_breaks_is_not_shown():
    text = "total = 1\nvalue = total"
    snap, _ = text_snapshot("file:///t.py", text, len(text), DRAFTS_ONLY, path="t.py")
    assert snap.mode is Mode.LINE
    assert with_draft(text, len(text), " +* 2") is None
    assert postprocess.first_lines_that_parse(snap, None, "a = 1\nb ==:") is None


def test_a_block_cut_parses_the_window_a_bounded_number_of_times(monkeypatch):
    calls = []
    real = postprocess.adds_errors
    monkeypatch.setattr(postprocess, "adds_errors", lambda *a: calls.append(1) or real(*a))
    indent = "\n        "
    # broken from its first line: the longest cuts are tried, BLOCK_CUTS of them, then nothing
    lines = [f"x{n} = {n}" for n in range(6)]  # distinct: a repeated line would be cut as a loop
    assert with_draft(LOOP, len(LOOP), indent.join(["out.append(item) +"] + lines)) is None
    assert len(calls) == 1 + postprocess.BLOCK_CUTS
    calls.clear()
    # broken at its last line: the first cut stands
    got = with_draft(LOOP, len(LOOP), indent.join(lines[:4] + ["y ==:"]))
    assert got is not None and got.text == indent.join(lines[:4])
    assert len(calls) == 2
