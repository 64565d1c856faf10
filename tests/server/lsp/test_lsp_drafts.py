"""Drafts, streaming, progress and the completion after an accept, against the real server.

One server runs the shipped default model (seeded drafts, the default), the other answers
from drafts alone (deterministic: no model involved).
"""

from __future__ import annotations

import asyncio

import attrs
import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import LanguageClient

from lsp_helpers import CAPABILITIES, SERVER, complete, edit, open_doc, stats, until_loaded

pytestmark = pytest.mark.asyncio(loop_scope="module")

HANDLER = '''def load(registry, name):
    try:
        return registry[name]
    except KeyError:
        return None


def fetch(cache, key):
    try:
        return cache[key]
    except KeyErr
'''


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    lsp_client.drafts = []
    lsp_client.feature("redraft/preview")(lambda params: lsp_client.drafts.append(params))
    caps = attrs.evolve(CAPABILITIES, window=T.WindowClientCapabilities(work_done_progress=True))
    lsp_client.init_result = await lsp_client.initialize_session(T.InitializeParams(
        capabilities=caps, initialization_options={"streamPreviews": True}))
    await until_loaded(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def test_progress_while_the_default_model_loads(client: LanguageClient):
    for _ in range(200):  # the load finishes in the background
        if (await stats(client))["model"] is not None:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    kinds = [type(v).__name__ for values in client.progress_reports.values() for v in values]
    assert kinds[:1] == ["WorkDoneProgressBegin"] and kinds[-1:] == ["WorkDoneProgressEnd"], kinds


async def test_a_draft_from_the_buffer_is_kept_by_the_model(client: LanguageClient):
    uri = "file:///work/handler.py"
    open_doc(client, uri, HANDLER)
    before = await stats(client)
    items = await complete(client, uri, 10, 17)
    after = await stats(client)
    assert [i.insert_text for i in items] == ["or:"]
    assert after["sources"].get("buffer", 0) == before["sources"].get("buffer", 0) + 1
    assert after["draft_tokens_kept"] >= before["draft_tokens_kept"] + 2


async def test_drafts_stream_when_the_client_asks(client: LanguageClient):
    uri = "file:///work/stream.py"
    line = "    return 3.14159 * radius * "
    open_doc(client, uri, f"def area(radius):\n{line}\n")
    client.drafts.clear()
    await complete(client, uri, 1, len(line))
    await asyncio.sleep(0.2)  # notifications sent before the answer may still be in flight
    assert client.drafts, "no redraft/preview notification"
    d = client.drafts[-1]
    assert d.uri == uri and d.position.line == 1 and d.position.character == len(line)
    assert isinstance(d.text, str) and d.step >= 1 and d.masked >= 0


@pytest_lsp.fixture(config=SERVER, scope="module")
async def drafts_only(lsp_client: LanguageClient):
    await lsp_client.initialize_session(T.InitializeParams(
        capabilities=CAPABILITIES, initialization_options={"drafts": "only"}))
    yield
    await lsp_client.shutdown_session()


async def test_drafts_alone_answer_without_a_model_run(drafts_only: LanguageClient):
    client = drafts_only
    uri = "file:///work/compute.py"
    open_doc(client, uri, "x = compute(alpha, beta)\ny = scale(gamma)\nz = compute(al\n")
    items = await complete(client, uri, 2, 14)
    s = await stats(client)
    assert [i.insert_text for i in items] == ["pha, beta)"]
    assert s["model_runs"] == 0 and s["sources"] == {"buffer": 1}


async def test_the_next_completion_is_ready_after_an_accept(drafts_only: LanguageClient):
    client = drafts_only
    uri = "file:///work/accept.py"
    open_doc(client, uri, HANDLER)
    items = await complete(client, uri, 10, 17)
    assert [i.insert_text for i in items] == ["or:"]
    # The editor inserts the text, then runs the item's command.
    edit(client, uri, 2, 10, 17, "or:")
    await client.workspace_execute_command_async(T.ExecuteCommandParams(
        command=items[0].command.command, arguments=items[0].command.arguments))
    before = await stats(client)
    assert before["prefetched"] == 1
    items = await complete(client, uri, 10, 20)  # the cursor after the accepted text: a new block
    after = await stats(client)
    assert [i.insert_text for i in items] == ["\n        return None"]
    assert after["type_through"] == before["type_through"] + 1  # answered from what was computed ahead
