"""Every LSP handler runs inside one boundary: an internal error is logged, counted for its
method and answered with the protocol's empty result; the server goes on."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from lsprotocol import types as T

from redraft.server.core.inference import Inference
from redraft.server.lsp.server import DOCUMENT, INLINE_EDIT, STATS, build_server, guarded
from redraft.server.lsp.session import Session
from redraft.server.core.settings import ServerConfig

URI = "file:///boundary.py"


def broken(*args, **kwargs):
    raise RuntimeError("internal error on purpose")


async def call(server, method: str, params):
    out = server.protocol.fm.features[method](params)
    return await out if inspect.isawaitable(out) else out


def test_guarded_counts_per_method_and_answers_empty():
    session = Session(ServerConfig(), Inference())
    try:
        assert guarded(session, "a/b", list)(lambda ls, p: 1 / 0)(None, None) == []
        assert guarded(session, "a/b", list)(lambda ls, p: 1 / 0)(None, None) == []
        assert guarded(session, "c/d")(lambda ls, p: "fine")(None, None) == "fine"
        assert session.stats.errors == 2 and session.stats.errors_by_method == {"a/b": 2}

        async def cancelled(ls, p):
            raise asyncio.CancelledError()
        with pytest.raises(asyncio.CancelledError):  # cancellation is not an error
            asyncio.run(guarded(session, "e/f")(cancelled)(None, None))
        assert session.stats.errors == 2
    finally:
        session.inference.shutdown()


@pytest.mark.parametrize("method,patch,params,empty", [
    (T.TEXT_DOCUMENT_DID_OPEN, "open",
     T.DidOpenTextDocumentParams(T.TextDocumentItem(URI, "python", 1, "x = 1\n")), None),
    (T.TEXT_DOCUMENT_DID_CHANGE, "change",
     T.DidChangeTextDocumentParams(T.VersionedTextDocumentIdentifier(2, URI),
                                   [T.TextDocumentContentChangeWholeDocument("y = 2\n")]), None),
    (T.TEXT_DOCUMENT_DID_CLOSE, "close", T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(URI)), None),
    (T.TEXT_DOCUMENT_INLINE_COMPLETION, "inline_completion",
     T.InlineCompletionParams(T.InlineCompletionContext(T.InlineCompletionTriggerKind.Invoked),
                              T.TextDocumentIdentifier(URI), T.Position(0, 5)), T.InlineCompletionList(items=[])),
    (INLINE_EDIT, "next_edits", {"textDocument": {"uri": URI, "version": 1}}, {"edits": []}),
    (T.TEXT_DOCUMENT_CODE_ACTION, "next_edits",
     T.CodeActionParams(T.TextDocumentIdentifier(URI), T.Range(T.Position(0, 0), T.Position(0, 0)),
                        T.CodeActionContext([])), []),
    (STATS, "snapshot_stats", None, {}),
])
def test_an_internal_error_in_any_handler_is_counted_and_answered_empty(method, patch, params, empty):
    server = build_server()
    session = server.session
    try:
        setattr(session, patch, broken)
        assert asyncio.run(call(server, method, params)) == empty
        assert session.stats.errors_by_method == {method: 1}
        assert session.stats.errors == 1
    finally:
        session.inference.shutdown()


def test_every_registered_handler_is_behind_the_boundary():
    """A handler added without `guarded` fails here: each one, made to fail inside, must be
    counted rather than raise."""
    server = build_server()
    session = server.session
    try:
        for name in ("open", "change", "close", "inline_completion", "next_edits", "snapshot_stats", "shown",
                     "partially_accepted", "accepted", "configure", "document"):
            setattr(session, name, broken)
        session.stats = _Exploding(session.stats)
        features = server.protocol.fm.features
        assert len(features) >= 10
        for method in features:
            if method in (T.INITIALIZED, T.SHUTDOWN):
                continue
            asyncio.run(call(server, method, _params_for(method)))
        for command, handler in server.protocol.fm.commands.items():
            handler(URI)
        counted = set(session.stats.errors_by_method)
        assert counted >= set(features) - {T.INITIALIZED, T.SHUTDOWN}
        assert counted >= set(server.protocol.fm.commands)
    finally:
        session.inference.shutdown()


class _Exploding:
    """Counters whose feedback fields raise when bumped, so even the thinnest handler fails."""

    def __init__(self, real):
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __setattr__(self, name, value):
        if name in ("edits_shown", "edits_accepted"):
            raise RuntimeError("internal error on purpose")
        setattr(self._real, name, value)


def _params_for(method: str):
    doc = T.TextDocumentIdentifier(URI)
    return {
        T.INITIALIZE: T.InitializeParams(capabilities=T.ClientCapabilities(), initialization_options={}),
        T.WORKSPACE_DID_CHANGE_CONFIGURATION: T.DidChangeConfigurationParams(settings={}),
        T.TEXT_DOCUMENT_DID_OPEN: T.DidOpenTextDocumentParams(T.TextDocumentItem(URI, "python", 1, "x\n")),
        T.TEXT_DOCUMENT_DID_CHANGE: T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(2, URI), [T.TextDocumentContentChangeWholeDocument("y\n")]),
        T.TEXT_DOCUMENT_DID_CLOSE: T.DidCloseTextDocumentParams(doc),
        T.TEXT_DOCUMENT_INLINE_COMPLETION: T.InlineCompletionParams(
            T.InlineCompletionContext(T.InlineCompletionTriggerKind.Invoked), doc, T.Position(0, 1)),
        T.TEXT_DOCUMENT_CODE_ACTION: T.CodeActionParams(doc, T.Range(T.Position(0, 0), T.Position(0, 0)),
                                                        T.CodeActionContext([])),
        INLINE_EDIT: {"textDocument": {"uri": URI, "version": 1}},
        DOCUMENT: {"uri": URI},
    }.get(method)
