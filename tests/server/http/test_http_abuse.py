"""The HTTP API under abuse, against a real uvicorn server in this process: many streams at
once, clients that leave mid-stream, wrong tokens, oversized and slow bodies, a route that
fails inside. Each test asserts what the server did (its counters at /v1/redraft/stats, the
bodies), and that it serves the next request as before."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import time
from contextlib import AsyncExitStack
from dataclasses import replace

import httpx
import pytest

from http_helpers import CONFIG, TOKEN, Running, sse
from redraft.engine import CancelFlag
from redraft.server.http import api as http_api
from redraft.server.http.app import INTERNAL, build_app

AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}
MAX_BODY, BODY_TIMEOUT = 4096, 0.5
PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def server(inference):
    running = Running(build_app(inference, replace(CONFIG, drafts="off", line_tokens=8), TOKEN, MAX_BODY,
                                BODY_TIMEOUT))
    yield running
    running.stop()


def stats(server) -> dict:
    r = httpx.get(f"{server.url}/v1/redraft/stats", headers=AUTH, timeout=10)
    assert r.status_code == 200
    return r.json()


def settled(server, timeout: float = 20.0) -> dict:
    """The counters once no job is queued or running and no stream is open (bounded wait)."""
    deadline = time.monotonic() + timeout
    while True:
        s = stats(server)
        if s["jobs_queued"] == s["jobs_running"] == s["streams_open"] == 0:
            return s
        assert time.monotonic() < deadline, f"still busy after {timeout} s: {s}"
        time.sleep(0.05)


def grew(before: dict, after: dict) -> dict:
    """The counters that changed, by how much (dicts key by key)."""
    out = {}
    for k, v in after.items():
        if isinstance(v, dict):
            d = {kk: vv - before[k].get(kk, 0) for kk, vv in v.items() if vv != before[k].get(kk, 0)}
            if d:
                out[k] = d
        elif isinstance(v, int) and v != before[k]:
            out[k] = v - before[k]
    return out


def _ask(i: int) -> tuple[str, dict]:
    """A streamed request of every family in turn."""
    body = {"prompt": PREFIX + f"x{i} + ", "suffix": SUFFIX}
    return [("/v1/completions", body | {"stream": True, "max_tokens": 4}),
            ("/v1/fim/completions", body | {"diffusing": True, "max_tokens": 4}),
            ("/api/generate", body | {"options": {"num_predict": 4}})][i % 3]


def test_stats_route_is_small_and_counts_nothing_itself(server):
    first, second = stats(server), stats(server)
    assert first == second  # reading the counters does not change them
    assert {"requests", "answered", "rejected", "errors", "errors_by_route", "cancelled", "jobs", "jobs_queued",
            "jobs_running", "streams_open", "budget_expired", "model", "model_error"} == set(first)
    assert first["model"] == "redraft" and first["model_error"] is None


def test_fifty_concurrent_streams_all_complete(server):
    before = settled(server)

    async def one(client: httpx.AsyncClient, i: int):
        route, body = _ask(i)
        r = await client.post(server.url + route, json=body, headers=AUTH)
        return route, r

    async def run():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=60)) as client:
            return await asyncio.gather(*(one(client, i) for i in range(50)))
    answers = asyncio.run(run())
    for route, r in answers:
        assert r.status_code == 200, r.text
        if route == "/api/generate":
            lines = [json.loads(line) for line in r.text.splitlines()]
            assert [x["done"] for x in lines] == [False] * (len(lines) - 1) + [True]
        else:
            events = sse(r.text)
            assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    after = settled(server)
    assert grew(before, after) == {"requests": 50, "answered": 50, "jobs": 50}


def test_clients_that_leave_mid_stream_leave_no_job_running(inference, server, slow_engine):
    """Ten streams and five plain requests, all dropped while the first job is denoising: the
    running job stops at its next step, the queued ones never call the model."""
    slow_engine["delay"] = 0.1
    body = {"prompt": "x = ", "suffix": "", "temperature": 0}
    start = slow_engine["calls"]
    assert httpx.post(f"{server.url}/v1/completions", json=body, headers=AUTH, timeout=60).status_code == 200
    full = slow_engine["calls"] - start  # model calls of one request run to its end
    assert full >= 6
    before = settled(server)

    async def run():
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(httpx.AsyncClient(timeout=60))
            for i in range(10):
                route = "/v1/fim/completions" if i % 2 else "/api/generate"
                await stack.enter_async_context(client.stream(
                    "POST", server.url + route, json=body | {"diffusing": bool(i % 2), "stream": True}, headers=AUTH))
            plain = [asyncio.ensure_future(client.post(f"{server.url}/v1/completions", json=body, headers=AUTH))
                     for _ in range(5)]
            for _ in range(200):  # every job is in: one running, the rest queued behind it
                s = await asyncio.to_thread(stats, server)
                if s["jobs"] - before["jobs"] == 15 and s["jobs_running"] == 1:
                    break
                await asyncio.sleep(0.05)
            assert s["jobs_queued"] >= 12, s  # (the first job is still denoising)
            for task in plain:
                task.cancel()
            await asyncio.gather(*plain, return_exceptions=True)
        # every connection is closed here
    calls, flags = slow_engine["calls"], len(slow_engine["flags"])
    asyncio.run(run())
    after = settled(server)
    assert grew(before, after) == {"requests": 15, "jobs": 15, "cancelled": 15}
    assert slow_engine["calls"] - calls < full  # less than one whole request's model calls for all fifteen
    reached = slow_engine["flags"][flags:]  # the jobs that got as far as the engine: cancelled there
    assert 1 <= len(reached) <= 2 and all(flag.is_set() for flag in reached)
    slow_engine["delay"] = 0.0
    r = httpx.post(f"{server.url}/v1/completions", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 200 and not slow_engine["flags"][-1].is_set()


def test_streams_and_drops_leave_nothing_behind(server):
    """Memory stays flat: after rounds of streams, some dropped, no job's objects survive and
    the process has not grown."""
    def round_trip():
        async def run():
            async with httpx.AsyncClient(timeout=120) as client:
                async def drop(i):
                    route, body = _ask(i)
                    async with client.stream("POST", server.url + route, json=body, headers=AUTH):
                        await asyncio.sleep(0.01)
                full = [client.post(server.url + r, json=b, headers=AUTH) for r, b in map(_ask, range(20))]
                await asyncio.gather(*full, *(drop(i) for i in range(10)))
        asyncio.run(run())
        settled(server)
        gc.collect()

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    round_trip()  # warm: allocator pools, thread pools, the engine's caches
    start = rss()
    for _ in range(3):
        round_trip()
    assert [o for o in gc.get_objects() if type(o) is CancelFlag] == []  # no job's flag is held
    assert rss() - start < 8 << 20, (start, rss())


def test_wrong_token_is_401_and_counted(server):
    before = settled(server)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": "Basic x"},
                    {"Authorization": f"Bearer {TOKEN}x"}):
        r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "x"}, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["type"] == "authentication_error" and TOKEN not in r.text
    r = httpx.post(f"{server.url}/api/generate", json={"prompt": "x"})
    assert r.status_code == 401 and isinstance(r.json()["error"], str)  # Ollama's shape
    assert httpx.get(f"{server.url}/v1/redraft/stats").status_code == 401  # the counters too
    after = settled(server)
    assert grew(before, after) == {"requests": 6, "rejected": {"401": 6}}  # no job ran


def test_refusals_are_counted_by_status(server):
    before = settled(server)
    assert httpx.get(f"{server.url}/v2/nothing", headers=AUTH).status_code == 404
    assert httpx.get(f"{server.url}/v1/completions", headers=AUTH).status_code == 405
    r = httpx.post(f"{server.url}/v1/completions", content=b"{not json", headers=AUTH | JSON)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert httpx.post(f"{server.url}/v1/completions", json={"prompt": "x", "n": "many"}, headers=AUTH
                      ).status_code == 400
    assert httpx.post(f"{server.url}/v1/completions", json={"model": "gpt-4", "prompt": "x"}, headers=AUTH
                      ).status_code == 404
    assert grew(before, settled(server)) == {"requests": 5, "rejected": {"404": 2, "405": 1, "400": 2}}


def test_an_internal_error_is_a_500_in_the_routes_shape(server, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("secret detail of a bug")
    before = settled(server)
    monkeypatch.setattr(http_api, "complete_fim", broken)  # on the inference thread
    monkeypatch.setattr(http_api.Models, "describe", broken)  # on the event loop
    with caplog.at_level(logging.ERROR):
        r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "x = "}, headers=AUTH, timeout=30)
        assert r.status_code == 500 and r.json() == {
            "error": {"message": INTERNAL, "type": "server_error", "param": None, "code": 500}}
        r = httpx.post(f"{server.url}/api/generate", json={"prompt": "x = ", "stream": False}, headers=AUTH)
        assert r.status_code == 500 and r.json() == {"error": INTERNAL}
        r = httpx.get(f"{server.url}/api/tags", headers=AUTH)
        assert r.status_code == 500 and r.json() == {"error": INTERNAL}
        streamed = httpx.post(f"{server.url}/v1/completions", json={"prompt": "x = ", "stream": True}, headers=AUTH)
        assert streamed.status_code == 200  # sent before the job failed: the error is the stream's last event
        assert sse(streamed.text) == [{"error": {"message": INTERNAL, "type": "server_error", "param": None,
                                                 "code": 500}}]
        lines = httpx.post(f"{server.url}/api/generate", json={"prompt": "x = "}, headers=AUTH).text.splitlines()
        assert [json.loads(line) for line in lines] == [{"error": INTERNAL}]
    for text in (r.text, streamed.text, "".join(lines)):
        assert "secret detail" not in text and "Traceback" not in text
    logged = [rec for rec in caplog.records if rec.exc_info and "secret detail" in str(rec.exc_info[1])]
    assert len(logged) == 5  # each failure logged once, with its traceback
    after = settled(server)
    assert grew(before, after) == {"requests": 5, "errors": 5, "jobs": 4, "errors_by_route": {
        "/v1/completions": 2, "/api/generate": 2, "/api/tags": 1}}
    monkeypatch.undo()
    assert httpx.post(f"{server.url}/v1/completions", json={"prompt": "x = ", "max_tokens": 2}, headers=AUTH,
                      timeout=30).status_code == 200
    assert httpx.get(f"{server.url}/api/tags", headers=AUTH).status_code == 200
    assert grew(after, settled(server)) == {"requests": 2, "answered": 2, "jobs": 1}


def test_oversized_bodies_are_413(server):
    before = settled(server)
    big = json.dumps({"prompt": "x" * MAX_BODY}).encode()
    r = httpx.post(f"{server.url}/v1/completions", content=big, headers=AUTH | JSON)  # says its length
    assert r.status_code == 413 and str(MAX_BODY) in r.json()["error"]["message"]

    def chunks():  # no Content-Length: the server counts as it reads
        for i in range(0, len(big), 1000):
            yield big[i:i + 1000]
    r = httpx.post(f"{server.url}/api/generate", content=chunks(), headers=AUTH | JSON)
    assert r.status_code == 413 and str(MAX_BODY) in r.json()["error"]
    assert grew(before, settled(server)) == {"requests": 2, "rejected": {"413": 2}}


def test_slow_bodies_are_408(server):
    before = settled(server)
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        t0 = time.monotonic()  # before the server can start its clock
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 100\r\n\r\n{\"prompt\": ")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            part = sock.recv(4096)
            if not part:
                break
            reply += part
        waited = time.monotonic() - t0
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and BODY_TIMEOUT <= waited < BODY_TIMEOUT + 5
    assert json.loads(payload)["error"]["type"] == "timeout_error"
    assert grew(before, settled(server)) == {"requests": 1, "rejected": {"408": 1}}
    assert httpx.post(f"{server.url}/v1/completions", json={"prompt": "x = ", "max_tokens": 2}, headers=AUTH,
                      timeout=30).status_code == 200
