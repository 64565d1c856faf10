"""Lone UTF-16 surrogates (`\\ud800`: valid JSON, no valid UTF-8) anywhere in an LSP message:
the text is kept with U+FFFD in their place, one log line says so, no internal error, and the
server keeps answering with the model."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import LanguageClient

from lsp_helpers import SERVER, complete, document, edit, init_params, open_doc, stats, until_loaded

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, tiny_model):
    await lsp_client.initialize_session(init_params(tiny_model))
    await until_loaded(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def logged(client: LanguageClient, method: str) -> None:
    """The server's one line for the message reached the client's log."""
    line = f"{method}: lone UTF-16 surrogates in the message replaced by U+FFFD"
    for _ in range(200):
        if any(m.message == line for m in client.log_messages):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no log line {line!r} in {[m.message for m in client.log_messages]}")


async def answers(client: LanguageClient, uri: str, line: int, char: int) -> None:
    """A completion there runs the model, and no internal error was counted."""
    before = await stats(client)
    await complete(client, uri, line, char)
    after = await stats(client)
    assert after["requests"] == before["requests"] + 1 and after["model_runs"] == before["model_runs"] + 1
    assert after["errors"] == 0


async def test_did_open_with_lone_surrogates(client: LanguageClient):
    uri = "file:///work/surrogate_open.py"
    client.log_messages.clear()
    open_doc(client, uri, "name = 'a\ud800b'\nvalue = \udc00\nz = \n")  # the client escapes them as \\ud800
    assert (await document(client, uri))["text"] == "name = 'a\ufffdb'\nvalue = \ufffd\nz = \n"
    await logged(client, "textDocument/didOpen")
    await answers(client, uri, 2, 4)


async def test_did_change_with_a_lone_surrogate(client: LanguageClient):
    uri = "file:///work/surrogate_change.py"
    open_doc(client, uri, "x = 1\ny = \n")
    client.log_messages.clear()
    edit(client, uri, 2, 1, 4, "'\udbff' + ")
    assert await document(client, uri) == {"uri": uri, "version": 2, "text": "x = 1\ny = '\ufffd' + \n"}
    await logged(client, "textDocument/didChange")
    await answers(client, uri, 1, 10)


async def test_a_pair_is_not_a_lone_surrogate(client: LanguageClient):
    uri = "file:///work/pair.py"
    open_doc(client, uri, "smile = '\U0001F600'\nz = \n")  # sent as the pair \\ud83d\\ude00
    assert (await document(client, uri))["text"] == "smile = '\U0001F600'\nz = \n"
    await answers(client, uri, 1, 4)


async def test_surrogates_in_a_uri_and_in_settings(client: LanguageClient):
    uri = "file:///work/odd\ud800name.py"
    open_doc(client, uri, "w = \n")
    assert (await document(client, "file:///work/odd\ufffdname.py"))["text"] == "w = \n"
    client.log_messages.clear()
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"\udfffkey": 1}))
    await logged(client, "workspace/didChangeConfiguration")
    for _ in range(200):  # the unknown key is named as it was kept
        if any("unknown setting '\ufffdkey'" in m.message for m in client.log_messages):
            break
        await asyncio.sleep(0.02)
    assert any("unknown setting '\ufffdkey'" in m.message for m in client.log_messages)
    await answers(client, "file:///work/odd\ufffdname.py", 0, 4)
