"""Hostile LSP traffic for the real server process, and the reference it is checked against.

Operations are plain tuples drawn by hypothesis strategies (`programs()`), so the test
(test_lsp_fuzz.py, a few hundred operations) and the benchmark (tests/bench/bench_fuzz.py,
10,000) replay the same kinds of traffic: edits with valid and invalid ranges, whole-text
replacements, versions out of order, huge / binary / long-line / surrogate-pair text,
completion and next-edit requests at valid and invalid positions, unknown methods,
malformed params, cancels of random ids, changes for documents never opened, close and
reopen. `Reference` replays the same edits on a plain string by the LSP rules the server
documents (positions past a line's end clamp to its end, past the last line to the end of
the text, a column inside a surrogate pair to the character after it, a reversed range is
swapped), so the server's copy of each document (`redraft/document`) can be compared.

Lone "\\r" is left out of generated text: the server splits lines at "\\n" only (a "\\r"
before it belongs to the line end), as editors normalise line ends before they send them.
"""

from __future__ import annotations

import asyncio
import itertools
import time

from hypothesis import strategies as st
from lsprotocol import types as T
from pygls.exceptions import JsonRpcException

from lsp_helpers import completion_params, plain, send_raw

URIS = ("file:///fuzz/a.py", "file:///fuzz/b.py", "file:///fuzz/c.txt")
NEVER_OPENED = "file:///fuzz/never.py"

# Text: code-ish ASCII, line ends, emoji (surrogate pairs in UTF-16), accents, NUL and control bytes.
_ALPHABET = st.sampled_from(list("abcxyz_ =():.,\"'#0123456789\t") + ["\n", "\n", "\r\n", "    ", "def ", "return ",
                                                                        "😀", "𝔘", "é", "中", "\x00", "\x1b"])
TEXT = st.lists(_ALPHABET, max_size=40).map("".join)
BIG = st.sampled_from(["huge", "long_line", "binary", "emoji"])

# A position: mostly near the text, sometimes far outside it.
POS = st.tuples(st.one_of(st.integers(0, 12), st.integers(13, 10_000)),
                st.one_of(st.integers(0, 30), st.integers(31, 100_000)))

OPS = st.one_of(
    st.tuples(st.just("edit"), POS, POS, TEXT),
    st.tuples(st.just("edit"), POS, POS, TEXT),
    st.tuples(st.just("edit"), POS, POS, TEXT),
    st.tuples(st.just("replace_all"), TEXT),
    st.tuples(st.just("big"), POS, BIG),
    st.tuples(st.just("old_version"), POS, TEXT),
    st.tuples(st.just("complete"), POS),
    st.tuples(st.just("complete"), POS),
    st.tuples(st.just("next_edit"), st.booleans()),
    st.tuples(st.just("code_action"), POS),
    st.tuples(st.just("unknown"), st.booleans()),
    st.tuples(st.just("malformed"), st.integers(0, 3)),
    st.tuples(st.just("cancel"), st.integers(-5, 10_000)),
    st.tuples(st.just("stranger"), TEXT),
    st.tuples(st.just("reopen"), TEXT),
)


def programs(min_ops: int = 20, max_ops: int = 40):
    """(document index, initial text, operations) for one document."""
    return st.tuples(st.integers(0, len(URIS) - 1), TEXT, st.lists(OPS, min_size=min_ops, max_size=max_ops))


def big_text(kind: str) -> str:
    if kind == "huge":  # ~200 kB of code
        return "".join(f"item_{i} = compute({i}, 'payload')\n" for i in range(6000))
    if kind == "long_line":
        return "x = [" + ", ".join(["1"] * 8000) + "]"
    if kind == "binary":
        return "\x00\x01\x02ELF\x7f\x00" * 500
    return "😀é中𝔘" * 2000


# -- the reference --------------------------------------------------------------------------

def _utf16_to_index(s: str, units: int) -> int:
    n = 0
    for i, ch in enumerate(s):
        if n >= units:
            return i
        n += 2 if ord(ch) > 0xFFFF else 1
    return len(s)


class Reference:
    """A document's text as the client holds it, edited by the rules the server documents."""

    def __init__(self, text: str):
        self.text = text

    def offset(self, line: int, col: int) -> int:
        lines = self.text.split("\n")
        if line >= len(lines):
            line = len(lines) - 1
            col = 1 << 60
        start = sum(len(s) + 1 for s in lines[:line])
        body = lines[line][:-1] if lines[line].endswith("\r") else lines[line]
        return start + _utf16_to_index(body, col)

    def edit(self, start: tuple[int, int], end: tuple[int, int], text: str) -> None:
        a, b = self.offset(*start), self.offset(*end)
        a, b = min(a, b), max(a, b)
        self.text = self.text[:a] + text + self.text[b:]


# -- running a program against the server ---------------------------------------------------

class Driver:
    """Sends one program's operations to a running client and keeps the reference texts."""

    def __init__(self, client, timeout: float = 30.0):
        self.client, self.timeout = client, timeout
        self.refs: dict[str, Reference] = {}
        self.versions: dict[str, int] = {}
        self.latencies: list[float] = []  # seconds from send to answer, per request
        self.unanswered = 0
        self.ids = itertools.count()

    def open(self, uri: str, text: str) -> None:
        self.refs[uri] = Reference(text)
        self.versions[uri] = 1
        self.client.text_document_did_open(T.DidOpenTextDocumentParams(
            T.TextDocumentItem(uri=uri, language_id="plaintext" if uri.endswith(".txt") else "python", version=1,
                               text=text)))

    def _change(self, uri: str, version: int, changes) -> None:
        self.client.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(uri=uri, version=version), changes))

    def _edit(self, uri: str, start, end, text: str, version: int | None = None) -> None:
        if version is None:
            self.versions[uri] += 1
            version = self.versions[uri]
        rng = T.Range(T.Position(*start), T.Position(*end))
        self._change(uri, version, [T.TextDocumentContentChangePartial(range=rng, text=text)])
        self.refs[uri].edit(start, end, text)

    async def _request(self, coro) -> object:
        t0 = time.perf_counter()
        try:
            out = await asyncio.wait_for(coro, self.timeout)
        except JsonRpcException as e:  # an answer too: an error response
            out = e
        except asyncio.TimeoutError:
            self.unanswered += 1
            return None
        self.latencies.append(time.perf_counter() - t0)
        return out

    async def run(self, uri: str, ops) -> None:
        for op in ops:
            await self.step(uri, op)

    async def step(self, uri: str, op: tuple) -> None:
        kind = op[0]
        if kind == "edit":
            self._edit(uri, op[1], op[2], op[3])
        elif kind == "replace_all":
            self.versions[uri] += 1
            self._change(uri, self.versions[uri], [T.TextDocumentContentChangeWholeDocument(text=op[1])])
            self.refs[uri] = Reference(op[1])
        elif kind == "big":
            self._edit(uri, op[1], op[1], big_text(op[2]))
        elif kind == "old_version":  # a version number lower than the last: applied all the same
            self._edit(uri, op[1], op[1], op[2], version=max(0, self.versions[uri] - 3))
        elif kind == "complete":
            out = await self._request(self.client.text_document_inline_completion_async(
                completion_params(uri, *op[1])))
            assert out is None or isinstance(out, (T.InlineCompletionList, list)), out
        elif kind == "next_edit":
            params = {"textDocument": {"uri": uri, "version": self.versions[uri] if op[1] else 0}}
            out = await self._request(self.client.protocol.send_request_async(
                "textDocument/copilotInlineEdit", params))
            assert out is None or "edits" in plain(out), out
        elif kind == "code_action":
            p = T.CodeActionParams(T.TextDocumentIdentifier(uri), T.Range(T.Position(*op[1]), T.Position(*op[1])),
                                   T.CodeActionContext(diagnostics=[]))
            await self._request(self.client.text_document_code_action_async(p))
        elif kind == "unknown":
            method = "redraft/noSuchMethod" if op[1] else "$/noSuchNotification"
            if op[1]:
                out = await self._request(self.client.protocol.send_request_async(method, {"x": 1}))
                assert out is None or isinstance(out, JsonRpcException), out
            else:
                self.client.protocol.notify(method, {"x": 1})
        elif kind == "malformed":
            await self._malformed(uri, op[1])
        elif kind == "cancel":
            self.client.protocol.notify("$/cancelRequest", T.CancelParams(id=op[1]))
        elif kind == "stranger":  # a change for a document that was never opened: ignored
            self._change(NEVER_OPENED, 7, [T.TextDocumentContentChangeWholeDocument(text=op[1])])
        elif kind == "reopen":
            self.client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))
            self.open(uri, op[1])

    async def _malformed(self, uri: str, which: int) -> None:
        params = [{"textDocument": "not an object", "position": 3},
                  {"textDocument": {"uri": uri}, "position": {"line": -1, "character": 0},
                   "context": {"triggerKind": 2}},
                  {"textDocument": {"uri": 5}, "position": {"line": "x", "character": []}},
                  None][which]
        msg_id = f"malformed-{next(self.ids)}"
        out = await self._request(send_raw(self.client, "textDocument/inlineCompletion", params, msg_id))
        assert out is None or isinstance(out, JsonRpcException), out

    async def server_text(self, uri: str) -> str | None:
        out = plain(await asyncio.wait_for(self.client.protocol.send_request_async(
            "redraft/document", {"uri": uri}), self.timeout))
        return out.get("text") if isinstance(out, dict) else None

