"""Zed: the documented settings parse, and the requests Zed's providers send with them are
answered by `redraft serve --http` running the shipped default model."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

SETTINGS = Path(__file__).resolve().parents[2] / "editors" / "zed" / "settings"
# Zed writes the qwen template when told `prompt_format: "qwen"`, and stops on these.
STOPS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|file_sep|>"]
BEFORE = "def scale(values, factor):\n    out = [v * factor for v in values]\n    return out\n\n\n" \
         "def shift(values, offset):\n    out = [v + offset for v in val"  # the line above says how it goes on
AFTER = "\n    return out\n"


def load(name: str) -> dict:
    return json.loads((SETTINGS / name).read_text(encoding="utf-8"))


def test_every_snippet_is_json_zed_understands():
    ollama = load("ollama.json")["edit_predictions"]
    assert ollama["provider"] == "ollama" and ollama["ollama"]["prompt_format"] == "qwen"
    openai = load("open_ai_compatible.json")["edit_predictions"]
    assert openai["provider"] == "open_ai_compatible_api"
    assert urlsplit(openai["open_ai_compatible_api"]["api_url"]).path == "/v1/completions"


@pytest.fixture(scope="module")
def server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "redraft.server.cli", "serve", "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 120
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/tags", timeout=5)
            break
        except httpx.TransportError:
            assert proc.poll() is None and time.time() < deadline, "the server did not start"
            time.sleep(0.1)
    yield port
    proc.kill()
    proc.wait(timeout=30)


def at_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"{parts.hostname}:{port}").geturl()


def test_zeds_ollama_provider_request(server):
    cfg = load("ollama.json")["edit_predictions"]["ollama"]
    body = {"model": cfg["model"], "prompt": f"<|fim_prefix|>{BEFORE}<|fim_suffix|>{AFTER}<|fim_middle|>",
            "raw": True, "stream": False,
            "options": {"num_predict": cfg["max_output_tokens"], "temperature": 0.2, "stop": STOPS}}
    r = httpx.post(at_port(cfg["api_url"], server) + "/api/generate", json=body, timeout=60)
    assert r.status_code == 200
    out = r.json()
    assert out["done"] is True and out["model"] == "redraft-diffusion"
    assert out["response"] and "\n" not in out["response"] and not any(s in out["response"] for s in STOPS)


def test_zeds_open_ai_compatible_provider_request(server):
    cfg = load("open_ai_compatible.json")["edit_predictions"]["open_ai_compatible_api"]
    body = {"model": cfg["model"], "prompt": f"<|fim_prefix|>{BEFORE}<|fim_suffix|>{AFTER}<|fim_middle|>",
            "max_tokens": cfg["max_output_tokens"], "temperature": 0.2, "stop": STOPS}
    r = httpx.post(at_port(cfg["api_url"], server), json=body, timeout=60)
    assert r.status_code == 200
    (choice,) = r.json()["choices"]
    # "off" completes to the parameter named above it (a draft from the same prompt)
    assert choice["text"].startswith("ues") and "\n" not in choice["text"]
    assert choice["finish_reason"] in ("stop", "length")
