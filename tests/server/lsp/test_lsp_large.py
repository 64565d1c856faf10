"""Huge buffers never stall `redraft serve`: after a 5 MB paste (many lines, or one minified
line) every keystroke's request is answered promptly, nothing errors, and the server's text
is the client's. Then the session's own bookkeeping on large documents, without a client."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import LanguageClient

from lsp_helpers import SERVER, completion_params, document, edit, init_params, open_doc, stats, until_loaded
from redraft.server.core import drafts, nextedit
from redraft.server.core.inference import Inference
from redraft.server.core.settings import ServerConfig
from redraft.server.lsp.session import Session

pytestmark = pytest.mark.asyncio(loop_scope="module")

MB = 1 << 20
ANSWER_S = 30.0  # a liveness bound, not a latency target (tests/bench/bench_large.py measures that):
# a stalled server took minutes
SETTLE_S = 0.6  # longer than the next-edit debounce, so next edits are computed for the paste


def python_lines(size: int) -> str:
    """About `size` bytes of Python, ~50 bytes a line."""
    line = "def handler_{0}(request, context):\n    return request.value * {0} + context.offset\n"
    out, n, i = [], 0, 0
    while n < size:
        out.append(line.format(i))
        n += len(out[-1])
        i += 1
    return "".join(out)


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, tiny_model):
    await lsp_client.initialize_session(init_params(tiny_model))
    await until_loaded(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def type_and_ask(client: LanguageClient, uri: str, version: int, row: int, col: int, typed: str
                       ) -> tuple[int, list]:
    """Type `typed` at (row, col), one keystroke at a time, each followed by a completion
    request sent without waiting (as an editor does); (version, answers)."""
    asked = []

    async def ask(c: int):
        return await asyncio.wait_for(
            client.text_document_inline_completion_async(completion_params(uri, row, c)), ANSWER_S)

    for ch in typed:
        version += 1
        edit(client, uri, version, row, col, ch)
        col += 1
        asked.append(asyncio.ensure_future(ask(col)))
        await asyncio.sleep(0.02)
    return version, await asyncio.gather(*asked)


async def paste(client: LanguageClient, uri: str, version: int, start: tuple[int, int], end: tuple[int, int],
                text: str) -> None:
    """Paste `text` over start..end; the server must acknowledge it (a stats round trip) and
    then sit through the next-edit debounce for it without stalling."""
    edit(client, uri, version, *start, text, end=end)
    assert (await asyncio.wait_for(stats(client), ANSWER_S))["errors"] == 0
    await asyncio.sleep(SETTLE_S)


async def test_a_five_megabyte_paste_over_a_document_then_typing(client: LanguageClient):
    uri = "file:///work/large.py"
    opened = python_lines(64 << 10)  # ~1,300 lines, all replaced by the paste
    open_doc(client, uri, opened)
    text = python_lines(5 * MB).replace("handler_", "route_")
    await paste(client, uri, 2, (0, 0), (opened.count("\n"), 0), text)
    before = await stats(client)
    version, answers = await type_and_ask(client, uri, 2, text.count("\n"), 0, "value = route_7(req")
    assert len(answers) == len("value = route_7(req")  # every request answered within the bound
    s = await stats(client)
    assert s["requests"] == before["requests"] + len(answers)
    assert s["errors"] == 0 and s["model_runs"] >= 1
    got = await document(client, uri)
    assert got["version"] == version and got["text"] == text + "value = route_7(req"


async def test_a_five_megabyte_minified_line_then_typing_on_it_and_below(client: LanguageClient):
    uri = "file:///work/minified.js"
    open_doc(client, uri, "const x = 1;\n", language="javascript")
    line = "".join(f"var a{i}=f({i},[1,2,3]);" for i in range(5 * MB // 24))
    assert len(line) >= 5 * MB
    await paste(client, uri, 2, (0, 0), (0, 0), line + "\n")  # one line, ahead of "const x = 1;"
    before = await stats(client)
    version, answers = await type_and_ask(client, uri, 2, 0, len(line), "g(a1,")
    version, below = await type_and_ask(client, uri, version, 1, 12, " y(x,")
    after = await stats(client)
    assert len(answers) + len(below) == 10 and after["requests"] == before["requests"] + 10
    assert after["errors"] == 0
    got = await document(client, uri)
    assert got["version"] == version and got["text"] == line + "g(a1,\nconst x = 1; y(x,\n"


async def test_closing_a_large_document_mid_indexing_leaves_the_server_well(client: LanguageClient):
    uri = "file:///work/closed.py"
    open_doc(client, uri, "x = 1\n")
    edit(client, uri, 2, 1, 0, python_lines(MB - (64 << 10)))  # under the index limit: filed in slices
    client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))
    assert await document(client, uri) == {}
    other = "file:///work/after.py"
    open_doc(client, other, "y = \n")
    await asyncio.wait_for(client.text_document_inline_completion_async(completion_params(other, 0, 4)), ANSWER_S)
    assert (await stats(client))["errors"] == 0


# -- the session's bookkeeping on large documents --------------------------------------------


class _Busy:
    running = 1  # an engine job is in flight


async def test_a_large_paste_is_indexed_in_slices_that_wait_for_the_engine():
    session = Session(ServerConfig(next_edit=False), Inference())
    try:
        uri = "file:///s.py"
        session.open(uri, "x = 1\n", 1, "python")
        st = session.docs[uri]
        pasted = python_lines(600 << 10) + "tail_marker = compute(alpha)\n"
        filed = st.index.filed_chars
        session.change(uri, 2, [((1, 0, 1, 0), pasted)])
        assert st.index.filed_chars - filed <= drafts.FILE_NOW_CHARS + 100  # the rest waits
        assert st.index.pending and st.filing is not None
        assert st.index.find("tail_marker = comp") == []
        real, session.scheduler = session.scheduler, _Busy()
        pending = st.index.pending
        await asyncio.sleep(0.1)
        assert st.index.pending == pending  # no slice while the engine runs
        session.scheduler = real
        for _ in range(2000):
            if not st.index.pending:
                break
            await asyncio.sleep(0.005)
        assert st.index.pending == 0 and st.filing is None
        row = len(st.doc.lines) - 2
        assert st.doc.lines[row].startswith("tail_marker")
        assert [(m.row, m.col) for m in st.index.find("tail_marker = comp")] == [(row, 18)]
    finally:
        session.inference.shutdown()


async def test_a_document_over_the_index_limit_keeps_no_index_until_it_shrinks(caplog):
    now = [0.0]
    session = Session(ServerConfig(next_edit=False), Inference(), clock=lambda: now[0])
    try:
        uri = "file:///big.py"
        session.open(uri, "x = 1\n", 1, "python")
        st = session.docs[uri]
        big = python_lines(2 * MB)
        with caplog.at_level("INFO"):
            session.change(uri, 2, [((1, 0, 1, 0), big)])
            now[0] += 5  # a new edit event, begun in the large document
            session.change(uri, 3, [((0, 0, 0, 0), "y")])
        assert st.index is None and st.doc.tree is None
        assert sum("no drafts from it" in r.getMessage() for r in caplog.records) == 1
        assert len(st.event_before.lines) <= 2 * nextedit.MAX_EVENT_LINES + 1  # not 40,000 lines
        session.change(uri, 4, [((1, 0, len(st.doc.lines) - 1, 0), "")])  # undo the paste
        assert st.doc.text == "yx = 1\n" and st.index is not None and st.doc.tree is not None
        await session.inline_completion(uri, 0, 7 - 1)
        assert session.stats.requests == 1 and session.stats.errors == 0
    finally:
        session.inference.shutdown()
