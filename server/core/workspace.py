"""Drafts from the workspace's files that are not open: the project's other code as copies.

Code repeats itself across a project's files too (the same calls, imports, argument lists and
idioms in sibling modules), so when the client names a workspace root each request also
searches the files nearest the cursor's document (its own folder first, then the most shared
leading folders), NEAREST of them at most, whatever the project's size. On held-out packages
with the package's other files as the workspace: next line 0.07 -> 0.10 exact, 0.18 -> 0.24
correct prefix; rest of line through the language server 0.317 -> 0.334 correct prefix, the
same exact match (docs/evaluation.md, "Drafts from the workspace").

A background thread lists the source files under the roots once (known code extensions only;
hidden folders, virtual environments and the usual build and dependency folders skipped; files
over MAX_FILE_BYTES and the files the settings exclude (`skip`, exclude.py) left out, never read;
MAX_FILES paths and MAX_FOLDERS folders read at most, nearest
the roots first), then ranks the listed files for a document and indexes its nearest on
demand, when it is opened (`prepare`) or first searched: the event loop only reads a ranking
and indexes already made.
Indexes cost memory (~35 bytes per character of code), so they are kept least recently used
first out up to MAX_INDEXED_BYTES of text. A request only reads what is indexed already: it
never waits for a file. An open document is searched through its live index instead; one that
is closed is read again from disk (`reload`). Files changed on disk otherwise keep their index
until it is dropped.

A repository's links are not trusted: a folder link is never followed, and a file link only to
a file the walk would list itself (inside a root, through no hidden or skipped folder, a source
file name, neither the link's path nor its target's excluded); FIFOs, sockets and devices are
never opened. Every read goes through safe_read.py, which checks all this again when the file
is read; `refused` counts the links and special files left out. Lines holding a credential of a
known shape (secret_shapes.py) are blanked before a file is indexed: a token pasted into
ordinary code is never copied into a draft.

It knows nothing of LSP: roots are folders, documents are paths or file: URIs.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections import OrderedDict, deque
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlparse

from . import safe_read, secret_shapes
from .document import split_lines
from .drafts import DraftIndex
from .languages import canonical

log = logging.getLogger(__name__)

MAX_FILES = 5000  # paths listed
MAX_FOLDERS = 5000  # folders read while listing (a root may be a home folder)
MAX_FILE_BYTES = 256 << 10
MAX_INDEXED_BYTES = 2 << 20  # text kept indexed (~70 MB of index), least recently used out
NEAREST = 16  # files searched per request
RANKED = 256  # nearest files kept per document (open documents among them are skipped)
SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "venv", "env", "build", "dist", "target",
                       "out", "vendor", "third_party"})


def uri_path(uri: str) -> Path | None:
    """The local path of a file: URI (None for other schemes)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


class Workspace:
    """The source files under some root folders, indexed for drafts on demand."""

    def __init__(self, roots: list[Path], *, max_files: int = MAX_FILES, max_file_bytes: int = MAX_FILE_BYTES,
                 max_indexed_bytes: int = MAX_INDEXED_BYTES, background: bool = True,
                 skip: Callable[[Path], bool] | None = None) -> None:
        self.roots = [r.resolve() for r in roots if r.is_dir()]
        self.skip = skip  # files never read (the exclude settings: exclude.py), asked again before each read
        self.max_files, self.max_file_bytes, self.max_indexed_bytes = max_files, max_file_bytes, max_indexed_bytes
        self.background = background
        self._files: list[Path] = []
        self._indexes: OrderedDict[Path, DraftIndex] = OrderedDict()  # least recently used first
        self._sizes: dict[Path, int] = {}  # characters of each indexed file
        self._ranked: dict[Path, tuple[int, list[Path]]] = {}  # document -> (files listed then, nearest first)
        self._to_rank: deque[Path] = deque()  # documents whose ranking the background thread makes
        self._wanted: deque[Path] = deque()  # files it indexes
        self._dropped: set[Path] = set()  # files refused or skipped when read: not read again
        self._cond = threading.Condition()
        self.indexed_bytes = self.skipped = self.evicted = self.refused = 0
        self.listed = threading.Event()
        self._closed = False
        if background:
            threading.Thread(target=self._work, name="redraft-workspace", daemon=True).start()
        else:
            self._list()

    @classmethod
    def of_texts(cls, texts: dict[Path, str]) -> "Workspace":
        """A workspace of these files' texts, all indexed (no disk, no thread): the evaluation's."""
        ws = cls([], background=False)
        for path, text in texts.items():
            ws._files.append(path)
            ws._store(path, DraftIndex(split_lines(text)), len(text))
        return ws

    # -- reading ---------------------------------------------------------------------------

    def nearest(self, document: str | Path, exclude: set[Path] = frozenset(),
                limit: int = NEAREST) -> list[tuple[str, DraftIndex]]:
        """(uri, index) of the indexed files among the `limit` nearest `document` (a path or a
        file: URI), nearest first; the others are queued for indexing. Never the document
        itself nor `exclude` (open documents, searched through their own index). Ranking the
        listed files for a new document is left to the background thread (thousands of paths:
        tens of milliseconds), so that document's first request gets nothing from here."""
        path = document if isinstance(document, Path) else uri_path(document)
        if path is None:
            return []
        if not self.background:
            self._rank(path)
        out = self._read(path, exclude, limit)
        if not self.background and self._wanted:
            self._index_wanted()
            self._rank(path)  # files that could not be read were dropped from the listing
            out = self._read(path, exclude, limit)
        return out

    def prepare(self, document: str | Path) -> None:
        """Rank and index the files nearest a document that was just opened, in the background."""
        self.nearest(document)

    def stats(self) -> dict:
        with self._cond:
            return {"roots": [str(r) for r in self.roots], "files": len(self._files), "indexed": len(self._indexes),
                    "indexed_bytes": self.indexed_bytes, "skipped": self.skipped, "evicted": self.evicted,
                    "refused": self.refused, "ready": self.listed.is_set()}

    def _read(self, path: Path, exclude: set[Path], limit: int) -> list[tuple[str, DraftIndex]]:
        """The indexed files among the `limit` nearest `path` by its ranking; queues the ranking
        when there is none for the current listing, and the files not indexed yet."""
        out = []
        with self._cond:
            listed, ranked = self._ranked.get(path, (-1, []))
            if listed != len(self._files):
                if path not in self._to_rank:
                    self._to_rank.append(path)
                    self._cond.notify()
                return []
            for p in [p for p in ranked if p not in exclude and not self._skipped(p)][:limit]:
                index = self._indexes.get(p)
                if index is not None:
                    self._indexes.move_to_end(p)
                    out.append((p.as_uri(), index))
                elif p not in self._wanted and p not in self._dropped:
                    self._wanted.append(p)
                    self._cond.notify()
        return out

    def _rank(self, path: Path) -> None:
        """Rank the listed files for a document (its RANKED nearest kept)."""
        with self._cond:
            files = list(self._files)
        ranked = sorted((p for p in files if p != path), key=lambda p: _distance(p, path))[:RANKED]
        with self._cond:
            if len(self._ranked) >= 64:
                self._ranked.clear()
            self._ranked[path] = (len(files), ranked)

    # -- indexing --------------------------------------------------------------------------

    def reload(self, uri: str) -> None:
        """Read a file of the workspace again when next wanted (a document was closed: its text
        on disk may be newer than the index)."""
        path = uri_path(uri)
        if path is None:
            return
        with self._cond:
            if path in self._indexes:
                self._drop(path)
                self._wanted.append(path)
                self._cond.notify()

    def close(self) -> None:
        """Stop the background thread (its client has gone) and let the indexes go."""
        with self._cond:
            self._closed = True
            self._wanted.clear()
            self._to_rank.clear()
            self._indexes.clear()
            self._cond.notify_all()

    def _work(self) -> None:
        try:
            self._list()
        except Exception:  # a workspace that cannot be read gives no drafts; the server goes on
            log.exception("listing the workspace failed")
            self.listed.set()
        while True:
            with self._cond:
                while not (self._wanted or self._to_rank or self._closed):
                    self._cond.wait()
                if self._closed:
                    return
                doc = self._to_rank.popleft() if self._to_rank else None
            if doc is not None:
                self._rank(doc)
                self._read(doc, frozenset(), NEAREST)  # queues its nearest files
            self._index_wanted()

    def _list(self) -> None:
        files = []
        for path in self._walk():
            files.append(path)
            if len(files) >= self.max_files:
                break
        with self._cond:
            self._files = files
        self.listed.set()
        log.info("workspace: %d source files under %s", len(files), ", ".join(map(str, self.roots)))

    def _walk(self):
        """Source files under the roots within the size bound, breadth first, names in order;
        a file link only to a file the walk would list itself, each real file once."""
        queue, seen, folders = deque(self.roots), set(), 0
        while queue and folders < MAX_FOLDERS:
            folder = queue.popleft()
            folders += 1
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                if e.name.startswith("."):
                    continue
                try:
                    if e.is_dir(follow_symlinks=False):
                        if e.name not in SKIP_DIRS and not (Path(e.path) / "pyvenv.cfg").exists():
                            queue.append(Path(e.path))
                        continue
                    if e.is_symlink() and e.is_dir():  # a folder link is never followed
                        self.refused += 1
                        continue
                    path = Path(e.path)
                    if canonical(None, e.name) is None or self._skipped(path):
                        continue
                    real = path
                    if e.is_symlink():
                        real = Path(os.path.realpath(path))
                        if not self._listable(real):  # out of the workspace, hidden, excluded, a folder
                            self.refused += 1
                            continue
                    st = e.stat() if real is path else os.stat(real)  # no open: a FIFO would block
                    if not stat.S_ISREG(st.st_mode):
                        self.refused += 1
                        continue
                    if st.st_size > self.max_file_bytes:
                        self.skipped += 1
                        continue
                    if real not in seen:
                        seen.add(real)
                        yield path
                except OSError:
                    continue

    def _listable(self, real: Path) -> bool:
        """Whether the walk itself would list a resolved path: under a root, through no hidden
        or skipped folder, a source file's name, not excluded."""
        for root in self.roots:
            if real != root and real.is_relative_to(root):
                parts = real.relative_to(root).parts
                if (not any(p.startswith(".") for p in parts) and not SKIP_DIRS.intersection(parts[:-1])
                        and canonical(None, parts[-1]) is not None and not self._skipped(real)):
                    return True
        return False

    def _index_wanted(self) -> None:
        while True:
            with self._cond:
                if not self._wanted:
                    return
                path = self._wanted.popleft()
                # Queued again while it was being read (a ranking made before it was dropped): one
                # refusal counts once.
                if path in self._indexes or path in self._dropped:
                    continue
            try:  # checked again: the settings or the files may have changed since the listing
                text = safe_read.read_text(path, self.roots, max_bytes=self.max_file_bytes,
                                           excluded=lambda p: not self._listable(Path(p)))
            except safe_read.Refused as e:
                if e.reason == "excluded" and self._skipped(path):  # by the settings, which may change back
                    continue
                log.info("workspace: %s", e)
                with self._cond:
                    if e.reason in ("outside", "special", "changed"):
                        self.refused += 1
                    else:
                        self.skipped += 1
                    self._files = [p for p in self._files if p != path]  # not asked for again
                    self._dropped.add(path)
                continue
            text = secret_shapes.redact(text)  # a pasted token is never copied into a draft
            index = DraftIndex(split_lines(text))  # filing: outside the lock
            with self._cond:
                self._store(path, index, len(text))

    def _skipped(self, path: Path) -> bool:
        return self.skip is not None and self.skip(path)

    def _store(self, path: Path, index: DraftIndex, size: int) -> None:
        """(Under the lock.) Keep an index, dropping the least recently used past the bound."""
        if path in self._indexes:
            self._drop(path)
        self._indexes[path] = index
        self._sizes[path] = size
        self.indexed_bytes += size
        while self.indexed_bytes > self.max_indexed_bytes and len(self._indexes) > 1:
            self._drop(next(iter(self._indexes)))
            self.evicted += 1

    def _drop(self, path: Path) -> None:
        del self._indexes[path]
        self.indexed_bytes -= self._sizes.pop(path)


def _distance(p: Path, document: Path) -> tuple:
    """Sort key of a file seen from a document: the most shared leading folders first (its own
    folder's files before its parent's), then the same extension, then the path."""
    shared = 0
    for x, y in zip(p.parent.parts, document.parent.parts):
        if x != y:
            break
        shared += 1
    return (-shared, p.suffix != document.suffix, str(p))
