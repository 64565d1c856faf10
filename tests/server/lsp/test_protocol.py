"""The protocol class below the handlers, driven with real messages through pygls' own reader
path (`handle_message`), in process: what it keeps after each message."""

from __future__ import annotations

import asyncio
import json

from pygls.lsp.server import LanguageServer

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
