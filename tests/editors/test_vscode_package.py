"""VS Code: the extension packages into a VSIX the way its README says (`npm run package`),
and its unit tests pass. Runs in a copy of editors/vscode so the checkout stays clean; it
reuses editors/vscode/node_modules when present, else installs from npm's local cache only
(tests never download), and skips when npm or those packages are missing."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

EXT = Path(__file__).resolve().parents[2] / "editors" / "vscode"
BUILT = ("node_modules", "out", "dist", "*.vsix")  # outputs, never copied


def npm(folder: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(["npm", *args], cwd=folder, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def ext(tmp_path_factory) -> Path:
    if shutil.which("npm") is None:
        pytest.skip("npm is not on the PATH: the VS Code extension needs Node 20+ and npm to build")
    folder = tmp_path_factory.mktemp("vscode") / "redraft"
    shutil.copytree(EXT, folder, ignore=shutil.ignore_patterns(*BUILT))
    if (EXT / "node_modules").is_dir():
        (folder / "node_modules").symlink_to(EXT / "node_modules", target_is_directory=True)
        return folder
    done = npm(folder, "ci", "--offline", "--no-audit", "--no-fund")
    if "ENOTCACHED" in done.stdout + done.stderr:
        pytest.skip("editors/vscode/node_modules is missing and npm's cache lacks its packages: "
                    "run `npm ci` in editors/vscode first (.ci/run does)")
    assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
    return folder


def test_npm_run_package_builds_a_vsix_with_the_extension(ext):
    done = npm(ext, "run", "package")
    assert done.returncode == 0, f"npm run package failed:\n{done.stdout}\n{done.stderr}"
    manifest = json.loads((EXT / "package.json").read_text(encoding="utf-8"))
    vsix = ext / f"{manifest['name']}-{manifest['version']}.vsix"
    assert vsix.is_file(), f"no {vsix.name} after packaging:\n{done.stdout}"
    with zipfile.ZipFile(vsix) as z:
        names = set(z.namelist())
        assert {"extension/package.json", "extension/dist/extension.js", "extension/readme.md"} <= names
        packed = json.loads(z.read("extension/package.json"))
        assert packed["main"] == "./dist/extension.js" and packed["version"] == manifest["version"]
        assert len(z.read("extension/dist/extension.js")) > 10_000  # the bundle, with its client
    assert not any(n.startswith(("extension/src/", "extension/node_modules/")) for n in names)


def test_npm_test_runs_the_unit_tests(ext):
    done = npm(ext, "test")
    assert done.returncode == 0, f"npm test failed:\n{done.stdout}\n{done.stderr}"
    passed = [line for line in done.stdout.splitlines() if line.startswith("# pass ")]
    assert passed and int(passed[0].split()[-1]) > 0, done.stdout
    assert "# fail 0" in done.stdout


def test_settings_for_server_options_match_the_server():
    """The extension's time budget and excluded files: the defaults and range it declares are
    the server's, and the server takes its defaults without a problem."""
    from redraft.server.core import settings

    manifest = json.loads((EXT / "package.json").read_text(encoding="utf-8"))
    props = manifest["contributes"]["configuration"]["properties"]
    base = settings.ServerConfig()
    lo, hi = settings._INT_RANGES["max_time"]
    assert (props["redraft.maxTime"]["minimum"], props["redraft.maxTime"]["maximum"]) == (lo, hi)
    sent = {key: props[f"redraft.{key}"]["default"] for key in ("maxTime", "exclude", "excludeSecrets")}
    parsed, problems = settings.parse(sent, base)
    assert problems == [] and parsed == base
    parsed, problems = settings.parse({"maxTime": 1500, "exclude": ["*.local.py"], "excludeSecrets": False}, base)
    assert problems == [] and (parsed.max_time, parsed.exclude, parsed.exclude_secrets) == (1500, ("*.local.py",), False)
