"""LSP over TCP: one client at a time, each in a session of its own, after a token.

Any local process, and any web page (a `fetch()` to a loopback port), can open a TCP
connection to the server, so a connection earns nothing until it proves it was given the
token. pygls' own TCP server serves every connection from one protocol object (a second
connection reads the first one's documents and takes its replies) and reads any header line
it does not know as padding (a browser's `POST / HTTP/1.1` request goes through as LSP).
Here instead:

- Framing is strict (`read_message`): a message is header lines, each `Content-Length` or
  `Content-Type` (a JSON-RPC type), then an empty line and the body. Anything else (an HTTP
  request line, `Host:`, `Origin:`) closes the connection at once, with one log line. Header
  lines, their number and the body's length are bounded (MAX_BODY_UNTRUSTED before the token,
  MAX_BODY after), so no peer makes memory grow.
- The first message must be `initialize` carrying the token as `initializationOptions.token`,
  within AUTH_TIMEOUT seconds; it is compared in constant time. Anything else gets an error
  reply (for a request) and the connection closes. At most MAX_UNTRUSTED connections wait to
  prove themselves at once; a new one drops the oldest, so idle connections never lock the
  editor out (it sends `initialize` as it connects).
- One client at a time: while one is connected, another connection is closed with a log
  line (the connected client sees it in its log). Each client gets a fresh server (documents,
  settings, counters) over the process's one Inference; when it disconnects or sends `exit`,
  its documents are forgotten and the next client may connect.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from typing import Any, Callable

log = logging.getLogger(__name__)

HEADER_LINE_MAX = 1024  # bytes of one header line (`Content-Length: 67108864` is 26)
HEADER_LINES_MAX = 4
MAX_BODY_UNTRUSTED = 1 << 20  # bytes, before the token: an editor's `initialize` is ~10-30 KB
MAX_BODY = 64 << 20  # bytes, after: a 50 MB file (VS Code syncs none larger) and its JSON escapes
AUTH_TIMEOUT = 10.0  # seconds from connecting to a valid `initialize`
MAX_UNTRUSTED = 8  # connections waiting to send their `initialize`, at once (each holds < 1.1 MB)
STREAM_LIMIT = 64 << 10  # asyncio's readline buffer: the hard bound under HEADER_LINE_MAX

# JSON-RPC error codes of the refusals (LSP: -32002 is ServerNotInitialized)
NOT_INITIALIZED = -32002
UNAUTHORIZED = -32001
BUSY = -32000

_LENGTH = re.compile(rb"[0-9]{1,12}")
_JSONRPC_TYPE = re.compile(rb"application/(vscode-jsonrpc|json)\s*(;\s*charset\s*=\s*\"?utf-?8\"?\s*)?", re.I)
TOKEN_HINT = ("send the server's token as initializationOptions.token (`redraft serve --tcp` prints it "
              "on start, or reads it from --token-file / REDRAFT_TOKEN)")


class FramingError(Exception):
    """What a peer sent is not an LSP message (or is over a bound): the connection closes."""


async def read_message(reader: asyncio.StreamReader, max_body: int) -> bytes | None:
    """One message's body; None when the peer closed the connection between messages."""
    length = None
    for i in range(HEADER_LINES_MAX + 1):
        try:
            line = await reader.readline()
        except ValueError:  # over asyncio's buffer limit: far over ours
            raise FramingError("a header line over the limit") from None
        if not line:
            if i == 0:
                return None
            raise FramingError("the connection closed inside the headers")
        if len(line) > HEADER_LINE_MAX:
            raise FramingError(f"a header line of {len(line)} bytes (at most {HEADER_LINE_MAX})")
        if not line.endswith(b"\r\n"):
            raise FramingError(f"not an LSP header: {_shown(line)}")
        if line == b"\r\n":
            if length is None:
                raise FramingError("no Content-Length header" if i else "not an LSP header: an empty line")
            break
        if i == HEADER_LINES_MAX:
            raise FramingError(f"more than {HEADER_LINES_MAX} header lines")
        name, colon, value = line[:-2].partition(b":")
        name, value = name.lower(), value.strip()
        if colon and name == b"content-length" and length is None and _LENGTH.fullmatch(value):
            length = int(value)
        elif colon and name == b"content-type" and _JSONRPC_TYPE.fullmatch(value):
            pass
        else:
            raise FramingError(f"not an LSP header: {_shown(line)}")
    if length > max_body:
        raise FramingError(f"a message of {length} bytes (at most {max_body})")
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise FramingError("the connection closed inside a message") from None


def _shown(line: bytes) -> str:
    """A peer's bytes for the log: short, and never taken for anything but a repr."""
    return repr(line[:60]) + ("..." if len(line) > 60 else "")


def frame(payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" % len(body) + body


class _Gone:
    """The writer of a server whose client has gone: whatever it still sends is dropped."""

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


class TcpFront:
    """Accepts connections and gives the one trusted client its server.

    `first` serves the first client (the server whose model started loading with the
    process); `make()` builds a fresh one for each later client. Each server has
    `protocol`, `session` and `end_session()` (server.py's RedraftServer)."""

    def __init__(self, first: Any, make: Callable[[], Any], token: str):
        if not token:
            raise ValueError("LSP over TCP needs a token")
        self._next, self._make, self._token = first, make, token.encode("utf-8", "surrogatepass")
        self.client: str | None = None  # the trusted client's address, while one is connected
        self.untrusted: dict[asyncio.StreamWriter, str] = {}  # waiting to `initialize`, oldest first
        self.refused = 0

    async def serve(self, host: str, port: int, started: Callable[[Any], None] | None = None) -> None:
        listener = await asyncio.start_server(self._connection, host, port, limit=STREAM_LIMIT)
        if started is not None:
            started(listener)
        async with listener:
            await listener.serve_forever()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer(writer)
        try:
            if self.client is not None:
                self._refuse(peer, f"a client ({self.client}) is connected; one at a time")
                return
            if len(self.untrusted) >= MAX_UNTRUSTED:
                oldest, who = next(iter(self.untrusted.items()))
                self.untrusted.pop(oldest)
                oldest.transport.abort()
                self._refuse(who, f"{MAX_UNTRUSTED} connections waited to initialize; the oldest is dropped")
            self.untrusted[writer] = peer
            try:
                hello = await asyncio.wait_for(self._hello(reader, writer, peer), AUTH_TIMEOUT)
            except asyncio.TimeoutError:
                hello = None
                self._refuse(peer, f"no valid initialize within {AUTH_TIMEOUT:g} s")
            finally:
                self.untrusted.pop(writer, None)
            if hello is not None:
                await self._serve_client(reader, writer, peer, hello)
        except Exception:  # one connection's failure never stops the listener
            log.exception("LSP connection from %s failed", peer)
        finally:
            writer.close()

    def _refuse(self, peer: str, why: str) -> None:
        self.refused += 1
        log.warning("refused an LSP connection from %s: %s", peer, why)

    async def _hello(self, reader, writer, peer: str) -> bytes | None:
        """The body of a valid `initialize` with the right token, or None (refused, replied to)."""
        try:
            body = await read_message(reader, MAX_BODY_UNTRUSTED)
        except FramingError as e:
            if not writer.transport.is_closing():  # (one dropped for being the oldest was logged)
                self._refuse(peer, str(e))
            return None
        if body is None:
            return None
        if writer.transport.is_closing():  # dropped meanwhile (too many waiting)
            return None
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # not JSON (or not UTF-8, or nested beyond reason)
            self._refuse(peer, "the first message is not JSON")
            return None
        msg_id = data.get("id") if isinstance(data, dict) else None
        msg_id = msg_id if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool) else None
        if not isinstance(data, dict) or data.get("method") != "initialize" or msg_id is None:
            method = data.get("method") if isinstance(data, dict) else None
            what = f"{method!r}"[:60] if isinstance(method, str) else "something else"
            await _reply_error(writer, msg_id, NOT_INITIALIZED,
                               f"redraft: the first message must be initialize; {TOKEN_HINT}")
            self._refuse(peer, f"the first message is {what}, not initialize")
            return None
        params = data.get("params")
        options = params.get("initializationOptions") if isinstance(params, dict) else None
        given = options.get("token") if isinstance(options, dict) else None
        if not (isinstance(given, str) and hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self._token)):
            await _reply_error(writer, msg_id, UNAUTHORIZED, f"redraft: missing or wrong token; {TOKEN_HINT}")
            self._refuse(peer, "initialize without the right token")
            return None
        if self.client is not None:  # another connection proved itself first
            await _reply_error(writer, msg_id, BUSY, f"redraft: another client ({self.client}) is connected; "
                                                     f"one at a time")
            self._refuse(peer, f"a client ({self.client}) is connected; one at a time")
            return None
        self.client = peer  # claimed before the next await: a second one sees it
        return body

    async def _serve_client(self, reader, writer, peer: str, hello: bytes) -> None:
        try:
            server, self._next = self._next or self._make(), None
        except BaseException:
            self.client = None  # the slot is free again whatever happened
            raise
        protocol = server.protocol
        protocol.set_writer(writer)
        log.info("LSP client connected from %s", peer)
        body: bytes | None = hello
        why = "disconnected"
        try:
            while body is not None:
                try:
                    message = json.loads(body, object_hook=protocol.structure_message)
                except (ValueError, RecursionError) as e:
                    log.warning("an LSP message that is not JSON, ignored (%s)", str(e)[:80])
                    message = None
                if message is not None and body is hello:  # the token stays here: out of settings and logs
                    options = getattr(getattr(message, "params", None), "initialization_options", None)
                    if isinstance(options, dict):
                        options.pop("token", None)
                if getattr(message, "method", None) == "exit":
                    why = "sent exit"
                    break
                if message is not None:
                    try:
                        protocol.handle_message(message)
                    except Exception:  # the handlers' boundary caught theirs: this is pygls' own
                        log.exception("LSP message %s failed", getattr(message, "method", "(a response)"))
                try:
                    body = await read_message(reader, MAX_BODY)
                except FramingError as e:
                    why = f"closed: {e}"
                    log.warning("closed the LSP connection from %s: %s", peer, e)
                    break
                except ConnectionError:
                    break
        finally:
            protocol.set_writer(_Gone())
            server.end_session()
            self.client = None
            log.info("LSP client %s %s; waiting for the next one", peer, why)


async def _reply_error(writer: asyncio.StreamWriter, msg_id, code: int, message: str) -> None:
    """An error reply to a request (none for a notification), sent before the connection closes."""
    if msg_id is None:
        return
    try:
        writer.write(frame({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}))
        await asyncio.wait_for(writer.drain(), 2.0)
    except (ConnectionError, asyncio.TimeoutError):
        pass


def _peer(writer: asyncio.StreamWriter) -> str:
    addr = writer.get_extra_info("peername")
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr or "a local socket")
