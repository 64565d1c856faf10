"""Draft-seeded denoising: the model keeps the draft tokens it agrees with and rewrites the rest.

The behaviour tests run on the shipped default model (small and trained, and trained to
judge visible draft tokens); the mechanics run on tiny random checkpoints of each family.
"""

import pytest
import torch

import tiny
from redraft.engine import Engine, InfillRequest, SamplerConfig

# An `except` clause with the class name half typed: the model is sure how it ends.
PREFIX = "def load(registry, name):\n    try:\n        return registry[name]\n    except KeyErr"
SUFFIX = "\n        return None\n"
SURE = dict(min_score=float("-inf"), draft_keep=0.5)


@pytest.fixture(scope="module")
def shipped():
    # float32: int8 linears (the CPU default where faster) quantize activations over the whole
    # batch, so a row may differ in a near tie with other rows beside it (test_int8.py).
    return Engine.load("redraft-diffusion", dtype="float32")


@pytest.mark.parametrize("rule", ["keep", "override"])
def test_a_right_draft_is_kept_whole_in_one_forward(shipped, rule):
    scfg = shipped.config.sampler.with_(span=8, draft_rule=rule, **SURE)
    out = shipped.infill(PREFIX, SUFFIX, drafts=["or:"], sampler=scfg)
    assert out.text == "or:"
    st = out.stats
    assert st.drafts == 1 and st.draft == 0 and st.draft_kept == len(out.token_ids) + 1  # + its end token
    assert st.forwards == 1 and st.steps == 1  # judged once, nothing left to denoise


@pytest.mark.parametrize("wrong", ["or;", "or,", "or :"])
def test_a_wrong_token_is_replaced(shipped, wrong):
    scfg = shipped.config.sampler.with_(span=8, **SURE)
    out = shipped.infill(PREFIX, SUFFIX, drafts=[wrong], sampler=scfg)
    assert out.text == "or:"
    assert out.stats.draft == 0 and out.stats.draft_kept == 2  # "Error" and the end stayed, the ":" was redone


def test_the_first_whole_draft_wins_and_drafts_propose_their_length(shipped):
    scfg = shipped.config.sampler.with_(span=8, **SURE)
    out = shipped.infill(PREFIX, SUFFIX, drafts=["or;", "or:", "or: pass"], sampler=scfg)
    assert out.text == "or:" and out.stats.draft == 1 and out.stats.drafts == 3 and out.length == 3


@pytest.mark.parametrize("beside", [False, True])
def test_first_step_length_choice_keeps_each_rows_draft_counts(shipped, beside):
    """Candidate lengths pruned after the first step: the winning draft row still reports the
    draft tokens it kept (and a plain row none), alone or beside another request."""
    # Two lengths: the draft's (3) and a plain row's (4). Longer plain rows would win on this
    # model's first-step confidence (it is sure a `raise` line follows) and leave no draft row.
    scfg = shipped.config.sampler.with_(lengths=(4,), length_choice="first_step", **SURE)
    requests = [InfillRequest(PREFIX, SUFFIX, drafts=("or;",))] + [InfillRequest(PREFIX, SUFFIX)] * beside
    out = shipped.infill_batch(requests, sampler=scfg)
    assert out[0].text == "or:" and out[0].stats.rows == 2 + beside
    assert out[0].stats.draft == 0 and out[0].stats.draft_kept == 2  # "Error" and the end, as with one length
    if beside:
        assert out[1].stats.draft == -1 and out[1].stats.draft_kept == 0


def test_abstains_when_every_candidate_is_unlikely(shipped):
    # Before the class name is typed the model is not sure which exception comes, and both
    # drafts are wrong (with "KeyErr" typed it is sure of "or:" and rightly answers).
    prefix = PREFIX.removesuffix("KeyErr")
    scfg = shipped.config.sampler.with_(span=8, min_score=-0.05, draft_bonus=0.0)
    out = shipped.infill(prefix, SUFFIX, drafts=["or;", "ception as e:"], sampler=scfg)
    assert out.abstained and out.text == "" and out.score < -0.05
    # The same request with the bar lowered answers, and says what it scored.
    out = shipped.infill(prefix, SUFFIX, drafts=["or;", "ception as e:"], sampler=scfg.with_(min_score=-50.0))
    assert not out.abstained and out.text and out.score >= -50.0


def test_drafts_do_not_change_the_plain_candidate(shipped):
    """The all-mask row denoises the same with or without draft rows beside it."""
    scfg = shipped.config.sampler.with_(span=8, min_score=float("-inf"), draft_bonus=-100.0)
    plain = shipped.infill(PREFIX, SUFFIX, sampler=scfg)
    mixed = shipped.infill(PREFIX, SUFFIX, drafts=["or;"], sampler=scfg.with_(draft_rule="keep", draft_keep=1.0))
    assert mixed.stats.draft == -1 and mixed.text == plain.text


@pytest.mark.parametrize("family", ["redraft", "dream"])
def test_same_seed_same_text(tmp_path_factory, family):
    engine = Engine.load(tiny.make_family(tmp_path_factory.mktemp("seeded") / family, family), dtype="float32")
    scfg = SamplerConfig(span=6, temperature=1.0, seed=7, draft_keep=0.2)
    runs = [engine.infill("def add(a, b):\n    return ", "\n", drafts=["a + b", "b - a"], sampler=scfg).text
            for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize("family", ["dream", "llada", "redraft"])
def test_draft_scoring_per_family(tmp_path_factory, family):
    """A threshold of 0 keeps any draft whole (one judging pass); 1 keeps nothing (all redone)."""
    engine = Engine.load(tiny.make_family(tmp_path_factory.mktemp("scoring") / family, family), dtype="float32")
    expected = "visible" if family == "redraft" else "masked"
    assert engine.model_config.draft_scoring == expected
    prefix, draft = "def add(a, b):\n    return ", "a + b"
    kept = engine.infill(prefix, "\n", drafts=[draft], sampler=SamplerConfig(span=6, heal=False, draft_keep=0.0))
    assert kept.text == draft and kept.stats.draft == 0 and kept.stats.forwards == 1
    redone = engine.infill(prefix, "\n", drafts=[draft], sampler=SamplerConfig(span=6, heal=False, draft_keep=1.0))
    assert redone.stats.draft_kept == 0 and redone.stats.forwards > 1


def test_causal_models_ignore_drafts(tmp_path_factory):
    engine = Engine.load(tiny.make_family(tmp_path_factory.mktemp("ar") / "ar", "redraft-ar"), dtype="float32")
    scfg = SamplerConfig(span=6, heal=False)
    plain = engine.infill("x = ", "\n", sampler=scfg)
    seeded = engine.infill("x = ", "\n", drafts=["1 + 2"], sampler=scfg)
    assert seeded.text == plain.text and seeded.stats.drafts == 0


def test_bad_draft_settings_are_rejected():
    for bad in (dict(draft_rule="maybe"), dict(draft_keep=1.5)):
        with pytest.raises(ValueError):
            SamplerConfig(**bad)


@pytest.mark.parametrize("healed,text,first", [("translate", "d to styles.", "translate"), ("_st", "art > line", "_start"),
                                               ("ind", "er:", "ind"), ("val", "ue)", "value")])
def test_drafts_start_with_a_token_healing_allows(shipped, healed, text, first):
    tok = shipped.tokenizer
    ids = tok.encode_healed(healed, text)
    assert tok.strings()[ids[0]] == first and tok.decode(ids) == healed + text


@pytest.mark.parametrize("family", ["dream", "llada"])
def test_a_whole_draft_leaves_the_other_requests_of_a_batch_alone(engines, family):
    """A request answered by a whole draft drops its other rows before the first step; the
    other requests of the batch (full attention: their first step reads the encoding pass)
    denoise exactly as they would alone."""
    engine = engines[family]
    scfg = SamplerConfig(span=8, heal=False, draft_keep=0.0)  # draft_keep 0: every draft is kept whole
    prompts = [("for i in range(", "):\n    print(i)\n"), ("items = [1, 2, 3]\ntotal = ", "\nname = 'x'\n")]
    alone = [engine.infill(p, s, sampler=scfg, cache_key=f"alone{i}").token_ids for i, (p, s) in enumerate(prompts)]
    drafted = InfillRequest("def add(a, b):\n    return ", "\n", drafts=("a + b",))
    out = engine.infill_batch([drafted] + [InfillRequest(p, s) for p, s in prompts], sampler=scfg)
    assert out[0].text == "a + b" and out[0].stats.draft == 0
    assert [c.token_ids for c in out[1:]] == alone


def test_plain_rows_stop_once_a_finished_draft_leads_them_beyond_reach(shipped):
    """The all-mask row runs on only while it could still win: once the draft row is finished
    and leads by more than `beaten_margin` (its bonus counted), it stops; the answer is the same."""
    scfg = shipped.config.sampler.with_(span=16, draft_bonus=5.0, **SURE)
    never = shipped.infill(PREFIX, SUFFIX, drafts=["or;"], sampler=scfg.with_(beaten_margin=float("inf")))
    out = shipped.infill(PREFIX, SUFFIX, drafts=["or;"], sampler=scfg)
    assert never.text == out.text == "or:" and never.stats.draft == out.stats.draft == 0
    assert out.stats.steps < never.stats.steps and out.stats.forwards < never.stats.forwards
    # Without a bonus a draft row has no lead a plain row cannot close: both run to the end.
    even = shipped.infill(PREFIX, SUFFIX, drafts=["or;"], sampler=scfg.with_(draft_bonus=0.0))
    assert even.stats.steps == never.stats.steps


def test_the_judging_forward_runs_only_the_rows_holding_a_draft(shipped):
    """The plain row beside a draft is all masks: judging it would buy nothing, since its first
    step runs the whole span anyway. Its answer is the same as without the draft beside it."""
    scfg = shipped.config.sampler.with_(span=8, **SURE)
    steps = shipped.infill_steps([InfillRequest(PREFIX, SUFFIX, drafts=["or;"])], sampler=scfg, cache_key="judge")
    rows = []
    try:
        while True:
            forward = next(steps)
            if forward is not None:
                rows.append(forward.ids.shape[0])
    except StopIteration as done:
        out = done.value[0]
    assert out.stats.drafts == 1 and out.stats.rows == 2  # the draft's row and the plain one
    assert rows[0] == 1  # judging: the draft's row alone
    assert max(rows[1:]) == 2  # then both rows denoise
    assert out.text == "or:"


def test_draft_rows_are_one_run_of_rows_or_all_of_them():
    from redraft.engine.sampler import _draft_rows
    seeded = torch.tensor([[True, False], [False, True], [False, False]])
    assert _draft_rows(seeded) == slice(0, 2)
    assert _draft_rows(seeded[1:]) == slice(0, 1)
    assert _draft_rows(seeded[[2, 0, 1]]) == slice(1, 3)
    assert _draft_rows(seeded[:2]) is None  # every row holds a draft token
    assert _draft_rows(seeded[[0, 2, 1]]) is None  # not one run: all rows, as before
    assert _draft_rows(seeded[2:]) is None
