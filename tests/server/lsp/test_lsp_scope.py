"""The scope rule end to end: over LSP, a draft copied from another function is not shown with
that function's parameter, and is shown whole where its names exist (drafts alone, so that no
model is involved and the answers are exact)."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import LanguageClient

from lsp_helpers import CAPABILITIES, SERVER, complete, open_doc, stats

pytestmark = pytest.mark.asyncio(loop_scope="module")

PRICE = '''def total_price(order, tax):
    subtotal = sum(item.price for item in order.items)
    return round(subtotal * (1 + tax), 2)


def {name}({params}):
    subtotal = sum(item.price for item in 
'''
LINE = "    subtotal = sum(item.price for item in "


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(T.InitializeParams(
        capabilities=CAPABILITIES, initialization_options={"drafts": "only"}))
    yield
    await lsp_client.shutdown_session()


async def test_a_draft_naming_another_functions_parameter_is_not_shown(client: LanguageClient):
    uri = "file:///work/weight.py"
    open_doc(client, uri, PRICE.format(name="total_weight", params="parcel, unit"))
    items = await complete(client, uri, 6, len(LINE))
    assert all("order" not in i.insert_text for i in items), items


async def test_the_same_draft_is_shown_whole_where_its_names_exist(client: LanguageClient):
    uri = "file:///work/discount.py"
    open_doc(client, uri, PRICE.format(name="total_discount", params="order, rate"))
    items = await complete(client, uri, 6, len(LINE))
    assert [i.insert_text for i in items] == ["order.items)"]
    assert (await stats(client))["model_runs"] == 0
