"""The LSP front: `build_server(...)` makes a pygls 2 server whose handlers are thin.

Each handler converts LSP params to the Session's terms, calls it, and converts back;
errors are caught at this boundary, logged, and answered with an empty result
(cancellation is not an error: `$/cancelRequest` ends a request with -32800).

Also here: the protocol class, which (1) answers a request whose params fail to
deserialize with InvalidParams (-32602) and its id, where pygls 2.1 would drop it and
leave the client waiting, and (2) skips pygls' own copy of open documents, since the
Session keeps them (with trees and histories).

Custom surface: `redraft/stats` (request), Copilot's `textDocument/didShowCompletion`
and `textDocument/didPartiallyAcceptCompletion` (notifications), the accept command
`redraft.accept` through `workspace/executeCommand`, `redraft/draft` notifications (the
engine's draft after every denoising step, for clients that set `streamDrafts`), and
`$/progress` while the model loads (clients with `window.workDoneProgress`), and next-edit
suggestions: Copilot's `textDocument/copilotInlineEdit` (+ `textDocument/didShowInlineEdit`
and the `redraft.acceptEdit` command) and, for every other client, a quick-fix code action
applying the same edits, always for the document version they were computed on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification
from pygls.protocol.language_server import lsp_method

from .document import utf16_len
from .inference import Inference
from .session import Proposal, Session
from .settings import ServerConfig

log = logging.getLogger(__name__)

NAME = "redraft"
ACCEPT_COMMAND = "redraft.accept"
STATS = "redraft/stats"
DID_SHOW = "textDocument/didShowCompletion"
DID_PARTIALLY_ACCEPT = "textDocument/didPartiallyAcceptCompletion"
INLINE_EDIT = "textDocument/copilotInlineEdit"  # Copilot's next-edit suggestions (NES)
DID_SHOW_EDIT = "textDocument/didShowInlineEdit"
ACCEPT_EDIT_COMMAND = "redraft.acceptEdit"


class RedraftProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except Exception:
            if "id" in data and "method" in data:
                err = JsonRpcInvalidParams(f"invalid params for {data.get('method')}").to_response_error()
                self._send_response(data["id"], error=err)
            # Something handle_message ignores (an unknown notification), so the reader goes on.
            return JsonRPCNotification(method="$/redraft/invalid", jsonrpc="2.0", params=None)

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


def _as_plain(obj: Any) -> Any:
    """Namedtuples (how pygls hands over unknown params) to dicts and lists."""
    if hasattr(obj, "_asdict"):
        return {k: _as_plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [_as_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _as_plain(v) for k, v in obj.items()}
    return obj


def build_server(config: ServerConfig | None = None, inference: Inference | None = None) -> LanguageServer:
    """A ready-to-start server; the model loads in the background after `initialize`. Pass an
    `inference` to share its engine (one model in memory) with the HTTP front."""
    server = LanguageServer(NAME, "0.1.0", protocol_cls=RedraftProtocol,
                            text_document_sync_kind=T.TextDocumentSyncKind.Incremental)
    inference = inference or Inference()
    session = Session(config or ServerConfig(), inference)
    server.session = session  # for tests and embedding; handlers close over it

    def message(text: str, kind: T.MessageType = T.MessageType.Warning) -> None:
        log.warning("%s", text)  # also reaches the client's log through ClientLog
        try:
            server.window_show_message(T.ShowMessageParams(type=kind, message=f"redraft: {text}"))
        except Exception:  # no transport yet (or gone): the log line above is enough
            pass

    def apply_settings(options: Any, load: bool = False) -> None:
        problems, changed = session.configure(_as_plain(options))
        if problems:  # one message for all of them, defaults kept
            message("invalid settings, defaults kept: " + "; ".join(problems))
        if changed or load:
            watch_load(session.load_model())

    loading: list = []  # the model load in progress, for $/progress once the client is initialized

    def watch_load(load) -> None:
        loop = asyncio.get_running_loop()
        loading[:] = [load]

        def done(f):  # runs on the inference thread: hand the message to the loop
            error = None if f.cancelled() else f.result()
            if error:
                loop.call_soon_threadsafe(message, error, T.MessageType.Error)
        load.add_done_callback(done)
        if initialized:
            loop.create_task(report_progress(load))

    async def report_progress(load) -> None:
        """`$/progress` (server-initiated) while the model loads, when the client supports it."""
        caps = getattr(server.client_capabilities, "window", None)
        if load.done() or not getattr(caps, "work_done_progress", False):
            return
        token = f"redraft/load/{id(load)}"
        try:
            await server.work_done_progress.create_async(token)
            server.work_done_progress.begin(token, T.WorkDoneProgressBegin(
                title="redraft", message=f"loading {session.config.model or 'the default model'}"))
            await asyncio.wrap_future(load)
        except Exception:  # the client declined the token, or the load failed (reported elsewhere)
            log.debug("progress", exc_info=True)
        finally:
            if token in server.work_done_progress.tokens:
                server.work_done_progress.end(token, T.WorkDoneProgressEnd(message="ready"))

    initialized: list[bool] = []

    client_log: list[ClientLog] = []

    @server.feature(T.INITIALIZE)
    def initialize(ls: LanguageServer, params: T.InitializeParams) -> None:
        if not client_log:
            loop = asyncio.get_running_loop()
            client_log.append(ClientLog(server, loop))
            logging.getLogger("redraft").addHandler(client_log[0])

            def publish(method: str, params: dict) -> None:  # from any thread
                try:
                    loop.call_soon_threadsafe(server.protocol.notify, method, params)
                except RuntimeError:
                    pass
            session.publish = publish
        try:  # the model loads in the background; requests queue behind it on the same executor
            apply_settings(params.initialization_options, load=True)
        except Exception:
            log.exception("initialize")

    @server.feature(T.INITIALIZED)
    def on_initialized(ls: LanguageServer, params: T.InitializedParams) -> None:
        initialized.append(True)
        if loading:
            asyncio.get_running_loop().create_task(report_progress(loading[0]))

    @server.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: LanguageServer, params: T.DidChangeConfigurationParams) -> None:
        try:
            apply_settings(params.settings)
        except Exception:
            log.exception("didChangeConfiguration")

    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LanguageServer, params: T.DidOpenTextDocumentParams) -> None:
        d = params.text_document
        try:
            session.open(d.uri, d.text, d.version, d.language_id)
        except Exception:
            log.exception("didOpen %s", d.uri)

    @server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LanguageServer, params: T.DidChangeTextDocumentParams) -> None:
        d = params.text_document
        changes = []
        for c in params.content_changes:
            r = getattr(c, "range", None)
            rng = None if r is None else (r.start.line, r.start.character, r.end.line, r.end.character)
            changes.append((rng, c.text))
        try:
            session.change(d.uri, d.version, changes)
        except Exception:
            log.exception("didChange %s", d.uri)

    @server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: LanguageServer, params: T.DidCloseTextDocumentParams) -> None:
        try:
            session.close(params.text_document.uri)
        except Exception:
            log.exception("didClose")

    @server.feature(T.TEXT_DOCUMENT_INLINE_COMPLETION, T.InlineCompletionOptions())
    async def inline_completion(ls: LanguageServer, params: T.InlineCompletionParams) -> T.InlineCompletionList:
        uri, pos = params.text_document.uri, params.position
        try:
            proposal = await session.complete(uri, pos.line, pos.character)
            return T.InlineCompletionList(items=[] if proposal is None else [_item(uri, proposal)])
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("inlineCompletion %s", uri)
            session.stats.errors += 1
            return T.InlineCompletionList(items=[])

    def edit_items(uri: str, version: int, found) -> list[dict]:
        items = []
        for p in found:
            start, end = utf16_len(p.original[:p.start]), utf16_len(p.original[:p.end])
            rng = {"start": {"line": p.row, "character": start}, "end": {"line": p.row, "character": end}}
            items.append({"text": p.text, "range": rng, "textDocument": {"uri": uri, "version": version},
                          "command": {"title": "accept", "command": ACCEPT_EDIT_COMMAND, "arguments": [uri]}})
        return items

    @server.feature(INLINE_EDIT)
    async def inline_edit(ls: LanguageServer, params: Any) -> dict:
        """Copilot's next-edit request: the edits the newest edit implies, for this version only."""
        try:
            p = _as_plain(params)
            doc = p.get("textDocument") or p.get("text_document") or {}
            uri, version = doc.get("uri"), doc.get("version")
            if not isinstance(uri, str):
                return {"edits": []}
            at, found = await session.next_edits(uri, version if isinstance(version, int) else None)
            return {"edits": edit_items(uri, at, found)}
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("inlineEdit")
            session.stats.errors += 1
            return {"edits": []}

    @server.feature(DID_SHOW_EDIT)
    def did_show_edit(ls: LanguageServer, params: Any) -> None:
        session.stats.edits_shown += 1

    @server.command(ACCEPT_EDIT_COMMAND)
    def accept_edit(ls: LanguageServer, *args: Any) -> None:
        session.stats.edits_accepted += 1

    @server.feature(T.TEXT_DOCUMENT_CODE_ACTION,
                    T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.QuickFix]))
    async def code_action(ls: LanguageServer, params: T.CodeActionParams) -> list[T.CodeAction]:
        """The same predicted edits for clients without Copilot's request: one action applying all."""
        uri = params.text_document.uri
        try:
            at, found = await session.next_edits(uri)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("codeAction")
            return []
        if not found:
            return []
        edits = [T.TextEdit(T.Range(T.Position(i["range"]["start"]["line"], i["range"]["start"]["character"]),
                                    T.Position(i["range"]["end"]["line"], i["range"]["end"]["character"])),
                            i["text"]) for i in edit_items(uri, at, found)]
        change = T.TextDocumentEdit(T.OptionalVersionedTextDocumentIdentifier(uri=uri, version=at), edits)
        title = "Apply predicted edit" if len(edits) == 1 else f"Apply predicted edits ({len(edits)})"
        # (no command beside the edit: some clients then read the action as a bare Command)
        return [T.CodeAction(title=title, kind=T.CodeActionKind.QuickFix,
                             edit=T.WorkspaceEdit(document_changes=[change]))]

    @server.feature(STATS)
    def stats(ls: LanguageServer, params: Any) -> dict:
        return session.snapshot_stats()

    @server.feature(DID_SHOW)
    def did_show(ls: LanguageServer, params: Any) -> None:
        session.shown()

    @server.feature(DID_PARTIALLY_ACCEPT)
    def did_partially_accept(ls: LanguageServer, params: Any) -> None:
        session.partially_accepted()

    @server.command(ACCEPT_COMMAND)
    def accept(ls: LanguageServer, *args: Any) -> None:
        uri = args[0] if args and isinstance(args[0], str) else None
        session.accepted(uri)

    @server.feature(T.SHUTDOWN)
    def shutdown(ls: LanguageServer, params: Any) -> None:
        session.inference.shutdown()
        for h in client_log:
            logging.getLogger("redraft").removeHandler(h)

    return server


def _item(uri: str, p: Proposal) -> T.InlineCompletionItem:
    rng = T.Range(T.Position(p.row, p.start), T.Position(p.row, p.end))
    return T.InlineCompletionItem(insert_text=p.text, range=rng,
                                  command=T.Command(title="accept", command=ACCEPT_COMMAND, arguments=[uri]))
