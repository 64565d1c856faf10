"""`Engine.score` for causal models (autoregressive.score_spans): each alternative's mean log-prob,
teacher-forced in one forward, is what one-token forwards give its tokens; the shipped twin
prefers the text that is there to a broken one, and judges next edits through the server's
path."""

import math

import pytest
import torch

from redraft.engine import Engine, InfillRequest
from redraft.engine.batch import encode_context, make_batch
from redraft.engine.layout import build_row, seed_row
from redraft.server.core.judge import Judging, can_judge_edits, judge_edits
from redraft.server.core.nextedit import LineEdit

PREFIX = "def area(width, height):\n    return width * height\n\n\ndef volume(width, height, depth):\n    return "
SUFFIX = "\n\n\ndef main():\n    print(volume(1, 2, 3))\n"
TEXTS = ["area(width, height) * depth", "width * height * depth", "depth", "width * height * depth  # cubic"]


def one_token_at_a_time(engine: Engine, text: str) -> float:
    """The reference: the text's tokens (and its end) fed one forward each, each judged by the
    distribution that forward gives, as token-by-token decoding would draw it."""
    tok, cfg = engine.tokenizer, engine.model_config
    ids = tok.encode(text) + [engine._draft_end]
    p = engine._prepare(InfillRequest(PREFIX, SUFFIX, ""), engine.sampler.with_(heal=False, span=len(ids)))
    batch = make_batch([seed_row(build_row(cfg, p.prefix, p.suffix, p.extra, len(ids)), ids)], engine._pad_id,
                       engine.device)
    total = 0.0
    with torch.inference_mode():
        kv, _ = encode_context(engine.model, batch, None, extra=batch.A)
        for t in range(len(ids)):
            h = engine.model(batch.act_ids[:, t:t + 1], batch.act_pos[:, t:t + 1], kv, start=batch.C + t)
            logits = engine.model.logits(h[:, 0]).float()
            logits[:, engine._banned] = float("-inf")
            if engine._vocab_limit is not None:
                logits[:, engine._vocab_limit:] = float("-inf")
            total += torch.log_softmax(logits, -1)[0, ids[t]].item()
    return total / len(ids)


@pytest.fixture(scope="module")
def twin():
    return Engine.load("redraft-ar", dtype="float32")


@pytest.mark.parametrize("which", ["tiny", "twin"])
def test_each_score_is_the_mean_of_one_token_forwards(engines, twin, which):
    engine = engines["redraft-ar"] if which == "tiny" else twin
    got = engine.score(PREFIX, SUFFIX, TEXTS)
    want = [one_token_at_a_time(engine, t) for t in TEXTS]
    assert len(got) == len(TEXTS) and all(math.isfinite(g) for g in got)
    assert got == pytest.approx(want, abs=1e-4)
    # Rows of other lengths beside it change nothing.
    assert engine.score(PREFIX, SUFFIX, TEXTS[1:2]) == pytest.approx(got[1:2], abs=1e-5)


def test_the_twin_prefers_the_code_to_a_broken_copy(twin):
    good, bad = twin.score(PREFIX, SUFFIX, ["width * height * depth", "width * height * * depth )"])
    assert good > bad + 0.5
    assert twin.info().scores_edits and can_judge_edits(twin)


def test_the_twin_judges_a_next_edit_through_the_servers_path(twin):
    """The next use of a renamed local is kept; a proposal that breaks the line is dropped: the
    twin's gains order them, and the margin between them decides."""
    lines = ("def total(prices, rate):\n", "    net = sum(prices)\n", "    tax = subtotal * rate\n",
             "    return subtotal + tax\n", "\n", "\n", "print(total([1, 2], 0.2))\n")
    good = LineEdit(2, 10, 18, "net", lines[2][:-1], "    tax = net * rate")
    broken = LineEdit(3, 11, 25, "subtotal + + tax )", lines[3][:-1], "    return subtotal + + tax )")
    judging = Judging(twin, lines, [good, broken], [], margin=-1.5)
    gains = [judging.score(good), judging.score(broken)]
    assert gains[0] > -1.5 > gains[1], gains
    assert judge_edits(twin, lines, [good, broken], [], margin=-1.5) == [good]
    assert judge_edits(twin, lines, [good, broken], [], margin=gains[1] - 0.01) == [good, broken]
