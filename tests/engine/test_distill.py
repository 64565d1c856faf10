"""Sequence-level distillation data (engine/training/distill.py): the twin's own greedy spans,
written resumably and read back as training rows."""

import json
import random
from pathlib import Path

import pytest
import torch

import redraft.engine

from redraft.engine.prompt import END, SPECIAL_TOKENS
from redraft.engine.training import distill, train
from redraft.engine.training.examples import load_distilled
from redraft.engine.training.state import _tok


# Rows as long as the recipe's: with contexts of ~100 tokens the shipped twin ends few of its
# spans within its cap (the 150M-token twin ended 2-4 of 20 at 128), at 512 most of them.
SEQ = 512


@pytest.fixture(scope="module")
def twin():
    """The shipped autoregressive twin: a real checkpoint that ends most of its spans."""
    return Path(redraft.engine.__file__).parent / "models" / "redraft-ar"


def _greedy(model, ctx, end, banned, cap):
    """Plain greedy decoding, one row, no cache: what twin_spans must reproduce."""
    ids, out = list(ctx), []
    with torch.inference_mode():
        for _ in range(cap + 1):
            h = model(torch.tensor([ids]), torch.arange(len(ids))[None], causal=True)
            logits = model.logits(h[:, -1])
            logits[:, banned] = float("-inf")
            t = int(logits.argmax(-1))
            if t == end:
                return out
            if len(out) >= cap:
                return None
            out.append(t)
            ids.append(t)
    return None


def test_batched_spans_are_the_twins_plain_greedy_spans(twin, tiny_corpus):
    tok = _tok(twin)
    model = distill.load_twin(twin, tok)
    end = tok.token_to_id(END)
    banned = [tok.token_to_id(t) for t in SPECIAL_TOKENS if t != END]
    rng = random.Random(3)
    ids = tok.encode(open(__file__).read()).ids
    # Contexts of different lengths share one left-padded batch; caps differ per row.
    contexts = [ids[s:s + n] for s, n in ((0, 40), (100, 17), (300, 64), (50, 5))]
    caps = [rng.randint(3, 24) for _ in contexts]
    spans = distill.twin_spans(model, contexts, end, banned, caps)
    want = [_greedy(model, c, end, banned, cap) for c, cap in zip(contexts, caps)]
    assert len(spans) == 4
    assert spans == want


def test_generate_writes_resumes_and_reads_back_as_rows(twin, tiny_corpus, tmp_path):
    out = tmp_path / "spans.jsonl"
    base = ["--corpus", str(tiny_corpus), "--twin", str(twin), "--out", str(out), "--seq", str(SEQ), "--batch", "4"]
    code = distill.main(base + ["--rows", "4"])
    if code == 1:
        pytest.fail("the tiny twin ended too few spans to test with")
    first = out.read_text().splitlines()
    assert len(first) >= 4
    distill.main(base + ["--rows", "8"])  # resumes after the last row written
    lines = out.read_text().splitlines()
    assert lines[:len(first)] == first and len(lines) >= 8
    rows = [json.loads(x) for x in lines]
    index = [r["index"] for r in rows]
    assert index == sorted(set(index))  # no example twice, in the order drawn
    tok = _tok(twin)
    end = tok.token_to_id(END)
    fim_middle = tok.token_to_id("<|fim_middle|>")
    assert all(r["ctx"][-1] == fim_middle and r["middle"] and end not in r["middle"] for r in rows)
    back = load_distilled(out, end, SEQ)
    assert len(back) == sum(len(r["ctx"]) + len(r["middle"]) + 1 <= SEQ for r in rows) > 0
    r, e = rows[0], back[0]
    assert e.ids == r["ctx"] + r["middle"] + [end] and e.span_at == len(r["ctx"]) and e.middle == len(r["middle"])


def test_rows_draw_the_distilled_share(twin, tiny_corpus, tmp_path):
    out = tmp_path / "spans.jsonl"
    assert distill.main(["--corpus", str(tiny_corpus), "--twin", str(twin), "--out", str(out), "--seq", str(SEQ),
                         "--batch", "4", "--rows", "4"]) == 0
    tok = _tok(twin)
    end = tok.token_to_id(END)
    spans = load_distilled(out, end, SEQ)
    from redraft.engine.training.corpus import read_split
    docs = read_split(tiny_corpus, "train")
    only = train.Rows(docs, tok, SEQ, 8, 1, True, distilled=spans, distill_share=1.0, block_causal=4)
    batch = only.batch(0)
    clean = {tuple(e.ids) for e in spans}
    assert len(batch["layout"]) == 8
    for b, (N, _n) in enumerate(batch["layout"]):
        assert tuple(batch["ids"][b, :N].tolist()) in clean  # every row's clean stream is a twin span
    none = train.Rows(docs, tok, SEQ, 8, 1, True, distilled=spans, distill_share=0.0, block_causal=4)
    plain = train.Rows(docs, tok, SEQ, 8, 1, True, block_causal=4)
    assert torch.equal(none.batch(0)["ids"], plain.batch(0)["ids"])  # share 0: the rows it always drew
