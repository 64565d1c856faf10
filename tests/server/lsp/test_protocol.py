"""The protocol class below the handlers, driven with real messages through pygls' own reader
path (`handle_message`), in process: what it keeps after each message."""

from __future__ import annotations

import asyncio
import json
import logging

from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from redraft.server.lsp.protocol import RedraftProtocol


class _Sink:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def close(self) -> None:
        pass


def _server(protocol_cls) -> tuple[LanguageServer, list[str]]:
    server = LanguageServer("probe", "0", protocol_cls=protocol_cls)
    texts: list[str] = []

    @server.feature("textDocument/didChange")
    def did_change(ls, params) -> None:
        texts.append(params.content_changes[0].text)

    server.protocol.set_writer(_Sink())
    return server, texts


def _notify(server: LanguageServer, method: str, params: dict) -> None:
    proto = server.protocol
    proto.handle_message(json.loads(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}),
                                    object_hook=proto.structure_message))


def _type_keystrokes(server: LanguageServer, n: int) -> None:
    async def go():
        for i in range(n):
            _notify(server, "textDocument/didChange", {"textDocument": {"uri": "file:///a.py", "version": i + 2},
                                                       "contentChanges": [{"text": f"x = {i}\n"}]})
            await asyncio.sleep(0)
    asyncio.run(go())


def test_handled_notifications_are_not_kept():
    server, texts = _server(RedraftProtocol)
    _type_keystrokes(server, 300)
    assert len(texts) == 300 and texts[-1] == "x = 299\n"  # every keystroke reached the handler
    # pygls 2.1 would keep one future per keystroke here, for the life of the process
    assert server.protocol._request_futures == {}


def _request(server: LanguageServer, msg_id: int, method: str) -> None:
    proto = server.protocol
    proto.handle_message(json.loads(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {}}),
                                    object_hook=proto.structure_message))


def _cancel_after_answer_and_while_pending(protocol_cls) -> tuple[list[dict], bool]:
    """A request answered, then cancelled (the cancel crossed the answer on the wire); another
    cancelled while its handler waits. Returns what was sent and whether the second was cancelled."""
    server, _ = _server(protocol_cls)
    gate: asyncio.Event | None = None

    @server.feature("redraft/quick")
    async def quick(ls, params) -> int:
        return 1

    @server.feature("redraft/slow")
    async def slow(ls, params) -> int:
        await gate.wait()
        return 2

    async def go() -> bool:
        nonlocal gate
        gate = asyncio.Event()
        _request(server, 1, "redraft/quick")
        for _ in range(3):
            await asyncio.sleep(0)
        _notify(server, "$/cancelRequest", {"id": 1})
        _request(server, 2, "redraft/slow")
        await asyncio.sleep(0)
        future = server.protocol._request_futures[2]
        _notify(server, "$/cancelRequest", {"id": 2})
        await asyncio.sleep(0)
        return future.cancelled()

    cancelled = asyncio.run(go())
    sent = [json.loads(m.split(b"\r\n\r\n", 1)[1]) for m in server.protocol.writer.sent]
    return sent, cancelled


def test_a_cancel_for_an_answered_request_is_not_a_warning(caplog):
    caplog.set_level("DEBUG")
    sent, cancelled = _cancel_after_answer_and_while_pending(RedraftProtocol)
    assert [(m["id"], m.get("result"), m.get("error", {}).get("code")) for m in sent] == [(1, 1, None), (2, None, -32800)]
    assert cancelled  # a cancel for a request still running cancels it, as before
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    # pygls alone warns on stderr (Neovim's LspLog shows it as an ERROR line)
    caplog.clear()
    _cancel_after_answer_and_while_pending(LanguageServerProtocol)
    assert any("unknown message id" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
