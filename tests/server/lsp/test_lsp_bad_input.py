"""Bad input never crashes `redraft serve`: an empty result or a clear error, the document as
the client sent it, no internal error counted, and the next request works."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types as T
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from lsp_helpers import SERVER, complete, document, edit, init_params, open_doc, send_raw, stats, until_loaded

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, tiny_model):
    await lsp_client.initialize_session(init_params(tiny_model))
    await until_loaded(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def works(client: LanguageClient) -> None:
    """The server still answers a plain request after the bad one: it runs the model for it,
    and counts no internal error."""
    uri = "file:///work/ok.py"
    before = await stats(client)
    open_doc(client, uri, "x = \n")
    await complete(client, uri, 0, 4)
    after = await stats(client)
    assert after["requests"] == before["requests"] + 1
    assert after["model_runs"] == before["model_runs"] + 1
    assert after["errors"] == 0
    assert (await document(client, uri))["text"] == "x = \n"


async def answered_without_model(client: LanguageClient, uri: str, line: int, char: int) -> None:
    """An empty answer, counted as one, without running the model."""
    before = await stats(client)
    assert await complete(client, uri, line, char) == []
    after = await stats(client)
    assert after["empty"] == before["empty"] + 1 and after["model_runs"] == before["model_runs"]


@pytest.mark.parametrize("line,char", [(99, 0), (0, 999), (-1, 0)])
async def test_position_outside_document(client: LanguageClient, line, char):
    uri = "file:///work/outside.py"
    open_doc(client, uri, "a = 1\n")
    if line < 0:  # fails to deserialize (uinteger): InvalidParams with the request's id
        with pytest.raises(JsonRpcException) as err:
            await send_raw(client, T.TEXT_DOCUMENT_INLINE_COMPLETION, {
                "textDocument": {"uri": uri}, "position": {"line": -1, "character": 0},
                "context": {"triggerKind": 2}}, "negative-line")
        assert err.value.code == -32602
    else:
        await answered_without_model(client, uri, line, char)
    assert (await document(client, uri))["text"] == "a = 1\n"
    await works(client)


async def test_params_that_fail_to_deserialize(client: LanguageClient):
    with pytest.raises(JsonRpcException) as err:
        await send_raw(client, T.TEXT_DOCUMENT_INLINE_COMPLETION,
                       {"textDocument": "not an object", "position": 3}, "bad-shape")
    assert err.value.code == -32602
    await works(client)


async def test_versions_out_of_order(client: LanguageClient):
    uri = "file:///work/versions.py"
    open_doc(client, uri, "y = \n", version=5)
    edit(client, uri, 3, 0, 4, "1")  # older version number: applied, logged
    edit(client, uri, 3, 0, 5, " +")
    await complete(client, uri, 0, 7)
    assert await document(client, uri) == {"uri": uri, "version": 3, "text": "y = 1 +\n"}
    for _ in range(100):  # the warning reaches the client as window/logMessage
        if any("out of order" in m.message for m in client.log_messages):
            break
        await asyncio.sleep(0.02)
    assert any("out of order" in m.message for m in client.log_messages)
    await works(client)


async def test_edit_range_outside_document_is_clamped(client: LanguageClient):
    uri = "file:///work/clamp.py"
    open_doc(client, uri, "z = 1\n")
    edit(client, uri, 2, 50, 0, "tail", end=(60, 3))  # both ends past the last line: the end of the text
    assert (await document(client, uri))["text"] == "z = 1\ntail"
    edit(client, uri, 3, 0, 2, "=", end=(0, 999))  # past the line's end: its end
    assert (await document(client, uri))["text"] == "z =\ntail"
    await works(client)


async def test_five_megabyte_file(client: LanguageClient):
    uri = "file:///work/big.py"
    line = "value_%06d = compute(%d, 'payload')\n"
    text = "".join(line % (i, i) for i in range(5 * 1024 * 1024 // 36))
    assert len(text) > 5_000_000
    open_doc(client, uri, text)
    n = text.count("\n")
    edit(client, uri, 2, n, 0, "last = ")
    before = await stats(client)
    await complete(client, uri, n, 7)
    await complete(client, uri, n // 2, 0)
    after = await stats(client)
    assert after["requests"] == before["requests"] + 2 and after["errors"] == 0
    assert (await document(client, uri))["text"] == text + "last = "
    await works(client)


async def test_twenty_thousand_character_line(client: LanguageClient):
    uri = "file:///work/long.py"
    long = "x = [" + ", ".join(["1"] * 6700) + "]"
    assert len(long) > 20_000
    open_doc(client, uri, long + "\ny = \n")
    before = await stats(client)
    await complete(client, uri, 1, 4)
    await complete(client, uri, 0, len(long))
    await answered_without_model(client, uri, 0, 10_000)  # before a "1": mid-token, nothing to complete
    after = await stats(client)
    assert after["requests"] == before["requests"] + 3 and after["errors"] == 0
    assert after["model_runs"] >= before["model_runs"] + 1
    await works(client)


async def test_binary_looking_text(client: LanguageClient):
    uri = "file:///work/blob.bin"
    blob = "\x00\x01\x02ELF\x7f\x00" * 200 + "\n"
    open_doc(client, uri, blob, language="plaintext")
    await answered_without_model(client, uri, 0, 5)
    assert (await document(client, uri))["text"] == blob
    await works(client)


async def test_closed_and_never_opened_documents(client: LanguageClient):
    await answered_without_model(client, "file:///work/never.py", 0, 0)
    uri = "file:///work/closed.py"
    open_doc(client, uri, "q = \n")
    assert (await document(client, uri))["text"] == "q = \n"
    client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))
    await answered_without_model(client, uri, 0, 4)
    edit(client, uri, 2, 0, 0, "ignored")  # a change for a closed document is ignored
    assert await document(client, uri) == {}
    await works(client)


async def test_errors_are_not_counted_for_bad_input(client: LanguageClient):
    assert (await stats(client))["errors"] == 0


async def test_client_that_never_sends_initialized(tiny_model):
    other = await SERVER.start()
    try:
        params = init_params(tiny_model)
        other.capabilities = params.capabilities  # what initialize_session would record
        await other.initialize_async(params)  # no `initialized` notification follows
        await until_loaded(other)
        uri = "file:///work/uninitialized.py"
        open_doc(other, uri, "w = \n")
        await complete(other, uri, 0, 4)
        s = await stats(other)
        assert s["requests"] == 1 and s["model_runs"] == 1 and s["errors"] == 0
        await other.shutdown_async(None)
        other.exit(None)
    finally:
        await asyncio.wait_for(other.stop(), 30)


async def test_model_that_fails_to_load_keeps_the_old_one(client: LanguageClient, tiny_model):
    n = len(client.messages)
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"model": str(tiny_model.parent / "no-model")}))
    await client.wait_for_notification(T.WINDOW_SHOW_MESSAGE)
    assert len(client.messages) == n + 1 and "could not load" in client.messages[n].message
    before = await stats(client)
    uri = "file:///work/still.py"
    open_doc(client, uri, "v = \n")
    await complete(client, uri, 0, 4)
    after = await stats(client)
    assert after["model_runs"] == before["model_runs"] + 1 and after["model"] is not None
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"model": str(tiny_model)}))
