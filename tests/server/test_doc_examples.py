"""Every shell example of README.md and docs/*.md that talks to redraft, run as documented
against a real `redraft serve --http` with the shipped default model: each command exits 0
and prints the answer its comment shows, or a non-empty one (for JSON, the completion's text).

Every sh / bash / console block is listed below, in RUN or in SKIPPED with the reason; a new
block in neither fails `test_every_shell_block_is_run_or_listed`, so an example cannot be added
without being run or reviewed. What running one changes in it (REWRITES): the documented
`redraft serve --http 7355` is the module's server, started with that command on a free port;
port 7355 becomes that port; `pip install ... &&` in front of a command is dropped (the test
runs where redraft is installed); /tmp/ becomes the test's own folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from doc_blocks import NOTHING, Block, Command, commands, expectation, shell_blocks, split_comment

ROOT = Path(__file__).resolve().parents[2]
DOC_PORT = "7355"

RUN = {
    ("README.md", "pip install -e . && printf 'import logging\\n\\nlog = logging…"):
        "the first command of the set-up: completes a written file with the shipped model",
    ("README.md", "redraft serve --http 7355"): "the README's HTTP example",
    ("docs/http-api.md", "redraft serve --http 7355 &"): "one curl per route",
}
SKIPPED = {
    ("README.md", "git clone <this repository's URL> redraft && cd redraft"):
        "clones and creates a virtual environment, then installs torch from the network",
    ("README.md", "pip install -e '.[test,cluster]' && python -m pytest -q"):
        "the whole test suite, this module included; .ci/run runs it",
    ("README.md", "pip download -d wheels torch==2.13.0 --index-url https://do…"):
        "downloads and installs packages (offline install recipe)",
    ("docs/http-api.md", "redraft serve --http 7355"):
        "servers that run until stopped; the module's server is started with the first line",
    ("docs/models-and-training.md", "pip install -e '.[train]'"): "trains the shipped models: about 90 minutes",
    ("docs/training-log.md", "redraft train model --objective ar --corpus CORPUS --tokeni…"):
        "the long training run: hours, on a corpus built by `redraft train corpus`",
    ("docs/remote-and-cluster.md", "redraft serve --http 7355 --host 0.0.0.0 --token TEAM_TOKEN"):
        "two long-running servers on two machines; the remote path is tested in tests/server/remote",
    ("docs/remote-and-cluster.md", "pip install -e '.[cluster]'"):
        "installs Ray and starts a Ray Serve cluster; tested in tests/server/cluster",
}
TEXT_FIELDS = ("response", "text", "content")  # the completion's text in each API family's answer


def doc_blocks() -> list[Block]:
    return shell_blocks(ROOT, [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


BLOCKS = doc_blocks()


def test_every_shell_block_is_run_or_listed():
    assert len(BLOCKS) >= len(RUN) + len(SKIPPED)
    keys = [(b.path, b.label) for b in BLOCKS]
    assert len(set(keys)) == len(keys), "two blocks of one page start alike: the lists cannot tell them apart"
    unlisted = [f"{b.path}:{b.line}: {b.label!r}" for b in BLOCKS if (b.path, b.label) not in RUN | SKIPPED]
    assert not unlisted, "blocks neither run nor skipped with a reason:\n" + "\n".join(unlisted)
    assert not set(RUN) & set(SKIPPED)
    gone = (set(RUN) | set(SKIPPED)) - set(keys)
    assert not gone, f"listed blocks no page has any more: {sorted(gone)}"
    for b in BLOCKS:
        if (b.path, b.label) in RUN:
            assert re.search(r"(^|[\s&|;(])(redraft|curl)\s", b.text), f"{b.label!r} runs neither redraft nor curl"


def test_commands_and_their_promised_answers_are_read_as_a_shell_reads_them():
    block = Block("x.md", 1, "sh", (
        "redraft serve --http 7355 &   # in one terminal\n"
        "curl -s localhost:7355/v1 -d '{\"prompt\": \"a # b\\n\",\n"
        "  \"x\": 1}'        # \"text\": \"a b\"\n"
        "echo one \\\n  two\n"
        "# prints one two\n"
        "curl -s localhost:7355/e\n"
        "   # last chunk: \"content\": null\n"))
    got = commands(block)
    assert [c.code.splitlines()[0] for c in got] == [
        "redraft serve --http 7355 &", "curl -s localhost:7355/v1 -d '{\"prompt\": \"a # b\\n\",",
        "echo one \\", "curl -s localhost:7355/e"]
    assert [c.expect for c in got] == [NOTHING, ("field", "text", "a b"), ("prints", "one two"),
                                       ("field", "content", None)]
    console = commands(Block("x.md", 1, "console", "$ redraft --version   # its version\nredraft 0.1.0\n$ true\n"))
    assert console == [Command("redraft --version", ("prints", "redraft 0.1.0")), Command("true", NOTHING)]
    assert split_comment("a '#' b # c") == ("a '#' b", "c") and expectation(["online"]) is NOTHING


# -- running them ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory) -> dict:
    """PATH with a `redraft` that is this checkout's entry point under this Python, so the
    documented command runs whatever else the machine has installed."""
    bin_dir = tmp_path_factory.mktemp("bin")
    shim = bin_dir / "redraft"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c '
                    '"import sys; from redraft.server.cli import main; sys.exit(main())" "$@"\n')
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def server(shell_env):
    """`redraft serve --http PORT`, as the docs start it, with the shipped default model."""
    if shutil.which("curl", path=shell_env["PATH"]) is None:
        pytest.skip("curl is not installed: the examples call it")
    port = str(_free_port())
    proc = subprocess.Popen(["redraft", "serve", "--http", port], env=shell_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        said = []
        while not said or f"answering at http://127.0.0.1:{port}" not in said[-1]:  # once the model is loaded
            said.append(proc.stderr.readline())
            assert said[-1], "the server stopped before it answered:\n" + "".join(said)
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # a full pipe would stall its log
        yield port
    finally:
        proc.kill()
        proc.wait(timeout=30)


SERVE_LINE = re.compile(rf"^redraft serve --http {DOC_PORT}( &)?$")
PIP_FIRST = re.compile(r"^(pip install [^&|;]*&&\s*)+")


def rewritten(c: Command, port: str, tmp: Path) -> str | None:
    """The command as the test runs it (see REWRITES above); None for the documented server."""
    if SERVE_LINE.match(c.code.strip()):
        return None
    code = PIP_FIRST.sub("", c.code.strip())
    return re.sub(rf"\b{DOC_PORT}\b", port, code).replace("/tmp/", f"{tmp}/")


def answer(stdout: str) -> object:
    """A JSON answer, the last event of a server-sent stream, or the plain text."""
    text = stdout.strip()
    if text.startswith("data:"):
        events = [ln.removeprefix("data:").strip() for ln in text.splitlines() if ln.startswith("data:")]
        assert events[-1] == "[DONE]", text[-300:]
        return json.loads(events[-2])
    if text.startswith("{"):
        return json.loads(text)
    return text


def find(obj: object, key: str) -> object:
    """The first value named `key` in a JSON answer, depth first; NOTHING when none is."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        obj = list(obj.values())
    if isinstance(obj, list):
        for item in obj:
            got = find(item, key)
            if got is not NOTHING:
                return got
    return NOTHING


def check(c: Command, stdout: str) -> None:
    got = answer(stdout)
    assert got, f"no answer from {c.code[:80]!r}"
    if c.expect is not NOTHING and c.expect[0] == "prints":
        assert stdout.strip() == c.expect[1], (c.code[:80], stdout[-300:])
    elif c.expect is not NOTHING:
        _, key, value = c.expect
        assert find(got, key) == value, (c.code[:80], got)
    elif isinstance(got, dict):
        texts = [t for t in (find(got, k) for k in TEXT_FIELDS) if t is not NOTHING]
        if texts:
            assert isinstance(texts[0], str) and texts[0].strip(), (c.code[:80], got)
        else:  # a listing: the models, a model's details
            assert any(v for v in got.values() if isinstance(v, (list, dict))), (c.code[:80], got)


@pytest.mark.parametrize("block", [b for b in BLOCKS if (b.path, b.label) in RUN],
                         ids=lambda b: f"{b.path}:{b.line}")
def test_documented_commands_answer_as_documented(block, server, shell_env, tmp_path):
    ran = 0
    for c in commands(block):
        code = rewritten(c, server, tmp_path)
        if code is None:
            continue
        out = subprocess.run(["bash", "-c", code], env=shell_env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=180)
        assert out.returncode == 0, (code[:200], out.stderr[-2000:])
        check(c, out.stdout)
        ran += 1
    assert ran, f"{block.label!r}: nothing ran"
