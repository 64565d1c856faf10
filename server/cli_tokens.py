"""Where `redraft serve` gets its secrets: a token option, a file, or the environment.

A token on the command line (`--token T`) is visible to every local user in `ps` and
/proc/PID/cmdline; a file readable only by its owner (`--token-file PATH`, mode 0600 or 0400)
or an environment variable (REDRAFT_TOKEN, REDRAFT_ENGINE_TOKEN: /proc/PID/environ is the
owner's alone) is not. A token file that others can read is refused: whoever can read it can
use the server. `--tcp` without any token gets a random one (`generate`).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from .cli_common import UserError

TOKEN_ENV = "REDRAFT_TOKEN"  # the token clients of this server present (HTTP API, LSP over TCP)
ENGINE_TOKEN_ENV = "REDRAFT_ENGINE_TOKEN"  # the token sent to --engine-url
MAX_TOKEN_FILE = 4096  # bytes: a token is tens of characters


def read_token_file(path: str, option: str) -> str:
    """The token in `path` (its text, surrounding whitespace dropped), checked: a regular
    file, readable by its owner only, not empty, UTF-8 text of one line."""
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError as e:
        raise UserError(f"{option} {path}: cannot read it ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{option} {path}: not a regular file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise UserError(f"{option} {path}: readable by others (mode {mode:04o}); "
                        f"run `chmod 600 {path}` (a token file must be the owner's alone)")
    if st.st_size > MAX_TOKEN_FILE:
        raise UserError(f"{option} {path}: {st.st_size} bytes, not a token (at most {MAX_TOKEN_FILE})")
    try:
        # Opened without blocking (a FIFO swapped in after the check) and read bounded.
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UserError(f"{option} {path}: not a regular file")
            token = os.read(fd, MAX_TOKEN_FILE).decode("utf-8").strip()
        finally:
            os.close(fd)
    except OSError as e:
        raise UserError(f"{option} {path}: cannot read it ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise UserError(f"{option} {path}: not UTF-8 text") from None
    if not token:
        raise UserError(f"{option} {path}: empty")
    if any(c.isspace() for c in token):
        raise UserError(f"{option} {path}: holds more than one word; a token is one line without spaces")
    return token


def client_token(given: str | None, path: str | None) -> tuple[str | None, bool]:
    """The token this server's clients must present: (token, whether the user chose it here,
    on the command line or in a file, as opposed to the environment)."""
    if given is not None and path is not None:
        raise UserError("--token and --token-file: give one (prefer --token-file or REDRAFT_TOKEN, "
                        "which `ps` does not show)")
    if given is not None:
        if not given.strip():
            raise UserError("--token: empty")
        return given, True
    if path is not None:
        return read_token_file(path, "--token-file"), True
    return _env(TOKEN_ENV), False


def engine_token(path: str | None, fallback: str | None) -> str | None:
    """The token sent to a remote engine: --engine-token-file, else REDRAFT_ENGINE_TOKEN, else
    `fallback` (the client token, which --engine-url has always sent)."""
    if path is not None:
        return read_token_file(path, "--engine-token-file")
    return _env(ENGINE_TOKEN_ENV) or fallback


def generate() -> str:
    """A random token for LSP over TCP (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None
