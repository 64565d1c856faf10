"""The server's step budget for short units: a line the model is still writing after
inference.LINE_STEPS steps abstains; a block keeps every step, and so does an engine set to
always answer. Counted in steps, through the shared pipeline (`inference.answer`) with a tiny
random model, which is sure of no token and so commits one a step."""

from __future__ import annotations

from redraft.engine import Engine
from redraft.server.core.context import Mode, text_snapshot
from redraft.server.core.inference import LINE_STEPS, answer
from redraft.server.core.settings import ServerConfig

CONFIG = ServerConfig(drafts="off", names=False, line_tokens=16, block_tokens=16)


def test_a_line_gives_up_after_its_steps_and_a_block_does_not(tiny_model):
    engine = Engine.load(str(tiny_model), device="cpu", dtype="float32")
    line = "def area(width, height):\n    return width * "
    snap, _ = text_snapshot("file:///a.py", line, len(line), CONFIG, "python")
    assert snap.mode is Mode.LINE
    abstains = engine.sampler.with_(min_score=-1e9)  # a bar no row falls below: only the budget stops it
    got = answer(engine, snap, sampler=abstains)
    assert got.ran_model and got.abstained and got.edit is None
    assert got.stats.steps == LINE_STEPS
    always = answer(engine, snap)  # the tiny checkpoint always answers (min_score -inf)
    assert always.ran_model and not always.abstained and always.stats.steps > LINE_STEPS
    block = "def area(width, height):\n    "
    snap, _ = text_snapshot("file:///b.py", block, len(block), CONFIG, "python")
    assert snap.mode is Mode.BLOCK
    got = answer(engine, snap, sampler=abstains)
    assert got.ran_model and got.stats.steps > LINE_STEPS


def test_the_rest_of_a_line_after_a_completed_name_has_a_smaller_budget(tiny_model):
    """The model's line made an unknown word of the typed `wid`: the name is completed from the
    file and the model writes the rest after it, within NAME_REST_STEPS (the name alone is
    already an answer), not a second LINE_STEPS."""
    from redraft.server.core.pipeline import NAME_REST_STEPS
    engine = Engine.load(str(tiny_model), device="cpu", dtype="float32")
    text = "def area(width_of_box, height):\n    return width_of_box * height + wid"
    snap, _ = text_snapshot("file:///n.py", text, len(text), ServerConfig(drafts="off", line_tokens=16,
                                                                          block_tokens=16), "python")
    assert snap.mode is Mode.LINE
    got = answer(engine, snap, sampler=engine.sampler.with_(min_score=-1e9))
    assert got.source == "name" and got.edit is not None and got.edit.text.startswith("th_of_box")
    assert got.stats.steps == NAME_REST_STEPS < LINE_STEPS
