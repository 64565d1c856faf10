"""Helpers for driving the real `redraft serve` process with pytest-lsp."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient

# The tests' model folders (tiny.py's, in pytest's temporary folders) are the user's models here:
# the client may name a model folder only under a models folder the command line gives.
MODELS_DIR = Path(os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()).resolve()
SERVER = ClientServerConfig(
    server_command=[sys.executable, "-m", "redraft.server.cli", "serve", "--dtype", "float32",
                    "--models-dir", str(MODELS_DIR)],
    server_env={**os.environ, "OMP_NUM_THREADS": "1"},
)

CAPABILITIES = T.ClientCapabilities(
    text_document=T.TextDocumentClientCapabilities(
        synchronization=T.TextDocumentSyncClientCapabilities(),
        inline_completion=T.InlineCompletionClientCapabilities(dynamic_registration=False)),
    workspace=T.WorkspaceClientCapabilities(configuration=False, did_change_configuration=T.DidChangeConfigurationClientCapabilities()),
    general=T.GeneralClientCapabilities(position_encodings=[T.PositionEncodingKind.Utf16]),
)

# Small spans and windows keep the tiny random model's calls to a few milliseconds. A wide time
# budget: these tests check answers, which a busy test machine must not cut short (the budget's
# own tests set theirs).
OPTIONS = {"lineTokens": 6, "blockTokens": 10, "contextTokens": 256, "maxTime": 60_000}


def init_params(model, **options) -> T.InitializeParams:
    return T.InitializeParams(capabilities=CAPABILITIES,
                              initialization_options={"model": str(model), **OPTIONS, **options})


def open_doc(client: LanguageClient, uri: str, text: str, language: str = "python", version: int = 1) -> None:
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        T.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)))


def edit(client: LanguageClient, uri: str, version: int, line: int, char: int, text: str,
         end: tuple[int, int] | None = None) -> None:
    end_line, end_char = end or (line, char)
    client.text_document_did_change(T.DidChangeTextDocumentParams(
        T.VersionedTextDocumentIdentifier(uri=uri, version=version),
        [T.TextDocumentContentChangePartial(range=T.Range(T.Position(line, char), T.Position(end_line, end_char)),
                                            text=text)]))


def completion_params(uri: str, line: int, char: int) -> T.InlineCompletionParams:
    return T.InlineCompletionParams(
        text_document=T.TextDocumentIdentifier(uri), position=T.Position(line, char),
        context=T.InlineCompletionContext(trigger_kind=T.InlineCompletionTriggerKind.Automatic))


async def complete(client: LanguageClient, uri: str, line: int, char: int) -> list[T.InlineCompletionItem]:
    result = await client.text_document_inline_completion_async(completion_params(uri, line, char))
    assert result is not None
    return list(result.items if isinstance(result, T.InlineCompletionList) else result)


async def send_raw(client: LanguageClient, method: str, params, msg_id: str):
    """Send a request exactly as given (the client would refuse to serialise bad params)."""
    import inspect
    import json
    from concurrent.futures import Future
    fut: Future = Future()
    client.protocol._request_futures[msg_id] = fut
    body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).encode()
    res = client.protocol.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    if inspect.isawaitable(res):
        await res
    return await asyncio.wrap_future(fut)


def plain(obj):
    """pygls hands unknown results over as namedtuples: back to dicts."""
    if hasattr(obj, "_asdict"):
        return {k: plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


async def stats(client: LanguageClient) -> dict:
    return plain(await client.protocol.send_request_async("redraft/stats", {}))


async def document(client: LanguageClient, uri: str) -> dict:
    """The server's copy of a document ({} when it is not open)."""
    return plain(await client.protocol.send_request_async("redraft/document", {"uri": uri})) or {}


async def until_loaded(client: LanguageClient, timeout: float = 60.0) -> dict:
    """Stats once the server's model load has settled (ready or failed): until then the server
    answers from drafts, which tests of the model's answers must wait out."""
    s = await stats(client)
    for _ in range(int(timeout / 0.05)):
        if s.get("model_state") != "loading":
            break
        await asyncio.sleep(0.05)
        s = await stats(client)
    return s
