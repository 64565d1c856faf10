"""Span windows (SamplerConfig.span_window, sampler.py `_window`): after a forward over the whole
span, a denoising step runs only the open block's window, attending to what is before it and to
itself; the positions already committed before the window are never run again."""

import torch

from redraft.engine import Engine, EngineConfig, InfillRequest, SamplerConfig
from redraft.engine.cache import KVCache
from redraft.engine.ragged import Forward, run_together

PROMPT = ("def area(width, height):\n    result = ", "\n    return result\n\n\nclass Box:\n    pass\n")


def _span(model, B, C, A, padded, seed):
    """A context of C tokens encoded into a cache with room for a span of A, and span ids."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    kv = KVCache(cfg.num_hidden_layers, B, cfg.num_key_value_heads, C + A, cfg.head_dim, torch.float32, "cpu")
    valid = torch.ones(B, C + A, dtype=torch.bool)
    if padded:
        valid[-1, C - 2:C] = False
    model(torch.randint(2, cfg.vocab_size - 8, (B, C), generator=g), torch.arange(C).expand(B, C), kv, start=0,
          causal=True, key_valid=valid[:, :C])
    ids = torch.randint(2, cfg.vocab_size - 8, (B, A), generator=g)
    return kv, ids, torch.arange(C, C + A).expand(B, A), None if not padded else valid


@torch.inference_mode()
def test_a_window_is_the_whole_forward_over_the_same_keys_and_writes_only_its_own_slots(engines):
    model = engines["redraft"].model
    B, C, A, lo, hi = 2, 30, 12, 4, 7
    for padded in (False, True):
        kv, ids, pos, valid = _span(model, B, C, A, padded, seed=3)
        Forward(model, ids, pos, kv, C, valid).run()  # the whole span: every slot written
        upto = None if valid is None else valid[:, :C + hi]
        # the span up to the window's end, from its start: what the window attends to
        whole = Forward(model, ids[:, :hi], pos[:, :hi], kv, C, upto).run()
        part = Forward(model, ids[:, lo:hi], pos[:, lo:hi], kv, C + lo, upto).run()
        torch.testing.assert_close(part, whole[:, lo:hi], rtol=1e-4, atol=1e-4)
        before = [t.clone() for t in kv.k + kv.v]
        # a changed token inside the window changes its own slots only: nothing before the
        # window, and nothing after it, which it does not see
        changed = ids.clone()
        changed[:, lo + 1] = 5
        Forward(model, changed[:, lo:hi], pos[:, lo:hi], kv, C + lo, upto).run()
        for t, b in zip(kv.k + kv.v, before):
            assert torch.equal(t[:, :, :C + lo], b[:, :, :C + lo])
            assert torch.equal(t[:, :, C + hi:], b[:, :, C + hi:])
            assert not torch.allclose(t[:, :, C + lo + 1], b[:, :, C + lo + 1])


@torch.inference_mode()
def test_a_window_runs_with_other_runs_forwards_as_it_runs_alone(engines):
    model = engines["redraft"].model
    runs = []
    for _ in range(2):
        kv, ids, pos, valid = _span(model, 2, 25, 10, True, seed=5)
        Forward(model, ids, pos, kv, 25, valid).run()
        kv2, ids2, pos2, _ = _span(model, 1, 40, 6, False, seed=6)
        runs.append([Forward(model, ids[:, 3:6], pos[:, 3:6], kv, 28, valid[:, :31]),
                     Forward(model, ids2, pos2, kv2, 40, None)])
    run_together(runs[0])
    for f in runs[1]:
        f.run()
    assert runs[0][0].hidden.shape == (2, 3, model.config.hidden_size)
    for t, a in zip(runs[0], runs[1]):
        torch.testing.assert_close(t.hidden, a.hidden, rtol=1e-4, atol=1e-4)


@torch.inference_mode()
def _forwards(engine, sampler):
    """Run one request step by step; every forward it asks for, run, and the completion."""
    seen = []
    steps = engine.infill_steps([InfillRequest(*PROMPT)], sampler=sampler, cache_key="w")
    try:
        while True:
            f = next(steps)
            if f is not None:
                seen.append((f.start, f.ids.shape[1]))
                f.run()
    except StopIteration as done:
        return seen, done.value[0]


def test_steps_after_the_first_run_only_the_open_block_and_never_what_it_left(engines):
    engine = Engine(engines["redraft"].model, engines["redraft"].tokenizer, EngineConfig(reuse_cache=False),
                    name="w")
    sampler = SamplerConfig(span=12, heal=False, block_size=2, threshold=1.0, span_window=True)
    seen, c = _forwards(engine, sampler)
    assert c.token_ids, "the tiny model writes something here"
    span_start, A = seen[0]  # the first step ran the whole span
    windows = seen[1:]
    assert A >= sampler.span and windows and c.stats.window_steps == len(windows)
    assert all(T <= 2 * sampler.block_size for _, T in windows)  # the open block and what just committed
    assert all(span_start <= start and start + T <= span_start + A for start, T in windows)
    starts = [start for start, _ in windows]
    assert starts == sorted(starts)  # left behind, a position is never run again
    assert c.stats.positions == A + sum(T for _, T in windows) < A * len(seen)


def test_a_refresh_every_step_is_the_whole_span_every_step(engines):
    engine = Engine(engines["redraft"].model, engines["redraft"].tokenizer, EngineConfig(reuse_cache=False),
                    name="w1")
    base = SamplerConfig(span=12, heal=False, block_size=2, threshold=0.5)
    want = engine.infill(*PROMPT, sampler=base, cache_key="a")
    seen, got = _forwards(engine, base.with_(span_window=True, window_refresh=1))
    assert all(T == seen[0][1] for _, T in seen) and got.stats.window_steps == 0
    assert got.token_ids == want.token_ids
    seen, windowed = _forwards(engine, base.with_(span_window=True, window_refresh=3))
    assert 0 < windowed.stats.window_steps < len(seen)
    assert sum(T == seen[0][1] for _, T in seen) == len(seen) - windowed.stats.window_steps


def test_models_without_a_both_ways_span_never_take_a_window(engines):
    for family in ("dream", "llada"):  # "full" attention: the context attends to the span
        engine = engines[family]
        c = engine.infill(*PROMPT, sampler=SamplerConfig(span=8, heal=False, block_size=2, span_window=True))
        assert c.stats.window_steps == 0 and c.stats.forwards > 0
