"""RemoteEngine against a scripted fake of the protocol's server (a real uvicorn on a loopback
port): streams parsed, cancellation and supersession close the stream (the fake sees the
client leave), timeouts and cut streams end in RemoteUnavailable within the timeout while the
pipeline answers from drafts, the circuit breaker opens (no requests reach the fake) and closes
after its cooldown, and a 401 is a rejected token, not an outage."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from redraft.engine import CancelFlag, Cancelled, SamplerConfig
from redraft.server.core.breaker import Breaker
from redraft.server.core.inference import answer, judge_edits
from redraft.server.core.nextedit import LineEdit
from redraft.server.core.remote import RemoteEngine, RemoteUnavailable, TokenRejected

from remote_helpers import CONFIG, DRAFT, Fake, Running, snapshot, until

SAMPLER = SamplerConfig(span=4)


@pytest.fixture(scope="module")
def served():
    fake = Fake()
    running = Running(fake.app)
    yield fake, running.url
    running.stop()


@pytest.fixture
def fake(served):
    fake, url = served
    fake.fail_status, fake.slow_score_s = None, 0.0
    until(lambda: fake.open == 0, what="idle fake")  # streams of the test before have ended
    return fake


def engine(url: str, **kw) -> RemoteEngine:
    return RemoteEngine(url, **{"timeout_s": 5.0, **kw})


def test_a_stream_is_parsed_into_previews_and_the_result(fake, served):
    remote, seen = engine(served[1]), []
    c = remote.infill("abc", "", sampler=SAMPLER, on_preview=seen.append, cache_key="k")
    assert c.text == "cba" and c.token_ids == [1, 2] and c.score == -0.5 and c.stats.steps == 2
    assert [(p.step, p.text, p.masked) for p in seen] == [(1, "a", 2), (2, "ab", 1)]
    assert fake.bodies[-1]["previews"] is True and fake.bodies[-1]["sampler"]["span"] == 4
    assert remote.infill("xyz", "", sampler=SAMPLER).text == "zyx" and fake.bodies[-1]["previews"] is False
    assert remote.breaker.state == "closed" and remote.failures == 0
    remote.close()


@pytest.mark.parametrize("previews", [True, False])
def test_cancelling_closes_the_stream(fake, served, previews):
    remote, flag = engine(served[1], timeout_s=30), CancelFlag()
    left = fake.left
    if previews:
        on_preview = lambda p: flag.cancel()  # noqa: E731  (cancelled as the first step shows)
    else:
        on_preview = None
        threading.Timer(0.3, flag.cancel).start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        remote.infill("hang", "", sampler=SAMPLER, on_preview=on_preview, cancel=flag, cache_key="k")
    assert time.monotonic() - t0 < 10.0  # not the fake's 60 s, nor the 30 s timeout (a liveness bound)
    until(lambda: fake.left == left + 1, what="disconnect seen by the fake")
    assert remote.failures == 0 and remote.breaker.state == "closed"
    remote.close()


def test_a_newer_request_for_the_same_document_closes_the_older(fake, served):
    remote = engine(served[1], timeout_s=30)
    left, outcome = fake.left, {}

    def older():
        try:
            outcome["older"] = remote.infill("hang", "", sampler=SAMPLER, cache_key="doc")
        except Cancelled:
            outcome["older"] = "cancelled"
    t = threading.Thread(target=older)
    t.start()
    until(lambda: fake.open == 1, what="the older stream open")
    other = remote.infill("other", "", sampler=SAMPLER, cache_key="another-doc")  # does not touch it
    assert other.text == "rehto" and fake.open == 1
    newer = remote.infill("newer", "", sampler=SAMPLER, cache_key="doc")
    t.join(timeout=5)
    assert newer.text == "rewen" and outcome["older"] == "cancelled"
    until(lambda: fake.left == left + 1, what="the older stream closed")
    remote.close()


def test_a_timeout_is_unavailable_within_the_timeout(fake, served):
    remote = engine(served[1], timeout_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(RemoteUnavailable, match="did not answer within 0.5 s"):
        remote.infill("hang", "", sampler=SAMPLER, cache_key="k")
    assert time.monotonic() - t0 < 2.5  # the 0.5 s timeout, not the fake's hang (a liveness bound)
    fake.slow_score_s = 3.0
    t0 = time.monotonic()
    with pytest.raises(RemoteUnavailable, match="did not answer within 0.5 s"):
        remote.score("a", "b", ["c"])
    assert time.monotonic() - t0 < 2.5 and remote.failures == 2  # not the 3 s the fake takes
    remote.close()


@pytest.mark.parametrize("how, why", [("cut", "broke"), ("short", "ended before its result")])
def test_a_stream_cut_midway_is_unavailable_and_drafts_answer(fake, served, how, why):
    remote = engine(served[1], timeout_s=2.0)
    with pytest.raises(RemoteUnavailable, match=why):
        remote.infill(how, "", sampler=SAMPLER, cache_key="k")
    snap = snapshot()
    real = remote.infill_batch

    def cut_pipeline(requests, **kw):  # the pipeline's own request, cut the same way
        return real([replace(requests[0], prefix=how + requests[0].prefix)], **kw)
    remote.infill_batch = cut_pipeline
    remote.connect()
    t0 = time.monotonic()
    a = answer(remote, snap, CancelFlag())
    assert time.monotonic() - t0 < 10.0  # the cut ends it, not a hang (a liveness bound)
    assert a.fallback and not a.ran_model and a.edit is not None and a.edit.text == DRAFT and a.source == "buffer"
    off = answer(remote, snapshot(replace(CONFIG, drafts="off")), CancelFlag())
    assert off.fallback and off.edit is None
    remote.close()


def test_the_breaker_opens_fails_at_once_and_closes_after_the_cooldown(fake, served):
    heard = []
    remote = engine(served[1], breaker=Breaker(threshold=2, cooldown_s=0.4, max_cooldown_s=2.0),
                    on_health=lambda up, why: heard.append((up, why)))
    fake.fail_status = 500
    calls = fake.calls
    for _ in range(2):
        with pytest.raises(RemoteUnavailable, match=r"failed \(500\): scripted failure"):
            remote.infill("abc", "", sampler=SAMPLER)
    assert fake.calls == calls + 2 and remote.breaker.state == "open"
    for _ in range(5):  # at once: counted below, none reaches the fake
        with pytest.raises(RemoteUnavailable, match="next try in"):
            remote.infill("abc", "", sampler=SAMPLER)
    with pytest.raises(RemoteUnavailable):
        remote.score("a", "b", ["c"])
    assert fake.calls == calls + 2 and remote.fast_failures == 6  # nothing reached the fake while open
    time.sleep(0.45)
    with pytest.raises(RemoteUnavailable, match="500"):  # the probe, still failing: open for twice as long
        remote.infill("abc", "", sampler=SAMPLER)
    assert fake.calls == calls + 3 and remote.breaker.as_dict()["cooldown_s"] == 0.8
    fake.fail_status = None
    time.sleep(0.5)
    with pytest.raises(RemoteUnavailable, match="next try in"):  # 0.5 s of the 0.8 s cooldown
        remote.infill("abc", "", sampler=SAMPLER)
    time.sleep(0.35)
    assert remote.infill("abc", "", sampler=SAMPLER).text == "cba"  # the probe gets through
    assert remote.breaker.state == "closed" and remote.breaker.as_dict()["cooldown_s"] == 0.4
    assert remote.infill("again", "", sampler=SAMPLER).text == "niaga" and fake.calls == calls + 5
    assert [up for up, _ in heard] == [False, True] and "500" in heard[0][1]  # one outage, told once each way
    remote.close()


def test_a_rejected_token_is_not_an_outage(served):
    fake = Fake(token="right")
    running = Running(fake.app)
    heard = []
    try:
        wrong = engine(running.url, token="wrong", on_health=lambda up, why: heard.append((up, why)))
        for _ in range(4):
            with pytest.raises(TokenRejected, match="rejected the token"):
                wrong.infill("abc", "", sampler=SAMPLER)
        assert fake.calls == 4 and wrong.breaker.state == "closed" and wrong.failures == 0
        assert len(heard) == 1 and heard[0][0] is False and "check --token" in heard[0][1]
        wrong.close()
        right = engine(running.url, token="right")
        assert right.infill("abc", "", sampler=SAMPLER).text == "cba"
        assert fake.headers[-1]["authorization"] == "Bearer right"
        right.close()
    finally:
        running.stop()


def test_next_edits_keep_none_while_the_engine_is_away(fake, served):
    remote = engine(served[1])
    fake.fail_status = 503
    lines = ("def f(a):\n", "    return a\n", "f(1)\n")
    proposal = LineEdit(2, 3, 3, ", 2", "f(1)", "f(1, 2)")
    assert judge_edits(remote, lines, [proposal], [], -10.0) == []
    fake.fail_status = None
    assert judge_edits(remote, lines, [proposal], [], -10.0) == [proposal]  # the fake scores by length
    remote.close()
