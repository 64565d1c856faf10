"""Abstaining early: a request the first step shows to be hopeless stops there, one that later
steps show to be stops then (forwards counted)."""

import math

import pytest

from redraft.engine import Engine

# Nothing in this context says what follows: the shipped model is far from sure of any token
# (mean log-prob of what it writes here ~ -1.4: bars above that make the request hopeless).
# Not every nonsense context is: after "zq = Vx9(kk_" the 150M-token model is sure of a loop of k's.
PREFIX = "q7 = W(zz."
SUFFIX = "\n"


@pytest.fixture(scope="module")
def shipped():
    return Engine.load(dtype="float32")


def test_a_hopeless_request_stops_after_the_first_step(shipped):
    scfg = shipped.sampler.with_(span=16, min_score=-0.3, block_size=0)
    full = shipped.infill(PREFIX, SUFFIX, sampler=scfg.with_(abstain_margin=math.inf, recheck_margin=math.inf))
    early = shipped.infill(PREFIX, SUFFIX, sampler=scfg.with_(abstain_margin=0.0, recheck_margin=math.inf))
    assert full.abstained and early.abstained and early.text == ""
    # Left to run, it spends several forwards (16 with the shipped model) before abstaining.
    assert full.stats.forwards > 2
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


def test_a_request_that_stays_hopeless_is_given_up_at_a_later_step(shipped):
    # The first step's estimate (margin 2.0) lets it through; the next steps' sharper ones do not
    # (the shipped model is unsure what attribute comes here: left to run, it spends its steps
    # and ends under the bar of -0.6, at -0.65 with its span windows).
    scfg = shipped.sampler.with_(span=16, min_score=-0.6, abstain_margin=2.0)
    prefix = "class A:\n    def __init__(self):\n        self."
    full = shipped.infill(prefix, SUFFIX, sampler=scfg.with_(recheck_margin=math.inf))
    early = shipped.infill(prefix, SUFFIX, sampler=scfg.with_(recheck_margin=0.3))
    assert full.abstained and early.abstained and early.text == ""
    assert 1 < early.stats.forwards < full.stats.forwards


def test_a_request_on_course_is_not_given_up_by_the_later_checks(shipped):
    scfg = shipped.sampler.with_(span=16, min_score=-1.5)
    prefix = "import os\n\nvalue = os."
    full = shipped.infill(prefix, SUFFIX, sampler=scfg.with_(recheck_margin=math.inf))
    checked = shipped.infill(prefix, SUFFIX, sampler=scfg.with_(recheck_margin=0.3))
    assert not checked.abstained and checked.text.startswith("path.")
    assert checked.text == full.text and checked.stats.forwards == full.stats.forwards


def test_a_request_out_of_steps_abstains_and_one_within_them_answers(shipped):
    # The bar is out of reach of no estimate (min_score -50): only the step budget stops it.
    scfg = shipped.sampler.with_(span=16, min_score=-50.0, block_size=0)
    full = shipped.infill(PREFIX, SUFFIX, sampler=scfg)
    capped = shipped.infill(PREFIX, SUFFIX, sampler=scfg.with_(give_up_after=3))
    roomy = shipped.infill(PREFIX, SUFFIX, sampler=scfg.with_(give_up_after=full.stats.steps))
    assert not full.abstained and full.stats.steps > 3
    assert capped.abstained and capped.text == "" and capped.stats.steps == 3
    assert not roomy.abstained and roomy.text == full.text and roomy.stats.steps == full.stats.steps
    with pytest.raises(ValueError):
        scfg.with_(give_up_after=-1)


def test_a_request_out_of_steps_can_answer_what_it_wrote_so_far(shipped):
    """out_of_steps "prefix": the tokens committed before the first masked position, which the
    uncapped run also wrote there (committed tokens never change)."""
    scfg = shipped.sampler.with_(span=16, min_score=-50.0, block_size=2)
    full = shipped.infill(PREFIX, SUFFIX, sampler=scfg)
    capped = shipped.infill(PREFIX, SUFFIX, sampler=scfg.with_(give_up_after=3, out_of_steps="prefix"))
    assert not full.abstained and full.stats.steps > 3
    assert not capped.abstained and capped.stats.steps == 3
    assert capped.text and len(capped.text) < len(full.text) and full.text.startswith(capped.text)
    strict = shipped.infill(PREFIX, SUFFIX, sampler=scfg.with_(give_up_after=3, out_of_steps="prefix", min_score=-0.01))
    assert strict.abstained and strict.text == ""
    with pytest.raises(ValueError):
        scfg.with_(out_of_steps="guess")
