"""The decode-time cache model: its prediction, its weight, the mixture, and what it does to decoding."""

import pytest
import torch

from redraft.engine import CacheConfig, CacheModel, Continuation, Engine

PREFIX = ("def area(width, height):\n    return width * height\n\n\n"
          "def volume(width, height, depth):\n    return width * ")


@pytest.fixture(scope="module")
def shipped():
    return Engine.load(dtype="float32")


def fixed(*continuations):
    """A lookup that finds the same continuations after whatever text, each with its match length."""
    asked = []

    def lookup(typed):
        asked.append(typed)
        return [Continuation(text[len(typed):], n) for text, n in continuations if text.startswith(typed)]
    lookup.asked = asked
    return lookup


def test_prediction_is_the_continuations_next_token(shipped):
    tok = shipped.tokenizer
    cache = CacheModel(fixed(("height * depth", 20)), tok)
    pred = cache.predict(())
    assert tok.decode([int(pred.ids[pred.probs.argmax()])]) == tok.decode(tok.encode("height * depth")[:1])
    assert float(pred.probs.sum()) == pytest.approx(1.0)
    # following the copied tokens needs no new lookup; the match grows as it is followed
    ids = tok.encode("height * depth")
    nxt = cache.predict(ids[:1])
    assert int(nxt.ids[nxt.probs.argmax()]) == ids[1]
    assert nxt.matched > pred.matched and nxt.alpha > pred.alpha
    assert cache.queries == 1


def test_weight_rises_with_match_length_and_agreement(shipped):
    tok = shipped.tokenizer
    alphas = [CacheModel(fixed(("height * depth", n)), tok).predict(()).alpha for n in (10, 14, 24, 48)]
    assert alphas == sorted(alphas) and alphas[0] < alphas[-1] <= CacheConfig().max_alpha
    agree = CacheModel(fixed(("height", 20), ("height", 20)), tok).predict(())
    split = CacheModel(fixed(("height", 20), ("depth", 20)), tok).predict(())
    assert agree.alpha > split.alpha > 0
    assert sorted(split.probs.tolist()) == pytest.approx([0.5, 0.5])


def test_a_longer_match_outweighs_a_shorter_one(shipped):
    tok = shipped.tokenizer
    pred = CacheModel(fixed(("height", 30), ("depth", 8)), tok).predict(())
    top = tok.decode([int(pred.ids[pred.probs.argmax()])])
    assert top == tok.decode(tok.encode("height")[:1])
    assert float(pred.probs.max()) > 0.9


def test_matches_too_short_or_missing_leave_no_prediction(shipped):
    assert CacheModel(fixed(("height", 3)), shipped.tokenizer).predict(()) is None  # under min_matched
    assert CacheModel(fixed(("height", 8)), shipped.tokenizer).predict(()).alpha == 0.0  # weighs nothing
    assert CacheModel(fixed(), shipped.tokenizer).predict(()) is None


def test_where_every_match_breaks_the_lookup_is_asked_again(shipped):
    tok = shipped.tokenizer
    lookup = fixed(("height * depth", 20), ("length + 1", 20))
    cache = CacheModel(lookup, tok)
    other = tok.encode("length")  # a chain that leaves the first continuation for the second
    cache.predict(())
    assert cache.predict(other) is not None
    assert lookup.asked == [""]  # "length" still follows a live match: no new lookup
    off = tok.encode("weight")
    assert cache.predict(off) is None
    assert lookup.asked == ["", "weight"]


def test_the_mixture_leaves_the_model_untouched_where_the_cache_has_nothing(shipped):
    logits = torch.randn(shipped.tokenizer.vocab_size)
    before = logits.clone()
    assert CacheModel(fixed(), shipped.tokenizer).mix(logits, ()) is None
    assert torch.equal(logits, before)


def test_the_mixture_is_a_distribution_with_the_cache_share(shipped):
    tok = shipped.tokenizer
    logits = torch.randn(tok.vocab_size)
    p_model = torch.softmax(logits, -1)
    cache = CacheModel(fixed(("height", 40)), tok)
    pred = cache.mix(logits, ())
    p = logits.exp()
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-4)
    t = int(pred.ids[0])
    assert float(p[t]) == pytest.approx((1 - pred.alpha) * float(p_model[t]) + pred.alpha, abs=1e-5)


def test_copied_text_commits_several_tokens_per_step(shipped):
    # Window lookup off: it, too, commits copied text several tokens a forward (test_window_lookup.py).
    sampler = shipped.sampler.with_(span=8, min_score=float("-inf"), window_lookup=False)
    line_ends = lambda text: "\n" in text  # the server's unit-end rule for a line
    plain = shipped.infill(PREFIX, "\n", sampler=sampler, stop=line_ends)
    # A continuation the model would not write itself (it writes "height" here), so the cache is what commits it.
    cached = shipped.infill(PREFIX, "\n", sampler=sampler, stop=line_ends, lookup=fixed(("depth * height\n", 40)))
    assert not plain.text.startswith("depth") and plain.stats.tokens_per_forward <= 1.0
    assert cached.text.startswith("depth * height\n")
    assert cached.stats.cache_queries >= 1
    assert cached.stats.tokens_per_forward >= 2.0


def test_cache_off_in_the_engine_config_ignores_the_lookup(shipped):
    from dataclasses import replace
    engine = Engine(shipped.model, shipped.tokenizer, replace(shipped.config, cache=CacheConfig(enabled=False)))
    sampler = shipped.sampler.with_(span=8, min_score=float("-inf"))
    lookup = fixed(("height * depth\n", 40))
    c = engine.infill(PREFIX, "\n", sampler=sampler, lookup=lookup)
    assert lookup.asked == [] and c.stats.cache_queries == 0


def test_causal_models_mix_the_cache_too():
    twin = Engine.load("redraft-ar", dtype="float32")
    sampler = twin.sampler.with_(span=8, min_score=float("-inf"))
    lookup = fixed(("height * depth\n", 40))
    c = twin.infill(PREFIX, "\n", sampler=sampler, lookup=lookup, stop=lambda text: "\n" in text)
    assert c.text.startswith("height * depth") and c.stats.cache_queries >= 1
