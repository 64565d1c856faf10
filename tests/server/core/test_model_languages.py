"""A model that says which languages it was trained on (config.json `redraft_languages`): in
other languages drafts answer alone, since its judgement of them costs more than it gives."""

from __future__ import annotations

import pytest

from redraft.engine import Engine
from redraft.engine.request import EngineInfo
from redraft.server.core import wire
from redraft.server.core.context import own_drafts, text_snapshot
from redraft.server.core.pipeline import answer, knows
from redraft.server.core.settings import ServerConfig

GO = "package main\n\nfunc main() {\n\tfmt.Println(\"start\", os.Args[1:])\n\tfmt.Println(\"st"
PY = "import sys\n\nprint('start', sys.argv[1:])\nprint('st"


class Recording:
    """An engine that says it knows Python only and records whether it was asked."""

    def __init__(self, languages=("python",)):
        self.languages, self.asked = languages, 0

    def info(self):
        return EngineInfo("rec", 1, "float32", "cpu", True, self.languages)

    def __getattr__(self, name):  # any engine call: recorded, then refused
        self.asked += 1
        raise RuntimeError(f"engine.{name} called")


def snap_at_end(text: str, uri: str, language: str):
    snap, doc = text_snapshot(uri, text + "\n", len(text), ServerConfig(), language)
    return own_drafts(snap, doc, ServerConfig())


def test_drafts_answer_alone_where_the_model_does_not_know_the_language():
    engine = Recording()
    got = answer(engine, snap_at_end(GO, "file:///m.go", "go"))
    assert engine.asked == 0 and not got.ran_model
    assert got.edit is not None and got.edit.text == 'art", os.Args[1:])' and got.source == "buffer"


def test_the_model_runs_where_it_knows_the_language_or_does_not_say():
    snap = snap_at_end(PY, "file:///m.py", "python")
    assert knows(Recording(), snap) and knows(Recording(()), snap_at_end(GO, "file:///m.go", "go"))
    assert not knows(Recording(), snap_at_end(GO, "file:///m.go", "go"))
    engine = Recording()
    with pytest.raises(RuntimeError, match="engine.count_tokens called"):  # it was asked
        answer(engine, snap)
    assert engine.asked > 0


TRAINED = ("go", "javascript", "python", "rust", "typescript")


def test_the_shipped_models_say_their_languages_and_a_remote_engine_passes_them_on():
    engine = Engine.load("redraft-diffusion")
    assert engine.info().languages == TRAINED
    info = wire.decode_info(wire.encode_info(engine))
    assert info.languages == TRAINED and info.name == "redraft-diffusion"
    assert knows(engine, snap_at_end(GO, "file:///m.go", "go"))
    assert not knows(engine, snap_at_end("int main(void) {\n  return 0", "file:///m.c", "c"))
    del engine
