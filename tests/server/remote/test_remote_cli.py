"""`redraft serve --engine-url`: its options are checked before anything starts, and the HTTP
API in front of an engine that does not answer still serves completions from drafts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from redraft.server.cli import EXIT_USAGE, main
from redraft.server.core import wire

from remote_helpers import CURSOR, DRAFT, TEXT


@pytest.mark.parametrize("argv, says", [
    (["--engine-timeout", "3"], "--engine-timeout applies to a remote engine"),
    (["--engine-url", "http://127.0.0.1:9", "--engine-timeout", "0"], "--engine-timeout needs seconds"),
    (["--engine-url", "ftp://box"], "must be an http:// or https:// URL"),
    (["--token", "t"], "--token and --token-file apply to the HTTP API"),
])
def test_bad_engine_options_are_usage_errors(capsys, argv, says):
    assert main(["serve", *argv]) == EXIT_USAGE
    assert says in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_http_api_answers_from_drafts_while_its_engine_is_away():
    port, dead = _free_port(), _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "redraft.server.cli", "serve", "--http", str(port),
                             "--engine-url", f"http://127.0.0.1:{dead}", "--engine-timeout", "2", "--engine-routes"],
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                httpx.get(url + "/v1/models", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        body = {"prompt": TEXT[:CURSOR], "suffix": TEXT[CURSOR:], "language": "python", "max_tokens": 8}
        for _ in range(4):
            r = httpx.post(url + "/v1/completions", json=body, timeout=10)
            assert r.status_code == 200 and r.json()["choices"][0]["text"] == DRAFT
        r = httpx.get(url + wire.INFO, timeout=10)  # this server's engine protocol: its engine is away
        assert r.status_code == 503 and "has not answered yet" in r.json()["message"]
        stats = httpx.get(url + "/v1/redraft/stats", timeout=10).json()
        assert "cannot connect to the engine" in stats["model_error"] and stats["errors_by_route"] == {}
        assert stats["remote"]["down"] is True and stats["remote"]["failures"] >= 3
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "cannot connect to the engine" in err and "answering from drafts" in err
