"""A hostile remote engine against the real `redraft serve --engine-url`: an endless line, endless
events, an engine that never answers, a compressed bomb. Each time the editor's completion is
answered from drafts within its 500 ms budget (plus slack for a busy machine), the server closes
the connection (the engine sees it leave), counts the cut in `redraft/stats`, and its memory
stays bounded. Then the same caps on RemoteEngine alone: an /info answer that never ends."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient

from hostile import Hostile
from redraft.server.core import wire
from redraft.server.core.remote import RemoteEngine, RemoteUnavailable
from remote_helpers import DRAFT, TEXT, until

BUDGET_MS = 500
SLACK_S = 1.5  # a loaded 2-core machine; before the caps an endless line held the request 10 s and more
RSS_GROWTH_MB = 150


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = _free_port()
SERVER = ClientServerConfig(  # a long engine timeout: only the budget and the caps may cut
    server_command=[sys.executable, "-m", "redraft.server.cli", "serve", "--engine-url", f"http://127.0.0.1:{PORT}",
                    "--engine-timeout", "30"],
    server_env={**os.environ, "OMP_NUM_THREADS": "1"})
CAPABILITIES = T.ClientCapabilities(text_document=T.TextDocumentClientCapabilities(
    inline_completion=T.InlineCompletionClientCapabilities(dynamic_registration=False)))
OPTIONS = {"lineTokens": 6, "blockTokens": 10, "contextTokens": 256, "nextEdit": False, "maxTime": BUDGET_MS}


@pytest.fixture(scope="module")
def hostile():
    h = Hostile(PORT)
    yield h
    h.stop()


def _plain(obj):
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    return [_plain(v) for v in obj] if isinstance(obj, (list, tuple)) else obj


async def _stats(client: LanguageClient) -> dict:
    return _plain(await client.protocol.send_request_async("redraft/stats", {}))


def _memory_mb(client: LanguageClient) -> tuple[int, int]:
    """(resident, peak resident) of the server process, in MB."""
    status = open(f"/proc/{client._server.pid}/status").read()

    def field(name: str) -> int:
        return int(status.split(f"{name}:")[1].split()[0]) >> 10
    return field("VmRSS"), field("VmHWM")


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, hostile: Hostile):
    await lsp_client.initialize_session(T.InitializeParams(capabilities=CAPABILITIES, initialization_options=OPTIONS))
    for _ in range(400):
        s = await _stats(lsp_client)
        if s["model_state"] != "loading":
            break
        await asyncio.sleep(0.05)
    assert s["model_state"] == "ready" and s["model"] == "hostile"
    lsp_client.rss_before = _memory_mb(lsp_client)[0]
    yield
    await lsp_client.shutdown_session()


async def _complete(client: LanguageClient, n: int) -> tuple[list[str], float]:
    """A completion where a draft answers, in a document of its own, and the seconds it took."""
    uri = f"file:///work/hostile{n}.py"
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, "python", 1, TEXT)))
    params = T.InlineCompletionParams(T.InlineCompletionContext(T.InlineCompletionTriggerKind.Automatic),
                                      T.TextDocumentIdentifier(uri), T.Position(2, 14))
    t0 = time.monotonic()
    result = await asyncio.wait_for(client.text_document_inline_completion_async(params), timeout=60)
    took = time.monotonic() - t0
    items = [] if result is None else (result.items if isinstance(result, T.InlineCompletionList) else result)
    return [i.insert_text for i in items], took


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("mode, why", [("line", "cut off: a line of the stream is over 1 MB"),
                                       ("events", None),  # the budget or the stream's cap, whichever comes first
                                       ("silent", None),
                                       ("gzip", "compressed (gzip)")])
async def test_a_hostile_engine_costs_the_editor_neither_its_budget_nor_memory(client, hostile, mode, why):
    for _ in range(100):  # a failure before may have opened the breaker: wait out its cooldown
        before = await _stats(client)
        if before["remote"]["state"] != "open":
            break
        await asyncio.sleep(0.05)
    hostile.mode, served, left = mode, hostile.served, hostile.left
    texts, took = await _complete(client, hash(mode) % 10_000)
    assert took < BUDGET_MS / 1000 + SLACK_S, f"{mode}: answered after {took:.2f} s"
    s = await _stats(client)
    if texts == [] and why is None:  # cut at the budget, the drafts' few ms may not have been left
        assert s["budget_expired"] == before["budget_expired"] + 1, (mode, s)
    else:
        assert texts == [DRAFT], (mode, s)  # the drafts answered in the engine's place
        assert s["remote_fallbacks"] == before["remote_fallbacks"] + 1
    assert s["errors"] == 0
    assert hostile.served == served + 1  # the request did reach it
    await asyncio.to_thread(until, lambda: hostile.left == left + 1, 5.0, "the engine seeing the client leave")
    remote = s["remote"]
    if why is None:
        assert remote["cut_off"] == before["remote"]["cut_off"] + 1
    else:
        assert why in remote["last_error"]
        if mode == "line":
            assert remote["cut_off"] == before["remote"]["cut_off"] + 1
    rss, peak = _memory_mb(client)
    assert rss - client.rss_before < RSS_GROWTH_MB and peak < 1024, (mode, rss, peak, client.rss_before)


def test_an_info_answer_that_never_ends_is_cut_at_its_cap(hostile):
    hostile.mode = "big-info"
    left = hostile.left
    engine = RemoteEngine(hostile.url, timeout_s=30)
    t0 = time.monotonic()
    with pytest.raises(RemoteUnavailable, match=f"cut off: the answer is over {wire.MAX_BODY_BYTES >> 20} MB"):
        engine.connect()
    assert time.monotonic() - t0 < 5 and engine.cut_off == 1 and engine.failures == 1
    until(lambda: hostile.left == left + 1, 5.0, "the engine seeing the client leave")
    engine.close()


def test_lines_and_events_are_bounded_as_they_arrive():
    endless = (b"x" * 1000 for _ in range(10**9))  # never materialised: the reader stops at the cap
    with pytest.raises(wire.TooLarge, match="a line of the stream is over 4000 bytes"):
        list(wire.lines(endless, max_line=4000))
    chunks = [b"event: a\r\ndata: {}\n", b"\n:c", b"omment\n"]
    assert list(wire.lines(chunks)) == ["event: a", "data: {}", "", ":comment"]
    with pytest.raises(wire.TooLarge, match="the stream is over 5000 bytes"):
        list(wire.lines((b"ok\n" * 100 for _ in range(10**9)), max_total=5000))
    big = ["event: preview", *[f"data: {'1' * 90}" for _ in range(20)], ""]
    with pytest.raises(wire.TooLarge, match="a preview event is over 1000 bytes"):
        list(wire.read_events(big, max_event=1000))
    with pytest.raises(wire.WireError, match="not UTF-8"):
        list(wire.lines([b"data: \xff\n"]))
