"""Sampler behaviour on tiny random models: exactness of the cache, invariants, control."""

import pytest
import torch

import tiny
from redraft.engine import CancelFlag, Cancelled, Engine, EngineConfig, SamplerConfig
from redraft.engine.batch import make_batch
from redraft.engine.layout import build_row
from redraft.engine.sampler import Denoiser

PROMPTS = [("def add(a, b):\n    return ", "\n\n\nclass Point:\n"),
           ("for i in range(", "):\n    print(i)\n"),
           ("items = [1, 2, 3]\ntotal = ", "\nname = 'x'\n"),
           ("class Point:\n    def __init__(self, x, y):\n        self.", "\n        self.y = y\n")]
GREEDY = SamplerConfig(span=8, heal=False)


def naive(engine: Engine, prefix: str, suffix: str, scfg: SamplerConfig) -> list[int]:
    """Reference: the whole sequence through the model every step, no cache, same unmasking rule."""
    cfg, tok, model = engine.model_config, engine.tokenizer, engine.model
    row = build_row(cfg, tok.encode(prefix), tok.encode(suffix), [], scfg.span)
    ids = torch.tensor([row.ctx_ids + row.act_ids])
    pos = torch.tensor([row.ctx_pos + row.act_pos])
    C, at, shift = len(row.ctx_ids), row.span_at, int(cfg.shifted)
    ends = torch.tensor(cfg.end_token_ids)
    while True:
        span = ids[0, C + at:]
        masked = (span == cfg.mask_token_id).nonzero(as_tuple=True)[0]
        if masked.numel() == 0:
            return span.tolist()
        with torch.no_grad():
            h = model(ids, pos)[0, C + at + masked - shift]
            logits = model.logits(h)
        logits[:, engine._vocab_limit:] = float("-inf")
        logits[:, engine._banned] = float("-inf")  # the mask and the non-end special tokens
        p = logits.softmax(-1)
        conf, tokens = p.max(-1)
        early_end = torch.isin(tokens, ends) & (masked > masked.min())  # ends wait for what is before them
        conf[early_end] = -1.0
        k = max(1, int((conf >= scfg.threshold).sum()))
        for j in conf.topk(k).indices.tolist():
            ids[0, C + at + masked[j]] = tokens[j]
            if tokens[j] in ends:  # positions after an end token become padding
                rest = ids[0, C + at + masked[j] + 1:]
                rest[rest == cfg.mask_token_id] = cfg.pad_token_id if cfg.pad_token_id is not None else int(ends[0])


def trimmed(engine, ids):
    ends = set(engine.model_config.end_token_ids)
    for n, t in enumerate(ids):
        if t in ends:
            return ids[:n]
    return ids


@pytest.mark.parametrize("family", ["dream", "llada"])
@pytest.mark.parametrize("threshold", [0.9, 0.05])
def test_refresh_every_step_equals_full_recomputation(engines, family, threshold):
    engine = engines[family]
    scfg = GREEDY.with_(refresh_every=1, threshold=threshold)
    for prefix, suffix in PROMPTS:
        got = engine.infill(prefix, suffix, sampler=scfg)
        assert got.token_ids == trimmed(engine, naive(engine, prefix, suffix, scfg))


@pytest.mark.parametrize("family", ["dream", "llada", "redraft"])
def test_previews_in_order_and_invariants(engines, family):
    engine = engines[family]
    previews = []
    out = engine.infill(*PROMPTS[0], sampler=GREEDY.with_(threshold=0.5), on_preview=previews.append)
    assert [p.step for p in previews] == list(range(1, len(previews) + 1))
    assert len(previews) == out.stats.steps == out.stats.forwards
    masked = [p.masked for p in previews]
    assert masked == sorted(masked, reverse=True) and masked[-1] == 0
    assert previews[-1].text == out.text
    assert engine.model_config.mask_token_id not in out.token_ids
    assert out.stats.context_tokens > 0 and out.stats.encode_ms > 0


@pytest.mark.parametrize("family", ["dream", "redraft"])
def test_context_and_anchor_untouched(engines, family):
    engine = engines[family]
    cfg, tok = engine.model_config, engine.tokenizer
    rows = [build_row(cfg, tok.encode(p), tok.encode(s), [], 6) for p, s in PROMPTS]
    batch = make_batch(rows, engine._pad_id, "cpu")
    before = (batch.ctx_ids.clone(), batch.act_ids[:, :batch.span_at].clone())
    d = Denoiser(engine.model, GREEDY, list(range(len(rows))), engine._end_ids, engine._pad_id, engine._banned)
    with torch.inference_mode():
        out = d.run(batch)
    assert torch.equal(out.batch.ctx_ids, before[0])
    assert torch.equal(out.x[:, :out.batch.span_at], before[1])
    assert not bool((out.x == cfg.mask_token_id).any())


@pytest.mark.parametrize("family", ["dream", "redraft", "redraft-ar"])
def test_cancel_stops_within_one_step(engines, family):
    engine = engines[family]
    flag, previews = CancelFlag(), []

    def on_preview(p):
        previews.append(p)
        flag.cancel()

    with pytest.raises(Cancelled):
        engine.infill(*PROMPTS[1], sampler=GREEDY.with_(threshold=1.0), on_preview=on_preview, cancel=flag)
    assert len(previews) == 1
    previews.clear()
    with pytest.raises(Cancelled):
        engine.infill(*PROMPTS[1], sampler=GREEDY, on_preview=previews.append, cancel=flag)
    assert previews == []


@pytest.mark.parametrize("family", ["dream", "redraft", "redraft-ar"])
def test_seeded_sampling_is_deterministic(engines, family):
    engine = engines[family]
    scfg = SamplerConfig(span=8, temperature=1.0, top_p=0.95)
    runs = {seed: [engine.infill(*PROMPTS[2], sampler=scfg.with_(seed=seed)).token_ids for _ in range(2)]
            for seed in range(4)}
    assert all(a == b for a, b in runs.values())
    assert len({tuple(a) for a, _ in runs.values()}) > 1


@pytest.mark.parametrize("family", ["dream", "llada", "redraft", "redraft-ar"])
def test_batch_equals_one_by_one(engines, family):
    engine = engines[family]
    alone = [engine.infill(p, s, sampler=GREEDY, cache_key=f"k{i}").token_ids for i, (p, s) in enumerate(PROMPTS)]
    from redraft.engine import InfillRequest
    together = engine.infill_batch([InfillRequest(p, s) for p, s in PROMPTS], sampler=GREEDY)
    assert [c.token_ids for c in together] == alone


@pytest.mark.parametrize("family", ["dream", "redraft"])
@pytest.mark.parametrize("choice", ["final", "first_step"])
def test_several_lengths_pick_one(engines, family, choice):
    engine = engines[family]
    scfg = GREEDY.with_(lengths=(3, 6, 12), length_choice=choice)
    out = engine.infill(*PROMPTS[3], sampler=scfg)
    assert out.length in (3, 6, 12) and out.stats.rows == 3
    assert len(out.token_ids) <= out.length
    if choice == "final":  # rows are independent, so the winner is what that length gives alone
        assert out.token_ids == engine.infill(*PROMPTS[3], sampler=GREEDY.with_(span=out.length)).token_ids


@pytest.mark.parametrize("family", ["dream", "redraft-ar"])
def test_token_healing_regenerates_the_partial_token(engines, family):
    engine = engines[family]
    tok = engine.tokenizer
    prefix = "def ad"
    last = tok.decode([tok.encode(prefix)[-1]])
    out = engine.infill(prefix, "(a, b):\n", sampler=GREEDY.with_(heal=True))
    assert out.healed == last
    assert tok.decode([out.token_ids[0]]).startswith(last)
    assert engine.infill(prefix, "", sampler=GREEDY).healed == ""


@pytest.mark.parametrize("family", ["redraft", "redraft-ar"])
def test_context_reuse_is_exact(engines, family):
    engine = engines[family]
    fresh = Engine(engine.model, engine.tokenizer, EngineConfig(reuse_cache=False), name="fresh")
    prefix, suffix = PROMPTS[0]
    engine.infill(prefix, suffix, sampler=GREEDY, cache_key="typing")
    for typed in ("a", "a +", "a + b"):
        got = engine.infill(prefix + typed, suffix, sampler=GREEDY, cache_key="typing")
        assert got.stats.reused_tokens > 0
        assert got.token_ids == fresh.infill(prefix + typed, suffix, sampler=GREEDY).token_ids


def test_autoregressive_equals_naive_greedy(engines):
    engine = engines["redraft-ar"]
    cfg, tok, model = engine.model_config, engine.tokenizer, engine.model
    prefix, suffix = PROMPTS[2]
    row = build_row(cfg, tok.encode(prefix), tok.encode(suffix), [], 8)
    ids = row.ctx_ids + row.act_ids[:1]
    want = []
    with torch.no_grad():
        for _ in range(8):
            logits = model.logits(model(torch.tensor([ids]), torch.arange(len(ids))[None], causal=True)[0, -1])
            logits[engine._vocab_limit:] = float("-inf")
            logits[engine._banned] = float("-inf")
            t = int(logits.argmax())
            if t in cfg.end_token_ids:
                break
            want.append(t)
            ids.append(t)
    assert engine.infill(prefix, suffix, sampler=GREEDY).token_ids == want


def test_end_token_ends_the_span(tmp_path):
    engine = Engine.load(tiny.make_family(tmp_path, "dream"), dtype="float32")
    # Flat logits: argmax takes the first id, which is the end token in the tiny vocabulary.
    assert tiny.token_id(tmp_path, "<|endoftext|>") == 0
    with torch.no_grad():
        engine.model.lm_head.weight.zero_()
    out = engine.infill("x = ", "\n", sampler=GREEDY)
    assert out.text == "" and out.token_ids == []
    # Ends are committed in order, so the first position ends the span in one step and the
    # rest becomes padding instead of being denoised.
    assert out.stats.steps == 1


@pytest.mark.parametrize("family", ["dream", "redraft"])
def test_step_cap_and_fixed_tokens_per_step(engines, family):
    engine = engines[family]
    capped = engine.infill(*PROMPTS[0], sampler=GREEDY.with_(threshold=1.0, max_steps=2, end_fills_rest=False))
    assert capped.stats.steps == 2
    fixed = engine.infill(*PROMPTS[0], sampler=GREEDY.with_(threshold=1.0, tokens_per_step=4, end_fills_rest=False))
    assert fixed.stats.steps == 2
    one = engine.infill(*PROMPTS[0], sampler=GREEDY.with_(threshold=1.0, end_fills_rest=False))
    assert one.stats.steps == 8


@pytest.mark.parametrize("family", ["dream", "redraft"])
def test_semi_autoregressive_blocks_unmask_left_to_right(engines, family):
    engine = engines[family]
    cfg, tok = engine.model_config, engine.tokenizer
    batch = make_batch([build_row(cfg, tok.encode(PROMPTS[0][0]), tok.encode(PROMPTS[0][1]), [], 12)],
                       engine._pad_id, "cpu")
    seen = []
    d = Denoiser(engine.model, GREEDY.with_(span=12, block_size=4, threshold=0.0, end_fills_rest=False), [0],
                 engine._end_ids, engine._pad_id, engine._banned,
                 on_step=lambda step, den, b, x, masked, lp: seen.append(masked[0].clone()))
    with torch.inference_mode():
        d.run(batch)
    at = batch.span_at
    before = torch.ones_like(seen[0])
    before[:at] = False
    for step, masked in enumerate(seen):
        opened = (before & ~masked).nonzero().flatten().tolist()
        block = (step * 4 + at, step * 4 + at + 4)
        assert opened == list(range(*block)), (step, opened)  # threshold 0: the whole block at once
        before = masked
    assert len(seen) == 3


@pytest.mark.parametrize("family", ["dream", "redraft"])
def test_after_the_first_step_the_output_head_reads_only_the_leftmost_block(engines, family):
    engine = engines[family]
    scfg = GREEDY.with_(span=12, block_size=2, threshold=0.5, end_fills_rest=False)
    heads: list[int] = []
    engine.model.logits = lambda h: heads.append(h.shape[0]) or type(engine.model).logits(engine.model, h)
    try:
        out = engine.infill(*PROMPTS[3], sampler=scfg)
        first, later = heads[0], heads[1:]
        # a step cap turns the narrowing off (the cap may commit past the block): same text, full head
        heads.clear()
        full = engine.infill(*PROMPTS[3], sampler=scfg.with_(max_steps=12))
    finally:
        del engine.model.logits
    assert first == 12 and later and all(n <= 2 for n in later), (first, later)
    assert out.token_ids == full.token_ids and out.stats.steps == full.stats.steps
    assert heads and max(heads[1:]) > 2


@pytest.mark.parametrize("family", ["dream", "redraft"])
def test_stop_ends_a_diffusion_span_once_its_beginning_completes_the_unit(engines, family):
    engine = engines[family]
    scfg = GREEDY.with_(block_size=1, threshold=1.0, end_fills_rest=False)
    seen = []
    out = engine.infill(*PROMPTS[0], sampler=scfg, stop=lambda text: seen.append(text) or len(text) > 0)
    assert out.stats.steps == 1 and len(out.token_ids) <= 1
    assert engine.infill(*PROMPTS[0], sampler=scfg).stats.steps == 8


@pytest.mark.parametrize("family", ["dream", "redraft", "redraft-ar"])
def test_info_says_what_the_engine_is_and_can_do(engines, family):
    engine = engines[family]
    info = engine.info()
    assert info.name == engine.name and info.dtype == "float32" and info.device == "cpu"
    assert info.parameters == sum(p.numel() for p in engine.model.parameters())
    assert info.scores_edits  # every model scores alternatives (causal ones teacher-forced)
    assert engine.info() is info


def test_with_sampler_changes_the_default_settings_in_place(engines):
    base = engines["redraft"]
    engine = Engine(base.model, base.tokenizer, base.config, name="copy")
    assert engine.sampler == base.config.sampler
    new = engine.with_sampler(seed=5, temperature=1.0, span=8)
    assert engine.sampler == new == base.sampler.with_(seed=5, temperature=1.0, span=8)
    assert base.sampler.seed == 0 and base.sampler.temperature == 0.0
    assert engine.infill(*PROMPTS[2]).token_ids == base.infill(*PROMPTS[2], sampler=new).token_ids
