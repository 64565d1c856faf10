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

# The usual secret files, after the file lists of secret scanners (shhgit, gitleaks) and common
# content-exclusion lists: names that hold credentials whatever their folder, and the folders
# of tools' credentials in a home folder (a workspace may be one). A source file's extension
# only in a whole name (`credentials.py`, `wp-config.php`), so ordinary code stays in
# (`kubeconfig.go` is code; `kubeconfig` is not). `.env.example` is one too: it is often a copy.
SECRETS = (
    # environment files
    ".env*", "*.env",
    # private keys, key stores and password stores
    "*.pem", "*.key", "*.p12", "*.pfx", "*.pkcs12", "*.p8", "*.ppk", "*.jks", "*.keystore", "*.kdbx",
    "*.keychain", "*.keychain-db", "*.psafe3", "*.gpg", "*.asc", "*.ovpn",
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*_rsa", "*_dsa", "*_ecdsa", "*_ed25519",
    # credentials files of common tools
    ".netrc", "_netrc", ".pgpass", ".my.cnf", ".mylogin.cnf", ".npmrc", ".yarnrc", ".yarnrc.yml", ".pypirc",
    ".git-credentials", ".htpasswd", ".dockercfg", ".vault-token", ".s3cfg", ".boto", ".databrickscfg",
    ".terraformrc", "terraform.rc", ".secrets", "sftp-config.json", ".ftpconfig", ".*_history",
    "credentials", "credentials.*", "*.credentials", "application_default_credentials.json",
    "client_secret*.json", "service-account*.json", "secrets.json", "secrets.yaml", "secrets.yml",
    "secrets.toml", "settings-security.xml", "kubeconfig", "*.kubeconfig", "wp-config.php",
    # Terraform's variables and state (state holds every resource's secrets in clear)
    "*.tfvars", "*.tfvars.json", "*.tfstate", "*.tfstate.*", "terraform.tfstate.d/",
    # tools' folders and files in a home folder, and a repository's own config (remote URLs
    # may carry a token)
    ".ssh/", ".gnupg/", ".aws/", ".azure/", ".kube/", ".config/gcloud/", ".config/gh/hosts.yml",
    ".config/hub", ".docker/config.json", ".m2/settings.xml", ".gradle/gradle.properties",
    ".composer/auth.json", ".secrets/", ".git/config",
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
