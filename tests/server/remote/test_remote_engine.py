"""RemoteEngine against the real engine routes, served by uvicorn on a loopback port over a tiny
engine: the same inputs give the same texts and scores as the engine in process, previews
arrive, the document travels as an opaque id, a client that leaves cancels the engine, and the
routes refuse bad bodies and tokens with a message."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from redraft.engine import CancelFlag, Cancelled, Engine
from redraft.server.core import inference as core
from redraft.server.core import wire
from redraft.server.core.context import Mode
from redraft.server.core.inference import Inference, answer, run_engine
from redraft.server.core.postprocess import Unit
from redraft.server.core.remote import RemoteEngine, TokenRejected, session_id
from redraft.server.http.app import Access, build_app

from remote_helpers import CONFIG, DRAFT, TOKEN, Running, engine_app, snapshot, until

PREFIX, SUFFIX = "def add(a, b):\n    return a", "\n\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def engines(tiny_model):
    """(in process, remote) over two copies of the same tiny model."""
    local, served = Engine.load(str(tiny_model), dtype="float32"), Engine.load(str(tiny_model), dtype="float32")
    running = Running(engine_app(lambda: served))
    remote = RemoteEngine(running.url, token=TOKEN, timeout_s=30)
    yield local, remote, served
    remote.close()
    running.stop()


def test_info_sampler_and_budget_are_the_engines(engines):
    local, remote, _ = engines
    info = remote.connect()
    assert remote.name == local.name and info.parameters == local.info().parameters
    assert remote.info().scores_edits is True and remote.sampler == local.sampler
    assert [remote.context_budget(s) for s in (1, 16, 48)] == [local.context_budget(s) for s in (1, 16, 48)]
    assert remote.with_sampler(seed=4) == local.sampler.with_(seed=4)
    remote.with_sampler(seed=local.sampler.seed)


def test_infill_texts_scores_and_previews_equal_the_engine_in_process(engines):
    local, remote, _ = engines
    sampler = local.sampler.with_(span=8)
    stop = Unit(Mode.LINE, "", 4)
    cases = [dict(), dict(drafts=["+ b"]), dict(extra="# helper\n"), dict(stop=stop)]
    for i, kw in enumerate(cases):
        seen_local, seen_remote = [], []
        a = local.infill(PREFIX, SUFFIX, sampler=sampler, cache_key=f"doc{i}", on_preview=seen_local.append, **kw)
        b = remote.infill(PREFIX, SUFFIX, sampler=sampler, cache_key=f"doc{i}", on_preview=seen_remote.append, **kw)
        assert (b.text, b.token_ids, b.length, b.abstained) == (a.text, a.token_ids, a.length, a.abstained), kw
        assert b.score == pytest.approx(a.score) and b.confidences == pytest.approx(a.confidences)
        assert b.stats.steps == a.stats.steps and b.stats.draft == a.stats.draft
        assert seen_local and seen_remote == seen_local  # every step's preview, in order
    texts = ["return a + b", "return a - b", "pass"]
    assert remote.score(PREFIX[:-len("return a")], SUFFIX, texts) == pytest.approx(
        local.score(PREFIX[:-len("return a")], SUFFIX, texts))


def test_a_batch_and_a_local_stop_rule(engines):
    local, remote, _ = engines
    sampler = local.sampler.with_(span=6)
    from redraft.engine import InfillRequest
    reqs = [InfillRequest(PREFIX, SUFFIX), InfillRequest("x = [1, 2", "]\n")]
    a = local.infill_batch(reqs, sampler=sampler, cache_key="batch")
    b = remote.infill_batch(reqs, sampler=sampler, cache_key="batch")
    assert [c.text for c in b] == [c.text for c in a] and len(b) == 2
    cut = remote.infill(PREFIX, SUFFIX, sampler=sampler, cache_key="batch", stop=lambda t: len(t) >= 2)
    whole = remote.infill(PREFIX, SUFFIX, sampler=sampler, cache_key="batch")
    assert len(whole.text) >= 2 and cut.text == whole.text[:2]  # a callable cuts the text here


def test_the_pipeline_answers_the_same_through_the_remote_engine(engines):
    local, remote, _ = engines
    snap = snapshot()
    a, b = run_engine(local, snap), run_engine(remote, snap)
    assert a.ran_model and b.ran_model and (b.edit, b.raw, b.source) == (a.edit, a.raw, a.source)


def test_the_document_travels_as_a_salted_hash(tiny_model):
    seen = []
    served = Engine.load(str(tiny_model), dtype="float32")
    app = engine_app(lambda: served, token=None)

    async def spy(scope, receive, send):
        if scope["type"] == "http":
            seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await app(scope, receive, send)
    running = Running(spy)
    remote = RemoteEngine(running.url)
    try:
        remote.infill("a = 1\nb = ", "\n", sampler=served.sampler.with_(span=4), cache_key="file:///secret/a.py")
        sent = seen[-1]
        assert sent["x-session-id"] == session_id("file:///secret/a.py") and len(sent["x-session-id"]) == 64
        assert "secret" not in str(sent) and len(sent["x-request-id"]) == 16
    finally:
        remote.close()
        running.stop()


def test_a_client_that_leaves_cancels_the_engine_call(tiny_model):
    served = Engine.load(str(tiny_model), dtype="float32")
    flags, forward = [], served.model.forward

    def slow(*args, **kwargs):
        time.sleep(0.2)
        return forward(*args, **kwargs)
    served.model.forward = slow
    infill_batch = served.infill_batch

    def spy(requests, **kw):
        flags.append(kw["cancel"])
        return infill_batch(requests, **kw)
    served.infill_batch = spy
    running = Running(engine_app(lambda: served, token=None))
    remote = RemoteEngine(running.url, timeout_s=30)
    flag = CancelFlag()
    try:
        threading.Timer(0.5, flag.cancel).start()
        t0 = time.monotonic()
        with pytest.raises(Cancelled):
            remote.infill("def f(x):\n    return ", "\n", sampler=served.sampler.with_(span=32, threshold=1.0),
                          cancel=flag, cache_key="k")
        assert time.monotonic() - t0 < 10.0  # a liveness bound; the server-side flag is the proof
        until(lambda: flags and flags[0].is_set(), what="server-side cancel")
        assert remote.breaker.state == "closed" and remote.failures == 0
    finally:
        remote.close()
        running.stop()


def test_bad_bodies_and_tokens_are_refused_with_a_message(engines):
    _, remote, _ = engines
    url = remote.url
    auth = {"authorization": f"Bearer {TOKEN}"}
    r = httpx.post(url + wire.INFILL, content=b"{not json", headers={**auth, "content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["message"]
    r = httpx.post(url + wire.INFILL, json={"requests": [{"prefix": 3}]}, headers=auth)
    assert r.status_code == 400 and r.json()["message"] == "requests[0].prefix has the wrong type (int)"
    r = httpx.post(url + wire.INFILL, json={"requests": [{"prefix": "x"}], "sampler": {"span": 0}}, headers=auth)
    assert r.status_code == 400 and "span must be >= 1" in r.json()["message"]
    r = httpx.post(url + wire.SCORE, json={"prefix": "x"}, headers=auth)
    assert r.status_code == 400 and "body.texts is missing" in r.json()["message"]
    r = httpx.get(url + wire.INFO)
    assert r.status_code == 401 and r.json() == {"status": 401, "message": r.json()["message"]}
    stranger = RemoteEngine(url, token="wrong")
    with pytest.raises(TokenRejected, match="rejected the token"):
        stranger.connect()
    stranger.close()
    assert remote.connect().name  # still serving


def test_no_engine_is_a_503(tiny_model):
    running = Running(engine_app(lambda: None, token=None))
    try:
        r = httpx.get(running.url + wire.INFO)
        assert r.status_code == 503 and "no engine" in r.json()["message"]
    finally:
        running.stop()


def test_serve_http_serves_the_protocol_and_an_inference_uses_it(tiny_model):
    """`redraft serve --http` (build_app) on one side, `--engine-url` (Inference.load(url=...))
    on the other: the same answer as the model in process."""
    server_side = Inference()
    assert server_side.load(str(tiny_model), "cpu", "float32").result() is None
    running = Running(build_app(server_side, CONFIG, access=Access(engine_routes=True)))  # (no token here)
    client = Inference()
    try:
        assert client.load(None, "cpu", "auto", url=running.url).result() is None
        assert client.state == "ready" and client.load_error is None and client.engine.name == "redraft"
        snap = snapshot()
        local = server_side.executor.submit(answer, server_side.engine, snap).result()
        remote = client.executor.submit(client.answer, snap, CancelFlag()).result()
        assert remote.ran_model and not remote.fallback and remote.edit == local.edit and remote.raw == local.raw
        drafts_only = snapshot(CONFIG.__class__(**{**CONFIG.__dict__, "drafts": "only"}))
        assert client.answer(drafts_only, CancelFlag()).edit.text == DRAFT
        assert core.can_judge_edits(client.engine)
    finally:
        client.shutdown()
        running.stop()
        server_side.shutdown()


def test_a_remote_causal_model_scores_alternatives_as_in_process(tmp_path):
    """The twin judges next edits too (teacher-forced): the engine routes answer its scores."""
    import tiny
    folder = tiny.make_family(tmp_path / "ar", "redraft-ar")
    local, served = Engine.load(str(folder), dtype="float32"), Engine.load(str(folder), dtype="float32")
    running = Running(engine_app(lambda: served))
    remote = RemoteEngine(running.url, token=TOKEN, timeout_s=30)
    try:
        assert remote.connect().scores_edits is True and core.can_judge_edits(remote)
        texts = ["b", "a + b", "b - a  # no"]
        want = local.score(PREFIX, SUFFIX, texts, extra="# helper\n")
        assert len(want) == 3 and len(set(want)) == 3
        assert remote.score(PREFIX, SUFFIX, texts, extra="# helper\n") == pytest.approx(want, abs=1e-5)
    finally:
        remote.close()
        running.stop()
