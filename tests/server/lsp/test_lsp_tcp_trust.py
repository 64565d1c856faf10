"""`redraft serve --tcp`: only the client holding the token gets a session, one at a time.

Every other local process, and every web page that can reach the loopback port, may connect:
a second connection is refused while the editor is connected (and never sees its documents
or takes its replies), a browser-shaped POST or any header that is not LSP closes the
connection before a byte of it is read as a message, an `initialize` without the right token
gets an error reply, and a token file others can read is refused. Real `redraft serve`
processes on 127.0.0.1 with the tiny model; the editor's requests are answered with the
document it sent and model runs throughout.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

aio = pytest.mark.asyncio(loop_scope="module")  # the CLI tests below are plain functions

SERVE = [sys.executable, "-m", "redraft.server.cli", "serve"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TOKEN = "tcp-trust-7c1f0e9d2b"
SECRET_TEXT = 'API_KEY = "sk-secret-5e6f7a8b"\nvalue = \n'
URI = "file:///work/editor.py"
OPTIONS = {"lineTokens": 6, "blockTokens": 10, "contextTokens": 256, "maxTime": 60_000}  # as lsp_helpers
WAIT = 30.0  # seconds for any one answer: a loaded 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def frame(obj: dict) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Peer:
    """A raw LSP connection: the editor when it sends the token, an intruder otherwise."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.notes: list[dict] = []  # notifications the server sent
        self.next_id = 0

    @classmethod
    async def connect(cls, port: int) -> "Peer":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    def send(self, obj: dict) -> None:
        self.writer.write(frame(obj))

    def notify(self, method: str, params) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def read(self) -> dict | None:
        """The next message; None when the server closed the connection."""
        length = None
        while True:
            line = await asyncio.wait_for(self.reader.readline(), WAIT)
            if not line:
                return None
            if line == b"\r\n":
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return json.loads(await self.reader.readexactly(length))

    async def request(self, method: str, params) -> dict:
        """The server's reply (result or error) to one request."""
        self.next_id += 1
        rid = self.next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            msg = await self.read()
            assert msg is not None, f"the server closed the connection instead of answering {method}"
            if msg.get("id") == rid and "method" not in msg:
                return msg
            self.notes.append(msg)

    async def closed(self) -> bytes:
        """Everything the server sent until it closed the connection (it must close it; a
        reset, for a connection closed with bytes it never read, is a close too)."""
        got = b""
        try:
            while chunk := await asyncio.wait_for(self.reader.read(65536), WAIT):
                got += chunk
        except ConnectionResetError:
            pass
        return got

    def logs(self) -> list[str]:
        return [n["params"]["message"] for n in self.notes if n.get("method") == "window/logMessage"]

    def close(self) -> None:
        self.writer.close()


async def editor(port: int, token: str = TOKEN, **options) -> Peer:
    """A client that initializes with the token (retried while the previous one is leaving)."""
    for _ in range(100):
        peer = await Peer.connect(port)
        peer.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "processId": None, "rootUri": None, "capabilities": {},
            "initializationOptions": {"token": token, **OPTIONS, **options}}})
        reply = await peer.read()
        if reply is not None:
            assert "result" in reply, reply
            peer.notify("initialized", {})
            return peer
        peer.close()  # refused: the last client's session is still closing
        await asyncio.sleep(0.1)
    raise AssertionError("the server never took a client")


async def leave(peer: Peer) -> None:
    """shutdown and exit, as an editor leaves; the server closes the connection."""
    assert "result" in await peer.request("shutdown", None)
    peer.notify("exit", None)
    await peer.closed()
    peer.close()


async def stats(peer: Peer) -> dict:
    return (await peer.request("redraft/stats", {}))["result"]


async def loaded(peer: Peer) -> dict:
    s = await stats(peer)
    for _ in range(int(WAIT / 0.05)):
        if s["model_state"] != "loading":
            break
        await asyncio.sleep(0.05)
        s = await stats(peer)
    assert s["model_state"] == "ready", s
    return s


async def completes_locally(peer: Peer, uri: str = URI) -> dict:
    """A completion that runs the local model (not a remote engine, not an error)."""
    before = await stats(peer)
    reply = await peer.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": 1, "character": 8}, "context": {"triggerKind": 2}})
    assert "items" in reply["result"], reply
    after = await stats(peer)
    assert after["requests"] == before["requests"] + 1 and after["model_runs"] == before["model_runs"] + 1
    assert after["remote"] is None and after["remote_fallbacks"] == 0 and after["errors"] == 0
    return after


def open_doc(peer: Peer, uri: str = URI, text: str = SECRET_TEXT) -> None:
    peer.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                          "text": text}})


async def document(peer: Peer, uri: str = URI) -> dict:
    return (await peer.request("redraft/document", {"uri": uri}))["result"]


class Served:
    """A `redraft serve --tcp` process and its stderr."""

    def __init__(self, args: list[str], env: dict, tmp: Path):
        self.port = free_port()
        self.err_path = tmp / f"serve-{self.port}.err"
        self.proc = subprocess.Popen([*SERVE, "--tcp", str(self.port), *args], env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.err_path.open("w"))
        deadline = time.monotonic() + 60
        while "LSP on 127.0.0.1" not in self.stderr():
            assert self.proc.poll() is None, self.stderr()
            assert time.monotonic() < deadline, "the server did not start listening"
            time.sleep(0.05)

    def stderr(self) -> str:
        return self.err_path.read_text()

    async def logged(self, text: str) -> str:
        """The server's stderr once it holds `text`."""
        for _ in range(int(WAIT / 0.05)):
            if text in self.stderr():
                break
            await asyncio.sleep(0.05)
        assert text in self.stderr(), self.stderr()[-2000:]
        return self.stderr()

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


def token_file(tmp: Path, name: str, token: str, mode: int) -> Path:
    path = tmp / name
    path.write_text(token + "\n")
    path.chmod(mode)
    return path


@pytest.fixture(scope="module")
def served(tiny_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tcp")
    path = token_file(tmp, "token", TOKEN, 0o600)
    s = Served(["--model", str(tiny_model), "--dtype", "float32", "--token-file", str(path)], ENV, tmp)
    yield s
    s.stop()


@aio
async def test_chosen_token_is_not_printed_nor_on_the_command_line(served: Served):
    assert "clients send the token in initializationOptions.token" in served.stderr()
    assert TOKEN not in served.stderr()
    assert TOKEN.encode() not in Path(f"/proc/{served.proc.pid}/cmdline").read_bytes()


@aio
async def test_second_connection_is_refused_and_the_editor_keeps_its_session(served: Served):
    ed = await editor(served.port)
    await loaded(ed)
    open_doc(ed)
    assert (await document(ed))["text"] == SECRET_TEXT
    intruder = await Peer.connect(served.port)  # no initialize: asks for the editor's document
    intruder.writer.write(frame({"jsonrpc": "2.0", "id": "x", "method": "redraft/document", "params": {"uri": URI}}))
    got = await intruder.closed()
    assert got == b""  # closed without a reply: nothing of the editor's document
    twin = await Peer.connect(served.port)  # even with the token: one client at a time
    twin.writer.write(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "processId": None, "capabilities": {}, "initializationOptions": {"token": TOKEN}}}))
    assert await twin.closed() == b""
    log = await served.logged("a client (127.0.0.1:")
    assert log.count("refused an LSP connection from") >= 2
    # The editor's replies still come to the editor, with its document's real text.
    assert await document(ed) == {"uri": URI, "version": 1, "text": SECRET_TEXT}
    s = await completes_locally(ed)
    assert s["documents"] == 1
    assert any("one at a time" in m for m in ed.logs())  # the editor was told of the refusals
    await leave(ed)
    # After the editor left: a fresh session, which knows nothing of the last one's documents.
    nosy = await Peer.connect(served.port)
    nosy.writer.write(frame({"jsonrpc": "2.0", "id": "y", "method": "redraft/document", "params": {"uri": URI}}))
    reply = json.loads((await nosy.closed()).split(b"\r\n\r\n", 1)[1])
    assert reply["error"]["code"] == -32002 and "first message must be initialize" in reply["error"]["message"]
    ed2 = await editor(served.port)
    assert await document(ed2) == {}
    assert (await stats(ed2))["documents"] == 0
    await leave(ed2)


BROWSER_BODY = json.dumps({"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration",
                           "params": {"settings": {"engineUrl": "http://127.0.0.1:9/"}}})

# (what a hostile peer sends, the log line the server writes as it closes the connection)
PROBES = {
    "browser POST": (("POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://evil.example\r\n"
                      "Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(BROWSER_BODY), BROWSER_BODY)
                      ).encode(), "not an LSP header: b'POST / HTTP/1.1\\r\\n'"),
    "Origin after Content-Length": (b"Content-Length: %d\r\nOrigin: https://evil.example\r\n\r\n%s"
                                    % (len(BROWSER_BODY), BROWSER_BODY.encode()),
                                    "not an LSP header: b'Origin: https://evil.example\\r\\n'"),
    "Host header": (b"Host: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}", "not an LSP header: b'Host: 127.0.0.1"),
    "foreign Content-Type": (b"Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}",
                             "not an LSP header: b'Content-Type: text/plain"),
    "long header line": (b"Content-Length: 2" + b" " * 4000 + b"\r\n\r\n{}", "a header line of 4019 bytes"),
    "endless header lines": (b"Content-Type: application/vscode-jsonrpc\r\n" * 50, "more than 4 header lines"),
    "huge Content-Length": (b"Content-Length: 999999999\r\n\r\n{", "a message of 999999999 bytes (at most 1048576)"),
    "bare newlines": (b"Content-Length: 2\n\n{}", "not an LSP header: b'Content-Length: 2\\n"),
}


@aio
@pytest.mark.parametrize("probe", list(PROBES))
async def test_what_is_not_lsp_closes_the_connection_and_changes_nothing(served: Served, probe: str):
    sent, line = PROBES[probe]
    peer = await Peer.connect(served.port)
    peer.writer.write(sent)
    got = await peer.closed()
    assert got == b""  # no reply: not one byte of it was taken for a message
    await served.logged(line)
    ed = await editor(served.port)
    open_doc(ed)
    s = await completes_locally(ed)  # the engine is still the local model: no engineUrl switched
    assert s["model"] == "redraft" and s["remote"] is None
    assert served.rss_mb() < 1024
    await leave(ed)


@aio
async def test_browser_post_while_the_editor_is_connected(served: Served):
    ed = await editor(served.port)
    open_doc(ed)
    peer = await Peer.connect(served.port)
    peer.writer.write(PROBES["browser POST"][0])
    assert await peer.closed() == b""
    assert await document(ed) == {"uri": URI, "version": 1, "text": SECRET_TEXT}
    await completes_locally(ed)
    await leave(ed)


@aio
@pytest.mark.parametrize("options,why", [
    ({"token": "not-the-token"}, "wrong"),
    ({}, "missing"),
    ({"token": 12345}, "not a string"),
    ({"token": TOKEN[:-1]}, "a prefix"),
])
async def test_initialize_without_the_right_token_is_refused(served: Served, options, why):
    peer = await Peer.connect(served.port)
    peer.send({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {
        "processId": None, "capabilities": {}, "initializationOptions": options}})
    reply = await peer.read()
    assert reply["id"] == 7 and reply["error"]["code"] == -32001, why
    assert "missing or wrong token" in reply["error"]["message"]
    assert "initializationOptions.token" in reply["error"]["message"]
    assert await peer.closed() == b""  # and then the connection closes
    await served.logged("initialize without the right token")


@aio
async def test_messages_before_initialize_are_refused(served: Served):
    peer = await Peer.connect(served.port)  # a notification first: closed without a reply
    peer.send({"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration",
               "params": {"settings": {"engineUrl": "http://127.0.0.1:9/"}}})
    assert await peer.closed() == b""
    await served.logged("the first message is 'workspace/didChangeConfiguration', not initialize")
    ed = await editor(served.port)
    open_doc(ed)
    await completes_locally(ed)
    await leave(ed)


@aio
async def test_idle_connections_cannot_lock_the_editor_out(served: Served):
    idle = [await Peer.connect(served.port) for _ in range(12)]  # connect, say nothing
    ed = await editor(served.port)
    open_doc(ed)
    assert (await document(ed))["text"] == SECRET_TEXT
    dropped = 0
    for peer in idle[:4]:  # the oldest were dropped to make room
        assert await peer.closed() == b""
        dropped += 1
    assert dropped == 4
    await served.logged("the oldest is dropped")
    await leave(ed)
    for peer in idle:
        peer.close()


@aio
async def test_token_in_initialize_is_kept_out_of_settings(served: Served):
    ed = await editor(served.port)
    await stats(ed)
    assert not any("token" in m for m in ed.logs())  # not an "unknown setting 'token'"
    await leave(ed)


def run_serve(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*SERVE, *args], capture_output=True, text=True, timeout=120, env=env or ENV)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_token_file_readable_by_others_is_refused(tmp_path, mode):
    path = token_file(tmp_path, "token", TOKEN, mode)
    for args in (["--tcp", str(free_port())], ["--http", str(free_port())]):
        out = run_serve([*args, "--token-file", str(path)])
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert f"--token-file {path}: readable by others (mode {mode:04o}); run `chmod 600 {path}`" in out.stderr
        assert TOKEN not in out.stderr


def test_engine_token_file_readable_by_others_is_refused(tmp_path):
    path = token_file(tmp_path, "engine", TOKEN, 0o644)
    out = run_serve(["--engine-url", "http://127.0.0.1:9", "--engine-token-file", str(path)])
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"--engine-token-file {path}: readable by others (mode 0644)" in out.stderr


@pytest.mark.parametrize("args,message", [
    (["--token", "a", "--token-file", "{path}"], "--token and --token-file: give one"),
    (["--token-file", "{path}"], "--token and --token-file apply to the HTTP API (--http) and LSP over TCP"),
    (["--tcp", "{port}", "--token-file", "{missing}"], "cannot read it (No such file or directory)"),
    (["--tcp", "{port}", "--token-file", "{empty}"], ": empty"),
    (["--engine-token-file", "{path}"], "--engine-token-file applies to a remote engine"),
])
def test_token_option_mistakes(tmp_path, args, message):
    names = {"path": token_file(tmp_path, "token", TOKEN, 0o600), "missing": tmp_path / "nope",
             "empty": token_file(tmp_path, "empty", "", 0o400), "port": free_port()}
    out = run_serve([a.format(**names) for a in args])
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


@aio
async def test_generated_token_is_printed_once_and_required(tiny_model, tmp_path):
    env = {k: v for k, v in ENV.items() if k not in ("REDRAFT_TOKEN",)}
    s = Served(["--model", str(tiny_model), "--dtype", "float32"], env, tmp_path)
    try:
        found = re.findall(r"initializationOptions\.token \(new each start; --token-file or REDRAFT_TOKEN chooses "
                           r"one\): (\S+)", s.stderr())
        assert len(found) == 1 and len(found[0]) >= 40
        token = found[0]
        assert token.encode() not in Path(f"/proc/{s.proc.pid}/cmdline").read_bytes()
        peer = await Peer.connect(s.port)
        peer.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "processId": None, "capabilities": {}, "initializationOptions": {"token": TOKEN}}})
        assert (await peer.read())["error"]["code"] == -32001
        ed = await editor(s.port, token=token)
        await loaded(ed)
        open_doc(ed)
        await completes_locally(ed)
        await leave(ed)
        assert s.stderr().count(token) == 1
    finally:
        s.stop()


@aio
async def test_environment_token(tiny_model, tmp_path):
    s = Served(["--model", str(tiny_model), "--dtype", "float32"], {**ENV, "REDRAFT_TOKEN": "from-env-31337"},
               tmp_path)
    try:
        assert "from-env-31337" not in s.stderr()
        ed = await editor(s.port, token="from-env-31337")
        assert (await stats(ed))["errors"] == 0
        await leave(ed)
    finally:
        s.stop()


class _Engine(BaseHTTPRequestHandler):
    """A remote engine that only records who asked (every request answers 503)."""

    seen: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.seen.append(self.headers.get("Authorization") or "")
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@aio
async def test_engine_token_is_its_own(tmp_path):
    """The engine's token (a file, or REDRAFT_ENGINE_TOKEN) goes to the engine; the clients'
    token is another one, which the engine never sees."""
    engine = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{engine.server_address[1]}"
    _Engine.seen.clear()
    engine_file = token_file(tmp_path, "engine", "engine-secret-4d4d", 0o400)
    client_file = token_file(tmp_path, "client", TOKEN, 0o600)
    s = Served(["--engine-url", url, "--engine-token-file", str(engine_file), "--token-file", str(client_file)],
               ENV, tmp_path)
    try:
        for _ in range(int(WAIT / 0.05)):
            if _Engine.seen:
                break
            await asyncio.sleep(0.05)
        assert _Engine.seen and set(_Engine.seen) == {"Bearer engine-secret-4d4d"}
        ed = await editor(s.port)
        assert (await stats(ed))["remote"]["url"] == url
        await leave(ed)
        assert "engine-secret-4d4d" not in s.stderr()
    finally:
        s.stop()
        engine.shutdown()
