"""`redraft serve` as a command: TCP transport and argument errors, run as a user runs them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

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
    env = {**os.environ, "OMP_NUM_THREADS": "1", "REDRAFT_TOKEN": "t0ken"}
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
                               "params": {"processId": None, "rootUri": None, "capabilities": {},
                                          "initializationOptions": {"token": "t0ken"}}}).encode()
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


def test_serve_at_a_terminal_says_it_waits_for_an_lsp_client(tiny_model):
    import pty
    main, side = pty.openpty()  # stdin a terminal, as when a person types `redraft serve`
    proc = subprocess.Popen([*SERVE, "--model", str(tiny_model)], stdin=side, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    os.close(side)
    try:
        line = proc.stderr.readline()
        assert line.startswith("redraft: waiting for an LSP client on stdin/stdout") and "--http" in line, line
    finally:
        proc.kill()
        proc.wait(timeout=30)
        os.close(main)


def test_serve_from_an_editor_says_nothing(tiny_model):
    # stdin a pipe, as an editor starts it; closing it ends the server
    out = subprocess.run([*SERVE, "--model", str(tiny_model)], input="", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr == "" and out.stdout == ""


def test_serve_on_a_gpu_this_torch_cannot_use_serves_on_the_cpu(tiny_model):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this torch runs on CUDA here: nothing to fall back from")
    port = _free_port()
    proc = subprocess.Popen([*SERVE, "--http", str(port), "--model", str(tiny_model), "--device", "cuda"],
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        said = proc.stderr.readline()
        assert said.startswith("redraft: device 'cuda' is not available: ") and said.endswith(
            "; serving on the CPU instead\n"), said
        assert f"answering at http://127.0.0.1:{port}" in proc.stderr.readline()
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "x = ", "max_tokens": 3}, timeout=60)
        assert r.status_code == 200 and r.json()["model"] == "redraft"
    finally:
        proc.kill()
        _, rest = proc.communicate(timeout=30)
    assert "Traceback" not in rest
