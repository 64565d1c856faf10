"""`redraft complete` and friends, run as a user runs them."""

import json
import subprocess
import sys

import pytest

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
