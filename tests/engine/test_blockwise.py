"""Block-causal decoding (engine/blockwise.py): cached steps compute what the whole sequence
does, several tokens commit a forward, and the engine routes block-causal checkpoints there."""

import json

import pytest
import torch

from redraft.engine import Engine
from redraft.engine.batch import make_batch
from redraft.engine.blockwise import _commits, decode_blocks
from redraft.engine.config import SamplerConfig
from redraft.engine.layout import build_row
from redraft.engine.prompt import END, MASK
from redraft.engine.training import train

from tiny import TRAIN_SHAPE as TINY_SHAPE

TEXT = "def area(shape):\n    return shape.width * shape.height\n\n\ndef perimeter(shape):\n    return 2 *"


def _model(tiny_corpus, block):
    tok = train._tok(tiny_corpus / "tok")
    shape = train.shape_for(tok, json.loads(TINY_SHAPE))
    torch.manual_seed(0)
    return tok, train.build_model("diffusion", tok, shape, "block_causal", block).eval()


@pytest.mark.parametrize("threshold, forwards", [(0.0, 4), (1.0, 13)])  # a block a forward; a token a forward
def test_each_cached_step_gives_the_logits_of_the_whole_sequence(tiny_corpus, threshold, forwards):
    """Every forward (the finished block riding along clean, the open block noisy) against the
    cache gives the logits the uncached sequence gives: context and finished blocks causal, the
    open block seeing all before it and itself."""
    block = 4
    tok, model = _model(tiny_corpus, block)
    cfg = model.config
    prefix = tok.encode(TEXT).ids
    batch = make_batch([build_row(cfg, prefix, [], [], 13)], cfg.pad_token_id, "cpu")
    calls = []
    hook = model.register_forward_hook(lambda m, args, kw, out: calls.append((args[0][0].clone(), kw, out.clone())),
                                       with_kwargs=True)
    real_logits = model.logits
    with torch.inference_mode():
        out = decode_blocks(model, batch, SamplerConfig(threshold=threshold, verify_blocks=False), block=block,
                            mask_id=cfg.mask_token_id,
                            end_ids=torch.tensor([-1]), pad_id=cfg.pad_token_id, banned=[], first_allowed={},
                            owners=[0])
    hook.remove()
    C = batch.C
    steps = [c for c in calls if c[1].get("mask") is not None]  # the context encoding has none
    assert len(steps) == out.forwards == forwards
    x = out.x[0]
    assert not bool((x[1:14] == cfg.pad_token_id).any())  # every position written (no end token exists)
    ctx_ids, ctx_pos = batch.ctx_ids[0], batch.ctx_pos[0]
    span_pos = batch.act_pos[0, 0] + torch.arange(17)
    for fed, kw, hidden in steps:
        lo = kw["start"] - C
        T = hidden.shape[1]
        s = lo if T == block else lo + block  # a 2b forward carries the finished block first
        ids = torch.cat([ctx_ids, x[:s], fed[-block:]])  # the open block as that forward saw it
        pos = torch.cat([ctx_pos, span_pos[:s + block]])
        n = ids.shape[0]
        attend = torch.ones(n, n, dtype=torch.bool).tril()
        attend[C + s:, :] = True
        with torch.inference_mode():
            whole = real_logits(model(ids[None], pos[None], mask=attend[None, None]))[0, C + s:]
            served = real_logits(hidden[:, T - block:])[0]
        torch.testing.assert_close(served, whole, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threshold", [0.0, 0.5, 1.0])
def test_verified_blocks_give_the_clean_streams_greedy_text(tiny_corpus, threshold):
    """With verification every token is the one the clean stream (the context and the text so
    far, causally, as the twin reads them) picks greedily, whatever the block committed: the
    uncached sequence, decoded a token at a time, gives the same text."""
    block = 4
    tok, model = _model(tiny_corpus, block)
    cfg = model.config
    prefix = tok.encode(TEXT).ids
    batch = make_batch([build_row(cfg, prefix, [], [], 13)], cfg.pad_token_id, "cpu")
    with torch.inference_mode():
        out = decode_blocks(model, batch, SamplerConfig(threshold=threshold, verify_blocks=True), block=block,
                            mask_id=cfg.mask_token_id, end_ids=torch.tensor([-1]), pad_id=cfg.pad_token_id, banned=[],
                            first_allowed={}, owners=[0])
        ids = torch.cat([batch.ctx_ids[0], batch.act_ids[0, :1]])
        pos = torch.cat([batch.ctx_pos[0], batch.act_pos[0, 0] + torch.arange(14)])
        for _ in range(13):
            n = ids.shape[0]
            logits = model.logits(model(ids[None], pos[None, :n], mask=torch.ones(n, n, dtype=torch.bool).tril()[None, None]))
            ids = torch.cat([ids, logits[0, -1].argmax()[None]])
    assert out.x[0, 1:14].tolist() == ids[-13:].tolist()
    assert out.forwards >= 13 / block + 1  # every block checked, the last by a forward of its own


def test_the_commit_rule():
    open_ = torch.tensor([[True, True, True, True]])
    tok = torch.tensor([[5, 6, 0, 7]])  # 0: the end token
    ends = torch.tensor([0])
    # above the threshold: all of them (the end token too: nothing before it stays open)
    assert _commits(open_, torch.tensor([[0.95, 0.99, 0.97, 0.2]]), tok, ends, 0.9).tolist() == [[1, 1, 1, 0]]
    # nothing above it: the leftmost (its whole left context is known)
    assert _commits(open_, torch.tensor([[0.3, 0.6, 0.1, 0.2]]), tok, ends, 0.9).tolist() == [[1, 0, 0, 0]]
    # an end token with an open position before it waits
    assert _commits(open_, torch.tensor([[0.95, 0.2, 0.99, 0.1]]), tok, ends, 0.9).tolist() == [[1, 0, 0, 0]]
    assert _commits(open_, torch.tensor([[0.95, 0.97, 0.99, 0.1]]), tok, ends, 0.9).tolist() == [[1, 1, 1, 0]]
    # positions already committed are not open
    part = torch.tensor([[False, True, True, False]])
    assert _commits(part, torch.tensor([[0.99, 0.95, 0.2, 0.99]]), tok, ends, 0.9).tolist() == [[0, 1, 0, 0]]


def test_the_engine_decodes_a_block_causal_checkpoint_several_tokens_a_forward(tiny_corpus, tmp_path):
    out = tmp_path / "run"
    train.main(["--objective", "diffusion", "--attention", "block_causal", "--block-size", "4",
                "--corpus", str(tiny_corpus), "--tokenizer", str(tiny_corpus / "tok"), "--out", str(out),
                "--steps", "2", "--batch", "2", "--seq", "128", "--eval-every", "2", "--valid-batches", "1",
                "--save-every", "2", "--threads", "1", "--precision", "fp32", "--shape", TINY_SHAPE])
    engine = Engine.load(out / "last", dtype="float32")
    assert engine.model_config.is_blockwise and engine.model_config.block_size == 4
    eager = engine.infill(TEXT, "", sampler=engine.with_sampler(span=16, threshold=0.0, min_score=float("-inf"),
                                                                verify_blocks=False))
    assert eager.stats.forwards >= 1 and eager.stats.span_tokens >= 1
    # threshold 0: a block's positions all commit at once (an end token stops it early)
    assert eager.stats.forwards <= 4
    assert eager.stats.tokens_per_forward > 1 or eager.stats.span_tokens <= 4
    one = engine.infill(TEXT, "", sampler=engine.with_sampler(span=16, threshold=1.0, min_score=float("-inf"),
                                                              verify_blocks=False))
    assert one.stats.forwards == one.stats.span_tokens + (1 if one.stats.span_tokens < 16 else 0)
    # It judges alternatives by its clean stream, teacher-forced (autoregressive.score_spans).
    assert engine.info().scores_edits
    scores = engine.score(TEXT, "", [" shape.width + shape.height", " ) ) ) ) )"])
    assert len(scores) == 2 and all(-50 < s < 0 for s in scores) and scores[0] != scores[1]
