"""`redraft serve` as a command: TCP transport and argument errors, run as a user runs them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx

SERVE = [sys.executable, "-m", "redraft.server.cli", "serve"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read_message(sock: socket.socket) -> dict:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    header, body = data.split(b"\r\n\r\n", 1)
    length = int(next(h for h in header.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
    while len(body) < length:
        body += sock.recv(4096)
    return json.loads(body[:length])


def test_serve_over_tcp_answers_initialize(tiny_model):
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*SERVE, "--tcp", str(port), "--model", str(tiny_model)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, "server did not start listening"
                time.sleep(0.1)
        with sock:
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                               "params": {"processId": None, "rootUri": None, "capabilities": {}}}).encode()
            sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            reply = _read_message(sock)
        assert reply["id"] == 1
        assert "inlineCompletionProvider" in reply["result"]["capabilities"]
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_serve_rejects_a_bad_port():
    out = subprocess.run([*SERVE, "--tcp", "70000"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--tcp" in out.stderr and "Traceback" not in out.stderr


def test_serve_http_says_where_it_listens(tiny_model):
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*SERVE, "--http", str(port), "--model", str(tiny_model)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()  # the first thing it says, once the model is loaded
        assert f"answering at http://127.0.0.1:{port}" in line, line
        tags = httpx.get(f"http://127.0.0.1:{port}/api/tags", timeout=30).json()["models"]
        assert tags[0]["name"] == "redraft"  # and it answers there at once
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_serve_http_defaults_to_its_own_port_not_ollamas(tiny_model):
    from redraft.server.cli import _parser
    from redraft.server.http import DEFAULT_PORT
    assert DEFAULT_PORT == 7355 != 11434  # 11434 is Ollama's: the two run side by side
    assert _parser().parse_args(["serve", "--http"]).http == DEFAULT_PORT
    assert _parser().parse_args(["serve", "--http", "8080"]).http == 8080
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*SERVE, "--http", "--model", str(tiny_model)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        # Where the port is taken (another server on this machine) it says so, naming the same address.
        assert f"127.0.0.1:{DEFAULT_PORT}" in line and "11434" not in line, line
        if "answering at" in line:
            assert httpx.get(f"http://127.0.0.1:{DEFAULT_PORT}/api/tags", timeout=30).json()["models"]
        else:
            assert "cannot listen" in line and proc.wait(timeout=30) == 2
    finally:
        proc.kill()
        proc.wait(timeout=30)
