"""Crafted model folders (crafted.py) against the real loader, in a fresh process: each is
refused with its typed error and a one-line message that names the problem, within a couple of
seconds, without the process growing (no layer built, no file read past its cap, no FIFO
waited on). Folders that are merely laid out with links inside them still load."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

import crafted
import tiny
from redraft.engine import Engine, EngineError
from redraft.engine import errors as engine_errors
from redraft.engine.checkpoint import load_model, read_config
from redraft.engine.model import DiffusionLM
from redraft.engine.tokenizer import Tokenizer
from redraft.engine.weights import expected_shapes

SECONDS = 3.0  # per load, on a busy 2-core machine (they take ~10-50 ms)
GROWTH_MB = 64  # the peak memory a refused load may add to that of a loaded tiny model


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tiny.make_family(tmp_path_factory.mktemp("hostile") / "base", "redraft")


@pytest.fixture(scope="module")
def loads(tmp_path_factory, base):
    folders = crafted.build(tmp_path_factory.mktemp("crafted"), base)
    baseline, rows = crafted.load_each(base, folders)
    return baseline, rows


@pytest.mark.parametrize("name", list(crafted.CASES))
def test_a_crafted_folder_is_refused_in_one_line_quickly_and_small(loads, name):
    baseline, rows = loads
    assert name in rows, f"{name}: the load never returned"
    row = rows[name]
    _, kind, pattern = crafted.CASES[name]
    assert row["error"] == kind, row
    assert issubclass(getattr(engine_errors, kind), EngineError)
    assert re.search(pattern, row["message"]), row["message"]
    assert name in row["message"]  # names the folder (and the file)
    assert "\n" not in row["message"] and len(row["message"]) < 600
    assert row["seconds"] < SECONDS, row
    assert row["peak_mb"] < baseline + GROWTH_MB, (baseline, row)
    assert row["peak_mb"] < 1024


def test_every_case_ran_and_none_loaded(loads):
    baseline, rows = loads
    assert set(rows) == set(crafted.CASES)
    assert all(r["error"] for r in rows.values())
    assert 0 < baseline < 1024


# -- links that stay inside the folder are fine ----------------------------------------------


def test_weights_linked_within_the_folder_load(tmp_path, base):
    folder = tmp_path / "m"
    shutil.copytree(base, folder)
    (folder / "weights").mkdir()
    (folder / "model.safetensors").rename(folder / "weights" / "real.safetensors")
    (folder / "model.safetensors").symlink_to("weights/real.safetensors")
    assert Engine.load(folder, dtype="float32").model_config.family == "redraft"


def test_a_hugging_face_cache_snapshot_loads(tmp_path, base):
    """The hub's layout: <repo>/snapshots/<rev>/<file> -> ../../blobs/<hash>."""
    repo = tmp_path / "models--someone--tiny"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for i, f in enumerate(sorted(base.iterdir())):
        shutil.copy(f, repo / "blobs" / f"blob{i}")
        (snapshot / f.name).symlink_to(f"../../blobs/blob{i}")
    assert Engine.load(snapshot, dtype="float32").model_config.family == "redraft"
    # ... but a blobs folder that is itself a link out is not the hub's
    shutil.move(repo / "blobs", tmp_path / "elsewhere")
    (repo / "blobs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(engine_errors.UnsafeFileError, match="config.json: leads outside the model folder"):
        Engine.load(snapshot, dtype="float32")


def test_an_index_naming_files_in_the_folder_loads(tmp_path, base):
    folder = tmp_path / "m"
    shutil.copytree(base, folder)
    crafted.index(lambda f, o: "model.safetensors")(folder, tmp_path)
    assert Engine.load(folder, dtype="float32").model_config.family == "redraft"


# -- the shapes checked before the model is built are the model's ------------------------------


@pytest.mark.parametrize("family", ["dream", "llada", "redraft", "redraft-ar"])
def test_expected_shapes_are_the_models_own(tmp_path, family):
    folder = tiny.make_family(tmp_path, family)
    cfg = read_config(folder, Tokenizer.from_folder(folder))
    import torch
    for tied in (False, True):
        c = cfg.__class__(**{**cfg.__dict__, "tie_word_embeddings": tied})
        with torch.device("meta"):
            model = DiffusionLM(c)
        assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == expected_shapes(c)


def test_load_model_refuses_before_building(tmp_path, base, monkeypatch):
    """A refused folder never reaches the model's constructor."""
    import redraft.engine.checkpoint as checkpoint
    folder = crafted.build(tmp_path, base, ["config-claims-more"])["config-claims-more"]
    cfg = read_config(folder, Tokenizer.from_folder(folder))

    def built(*args, **kwargs):
        raise AssertionError("the model was built")
    monkeypatch.setattr(checkpoint, "DiffusionLM", built)
    import torch
    with pytest.raises(engine_errors.ShapeMismatchError, match="config.json implies"):
        load_model(folder, cfg, torch.device("cpu"), torch.float32)


def test_a_tokenizer_with_a_token_past_the_models_vocabulary(tmp_path, base):
    """An added token (at id 10^9 in the file; the tokenizers library numbers it 369) that the
    369-row embedding lacks: refused at load, not met as an index error at the first completion."""
    import json
    folder = tmp_path / "m"
    shutil.copytree(base, folder)
    tok = json.loads((folder / "tokenizer.json").read_text())
    tok["added_tokens"].append({"id": 10 ** 9, "content": "<|far|>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(engine_errors.InvalidConfigError,
                       match=r"tokenizer\.json has token ids up to 369 but vocab_size is 369"):
        Engine.load(folder, dtype="float32")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads through /proc/self/fd")
def test_no_descriptor_is_left_open(tmp_path, base):
    folders = crafted.build(tmp_path, base, ["weights-int8", "tokenizer-40MiB", "eps-nan"])
    before = len(os.listdir("/proc/self/fd"))
    for folder in folders.values():
        with pytest.raises(EngineError):
            Engine.load(folder, dtype="float32")
    Engine.load(base, dtype="float32")
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("name", ["layers-10M", "weights-fifo", "index-dotdot"])
def test_the_command_line_says_it_in_one_line(tmp_path, base, name):
    """`redraft complete --model CRAFTED`: exit status 2 and one line on stderr, no traceback."""
    import subprocess
    import sys
    folder = crafted.build(tmp_path, base, [name])[name]
    source = tmp_path / "a.py"
    source.write_text("def f(x):\n    return \n")
    run = subprocess.run([sys.executable, "-m", "redraft.server.cli", "complete", "--model", str(folder),
                          f"{source}:2:12"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and run.stdout == ""
    assert len(lines) == 1 and lines[0].startswith(f"redraft: {folder}/"), run.stderr
    assert re.search(crafted.CASES[name][2], lines[0]), lines[0]
