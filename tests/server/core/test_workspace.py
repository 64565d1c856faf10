"""The workspace's files as draft sources: what is indexed within the bounds, which files a
document searches first, and a closed file read again."""

import time
from pathlib import Path

from redraft.server.core.draftsearch import DraftSource, lookup
from redraft.server.core.workspace import Workspace


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_only_source_files_within_the_bounds_are_indexed(tmp_path):
    write(tmp_path, "app/main.py", "x = 1\n")
    write(tmp_path, "app/util.ts", "const y = 2;\n")
    write(tmp_path, "README.md", "# not code\n")
    write(tmp_path, ".git/hooks/pre.py", "hidden = 1\n")
    write(tmp_path, "node_modules/dep/index.js", "dep = 1\n")
    write(tmp_path, "env/lib/site.py", "venv = 1\n")
    write(tmp_path, "myenv/pyvenv.cfg", "home = /usr\n")
    write(tmp_path, "myenv/lib/mod.py", "venv = 2\n")
    write(tmp_path, "app/big.py", "z = 0\n" * 100)
    ws = Workspace([tmp_path], max_file_bytes=400, background=False)
    indexed = {p.relative_to(tmp_path.resolve()).as_posix() for p, _ in
               ((Path(u[len("file://"):]), ix) for u, ix in ws.nearest(tmp_path / "other.py", limit=99))}
    assert indexed == {"app/main.py", "app/util.ts"}
    assert ws.stats()["files"] == 2 and ws.stats()["skipped"] == 1 and ws.stats()["ready"]


def test_the_listing_and_the_indexed_text_are_bounded(tmp_path):
    for i in range(10):
        write(tmp_path, f"m{i}.py", f"value_{i} = {i}\n" * 10)  # 120 characters each
    assert Workspace([tmp_path], max_files=3, background=False).stats()["files"] == 3
    ws = Workspace([tmp_path], max_indexed_bytes=300, background=False)
    assert ws.stats()["indexed"] == 0  # nothing is indexed before a document asks
    assert len(ws.nearest(tmp_path / "new.py", limit=99)) == 2  # the least recently used dropped
    st = ws.stats()
    assert st["files"] == 10 and st["indexed"] == 2 and st["indexed_bytes"] == 240 and st["evicted"] == 8


def test_the_nearest_files_come_first_and_open_documents_are_left_out(tmp_path):
    for rel in ("a/b/one.py", "a/b/two.py", "a/b/three.js", "a/other.py", "z/far.py"):
        write(tmp_path, rel, "x = 1\n")
    root = tmp_path.resolve()
    ws = Workspace([tmp_path], background=False)
    doc = root / "a" / "b" / "new.py"
    got = [u.rsplit("/", 1)[1] for u, _ in ws.nearest(doc.as_uri())]
    assert got == ["one.py", "two.py", "three.js", "other.py", "far.py"]  # own folder, same extension first
    got = [u.rsplit("/", 1)[1] for u, _ in ws.nearest(root / "a" / "b" / "one.py", exclude={root / "a/b/two.py"},
                                                        limit=2)]
    assert got == ["three.js", "other.py"]  # neither itself nor an open document
    assert ws.nearest("untitled:Untitled-1") == []


def test_a_closed_file_is_read_again(tmp_path):
    path = write(tmp_path, "lib.py", "def f():\n    return old_value(1)\n")
    ws = Workspace([tmp_path], background=False)

    def continuation() -> str:
        found = lookup("    return ", [DraftSource(ix, "workspace", u) for u, ix in ws.nearest(tmp_path / "x.py")])
        return found[0].text if found else ""
    assert continuation() == "old_value(1)"
    path.write_text("def f():\n    return new_value(2)\n")
    assert continuation() == "old_value(1)"  # indexed once: a change on disk alone is not seen
    ws.reload(path.resolve().as_uri())
    assert continuation() == "new_value(2)"
    assert ws.stats()["files"] == ws.stats()["indexed"] == 1


def test_files_are_indexed_in_the_background_when_a_document_asks(tmp_path):
    write(tmp_path, "pkg/a.py", "def f():\n    return helper(1)\n")
    ws = Workspace([tmp_path])
    assert ws.listed.wait(5)
    doc = tmp_path.resolve() / "pkg" / "b.py"
    assert ws.nearest(doc) == []  # ranked (and indexed) on the background thread, never in the caller's
    deadline = time.monotonic() + 5
    while not ws.nearest(doc) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [u.rsplit("/", 1)[1] for u, _ in ws.nearest(doc)] == ["a.py"]
