"""Who the HTTP API answers, through the real app on a real uvicorn server: the engine
protocol only with a token or when turned on, the Hosts and web origins the user allows (and
CORS for those alone), the CLI options that say so, and the deadline on a request's head."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from http_helpers import CONFIG, TOKEN, Running
from redraft.server.cli import EXIT_USAGE, main
from redraft.server.core import wire
from redraft.server.http.app import Access, build_app, listen, make_server

APP = "https://app.example"


@pytest.fixture(scope="module")
def servers(inference):
    """Plain (no token, nothing allowed), locked (a token), open (hosts, an origin, the engine
    protocol allowed)."""
    running = [Running(build_app(inference, CONFIG)), Running(build_app(inference, CONFIG, TOKEN)),
               Running(build_app(inference, CONFIG, access=Access(hosts=("box.local", "proxy.local:8443"),
                                                                  origins=(APP,), engine_routes=True)))]
    yield running
    for r in running:
        r.stop()


def test_the_engine_protocol_is_off_without_a_token_or_the_option(servers):
    plain, locked, open_ = servers
    refused = httpx.get(plain.url + "/v1/redraft/stats").json()["rejected"].get("403", 0)
    for path, method in ((wire.INFO, "GET"), (wire.INFILL, "POST"), (wire.SCORE, "POST"), (wire.FORGET, "POST")):
        r = httpx.request(method, plain.url + path, json={"requests": [{"prefix": "x"}]})
        assert r.status_code == 403 and r.json() == {"status": 403, "message": r.json()["message"]}
        assert "the engine protocol is off" in r.json()["message"] and "--engine-routes" in r.json()["message"]
    assert httpx.get(locked.url + wire.INFO).status_code == 401  # served, to those who send the token
    r = httpx.get(locked.url + wire.INFO, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and r.json()["name"] == "redraft" and r.json()["context_limit"] == 512
    assert httpx.get(open_.url + wire.INFO).status_code == 200
    assert httpx.get(plain.url + "/v1/redraft/stats").json()["rejected"]["403"] == refused + 4


def test_allowed_hosts_are_answered_and_others_refused(servers):
    _, _, open_ = servers
    port = open_.url.rsplit(":", 1)[1]
    for host in ("box.local", f"box.local:{port}", "BOX.LOCAL.", "proxy.local:8443", f"localhost:{port}"):
        r = httpx.get(open_.url + "/v1/models", headers={"Host": host})
        assert r.status_code == 200 and r.json()["data"][0]["id"] == "redraft", host
    for host in ("box.local:1", "proxy.local", f"other.local:{port}"):
        r = httpx.get(open_.url + "/v1/models", headers={"Host": host})
        assert r.status_code == 421 and f"the Host {host!r} is not served here" in r.json()["error"]["message"]


def test_an_allowed_origin_gets_cors_and_others_nothing(servers):
    plain, _, open_ = servers
    ask = {"Origin": APP, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    r = httpx.options(open_.url + "/v1/completions", headers=ask)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP
    r = httpx.post(open_.url + "/v1/completions", json={"prompt": "x = ", "max_tokens": 2}, headers={"Origin": APP})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP and r.json()["choices"]
    for server in (open_, plain):
        r = httpx.options(server.url + "/v1/completions", headers=ask | {"Origin": "https://evil.example"})
        assert r.status_code == 403 and not any(h.startswith("access-control-") for h in r.headers)
        r = httpx.post(server.url + "/v1/completions", json={"prompt": "x"}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403 and "(Origin 'https://evil.example')" in r.json()["error"]["message"]
    r = httpx.post(plain.url + "/v1/completions", json={"prompt": "x"}, headers={"Origin": APP})
    assert r.status_code == 403  # an origin is allowed by the server that allows it only


@pytest.mark.parametrize("argv, says", [
    (["--allow-host", "box.local"], "--allow-host, --allow-origin and --engine-routes apply to the HTTP API"),
    (["--engine-routes"], "apply to the HTTP API: add --http"),
    (["--http", "7399", "--allow-host", "*"], "--allow-host '*' answers any Host name"),
    (["--http", "7399", "--allow-origin", "*"], "--allow-origin needs an origin such as https://app.example"),
])
def test_access_options_are_checked_before_anything_starts(capsys, argv, says):
    assert main(["serve", *argv]) == EXIT_USAGE
    assert says in capsys.readouterr().err


def test_a_head_that_never_ends_is_closed_and_a_whole_one_answered(inference):
    """make_server's head deadline, short here: a half-sent head is closed without an answer,
    a whole head sent in two parts within it is answered, and so is an idle client's next one."""
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = make_server(build_app(inference, CONFIG), head_timeout=0.5)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as half:
            t0 = time.monotonic()
            half.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            assert half.recv(100) == b"" and 0.4 < time.monotonic() - t0 < 3
        with socket.create_connection(("127.0.0.1", port), timeout=10) as whole:
            whole.sendall(b"GET /v1/models HTTP/1.1\r\n")
            time.sleep(0.2)
            whole.sendall(b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")
            reply = b""
            while part := whole.recv(4096):
                reply += part
            assert reply.startswith(b"HTTP/1.1 200") and b'"redraft"' in reply
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
