"""Start-up against the real server: completions come from drafts while the first model
loads (and `redraft/stats` says so), a failed load is told once, and a load superseded by a
newer one says nothing.

Loads are held deterministically by a named pipe beside a real checkpoint folder whose weights
file is empty: the server runs with its model loads wrapped (`_HELD`) so that a load of that
folder first opens the pipe, which blocks until the test opens the other end; the load then
fails on the empty file. (The loader itself refuses a pipe in a model folder unopened.)
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import sys
import threading

import attrs
import pytest
import pytest_asyncio
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig
from safetensors.torch import load_file, save_file

from lsp_helpers import CAPABILITIES, OPTIONS, SERVER, complete, init_params, open_doc, stats

TEXT = "x = compute(alpha, beta)\ny = scale(gamma)\nz = compute(al\n"
URI = "file:///work/compute.py"


def _gate(tiny_model, folder):
    """A copy of the tiny model with an empty model.safetensors, and the named pipe `_held`
    makes its loads wait on (`_pipe`): loading it waits for `_release`, then fails."""
    folder.mkdir()
    for f in tiny_model.iterdir():
        shutil.copy(f, folder / f.name)
    (folder / "model.safetensors").write_bytes(b"")
    os.mkfifo(_pipe(folder))
    return folder


def _pipe(folder):
    return folder.parent / f"{folder.name}.gate"


def _held(inference_class, folder):
    """Make every load of `folder` by `inference_class` open `folder`'s pipe first."""
    real = inference_class._load_now

    def _load_now(self, key, number):
        if key[0] and os.path.realpath(key[0]) == os.path.realpath(folder):
            with open(_pipe(folder), "rb") as pipe:  # blocks until the writing end is opened,
                pipe.read()  # then until it is closed: the release is the close, not the open
        return real(self, key, number)
    inference_class._load_now = _load_now


# `redraft serve` with the loads of one folder held (argv: folder, then serve's own arguments)
_HELD = f"""
import sys
from pathlib import Path
from redraft.server.core.inference import Inference
sys.path.insert(0, {str(os.path.dirname(__file__))!r})
from test_lsp_startup import _held
_held(Inference, Path(sys.argv[1]))
from redraft.server.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _release(folder) -> threading.Thread:
    """Let a load blocked on the pipe go on. In a thread: opening the writing end waits for
    the reader."""
    def run():
        with open(_pipe(folder), "wb"):
            pass
    t = threading.Thread(target=run, daemon=True)  # never keeps the tests waiting at exit
    t.start()
    return t


async def _until(client, pred, timeout: float = 60.0) -> dict:
    """redraft/stats once `pred(stats)` holds (or the last one when the time is up)."""
    for _ in range(int(timeout / 0.05)):
        s = await stats(client)
        if pred(s):
            return s
        await asyncio.sleep(0.05)
    return s


@pytest_asyncio.fixture
async def gated(tmp_path, tiny_model):
    """A server started with `--model` a gated folder (its load waits until released)."""
    gate = _gate(tiny_model, tmp_path / "gated")
    assert SERVER.server_command[1:3] == ["-m", "redraft.server.cli"]
    config = ClientServerConfig(server_command=[sys.executable, "-c", _HELD, str(gate), *SERVER.server_command[3:],
                                                "--model", str(gate)],
                                server_env=SERVER.server_env)
    client = await config.start()
    try:
        yield client, gate
    finally:
        _release(gate)
        await client.shutdown_session()


@pytest.mark.asyncio
async def test_drafts_answer_while_the_model_loads(gated, tiny_model):
    client, gate = gated
    caps = attrs.evolve(CAPABILITIES, window=T.WindowClientCapabilities(work_done_progress=True))
    await client.initialize_session(T.InitializeParams(capabilities=caps, initialization_options=OPTIONS))
    s = await stats(client)
    assert s["model_state"] == "loading" and s["model"] is None and s["answered_loading"] == 0

    open_doc(client, URI, TEXT)
    items = await asyncio.wait_for(complete(client, URI, 2, 14), 10)  # not queued behind the held load
    s = await stats(client)
    assert [i.insert_text for i in items] == ["pha, beta)"]  # the same call earlier in the file
    assert s["model_state"] == "loading" and s["model"] is None
    assert s["answered_loading"] == 1 and s["answered"] == 1 and s["model_runs"] == 0
    assert s["sources"] == {"buffer": 1}

    # The load fails (an empty weights file): told once, in one showMessage and one log line.
    _release(gate)
    s = await _until(client, lambda s: s["model_state"] != "loading")
    error = s["model_error"]
    assert s["model_state"] == "failed" and s["model"] is None and "gated" in error and "truncated" in error
    await asyncio.sleep(0.5)  # anything sent after the failure has arrived
    assert [(m.type, m.message) for m in client.messages] == [(T.MessageType.Error, f"redraft: {error}")]
    logged = [m for m in client.log_messages if "could not load model" in m.message]
    assert [(m.type, m.message) for m in logged] == [(T.MessageType.Error, error)]
    kinds = [type(v).__name__ for values in client.progress_reports.values() for v in values]
    assert kinds[:1] == ["WorkDoneProgressBegin"] and kinds[-1:] == ["WorkDoneProgressEnd"], kinds

    # A good model: loading, then ready, and the model answers (no more start-up drafts).
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"model": str(tiny_model)}))
    assert (await stats(client))["model_state"] == "loading"
    s = await _until(client, lambda s: s["model_state"] != "loading")
    assert s["model_state"] == "ready" and s["model"] == "redraft" and s["model_error"] is None
    open_doc(client, "file:///work/after.py", TEXT)
    await complete(client, "file:///work/after.py", 2, 14)
    s = await stats(client)
    assert s["model_runs"] == 1 and s["answered_loading"] == 1
    assert len(client.messages) == 1  # nothing more to tell


@pytest_asyncio.fixture
async def plain():
    client = await SERVER.start()
    yield client
    await client.shutdown_session()


@pytest.fixture
def nan_model(tmp_path, tiny_model):
    folder = tmp_path / "nan-weight"
    shutil.copytree(tiny_model, folder)
    state = load_file(folder / "model.safetensors")
    state["model.layers.1.mlp.up_proj.weight"][3, 5] = float("nan")
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.mark.asyncio
async def test_a_failed_load_is_told_once(plain, nan_model):
    client = plain
    await client.initialize_session(init_params(nan_model))
    s = await _until(client, lambda s: s["model_state"] != "loading")
    assert s["model_state"] == "failed" and s["model"] is None and "NaN" in s["model_error"]
    await asyncio.sleep(0.5)  # anything sent after the failure has arrived
    logged = [m for m in client.log_messages if "could not load model" in m.message]
    assert [(m.type, m.message) for m in logged] == [(T.MessageType.Error, s["model_error"])]
    assert [(m.type, m.message) for m in client.messages] == [(T.MessageType.Error, f"redraft: {s['model_error']}")]

    # Drafts still answer, and the model stays failed (not loading) meanwhile.
    open_doc(client, URI, TEXT)
    assert [i.insert_text for i in await complete(client, URI, 2, 14)] == ["pha, beta)"]
    s = await stats(client)
    assert s["model_state"] == "failed" and s["answered_loading"] == 0 and s["sources"] == {"buffer": 1}


def test_the_server_imports_without_torch():
    """torch loads on the engine's thread while the event loop already answers from drafts."""
    import subprocess
    code = "import sys, redraft.server.lsp.server; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def _reader_waiting(fifo) -> int:
    """The writing end of the pipe, opened once a load is blocked reading it."""
    for _ in range(600):
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no reader yet
            await asyncio.sleep(0.05)
    raise AssertionError("no load read the pipe")


@pytest.mark.asyncio
async def test_a_load_superseded_while_it_runs_says_nothing(tmp_path, tiny_model, monkeypatch):
    from redraft.server.core.inference import Inference
    gate = _gate(tiny_model, tmp_path / "gated")
    monkeypatch.setattr(Inference, "_load_now", Inference._load_now)  # put back after the test
    _held(Inference, gate)
    inf = Inference()
    try:
        first = inf.load(str(gate), "cpu", "float32")
        assert inf.load(str(gate), "cpu", "float32") is first  # asked again: the same load
        assert inf.starting and inf.state == "loading"
        writer = await _reader_waiting(_pipe(gate))
        second = inf.load(str(tiny_model), "cpu", "float32")  # while the first one runs
        os.close(writer)  # the first load reads an empty file and fails
        assert await asyncio.wrap_future(first) is None  # superseded: nothing to tell
        assert await asyncio.wrap_future(second) is None
        assert inf.state == "ready" and inf.load_error is None and inf.engine.name == "redraft"
        assert not inf.starting
        assert gc.get_freeze_count() > 10_000  # torch and the model, out of the collector's way
    finally:
        inf.shutdown()
    assert gc.get_freeze_count() == 0
