"""Files redraft never reads: the user's `exclude` globs and, unless `exclude_secrets` is
false, the usual secret files (SECRETS).

One matcher for every door: an excluded document is kept out of the session (no completion
in it, no drafts, names, extra context or next edits from it), the workspace indexer never
reads one from disk, and the HTTP API neither completes an excluded file nor uses the text
of one a prompt carries. Matching is on the path of a file: URI, a plain path, or the last
segment of any other URI, case-insensitively (a secret is one whatever its case). A glob
without "/" matches a file name (`*.pem`); one with "/" matches the end of the path
(`config/prod/*.json`, `**/private/**`), and one ending in "/" everything in such a folder.

Pure: knows nothing of LSP, HTTP or the engine.
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache
from urllib.parse import unquote, urlparse

# The usual secret files: environment files, private keys and certificates' keys, key stores,
# and the credentials files of common tools. `.env.example` is one too: it is often a copy.
SECRETS = (
    ".env", ".env.*", "*.env", ".envrc",
    "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.kdbx", "*.gpg", "*.asc",
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
    ".netrc", "_netrc", ".pgpass", ".npmrc", ".pypirc", ".git-credentials", ".htpasswd",
    "credentials", "credentials.*", "*.credentials", "secrets.json", "secrets.yaml", "secrets.yml",
    "*.tfvars", "service-account*.json",
)


def path_of(uri_or_path: str) -> str:
    """The path part of a URI (`file:`, `vscode-remote:`, ...) or the text itself for a path,
    with "/" separators."""
    text = uri_or_path
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", text) and not re.match(r"^[A-Za-z]:[\\/]", text):
        parsed = urlparse(text)
        text = unquote(parsed.path or parsed.netloc or text[text.find(":") + 1:])
    return text.replace("\\", "/")


class Matcher:
    """Globs compiled once (see `matcher`)."""

    def __init__(self, globs: tuple[str, ...]) -> None:
        globs = tuple(g.lower() + ("*" if g.endswith("/") else "") for g in globs)  # a folder: all below it
        names = [g for g in globs if "/" not in g]
        paths = [g for g in globs if "/" in g]
        self._name = re.compile("|".join(fnmatch.translate(g) for g in names)) if names else None
        self._path = re.compile("|".join(fnmatch.translate(p if p.startswith("/") else "*/" + p)
                                         for p in paths)) if paths else None

    def matches(self, uri_or_path: str) -> bool:
        path = "/" + path_of(uri_or_path).lower().lstrip("/")
        if self._name is not None and self._name.match(path[path.rfind("/") + 1:]):
            return True
        return self._path is not None and self._path.match(path) is not None


@lru_cache(maxsize=16)
def matcher(globs: tuple[str, ...], secrets: bool = True) -> Matcher:
    """The matcher of the user's globs, plus SECRETS unless `secrets` is false."""
    return Matcher((SECRETS if secrets else ()) + tuple(globs))
