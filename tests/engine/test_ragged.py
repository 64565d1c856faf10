"""Several runs' step forwards as one pass (engine/ragged.py): each run gets what its own
forward gives, and runs stepped together answer as they do alone."""

import pytest
import torch

from redraft.engine import Engine, EngineConfig, InfillRequest, SamplerConfig
from redraft.engine.cache import KVCache
from redraft.engine.ragged import Forward, run_together

GREEDY = SamplerConfig(span=8, heal=False)
PROMPTS = [("def add(a, b):\n    return ", "\n\n\nclass Point:\n"),
           ("for i in range(", "):\n    print(i)\n"),
           ("items = [1, 2, 3]\ntotal = ", "\nname = 'x'\n"),
           ("class Point:\n    def __init__(self, x, y):\n        self.", "\n        self.y = y\n")]


def _forward(model, B, C, T, padded: bool, seed: int) -> Forward:
    """A run paused at a step: a context of C tokens (the last rows' shorter, masked out when
    `padded`) encoded into its own cache, an active block of B x T tokens."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    vocab = cfg.vocab_size - 8
    kv = KVCache(cfg.num_hidden_layers, B, cfg.num_key_value_heads, C + T, cfg.head_dim, torch.float32, "cpu")
    ctx = torch.randint(2, vocab, (B, C), generator=g)
    valid = torch.ones(B, C + T, dtype=torch.bool)
    if padded:
        valid[-1, C - 3:C] = False
    model(ctx, torch.arange(C).expand(B, C), kv, start=0, causal=True, key_valid=valid[:, :C])
    ids = torch.randint(2, vocab, (B, T), generator=g)
    return Forward(model, ids, torch.arange(C, C + T).expand(B, T), kv, C, None if not padded else valid)


@torch.inference_mode()
def test_forwards_run_together_give_each_run_its_own_hidden_states_and_cache(engines):
    model = engines["redraft"].model
    shapes = [(1, 40, 6, False), (3, 17, 9, True), (2, 64, 1, False)]
    together = [_forward(model, *shape, seed=i) for i, shape in enumerate(shapes)]
    alone = [_forward(model, *shape, seed=i) for i, shape in enumerate(shapes)]
    run_together(together)
    for t, a, (B, C, T, _) in zip(together, alone, shapes):
        a.run()
        assert t.hidden is not None and t.hidden.shape == (B, T, model.config.hidden_size)
        torch.testing.assert_close(t.hidden, a.hidden, rtol=1e-4, atol=1e-4)
        for k_t, k_a in zip(t.kv.k + t.kv.v, a.kv.k + a.kv.v):  # the block's keys/values written in place
            torch.testing.assert_close(k_t[:, :, C:C + T], k_a[:, :, C:C + T], rtol=1e-4, atol=1e-4)
            assert bool(k_t[:, :, C:C + T].abs().sum() > 0)



def _padded_rows(model, lengths: list[int], T: int, seed: int) -> Forward:
    """One run's block of len(lengths) rows over a shared context of 20 tokens, row b's tokens
    the first lengths[b] of T, the rest padding (drafts of different lengths)."""
    f = _forward(model, len(lengths), 20, T, padded=False, seed=seed)
    valid = torch.ones(len(lengths), 20 + T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        valid[b, 20 + n:] = False
    f.key_valid = valid
    return f


@torch.inference_mode()
def test_padded_rows_run_cut_to_their_own_length_and_match_the_padded_forward(engines):
    model = engines["redraft"].model
    lengths, T = [12, 3, 5], 12
    trimmed = _padded_rows(model, lengths, T, seed=7)
    parts = trimmed.rows_trimmed()
    assert parts is not None and [p.ids.shape[1] for p in parts] == lengths  # 20 of 36 positions run
    padded = _padded_rows(model, lengths, T, seed=7)
    padded.hidden = model(padded.ids, padded.pos, padded.kv, start=padded.start, key_valid=padded.key_valid)
    trimmed.run()
    assert trimmed.hidden.shape == padded.hidden.shape
    for b, n in enumerate(lengths):
        torch.testing.assert_close(trimmed.hidden[b, :n], padded.hidden[b, :n], rtol=1e-4, atol=1e-4)
        assert bool((trimmed.hidden[b, n:] == 0).all())  # padding ran nowhere
        for k_t, k_p in zip(trimmed.kv.k + trimmed.kv.v, padded.kv.k + padded.kv.v):
            torch.testing.assert_close(k_t[b, :, 20:20 + n], k_p[b, :, 20:20 + n], rtol=1e-4, atol=1e-4)
    # merged with another run's forward, the same again
    other, again = _forward(model, 2, 30, 4, padded=False, seed=3), _padded_rows(model, lengths, T, seed=7)
    run_together([other, again])
    for b, n in enumerate(lengths):
        torch.testing.assert_close(again.hidden[b, :n], padded.hidden[b, :n], rtol=1e-4, atol=1e-4)
    alone = _forward(model, 2, 30, 4, padded=False, seed=3)
    torch.testing.assert_close(other.hidden, alone.run(), rtol=1e-4, atol=1e-4)


@torch.inference_mode()
def test_rows_little_padded_or_padded_inside_run_as_one_block(engines):
    model = engines["redraft"].model
    assert _padded_rows(model, [12, 11, 10], 12, seed=1).rows_trimmed() is None  # 3 of 36 padded
    holes = _padded_rows(model, [12, 2, 2], 12, seed=1)
    holes.key_valid[1, 20 + 5] = True  # a valid token after padding: not a prefix
    assert holes.rows_trimmed() is None
    assert _forward(model, 2, 20, 6, padded=False, seed=1).rows_trimmed() is None  # no padding at all

def _step_together(engine, runs):
    """Drive several infill_steps generators as a scheduler would: each to its next forward,
    those forwards as one, each past it. Returns each run's answer and the merged sizes."""
    results, sizes, live = {}, [], dict(enumerate(runs))

    def resume(i):
        try:
            return next(live[i])
        except StopIteration as done:
            results[i] = done.value
            del live[i]
            return None
    while live:
        pending = {i: resume(i) for i in list(live)}
        forwards = {i: f for i, f in pending.items() if f is not None and i in live}
        if forwards:
            engine.run_forwards(list(forwards.values()))
            assert all(f.hidden is not None for f in forwards.values())  # run here, not by each run
            sizes.append(len(forwards))
        for i in forwards:
            if i in live:
                resume(i)
    return [results[i] for i in range(len(runs))], sizes


@pytest.mark.parametrize("family", ["redraft", "dream"])
def test_runs_stepped_together_answer_as_they_do_alone(engines, family):
    engine = engines[family]
    fresh = Engine(engine.model, engine.tokenizer, EngineConfig(reuse_cache=False), name="fresh")
    settings = [GREEDY, GREEDY.with_(span=4), GREEDY.with_(span=12, threshold=0.3), GREEDY]
    requests = [[InfillRequest(p, s)] for p, s in PROMPTS]
    requests[3] = [InfillRequest(*PROMPTS[3], drafts=("x, y)",)), InfillRequest(*PROMPTS[0])]
    want = [fresh.infill_batch(r, sampler=s) for r, s in zip(requests, settings)]
    runs = [fresh.infill_steps(r, sampler=s, cache_key=f"d{i}") for i, (r, s) in enumerate(zip(requests, settings))]
    got, sizes = _step_together(fresh, runs)
    assert max(sizes) == 4  # every run's step forward in one pass
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        assert [c.token_ids for c in g] == [c.token_ids for c in w]
        assert [c.text for c in g] == [c.text for c in w]


def test_an_engine_with_a_static_step_takes_turns_once_its_steps_are_dynamic(engines):
    engine = engines["redraft"]
    static = Engine(engine.model, engine.tokenizer, EngineConfig(reuse_cache=False, step_graphs="on"), name="static")
    want = static.infill(*PROMPTS[0], sampler=GREEDY)
    assert not static.interleavable and static.steps is not None
    static.dynamic_steps()
    assert static.interleavable and static.steps is None
    runs = [static.infill_steps([InfillRequest(p, s)], sampler=GREEDY, cache_key=f"s{i}")
            for i, (p, s) in enumerate(PROMPTS[:2])]
    got, sizes = _step_together(static, runs)
    assert max(sizes) == 2
    assert got[0][0].token_ids == want.token_ids
