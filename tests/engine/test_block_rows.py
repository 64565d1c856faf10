"""Block-causal training rows (engine/training/blockrows.py) compute what serving computes."""

import json
import random

import torch

from redraft.engine.cache import KVCache
from redraft.engine.prompt import END, MASK
from redraft.engine.training import train
from redraft.engine.training.blockrows import block_rows
from redraft.engine.training.examples import EncodedExample

from tiny import TRAIN_SHAPE as TINY_SHAPE




def _setup(tiny_corpus, block):
    tok = train._tok(tiny_corpus / "tok")
    shape = train.shape_for(tok, json.loads(TINY_SHAPE))
    torch.manual_seed(0)
    model = train.build_model("diffusion", tok, shape, "block_causal", block).eval()
    text = ("def area(shape):\n    return shape.width * shape.height\n\n\ndef perimeter(shape):\n"
            "    return 2 * (shape.width + shape.height)\n")
    ids = tok.encode(text).ids
    S = 12  # the span's first token; <|fim_middle|> plays the token before it
    ids[S - 1] = tok.token_to_id("<|fim_middle|>")
    middle = len(ids) - S - 1
    ex = EncodedExample(ids, S, middle, middle + 1)
    return tok, model, ex


def test_rows_lay_out_a_clean_causal_stream_and_a_noisy_copy_in_blocks(tiny_corpus):
    tok, _, ex = _setup(tiny_corpus, 4)
    end, mask = tok.token_to_id(END), tok.token_to_id(MASK)
    b = block_rows([ex], 1, 4, mask, end, random.Random(3))
    (N, n), = b["layout"]
    first = ex.span_at - 1
    assert N == ex.span_at + ex.middle + 1 and n == ex.middle + 1
    noisy = b["ids"][0, N:N + n].tolist()
    clean = b["ids"][0, :N].tolist()
    assert clean[-1] == end
    assert all(noisy[j] == clean[first + j] for j in range(0, n, 4))  # a block opens on a committed token
    assert any(t == mask for t in noisy)
    assert b["pos"][0, N:N + n].tolist() == list(range(first, first + n))
    # Targets: the clean stream's next token, and the noisy copy's too (shifted).
    assert b["target"][0, N:N + n].tolist() == clean[first + 1:first + n + 1]
    for j in range(n):  # every hidden target is in the loss; a visible one is not
        hidden = j % 4 == 3 or j == n - 1 or noisy[j + 1] == mask
        assert bool(b["weight"][0, N + j] > 0) == hidden
    # each noisy position is paired with the clean position that predicts the same target
    twin = b["twin_at"][0]
    assert twin[N:N + n].tolist() == list(range(first, first + n)) and bool((twin[:N] == -1).all())
    assert b["target"][0, twin[N:N + n]].tolist() == b["target"][0, N:N + n].tolist()
    attend = b["mask"][0, 0]
    assert attend[N + 5, first + 3] and not attend[N + 5, first + 4]  # block 1 sees the clean stream before it
    assert attend[N + 5, N + 7] and not attend[N + 5, N + 8] and not attend[N + 5, N + 3]


def test_training_rows_give_the_logits_of_cached_blockwise_serving(tiny_corpus):
    block = 4
    tok, model, ex = _setup(tiny_corpus, block)
    end, mask = tok.token_to_id(END), tok.token_to_id(MASK)
    b = block_rows([ex], 1, block, mask, end, random.Random(5))
    (N, n), = b["layout"]
    first = ex.span_at - 1
    with torch.no_grad():
        trained = model.logits(model(b["ids"], b["pos"], mask=b["mask"]))[0]
    ids = b["ids"][0]
    assert n > 2 * block
    for s in range(0, n, block):  # each block as serving runs it: a cache of everything before it, then the block
        e = min(s + block, n)
        cache = KVCache(len(model.model.layers), 1, model.config.num_key_value_heads, first + e,
                        model.config.head_dim, torch.float32, "cpu")
        with torch.no_grad():
            model(ids[None, :first + s], torch.arange(first + s)[None], cache=cache, causal=True)
            served = model.logits(model(ids[None, N + s:N + e], torch.arange(first + s, first + e)[None],
                                        cache=cache, start=first + s))[0]
        torch.testing.assert_close(served, trained[N + s:N + e], rtol=1e-4, atol=1e-4)
        # ... and the clean stream is the causal model's, whatever the noisy copy holds
    other = b["ids"].clone()
    other[0, N:N + n] = mask
    with torch.no_grad():
        again = model.logits(model(other, b["pos"], mask=b["mask"]))[0]
    assert torch.equal(again[:N], trained[:N])
    assert not torch.allclose(again[N:N + n], trained[N:N + n])


def test_a_block_causal_run_trains_and_saves_its_block_size(tiny_corpus, tmp_path):
    out = tmp_path / "run"
    train.main(["--objective", "diffusion", "--attention", "block_causal", "--block-size", "4",
                "--corpus", str(tiny_corpus), "--tokenizer", str(tiny_corpus / "tok"), "--out", str(out),
                "--steps", "3", "--batch", "2", "--seq", "128", "--eval-every", "3", "--valid-batches", "1",
                "--save-every", "3", "--threads", "1", "--precision", "fp32", "--shape", TINY_SHAPE])
    cfg = json.loads((out / "last" / "config.json").read_text())
    assert cfg["attention_pattern"] == "block_causal" and cfg["redraft_block_size"] == 4
    log = json.loads((out / "last" / "train_state.json").read_text())["log"]
    assert log and all(torch.isfinite(torch.tensor(e["loss"])) for e in log if "loss" in e)


def test_the_consistency_term_pulls_the_noisy_block_toward_the_clean_stream(tiny_corpus):
    """With --consistency the loss grows by the soft cross-entropy against the clean stream's
    prediction, which only the noisy positions' gradient sees; statistics say how often the two
    agree."""
    tok, model, ex = _setup(tiny_corpus, 4)
    end, mask = tok.token_to_id(END), tok.token_to_id(MASK)
    b = block_rows([ex], 1, 4, mask, end, random.Random(3))
    stats: dict = {}
    plain = train.loss_of(model, b, stats)
    assert 0.0 <= stats["agree"] <= 1.0
    with_term = train.loss_of(model, dict(b, consistency=1.0))
    assert float(with_term) > float(plain)
    model.zero_grad()
    train._consistency(model, model(b["ids"], b["pos"], mask=b["mask"]), b["twin_at"], b["masked"]).backward()
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())
