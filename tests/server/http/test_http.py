"""The HTTP API against real servers: uvicorn on a socket in this process (so the engine can be
slowed down to watch cancellation) and `redraft serve --http` run as a user runs it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx
import pytest

from http_helpers import CONFIG, TOKEN, Running, calls_until_free, on_engine, sse
from redraft.engine import CancelFlag
from redraft.server.http import templates
from redraft.server.http.app import build_app
from redraft.server.http.engine import complete_fim, fim_snapshot
from redraft.server.core.inference import run_engine

PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\n\nprint(add(1, 2))\n"
SERVE = [sys.executable, "-m", "redraft.server.cli", "serve"]
# What Zed's ollama provider sends for a model it knows no template for (redraft's names).
ZED_STOPS = ["<|endoftext|>", "<|file_separator|>", "<|fim_pad|>", "<|fim_prefix|>", "<|fim_middle|>",
             "<|fim_suffix|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<PRE>", "<SUF>", "<MID>",
             "[PREFIX]", "[SUFFIX]"]
MERCURY = ("<|recently_viewed_code_snippets|>\n<|/recently_viewed_code_snippets|>\n"
           "<|current_file_content|>\ncurrent_file_path: src/calc.py\n"
           "class Point:\n    def __init__(self, x, y):\n<|code_to_edit|>\n        self.x = x\n"
           "        self.y = <|cursor|>y\n<|/code_to_edit|>\n\n    def norm(self):\n        return 0\n"
           "<|/current_file_content|>\n<|edit_diff_history|>\n<|/edit_diff_history|>\n")


@pytest.fixture(scope="module")
def servers(inference):
    """(open server, server that wants TOKEN and takes bodies of at most 4 kB)."""
    plain, locked = Running(build_app(inference, CONFIG)), Running(build_app(inference, CONFIG, TOKEN, 4096))
    yield plain.url, locked.url
    plain.stop()
    locked.stop()


# -- prompts ----------------------------------------------------------------------------


@pytest.mark.parametrize("family,prompt", [
    ("qwen", "<|fim_prefix|>{p}<|fim_suffix|>{s}<|fim_middle|>"),  # qwen and codegemma
    ("starcoder", "<fim_prefix>{p}<fim_suffix>{s}<fim_middle>"),
    ("codellama", "<PRE> {p} <SUF>{s} <MID>"),
    ("deepseek", "<｜fim▁begin｜>{p}<｜fim▁hole｜>{s}<｜fim▁end｜>"),
    ("codestral", "[SUFFIX]{s}[PREFIX]{p}"),
    ("glm", "<|code_prefix|>{p}<|code_suffix|>{s}<|code_middle|>"),
    ("starcoder", "<filename>a.py\n<fim_suffix>{s}<fim_prefix>{p}<fim_middle>"),  # suffix first, a header
])
def test_each_template_family_parses_to_its_prefix_and_suffix(family, prompt):
    fim = templates.split(prompt.format(p=PREFIX, s=SUFFIX))
    assert (fim.family, fim.prefix, fim.suffix) == (family, PREFIX, SUFFIX)


def test_prompts_without_a_template_or_with_a_started_middle():
    assert templates.split("x = 1\ny = ") == templates.Fim("x = 1\ny = ", "", "plain")
    assert templates.split("x = ", suffix="\n") == templates.Fim("x = ", "\n", "plain")
    started = templates.split("<|fim_prefix|>a = <|fim_suffix|>\n<|fim_middle|>fo")
    assert (started.prefix, started.suffix) == ("a = fo", "\n")


def test_mercury_edit_prompt_parses_around_its_region():
    ep = templates.parse_edit(MERCURY)
    assert ep.path == "src/calc.py"
    assert ep.before == "class Point:\n    def __init__(self, x, y):\n"
    assert ep.region == "        self.x = x\n        self.y = y\n"
    assert ep.region[ep.cursor:] == "y\n"
    assert ep.after == "\n    def norm(self):\n        return 0\n"
    with pytest.raises(ValueError):
        templates.parse_edit("no tags here")


# -- routes -----------------------------------------------------------------------------


def test_zeds_ollama_request_comes_back_well_formed(servers):
    body = {"model": "redraft", "prompt": f"<fim_prefix>{PREFIX}<fim_suffix>{SUFFIX}<fim_middle>", "raw": True,
            "stream": False, "options": {"num_predict": 64, "temperature": 0.2, "stop": ZED_STOPS}}
    r = httpx.post(f"{servers[0]}/api/generate", content=json.dumps(body), timeout=30,
                   headers={"Content-Type": "application/json"})  # as Zed sends it
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    out = r.json()
    assert out["model"] == "redraft" and out["done"] is True and isinstance(out["response"], str)
    assert out["created_at"].endswith("Z") and out["done_reason"] in ("stop", "length")
    assert not any(s in out["response"] for s in ZED_STOPS) and "\n" not in out["response"]
    tags = httpx.get(f"{servers[0]}/api/tags").json()["models"]
    assert [m["name"] for m in tags][:1] == ["redraft"] and "redraft-diffusion" in [m["name"] for m in tags]
    assert {"name", "modified_at", "size", "digest", "details"} <= set(tags[0])
    show = httpx.post(f"{servers[0]}/api/show", json={"model": "redraft:latest"}).json()
    assert "insert" in show["capabilities"]
    loaded = httpx.post(f"{servers[0]}/api/generate", json={"model": "redraft"}).json()  # Ollama's "load" call
    assert (loaded["done"], loaded["done_reason"], loaded["response"]) == (True, "load", "")


def test_zeds_openai_compatible_request_comes_back_well_formed(servers):
    body = {"model": "redraft", "prompt": f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",
            "max_tokens": 64, "stop": ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"]}
    r = httpx.post(f"{servers[1]}/v1/completions", json=body, headers={"Authorization": f"Bearer {TOKEN}"},
                   timeout=30)
    assert r.status_code == 200
    out = r.json()
    assert out["object"] == "text_completion" and out["model"] == "redraft" and out["id"].startswith("cmpl-")
    assert isinstance(out["created"], int) and set(out["usage"]) == {"prompt_tokens", "completion_tokens",
                                                                      "total_tokens"}
    (choice,) = out["choices"]
    assert choice["index"] == 0 and isinstance(choice["text"], str) and choice["finish_reason"] in ("stop", "length")
    models = httpx.get(f"{servers[1]}/v1/models", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "redraft"


def test_an_http_answer_is_the_lsp_servers_answer(servers, inference):
    """Same snapshot, drafts, engine call and post-processing as the LSP path."""
    text = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return "
    r = httpx.post(f"{servers[0]}/v1/completions", json={"prompt": text, "suffix": "\n", "temperature": 0},
                   timeout=30)
    snap = fim_snapshot(text, "\n", CONFIG, language="python")  # what the API reads this text as
    direct = on_engine(inference, lambda: run_engine(inference.engine, snap))
    assert snap.drafts  # the same text offers drafts (a + b, a - b)
    assert r.json()["choices"][0]["text"] == ("" if direct.edit is None else direct.edit.text)


def test_each_file_gets_its_own_cache_key_and_its_keystrokes_share_it(servers, inference):
    """Requests for different files are different documents to the engine (a shared server runs
    them side by side, each reusing its own keys/values), a file's next keystroke reuses its
    context; a path, when the client sends one, names the file."""
    a = "import os\nimport sys\n\n\ndef main():\n    x = "
    b = "import json\n\n\nclass Config:\n    name = "
    assert fim_snapshot(a, "\n", CONFIG).uri == fim_snapshot(a + "1", "\n", CONFIG).uri
    assert fim_snapshot(a, "\n", CONFIG).uri != fim_snapshot(b, "\n", CONFIG).uri
    assert fim_snapshot(b, "\n", CONFIG, path="x.py").uri != fim_snapshot(b, "\n", CONFIG, path="y.py").uri

    def stats():
        return on_engine(inference, lambda: inference.engine.context_stats())
    before = stats()
    for prompt in (a, b, a + "1"):
        r = httpx.post(f"{servers[0]}/v1/completions", json={"prompt": prompt, "suffix": "\n", "temperature": 0},
                       timeout=30)
        assert r.status_code == 200
    after = stats()
    assert after["documents"] >= before["documents"] + 2  # a and b, each its own
    assert after["hits"] >= before["hits"] + 1  # a's second keystroke reused a's keys/values


def test_n_choices_and_stop_strings(servers):
    r = httpx.post(f"{servers[0]}/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "n": 3, "stop": "a"},
                   timeout=30).json()
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert all("a" not in c["text"] for c in r["choices"])


def test_sse_stream_in_order_with_a_final_event(servers):
    body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 6}
    whole = httpx.post(f"{servers[0]}/v1/completions", json=body, timeout=30).json()["choices"][0]
    r = httpx.post(f"{servers[0]}/v1/completions", json={**body, "stream": True}, timeout=30)
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse(r.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["finish_reason"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["text"]
    # Ollama streams newline-delimited JSON, as Ollama does; its default is to stream.
    lines = [json.loads(line) for line in httpx.post(f"{servers[0]}/api/generate", json={
        "prompt": PREFIX, "suffix": SUFFIX, "options": {"num_predict": 6}}, timeout=30).text.splitlines()]
    assert [x["done"] for x in lines] == [False] * (len(lines) - 1) + [True]
    assert "".join(x["response"] for x in lines) == whole["text"]


def test_diffusing_streams_every_draft_in_order_and_ends_on_the_final_text(servers, inference):
    body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 6}
    final = httpx.post(f"{servers[0]}/v1/fim/completions", json=body, timeout=30).json()["choices"][0]["text"]
    seen: list[str] = []
    fim = templates.split(PREFIX, SUFFIX)
    on_engine(inference, lambda: complete_fim(inference, fim, templates.Params(max_tokens=6), CONFIG, CancelFlag(),
                                          lambda i, text: seen.append(text)))
    events = sse(httpx.post(f"{servers[0]}/v1/fim/completions", json={**body, "diffusing": True}, timeout=30).text)
    texts = [e["choices"][0]["text"] for e in events[:-1]]
    assert len(seen) >= 2 and texts[:-1] == seen  # every draft, whole, in the engine's order
    assert texts[-1] == final and events[-2]["choices"][0]["finish_reason"] is not None


def test_edit_completions_rewrite_the_region_or_say_none(servers):
    region = templates.parse_edit(MERCURY).region
    body = {"model": "redraft", "messages": [{"role": "user", "content": MERCURY}]}
    out = httpx.post(f"{servers[0]}/v1/edit/completions", json=body, timeout=60).json()
    assert out["object"] == "chat.completion"
    message = out["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert message["content"] is None or message["content"].rstrip() != region.rstrip()
    events = sse(httpx.post(f"{servers[0]}/v1/edit/completions", json={**body, "diffusing": True}, timeout=60).text)
    assert events[-1] == "[DONE]" and events[-2]["object"] == "chat.completion.chunk"
    assert events[-2]["choices"][0]["delta"]["content"] == message["content"]


@pytest.mark.parametrize("fill, content", [(None, None), (templates.parse_edit(MERCURY).region, None),
                                           ("None", "None\n")])
def test_no_edit_is_json_null_and_the_text_none_stays_a_string(servers, inference, fill, content):
    """"No edit" (the model abstains, or re-fills the region as it is) is null in every shape
    the route answers in; a region rewritten to the text `None` is that string."""
    engine = inference.engine
    infill = engine.infill

    def fixed(*args, **kwargs):
        out = infill(*args, **kwargs)
        return replace(out, text="", abstained=True) if fill is None else replace(out, text=fill)
    engine.infill = fixed
    try:
        body = {"model": "redraft", "messages": [{"role": "user", "content": MERCURY}]}
        r = httpx.post(f"{servers[0]}/v1/edit/completions", json=body, timeout=60)
        assert '"content":null' in r.text.replace(" ", "") if content is None else '"content":"None\\n"' in r.text
        assert r.json()["choices"][0]["message"]["content"] == content
        for mode in ({"stream": True}, {"diffusing": True}):
            events = sse(httpx.post(f"{servers[0]}/v1/edit/completions", json={**body, **mode}, timeout=60).text)
            deltas = [e["choices"][0]["delta"] for e in events[:-1]]
            assert [d["content"] for d in deltas if "content" in d][-1] == content
            assert events[-2]["choices"][0]["finish_reason"] == "stop"
    finally:
        del engine.infill


def test_eight_concurrent_requests_are_all_answered(servers):
    def ask(i):
        route, body = [("/api/generate", {"prompt": f"x{i} = ", "stream": False, "options": {"num_predict": 4}}),
                       ("/v1/completions", {"prompt": f"y{i} = ", "suffix": "\n", "max_tokens": 4})][i % 2]
        return httpx.post(servers[0] + route, json=body, timeout=60)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(8)))
    assert [r.status_code for r in answers] == [200] * 8
    assert all(isinstance(r.json().get("response", r.json().get("choices")), (str, list)) for r in answers)


def test_every_error_code(servers):
    plain, locked = servers
    auth = {"Authorization": f"Bearer {TOKEN}"}
    as_json = {"Content-Type": "application/json"}
    r = httpx.post(f"{plain}/api/generate", content=b"{not json", headers=as_json)
    assert r.status_code == 400 and isinstance(r.json()["error"], str)  # Ollama's shape
    r = httpx.post(f"{plain}/v1/completions", content=b"[1, 2]", headers=as_json)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"  # OpenAI's shape
    assert httpx.post(f"{plain}/v1/completions", json={"prompt": "x", "temperature": "hot"}).status_code == 400
    assert httpx.post(f"{plain}/v1/edit/completions", json={"messages": [{"role": "user", "content": "hi"}]}
                      ).status_code == 400
    r = httpx.post(f"{plain}/v1/completions", json={"model": "gpt-4", "prompt": "x"})
    assert r.status_code == 404 and "redraft" in r.json()["error"]["available"]
    assert "redraft-diffusion" in httpx.post(f"{plain}/api/generate", json={"model": "nope"}).json()["error"]
    assert httpx.get(f"{plain}/v2/nothing").status_code == 404
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        r = httpx.post(f"{locked}/v1/completions", json={"prompt": "x"}, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{locked}/api/tags").status_code == 401
    r = httpx.post(f"{locked}/v1/completions", json={"prompt": "x" * 5000}, headers=auth)
    assert r.status_code == 413 and "4096" in r.json()["error"]["message"]
    assert httpx.post(f"{locked}/v1/completions", json={"prompt": "x = ", "max_tokens": 2},
                      headers=auth).status_code == 200


def test_a_cancelled_stream_frees_the_engine(inference, slow_engine):
    # Drafts off and 8 span tokens: the random model commits about one token per step, so an
    # uncancelled request makes ~10 model calls. A cancelled one stops at the next step.
    server = Running(build_app(inference, replace(CONFIG, drafts="off", line_tokens=8)))
    try:
        body = {"prompt": "x = ", "suffix": "", "diffusing": True, "temperature": 0}
        with httpx.stream("POST", f"{server.url}/v1/fim/completions", json=body, timeout=30) as r:
            next(r.iter_lines())  # the first draft: the engine is denoising
            during = slow_engine["calls"]
        assert during + calls_until_free(inference, slow_engine) <= 4  # encode, a step or two, then stop
        assert slow_engine["flags"][-1].is_set()
        start = slow_engine["calls"]
        with pytest.raises(httpx.ReadTimeout):  # a dropped plain request too
            httpx.post(f"{server.url}/v1/completions", json=body | {"diffusing": False}, timeout=0.6)
        assert slow_engine["calls"] - start + calls_until_free(inference, slow_engine) <= 4
        assert slow_engine["flags"][-1].is_set()
        slow_engine["delay"] = 0.0
        r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "y = ", "max_tokens": 2}, timeout=30)
        assert r.status_code == 200
        assert not slow_engine["flags"][-1].is_set()  # a request that was not dropped is not cancelled
    finally:
        server.stop()


# -- the command ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, proc: subprocess.Popen) -> httpx.Response:
    deadline = time.time() + 60
    while True:
        try:
            return httpx.get(url, timeout=5)
        except httpx.TransportError:
            assert proc.poll() is None and time.time() < deadline, "the server did not start"
            time.sleep(0.1)


def test_serve_http_answers_as_a_command(tiny_model):
    port = _free_port()
    proc = subprocess.Popen([*SERVE, "--http", str(port), "--model", str(tiny_model)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert _wait_for(f"http://127.0.0.1:{port}/api/tags", proc).json()["models"][0]["name"] == "redraft"
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "x = ", "max_tokens": 3})
        assert r.status_code == 200 and r.json()["model"] == "redraft"
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.7", "example.com"])
def test_a_non_local_bind_without_a_token_is_refused(host):
    out = subprocess.run([*SERVE, "--http", "8080", "--host", host], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--token" in out.stderr and host in out.stderr and "Traceback" not in out.stderr


def _lsp(proc: subprocess.Popen, message: dict) -> None:
    body = json.dumps(message).encode()
    proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    proc.stdin.flush()


def _read_lsp(proc: subprocess.Popen) -> dict:
    length = None
    while True:
        line = proc.stdout.readline()
        assert line, "stdout closed"
        if line.lower().startswith(b"content-length"):
            length = int(line.split(b":")[1])
        elif line in (b"\r\n", b"\n") and length is not None:
            return json.loads(proc.stdout.read(length))


def test_stdio_and_http_in_one_process(tiny_model):
    port = _free_port()
    proc = subprocess.Popen([*SERVE, "--http", str(port), "--stdio", "--model", str(tiny_model)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        _lsp(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"processId": None, "rootUri": None, "capabilities": {}}})
        while "id" not in (reply := _read_lsp(proc)):
            pass
        assert "inlineCompletionProvider" in reply["result"]["capabilities"]
        assert _wait_for(f"http://127.0.0.1:{port}/v1/models", proc).status_code == 200
        r = httpx.post(f"http://127.0.0.1:{port}/api/generate", json={"prompt": "x = ", "stream": False}, timeout=60)
        assert r.json()["model"] == "redraft" and r.json()["done"] is True  # the engine the LSP side loaded
        _lsp(proc, {"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
        _lsp(proc, {"jsonrpc": "2.0", "method": "exit"})
        assert proc.wait(timeout=30) == 0  # LSP's exit ends the HTTP side too
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
