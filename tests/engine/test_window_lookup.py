"""Prompt lookup inside span windows (engine/window_lookup.py, SamplerConfig.window_lookup): the
text's last tokens found earlier propose what followed them; one window forward judges the
proposal, the run the model agrees with is kept, the rest masked again."""

import pytest
import torch

from redraft.engine import Engine, InfillRequest, SamplerConfig
from redraft.engine.picks import Picks
from redraft.engine.speculative import LookupSource
from redraft.engine.window_lookup import Probe, WindowLookup, guesses, judge, positions

MASK = 99

# A function written out once and begun again below: the rest of it is in the context.
REPEATED = ('def area(width, height):\n    total = width * height\n    print("area", width, height, total)\n'
            '    return total\n\n\ndef volume(width, height):\n    total = width * height\n    print("area", ')
AFTER = "\n\n\nclass Box:\n    pass\n"


@pytest.fixture(scope="module")
def shipped():
    return Engine.load("redraft-diffusion", dtype="float32")


def _rows(span: list[int], masks: int, at: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.tensor([[7] * at + span + [MASK] * masks])
    masked = x == MASK
    return x, masked


def test_the_last_tokens_found_in_the_context_propose_what_followed_them():
    before = [1, 2, 3, 4, 5, 6, 7, 8]
    lookup = WindowLookup({0: LookupSource([], before, [[20, 21, 22, 23]])}, limit=8, shortest=3)
    x, masked = _rows([2, 3, 4], masks=6)  # the span so far ends in 2 3 4: 5 6 7 8 followed it
    got = lookup.probes(x, masked, 1, [9], [0])
    assert got == {0: Probe(4, [5, 6, 7, 8])}
    assert got[0].end == 9  # the proposal, then the model's own pick after it
    x, masked = _rows([2, 3, 4], masks=3)  # room for 2: the last masked position is the model's
    assert lookup.probes(x, masked, 1, [6], [0]) == {0: Probe(4, [5, 6])}
    x, masked = _rows([21, 22], masks=4)  # the prefix's end and the span: 20 21 22 -> 23 (the suffix)
    lookup2 = WindowLookup({0: LookupSource([], [9, 20], [[20, 21, 22, 23, 24]])}, limit=8, shortest=3)
    assert lookup2.probes(x, masked, 1, [6], [0]) == {0: Probe(3, [23, 24])}


def test_nothing_is_proposed_without_a_long_enough_match_or_room():
    lookup = WindowLookup({0: LookupSource([], [1, 2, 3, 4], [])}, limit=8, shortest=3)
    x, masked = _rows([9, 3, 4], masks=5)  # only "3 4" matches: shorter than 3 tokens
    assert lookup.probes(x, masked, 1, [8], [0]) == {}
    x, masked = _rows([2, 3], masks=1)  # one masked position left: the model's
    lookup3 = WindowLookup({0: LookupSource([], [1, 2, 3, 4], [])}, limit=8, shortest=2)
    assert lookup3.probes(x, masked, 1, [3], [0]) == {}
    assert WindowLookup({}, 8, 3).probes(x, masked, 1, [3], [0]) == {}  # a request without a source


def _picks(tokens: list[int], scores: list[float]) -> Picks:
    t = torch.tensor(tokens)
    s = torch.tensor(scores)
    return Picks(t, s.clone(), s.clone(), s.log(), s.log())


def test_the_agreeing_run_and_the_pick_after_it_commit_and_the_rest_is_masked_again():
    probes = {0: Probe(2, [5, 6, 7, 8])}
    b_idx, a_idx = positions(torch.tensor([0, 0]), torch.tensor([2, 3]), probes, width=7)
    assert a_idx.tolist() == [2, 3, 4, 5, 6] and b_idx.tolist() == [0] * 5  # each position once
    x = torch.tensor([[7, 7, 5, 6, 7, 8, MASK]])
    picks = _picks([5, 6, 9, 8, 1], [0.6, 0.95, 0.4, 0.99, 0.99])  # agrees on 5 6, not on 7
    raw = picks.score.clone()
    picks.score[2:] = -2.0  # outside the block (unmask.outside_block)
    b, a, kept_picks, kept = judge(probes, b_idx, a_idx, picks, raw, x, MASK, threshold=0.9)
    assert kept == {0: 2}
    assert a.tolist() == [2, 3, 4] and kept_picks.tokens.tolist() == [5, 6, 9]  # nothing after the first disagreement
    assert kept_picks.score.tolist()[:2] == pytest.approx([0.9, 0.95])  # the agreeing run clears the threshold
    # the pick after it saw only kept text before it: it commits too, whatever its own score
    assert kept_picks.score.tolist()[2] == pytest.approx(0.9)
    assert x.tolist() == [[7, 7, 5, 6, MASK, MASK, MASK]]  # the rejected proposal is masked again


def test_a_proposal_wholly_rejected_leaves_the_models_own_pick_at_its_first_position():
    probes = {0: Probe(1, [5, 6])}
    x = torch.tensor([[7, 5, 6, MASK]])
    b_idx, a_idx = positions(torch.tensor([0]), torch.tensor([1]), probes, width=4)
    picks = _picks([4, 6, 2], [0.7, 0.99, 0.99])
    b, a, kept_picks, kept = judge(probes, b_idx, a_idx, picks, picks.score.clone(), x, MASK, threshold=0.9)
    assert kept == {0: 0} and a.tolist() == [1] and kept_picks.tokens.tolist() == [4]
    assert kept_picks.score.tolist() == pytest.approx([0.9])  # the model's own pick there commits
    assert x.tolist() == [[7, MASK, MASK, MASK]]


def test_the_models_guesses_are_proposed_from_its_first_masked_position_up_to_an_end_token():
    x, masked = _rows([2, 3], masks=6)  # span from 1: 2 3, then six masks at 3..8
    guess = torch.full(x.shape, MASK)
    guess[0, 3:9] = torch.tensor([40, 41, 42, 0, 43, 44])  # 0: an end token
    got = guesses(x, masked, guess, 1, [8], limit=8, stops={0}, mask_id=MASK)
    assert got == {0: Probe(3, [40, 41, 42], guessed=True)}  # stops before the end token
    assert guesses(x, masked, guess, 1, [8], limit=2, stops={0}, mask_id=MASK)[0].tokens == [40, 41]
    guess[0, 3:9] = torch.tensor([40, 41, 42, 43, 44, 45])
    assert guesses(x, masked, guess, 1, [8], limit=8, stops={0}, mask_id=MASK)[0].tokens == [40, 41, 42, 43, 44]
    guess[0, 3] = MASK  # never guessed there: nothing to propose
    assert guesses(x, masked, guess, 1, [8], limit=8, stops={0}, mask_id=MASK) == {}
    x, masked = _rows([2, 3], masks=1)  # one masked position left: the model's
    assert guesses(x, masked, torch.full(x.shape, 40), 1, [3], limit=8, stops=set(), mask_id=MASK) == {}


def test_positions_ahead_of_a_guess_are_picked_but_never_past_the_block():
    probes = {0: Probe(2, [5, 6], ahead=3)}  # judged 2..4, then 5..7 run ahead for new guesses
    b_idx, a_idx = positions(torch.tensor([0]), torch.tensor([2]), probes, width=10)
    assert a_idx.tolist() == [2, 3, 4, 5, 6, 7]
    b_idx, a_idx = positions(torch.tensor([0]), torch.tensor([2]), probes, width=6)
    assert a_idx.tolist() == [2, 3, 4, 5]


def _forwards(engine, sampler, key: str, prefix: str = REPEATED):
    """The completion of `prefix` and, for every forward it ran, its width and whether it was causal."""
    steps = engine.infill_steps([InfillRequest(prefix, AFTER)], sampler=sampler, cache_key=key)
    seen = []
    try:
        while True:
            forward = next(steps)
            if forward is not None:
                seen.append((forward.ids.shape[1], forward.causal))
    except StopIteration as done:
        return done.value[0], seen


@torch.inference_mode()
def test_the_shipped_model_copies_a_repeated_line_in_fewer_forwards(shipped):
    base = shipped.sampler.with_(span=24)
    assert base.span_window  # the shipped model decodes in windows
    # One letter typed: the shipped model's own first pick after `print("area", ` is `height`.
    typed = REPEATED + "w"
    plain = shipped.infill(typed, AFTER, sampler=base.with_(window_lookup=False), cache_key="plain")
    looked = shipped.infill(typed, AFTER, sampler=base.with_(window_lookup=True), cache_key="looked")
    assert plain.stats.lookup_kept == 0
    assert looked.stats.lookup_kept >= 4  # the rest of the print line came from the lookup
    assert looked.stats.forwards < plain.stats.forwards
    assert looked.text.startswith('idth, height, total)')
    assert looked.stats.span_tokens / looked.stats.forwards > plain.stats.span_tokens / plain.stats.forwards


@torch.inference_mode()
def test_a_proposal_is_judged_causally_so_no_pick_sees_its_own_proposed_token(shipped):
    sampler = shipped.sampler.with_(span=24, window_lookup=True)
    c, seen = _forwards(shipped, sampler, "causal")
    assert c.stats.lookup_kept > 0
    judged = [T for T, causal in seen if causal]
    assert judged and max(judged) > 2 * sampler.block_size  # windows widened to a proposal, causal
    assert not seen[0][1]  # the whole-span first step is not


@torch.inference_mode()
def test_window_lookup_stays_off_with_a_temperature_and_without_windows(shipped):
    base = shipped.sampler.with_(span=24, window_lookup=True)
    for sampler in (base.with_(temperature=0.7, seed=1), base.with_(span_window=False)):
        c = shipped.infill(REPEATED, AFTER, sampler=sampler, cache_key="off")
        assert c.stats.lookup_kept == 0 and c.stats.forwards > 0


def test_the_setting_must_be_a_bool():
    with pytest.raises(ValueError, match="window_lookup"):
        SamplerConfig(window_lookup="yes")


@pytest.mark.parametrize("bad", [-1, 17, True, 1.5])
def test_window_guesses_must_be_a_small_count(bad):
    with pytest.raises(ValueError, match="window_guesses"):
        SamplerConfig(window_guesses=bad)


@torch.inference_mode()
def test_the_shipped_model_keeps_its_own_guesses_only_where_its_picks_agree(shipped):
    """Without lookup, the model's guesses are its only proposals: a forward that judges them
    runs causally past the judged positions, and a guess kept is a token its pick agreed with."""
    base = shipped.sampler.with_(span=24, window_lookup=False)
    line = "width, height, total)"  # the copied line, typed a character at a time
    saved = []
    for k in range(len(line)):
        typed = REPEATED + line[:k]
        plain = shipped.infill(typed, AFTER, sampler=base, cache_key=f"plain{k}")
        c, seen = _forwards(shipped, base.with_(window_guesses=2), f"guess{k}", typed)
        assert plain.stats.guess_kept == 0 and c.stats.lookup_kept == 0
        assert seen and not seen[0][1]  # the whole-span first step is not causal
        if c.stats.guess_kept:  # a kept guess was judged by a causal forward
            assert any(causal for _, causal in seen[1:])
        if c.stats.guess_kept and c.text == plain.text and c.stats.forwards < plain.stats.forwards:
            saved.append(k)
    # This small model guesses the token after next right rarely: 4 of the line's 21 cursors
    # keep a guess, write the same text and save a forward.
    assert saved

