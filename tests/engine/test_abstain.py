"""Abstaining early: a request the first step shows to be hopeless stops there (forwards counted)."""

import pytest

from redraft.engine import Engine

# Nothing in this context says what follows: the shipped model is far from sure of any token.
PREFIX = "zq = Vx9(kk_"
SUFFIX = "\n"


@pytest.fixture(scope="module")
def shipped():
    return Engine.load(dtype="float32")


def test_a_hopeless_request_stops_after_the_first_step(shipped):
    scfg = shipped.sampler.with_(span=16, min_score=-1.5, block_size=0)
    full = shipped.infill(PREFIX, SUFFIX, sampler=scfg.with_(abstain_margin=float("inf")))
    early = shipped.infill(PREFIX, SUFFIX, sampler=scfg.with_(abstain_margin=0.0))
    assert full.abstained and early.abstained and early.text == ""
    assert full.stats.forwards > 4
    assert early.stats.forwards == 1 and early.stats.steps == 1


def test_a_request_that_can_still_pass_runs_its_schedule(shipped):
    scfg = shipped.sampler.with_(span=16, min_score=-50.0, abstain_margin=0.0)
    out = shipped.infill(PREFIX, SUFFIX, sampler=scfg)
    assert not out.abstained and out.text and out.stats.forwards > 1


def test_a_draft_row_keeps_its_request_alive(shipped):
    """The draft bonus counts in the estimate as in the final score: a request with a plausible
    draft is not given up although its plain row is hopeless."""
    scfg = shipped.sampler.with_(span=16, min_score=-1.5, abstain_margin=0.0, draft_bonus=5.0,
                                 accept_whole_drafts=False)
    out = shipped.infill(PREFIX, SUFFIX, drafts=["x)"], sampler=scfg)
    assert not out.abstained and out.stats.draft == 0
