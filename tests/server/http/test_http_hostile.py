"""`redraft serve --http --engine-routes` as a user runs it, against what a web page or another
local process can send to a loopback port: a DNS-rebinding Host, a browser's text/plain post
from a foreign Origin, engine bodies far past the model's context, bodies that break JSON
decoders, heads that never end. Each probe gets a refusal with a message, the server runs no
job for it, no 500 and no traceback, its memory stays bounded, and an editor's completion sent
meanwhile is answered with text within its time budget."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from http_helpers import ServeProcess, raw_request, sse
from redraft.server.core import wire
from redraft.server.core.settings import ServerConfig
from redraft.server.http.app import HEAD_TIMEOUT_S

BUDGET_S = ServerConfig().max_time / 1000  # what `serve` gives each request
SLACK_S = 1.0  # one denoising step, post-processing and a loaded 2-core machine's scheduling
JSON = {"Content-Type": "application/json"}
EDITOR = {"prompt": "def add(a, b):\n    return ", "suffix": "\n\n\nprint(add(1, 2))\n", "max_tokens": 8}
HUGE = 10 ** 30


@pytest.fixture(scope="module")
def served(tiny_model):
    server = ServeProcess(tiny_model, "--engine-routes")
    yield server
    server.stop()
    assert not any("Traceback" in line for line in server.log), "".join(server.log)


def stats(server) -> dict:
    return httpx.get(server.url + "/v1/redraft/stats", timeout=30).json()


def editor(server, host: str = "localhost") -> tuple[httpx.Response, float]:
    """A completion as Zed sends it (Host localhost:PORT, no Origin, JSON) and its wall time."""
    t0 = time.monotonic()
    r = httpx.post(f"{server.url}/v1/completions", json=EDITOR, headers={"Host": f"{host}:{server.port}"},
                   timeout=60)
    return r, time.monotonic() - t0


def infill(server, sampler: dict, requests: list | None = None, **fields) -> httpx.Response:
    body = {"requests": requests or [{"prefix": "x = "}], "sampler": sampler, **fields}
    return httpx.post(server.url + wire.INFILL, json=body, timeout=60)


def test_a_rebinding_host_is_refused_and_loopback_hosts_answered(served):
    before = stats(served)
    body = json.dumps(EDITOR).encode()
    for host in (f"evil.example:{served.port}", "evil.example", f"localhost:{served.port + 1}", "localhost:x",
                 "127.0.0.1.evil.example"):
        r = httpx.post(served.url + "/v1/completions", content=body, headers={"Host": host} | JSON, timeout=30)
        assert r.status_code == 421, (host, r.text)
        assert f"the Host {host!r} is not served here" in r.json()["error"]["message"]
        assert "--allow-host" in r.json()["error"]["message"]
    r = httpx.post(served.url + "/api/generate", json={"prompt": "x = "}, headers={"Host": "evil.example"})
    assert r.status_code == 421 and "not served here" in r.json()["error"]  # Ollama's shape
    status, answer = raw_request(served.port, b"GET /api/tags HTTP/1.0\r\n\r\n")  # no Host at all
    assert status == 421 and b"without a Host header" in answer
    after = stats(served)
    assert after["rejected"].get("421", 0) - before["rejected"].get("421", 0) == 7
    assert after["jobs"] == before["jobs"]  # none reached the engine
    for host in ("localhost", "127.0.0.1", "[::1]", "127.0.0.2"):  # with the port, as Zed sends it
        r, _ = editor(served, host)
        assert r.status_code == 200 and r.json()["choices"][0]["text"], (host, r.text)
    r = httpx.get(served.url + "/api/tags", headers={"Host": "localhost"})  # no port: still this server
    assert r.status_code == 200 and r.json()["models"][0]["name"] == "redraft"


def test_a_drive_by_page_is_refused(served):
    """What a browser sends for a page's fetch() or form to 127.0.0.1: an Origin (or
    Sec-Fetch-Site), a body of a type it may send without asking."""
    before = stats(served)
    page = {"Origin": "http://evil.example", "Content-Type": "text/plain;charset=UTF-8"}
    sixty_six = b'{"requests":[{"prefix":"x = "}],"sampler":{"span":8192},"previews":1}'
    r = httpx.post(served.url + wire.INFILL, content=sixty_six, headers=page, timeout=30)
    assert r.status_code == 403 and "requests from web pages are refused" in r.json()["message"]
    for origin in ("null", "vscode-webview://1234abcd", f"http://localhost:{served.port}", "http://localhost:3000"):
        r = httpx.post(served.url + "/v1/completions", json=EDITOR, headers={"Origin": origin}, timeout=30)
        assert r.status_code == 403 and f"(Origin {origin!r})" in r.json()["error"]["message"], origin
        assert r.json()["error"]["type"] == "permission_error" and "access-control-allow-origin" not in r.headers
    preflight = httpx.options(served.url + "/v1/completions", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    assert preflight.status_code == 403 and not any(h.startswith("access-control-") for h in preflight.headers)
    r = httpx.get(served.url + "/v1/redraft/stats", headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403 and "Sec-Fetch-Site: cross-site" in r.json()["error"]["message"]
    # Without an Origin, a body that is not declared JSON is still refused before anything runs.
    for kind in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {} if kind is None else {"Content-Type": kind}
        r = httpx.post(served.url + "/v1/completions", content=json.dumps(EDITOR), headers=headers, timeout=30)
        assert r.status_code == 415 and "Content-Type: application/json" in r.json()["error"]["message"], kind
    after = stats(served)
    assert after["rejected"].get("403", 0) - before["rejected"].get("403", 0) == 7
    assert after["rejected"].get("415", 0) - before["rejected"].get("415", 0) == 3
    assert after["jobs"] == before["jobs"]


def test_engine_bodies_past_their_bounds_are_400_with_the_bound(served):
    cases = [
        ({"span": 8192}, None, "sampler.span is 8192, outside 0..512 (this model's context is 512 tokens)"),
        ({"span": HUGE}, None, "sampler.span is a 31-digit number, outside 0..512"),
        ({"block_size": HUGE}, None, "sampler.block_size is a 31-digit number, outside 0..512"),
        ({"tokens_per_step": HUGE}, None, "sampler.tokens_per_step is a 31-digit number"),
        ({"window_refresh": HUGE}, None, "sampler.window_refresh is a 31-digit number, outside 0..512"),
        ({"window_refresh": -1}, None, "window_refresh must be >= 0"),
        ({"span_window": "yes"}, None, "sampler.span_window has the wrong type (str)"),
        ({"span_window": 1}, None, "sampler.span_window has the wrong type (int)"),
        ({"window_lookup": "yes"}, None, "sampler.window_lookup has the wrong type (str)"),
        ({"draft_block": HUGE}, None, "draft_block must be 0 (the model's block) or 1..64"),
        ({"draft_block": 65}, None, "draft_block must be 0 (the model's block) or 1..64"),
        ({"self_draft": "yes"}, None, "sampler.self_draft has the wrong type (str)"),
        ({"draft_floor": 1.5}, None, "draft_floor must be in [0, 1]"),
        ({"draft_floor": -1e308}, None, "draft_floor must be in [0, 1]"),
        ({"draft_floor": "high"}, None, "sampler.draft_floor has the wrong type (str)"),
        ({"seed": HUGE}, None, "sampler.seed is a 31-digit number, outside 0..9223372036854775807"),
        ({"lengths": list(range(1, 401))}, None, "sampler.lengths holds 400 lengths, more than 8"),
        ({"lengths": [4, 600]}, None, "sampler.lengths holds 600, more than this model's context of 512 tokens"),
        ({"span": 4}, [{"prefix": "x"}] * 9, "body.requests holds 9 requests, more than 8"),
        ({"span": 4}, [{"prefix": "x", "drafts": [str(i) for i in range(17)]}], "holds 17 drafts, more than 16"),
        ({"span": 512, "lengths": [256, 512]}, [{"prefix": "x"}] * 8, "more than 4096 span tokens in all"),
    ]
    for sampler, requests, says in cases:
        r = infill(served, sampler, requests)
        assert r.status_code == 400 and says in r.json()["message"], (sampler, r.text)
    r = infill(served, {"span": 4}, cache_key="k" * 1000)
    assert r.status_code == 400 and "body.cache_key is 1000 characters long" in r.json()["message"]
    r = httpx.post(served.url + wire.SCORE, json={"prefix": "x", "texts": ["a"] * 17})
    assert r.status_code == 400 and r.json()["message"] == "body.texts holds 17 texts, more than 16"
    r = httpx.post(served.url + wire.SCORE, json={"prefix": "x", "texts": ["a + b " * 600]}, timeout=60)
    assert r.status_code == 400 and "more than this model's context of 512" in r.json()["message"]
    # Within the bounds it answers as before.
    r = infill(served, {"span": 8})
    events = [e for e in wire.read_events(r.text.splitlines())]
    assert r.status_code == 200 and [k for k, _ in events] == ["result"] and events[0][1]["completions"][0]["text"]


def test_malformed_bodies_are_400_with_a_message_never_500(served):
    before = stats(served)
    deep = b'{"prompt": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    cases = [
        ("/v1/completions", deep, "nested deeper than 64 levels"),
        ("/v1/completions", b'{"prompt": ' + b"[" * 65 + b"]" * 65 + b"}", "nested deeper than 64 levels"),
        ("/api/generate", b'{"prompt": "x = \\ud800", "stream": false}', "lone UTF-16 surrogate (\\ud800)"),
        ("/v1/completions", b'{"prompt": "x", "suffix": "\\udfff"}', "lone UTF-16 surrogate (\\udfff)"),
        ("/v1/edit/completions", b'{"messages": [{"role": "user", "content": "a\\ud800"}]}', "lone UTF-16 surrogate"),
        ("/v1/completions", b'{"prompt": "x", "temperature": NaN}', "NaN is not a JSON number"),
        ("/v1/completions", b'{"prompt": "x", "temperature": 1e400}', "the number 1e400 is out of range"),
        ("/v1/completions", b'{"prompt": "x", "n": %d}' % HUGE, "'n' must be in 1..8"),
        ("/v1/completions", b'{"prompt": "x", "stop": ' + json.dumps(["a"] * 17).encode() + b"}",
         "'stop' holds 17 strings, more than 16"),
    ]
    for path, body, says in cases:
        r = httpx.post(served.url + path, content=body, headers=JSON, timeout=30)
        assert r.status_code == 400, (path, r.text)
        message = r.json()["error"] if path == "/api/generate" else r.json()["error"]["message"]
        assert says in message, (path, message)
    for path, body, says in [(wire.INFILL, b'{"requests": [{"prefix": "x = \\ud800"}]}', "lone UTF-16 surrogate"),
                             (wire.SCORE, b'{"prefix": "x", "texts": ["\\ud800"]}', "lone UTF-16 surrogate"),
                             (wire.INFILL, deep, "nested deeper than 64 levels")]:
        r = httpx.post(served.url + path, content=body, headers=JSON, timeout=30)
        assert r.status_code == 400 and says in r.json()["message"], (path, r.text)
    after = stats(served)
    assert after["errors"] == before["errors"] == 0 and after["jobs"] == before["jobs"]
    r = httpx.post(served.url + "/v1/completions", json={"prompt": "x", "max_tokens": HUGE}, timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["text"]  # a large cap caps nothing more


def test_an_engine_call_stops_at_its_budget_and_late_ones_never_start(served):
    """The largest call the bounds let through (8 requests x 512 span tokens, one token a step)
    three times at once: the first stops at its budget, the ones whose budget ran out while they
    waited are refused without running: the worker is free again within one budget."""
    big = {"span": 512, "threshold": 1.0, "tokens_per_step": 1}
    answers = []

    def call():
        answers.append(infill(served, big, [{"prefix": f"x{i} = "} for i in range(8)]))
    t0 = time.monotonic()
    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    took = time.monotonic() - t0
    assert len(answers) == 3 and all(r.status_code == 200 for r in answers)
    events = [list(wire.read_events(r.text.splitlines()))[-1] for r in answers]
    results = [data for kind, data in events if kind == "result"]
    late = [data for kind, data in events if kind == "error"]
    assert results, events
    assert all(c["stats"]["steps"] < 512 for data in results for c in data["completions"])  # cut at the budget
    assert all(e["status"] == 503 and "time budget (500 ms) ran out before it could start" in e["message"]
               for e in late), late
    assert took < 2 * BUDGET_S + 2 * SLACK_S, took  # before: one such call held the worker for minutes
    r, waited = editor(served)
    assert r.status_code == 200 and r.json()["choices"][0]["text"] and waited < BUDGET_S + SLACK_S


def test_memory_stays_bounded_after_the_lengths_probe(served):
    start = served.rss()
    for _ in range(5):
        r = infill(served, {"lengths": list(range(1, 401))}, [{"prefix": "x = " * 2000}])
        assert r.status_code == 400 and "more than 8" in r.json()["message"]
        r = infill(served, {"span": 512, "lengths": [64, 128, 256, 512]}, [{"prefix": "x = " * 2000}] * 2)
        assert r.status_code == 200 and "event: result" in r.text
    end = served.rss()
    assert end < 1 << 30 and end - start < 64 << 20, (start, end)


def test_an_editor_is_answered_within_its_budget_during_the_attacks(served):
    """Heads that never end, a body that trickles, and a stream of refused probes from two
    threads (none of which reaches the engine's worker), while the editor asks three times:
    each answer has text and comes within the budget; each half-sent head is closed within
    HEAD_TIMEOUT_S."""
    port = served.port
    half = []
    for _ in range(10):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
        half.append((s, time.monotonic()))
    trickle = socket.create_connection(("127.0.0.1", port), timeout=30)
    trickle.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 1000\r\n\r\n{\"prompt\": ")
    probes = [
        (wire.INFILL, b'{"requests":[{"prefix":"x = "}],"sampler":{"span":8192}}',
         {"Host": "evil.example", "Content-Type": "text/plain", "Origin": "http://evil.example"}),
        (wire.INFILL, json.dumps({"requests": [{"prefix": "x"}], "sampler": {"lengths": list(range(1, 401))}}),
         JSON),
        (wire.INFILL, b'{"requests":[{"prefix":"x"}],"sampler":{"block_size":%d}}' % HUGE, JSON),
        ("/v1/completions", b'{"prompt": ' + b"[" * 1000 + b"]" * 1000 + b"}", JSON),
        ("/api/generate", b'{"prompt": "x = \\ud800"}', JSON),
    ]
    statuses, stop = [], threading.Event()

    def attack():
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                for path, body, headers in probes:
                    statuses.append(client.post(served.url + path, content=body, headers=headers).status_code)
    attackers = [threading.Thread(target=attack) for _ in range(2)]
    for t in attackers:
        t.start()
    try:
        time.sleep(0.3)
        for _ in range(3):
            r, took = editor(served)
            assert r.status_code == 200 and r.json()["choices"][0]["text"], r.text
            assert took < BUDGET_S + SLACK_S, took
    finally:
        stop.set()
        for t in attackers:
            t.join(timeout=60)
    assert len(statuses) >= len(probes) and set(statuses) <= {400, 403, 421}, sorted(set(statuses))
    for s, opened in half:
        s.settimeout(HEAD_TIMEOUT_S + 10)
        assert s.recv(100) == b""  # closed by the server, without an answer
        assert time.monotonic() - opened < HEAD_TIMEOUT_S + 3
        s.close()
    trickle.close()  # (its body's own deadline, 408, is test_http_abuse's)
    assert stats(served)["errors"] == 0
