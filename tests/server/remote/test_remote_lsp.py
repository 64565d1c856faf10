"""End to end: `redraft serve --engine-url` at a port where nothing listens. Every inline
completion still answers (from drafts) within its timeout, the client hears of the outage
exactly once, `redraft/stats` counts the fallbacks and shows the open breaker, and once an
engine answers on that port the server reconnects by itself and says so once."""

from __future__ import annotations

import asyncio
import os
import socket
import sys

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient

from remote_helpers import DRAFT, TEXT, Fake, Running

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = _free_port()  # nothing listens here until the last test starts a fake engine on it
SERVER = ClientServerConfig(
    server_command=[sys.executable, "-m", "redraft.server.cli", "serve", "--engine-url", f"http://127.0.0.1:{PORT}",
                    "--engine-timeout", "2"],
    server_env={**os.environ, "OMP_NUM_THREADS": "1"})
CAPABILITIES = T.ClientCapabilities(text_document=T.TextDocumentClientCapabilities(
    inline_completion=T.InlineCompletionClientCapabilities(dynamic_registration=False)))
OPTIONS = {"lineTokens": 6, "blockTokens": 10, "contextTokens": 256, "nextEdit": False}


def _plain(obj):
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    return [_plain(v) for v in obj] if isinstance(obj, (list, tuple)) else obj


async def _stats(client: LanguageClient) -> dict:
    return _plain(await client.protocol.send_request_async("redraft/stats", {}))


async def _complete_in_new_doc(client: LanguageClient, n: int) -> list:
    """A completion where a draft answers, in a document of its own (no type-through)."""
    uri = f"file:///work/remote{n}.py"
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, "python", 1, TEXT)))
    params = T.InlineCompletionParams(T.InlineCompletionContext(T.InlineCompletionTriggerKind.Automatic),
                                      T.TextDocumentIdentifier(uri), T.Position(2, 14))
    result = await asyncio.wait_for(client.text_document_inline_completion_async(params), timeout=5)
    return list(result.items if isinstance(result, T.InlineCompletionList) else result)


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(T.InitializeParams(capabilities=CAPABILITIES,
                                                           initialization_options=OPTIONS))
    for _ in range(200):  # the first "load" (fetching /info) settles fast: the port refuses
        if (await _stats(lsp_client))["model_state"] != "loading":
            break
        await asyncio.sleep(0.05)
    yield
    await lsp_client.shutdown_session()


async def test_completions_answer_from_drafts_and_the_outage_is_told_once(client: LanguageClient):
    n = 6
    for i in range(n):
        items = await _complete_in_new_doc(client, i)
        assert [item.insert_text for item in items] == [DRAFT]
    s = await _stats(client)
    assert s["remote_fallbacks"] == n and s["model_runs"] == 0 and s["answered"] == n and s["errors"] == 0
    assert s["model_state"] == "failed" and "cannot connect to the engine" in s["model_error"]
    remote = s["remote"]
    assert remote["url"] == f"http://127.0.0.1:{PORT}" and remote["state"] in ("open", "half_open")
    assert remote["failures"] >= 3 and remote["fast_failures"] >= 1 and remote["down"] is True
    await asyncio.sleep(0.3)
    (message,) = client.messages
    assert message.type == T.MessageType.Warning and "cannot connect to the engine" in message.message
    assert message.message.endswith("answering from drafts until it is back") and s["remote_outages"] == 1


async def test_it_reconnects_by_itself_and_says_so_once(client: LanguageClient):
    told = len(client.messages)
    fake = Fake()
    running = Running(fake.app, PORT)
    try:
        s = {}
        for i in range(60):  # until the breaker's cooldown lets a probe through
            await _complete_in_new_doc(client, 100 + i)
            s = await _stats(client)
            if s["model_runs"]:
                break
            await asyncio.sleep(0.2)
        assert s["model_runs"] >= 1 and s["remote"]["state"] == "closed" and s["remote"]["down"] is False
        assert s["model_state"] == "ready" and s["model_error"] is None and s["model"] == "fake"
        assert fake.calls >= 2  # /info, then the completion
        await asyncio.sleep(0.3)
        (back,) = client.messages[told:]
        assert back.type == T.MessageType.Info and "answers again" in back.message
    finally:
        running.stop()
