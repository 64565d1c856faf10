"""A hostile remote engine for the tests: a raw asyncio HTTP server on a loopback port, on a
thread, that answers /info properly and then misbehaves as `mode` says:

  "line"     /infill: one `data:` line that never ends, as fast as the socket takes it
  "events"   /infill: small preview events without end, never a result
  "silent"   /infill: reads the request, never answers (not even headers)
  "gzip"     /infill: a gzip body of zeros that would expand a thousandfold
  "big-info" /info too: a JSON answer that never ends

It counts the requests it misbehaved on (`served`), those the client closed while it was still
sending (`left`), and the bytes it sent. Everything real: sockets, HTTP/1.1, no mocks."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading

from redraft.engine import SamplerConfig
from redraft.server.core import wire

INFO = {"protocol": 1, "name": "hostile", "parameters": 1, "dtype": "float32", "device": "cpu",
        "scores_edits": False, "context_limit": 2048, "context_overhead": 0,
        "sampler": wire.encode_sampler(SamplerConfig())}
CHUNK = b"x" * 65536
BOMB = gzip.compress(bytes(64 << 20), compresslevel=9)  # 64 MB of zeros in ~64 kB


class Hostile:
    def __init__(self, port: int = 0):
        self.mode = "line"
        self.served = self.left = self.sent = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def start():
            self.server = await asyncio.start_server(self._handle, "127.0.0.1", port)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()
        self.thread = threading.Thread(target=lambda: (self.loop.run_until_complete(start()), self.loop.run_forever()),
                                       daemon=True)
        self.thread.start()
        assert ready.wait(10), "the hostile engine did not start"
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # requests on a kept-alive connection
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                if b" /v1/redraft/engine/info " in head.split(b"\r\n")[0] and self.mode != "big-info":
                    body = json.dumps(INFO).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\n\r\n" % len(body) + body)
                    await writer.drain()
                    continue
                await self._misbehave(reader, writer)
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            self.left += 1
        finally:
            writer.close()

    async def _misbehave(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.served += 1
        if self.mode in ("silent", "gzip"):
            if self.mode == "gzip":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
                             b"content-length: %d\r\n\r\n" % len(BOMB) + BOMB)
                await writer.drain()
            await reader.read(1)  # b"" once the client has closed the connection
            raise ConnectionResetError("the client left")
        kind = b"application/json" if self.mode == "big-info" else b"text/event-stream"
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: " + kind + b"\r\nconnection: close\r\n\r\n")
        if self.mode == "line":
            writer.write(b"event: preview\ndata: ")
        elif self.mode == "big-info":
            writer.write(b'{"name": "')
        event = wire.sse("preview", {"request": 0, "step": 1, "text": "x" * 64, "masked": 1}).encode()
        left = asyncio.ensure_future(reader.read())  # b"" at the client's FIN (its window may be shut by then)
        while True:
            data = event * 256 if self.mode == "events" else CHUNK
            writer.write(data)
            self.sent += len(data)
            drained = asyncio.ensure_future(writer.drain())  # raises once the client has reset the connection
            await asyncio.wait({drained, left}, return_when=asyncio.FIRST_COMPLETED)
            if left.done():
                drained.cancel()
                writer.transport.abort()
                raise ConnectionResetError("the client left")
            drained.result()
