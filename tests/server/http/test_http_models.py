"""A request that names a model gets that model, through the real app on a real server: the
loaded one, a shipped one loaded on first request (one kept beside the loaded one), or a 404 in
the API's own shape naming the models there are. The lists say exactly what is served."""

from __future__ import annotations

import httpx
import pytest

from http_helpers import Running
from redraft.engine import SHIPPED
from redraft.server.core.repetition import loop_start
from redraft.server.core.settings import ServerConfig
from redraft.server.http.app import Access, build_app

# The README's example: the cursor after `logging.` in a method body.
PREFIX = ("import logging\n\nlog = logging.getLogger(__name__)\n\n\nclass Store:\n    def __init__(self):\n"
          "        self.log = logging.")


@pytest.fixture(scope="module")
def served(inference):
    """(url, app) of a server whose loaded model is the tiny one, named "redraft"; its engine
    calls counted; it serves the engine protocol too (a remote engine's clients are tested here)."""
    engine = inference.engine
    infill, calls = engine.infill, []

    def counted(*args, **kwargs):
        calls.append(1)
        return infill(*args, **kwargs)
    engine.infill = counted
    app = build_app(inference, ServerConfig(), access=Access(engine_routes=True))
    server = Running(app)
    yield server.url, app, calls
    server.stop()
    del engine.infill


def test_the_lists_name_the_loaded_model_then_the_shipped_ones(served):
    url, _, _ = served
    assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == ["redraft", *SHIPPED]
    assert [m["name"] for m in httpx.get(f"{url}/api/tags").json()["models"]] == ["redraft", *SHIPPED]


def test_a_shipped_model_asked_for_by_name_answers_itself(served):
    url, app, calls = served
    before = len(calls)
    r = httpx.post(f"{url}/v1/completions", json={"model": "redraft-diffusion", "prompt": PREFIX, "temperature": 0},
                   timeout=120)
    assert r.status_code == 200 and r.json()["model"] == "redraft-diffusion"
    assert r.json()["choices"][0]["text"] == "getLogger(__name__)"  # not the tiny random model's words
    assert len(calls) == before  # the loaded model did not answer
    r = httpx.post(f"{url}/api/generate", json={"model": "redraft-ar:latest", "prompt": PREFIX, "stream": False},
                   timeout=120)
    assert r.status_code == 200 and r.json()["model"] == "redraft-ar" and r.json()["done"] is True
    assert loop_start(r.json()["response"]) is None  # something sensible, or nothing: not a loop
    assert len(calls) == before
    assert app.state.models.kept() == ["redraft-ar"]  # one kept beside the loaded model: the latest
    details = httpx.post(f"{url}/api/show", json={"model": "redraft-ar"}).json()["details"]
    assert details["parameter_size"].endswith("M")  # it is loaded: its own size
    r = httpx.post(f"{url}/v1/completions", json={"model": "redraft", "prompt": "x = ", "max_tokens": 3}, timeout=60)
    assert r.status_code == 200 and r.json()["model"] == "redraft" and len(calls) > before


def test_a_model_not_served_is_a_404_naming_the_models(served):
    url, _, _ = served
    r = httpx.post(f"{url}/v1/completions", json={"model": "gpt-4o", "prompt": "x = "})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    assert r.json()["error"]["available"] == ["redraft", *SHIPPED]
    assert "model 'gpt-4o' not found; available: redraft, redraft-diffusion" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/api/generate", json={"model": "codellama:7b", "prompt": "x = ", "stream": False})
    assert r.status_code == 404 and r.json()["available"] == ["redraft", *SHIPPED]
    assert r.json()["error"].startswith("model 'codellama:7b' not found; available: redraft")


def test_behind_a_remote_engine_only_its_model_is_served(served):
    from redraft.server.core.inference import Inference
    url, _, _ = served
    client = Inference()
    assert client.load(None, "cpu", "auto", url=url).result() is None
    front = Running(build_app(client, ServerConfig(engine_url=url)))
    try:
        assert [m["id"] for m in httpx.get(f"{front.url}/v1/models").json()["data"]] == ["redraft"]
        r = httpx.post(f"{front.url}/v1/completions", json={"model": "redraft-ar", "prompt": "x = "})
        assert r.status_code == 404 and r.json()["error"]["available"] == ["redraft"]
    finally:
        front.stop()
        client.shutdown()
