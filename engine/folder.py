"""The files of a checkpoint folder, read as the untrusted data they are.

A model folder comes from elsewhere (a download, a copy, a repository), so before the loader
reads a file of it, that file is checked here:

- it lies inside the folder once links are resolved (a Hugging Face cache snapshot,
  `<repo>/snapshots/<revision>`, may also link into its own `<repo>/blobs`, as the hub lays
  it out); an absolute name, `..` or a link out is refused;
- it is a regular file: a FIFO, device, socket or folder is refused from its `stat`, without
  being opened (opening a FIFO waits for a writer), and the descriptor that is then opened
  (non-blocking) must be that same file;
- it is no larger than the loader reads for its kind, checked before a byte is read;
- JSON is parsed from those bytes only (nesting past the parser's limit is refused).

Every refusal is an UnsafeFileError (or MissingFileError for an absent file) whose message is
one line naming the file. Knows nothing of models, configs or tensors.
"""

from __future__ import annotations

import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import CheckpointError, CorruptFileError, MissingFileError, UnsafeFileError

# Bytes the loader reads of each kind of file. Real ones are far smaller: config.json ~1-2 KB,
# tokenizer_config.json up to ~60 KB (Llama 3's chat template), an index ~30-100 KB,
# tokenizer.json 7-10 MB (Qwen2, LLaMA 3, LLaDA).
CONFIG_BYTES = 1 << 20
SIDE_BYTES = 4 << 20  # tokenizer_config.json, special_tokens_map.json
INDEX_BYTES = 8 << 20
TOKENIZER_BYTES = 32 << 20  # parsing one takes ~0.2 s per MB on a loaded 2-core machine

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"


class Folder:
    """A checkpoint folder and where its files may lead."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.real = Path(os.path.realpath(self.path))
        roots = [self.real]
        snapshots = self.real.parent  # the Hugging Face cache: <repo>/snapshots/<rev> -> <repo>/blobs
        blobs = snapshots.parent / "blobs"
        if snapshots.name == "snapshots" and blobs.is_dir() and not blobs.is_symlink():
            roots.append(blobs)
        self.roots = tuple(roots)

    def entry(self, name: str, listed_in: Path | None = None) -> Path:
        """The path of the file `name` names: a plain file name in this folder, never a path."""
        where = f"{listed_in}: " if listed_in is not None else f"{self.path}: "
        if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name \
                or "\0" in name:
            raise UnsafeFileError(f"{where}{name!r} is not a file name in the model folder "
                                  f"(absolute paths, '..' and subfolders are refused)")
        return self.path / name

    def exists(self, name: str) -> bool:
        """Whether anything (a file, a FIFO, a link, even a dangling one) goes by `name` here."""
        return os.path.lexists(self.path / name)

    def check(self, path: Path) -> os.stat_result:
        """`path`'s stat once it is known to be a regular file inside the folder."""
        real = Path(os.path.realpath(path))
        if not any(real == r or real.is_relative_to(r) for r in self.roots):
            raise UnsafeFileError(f"{path}: leads outside the model folder (to {real}); "
                                  f"a checkpoint's files must lie in its folder")
        try:
            st = os.stat(real)
        except FileNotFoundError:
            raise MissingFileError(f"{path}: missing" + (" (a link to nothing)" if os.path.islink(path) else ""))\
                from None
        except OSError as e:
            raise UnsafeFileError(f"{path}: cannot be read ({e.strerror or e})") from None
        if not stat.S_ISREG(st.st_mode):
            kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
            raise UnsafeFileError(f"{path}: is {kind}, not a regular file; refused without opening it")
        return st

    @contextmanager
    def open(self, path: Path) -> Iterator[tuple[int, int]]:
        """(descriptor, size) of the checked file, opened non-blocking; closed on exit. The
        descriptor must be the file that was checked (not one swapped in meanwhile)."""
        st = self.check(path)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(os.path.realpath(path), flags)
        except OSError as e:
            raise UnsafeFileError(f"{path}: cannot be opened ({e.strerror or e})") from None
        try:
            now = os.fstat(fd)
            if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise UnsafeFileError(f"{path}: changed while it was being opened; refused")
            yield fd, now.st_size
        finally:
            os.close(fd)

    def read(self, path: Path, cap: int) -> bytes:
        """The bytes of a checked file no larger than `cap`."""
        with self.open(path) as (fd, size):
            if size > cap:
                raise UnsafeFileError(f"{path}: {_mib(size)}, more than the {_mib(cap)} the loader reads "
                                      f"for this file")
            chunks, left = [], cap + 1  # a file that grows meanwhile still stops at the cap
            while left > 0:
                try:
                    chunk = os.read(fd, min(left, 1 << 20))
                except OSError as e:
                    raise UnsafeFileError(f"{path}: cannot be read ({e.strerror or e})") from None
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > cap:
            raise UnsafeFileError(f"{path}: grew past the {_mib(cap)} the loader reads for this file")
        return data

    def read_text(self, path: Path, cap: int, error: type[CheckpointError] = CorruptFileError) -> str:
        try:
            return self.read(path, cap).decode("utf-8")
        except UnicodeDecodeError as e:
            raise error(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None

    def read_json(self, path: Path, cap: int, error: type[CheckpointError] = CorruptFileError):
        """The JSON value of a checked file no larger than `cap`; `error` for text that is not JSON."""
        text = self.read_text(path, cap, error)
        try:
            return json.loads(text)
        except ValueError as e:
            raise error(f"{path}: not valid JSON ({e})") from None
        except RecursionError:
            raise error(f"{path}: not valid JSON (nested too deeply)") from None


def descriptor_path(fd: int, fallback: Path) -> str:
    """A name that opens exactly the file behind `fd`, for libraries that take a path
    (safetensors): /proc/self/fd/N on Linux, /dev/fd/N elsewhere, else the file's own path."""
    for base in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(base):
            return f"{base}/{fd}"
    return str(os.path.realpath(fallback))
