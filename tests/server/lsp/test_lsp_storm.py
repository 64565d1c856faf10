"""A keystroke storm through the real `redraft serve`: 1,000 keystrokes 5 ms apart, an inline
completion request after each. Every request is answered (superseded ones with nothing), at
most two engine jobs run for the document at any time, the last request gets a real answer
from the model, and the server's copy of the document is what was typed."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import LanguageClient

from lsp_helpers import SERVER, completion_params, edit, init_params, open_doc, plain, stats, until_loaded

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEYSTROKES = 1000


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, tiny_model):
    await lsp_client.initialize_session(init_params(tiny_model, drafts="off"))
    await until_loaded(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def test_keystroke_storm(client: LanguageClient):
    uri = "file:///storm/typing.py"
    open_doc(client, uri, "def work(items):\n    total = \n")
    before = await stats(client)
    typed = ("items[0] + len(items) * 2 - other_value // 3\n    total = ") * 30
    typed = typed[:KEYSTROKES]
    row, col, version = 1, 12, 1
    tasks = []
    for ch in typed:
        version += 1
        edit(client, uri, version, row, col, ch)
        row, col = (row + 1, 0) if ch == "\n" else (row, col + 1)
        tasks.append(asyncio.ensure_future(
            client.text_document_inline_completion_async(completion_params(uri, row, col))))
        await asyncio.sleep(0.005)
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)
    after = await stats(client)

    assert len(results) == KEYSTROKES
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []  # every request answered: a list, empty when superseded
    assert all(isinstance(r, T.InlineCompletionList) for r in results)
    assert after["requests"] - before["requests"] == KEYSTROKES
    assert after["errors"] == 0
    assert after["peak_in_flight"] <= 2
    assert after["cancelled"] > before["cancelled"]  # the storm superseded most requests
    # the last request was not superseded: it ran the model to the end
    assert after["model_runs"] > before["model_runs"]
    # every request is accounted for: superseded, answered with nothing, or answered
    assert after["requests"] == after["cancelled"] + after["empty"] + after["answered"]
    again = await client.text_document_inline_completion_async(completion_params(uri, row, col))
    assert [i.insert_text for i in results[-1].items] == [i.insert_text for i in again.items]
    doc = plain(await client.protocol.send_request_async("redraft/document", {"uri": uri}))
    assert doc["version"] == version
    assert doc["text"] == "def work(items):\n    total = " + typed + "\n"
