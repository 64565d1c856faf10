"""Drafts from the workspace's files that are not open, against the real server: the client
names a root folder, the server indexes its source files in the background, and a new file's
completion continues code found in a sibling file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import LanguageClient

from lsp_helpers import CAPABILITIES, SERVER, complete, open_doc, stats

pytestmark = pytest.mark.asyncio(loop_scope="module")

HELPERS = '''import hashlib


def digest(payload):
    return compute_checksum(payload, algorithm="sha256", strict=True)
'''


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "pkg").mkdir()
    (root / "pkg" / "helpers.py").write_text(HELPERS)
    (root / "node_modules").mkdir()  # never indexed: a dependency folder
    (root / "node_modules" / "dep.py").write_text("x = compute_checksum(payload, algorithm=\"md5\")\n")
    return root


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, root: Path):
    await lsp_client.initialize_session(T.InitializeParams(
        capabilities=CAPABILITIES, root_uri=root.as_uri(), initialization_options={"drafts": "only"}))
    yield
    await lsp_client.shutdown_session()


async def until(client: LanguageClient, done) -> dict:
    for _ in range(200):  # listing and indexing run in the background
        ws = (await stats(client))["workspace"]
        if ws is not None and done(ws):
            break
        await asyncio.sleep(0.05)
    return ws


async def test_a_new_file_continues_code_from_a_file_that_is_not_open(client: LanguageClient, root: Path):
    ws = await until(client, lambda ws: ws["ready"])
    assert ws == {**ws, "roots": [str(root.resolve())], "files": 1, "indexed": 0}  # node_modules skipped
    uri = (root / "pkg" / "main.py").as_uri()
    text = "def run(payload):\n    return compute_checksum(payload, "
    open_doc(client, uri, text)
    assert (await until(client, lambda ws: ws["indexed"]))["indexed"] == 1  # opening it indexed its neighbour
    items = await complete(client, uri, 1, len(text.splitlines()[1]))
    assert [i.insert_text for i in items][:1] == ['algorithm="sha256", strict=True)']
    assert (await stats(client))["sources"].get("workspace", 0) >= 1


async def test_folders_added_and_removed_later_are_indexed_and_forgotten(client: LanguageClient, root: Path,
                                                                          tmp_path_factory):
    other = tmp_path_factory.mktemp("second")
    (other / "tool.py").write_text("def tool():\n    return 1\n")
    (other / "more.py").write_text("def more():\n    return 2\n")
    folder = T.WorkspaceFolder(uri=other.as_uri(), name="second")
    client.workspace_did_change_workspace_folders(T.DidChangeWorkspaceFoldersParams(
        event=T.WorkspaceFoldersChangeEvent(added=[folder], removed=[])))
    ws = await until(client, lambda ws: ws["ready"] and len(ws["roots"]) == 2)
    assert ws["roots"] == [str(root.resolve()), str(other.resolve())] and ws["files"] == 3
    client.workspace_did_change_workspace_folders(T.DidChangeWorkspaceFoldersParams(
        event=T.WorkspaceFoldersChangeEvent(added=[], removed=[T.WorkspaceFolder(uri=root.as_uri(), name="p")])))
    ws = await until(client, lambda ws: ws["ready"] and len(ws["roots"]) == 1)
    assert ws["roots"] == [str(other.resolve())] and ws["files"] == 2
    assert (await stats(client))["errors"] == 0


async def test_hostile_folder_lists_are_bounded_and_never_leave_files(client: LanguageClient, tmp_path_factory):
    """Thousands of folders, other schemes, files and missing paths: at most MAX_ROOTS real
    folders are taken, the rest dropped, and the server keeps answering."""
    many = tmp_path_factory.mktemp("many")
    dirs = []
    for i in range(40):
        (many / f"d{i}").mkdir()
        dirs.append(T.WorkspaceFolder(uri=(many / f"d{i}").as_uri(), name=str(i)))
    (many / "file.py").write_text("x = 1\n")
    junk = [T.WorkspaceFolder(uri=u, name="junk") for u in
            ("http://evil.example/", "file:///nonexistent/here", (many / "file.py").as_uri(), "")] * 500
    client.workspace_did_change_workspace_folders(T.DidChangeWorkspaceFoldersParams(
        event=T.WorkspaceFoldersChangeEvent(added=junk + dirs, removed=[])))
    ws = await until(client, lambda ws: ws["ready"] and ws["roots"] != [])
    s = await stats(client)
    assert s["errors"] == 0
    assert len(ws["roots"]) <= 32 and all(r.startswith(str(many.resolve())) or "second" in r or "project" in r
                                          for r in ws["roots"])
    assert not any(r.endswith("file.py") or "nonexistent" in r for r in ws["roots"])
