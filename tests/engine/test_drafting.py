"""Self-drafting (engine/drafting.py): one forward checks drafts with the clean stream and writes
the next drafts with the noisy blocks; the text is the clean stream's greedy decoding, the
blocks compute what training's layout computes, and a forward never commits nothing."""

import json

import pytest
import torch

from redraft.engine import Engine
from redraft.engine.autoregressive import decode
from redraft.engine.batch import make_batch
from redraft.engine.config import SamplerConfig
from redraft.engine.drafting import Drafter
from redraft.engine.cache import KVCache
from redraft.engine.layout import build_row
from redraft.engine.speculative import LookupSource
from redraft.engine.training import train

from tiny import TRAIN_SHAPE as TINY_SHAPE

TEXT = "def area(shape):\n    return shape.width * shape.height\n\n\ndef perimeter(shape):\n    return 2 *"
GREEDY = SamplerConfig(span=13, heal=False)


def _model(tiny_corpus, block):
    tok = train._tok(tiny_corpus / "tok")
    shape = train.shape_for(tok, json.loads(TINY_SHAPE))
    torch.manual_seed(0)
    return tok, train.build_model("diffusion", tok, shape, "block_causal", block).eval()


def _decode(model, batch, scfg, drafter=None, sources=None):
    cfg = model.config
    with torch.inference_mode():
        return decode(model, batch, scfg, end_ids=torch.tensor([-1]), pad_id=cfg.pad_token_id, banned=[],
                      first_allowed={}, owners=list(range(batch.B)), sources=sources, drafter=drafter)


@pytest.mark.parametrize("block", [2, 4])
@pytest.mark.parametrize("lookup", [False, True])
def test_self_drafting_gives_the_clean_streams_greedy_text(tiny_corpus, block, lookup):
    """Whatever the blocks draft (and prompt lookup, where on), the text is plain causal greedy
    decoding's, and every forward commits at least one token."""
    tok, model = _model(tiny_corpus, block)
    cfg = model.config
    prefixes = [tok.encode(TEXT).ids, tok.encode("x = 1\ny = 2\nx = 1\ny =").ids]
    rows = [build_row(cfg, p, [], [], 13) for p in prefixes]
    batch = make_batch(rows, cfg.pad_token_id, "cpu")
    plain = _decode(model, batch, GREEDY.with_(lookup=False))
    sources = {i: LookupSource([], p, []) for i, p in enumerate(prefixes)} if lookup else {}
    calls = []
    hook = model.register_forward_hook(lambda m, args, kw, out: calls.append((args[0].clone(), out.clone()))
                                       if kw.get("mask") is not None else None, with_kwargs=True)
    drafted = _decode(model, batch, GREEDY.with_(lookup=lookup, lookup_ngram=1),
                      Drafter(block, cfg.mask_token_id, cfg.pad_token_id), sources)
    hook.remove()
    # forwards verifying a prompt-lookup draft for every row run without blocks (and without a mask)
    assert len(calls) == drafted.forwards if not lookup else len(calls) < drafted.forwards
    if not lookup:  # a random model's drafts are all rejected: each forward drafts from its block 0
        assert int(drafted.kept.sum()) == 0
        for (ids, hidden), (nxt, _) in zip(calls, calls[1:]):
            k = (ids.shape[1] // (block + 1)) - 1
            with torch.inference_mode():
                want = model.logits(hidden[:, k + 2:k + 1 + block]).argmax(-1)
            n = nxt.shape[1] // (block + 1) - 1  # fewer near the span's end
            assert nxt[:, 1:1 + n].tolist() == want[:, :n].tolist()
        assert any(nxt.shape[1] > block + 1 for _, (nxt, _) in zip(calls, calls[1:]))  # drafts were fed
    else:  # the repeated lines are drafted by lookup and accepted
        assert int(drafted.kept.sum()) > 0 and drafted.forwards < 13
    assert plain.x[:, 1:14].tolist() == drafted.x[:, 1:14].tolist()
    assert not bool((drafted.x[:, 1:14] == cfg.pad_token_id).any())  # 13 tokens each: no end token exists
    assert 1 <= drafted.forwards <= 13
    assert plain.forwards == 13


@pytest.mark.parametrize("every", [3, 1])  # blocks for every outcome; for none and all accepted only
def test_a_pre_draft_block_computes_what_the_training_layout_computes(tiny_corpus, every):
    """Block j of a forward (clean input j first, the rest masked) against the cache gives the
    outputs the uncached sequence gives with the block attending to the clean text before its
    first input and to itself (blockrows.py's pattern), for every j."""
    block = 4
    tok, model = _model(tiny_corpus, block)
    cfg = model.config
    ctx = tok.encode(TEXT).ids
    C = len(ctx)
    drafts = tok.encode(" shape.width + shape").ids[:3]
    k = len(drafts)
    drafter = Drafter(block, cfg.mask_token_id, cfg.pad_token_id, every=every)
    kv = KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, C + drafter.size(k), cfg.head_dim,
                 torch.float32, "cpu")
    with torch.inference_mode():
        model(torch.tensor([ctx[:-1]]), torch.arange(C - 1)[None], kv, start=0, causal=True)
        clean = torch.tensor([[ctx[-1], *drafts]])
        ids, pos, mask = drafter.extend(clean, C - 1 + torch.arange(k + 1)[None], torch.ones(1, C - 1, dtype=torch.bool),
                                        C - 1)
        served = model(ids, pos, kv, start=C - 1, mask=mask)[0]
        assert ids.shape[1] == drafter.size(k) == k + 1 + (k + 1 if every >= k else 2) * block
        assert drafter.outcomes == ([0, 1, 2, 3] if every >= k else [0, 3])
        for i, j in enumerate(drafter.outcomes):
            seen = ctx[:-1] + [ctx[-1], *drafts][:j]  # the clean text before c_j
            opened = [([ctx[-1], *drafts])[j]] + [cfg.mask_token_id] * (block - 1)
            n, m = len(seen), len(seen) + block
            attend = torch.zeros(m, m, dtype=torch.bool)
            attend[:n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
            attend[n:, :] = True
            whole = model(torch.tensor([seen + opened]), torch.arange(m)[None], mask=attend[None, None])[0, n:]
            at = k + 1 + i * block
            torch.testing.assert_close(served[at:at + block], whole, rtol=1e-4, atol=1e-4)
        # the clean part is the causal stream
        n = C + k
        whole = model(torch.tensor([ctx + drafts]), torch.arange(n)[None], mask=torch.ones(n, n, dtype=torch.bool).tril()[None, None])
        torch.testing.assert_close(served[:k + 1], whole[0, C - 1:], rtol=1e-4, atol=1e-4)


def test_the_next_drafts_come_from_the_block_verification_chose():
    """A row that accepted j drafts drafts from block j's positions 1..b-1, at most `limit`."""
    drafter = Drafter(3, mask_id=9, pad_id=0)
    drafter.k, drafter.outcomes = 2, [0, 1, 2]  # a forward of 3 clean inputs and 3 blocks of 3: 12 positions
    hidden = torch.zeros(1, 12, 5)
    for i in range(12):
        hidden[0, i, i % 5] = 1.0  # position i's greedy token: i % 5
    logits_of = lambda h: h  # noqa: E731
    assert drafter.drafts(logits_of, hidden, 0, 0, 8) == [4, 0]  # block 0 at 3..5: positions 4, 5
    assert drafter.drafts(logits_of, hidden, 0, 2, 8) == [0, 1]  # block 2 at 9..11: positions 10, 11
    assert drafter.drafts(logits_of, hidden, 0, 1, 1) == [2]
    assert drafter.drafts(logits_of, hidden, 0, 1, 0) == []
    drafter.outcomes = [0, 2]  # long drafts: blocks for none and all accepted only
    assert drafter.drafts(logits_of, hidden, 0, 2, 8) == [2, 3]  # block 1 at 6..8: positions 7, 8
    assert drafter.drafts(logits_of, hidden, 0, 1, 8) == []
    sure = torch.full((1, 12, 5), -9.0)
    sure[0, 7, 0], sure[0, 8, 1] = 9.0, -8.0  # block 1 (all accepted): position 7 sure of 0, 8 unsure
    assert drafter.drafts(logits_of, sure, 0, 2, 8, floor=0.5) == [0]
    assert drafter.drafts(logits_of, sure, 0, 2, 8, floor=0.0) == [0, 1]
    assert Drafter(4, 9, 0).plan(3) == [0, 1, 2, 3] and Drafter(4, 9, 0).plan(8) == [0, 8]
    assert Drafter(4, 9, 0).size(8) == 9 + 2 * 4


def test_the_engine_self_drafts_a_block_causal_checkpoint(tiny_corpus, tmp_path):
    out = tmp_path / "run"
    train.main(["--objective", "diffusion", "--attention", "block_causal", "--block-size", "4",
                "--corpus", str(tiny_corpus), "--tokenizer", str(tiny_corpus / "tok"), "--out", str(out),
                "--steps", "2", "--batch", "2", "--seq", "128", "--eval-every", "2", "--valid-batches", "1",
                "--save-every", "2", "--threads", "1", "--precision", "fp32", "--shape", TINY_SHAPE,
                "--full-share", "0.5"])
    engine = Engine.load(out / "last", dtype="float32")
    drafted = engine.infill(TEXT, "", sampler=engine.with_sampler(span=16, self_draft=True, min_score=float("-inf")))
    plain = engine.infill(TEXT, "", sampler=engine.with_sampler(span=16, self_draft=True, min_score=float("-inf"),
                                                                lookup=False))
    greedy = engine.infill(TEXT, "", sampler=engine.with_sampler(span=16, self_draft=True, min_score=float("-inf"),
                                                                 lookup=False, draft_block=1))
    assert greedy.stats.span_tokens > 0
    # prompt lookup and the model's own drafts change forwards, never the clean stream's greedy text
    assert drafted.text == plain.text == greedy.text
    assert greedy.stats.forwards == greedy.stats.span_tokens + (greedy.stats.span_tokens < 16)  # a token a forward
    assert 1 <= plain.stats.forwards <= greedy.stats.forwards
    with pytest.raises(ValueError, match="self_draft"):
        SamplerConfig(self_draft="yes")
