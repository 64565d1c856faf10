"""The LSP front: `build_server(...)` makes a pygls 2 server whose handlers are thin.

Each handler converts LSP params to the Session's terms, calls it, and converts back.
Every handler, request or notification, runs inside one boundary (`guarded`): an error is
logged, counted per method (`redraft/stats`: `errors`, `errors_by_method`) and answered
with the protocol's empty result; cancellation is not an error (`$/cancelRequest` ends a
request with -32800). The wire below the handlers is protocol.py.

Custom surface: `redraft/stats` and `redraft/document` ({uri} -> {uri, version, text}, or
{} for a document that is not open) (requests), Copilot's `textDocument/didShowCompletion`
and `textDocument/didPartiallyAcceptCompletion` (notifications), the accept command
`redraft.accept` through `workspace/executeCommand`, `redraft/preview` notifications (the
engine's text after every denoising step, for clients that set `streamPreviews`), and
`$/progress` while the model loads (clients with `window.workDoneProgress`), one
window/showMessage when a remote engine (`--engine-url`) stops answering and one when it
answers again (completions come from drafts meanwhile), and next-edit
suggestions: Copilot's `textDocument/copilotInlineEdit` (+ `textDocument/didShowInlineEdit`
and the `redraft.acceptEdit` command) and, for every other client, a quick-fix code action
applying the same edits, always for the document version they were computed on.

Start-up: the configured model starts loading as the server starts serving, before
`initialize` arrives (`initializationOptions` naming another model switch to it; the first
load is then dropped unused). Until the first load settles, completions come from drafts at
once (`redraft/stats`: `model_state` "loading", `answered_loading`), and this module imports
no torch: the engine's thread imports it while the event loop already answers.

Over TCP (`start_tcp`, transport.py), a client is served only after it sends the token in
`initialize`, one at a time, each by a server of its own over the one Inference
(`end_session` forgets its documents when it leaves).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, Callable

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer

from ..core.document import utf16_len
from ..core.inference import Inference
from ..core.nextedit import LineEdit
from ..core.settings import ServerConfig
from .protocol import ClientLog, RedraftProtocol, as_plain
from .session import InlineAnswer, Session

log = logging.getLogger(__name__)

NAME = "redraft"
ACCEPT_COMMAND = "redraft.accept"
STATS = "redraft/stats"
DOCUMENT = "redraft/document"  # the server's copy of a document, for checking it against the client's
DID_SHOW = "textDocument/didShowCompletion"
DID_PARTIALLY_ACCEPT = "textDocument/didPartiallyAcceptCompletion"
INLINE_EDIT = "textDocument/copilotInlineEdit"  # Copilot's next-edit suggestions (NES)
DID_SHOW_EDIT = "textDocument/didShowInlineEdit"
ACCEPT_EDIT_COMMAND = "redraft.acceptEdit"


def guarded(session: Session, method: str, empty: Callable[[], Any] = lambda: None):
    """The one boundary of every handler: an exception is logged, counted for `method` and
    answered with `empty()`; cancellation passes through (it is not an error). It also notes
    when the client was last heard from (`session.heard`, as a handler starts and ends)."""
    def wrap(handler):
        if asyncio.iscoroutinefunction(handler):
            @functools.wraps(handler)
            async def run_async(*args):
                session.heard = time.monotonic()
                try:
                    return await handler(*args)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    return _failed(session, method, empty)
                finally:
                    session.heard = time.monotonic()
            return run_async

        @functools.wraps(handler)
        def run(*args):
            session.heard = time.monotonic()
            try:
                return handler(*args)
            except Exception:
                return _failed(session, method, empty)
            finally:
                session.heard = time.monotonic()
        return run
    return wrap


def _failed(session: Session, method: str, empty: Callable[[], Any]) -> Any:
    log.exception("%s failed", method)
    session.stats.count_error(method)
    return empty()


# The first load waits, before it imports torch, until `initialize` is answered and the client
# has sent nothing for START_QUIET seconds (START_WAIT_MAX at most): importing torch holds the
# interpreter for up to half a second at a time (its shared libraries load under the GIL), and
# beside it an editor's start-up messages waited. Measured on the 2-core development machine
# (busy): the first completion after didOpen answered from drafts in 75 ms alone, 565 ms beside
# the import; a client there took over 0.1 s to follow `initialize` with didOpen.
START_QUIET = 0.25
START_WAIT_MAX = 0.5


class _Loader:
    """The model load and what the client is told about it: one message for problems,
    `$/progress` while it runs (once the client is initialized and supports it)."""

    def __init__(self, server: LanguageServer, session: Session):
        self.server, self.session = server, session
        self.loading = None  # the newest load (a Future)
        self.watched = None  # the load whose outcome the client is told
        self.answered_initialize = False
        self.initialized = False
        self.loop: asyncio.AbstractEventLoop | None = None  # once `initialize` arrives
        self.health: tuple[bool, str] | None = None  # a remote engine's news, kept until the client can hear it
        self.told_down = False  # the client was told of the remote engine's outage

    def message(self, text: str, kind: T.MessageType = T.MessageType.Warning, logged: bool = False) -> None:
        """One window/showMessage; also one line in the log (which ClientLog forwards to the
        client's) unless whoever found the problem `logged` it already."""
        if not logged:
            log.warning("%s", text)
        try:
            self.server.window_show_message(T.ShowMessageParams(type=kind, message=f"redraft: {text}"))
        except Exception:  # no transport yet (or gone): the log line is enough
            pass

    def preload(self) -> None:
        """Start loading the configured model now, before `initialize` (no event loop yet)."""
        self.loading = self.session.load_model(wait=self._start_up_quiet)

    def _start_up_quiet(self) -> None:
        """Until the client's start-up messages are answered (on the executor, before the load)."""
        start = time.monotonic()
        while time.monotonic() - start < START_WAIT_MAX:
            if self.answered_initialize and time.monotonic() - self.session.heard >= START_QUIET:
                return
            time.sleep(0.01)

    def apply_settings(self, options: Any, load: bool = False) -> None:
        problems, changed = self.session.configure(as_plain(options))
        if problems:  # one message for all of them, defaults kept
            self.message("invalid settings, defaults kept: " + "; ".join(problems))
        if changed or (load and self.loading is None):
            self.watch(self.session.load_model())
        elif load:  # `initialize` asks for the model loading since the server started
            self.watch(self.loading)

    def watch(self, load) -> None:
        loop = asyncio.get_running_loop()
        self.loading = load
        if load is self.watched:  # the same load asked for again: its outcome is told once
            return
        self.watched = load

        def done(f):  # runs on the inference thread: hand the message to the loop
            error = None if f.cancelled() else f.result()
            if error:  # Inference logged it when it failed: the client's log has it already
                loop.call_soon_threadsafe(self.message, error, T.MessageType.Error, True)
        load.add_done_callback(done)
        if self.initialized:
            loop.create_task(self.report_progress(load))

    def on_initialized(self) -> None:
        self.initialized = True
        if self.loading is not None:
            asyncio.get_running_loop().create_task(self.report_progress(self.loading))
        if self.health is not None:
            self._tell_health(*self.health)

    def remote_health(self, up: bool, why: str) -> None:
        """A remote engine's outage began (up False) or ended (from the engine's thread): one
        message each, once the client can hear it."""
        loop = self.loop
        if loop is None:
            self.health = (up, why)
            return
        try:
            loop.call_soon_threadsafe(self._tell_health, up, why)
        except RuntimeError:  # the loop has closed: the server is going
            pass

    def _tell_health(self, up: bool, why: str) -> None:
        if not self.initialized:
            self.health = (up, why)
            return
        self.health = None
        if not up:
            self.session.stats.remote_outages += 1
            self.told_down = True
            self.message(f"{why}; answering from drafts until it is back")
        elif self.told_down:
            self.told_down = False
            self.message("the remote engine answers again", T.MessageType.Info)

    async def report_progress(self, load) -> None:
        """`$/progress` (server-initiated) while the model loads, when the client supports it."""
        server = self.server
        caps = getattr(server.client_capabilities, "window", None)
        if load.done() or not getattr(caps, "work_done_progress", False):
            return
        token = f"redraft/load/{id(load)}"
        try:
            await server.work_done_progress.create_async(token)
            server.work_done_progress.begin(token, T.WorkDoneProgressBegin(
                title="redraft", message=f"loading {self.session.config.model or 'the default model'}"))
            await asyncio.wrap_future(load)
        except Exception:  # the client declined the token, or the load failed (reported elsewhere)
            log.debug("progress", exc_info=True)
        finally:
            if token in server.work_done_progress.tokens:
                server.work_done_progress.end(token, T.WorkDoneProgressEnd(message="ready"))


class RedraftServer(LanguageServer):
    """pygls' server, whose model starts loading the moment it starts serving."""

    loader: _Loader
    session: Session
    owns_inference = True  # `shutdown` stops the engine's executor (not when sessions share it)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.client_logs: list[ClientLog] = []  # the log handlers forwarding to this client

    def start_io(self, *args, **kwargs):
        self.loader.preload()
        return super().start_io(*args, **kwargs)

    def start_tcp(self, host: str, port: int, token: str | None = None, started=None) -> None:
        """LSP on host:port until interrupted: one client at a time, each after sending `token`
        in `initialize`, each in a fresh session over this server's Inference (transport.py;
        pygls' own TCP server shares one session among all connections). This server serves
        the first client; `started(listener)` is called once it listens."""
        from .transport import TcpFront
        if not token:
            raise ValueError("LSP over TCP needs a token")
        config, inference = self.session.config, self.session.inference
        self.owns_inference = False

        def fresh() -> RedraftServer:
            server = build_server(config, inference)
            server.owns_inference = False
            return server
        self.loader.preload()
        try:
            asyncio.run(TcpFront(self, fresh, token).serve(host, port, started))
        finally:
            inference.shutdown()

    def end_session(self) -> None:
        """The client has gone (TCP): its documents are forgotten (the engine's keys/values
        too), and nothing more is sent or logged to it."""
        for h in self.client_logs:
            logging.getLogger("redraft").removeHandler(h)
        self.client_logs.clear()
        self.session.publish = None
        for uri in list(self.session.docs):
            self.session.close(uri)
        self.session.excluded.clear()
        if self.session.workspace is not None:  # its indexing thread stops with it
            self.session.workspace.close()
            self.session.workspace = None


def build_server(config: ServerConfig | None = None, inference: Inference | None = None) -> RedraftServer:
    """A ready-to-start server; the model starts loading in the background when it starts
    serving. Pass an `inference` to share its engine (one model in memory) with the HTTP front
    (a load it has under way for the same model is joined, not repeated)."""
    server = RedraftServer(NAME, "0.1.0", protocol_cls=RedraftProtocol,
                           text_document_sync_kind=T.TextDocumentSyncKind.Incremental)
    session = Session(config or ServerConfig(), inference or Inference())
    server.session = session  # for tests and embedding; handlers close over it
    server.loader = loader = _Loader(server, session)
    session.inference.on_remote = loader.remote_health
    _lifecycle(server, session, loader)
    _documents(server, session)
    _completions(server, session)
    _next_edits(server, session)
    return server


def _lifecycle(server: RedraftServer, session: Session, loader: _Loader) -> None:
    client_log = server.client_logs

    @server.feature(T.INITIALIZE)
    @guarded(session, T.INITIALIZE)
    def initialize(ls: LanguageServer, params: T.InitializeParams) -> None:
        loader.loop = asyncio.get_running_loop()
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
        # the model loads in the background (since the server started, unless the options name
        # another); until the first load settles, drafts answer
        loader.apply_settings(params.initialization_options, load=True)
        folders = [f.uri for f in params.workspace_folders or []]
        session.set_roots(folders or [params.root_uri or params.root_path or ""])
        loader.answered_initialize = True

    @server.feature(T.INITIALIZED)
    @guarded(session, T.INITIALIZED)
    def on_initialized(ls: LanguageServer, params: T.InitializedParams) -> None:
        loader.on_initialized()

    @server.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)
    @guarded(session, T.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: LanguageServer, params: T.DidChangeConfigurationParams) -> None:
        loader.apply_settings(params.settings)

    @server.feature(T.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    @guarded(session, T.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_workspace_folders(ls: LanguageServer, params: T.DidChangeWorkspaceFoldersParams) -> None:
        # one server for every project an editor has open (Neovim adds each new root here)
        session.change_roots([f.uri for f in params.event.added or []], [f.uri for f in params.event.removed or []])

    @server.feature(STATS)
    @guarded(session, STATS, dict)
    def stats(ls: LanguageServer, params: Any) -> dict:
        return session.snapshot_stats()

    @server.feature(DOCUMENT)
    @guarded(session, DOCUMENT, dict)
    def document(ls: LanguageServer, params: Any) -> dict:
        p = as_plain(params)
        uri = p.get("uri") if isinstance(p, dict) else None
        return session.document(uri) if isinstance(uri, str) else {}

    @server.feature(T.SHUTDOWN)
    @guarded(session, T.SHUTDOWN)
    def shutdown(ls: LanguageServer, params: Any) -> None:
        if server.owns_inference:
            session.inference.shutdown()
        for h in client_log:
            logging.getLogger("redraft").removeHandler(h)


def _documents(server: LanguageServer, session: Session) -> None:
    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    @guarded(session, T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LanguageServer, params: T.DidOpenTextDocumentParams) -> None:
        d = params.text_document
        session.open(d.uri, d.text, d.version, d.language_id)

    @server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    @guarded(session, T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LanguageServer, params: T.DidChangeTextDocumentParams) -> None:
        changes = []
        for c in params.content_changes:
            r = getattr(c, "range", None)
            rng = None if r is None else (r.start.line, r.start.character, r.end.line, r.end.character)
            changes.append((rng, c.text))
        session.change(params.text_document.uri, params.text_document.version, changes)

    @server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    @guarded(session, T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: LanguageServer, params: T.DidCloseTextDocumentParams) -> None:
        session.close(params.text_document.uri)


def _completions(server: LanguageServer, session: Session) -> None:
    @server.feature(T.TEXT_DOCUMENT_INLINE_COMPLETION, T.InlineCompletionOptions())
    @guarded(session, T.TEXT_DOCUMENT_INLINE_COMPLETION, lambda: T.InlineCompletionList(items=[]))
    async def inline_completion(ls: LanguageServer, params: T.InlineCompletionParams) -> T.InlineCompletionList:
        uri, pos = params.text_document.uri, params.position
        answer = await session.inline_completion(uri, pos.line, pos.character)
        return T.InlineCompletionList(items=[] if answer is None else [_item(uri, answer)])

    @server.feature(DID_SHOW)
    @guarded(session, DID_SHOW)
    def did_show(ls: LanguageServer, params: Any) -> None:
        session.shown()

    @server.feature(DID_PARTIALLY_ACCEPT)
    @guarded(session, DID_PARTIALLY_ACCEPT)
    def did_partially_accept(ls: LanguageServer, params: Any) -> None:
        session.partially_accepted()

    @server.command(ACCEPT_COMMAND)
    @guarded(session, ACCEPT_COMMAND)
    def accept(ls: LanguageServer, *args: Any) -> None:
        uri = args[0] if args and isinstance(args[0], str) else None
        session.accepted(uri)


def _next_edits(server: LanguageServer, session: Session) -> None:
    @server.feature(INLINE_EDIT)
    @guarded(session, INLINE_EDIT, lambda: {"edits": []})
    async def inline_edit(ls: LanguageServer, params: Any) -> dict:
        """Copilot's next-edit request: the edits the newest edit implies, for this version only."""
        p = as_plain(params)
        doc = (p.get("textDocument") or p.get("text_document") or {}) if isinstance(p, dict) else {}
        uri, version = doc.get("uri"), doc.get("version")
        if not isinstance(uri, str):
            return {"edits": []}
        at, found = await session.next_edits(uri, version if isinstance(version, int) else None)
        return {"edits": [_edit_item(uri, at, e) for e in found]}

    @server.feature(DID_SHOW_EDIT)
    @guarded(session, DID_SHOW_EDIT)
    def did_show_edit(ls: LanguageServer, params: Any) -> None:
        session.stats.edits_shown += 1

    @server.command(ACCEPT_EDIT_COMMAND)
    @guarded(session, ACCEPT_EDIT_COMMAND)
    def accept_edit(ls: LanguageServer, *args: Any) -> None:
        session.stats.edits_accepted += 1

    @server.feature(T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.QuickFix]))
    @guarded(session, T.TEXT_DOCUMENT_CODE_ACTION, list)
    async def code_action(ls: LanguageServer, params: T.CodeActionParams) -> list[T.CodeAction]:
        """The same predicted edits for clients without Copilot's request: one action applying all."""
        uri = params.text_document.uri
        at, found = await session.next_edits(uri)
        return _code_actions(uri, at, found)


def _item(uri: str, answer: InlineAnswer) -> T.InlineCompletionItem:
    rng = T.Range(T.Position(answer.row, answer.start), T.Position(answer.row, answer.end))
    return T.InlineCompletionItem(insert_text=answer.text, range=rng,
                                  command=T.Command(title="accept", command=ACCEPT_COMMAND, arguments=[uri]))


def _edit_range(e: LineEdit) -> T.Range:
    """A next edit's range in UTF-16 columns (LineEdit counts characters)."""
    start, end = utf16_len(e.original[:e.start]), utf16_len(e.original[:e.end])
    return T.Range(T.Position(e.row, start), T.Position(e.row, end))


def _edit_item(uri: str, version: int, e: LineEdit) -> dict:
    """One edit of Copilot's `copilotInlineEdit` answer."""
    r = _edit_range(e)
    rng = {"start": {"line": r.start.line, "character": r.start.character},
           "end": {"line": r.end.line, "character": r.end.character}}
    return {"text": e.text, "range": rng, "textDocument": {"uri": uri, "version": version},
            "command": {"title": "accept", "command": ACCEPT_EDIT_COMMAND, "arguments": [uri]}}


def _code_actions(uri: str, version: int, found: list[LineEdit]) -> list[T.CodeAction]:
    if not found:
        return []
    edits = [T.TextEdit(_edit_range(e), e.text) for e in found]
    change = T.TextDocumentEdit(T.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits)
    title = "Apply predicted edit" if len(edits) == 1 else f"Apply predicted edits ({len(edits)})"
    # (no command beside the edit: some clients then read the action as a bare Command)
    return [T.CodeAction(title=title, kind=T.CodeActionKind.QuickFix, edit=T.WorkspaceEdit(document_changes=[change]))]
