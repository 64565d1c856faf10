"""`redraft complete` and friends, run as a user runs them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tiny
from redraft.server.cli import UserError, split_at


def redraft(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "redraft.server.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny.make_family(tmp_path_factory.mktemp("cli") / "dream", "dream")


@pytest.fixture
def source(tmp_path):
    f = tmp_path / "point.py"
    f.write_text("class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.\n", encoding="utf-8")
    return f


def test_split_at_is_one_based_characters():
    text = "ab\nc€d\n"
    assert split_at(text, 1, 1) == ("", text)
    assert split_at(text, 2, 3) == ("ab\nc€", "d\n")
    assert split_at(text, 2, 4) == ("ab\nc€d", "\n")
    assert split_at(text, 3, 1) == (text, "")
    for line, col in ((0, 1), (4, 1), (2, 5), (1, 0)):
        with pytest.raises(UserError):
            split_at(text, line, col)


def test_complete_prints_text(model, source):
    out = redraft("complete", f"{source}:4:14", "--model", str(model), "--dtype", "float32", "--span", "6")
    assert out.returncode == 0, out.stderr
    assert out.stdout.endswith("\n")


def test_complete_json_has_text_and_stats(model, source):
    out = redraft("complete", f"{source}:4:14", "--model", str(model), "--json", "--span", "6")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("text", "ms", "steps", "forwards", "context_tokens"):
        assert key in data
    assert data["steps"] >= 1 and data["forwards"] >= 1 and data["context_tokens"] > 5
    assert isinstance(data["text"], str)


def test_unknown_model_name_is_a_clear_message(source):
    out = redraft("complete", f"{source}:1:3", "--model", "redraft-nonexistent")
    assert out.returncode == 2
    assert "no checkpoint folder or known model" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("position,message", [
    ("nowhere.py:1:1", "no such file"),
    ("{src}:9:1", "line 9 is outside"),
    ("{src}:1:99", "column 99 is outside"),
    ("{src}:x:1", "FILE:LINE:COL"),
])
def test_bad_positions(model, source, position, message):
    out = redraft("complete", position.format(src=source), "--model", str(model))
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_bad_model_path_and_settings(model, source, tmp_path):
    out = redraft("complete", f"{source}:1:3", "--model", str(tmp_path))
    assert out.returncode == 2 and "config.json" in out.stderr
    out = redraft("complete", f"{source}:1:3", "--model", str(model), "--threshold", "3")
    assert out.returncode == 2 and "threshold" in out.stderr and "Traceback" not in out.stderr


def test_complete_answers_nothing_where_the_server_would_not(model, tmp_path):
    f = tmp_path / "mid.py"
    f.write_text("total = compute_value(1)\n", encoding="utf-8")
    out = redraft("complete", f"{f}:1:12", "--model", str(model), "--json")  # inside `compute_value`
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["mode"] == "none" and data["reason"] == "mid-identifier" and data["text"] == ""


def test_complete_says_on_stderr_why_it_answered_nothing(model, tmp_path):
    f = tmp_path / "mid.py"
    f.write_text("total = compute_value(1)\n", encoding="utf-8")
    out = redraft("complete", f"{f}:1:12", "--model", str(model))  # inside `compute_value`
    assert out.returncode == 0 and out.stdout == "\n"
    assert "nothing to suggest here" in out.stderr and "mid-identifier" in out.stderr


def test_complete_says_nothing_on_stderr_when_it_answers(tmp_path):
    f = tmp_path / "store.py"
    f.write_text("import logging\n\nlog = logging.getLogger(__name__)\n\n\nclass Store:\n    def __init__(self):\n"
                 "        self.log = logging.", encoding="utf-8")
    out = redraft("complete", f"{f}:8:28", "--drafts", "only")
    assert out.returncode == 0 and out.stdout == "getLogger(__name__)\n" and "nothing" not in out.stderr


def test_every_json_output_ends_in_a_newline(model, source, tmp_path):
    out = redraft("complete", f"{source}:4:14", "--model", str(model), "--json", "--span", "6")
    assert out.returncode == 0 and out.stdout.endswith("}\n") and out.stdout.count("\n") == 1, out.stderr
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "a.py").write_text(tiny.CORPUS * 3, encoding="utf-8")
    out = redraft("eval", "infill", "--files", str(tmp_path / "code"), "--drafts", "only", "--limit", "2", "--json")
    assert out.returncode == 0 and out.stdout.endswith("}\n") and out.stdout.count("\n") == 1, out.stderr
    json.loads(out.stdout)


def test_complete_timings_say_where_the_time_went(model, source):
    out = redraft("complete", f"{source}:4:14", "--model", str(model), "--span", "6", "--timings")
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stderr.splitlines() if ln.startswith("redraft: timings: "))
    laps = dict(part.rsplit(" ", 2)[:2] for part in line.removeprefix("redraft: timings: ").split(", "))
    for name in ("start-up", "snapshot", "drafts", "import (thread)", "load (thread)", "waiting for the model",
                 "engine", "total"):
        assert float(laps[name]) >= 0, name
    assert float(laps["total"]) >= float(laps["import (thread)"]) + float(laps["load (thread)"])
    out = redraft("complete", f"{source}:4:14", "--model", str(model), "--span", "6", "--timings", "--json")
    assert set(json.loads(out.stdout)["timings_ms"]) >= {"snapshot", "engine", "total"}


def test_complete_reads_the_file_before_it_waits_for_a_model(source):
    # A bad position is reported without loading anything (no model named here exists).
    out = redraft("complete", f"{source}:9:1", "--model", "redraft-nonexistent")
    assert out.returncode == 2 and "line 9 is outside" in out.stderr and "Traceback" not in out.stderr


def test_doctor_reports_this_machine():
    import platform

    import torch

    from redraft.engine import DEFAULT_MODEL, Engine
    from redraft.engine.checkpoint import resolve
    from redraft.server.core.languages import supported, syntax_for
    out = redraft("doctor")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = {ln.split()[0]: ln.split(None, 1)[1] for ln in out.stdout.splitlines()}
    assert list(lines) == ["python", "torch", "device", "model", "files", "grammars"]
    assert lines["python"].startswith(platform.python_version() + " (")
    gpu = torch.cuda.is_available()
    build = (f"CUDA {torch.version.cuda} build" if torch.version.cuda
             else "ROCm build" if getattr(torch.version, "hip", None) else "CPU build")
    assert lines["torch"].startswith(f"{torch.__version__}, {build}, CUDA available: {'yes' if gpu else 'no'}")
    device, dtype = lines["device"].split(", dtype ")
    assert device == "cpu" and dtype.split()[0] in ("float32", "bfloat16", "int8") and "(auto)" in dtype
    engine = Engine.load(DEFAULT_MODEL, device="cpu", dtype=dtype.split()[0])
    params = engine.info().parameters
    assert lines["model"].startswith(f"{DEFAULT_MODEL}: {params / 1e6:.1f}M parameters, {dtype.split()[0]} on cpu, "
                                     "loads in ")
    assert lines["files"].startswith(f"{resolve(DEFAULT_MODEL)}: ") and "model.safetensors (" in lines["files"]
    loading = [n for n in supported() if syntax_for(n).grammar is not None]
    assert loading and lines["grammars"].endswith(f": {', '.join(loading)} load")
    assert out.stderr.strip().endswith("redraft: doctor: all good")


def test_doctor_fails_clearly_when_the_model_does_not_load(tmp_path):
    out = redraft("doctor", "--model", str(tmp_path))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert any(ln.startswith("model     FAILED: ") and "config.json" in ln for ln in out.stdout.splitlines())
    assert "redraft: doctor: model FAILED" in out.stderr
    assert out.stdout.splitlines()[-1].startswith("grammars ")  # the other checks still ran


def test_eval_next_edit_on_two_releases(tmp_path):
    """`--releases OLD NEW`: each hunk in turn as the user's edit; here the first class's
    `(object)` dropped reaches the two other classes, as the new release has them."""
    old = "".join(f"class C{i}(object):\n    pass\n\n\n" for i in range(3))
    for version, text in (("1.0", old), ("2.0", old.replace("(object)", ""))):
        (tmp_path / "pkg" / version).mkdir(parents=True)
        (tmp_path / "pkg" / version / "shapes.py").write_text(text)
    r = redraft("eval", "next-edit", "--releases", str(tmp_path / "pkg" / "1.0"), str(tmp_path / "pkg" / "2.0"),
                "--no-model", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    overall = rep["overall"]
    assert overall["scenarios"] == 3 and overall["fires"] == 1.0
    assert overall["precision"] == 1.0 and overall["proposals"] == 6
    bad = redraft("eval", "next-edit", "--releases", str(tmp_path / "nothing"))
    assert bad.returncode == 2 and "not a folder" in bad.stderr


def test_complete_finishes_a_partly_typed_name_unless_told_not_to(tmp_path):
    f = tmp_path / "settings.py"
    f.write_text("import json\n\n\ndef load(path):\n    try:\n        return json.load(open(path))\n"
                 "    except FileNo\n", encoding="utf-8")
    on = redraft("complete", f"{f}:7:18", "--drafts", "only", "--json")
    assert on.returncode == 0, on.stderr
    got = json.loads(on.stdout)
    assert got["text"] == "tFoundError" and got["source"] == "name"
    off = json.loads(redraft("complete", f"{f}:7:18", "--drafts", "only", "--names", "off", "--json").stdout)
    assert off["text"] == "" and off["source"] != "name"


# -- the command line, through the installed `redraft` entry point -----------------------

REDRAFT = str(Path(sys.executable).with_name("redraft"))  # the console script beside this Python
CUDA_MISSING = pytest.mark.skipif(torch.cuda.is_available(), reason="this torch runs on CUDA here")
README_EXAMPLE = ("import logging\n\nlog = logging.getLogger(__name__)\n\n\nclass Store:\n    def __init__(self):\n"
                  "        self.log = logging.")


def entry(*args, **kwargs):
    return subprocess.run([REDRAFT, *args], capture_output=True, text=True, timeout=120, **kwargs)


def test_version_is_the_packages():
    from importlib.metadata import version
    out = entry("--version")
    assert out.returncode == 0 and out.stdout == f"redraft {version('redraft')}\n" and version("redraft")


def test_train_help_lists_the_steps_and_each_step_says_its_own_name():
    out = entry("train", "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: redraft train ")
    steps = [ln.split()[0] for ln in out.stdout.splitlines() if ln.startswith("  ") and not ln.startswith("   ")]
    assert steps[:5] == ["corpus", "tokenizer", "model", "distill", "ship"]
    for step in steps[:5]:
        out = entry("train", step, "--help")
        assert out.returncode == 0 and out.stdout.startswith(f"usage: redraft train {step} "), (step, out.stdout)
    out = entry("train")
    assert out.returncode == 2 and "redraft train STEP --help" in out.stderr


def test_every_model_option_says_what_it_takes():
    for command in ("complete", "serve", "doctor"):
        out = entry(command, "--help")
        text = " ".join(out.stdout.split())
        assert out.returncode == 0 and "--device DEVICE where the model runs: cpu (default), cuda" in text, command


def test_venvs_made_in_the_clone_are_ignored():
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "check-ignore", ".venv/bin/python", "venv/bin/python"], cwd=root,
                         capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == [".venv/bin/python", "venv/bin/python"]


@CUDA_MISSING
def test_a_gpu_this_torch_cannot_use_is_one_message_not_a_traceback(source):
    out = entry("doctor", "--device", "cuda")
    assert out.returncode == 1 and "Traceback" not in out.stderr + out.stdout
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("device ")]
    assert line.startswith("device    FAILED: device 'cuda' is not available: ") and "CPU build" in line
    assert "redraft: doctor: device FAILED" in out.stderr
    out = entry("complete", f"{source}:4:14", "--device", "cuda")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("redraft: device 'cuda' is not available: ") and out.stderr.count("\n") == 1
    out = entry("complete", f"{source}:4:14", "--device", "gpu0")
    assert out.returncode == 2 and out.stderr == "redraft: unknown device 'gpu0' (cpu, cuda, cuda:N or mps)\n"


@pytest.mark.parametrize("model", ["redraft-diffusion", "redraft-ar"])
def test_every_shipped_model_answers_the_readme_example_without_a_loop(model, tmp_path):
    from redraft.server.core.repetition import loop_start
    f = tmp_path / "store.py"
    f.write_text(README_EXAMPLE, encoding="utf-8")
    out = entry("complete", f"{f}:8:28", "--model", model, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["model"] == model and data["raw"]  # the model ran and wrote something
    if model == "redraft-diffusion":
        assert data["text"] == "getLogger(__name__)"
    assert loop_start(data["text"]) is None  # something sensible, or nothing (and stderr says why)
    assert data["text"] or "redraft: nothing to suggest here: " in out.stderr


def test_complete_never_reads_a_secret_file(tmp_path):
    secret = tmp_path / ".env"
    secret.write_text("API_TOKEN=sk-live-9f8e7d6c5b4a\nOTHER_TOKEN=sk-", encoding="utf-8")
    out = redraft("complete", f"{secret}:2:16", "--drafts", "only")
    assert out.returncode == 2 and "secret file" in out.stderr and "9f8e7d" not in out.stdout + out.stderr
    plain = tmp_path / "env.txt"  # the same text in a file that is not a secret one: it is read
    plain.write_text(secret.read_text(), encoding="utf-8")
    out = redraft("complete", f"{plain}:2:16", "--drafts", "only")
    assert out.returncode == 0 and out.stdout.startswith("live-9f8e7d6c5b4a")


@pytest.mark.parametrize("given, threads", [(None, 1), ("2", 2)])
def test_commands_run_the_model_on_one_thread_unless_told(tmp_path, given, threads):
    """One intra-op thread by default (a second one stalls whenever another process takes its
    core); OMP_NUM_THREADS, when the user sets it, wins."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if given is not None:
        env["OMP_NUM_THREADS"] = given
    code = ("import sys; from redraft.server import cli; "
            f"code = cli.main(['complete', {str(tmp_path / 'missing.py')!r} + ':1:1']); "
            "import torch; print(code, torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.split() == ["2", str(threads)], out.stderr
    assert "no such file" in out.stderr
