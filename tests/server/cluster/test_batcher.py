"""BatchingEngine over a tiny engine: callers on several threads batched together, each getting
what the plain engine gives it alone; cancel, previews, per-document context reuse in a batch,
and the token-bounded context store. No Ray."""

import threading
import time

import pytest

from redraft.engine import CancelFlag, Cancelled, Engine, EngineConfig, InfillRequest, SamplerConfig
from redraft.engine.cache import ContextCache, ContextStore
from redraft.server.cluster.batcher import BatchingEngine

GREEDY = SamplerConfig(span=8, heal=False)
PROMPTS = [("def add(a, b):\n    return ", "\n\n\nclass Point:\n"),
           ("for i in range(10):\n    print(", ")\n"),
           ("items = [1, 2, 3]\ntotal = ", "\nname = 'x'\n"),
           ("class Point:\n    def __init__(self, x, y):\n        self.", "\n        self.y = y\n"),
           ("def norm(self):\n    return (self.x ** 2 + ", ") ** 0.5\n"),
           ("total = sum(", ")\n")]


@pytest.fixture(scope="module")
def engine(tiny_model):
    return Engine.load(str(tiny_model), dtype="float32")


@pytest.fixture
def slowed(engine):
    """Every model call sleeps `delay` s first (so callers pile up behind a running batch) and
    is counted."""
    forward = engine.model.forward
    state = {"delay": 0.03, "calls": 0}

    def slow(*args, **kwargs):
        state["calls"] += 1
        time.sleep(state["delay"])
        return forward(*args, **kwargs)
    engine.model.forward = slow
    yield state
    del engine.model.forward


def alone(engine, prefix, suffix, **kw):
    fresh = Engine(engine.model, engine.tokenizer, EngineConfig(reuse_cache=False), name="alone")
    return fresh.infill(prefix, suffix, sampler=GREEDY, **kw)


def run_threads(fns):
    out, errors = [None] * len(fns), []
    start = threading.Barrier(len(fns))

    def call(i):
        start.wait()
        try:
            out[i] = fns[i]()
        except BaseException as e:  # noqa: BLE001 (collected and asserted on)
            errors.append((i, e))
    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out, errors


def test_callers_on_threads_batch_together_and_get_their_own_text(engine, slowed):
    stops = [None, lambda t: "\n" in t, None, lambda t: len(t) >= 3, None, None]
    want = [alone(engine, p, s, stop=stops[i]) for i, (p, s) in enumerate(PROMPTS)]
    batcher = BatchingEngine(engine, max_rows=64)
    try:
        got, errors = run_threads([
            (lambda i=i: batcher.infill(PROMPTS[i][0], PROMPTS[i][1], sampler=GREEDY, cache_key=f"doc{i}",
                                        stop=stops[i]))
            for i in range(len(PROMPTS))])
        assert not errors
        assert len(got) == len(want) == 6
        for g, w in zip(got, want):
            assert g.text == w.text and g.token_ids == w.token_ids
        stats = batcher.stats()
        assert stats["requests"] == 6
        assert sum(n * k for n, k in stats["requests_per_batch"].items()) == 6
        # callers running at once computed their steps in one forward
        assert max(stats["callers_per_forward"]) >= 2 and stats["max_batch"] >= 2, stats
        assert sum(stats["callers_per_forward"].values()) == stats["forwards"] > 0
    finally:
        batcher.close()


def test_a_batch_of_several_documents_reuses_each_ones_keys_and_values(engine):
    batcher = BatchingEngine(engine)
    try:
        keys = [f"reuse{i}" for i in range(3)]
        for (p, s), key in zip(PROMPTS, keys):  # each document's context encoded once, alone
            batcher.infill(p, s, sampler=GREEDY, cache_key=key)
        typed = [InfillRequest(p + "x", s, cache_key=key) for (p, s), key in zip(PROMPTS, keys)]
        before = engine.context_stats()["hits"]
        out = engine.infill_batch(typed, sampler=GREEDY)
        assert len(out) == 3
        for o, r in zip(out, typed):
            assert o.stats.reused_tokens > 0
            assert o.token_ids == alone(engine, r.prefix, r.suffix).token_ids
        assert engine.context_stats()["hits"] == before + 3
    finally:
        batcher.close()


def test_a_cancelled_caller_leaves_at_once_and_the_others_go_on(engine, slowed):
    slowed["delay"] = 0.1
    want = alone(engine, *PROMPTS[0])
    batcher = BatchingEngine(engine)
    flag = CancelFlag()
    try:
        def cancelled():
            t0 = time.perf_counter()
            try:
                batcher.infill(*PROMPTS[1], sampler=GREEDY, cancel=flag)
            except Cancelled:
                return time.perf_counter() - t0
        threading.Timer(0.25, flag.cancel).start()
        (left_after, kept), errors = run_threads([cancelled, lambda: batcher.infill(*PROMPTS[0], sampler=GREEDY)])
        assert not errors
        assert left_after is not None and left_after < 0.25 + 0.5  # left within a poll, not at the batch's end
        assert kept.token_ids == want.token_ids
        assert batcher.stats()["cancelled"] == 1
    finally:
        batcher.close()


def test_a_batch_whose_callers_all_left_stops_early(engine, slowed):
    slowed["delay"] = 0.1
    batcher = BatchingEngine(engine)
    flag = CancelFlag()
    try:
        threading.Timer(0.3, flag.cancel).start()
        with pytest.raises(Cancelled):
            batcher.infill(*PROMPTS[0], sampler=GREEDY.with_(span=32, threshold=1.0), cancel=flag)
        deadline = time.monotonic() + 5
        while batcher.active and time.monotonic() < deadline:
            time.sleep(0.02)
        calls = slowed["calls"]
        time.sleep(0.4)
        assert batcher.active == 0
        assert slowed["calls"] == calls  # the engine stopped: no more forwards
        assert calls < 32  # far fewer than the 32 steps a threshold of 1.0 would take
    finally:
        batcher.close()


def test_previews_reach_their_own_caller(engine, slowed):
    def previews_of(run):
        seen = []
        run(seen.append)
        return seen
    want = [previews_of(lambda sink, i=i: alone(engine, *PROMPTS[i], on_preview=sink)) for i in (0, 2)]
    batcher = BatchingEngine(engine)
    sinks = [[], []]
    try:
        _, errors = run_threads([
            lambda: batcher.infill(*PROMPTS[0], sampler=GREEDY, on_preview=sinks[0].append),
            lambda: batcher.infill(*PROMPTS[2], sampler=GREEDY, on_preview=sinks[1].append)])
        assert not errors
        for got, expected in zip(sinks, want):
            assert got and expected
            assert {p.request for p in got} == {0}
            assert {p.text for p in got} == {p.text for p in expected}
    finally:
        batcher.close()


def test_bad_input_fails_only_its_caller(engine, slowed):
    batcher = BatchingEngine(engine)
    try:
        bad = GREEDY.with_(span=8)
        out, errors = run_threads([
            lambda: batcher.infill_batch([InfillRequest(*PROMPTS[0], drafts=("x",))], sampler=bad,
                                         stop=lambda t: 1 / 0),
            lambda: batcher.infill(*PROMPTS[2], sampler=GREEDY)])
        assert [type(e) for _, e in errors] == [ZeroDivisionError]
        assert out[1].token_ids == alone(engine, *PROMPTS[2]).token_ids
        assert batcher.stats()["errors"] == 1
    finally:
        batcher.close()


def test_score_and_forget_run_between_batches(engine):
    batcher = BatchingEngine(engine)
    try:
        assert batcher.score("x = ", "\n", ["1", "2"]) == engine.score("x = ", "\n", ["1", "2"])
        batcher.infill(*PROMPTS[0], sampler=GREEDY, cache_key="gone")
        assert "gone" in engine._contexts
        batcher.forget("gone")
        assert "gone" not in engine._contexts
        assert batcher.name == engine.name and batcher.info() == engine.info()
        assert batcher.context_budget(8) == engine.context_budget(8)
    finally:
        batcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        batcher.infill(*PROMPTS[0])


def test_context_store_is_least_recently_used_and_bounded_by_tokens():
    store = ContextStore(max_tokens=10)

    def fill(key, n):
        cache = store.get(key)
        cache.tokens = [(0, i) for i in range(n)]
        store.record(reused=0)
        return cache
    fill("a", 4)
    fill("b", 4)
    store.get("a")  # a used more recently than b
    fill("c", 4)  # 12 tokens > 10: the least recently used (b) goes
    assert "a" in store and "c" in store and "b" not in store
    fill("d", 30)  # alone over the bound: every other goes, the one in use stays
    assert len(store) == 1 and "d" in store
    store.record(reused=3)
    assert store.stats()["hits"] == 1 and store.stats()["misses"] == 4 and store.stats()["evicted"] == 3
    assert isinstance(store.get("d"), ContextCache)


def solo(engine, prompt, sampler):
    return Engine(engine.model, engine.tokenizer, EngineConfig(reuse_cache=False), name="alone").infill(
        *prompt, sampler=sampler)


def finish_times(batcher, calls: dict, first_forwards: int, slowed) -> dict:
    """Run calls[name]() on threads: the first at once, the others once it has made
    `first_forwards` model calls. name -> (completion, monotonic time it returned)."""
    done: dict = {}

    def go(name):
        done[name] = (calls[name](), time.monotonic())
    names = list(calls)
    threads = [threading.Thread(target=go, args=(n,)) for n in names]
    threads[0].start()
    deadline = time.monotonic() + 30
    while slowed["calls"] < first_forwards and time.monotonic() < deadline:
        time.sleep(0.005)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return done


def test_a_request_arriving_mid_batch_starts_at_the_next_step_and_leaves_when_done(engine, slowed):
    """Continuous batching: a long batch is running (32 steps); a short request that arrives
    meanwhile joins its step forwards from the next step on (one pass for both) and answers long
    before it, each with the text it gets alone."""
    long_s, short_s = GREEDY.with_(span=32), GREEDY.with_(span=4)
    want_long, want_short = solo(engine, PROMPTS[0], long_s), solo(engine, PROMPTS[1], short_s)
    batcher = BatchingEngine(engine)
    try:
        slowed["calls"] = 0
        done = finish_times(batcher, {
            "long": lambda: batcher.infill(*PROMPTS[0], sampler=long_s, cache_key="a"),
            "short": lambda: batcher.infill(*PROMPTS[1], sampler=short_s, cache_key="b")}, 4, slowed)
        assert done["long"][0].token_ids == want_long.token_ids and done["short"][0].token_ids == want_short.token_ids
        assert done["short"][1] < done["long"][1]
        stats = batcher.stats()
        assert stats["most_in_turn"] == 2 and stats["shared_steps"] >= 4 and stats["batches"] == 2
        assert stats["callers_per_forward"].get(2, 0) >= 2 and stats["forwards"] >= 2, stats
        assert stats["most_rows_per_forward"] >= 2
    finally:
        batcher.close()


def test_requests_on_the_same_document_never_run_in_turn(engine, slowed):
    """Their keys/values are one cache: the second waits until the first has finished."""
    s = GREEDY.with_(span=8)
    want = solo(engine, PROMPTS[2], s)
    batcher = BatchingEngine(engine)
    try:
        slowed["calls"] = 0
        done = finish_times(batcher, {n: (lambda: batcher.infill(*PROMPTS[2], sampler=s, cache_key="same"))
                                      for n in ("first", "second")}, 2, slowed)
        assert all(c.token_ids == want.token_ids for c, _ in done.values())
        assert batcher.stats()["most_in_turn"] == 0 and batcher.stats()["batches"] == 2
    finally:
        batcher.close()


def test_a_merged_forward_that_fails_leaves_each_batch_to_run_its_own(engine, slowed, monkeypatch):
    """The loop's merged pass is an optimisation: should it raise, every batch runs its own
    forward on resuming and each caller still gets its own text."""
    stops = [None, lambda t: "\n" in t, None]
    want = [alone(engine, p, s, stop=stops[i]) for i, (p, s) in enumerate(PROMPTS[:3])]
    tried = []

    def broken(forwards):
        tried.append(len(forwards))
        raise RuntimeError("merged pass unavailable")
    monkeypatch.setattr(engine, "run_forwards", broken, raising=False)
    batcher = BatchingEngine(engine)
    try:
        got, errors = run_threads([
            (lambda i=i: batcher.infill(*PROMPTS[i], sampler=GREEDY, cache_key=f"broken{i}", stop=stops[i]))
            for i in range(3)])
        assert not errors
        assert tried and max(tried) >= 2  # the loop did try to merge several batches' forwards
        assert [g.token_ids for g in got] == [w.token_ids for w in want]
        stats = batcher.stats()
        assert stats["forwards"] == 0 and stats["errors"] == 0
    finally:
        batcher.close()
