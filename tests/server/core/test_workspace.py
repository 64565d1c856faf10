"""The workspace's files as draft sources: what is indexed within the bounds, which files a
document searches first, and a closed file read again."""

import os
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


# -- links and special files: a repository controls them ------------------------------------

OUTSIDE = "outside-marker-7c1f"


def indexed_texts(ws: Workspace, doc: Path) -> dict[str, str]:
    """uri -> indexed text of what a document nearby would search."""
    return {u: ix.text for u, ix in ws.nearest(doc, limit=99)}


def test_links_reach_only_files_the_walk_would_list_itself(tmp_path):
    root, out, other = tmp_path / "ws", tmp_path / "out", tmp_path / "other"
    write(out, "secret.py", f'TOKEN = "{OUTSIDE}"\n')
    write(other, "shared.py", "shared_value = 3\n")
    write(root, "pkg/a.py", "a = 1\n")
    write(root, ".env", "API=envsecret-41\n")
    write(root, ".hidden/h.py", "hidden = 'hid-55'\n")
    write(root, "node_modules/dep.py", "dep = 'dep-66'\n")
    write(root, "private/p.py", "private = 'priv-77'\n")
    links = {"pkg/out.py": out / "secret.py",  # a file out of the workspace
             "pkg/outdir": out,  # a folder out
             "pkg/chain.py": root / "pkg" / "hop.py", "pkg/hop.py": out / "secret.py",  # a link to a link out
             "pkg/notes.py": root / ".env",  # a secret inside, under an innocent name
             "pkg/h.py": root / ".hidden" / "h.py", "pkg/dep.py": root / "node_modules" / "dep.py",
             "pkg/p.py": root / "private" / "p.py",  # the user's exclude glob, seen through a link
             "pkg/loop.py": root / "pkg" / "loop.py",
             "pkg/same.py": root / "pkg" / "a.py",  # inside: read once, as its first path listed
             "pkg/shared.py": other / "shared.py"}  # inside another root
    for rel, target in links.items():
        (root / rel).symlink_to(target)
    os.mkfifo(root / "pkg" / "pipe.py")
    ws = Workspace([root, other], background=False, skip=lambda p: "private/" in str(p))
    got = indexed_texts(ws, root.resolve() / "pkg" / "new.py")
    texts = "\n".join(got.values())
    assert texts, got
    for leaked in (OUTSIDE, "envsecret-41", "hid-55", "dep-66", "priv-77"):
        assert leaked not in texts, (leaked, got)
    # each real file once: same.py is a.py, pkg/shared.py (a link into the other root: allowed) is
    # other/shared.py
    assert sorted(u.rsplit("/", 2)[-2] + "/" + u.rsplit("/", 1)[1] for u in got) == ["other/shared.py", "pkg/a.py"]
    # out.py, outdir, chain.py, hop.py, notes.py, h.py, dep.py, p.py, pipe.py; loop.py fails to resolve
    assert ws.stats()["refused"] == 9 and ws.stats()["files"] == 2


def test_a_file_changed_after_listing_is_checked_again_when_read(tmp_path):
    root, out = tmp_path / "ws", tmp_path / "out"
    write(out, "secret.py", f'TOKEN = "{OUTSIDE}"\n')
    for name in ("link.py", "fifo.py", "grew.py", "kept.py"):
        write(root, name, "x = 1\n")
    ws = Workspace([root], max_file_bytes=100, background=False)
    assert ws.stats()["files"] == 4 and ws.stats()["indexed"] == 0  # listed, not read yet
    (root / "link.py").unlink()
    (root / "link.py").symlink_to(out / "secret.py")
    (root / "fifo.py").unlink()
    os.mkfifo(root / "fifo.py")  # opening it for reading would block the indexer forever
    (root / "grew.py").write_text("x = 1\n" * 100)
    got = indexed_texts(ws, root.resolve() / "new.py")
    assert [u.rsplit("/", 1)[1] for u in got] == ["kept.py"]
    assert OUTSIDE not in "".join(got.values())
    st = ws.stats()
    assert st["refused"] == 2 and st["skipped"] == 1 and st["files"] == 1  # the others not asked for again
    # Queued again while it was being read (the background indexer reads outside the lock, and a
    # ranking made before the refusal may ask for it): dropped files are not read or counted twice.
    ws._wanted.extend([root.resolve() / "fifo.py", root.resolve() / "grew.py"])
    ws._index_wanted()
    assert ws.stats() == st
    assert indexed_texts(ws, root.resolve() / "new.py") == got and ws.stats() == st


def test_safe_read_refuses_each_way_out(tmp_path):
    from redraft.server.core import safe_read
    root, out = tmp_path / "ws", tmp_path / "out"
    write(out, "secret.py", "s = 1\n")
    write(root, "ok.py", "ok = 1\n")
    write(root, "big.py", "b" * 200)
    write(root, ".env", "A=1\n")
    write(root, "bin.py", "").write_bytes(b"\xff\xfe\x00")
    (root / "out.py").symlink_to(out / "secret.py")
    (root / "notes.py").symlink_to(root / ".env")
    os.mkfifo(root / "fifo.py")

    def reason(name: str) -> str:
        try:
            safe_read.read_text(root / name, [root], max_bytes=100, excluded=lambda p: p.endswith(".env"))
        except safe_read.Refused as e:
            return e.reason
        return "read"
    assert safe_read.read_text(root / "ok.py", [root], max_bytes=100) == "ok = 1\n"
    assert {n: reason(n) for n in ("ok.py", "big.py", ".env", "notes.py", "out.py", "fifo.py", "bin.py",
                                   "missing.py")} == {
        "ok.py": "read", "big.py": "too_large", ".env": "excluded", "notes.py": "excluded", "out.py": "outside",
        "fifo.py": "special", "bin.py": "not_text", "missing.py": "unreadable"}


def test_lines_holding_a_token_are_never_indexed(tmp_path):
    aws, gh = "AKIA" + "Z7Q4XW2M9KDP3LRT", "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    write(tmp_path, "conf.py", f'AWS_KEY = "{aws}"\nGH = "{gh}"\nREGION = "eu-west-1"\n'
                               "KEY = '''-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0\n"
                               "-----END RSA PRIVATE KEY-----'''\nDONE = True\n")
    ws = Workspace([tmp_path], background=False)
    (text,) = indexed_texts(ws, tmp_path.resolve() / "new.py").values()
    assert text.split("\n") == ["", "", 'REGION = "eu-west-1"', "", "", "", "DONE = True", ""]
