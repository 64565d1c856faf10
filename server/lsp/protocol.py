"""The LSP wire, below the handlers: the protocol class and the client log.

The protocol class (1) answers a request whose params fail to deserialize with
InvalidParams (-32602) and its id, where pygls 2.1 would drop it and leave the client
waiting, (2) always negotiates UTF-16 columns, which the Session counts in, (3) skips
pygls' own copy of open documents, since the Session keeps them (with trees and histories),
and (4) forgets each notification once handled: pygls 2.1 files the future of every
notification whose handler is a generator (didOpen, didChange, didClose, ...) under a fresh
id and never removes it — one future per keystroke, for the life of the process; (5) takes a
`$/cancelRequest` for a request already answered as the normal LSP traffic it is (the client
cancels while the answer is on its way), where pygls warns on stderr, which editors show as an
error (Neovim's LspLog); (6) replaces lone UTF-16 surrogates (`\\ud800`: a valid JSON escape
that no UTF-8 text can hold) by U+FFFD in every string of a message, keys included, with one
log line naming the method: the text stays as the client sent it otherwise, and nothing
downstream (parsing, tokenizing, logging) meets an unencodable string.
`ClientLog` forwards redraft's log records to the client as `window/logMessage`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification
from pygls.protocol.language_server import lsp_method

log = logging.getLogger(__name__)

_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def _clean(value: Any) -> tuple[Any, bool]:
    """A string (or list) with lone surrogates replaced, and whether there were any. Dicts
    inside lists are cleaned on their own (the JSON decoder hands each object to the hook)."""
    if isinstance(value, str):
        if value.isascii() or _SURROGATE.search(value) is None:
            return value, False
        return _SURROGATE.sub(REPLACEMENT, value), True
    if isinstance(value, list):
        found = False
        for i, item in enumerate(value):
            if isinstance(item, (str, list)):
                new, hit = _clean(item)
                if hit:
                    value[i], found = new, True
        return value, found
    return value, False


def clean_object(data: dict) -> bool:
    """Replace lone surrogates in one decoded JSON object's keys and values (not in the
    objects nested in it, which the decoder cleaned before); True when there were some."""
    found = False
    for key in list(data):
        value, hit = _clean(data[key])
        new_key, key_hit = _clean(key)
        if key_hit:
            del data[key]
        if hit or key_hit:
            data[new_key], found = value, True
    return found


class RedraftProtocol(LanguageServerProtocol):
    _surrogates = False  # the message being decoded had lone surrogates (set by nested objects)

    def structure_message(self, data: dict[str, Any]):
        if clean_object(data):
            self._surrogates = True
        if "jsonrpc" not in data:
            return data
        if self._surrogates:  # the message's outermost object: one line for all of it
            self._surrogates = False
            log.warning("%s: lone UTF-16 surrogates in the message replaced by U+FFFD",
                        str(data.get("method") or "a response"))
        try:
            return super().structure_message(data)
        except Exception:
            if "id" in data and "method" in data:
                err = JsonRpcInvalidParams(f"invalid params for {data.get('method')}").to_response_error()
                self._send_response(data["id"], error=err)
            # Something handle_message ignores (an unknown notification), so the reader goes on.
            return JsonRPCNotification(method="$/redraft/invalid", jsonrpc="2.0", params=None)

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None):
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        if callback == self._check_handler_result:  # a notification: nothing will ask for it by id
            future = self._request_futures.get(msg_id)
            if future is not None:
                future.add_done_callback(lambda _, key=msg_id: self._request_futures.pop(key, None))

    def _handle_cancel_notification(self, msg_id):
        if msg_id not in self._request_futures:  # answered already: nothing left to cancel
            log.debug("cancel for request %s, already answered", msg_id)
            return
        super()._handle_cancel_notification(msg_id)

    @lsp_method(T.INITIALIZE)
    def lsp_initialize(self, params: T.InitializeParams):
        # The session counts columns in UTF-16, which every client must accept; pygls would
        # pick the client's first preference (Neovim offers UTF-8 first).
        general = params.capabilities.general
        if general is not None and general.position_encodings:
            general.position_encodings = [T.PositionEncodingKind.Utf16]
        return (yield from super().lsp_initialize(params))

    # The Session owns open documents: only forward to the user handlers.
    @lsp_method(T.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params):
        if (h := self.fm.features.get(T.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield h, (params,), None

    @lsp_method(T.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params):
        if (h := self.fm.features.get(T.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield h, (params,), None

    @lsp_method(T.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params):
        if (h := self.fm.features.get(T.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield h, (params,), None


class ClientLog(logging.Handler):
    """Forwards redraft's own log records (not pygls', which logs every message it sends) to
    the client as `window/logMessage`, from whichever thread logged them."""

    LEVELS = {logging.ERROR: T.MessageType.Error, logging.WARNING: T.MessageType.Warning,
              logging.INFO: T.MessageType.Info}

    def __init__(self, server: LanguageServer, loop: asyncio.AbstractEventLoop, level: int = logging.INFO):
        super().__init__(level)
        self.server, self.loop = server, loop

    def emit(self, record: logging.LogRecord) -> None:
        kind = self.LEVELS.get(record.levelno, T.MessageType.Log if record.levelno < logging.INFO
                               else T.MessageType.Error)
        params = T.LogMessageParams(type=kind, message=record.getMessage())
        try:
            self.loop.call_soon_threadsafe(self.server.window_log_message, params)
        except RuntimeError:  # the loop has closed: nobody to tell
            pass


def as_plain(obj: Any) -> Any:
    """Namedtuples (how pygls hands over unknown params) to dicts and lists."""
    if hasattr(obj, "_asdict"):
        return {k: as_plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [as_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: as_plain(v) for k, v in obj.items()}
    return obj
