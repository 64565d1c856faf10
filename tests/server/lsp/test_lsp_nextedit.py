"""Next-edit suggestions against the real server and the shipped default model."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import LanguageClient

from lsp_helpers import CAPABILITIES, SERVER, edit, open_doc, stats, until_loaded

pytestmark = pytest.mark.asyncio(loop_scope="module")

SHAPES = '''import math


def volume(height, radius):
    base = math.pi * radius ** 2
    top = radius * 2
    return base * height


def describe(shape):
    return f"shape {shape}"
'''


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(T.InitializeParams(
        capabilities=CAPABILITIES, initialization_options={"nextEdit": False}))  # requests only
    await until_loaded(lsp_client)  # edits judged by the model, as a user gets them
    yield
    await lsp_client.shutdown_session()


async def inline_edits(client: LanguageClient, uri: str, version: int, line: int = 0, char: int = 0) -> list:
    result = await client.protocol.send_request_async("textDocument/copilotInlineEdit", {
        "textDocument": {"uri": uri, "version": version}, "position": {"line": line, "character": char},
        "context": {"triggerKind": 2}})
    return list(result.edits)


def rename_at_definition(client: LanguageClient, uri: str) -> None:
    open_doc(client, uri, SHAPES)
    col = SHAPES.splitlines()[3].index("radius")
    edit(client, uri, 2, 3, col, "r", end=(3, col + len("radius")))


async def test_rename_at_the_definition_proposes_the_other_uses(client: LanguageClient):
    uri = "file:///work/shapes.py"
    rename_at_definition(client, uri)
    edits = await inline_edits(client, uri, 2, 3, 24)
    lines = SHAPES.splitlines()
    expected = sorted((row, lines[row].index("radius")) for row in (4, 5))
    got = sorted((e.range.start.line, e.range.start.character) for e in edits)
    assert got == expected
    for e in edits:
        assert e.text == "r" and e.range.end.character - e.range.start.character == len("radius")
        assert e.textDocument.uri == uri and e.textDocument.version == 2
        assert e.range.start.line != 3  # the line the user is editing is never touched
        assert e.command.command == "redraft.acceptEdit"
    # the same edits as a code action, on the same version
    actions = await client.text_document_code_action_async(T.CodeActionParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(3, 0), T.Position(3, 0)), T.CodeActionContext([])))
    assert len(actions) == 1
    change = actions[0].edit.document_changes[0]
    assert change.text_document.version == 2
    assert sorted((t.range.start.line, t.range.start.character, t.new_text) for t in change.edits) == \
        sorted((e.range.start.line, e.range.start.character, e.text) for e in edits)
    assert (await stats(client))["edits_proposed"] >= 2


async def test_a_stale_version_gets_no_edits(client: LanguageClient):
    uri = "file:///work/stale.py"
    rename_at_definition(client, uri)
    assert await inline_edits(client, uri, 1) == []
    assert await inline_edits(client, uri, 2) != []


async def test_an_unrelated_edit_gets_no_edit(client: LanguageClient):
    uri = "file:///work/unrelated.py"
    open_doc(client, uri, SHAPES)
    edit(client, uri, 2, 10, 0, "# a note about shapes\n")
    assert await inline_edits(client, uri, 2) == []
    actions = await client.text_document_code_action_async(T.CodeActionParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(0, 0), T.Position(0, 0)), T.CodeActionContext([])))
    assert not actions


async def test_unknown_documents_and_bad_params_get_nothing(client: LanguageClient):
    assert await inline_edits(client, "file:///work/never-opened.py", 1) == []
    result = await client.protocol.send_request_async("textDocument/copilotInlineEdit", {"nonsense": True})
    assert list(result.edits) == []
    uri = "file:///work/shapes2.py"
    rename_at_definition(client, uri)
    assert await inline_edits(client, uri, 2, 999, 999) != []  # the position only orders; edits still valid


CLASSES = "".join(f"class Shape{i}(object):\n    sides = {i}\n\n\n" for i in range(3))


async def test_a_deleted_base_class_is_proposed_for_the_other_classes(client: LanguageClient):
    uri = "file:///work/classes.py"
    open_doc(client, uri, CLASSES)
    col = CLASSES.index("(object)")
    edit(client, uri, 2, 0, col, "", end=(0, col + len("(object)")))
    edits = await inline_edits(client, uri, 2, 0, col)
    assert sorted((e.range.start.line, e.range.start.character, e.range.end.character, e.text) for e in edits) == [
        (4, 12, 20, ""), (8, 12, 20, "")]


async def test_undoing_an_edit_proposes_nothing(client: LanguageClient):
    """The signature renamed, then a use (a second event), then that use put back (a third):
    read alone the undo is a rename of `r` to `radius`, which would propose the signature."""
    import asyncio

    uri = "file:///work/undo.py"
    open_doc(client, uri, "def area(radius):\n    return radius\n")
    edit(client, uri, 2, 0, 9, "r", end=(0, 15))
    await asyncio.sleep(1.2)  # past the history's merge window: events of their own
    edit(client, uri, 3, 1, 11, "r", end=(1, 17))
    await asyncio.sleep(1.2)
    edit(client, uri, 4, 1, 11, "radius", end=(1, 12))
    assert await inline_edits(client, uri, 4, 1, 17) == []
    document = await client.protocol.send_request_async("redraft/document", {"uri": uri})
    assert document.text == "def area(r):\n    return radius\n" and document.version == 4


SIGNATURES = ("def area(width, height):\n    return width * height\n\n\n"
              "def volume(width, height, depth):\n    return area(width, height) * depth\n")


async def test_two_annotations_in_one_edit_are_proposed_together_where_they_apply(client: LanguageClient):
    """One didChange rewrites the signature line (two parameters annotated); the other
    signature takes both in one edit; the call's arguments take none."""
    uri = "file:///work/signatures.py"
    open_doc(client, uri, SIGNATURES)
    edit(client, uri, 2, 0, 0, "def area(width: float, height: float):", end=(0, len("def area(width, height):")))
    edits = await inline_edits(client, uri, 2, 0, 0)
    assert [(e.range.start.line, e.range.start.character, e.range.end.character, e.text) for e in edits] == [
        (4, 16, 24, ": float, height: float")]
    document = await client.protocol.send_request_async("redraft/document", {"uri": uri})
    assert document.text.startswith("def area(width: float, height: float):\n") and document.version == 2


async def test_a_change_stops_the_judging_of_edits_for_the_text_before_it(client: LanguageClient):
    """The model judging a set of places for version 2 is stopped by the change to version 3
    that arrives meanwhile (counted), instead of holding the engine for a stale answer."""
    import asyncio

    uri = "file:///work/many-classes.py"
    many = "".join(f"class Part{i}(object):\n    size = {i}\n\n\n" for i in range(12))
    open_doc(client, uri, many)
    col = many.index("(object)")
    edit(client, uri, 2, 0, col, "", end=(0, col + len("(object)")))
    before = (await stats(client))["edits_dropped"]
    asked = asyncio.ensure_future(inline_edits(client, uri, 2, 0, col))  # judging 8 places starts
    await asyncio.sleep(0)  # the request is on its way before the change
    edit(client, uri, 3, 1, 4, "total_", end=(1, 4))
    assert await asked == []
    assert (await stats(client))["edits_dropped"] == before + 1
    document = await client.protocol.send_request_async("redraft/document", {"uri": uri})
    assert document.version == 3 and document.text.startswith("class Part0:\n    total_size = 0\n")


def placed(edits: list) -> list[tuple[int, int, int, str]]:
    return sorted((e.range.start.line, e.range.start.character, e.range.end.character, e.text) for e in edits)


async def test_an_edit_moved_past_twice_is_not_proposed_again_for_that_change(client: LanguageClient):
    """A use of `radius` renamed to `r` proposes the signature and the other use. The user
    moves on without taking them (spaces typed after the edit: the same edit event, the same
    proposals) once, twice: then they are withheld. A later change event (the other use
    renamed by hand, after a pause) proposes the signature again."""
    import asyncio

    uri = "file:///work/moved-past.py"
    open_doc(client, uri, SHAPES)
    lines = SHAPES.splitlines()
    col = lines[4].index("radius")
    edit(client, uri, 2, 4, col, "r", end=(4, col + len("radius")))
    before = await stats(client)
    offered = placed(await inline_edits(client, uri, 2, 4, col + 1))
    signature = (3, lines[3].index("radius"), lines[3].index("radius") + len("radius"), "r")
    assert offered == [signature, (5, lines[5].index("radius"), lines[5].index("radius") + len("radius"), "r")]
    end = len(lines[4]) - len("radius") + 1  # row 4 as it reads now
    edit(client, uri, 3, 4, end, " ")  # moved past once
    assert placed(await inline_edits(client, uri, 3, 4, end + 1)) == offered
    edit(client, uri, 4, 4, end + 1, " ")  # and twice
    assert await inline_edits(client, uri, 4, 4, end + 2) == []
    actions = await client.text_document_code_action_async(T.CodeActionParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(4, 0), T.Position(4, 0)), T.CodeActionContext([])))
    assert not actions
    after = await stats(client)
    assert after["edits_moved_past"] == before["edits_moved_past"] + 4  # two edits, twice
    assert after["edits_withheld"] == before["edits_withheld"] + 2
    await asyncio.sleep(1.2)  # past the history's merge window: a new change event
    col5 = lines[5].index("radius")
    edit(client, uri, 5, 5, col5, "r", end=(5, col5 + len("radius")))
    assert placed(await inline_edits(client, uri, 5, 5, col5 + 1)) == [signature]
    document = await client.protocol.send_request_async("redraft/document", {"uri": uri})
    assert document.version == 5 and document.text.splitlines()[4] == "    base = math.pi * r ** 2  "


async def test_edits_the_user_takes_are_not_counted_as_moved_past(client: LanguageClient):
    """The proposals applied by the client (one change taking both, as the code action
    does), shown and accepted: counted as such, none as moved past."""
    uri = "file:///work/taken.py"
    rename_at_definition(client, uri)
    offered = await inline_edits(client, uri, 2, 3, 24)
    assert len(offered) == 2
    before = await stats(client)
    client.protocol.notify("textDocument/didShowInlineEdit", {"item": {"command": {"arguments": [uri]}}})
    await client.workspace_execute_command_async(T.ExecuteCommandParams("redraft.acceptEdit", [uri]))
    client.text_document_did_change(T.DidChangeTextDocumentParams(
        T.VersionedTextDocumentIdentifier(uri=uri, version=3),
        [T.TextDocumentContentChangePartial(range=e.range, text=e.text) for e in sorted(
            offered, key=lambda e: -e.range.start.line)]))
    after = await stats(client)
    assert after["edits_accepted"] == before["edits_accepted"] + 1
    assert after["edits_shown"] == before["edits_shown"] + 1
    assert after["edits_moved_past"] == before["edits_moved_past"]
    document = await client.protocol.send_request_async("redraft/document", {"uri": uri})
    assert "radius" not in document.text and document.version == 3


LIMITS = 'config = {}\nconfig["width"] = 1\nconfig["height"] = 2\nconfig["depth"] = 1\n'


async def test_a_proposal_undoing_the_users_last_edit_is_withheld_and_counted(client: LanguageClient):
    """The height set to 1, then (a new event) the width to 2: the literal rule finds both
    lines holding 1, but setting the height back to 2 would undo what the user just did. It
    is withheld and counted (`edits_reversals`, `edits_reversal_ratio`); the depth is not."""
    import asyncio

    uri = "file:///work/limits.py"
    open_doc(client, uri, LIMITS)
    at = LIMITS.splitlines()[2].index("2")
    edit(client, uri, 2, 2, at, "1", end=(2, at + 1))
    await asyncio.sleep(1.2)  # past the history's merge window: events of their own
    before = await stats(client)
    at = LIMITS.splitlines()[1].index("1")
    edit(client, uri, 3, 1, at, "2", end=(1, at + 1))
    edits = await inline_edits(client, uri, 3, 1, at + 1)
    assert all(e.range.start.line == 3 and e.text == "2" for e in edits)
    after = await stats(client)
    assert after["edits_reversals"] == before["edits_reversals"] + 1
    assert after["edits_proposed"] == before["edits_proposed"] + len(edits)
    assert 0 < after["edits_reversal_ratio"] == round(
        after["edits_reversals"] / (after["edits_reversals"] + after["edits_proposed"]), 4)


async def test_next_edits_have_their_own_budget_not_the_inline_one(client: LanguageClient):
    """An inline budget of 1 ms (maxTime) does not starve the judging of next edits: it has its
    own (nextEditTime), so the rename's other uses are still proposed."""
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"redraft": {"maxTime": 1}}))
    try:
        uri = "file:///work/shapes-budget.py"
        before = await stats(client)
        rename_at_definition(client, uri)
        edits = await inline_edits(client, uri, 2, 3, 24)
        assert sorted(e.range.start.line for e in edits) == [4, 5]
        after = await stats(client)
        assert after["edits_late"] == before["edits_late"]
        assert after["edits_proposed"] == before["edits_proposed"] + 2
    finally:
        client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"redraft": {"maxTime": 500}}))


async def test_a_next_edit_budget_too_short_is_counted_late_not_silent(client: LanguageClient):
    """With nextEditTime 1 ms the rename (a whole set) is not judged in time: nothing is proposed,
    and `edits_late` says why (a busy machine shows up there, not as silence)."""
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"redraft": {"nextEditTime": 1}}))
    try:
        uri = "file:///work/shapes-late.py"
        before = await stats(client)
        rename_at_definition(client, uri)
        assert await inline_edits(client, uri, 2, 3, 24) == []
        after = await stats(client)
        assert after["edits_late"] == before["edits_late"] + 1
        assert after["edits_dropped"] == before["edits_dropped"]
    finally:
        client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"redraft": {"nextEditTime": 3000}}))


async def test_a_pull_while_the_edits_are_computed_waits_for_that_computation(client: LanguageClient):
    """Two pulls for one version share one judging: the second neither restarts it nor drops it."""
    import asyncio

    uri = "file:///work/shapes-twice.py"
    before = await stats(client)
    rename_at_definition(client, uri)
    first, second = await asyncio.gather(inline_edits(client, uri, 2, 3, 24), inline_edits(client, uri, 2, 3, 24))
    assert sorted(e.range.start.line for e in first) == [4, 5]
    assert [(e.range.start.line, e.text) for e in second] == [(e.range.start.line, e.text) for e in first]
    after = await stats(client)
    assert after["edits_dropped"] == before["edits_dropped"]
    assert after["edits_proposed"] == before["edits_proposed"] + 2  # judged once
