"""Broken checkpoints against the real server: switching `model` to one keeps the model that
was loaded (or drafts alone, when there was none), says why in one window/showMessage and in
`redraft/stats` (`model_error`), and completions keep coming. Crafted, hostile folders
(crafted.py: ten million layers, a FIFO for weights, an index pointing out of the folder...)
are refused the same way, at once, without the server's memory growing."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from safetensors.torch import load_file, save_file

import crafted
from lsp_helpers import SERVER, complete, init_params, open_doc, stats, until_loaded

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEXT = "x = compute(alpha, beta)\ny = scale(gamma)\nz = compute(al\n"
URI = "file:///work/compute.py"


def _truncate(folder):
    f = folder / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _poison(value):
    def apply(folder):
        f = folder / "model.safetensors"
        state = load_file(f)
        state["model.layers.1.mlp.up_proj.weight"][3, 5] = value
        save_file(state, f, metadata={"format": "pt"})
    return apply


def _config(**changes):
    def apply(folder):
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(cfg | changes))
    return apply


def _empty(folder):
    shutil.rmtree(folder)
    folder.mkdir()


# name -> (how the copy is broken, what the error must say)
BROKEN = {
    "truncated": (_truncate, "truncated"),
    "nan-weight": (_poison(float("nan")), "model.layers.1.mlp.up_proj.weight holds 1 NaN"),
    "inf-weight": (_poison(float("inf")), "model.layers.1.mlp.up_proj.weight holds 0 NaN and 1 Inf"),
    "no-tokenizer": (lambda folder: (folder / "tokenizer.json").unlink(), "no tokenizer.json"),
    "not-a-model": (_empty, "no config.json (not a checkpoint folder)"),
    "wrong-shape": (_config(intermediate_size=96), "config.json implies"),
    "config-type": (_config(num_hidden_layers="two"), "wrong type"),
}


# crafted.py's cases sent as the `model` setting: each one a class of hostile folder
CRAFTED = ["layers-10M", "hidden-2^40", "mask-10^12", "eps-nan", "weights-fifo", "config-to-dev-zero",
           "index-absolute", "index-dotdot", "header-1GiB", "config-claims-more"]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, tiny_model):
    return crafted.build(tmp_path_factory.mktemp("hostile"), tiny_model, CRAFTED)


def _peak_mb(client: LanguageClient) -> float:
    """The server process's peak resident memory so far."""
    for line in Path(f"/proc/{client._server.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def broken(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("broken")
    out = {}
    for name, (apply, _) in BROKEN.items():
        folder = root / name
        shutil.copytree(tiny_model, folder)
        apply(folder)
        out[name] = folder
    return out


async def _complete_new(client: LanguageClient, tag: str) -> list:
    """A completion in a document opened for it (nothing cached: the engine runs, if loaded)."""
    uri = f"file:///work/{tag}.py"
    open_doc(client, uri, TEXT)
    return await complete(client, uri, 2, 14)


async def _messages_after(client: LanguageClient, start: int, want: int = 1, timeout: float = 10.0) -> list:
    """The showMessages since `start`, once `want` have come (or the time is up)."""
    for _ in range(int(timeout / 0.05)):
        if len(client.messages) - start >= want:
            break
        await asyncio.sleep(0.05)
    return client.messages[start:]


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, tiny_model):
    await lsp_client.initialize_session(init_params(tiny_model))
    await until_loaded(lsp_client)
    await _complete_new(lsp_client, "first")  # the model has loaded
    assert (await stats(lsp_client))["model"] == "redraft"
    yield
    await lsp_client.shutdown_session()


@pytest.mark.parametrize("name", list(BROKEN))
async def test_a_broken_checkpoint_keeps_the_model_and_says_so_once(client: LanguageClient, broken, tiny_model,
                                                                    name):
    start, before = len(client.messages), await stats(client)
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"model": str(broken[name])}))
    items = await _complete_new(client, name)  # queued behind the load on the executor
    after = await stats(client)
    assert isinstance(items, list)
    assert after["model"] == "redraft"  # the model it had
    assert after["model_runs"] == before["model_runs"] + 1  # ... answered this completion
    assert after["errors"] == before["errors"]
    error = after["model_error"]
    assert error and name in error and BROKEN[name][1] in error and "still serving 'redraft'" in error
    (message,) = await _messages_after(client, start)
    assert message.type == T.MessageType.Error and message.message == f"redraft: {error}"

    # Back to the good model: the error is gone and nothing more is said.
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"model": str(tiny_model)}))
    await _complete_new(client, f"{name}-after")
    s = await stats(client)
    assert s["model"] == "redraft" and s["model_error"] is None and s["model_runs"] == after["model_runs"] + 1
    assert await _messages_after(client, start, want=2, timeout=0.3) == [message]


@pytest.mark.parametrize("name", CRAFTED)
async def test_a_crafted_folder_is_refused_at_once_and_the_model_keeps_answering(client: LanguageClient, hostile,
                                                                                 tiny_model, name):
    start, before, peak = len(client.messages), await stats(client), _peak_mb(client)
    t0 = time.perf_counter()
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"model": str(hostile[name])}))
    items = await _complete_new(client, f"crafted-{name}")  # queued behind the refused load
    waited = time.perf_counter() - t0
    after = await stats(client)
    assert items and all(i.insert_text for i in items)  # the model loaded before answered, with text
    assert after["model"] == "redraft" and after["model_runs"] == before["model_runs"] + 1
    assert after["errors"] == before["errors"]  # a refusal, not a failure no check foresaw
    error = after["model_error"]
    _, _, pattern = crafted.CASES[name]
    assert error and re.search(pattern, error) and error.endswith("; still serving 'redraft'"), error
    assert "\n" not in error and "Traceback" not in error
    (message,) = await _messages_after(client, start)
    assert message.type == T.MessageType.Error and message.message == f"redraft: {error}"
    assert waited < 5.0, waited  # the load was refused at once (a FIFO once held the executor for good)
    assert _peak_mb(client) < peak + 64 and _peak_mb(client) < 1024

    client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"model": str(tiny_model)}))
    await _complete_new(client, f"crafted-{name}-after")
    assert (await stats(client))["model_error"] is None


@pytest_lsp.fixture(config=SERVER, scope="module")
async def no_model(lsp_client: LanguageClient, broken):
    await lsp_client.initialize_session(init_params(broken["nan-weight"]))
    await until_loaded(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def test_without_a_model_drafts_answer_until_a_good_one_loads(no_model: LanguageClient, tiny_model):
    client = no_model
    open_doc(client, URI, TEXT)
    items = await complete(client, URI, 2, 14)
    s = await stats(client)
    assert [i.insert_text for i in items] == ["pha, beta)"]  # from a draft: the same call earlier in the file
    assert s["model"] is None and s["model_runs"] == 0 and s["sources"] == {"buffer": 1}
    assert "NaN" in s["model_error"] and s["model_error"].endswith("no model is loaded")
    (message,) = await _messages_after(client, 0)
    assert message.type == T.MessageType.Error and "nan-weight" in message.message

    client.workspace_did_change_configuration(T.DidChangeConfigurationParams({"model": str(tiny_model)}))
    await _complete_new(client, "after")
    s = await stats(client)
    assert s["model"] == "redraft" and s["model_error"] is None and s["model_runs"] == 1
    assert len(await _messages_after(client, 0, want=2, timeout=0.3)) == 1


@pytest_lsp.fixture(config=SERVER, scope="module")
async def fifo_first(lsp_client: LanguageClient, hostile):
    await lsp_client.initialize_session(init_params(hostile["weights-fifo"]))
    await until_loaded(lsp_client, timeout=20)
    yield
    await lsp_client.shutdown_session()


async def test_a_hostile_first_model_leaves_drafts_answering(fifo_first: LanguageClient):
    """The model the editor starts with is a folder whose weights are a FIFO: the load is refused
    (it used to wait on the FIFO for good, and every completion behind it); the completion is
    answered, by the shipped model when its start-up load won the race, else by a draft."""
    client = fifo_first
    open_doc(client, URI, TEXT)
    t0 = time.perf_counter()
    items = await complete(client, URI, 2, 14)
    assert time.perf_counter() - t0 < 10.0
    s = await stats(client)
    assert s["model_state"] == "failed" and s["model"] in (None, "redraft-diffusion")
    if s["model"] is None:
        assert [i.insert_text for i in items] == ["pha, beta)"]  # a draft: the same call earlier in the file
        assert s["sources"] == {"buffer": 1}
    else:
        assert s["model_runs"] == 1 and items and items[0].insert_text
    assert re.search(r"weights-fifo/model\.safetensors: is a FIFO \(named pipe\), not a regular file; refused "
                     r"without opening it; (no model is loaded|still serving 'redraft-diffusion')$",
                     s["model_error"]), s["model_error"]
    (message,) = await _messages_after(client, 0)
    assert message.type == T.MessageType.Error and message.message == f"redraft: {s['model_error']}"
    assert _peak_mb(client) < 1024


# -- in process: every failure, foreseen or not, ends in load_error ------------------------


async def test_an_unforeseen_load_failure_keeps_the_model(tiny_model, monkeypatch):
    from redraft.server.core import inference as core
    inf = core.Inference()
    try:
        assert await asyncio.wrap_future(inf.load(str(tiny_model), "cpu", "float32")) is None
        engine = inf.engine

        def explode(*args, **kwargs):
            raise KeyError("weight_map")
        monkeypatch.setattr(core.Engine, "load", explode)
        error = await asyncio.wrap_future(inf.load("elsewhere", "cpu", "float32"))  # a message, not an exception
        assert error == inf.load_error == ("could not load model 'elsewhere': KeyError: 'weight_map'; "
                                           "still serving 'redraft'")
        assert inf.engine is engine
        assert await asyncio.wrap_future(inf.load(str(tiny_model), "cpu", "float32")) is None
        assert inf.load_error is None  # back to the model it has: nothing wrong any more
    finally:
        inf.shutdown()
