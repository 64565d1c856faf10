"""Which settings from the editor are safe to take: those that change where code goes or what
is read, checked against the command line's config (the user's own, trusted level).

The editor's settings can come from a repository (`.vscode/settings.json`, a project-local
config), so they may not send code off this machine, load a model the user did not choose, or
read files the user kept out:

  engine_url       an engine on this machine only (127.0.0.0/8, ::1, localhost), or the very
                   URL the command line gave (`redraft serve --engine-url`)
  model            a shipped name, a pulled Hugging Face id, the command line's `--model`, or a
                   folder (after links) under a models folder: `--models-dir`, the shipped
                   models, the Hugging Face cache (`redraft pull`)
  exclude_secrets  only the command line turns the secret-file defaults off
  models_dirs      the command line only
  exclude          (settings.parse_client) the command line's globs always hold; the editor's add

It reads the file system (is a model name a folder here, where do its links lead) and nothing
else; it knows nothing of LSP or of the engine.
"""

from __future__ import annotations

import ipaddress
import os
import re
from importlib.util import find_spec
from pathlib import Path
from typing import Any

# An engine URL the editor may give: scheme, a plain host (no user info, no escapes), an
# optional port, an optional path. Anything else is refused rather than parsed two ways.
_URL = re.compile(r"https?://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::\d{1,5})?(?:/[^\s\\]*)?")
_HF_ID = re.compile(r"[\w.-]+/[\w.-]+")  # as checkpoint.resolve takes a pulled Hugging Face id
_NAME = re.compile(r"[\w.-]+")


def loopback_url(url: str) -> bool:
    """Whether an http(s) URL names a host on this machine: 127.0.0.0/8, ::1 or localhost."""
    m = _URL.fullmatch(url)
    if m is None:
        return False
    host = m.group("host").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def _is_folder_path(value: str) -> bool:
    """Whether the engine would take `value` as a folder rather than a name (checkpoint.resolve
    looks for a folder first, relative to the server's working folder)."""
    if not (_NAME.fullmatch(value) or _HF_ID.fullmatch(value)):
        return True  # a path however it is spelt
    p = Path(value)
    return p.is_dir() or p.is_file()


def _shipped_dir() -> Path | None:
    spec = find_spec("redraft.engine")  # (no import: that would load torch)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "models"


def _hub_cache() -> Path | None:
    """Where `redraft pull` writes (huggingface_hub's cache); None without the hub extra."""
    try:
        from huggingface_hub import constants
    except ImportError:
        return None
    return Path(constants.HF_HUB_CACHE)


def model_roots(trusted: Any) -> list[Path]:
    """The user's models folders, links resolved."""
    roots = [Path(d).expanduser() for d in trusted.models_dirs]
    roots += [p for p in (_shipped_dir(), _hub_cache()) if p is not None]
    if trusted.model and _is_folder_path(trusted.model):
        roots.append(Path(trusted.model).expanduser())
    return [Path(os.path.realpath(r)) for r in roots]


def canonical_model(value: str | None, trusted: Any) -> str | None:
    """A folder as the real path that was checked (so the one loaded is the one allowed);
    names and None as they are."""
    if value is None or value == trusted.model or not _is_folder_path(value):
        return value
    return os.path.realpath(Path(value).expanduser())


def model_refusal(value: str | None, trusted: Any) -> str | None:
    """Why the editor may not name this model (None: it may)."""
    if value is None or value == trusted.model or not _is_folder_path(value):
        return None
    real = Path(os.path.realpath(Path(value).expanduser()))
    roots = model_roots(trusted)
    if any(real.is_relative_to(r) for r in roots):
        return None
    where = ", ".join(str(d) for d in trusted.models_dirs) or "none given"
    return ("the editor's settings may name a shipped model, a pulled Hugging Face id or a folder under the "
            f"models folders (--models-dir: {where}; the Hugging Face cache); add one with "
            "`redraft serve --models-dir DIR`, or give the model with `redraft serve --model PATH`")


def refusals(new: Any, current: Any, trusted: Any) -> list[tuple[str, str]]:
    """(field, why) for each setting in `new` that the editor may not change from `current`."""
    out = []
    url = new.engine_url
    if url != current.engine_url and url is not None and url != trusted.engine_url and not loopback_url(url):
        out.append(("engine_url", "the editor's settings may name an engine on this machine only (127.0.0.1, "
                                  "::1, localhost); one elsewhere is given on the command line "
                                  "(`redraft serve --engine-url URL`)"))
    if new.model != current.model and (why := model_refusal(new.model, trusted)) is not None:
        out.append(("model", why))
    if not new.exclude_secrets and current.exclude_secrets and trusted.exclude_secrets:
        out.append(("exclude_secrets", "only the command line turns the secret-file defaults off "
                                       "(`redraft serve --exclude-secrets off`)"))
    if new.models_dirs != current.models_dirs:
        out.append(("models_dirs", "the models folders are given on the command line only "
                                   "(`redraft serve --models-dir DIR`)"))
    return out
