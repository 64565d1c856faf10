"""Hostile LSP traffic through the real `redraft serve` process, drawn by hypothesis.

Every request is answered (a result or an error response), the process stays alive, the
server's copy of each document equals a reference replay of the same edits (nothing lost,
nothing duplicated), and none of this benign hostility counts as an internal error.
tests/bench/bench_fuzz.py runs 10,000 such operations and reports answer latencies.
"""

from __future__ import annotations

import pytest
import pytest_lsp
from hypothesis import HealthCheck, given, settings
from pytest_lsp import LanguageClient

from fuzz_ops import URIS, Driver, programs
from lsp_helpers import SERVER, init_params, stats, until_loaded

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, tiny_model):
    # next edits on: the debounced computation runs after edits, as in an editor
    await lsp_client.initialize_session(init_params(tiny_model, nextEdit=True))
    await until_loaded(lsp_client)
    yield
    await lsp_client.shutdown_session()


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(program=programs(min_ops=20, max_ops=40))
async def test_hostile_traffic_keeps_documents_and_answers(client: LanguageClient, program):
    index, text, ops = program
    uri = URIS[index]
    driver = Driver(client)
    driver.open(uri, text)
    await driver.run(uri, ops)
    assert driver.unanswered == 0
    assert await driver.server_text(uri) == driver.refs[uri].text
    s = await stats(client)
    assert s["errors"] == 0, s["errors_by_method"]


async def test_the_reference_check_can_fail(client: LanguageClient):
    """A document the server holds differently from the client is caught."""
    driver = Driver(client)
    driver.open(URIS[0], "a = 1\n")
    driver.refs[URIS[0]].edit((0, 0), (0, 0), "lost ")  # edited on the client side only
    assert await driver.server_text(URIS[0]) != driver.refs[URIS[0]].text
    assert await driver.server_text("file:///fuzz/never-opened.py") is None
