"""The engine protocol's JSON, both ways: every body and event survives a round trip through
real JSON text, non-finite floats travel as null, and bad bodies name the field at fault."""

from __future__ import annotations

import json
import math

import pytest

from redraft.engine import Completion, Engine, InfillRequest, Preview, SamplerConfig, Stats
from redraft.server.core import wire
from redraft.server.core.context import Mode
from redraft.server.core.postprocess import Unit


def through_json(obj):
    return json.loads(wire.dumps(obj))


def test_a_sampler_round_trips_with_its_non_finite_fields():
    s = SamplerConfig(span=12, lengths=(4, 8), threshold=0.7, temperature=0.3, top_p=0.9, min_score=-math.inf,
                      abstain_margin=math.inf, recheck_margin=math.inf, seed=5, draft_rule="override", heal=False)
    d = through_json(wire.encode_sampler(s))
    assert d["min_score"] is None and d["abstain_margin"] is None and d["recheck_margin"] is None
    assert d["lengths"] == [4, 8]
    assert wire.decode_sampler(d, SamplerConfig()) == s
    finite = SamplerConfig(min_score=-2.5, abstain_margin=0.5)
    assert wire.decode_sampler(through_json(wire.encode_sampler(finite)), SamplerConfig()) == finite


def test_a_partial_sampler_overrides_the_base_and_bad_fields_are_named():
    base = SamplerConfig(span=20, threshold=0.8)
    assert wire.decode_sampler({"seed": 3}, base) == base.with_(seed=3)
    for bad, field in [({"spam": 1}, "sampler.spam"), ({"span": "8"}, "sampler.span"), ({"heal": 1}, "sampler.heal"),
                       ({"lengths": [1, "2"]}, "sampler.lengths"), ({"threshold": None}, "sampler.threshold"),
                       ({"threshold": 2.0}, "threshold must be in [0, 1]")]:
        with pytest.raises(wire.WireError, match=field.replace("[", r"\[").replace("]", r"\]")):
            wire.decode_sampler(bad, base)


def test_a_unit_round_trips_and_is_the_stop_rule():
    u = Unit(Mode.BLOCK, "    ", 3, braces=True, right="}", indented=True)
    d = through_json(wire.encode_unit(u))
    assert d["mode"] == "block"
    back = wire.decode_unit(d)
    assert back == u
    assert back("x\n    y\n") == u.ended("x\n    y\n") and Unit(Mode.LINE, "", 2)("a\n") is True
    assert wire.encode_unit(None) is None and wire.decode_unit(None) is None
    with pytest.raises(wire.WireError, match="stop.mode"):
        wire.decode_unit({**d, "mode": "paragraph"})


def test_an_infill_body_round_trips_into_engine_requests():
    reqs = [InfillRequest("def f(", ")\n", "# extra", ("a, b", "x")), InfillRequest("y = ")]
    sampler = SamplerConfig(span=9)
    stop = Unit(Mode.LINE, "", 8, right=")")
    call = wire.decode_infill(through_json(wire.encode_infill(reqs, sampler, "key-1", stop, True)), SamplerConfig())
    assert call.requests == reqs and call.sampler == sampler and call.cache_key == "key-1"
    assert call.stop == stop and call.previews is True
    bare = wire.decode_infill({"requests": [{"prefix": "p"}]}, sampler)
    assert bare.requests == [InfillRequest("p")] and bare.sampler == sampler and bare.stop is None
    for bad, field in [({"requests": []}, "empty"), ({"requests": [{"suffix": ""}]}, r"requests\[0\].prefix"),
                       ({"requests": [{"prefix": "p", "drafts": [1]}]}, r"requests\[0\].drafts"),
                       ({"requests": [{"prefix": "p"}], "previews": "yes"}, "body.previews"), ([], "body")]:
        with pytest.raises(wire.WireError, match=field):
            wire.decode_infill(bad, sampler)


def test_previews_completions_and_errors_round_trip():
    p = Preview(1, 4, "ab\ncd", 2)
    assert wire.decode_preview(through_json(wire.encode_preview(p))) == p
    st = Stats(context_tokens=40, reused_tokens=30, span_tokens=3, steps=2, forwards=2, rows=2, tokenize_ms=0.25,
               total_ms=3.5, drafts=1, draft=0, draft_kept=3, cache_queries=0)
    cs = [Completion("x + 1", [5, 6, 7], [0.5, 1.0, 0.75], 8, st, healed="x", score=-0.25),
          Completion("", [], [], 8, Stats(), score=-math.inf, abstained=True)]
    d = through_json(wire.encode_result(cs))
    assert d["completions"][1]["score"] is None
    back = wire.decode_result(d)
    assert back[0] == cs[0] and back[1].score == -math.inf and back[1].abstained
    assert wire.decode_error(through_json(wire.encode_error(503, "away"))) == (503, "away")
    with pytest.raises(wire.WireError, match="completion.text"):
        wire.decode_result({"completions": [{**d["completions"][0], "text": 3}]})


def test_score_and_forget_bodies_round_trip():
    body = through_json(wire.encode_score("a = ", "\n", ["1", "2"], "# x"))
    assert wire.decode_score(body) == ("a = ", "\n", ["1", "2"], "# x")
    assert wire.decode_scores(through_json(wire.encode_scores([-0.5, -math.inf]))) == [-0.5, -math.inf]
    assert wire.decode_forget(through_json(wire.encode_forget("file:///a.py"))) == "file:///a.py"
    with pytest.raises(wire.WireError, match="body.texts"):
        wire.decode_score({"prefix": "", "texts": "12"})


def test_info_of_an_engine_gives_its_budget_and_sampler(tiny_model):
    engine = Engine.load(str(tiny_model), dtype="float32")
    engine.with_sampler(seed=7, threshold=0.6)
    d = through_json(wire.encode_info(engine))
    info = wire.decode_info(d)
    assert d["protocol"] == 1 and info.name == engine.name and info.parameters == engine.info().parameters
    assert info.scores_edits is True and info.sampler == engine.sampler
    for span in (0, 1, 16, 200, 10_000):
        assert info.context_budget(span) == engine.context_budget(span)
    with pytest.raises(wire.WireError, match="protocol 2"):
        wire.decode_info({**d, "protocol": 2})


def test_server_sent_events_are_read_back():
    text = (wire.sse("preview", {"request": 0, "step": 1, "text": "a\nb", "masked": 1}) + ": a comment\n\n"
            + "event: result\ndata: {\"completions\":\ndata: []}\n\n")
    events = list(wire.read_events(text.split("\n")))
    assert events == [("preview", {"request": 0, "step": 1, "text": "a\nb", "masked": 1}),
                      ("result", {"completions": []})]
    with pytest.raises(wire.WireError, match="result event"):
        list(wire.read_events(["event: result", "data: {oops", ""]))
    with pytest.raises(ValueError):
        wire.dumps({"x": math.nan})
