"""A cloned repository's links and special files, against the real server: the client names a
workspace folder holding a file link out of it, a folder link out, a link to a link out, links
to secret files inside (`.env`, a home folder's `.kube/config`) under innocent names, a FIFO,
and a file swapped for a FIFO after the listing. No text from any of them is ever offered,
while the same kind of line from an ordinary file of the workspace is (so the completions
asked for are ones a leak would show), and every request is answered promptly.

Answers come from drafts alone (the tiny model is loaded, but a workspace file only ever feeds
drafts): deterministic, and exactly what an indexed file could leak."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import LanguageClient

from lsp_helpers import CAPABILITIES, OPTIONS, SERVER, complete, open_doc, stats

pytestmark = pytest.mark.asyncio(loop_scope="module")

LEAKS = {  # the line typed -> the text that must never be offered after it
    'OUTSIDE_TOKEN = "': "outside-marker-5d1e",  # pkg/users.py -> ../../outside/leak.py
    'VENDOR_TOKEN = "': "vendor-marker-6e2f",  # vendored -> ../outside/lib (a folder link)
    'CHAIN_TOKEN = "': "chain-marker-7f3a",  # pkg/chain.py -> hop.py -> ../../outside/chain.py
    'API_TOKEN = "': "env-marker-8a4b",  # pkg/notes.py -> ../.env
    'KUBE_TOKEN = "': "kube-marker-9b5c",  # pkg/kube.py -> ../.kube/config
    'CRED_TOKEN = "': "cred-marker-0c6d",  # pkg/cred_link.py -> ../config/credentials.py
}
CONTROL = {'CONTROL_TOKEN = "': "control-marker-1d7e", 'AFTER_TOKEN = "': "after-marker-2e8f"}
PROMPT = 5.0  # seconds: a request answered later than this counts as blocked


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("links")
    root, out = base / "project", base / "outside"
    for folder in (root / "pkg", root / "config", root / ".kube", out / "lib"):
        folder.mkdir(parents=True)
    for path, (line, marker) in zip(
            [out / "leak.py", out / "lib" / "vendor.py", out / "chain.py", root / ".env", root / ".kube" / "config",
             root / "config" / "credentials.py", root / "pkg" / "control.py", root / "pkg" / "zz_after.py"],
            [*LEAKS.items(), *CONTROL.items()]):
        path.write_text(f'{line}{marker}"\n')
    (root / "pkg" / "late.py").write_text("late = 1\n")  # a FIFO once listed (the test below)
    (root / "pkg" / "users.py").symlink_to(out / "leak.py")
    (root / "vendored").symlink_to(out / "lib")
    (root / "pkg" / "hop.py").symlink_to(out / "chain.py")
    (root / "pkg" / "chain.py").symlink_to(root / "pkg" / "hop.py")
    (root / "pkg" / "notes.py").symlink_to(root / ".env")
    (root / "pkg" / "kube.py").symlink_to(root / ".kube" / "config")
    (root / "pkg" / "cred_link.py").symlink_to(root / "config" / "credentials.py")
    os.mkfifo(root / "pkg" / "pipe.py")
    return root


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, root: Path, tiny_model):
    await lsp_client.initialize_session(T.InitializeParams(
        capabilities=CAPABILITIES, root_uri=root.as_uri(),
        workspace_folders=[T.WorkspaceFolder(uri=root.as_uri(), name="project")],
        initialization_options={"model": str(tiny_model), **OPTIONS, "drafts": "only"}))
    yield
    await lsp_client.shutdown_session()


async def offered(client: LanguageClient, uri: str, line: str, version: int) -> tuple[list[str], float]:
    """The completions offered at the end of `line` typed into `uri`, and how long they took."""
    open_doc(client, uri, f"import os\n\n{line}", version=version)
    start = time.monotonic()
    items = await complete(client, uri, 2, len(line))
    return [i.insert_text for i in items], time.monotonic() - start


async def workspace(client: LanguageClient, done) -> dict:
    ws = {}
    for _ in range(200):  # listing and indexing run in the background
        ws = (await stats(client))["workspace"] or {}
        if ws and done(ws):
            break
        await asyncio.sleep(0.05)
    return ws


async def test_links_out_and_links_to_secrets_never_reach_a_completion(client: LanguageClient, root: Path):
    ws = await workspace(client, lambda ws: ws["ready"])
    # listed: control.py, late.py, zz_after.py; refused: users.py, vendored, hop.py, chain.py,
    # notes.py, kube.py, cred_link.py (credentials.py: a secret), pipe.py
    assert ws["files"] == 3 and ws["refused"] == 8, ws
    (root / "pkg" / "late.py").unlink()
    os.mkfifo(root / "pkg" / "late.py")  # listed as a file: opening it to read would block the indexer
    main, version = (root / "pkg" / "main.py").as_uri(), 0
    for line, marker in CONTROL.items():  # the ordinary files are offered, the one after the FIFO too
        got = []
        for _ in range(100):
            version += 1
            got, took = await offered(client, main, line, version)
            assert took < PROMPT, (line, took)
            if any(marker in t for t in got):
                break
            await asyncio.sleep(0.05)
        assert any(marker in t for t in got), (line, got)
    for line, marker in LEAKS.items():
        version += 1
        got, took = await offered(client, main, line, version)
        assert took < PROMPT, (line, took)
        assert not any(marker in t for t in got), (line, got)
    ws = (await stats(client))["workspace"]
    assert ws["refused"] == 9 and ws["files"] == 2 and ws["indexed"] == 2, ws  # late.py refused when read


async def test_the_same_lines_in_an_ordinary_file_are_offered(client: LanguageClient, root: Path):
    """The positive control: an open document holding the markers feeds drafts, so the
    completions asked for above are ones that would show a leak."""
    other = (root / "pkg" / "plain.py").as_uri()
    open_doc(client, other, "".join(f"{line}{marker}\"\n" for line, marker in LEAKS.items()))
    main = (root / "pkg" / "main.py").as_uri()
    for n, (line, marker) in enumerate(LEAKS.items()):
        got, took = await offered(client, main, line, 1000 + n)
        assert took < PROMPT and any(marker in t for t in got), (line, got)
