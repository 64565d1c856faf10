"""Copied drafts whose names do not exist at the cursor: in Python, TypeScript, Go and Rust, a
line copied from a neighbouring function keeps that function's parameter; the server's own path
(text_snapshot, own_drafts, pipeline.answer) marks it foreign, renames it where the parameters
line up, masks it for the model, or shows no such name; a draft whose names all exist is still
offered whole."""

from __future__ import annotations

import math

import pytest

import tiny
from redraft.server.core import context
from redraft.server.core.context import own_drafts, text_snapshot
from redraft.server.core.pipeline import answer, answer_from_drafts, usable_drafts
from redraft.server.core.review import masked
from redraft.server.core.scope import scope_at
from redraft.server.core.settings import ServerConfig

CFG = ServerConfig()
MARK = "@@"

# Per language: a document with the cursor at MARK in a function whose parameter is `parcel`,
# right after the start of a line that another function (parameter `order`) wrote, and what that
# draft is there.
CASES = {
    "python": ("""def total_price(order, tax):
    subtotal = sum(item.price for item in order.items)
    return round(subtotal * (1 + tax), 2)


def total_weight(parcel, unit):
    subtotal = sum(item.price for item in @@
""", "order.items)"),
    "typescript": ("""function totalPrice(order: Order, tax: number): number {
  const subtotal = order.items.reduce((sum, item) => sum + item.price, 0);
  return Math.round(subtotal * (1 + tax));
}

function totalWeight(parcel: Parcel, unit: string): number {
  const subtotal = @@
}
""", "order.items.reduce((sum, item) => sum + item.price, 0);"),
    "go": ("""package shop

func totalPrice(order Order, tax float64) float64 {
	subtotal := order.Sum(func(item Item) float64 { return item.Price })
	return subtotal * (1 + tax)
}

func totalWeight(parcel Parcel, unit string) float64 {
	subtotal := @@
}
""", "order.Sum(func(item Item) float64 { return item.Price })"),
    "rust": ("""fn total_price(order: &Order, tax: f64) -> f64 {
    let subtotal: f64 = order.items.iter().map(|item| item.price).sum();
    subtotal * (1.0 + tax)
}

fn total_weight(parcel: &Parcel, unit: &str) -> f64 {
    let subtotal: f64 = @@
}
""", "order.items.iter().map(|item| item.price).sum();"),
}
EXT = {"python": "py", "typescript": "ts", "go": "go", "rust": "rs"}


def snap_at(text: str, language: str, config: ServerConfig = CFG):
    at = text.index(MARK)
    snap, doc = text_snapshot(f"file:///shop.{EXT[language]}", text.replace(MARK, "", 1), at, config, language)
    return own_drafts(snap, doc, config), doc


def in_scope_too(text: str) -> str:
    """The same document, the cursor's function taking `order` too: the draft's names exist."""
    return text.replace("parcel", "order", 1)


@pytest.mark.parametrize("language", sorted(CASES))
def test_a_draft_naming_another_functions_parameter_is_marked_and_not_shown_as_it_is(language):
    text, draft = CASES[language]
    snap, _ = snap_at(text, language)
    assert "order" not in snap.scope.names and "parcel" in snap.scope.names
    found = [d for d in snap.drafts if d.text.startswith("order")]
    assert found and found[0].text == draft and found[0].foreign == ("order",)
    got = answer(None, snap)  # no model: drafts alone
    assert got.edit is None or "order" not in got.edit.text, got


@pytest.mark.parametrize("language", sorted(CASES))
def test_a_draft_whose_names_all_exist_is_offered_whole(language):
    text, draft = CASES[language]
    snap, _ = snap_at(in_scope_too(text), language)
    assert snap.drafts[0].text == draft and snap.drafts[0].foreign == ()
    got = answer(None, snap)
    assert got.edit is not None and got.edit.text == draft and got.source == "buffer"


@pytest.mark.parametrize("language", sorted(CASES))
def test_for_the_model_the_parameter_in_the_same_place_is_seeded(language):
    text, draft = CASES[language]
    snap, _ = snap_at(text, language)
    ctx = context.build(snap, lambda s: len(s) // 3 + 1)
    assert snap.drafts[0].guesses == ("parcel",)
    seeds = [d.text for d in usable_drafts(snap, ctx, "<|mask|>")]
    assert draft.replace("order", "parcel") in seeds and all("order" not in s for s in seeds)
    assert not any("parcel" in d.text for d in usable_drafts(snap, ctx))  # no model: not shown


def one_more_parameter(text: str) -> str:
    """The cursor's function takes three parameters: no place lines up with the draft's function."""
    for old, new in (("parcel, unit", "parcel, unit, scale"), ("unit string", "unit string, scale float64"),
                     ("unit: string", "unit: string, scale: number"), ("unit: &str", "unit: &str, scale: f64")):
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("language", sorted(CASES))
def test_for_the_model_a_foreign_name_nothing_lines_up_with_is_masked(language):
    text, draft = CASES[language]
    snap, _ = snap_at(one_more_parameter(text), language)
    assert snap.drafts[0].foreign == ("order",) and snap.drafts[0].guesses == ("",)
    ctx = context.build(snap, lambda s: len(s) // 3 + 1)
    seeds = [d.text for d in usable_drafts(snap, ctx, "<|mask|>")]
    assert masked(draft, ("order",), "<|mask|>") in seeds and all("order" not in s for s in seeds)
    assert masked(draft, ("order",), "<|mask|>").startswith("<|mask|>.")


def test_names_the_draft_binds_itself_are_in_scope():
    text = """def count(words):
    for key, value in words.items():
        print(key, value)


def show(table):
    for key, value in @@
"""
    snap, _ = snap_at(text, "python")
    assert snap.drafts[0].text == "words.items():" and snap.drafts[0].foreign == ("words",)
    snap, _ = snap_at(text.replace("words", "table"), "python")  # `key`, `value`: bound by the draft
    assert snap.drafts[0].text == "table.items():" and snap.drafts[0].foreign == ()


def test_attributes_and_keyword_arguments_are_not_names_in_scope():
    text = """def build(order, tax):
    return Invoice(order=order, total=order.total)


def rebuild(order, rate):
    return Invoice(@@
"""
    snap, _ = snap_at(text, "python")
    assert snap.drafts[0].text == "order=order, total=order.total)" and snap.drafts[0].foreign == ()


MAPPING = '''from typing import Any, Type

from .config import Config
from .types import extract_generic, is_subclass


def _build_value_for_union(union: Type, data: Any, config: Config) -> Any:
    types = extract_generic(union)
    return _build_value(type_=types[0], data=data, config=config)


def _build_value_for_collection(collection: Type, data: Any, config: Config) -> Any:
    item_type = extract_generic(collection, defaults=(Any,))[0]
    return data.__class__(_build_value(type_=item_type, data=item, config=config) for item in data)


def _build_value_for_mapping(mapping: Type, data: Any, config: Config) -> Any:
    item_type = extract_generic(@@
'''


def test_parameters_that_line_up_by_place_and_type_are_renamed():
    snap, _ = snap_at(MAPPING, "python")
    assert [p for p, _ in snap.scope.params] == ["mapping", "data", "config"]
    first = snap.drafts[0]
    assert first.text == "mapping, defaults=(Any,))[0]" and first.foreign == ()
    assert all("collection" not in d.text and "union" not in d.text for d in snap.drafts)
    got = answer_from_drafts(snap)
    assert got.edit is not None and got.edit.text == "mapping, defaults=(Any,))[0]"


def test_untyped_parameters_are_not_renamed():
    text = MAPPING.replace(": Type", "").replace(": Any", "").replace(": Config", "")
    snap, _ = snap_at(text, "python")
    assert all("mapping" not in d.text for d in snap.drafts)
    assert any(d.foreign == ("collection",) for d in snap.drafts)


def test_a_name_the_file_uses_freely_is_in_scope_and_a_glob_import_opens_it():
    text = """from helpers import *


def first(order):
    return render(order, TEMPLATE)


def second(parcel):
    return render(@@
"""
    snap, doc = snap_at(text, "python")
    assert snap.scope.open
    assert snap.drafts[0].text == "order, TEMPLATE)" and snap.drafts[0].foreign == ("order",)  # a local elsewhere
    closed = text.replace("from helpers import *", "from helpers import render")
    snap, _ = snap_at(closed, "python")  # TEMPLATE: used where nothing binds it, so it comes from outside
    assert not snap.scope.open and snap.drafts[0].foreign == ("order",)


def test_the_scope_survives_an_unfinished_line_that_breaks_the_parse():
    text = """package shop

func totalPrice(order Order, tax float64) float64 {
	return order.Sum(tax)
}

func totalWeight(parcel Parcel, unit string) float64 {
	weight := parcel.Weight(unit
	return weight@@
}
"""
    at = text.index(MARK)
    snap, doc = text_snapshot("file:///shop.go", text.replace(MARK, ""), at, CFG, "go")
    scope = scope_at(doc, snap.row, snap.col)
    assert {"parcel", "unit", "weight"} <= scope.names and "tax" not in scope.names


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from redraft.engine import Engine
    e = Engine.load(tiny.make_family(tmp_path_factory.mktemp("scope") / "m", "redraft", seed=5), dtype="float32")
    e.with_sampler(min_score=float("-inf"), abstain_margin=math.inf)  # a random model: never abstain
    return e


@pytest.mark.parametrize("language", sorted(CASES))
def test_with_a_model_the_answer_never_keeps_the_foreign_name(engine, language):
    text, _ = CASES[language]
    snap, _ = snap_at(text, language)
    got = answer(engine, snap)
    assert got.ran_model
    assert got.edit is None or "order" not in got.edit.text, got


def test_the_shipped_model_keeps_the_parameter_in_the_same_place():
    from redraft.engine import Engine
    shipped = Engine.load("redraft-diffusion")
    text = """def describe(order, tax):
    for key, value in order.fields.items():
        print(key, value)


def report(parcel, unit):
    for key, value in @@
"""
    snap, _ = snap_at(text, "python")
    assert snap.drafts[0].text == "order.fields.items():" and snap.drafts[0].foreign == ("order",)
    got = answer(shipped, snap)
    assert got.edit is not None and got.edit.text == "parcel.fields.items():", got
    assert answer(None, snap).edit is None  # drafts alone: an untyped guess is not shown
