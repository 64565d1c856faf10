"""The `engineUrl` setting: a client that names a remote engine in its initialization options
gets it instead of the model in the server's process, with no command-line flag."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient

from remote_helpers import TEXT, Fake, Running

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "redraft.server.cli", "serve"],
                            server_env={**os.environ, "OMP_NUM_THREADS": "1"})
CAPABILITIES = T.ClientCapabilities(text_document=T.TextDocumentClientCapabilities(
    inline_completion=T.InlineCompletionClientCapabilities(dynamic_registration=False)))


@pytest.fixture(scope="module")
def engine():
    fake = Fake()
    running = Running(fake.app)  # a protocol server on a free loopback port
    yield fake, running.url
    running.stop()


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, engine):
    await lsp_client.initialize_session(T.InitializeParams(capabilities=CAPABILITIES, initialization_options={
        "engineUrl": engine[1], "drafts": "off", "nextEdit": False, "lineTokens": 6, "contextTokens": 256}))
    yield
    await lsp_client.shutdown_session()


async def test_the_engine_named_by_the_setting_answers(client: LanguageClient, engine):
    fake, url = engine
    for _ in range(200):
        stats = await client.protocol.send_request_async("redraft/stats", {})
        if stats.model_state != "loading":
            break
        await asyncio.sleep(0.05)
    assert stats.model_state == "ready" and stats.model == "fake"
    uri = "file:///work/setting.py"
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, "python", 1, TEXT)))
    params = T.InlineCompletionParams(T.InlineCompletionContext(T.InlineCompletionTriggerKind.Automatic),
                                      T.TextDocumentIdentifier(uri), T.Position(2, 14))
    await asyncio.wait_for(client.text_document_inline_completion_async(params), timeout=10)
    stats = await client.protocol.send_request_async("redraft/stats", {})
    assert stats.model_runs == 1 and stats.remote.url == url and stats.remote.failures == 0
    sent = [b for b in fake.bodies if "requests" in b]
    assert len(sent) == 1 and sent[0]["requests"][0]["prefix"].endswith("z = compute(al")
