"""Reading a file of the workspace from disk, and nothing else.

A repository's files are not trusted, links included: `pkg/users.py -> /etc/passwd`, a link
to `~/.kube/config`, a folder link out of the tree, a link to `.env` under an innocent name, a
FIFO that would block the reader forever. `read_text` reads a file only when

  * its real path (every link resolved) lies inside the real path of one of the roots;
  * neither the path asked for nor the real path is excluded (`excluded`: the exclude
    settings, so `notes.py -> .env` stays unread);
  * it is a regular file (a FIFO, socket or device is never opened) of at most `max_bytes`,
    checked before reading and again while reading (a file may grow);
  * the file actually opened is the one checked: opened without following a last link, its
    identity compared with the checked one and, where /proc is mounted, its path as the
    kernel sees it checked again (a folder swapped for a link meanwhile is caught).

Anything else raises `Refused`, with the reason. Pure file-system code: knows nothing of
LSP, HTTP or the engine.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable, Iterable

REASONS = ("outside", "excluded", "special", "too_large", "changed", "unreadable", "not_text")
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class Refused(Exception):
    """A file that was not read, and why (`reason`, one of REASONS)."""

    def __init__(self, path: str | Path, reason: str, detail: str = "") -> None:
        super().__init__(f"{path}: not read ({reason}{': ' + detail if detail else ''})")
        self.path, self.reason = str(path), reason


def real_roots(roots: Iterable[str | Path]) -> list[str]:
    """The real paths of some root folders."""
    return [os.path.realpath(r) for r in roots]


def inside(real: str, roots: list[str]) -> bool:
    """Whether a real path lies in (or is) one of these real root paths."""
    for root in roots:
        try:
            if os.path.commonpath([real, root]) == root:
                return True
        except ValueError:  # different drives, or a relative path among absolute ones
            continue
    return False


def resolve(path: str | Path, roots: list[str], excluded: Callable[[str], bool] | None = None) -> str:
    """The real path of a file that may be read: inside the roots, neither it nor the path
    asked for excluded. Raises Refused."""
    real = os.path.realpath(path)
    if not inside(real, roots):
        raise Refused(path, "outside", real)
    if excluded is not None and (excluded(str(path)) or excluded(real)):
        raise Refused(path, "excluded")
    return real


def read_text(path: str | Path, roots: Iterable[str | Path], *, max_bytes: int,
              excluded: Callable[[str], bool] | None = None) -> str:
    """The UTF-8 text of a regular file inside the roots (see the module's docstring).
    Raises Refused."""
    roots = real_roots(roots)
    real = resolve(path, roots, excluded)
    try:
        before = os.stat(real)
    except OSError as e:
        raise Refused(path, "unreadable", e.strerror or type(e).__name__) from None
    if not stat.S_ISREG(before.st_mode):  # checked before opening: opening a FIFO or a device acts
        raise Refused(path, "special")
    if before.st_size > max_bytes:
        raise Refused(path, "too_large", f"{before.st_size} bytes")
    try:
        fd = os.open(real, _FLAGS)
    except OSError as e:  # ELOOP: the last part became a link since it was resolved
        raise Refused(path, "unreadable", e.strerror or type(e).__name__) from None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise Refused(path, "changed")
        opened = _opened_path(fd)
        if opened is not None and opened != real:  # a folder on the way was swapped meanwhile
            raise Refused(path, "changed", opened)
        data = _read_at_most(fd, max_bytes + 1)
    except OSError as e:
        raise Refused(path, "unreadable", e.strerror or type(e).__name__) from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise Refused(path, "too_large", "grew while read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(path, "not_text") from None


def _opened_path(fd: int) -> str | None:
    """The path of an open file as the kernel sees it (None without /proc)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
