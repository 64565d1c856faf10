"""Prompt-lookup speculative decoding of causal models (speculative.py): the same tokens as plain
greedy decoding, in fewer forwards when drafts are right, one forward per token at worst."""

import random
from pathlib import Path

import pytest
import torch

from redraft.engine import CancelFlag, Cancelled, Continuation, Engine, InfillRequest, SamplerConfig
from redraft.engine.autoregressive import decode
from redraft.engine.batch import make_batch
from redraft.engine.layout import build_row
from redraft.engine.speculative import LookupSource, Proposer

PROMPTS = [("def add(a, b):\n    return ", "\n\n\nclass Point:\n"),
           ("for i in range(", "):\n    print(i)\n"),
           ("items = [1, 2, 3]\ntotal = ", "\nname = 'x'\n"),
           ("class Point:\n    def __init__(self, x, y):\n        self.", "\n        self.y = y\n")]
GREEDY = SamplerConfig(span=8, heal=False)
PLAIN = GREEDY.with_(lookup=False)
SOURCES = sorted((Path(__file__).parents[2] / "engine").glob("*.py"))  # real code the models never trained on


@pytest.fixture(scope="module")
def twin():
    return Engine.load("redraft-ar", dtype="float32")


@pytest.fixture()
def tiny_ar(engines):
    return engines["redraft-ar"]


def run(engine: Engine, prompts, span: int, drafts=None, lookup=True, k=8, ends=True, ngram=1, **kw):
    """`decode` on one row per prompt. drafts: row -> draft token lists. ends=False bans the end
    token, so a random model writes whole spans. Matches of `ngram` tokens or more propose."""
    tok = engine.tokenizer
    rows = [build_row(engine.model_config, tok.encode(p), tok.encode(s), [], span) for p, s in prompts]
    batch = make_batch(rows, engine._pad_id, engine.device)
    sources = {i: LookupSource((drafts or {}).get(i, []), tok.encode(p), [tok.encode(s)])
               for i, (p, s) in enumerate(prompts)} if lookup else None
    banned = engine._banned if ends else engine._banned + engine._end_ids.tolist()
    kw.setdefault("end_ids", engine._end_ids)
    kw.setdefault("first_allowed", {})
    with torch.inference_mode():
        return decode(engine.model, batch, GREEDY.with_(span=span, lookup_tokens=k, lookup_ngram=ngram),
                      pad_id=engine._pad_id,
                      banned=banned, owners=list(range(len(prompts))), vocab_limit=engine._vocab_limit,
                      sources=sources, **kw)


def span_of(out, b: int) -> list[int]:
    return out.x[b, 1:].tolist()


def cuts(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """(prefix, suffix) pairs cut at line starts of real files."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        lines = rng.choice(SOURCES).read_text().splitlines(keepends=True)
        i = rng.randrange(10, len(lines) - 2)
        if lines[i].strip():
            out.append(("".join(lines[:i])[-1200:], "".join(lines[i + 1:])[:300]))
    return out


# -- the same tokens --------------------------------------------------------------------------


@pytest.mark.parametrize("ngram", [1, 3])
def test_same_tokens_as_plain_greedy_on_real_code_with_good_bad_and_no_drafts(twin, ngram):
    forwards = {"plain": 0, "none": 0, "good": 0, "bad": 0}
    sampler = twin.sampler.with_(span=24, min_score=float("-inf"), lookup_ngram=ngram)
    for i, (prefix, suffix) in enumerate(cuts(8)):
        plain = twin.infill(prefix, suffix, sampler=sampler.with_(lookup=False))
        truth = suffix.split("\n")[0]  # (the line after the cut: a draft the model may or may not write)
        good = plain.text or truth
        for kind, drafts in (("none", []), ("good", [good]), ("bad", ["zzz qq = 41\n", truth[::-1] or "x"])):
            got = twin.infill(prefix, suffix, drafts=drafts, sampler=sampler)
            assert got.token_ids == plain.token_ids, (i, kind)
            assert got.text == plain.text and got.score == pytest.approx(plain.score, abs=1e-4)
            forwards[kind] += got.stats.forwards
        forwards["plain"] += plain.stats.forwards
    # the greedy output as a draft is accepted a block at a time; lookup alone already helps on code
    assert forwards["good"] <= forwards["plain"] // 3
    assert forwards["none"] < forwards["plain"] and forwards["bad"] <= forwards["plain"]


@pytest.mark.parametrize("ngram", [1, 3])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_same_tokens_on_the_tiny_model_with_any_drafts(tiny_ar, k, ngram):
    tok = tiny_ar.tokenizer
    for ends in (True, False):
        plain = run(tiny_ar, PROMPTS, 12, lookup=False, ends=ends)
        rng = random.Random(k)
        for drafts in ({}, {b: [span_of(plain, b)] for b in range(4)},
                       {b: [[rng.randrange(5, tok.vocab_size) for _ in range(12)]] for b in range(4)},
                       {b: [span_of(plain, b)[:3] + [7, 8, 9]] for b in range(4)}):
            got = run(tiny_ar, PROMPTS, 12, drafts=drafts, k=k, ends=ends, ngram=ngram)
            assert got.x.tolist() == plain.x.tolist()
            assert torch.allclose(got.logp, plain.logp, atol=1e-4) and torch.allclose(got.conf, plain.conf, atol=1e-4)


# -- forwards -----------------------------------------------------------------------------------


def test_a_correct_draft_of_k_tokens_is_one_forward(tiny_ar):
    prompt = [PROMPTS[0]]
    plain = run(tiny_ar, prompt, 9, lookup=False, ends=False)
    assert plain.forwards == 9
    want = span_of(plain, 0)
    got = run(tiny_ar, prompt, 9, drafts={0: [want[:8]]}, k=8, ends=False)
    assert span_of(got, 0) == want
    assert got.forwards == 1 and int(got.kept[0]) == 8  # 8 drafted tokens plus the model's ninth
    # k caps the block: the same draft with k = 4 takes two forwards (4 + 1 tokens each, the rest)
    got = run(tiny_ar, prompt, 9, drafts={0: [want[:8]]}, k=4, ends=False)
    assert span_of(got, 0) == want and got.forwards == 2 and int(got.kept[0]) == 7


def test_a_wrong_draft_costs_one_forward_and_yields_the_greedy_token(tiny_ar):
    prompt = [PROMPTS[1]]
    plain = run(tiny_ar, prompt, 6, lookup=False, ends=False)
    want = span_of(plain, 0)
    wrong = [t + 1 if t + 1 < tiny_ar.tokenizer.vocab_size else 5 for t in want]  # every token off
    steps = []
    got = run(tiny_ar, prompt, 6, drafts={0: [wrong]}, ends=False,
              on_step=lambda step, b, x, done, counts: steps.append((step, x[0, 1:].tolist(), counts)))
    assert steps[0] == (1, want[:1], [1])  # the first forward: the greedy token, nothing drafted kept
    assert span_of(got, 0) == want and got.forwards <= plain.forwards


def test_rows_of_a_batch_accept_different_amounts(tiny_ar):
    alone = [run(tiny_ar, [p], 10, lookup=False, ends=False) for p in PROMPTS[:3]]
    want = [span_of(o, 0) for o in alone]
    counts = []
    off = lambda t: t + 1 if t + 1 < tiny_ar.tokenizer.vocab_size else 5  # noqa: E731 (a token that is not t)
    # row 0 drafts its whole answer, row 1 four right tokens then wrong ones, row 2 only wrong
    # ones; their contexts differ in length
    drafts = {0: [want[0][:9]], 1: [want[1][:4] + [off(t) for t in want[1][4:9]]], 2: [[off(want[2][0])] * 9]}
    got = run(tiny_ar, PROMPTS[:3], 10, drafts=drafts, k=9, ends=False,
              on_step=lambda step, b, x, done, c: counts.append(list(c)))
    assert [span_of(got, b) for b in range(3)] == want
    assert counts[0] == [10, 5, 1]  # the first forward: 9 drafted + 1, 4 drafted + 1, the model's token
    assert int(got.kept[0]) == 9 and int(got.kept[1]) >= 4
    assert got.forwards < 10


def test_long_drafts_of_one_row_leave_holes_the_others_skip(tiny_ar):
    """Row 0 advances by a whole block every forward, row 1 by one token: row 1 reads its cache
    across many masked slots and still writes what it writes alone."""
    alone = [run(tiny_ar, [p], 24, lookup=False, ends=False) for p in PROMPTS[2:]]
    want = [span_of(o, 0) for o in alone]
    got = run(tiny_ar, PROMPTS[2:], 24, drafts={0: [want[0]]}, k=4, ends=False)
    assert [span_of(got, b) for b in range(2)] == want


def test_lookup_off_or_sampling_decodes_token_by_token(tiny_ar):
    prompt = PROMPTS[0]
    draft = tiny_ar.tokenizer.decode(tiny_ar.infill(*prompt, sampler=PLAIN).token_ids)
    on = tiny_ar.infill(*prompt, drafts=[draft], sampler=GREEDY)
    off = tiny_ar.infill(*prompt, drafts=[draft], sampler=PLAIN)
    assert on.token_ids == off.token_ids
    assert off.stats.forwards == off.stats.steps == len(off.token_ids) + (len(off.token_ids) < 8)
    sampled = GREEDY.with_(temperature=1.0, seed=3)
    a = tiny_ar.infill(*prompt, drafts=[draft], sampler=sampled)
    b = tiny_ar.infill(*prompt, drafts=[draft], sampler=sampled.with_(lookup=False))
    assert a.token_ids == b.token_ids and a.stats.forwards == b.stats.forwards
    for bad in (dict(lookup_tokens=0), dict(lookup_ngram=0), dict(lookup_ngram=4)):
        with pytest.raises(ValueError):
            SamplerConfig(**bad)


def test_int8_linears_verify_drafts_and_write_the_token_by_token_text(twin):
    """A causal model's int8 linears quantize each row alone (int8.py), so a verified block
    gives each token what a one-token forward gives it: the same text in fewer forwards."""
    from redraft.engine import int8
    if not int8.available():
        pytest.skip(int8.unavailable())
    engine = Engine(twin.model, twin.tokenizer, twin.config, name="int8")
    engine.model.use_int8()
    try:
        assert engine.model.int8 == "rows"
        prefix = "def area(width, height):\n    return width * height\n\n\ndef volume(width, height):\n    return "
        sampler = engine.sampler.with_(span=12, min_score=float("-inf"))
        plain = engine.infill(prefix, "\n", sampler=sampler.with_(lookup=False))
        assert len(plain.token_ids) >= 4 and plain.stats.forwards >= len(plain.token_ids)
        got = engine.infill(prefix, "\n", drafts=[plain.text], sampler=sampler)
        assert got.token_ids == plain.token_ids
        assert got.stats.draft_kept >= len(plain.token_ids) // 2 and 3 * got.stats.forwards <= plain.stats.forwards
        # Lookup drafts from the prefix alone (no draft given): still the plain text.
        repeat = prefix + "width * height\n\n\ndef cube(width, height):\n    return "
        a = engine.infill(repeat, "\n", sampler=sampler.with_(lookup=False))
        b = engine.infill(repeat, "\n", sampler=sampler)
        assert a.token_ids == b.token_ids and b.stats.forwards < a.stats.forwards
    finally:
        engine.model.use_int8(False)


# -- control ------------------------------------------------------------------------------------


def test_stop_sees_every_prefix_and_ends_inside_an_accepted_draft(tiny_ar):
    prompt = [PROMPTS[3]]
    plain_calls, calls = [], []
    plain = run(tiny_ar, prompt, 10, lookup=False, ends=False,
                stop=lambda b, ids: plain_calls.append(list(ids)) or len(ids) == 6)
    want = span_of(plain, 0)
    assert want[6:] == [tiny_ar._pad_id] * 4
    got = run(tiny_ar, prompt, 10, drafts={0: [want[:6] + [5, 6, 7]]}, k=9, ends=False,
              stop=lambda b, ids: calls.append(list(ids)) or len(ids) == 6)
    assert span_of(got, 0) == want and calls == plain_calls
    assert got.forwards == 1 and int(got.kept[0]) == 6


def test_an_end_token_ends_the_row_where_plain_decoding_ends_it(tiny_ar):
    prompt = [PROMPTS[0]]
    free = span_of(run(tiny_ar, prompt, 10, lookup=False, ends=False), 0)
    i = next(i for i in range(3, 10) if free[i] not in free[:i])
    end = torch.tensor([free[i]])  # a token first written at i counts as an end token here
    plain = run(tiny_ar, prompt, 10, lookup=False, ends=False, end_ids=end)
    got = run(tiny_ar, prompt, 10, drafts={0: [free]}, k=9, ends=False, end_ids=end)
    assert span_of(got, 0) == span_of(plain, 0) == free[:i + 1] + [tiny_ar._pad_id] * (9 - i)
    assert got.forwards == 1 and plain.forwards == i + 1 and int(got.kept[0]) == i + 1


def test_first_token_restriction_applies_to_the_verified_block(tiny_ar):
    prompt = [PROMPTS[1]]
    free = span_of(run(tiny_ar, prompt, 6, lookup=False, ends=False), 0)
    allowed = {0: torch.tensor([t for t in range(5, 40) if t != free[0]])}
    plain = run(tiny_ar, prompt, 6, lookup=False, ends=False, first_allowed=allowed)
    got = run(tiny_ar, prompt, 6, drafts={0: [free]}, ends=False, first_allowed=allowed)
    assert span_of(got, 0) == span_of(plain, 0) and span_of(got, 0)[0] != free[0]
    assert int(got.kept[0]) <= got.forwards * 8


def test_token_healing_gives_the_same_tokens(tiny_ar):
    for prefix in ("def ad", "for i in ran", "items = [1, 2"):
        plain = tiny_ar.infill(prefix, "\n", sampler=PLAIN.with_(heal=True))
        got = tiny_ar.infill(prefix, "\n", drafts=[tiny_ar.tokenizer.decode(plain.token_ids)[len(plain.healed):]],
                             sampler=GREEDY.with_(heal=True))
        assert got.healed == plain.healed and got.token_ids == plain.token_ids


def test_cancel_stops_after_the_forward_that_saw_it(tiny_ar):
    flag, previews = CancelFlag(), []

    def on_preview(p):
        previews.append(p)
        flag.cancel()

    with pytest.raises(Cancelled):
        tiny_ar.infill(*PROMPTS[2], drafts=["1 + 2 + 3"], sampler=GREEDY, on_preview=on_preview, cancel=flag)
    assert len(previews) == 1
    previews.clear()
    with pytest.raises(Cancelled):
        tiny_ar.infill(*PROMPTS[2], sampler=GREEDY, on_preview=previews.append, cancel=flag)
    assert previews == []


def test_previews_show_each_request_as_far_as_it_got(twin):
    prefix = "def area(width, height):\n    return width * height\n\n\ndef volume(width, height, depth):\n    return "
    draft = "width * height * depth\n"
    sampler = twin.sampler.with_(span=16, min_score=float("-inf"))
    previews = []
    done = twin.infill(prefix, "\n", drafts=[draft], sampler=sampler, on_preview=previews.append)
    assert len(previews) == done.stats.forwards
    assert previews[-1].text == done.text and previews[-1].masked == 0
    assert all(done.text.startswith(p.text) for p in previews)


# -- the shipped twin: stats, drafts, the cache model -------------------------------------------


def test_stats_report_forwards_and_accepted_draft_tokens(twin):
    prefix = "def area(width, height):\n    return width * height\n\n\ndef volume(width, height, depth):\n    return "
    k = 2
    sampler = twin.sampler.with_(span=16, min_score=float("-inf"), lookup_tokens=k)
    stop = lambda text: "\n" in text  # noqa: E731 (the server's line rule)
    plain = twin.infill(prefix, "\n", sampler=sampler.with_(lookup=False), stop=stop)
    got = twin.infill(prefix, "\n", drafts=[plain.text], sampler=sampler, stop=stop)
    assert got.token_ids == plain.token_ids
    n = len(plain.token_ids)
    assert n > k + 1 and plain.stats.forwards == n and plain.stats.draft_kept == 0
    # blocks of k drafted tokens and the model's next; the last block ends (the line's end) on a
    # drafted token unless it was full
    f = -(-n // (k + 1))
    assert got.stats.forwards == got.stats.steps == f
    assert got.stats.draft_kept == n - (f - 1) - (n % (k + 1) == 0)
    assert got.stats.tokens_per_forward == n / f


def test_the_cache_model_is_mixed_exactly(twin):
    prefix = ("def area(width, height):\n    return width * height\n\n\n"
              "def volume(width, height, depth):\n    return width * ")

    def fixed(*continuations):
        asked = []

        def lookup(typed):
            asked.append(typed)
            return [Continuation(text[len(typed):], n) for text, n in continuations if text.startswith(typed)]
        lookup.asked = asked
        return lookup

    sampler = twin.sampler.with_(span=12, min_score=float("-inf"))
    stop = lambda text: "\n" in text  # noqa: E731
    forwards = {}
    for drafts in ([], ["height * depth\n"], ["depth + 1\n"]):
        a, b = fixed(("height * depth\n", 40), ("height + width\n", 12)), \
            fixed(("height * depth\n", 40), ("height + width\n", 12))
        plain = twin.infill(prefix, "\n", drafts=drafts, sampler=sampler.with_(lookup=False), stop=stop, lookup=a)
        got = twin.infill(prefix, "\n", drafts=drafts, sampler=sampler, stop=stop, lookup=b)
        assert got.token_ids == plain.token_ids and got.text.startswith("height * depth")
        assert b.asked == a.asked and got.stats.cache_queries == plain.stats.cache_queries  # asked the same
        forwards[tuple(drafts)] = (plain.stats.forwards, got.stats.forwards)
    assert forwards[("height * depth\n",)] == (4, 1)
    assert forwards[("depth + 1\n",)] == (4, 4)  # wrong from its first token: one token a forward


def test_a_batch_of_requests_with_and_without_drafts(twin):
    reqs = [InfillRequest(p, s, drafts=d) for (p, s), d in zip(cuts(3, seed=5), (["    return x\n"], [], ["if"]))]
    sampler = twin.sampler.with_(span=16, min_score=float("-inf"))
    alone = [twin.infill(r.prefix, r.suffix, drafts=r.drafts, sampler=sampler.with_(lookup=False)) for r in reqs]
    together = twin.infill_batch(reqs, sampler=sampler)
    assert [c.token_ids for c in together] == [c.token_ids for c in alone]


# -- proposals ----------------------------------------------------------------------------------


def test_proposals_follow_a_draft_then_the_latest_ngram():
    src = LookupSource(drafts=[[1, 2, 3, 4]], before=[9, 5, 6, 7, 9, 5, 6, 8], others=[[5, 6, 30, 31]])
    p = Proposer(src, src.index(), shortest=1)
    assert p.propose(3) == [1, 2, 3]  # nothing written yet: the draft from its start
    p.append(1)
    assert p.propose(8) == [2, 3, 4]
    p.append(5)  # off the draft: "1 5" is nowhere, "5" last followed by 6 in the prefix
    assert p.propose(2) == [6, 8]
    p.append(6)  # "1 5 6" nowhere, "5 6" latest in the prefix (then 8)
    assert p.propose(4) == [8]
    p.append(8)
    p.append(5)
    p.append(6)  # "8 5 6": nowhere before; "5 6" now latest in the span itself: 8, 5, 6
    assert p.propose(5) == [8, 5, 6]
    assert p.propose(0) == []
    assert Proposer(LookupSource(), {}).propose(4) == []
    # only matches of 3 tokens or more: "8 9 5" is not earlier, and "9 5" alone is not enough
    src = LookupSource(before=[7, 9, 5, 6, 8, 9, 5])
    strict = Proposer(src, src.index(), shortest=3)
    assert strict.propose(4) == []
    strict.append(6)  # "9 5 6" is: after it, the rest of the prefix
    assert strict.propose(4) == [8, 9, 5]
