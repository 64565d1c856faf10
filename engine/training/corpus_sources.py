"""Where corpus files come from: PyPI wheels, npm tarballs, Debian Go and Rust packages.

Each source fetches the pinned versions it lacks into a cache (registries, at build time
only, several downloads at once) and reads one package as (licence statements, files).
Nothing already in the cache is fetched again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from .corpus_license import dep5_statements, package_json_statements, wheel_statements

PARALLEL = 8
DEB_BATCH = 50  # Debian packages per apt-get call
JS_EXT = (".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".mts", ".cts")
Files = list[tuple[str, str]]
# Compiled or bundled copies an npm package ships next to its sources.
NPM_BUILT = {"dist", "build", "umd", "bundles", "bundle", "out", "cjs", "esm", "es", "_esm", "_cjs", "_types", "types",
             "fesm2022", "fesm2020", "fesm2015", "esm2022", "esm2020", "browser", "min", "coverage"}


def _run_all(commands: list[list[str]], cwd: Path, quiet: bool = False) -> None:
    """Run download commands, PARALLEL at a time; a failure is reported (unless quiet: the caller retries),
    not fatal (the build lists what is missing)."""
    env = dict(os.environ, PIP_CONSTRAINT="")  # the pins are exact: an environment's constraints must not move them

    def one(cmd):
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
        if r.returncode and not quiet:
            print(f"fetch failed: {' '.join(cmd[-2:])}: {r.stderr.strip()[-200:]}", file=sys.stderr)
    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(one, commands))


# --- Python -------------------------------------------------------------------------------

def stdlib_files() -> Files:
    """The running CPython's standard library, without its tests and demos."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel.split("/")[0] in ("test", "idlelib", "lib2to3", "turtledemo", "site-packages"):
            continue
        out.append((rel, p.read_text(encoding="utf-8", errors="replace")))
    return out


def wheel_path(cache: Path, name: str, version: str) -> Path | None:
    norm = re.sub(r"[-_.]+", "_", name).lower()
    for w in sorted(cache.glob("*.whl")):
        if w.name.lower().startswith(f"{norm}-{version}-"):
            return w
    return None


def fetch_wheels(cache: Path, pins: list[tuple[str, str]]) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    env_pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(cache)]
    _run_all([env_pip + [f"{n}=={v}"] for n, v in pins if wheel_path(cache, n, v) is None], cache)


def read_wheel(path: Path) -> tuple[list[str], Files]:
    with zipfile.ZipFile(path) as zf:
        meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        statements = wheel_statements(zf.read(meta).decode("utf-8", "replace")) if meta else []
        files = [(n, zf.read(n).decode("utf-8", "replace")) for n in sorted(zf.namelist())
                 if n.endswith(".py") and ".data/" not in n]
    return statements, files


# --- npm ------------------------------------------------------------------------------------

def tarball_path(cache: Path, name: str, version: str) -> Path:
    return cache / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"


def fetch_npm(cache: Path, pins: list[tuple[str, str]]) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    _run_all([["npm", "pack", "--silent", "--pack-destination", str(cache), f"{n}@{v}"]
              for n, v in pins if not tarball_path(cache, n, v).exists()], cache)


def read_npm(path: Path) -> tuple[list[str], Files]:
    """The package's TypeScript sources if it ships any, else its JavaScript outside built folders."""
    statements, files = [], []
    with tarfile.open(path) as tf:
        for m in tf:
            if not m.isfile() or m.size > 1_000_000:
                continue
            rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
            if rel == "package.json":
                statements = package_json_statements(tf.extractfile(m).read().decode("utf-8", "replace"))
            elif re.search(r"\.[cm]?[jt]sx?$", rel):
                files.append((rel, tf.extractfile(m).read().decode("utf-8", "replace")))
    return statements, own_sources(files)


def own_sources(files: Files) -> Files:
    """A JavaScript package's own sources: its TypeScript if it ships any, else its JavaScript outside built
    folders, else (a package that ships only a build) the built JavaScript; the filters still drop
    minified bundles."""
    files = [f for f in files if re.search(r"\.[cm]?[jt]sx?$", f[0]) and not re.search(r"\.d\.[cm]?ts$", f[0])]
    ts = [f for f in files if re.search(r"\.[cm]?tsx?$", f[0])]
    return ts or [f for f in files if not set(PurePosixPath(f[0]).parts[:-1]) & NPM_BUILT] or files


# --- Debian (Go, Rust) ----------------------------------------------------------------------

def _deb_stem(name: str, version: str) -> str:
    return f"{name}_{version.replace(':', '%3a')}_"


def deb_dir(cache: Path, name: str, version: str) -> Path | None:
    """The folder the package was extracted into (name_version_arch), None if not yet."""
    found = [d for d in (cache / "deb-x").glob(_deb_stem(name, version) + "*") if (d / ".done").exists()]
    return found[0] if found else None


def fetch_debs(cache: Path, pins: list[tuple[str, str]]) -> None:
    """apt-get download what is missing, then dpkg-deb -x each package into its own folder."""
    debs = cache / "deb"
    debs.mkdir(parents=True, exist_ok=True)
    missing = [(n, v) for n, v in pins if deb_dir(cache, n, v) is None]
    want = [(n, v) for n, v in missing if not list(debs.glob(_deb_stem(n, v) + "*.deb"))]
    # apt-get spends most of a call loading its package lists: many packages a call, one call per
    # batch that failed (a version no longer in the archive fails its whole batch) to name the culprit.
    batches = [want[i:i + DEB_BATCH] for i in range(0, len(want), DEB_BATCH)]
    _run_all([["apt-get", "download", "-q", *(f"{n}={v}" for n, v in b)] for b in batches], debs, quiet=True)
    left = [(n, v) for n, v in want if not list(debs.glob(_deb_stem(n, v) + "*.deb"))]
    _run_all([["apt-get", "download", "-q", f"{n}={v}"] for n, v in left], debs)

    def extract(pin):
        found = list(debs.glob(_deb_stem(*pin) + "*.deb"))
        if found:
            d = cache / "deb-x" / found[0].stem
            d.mkdir(parents=True, exist_ok=True)
            subprocess.run(["dpkg-deb", "-x", str(found[0]), str(d)], check=True)
            (d / ".done").touch()
    with ThreadPoolExecutor(3) as pool:  # decompression is CPU work: a few at once
        list(pool.map(extract, missing))


C_EXT = (".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx", ".ipp")
DEB_TREES = (("usr/share/gocode/src", (".go",)), ("usr/share/cargo/registry", (".rs",)),
             ("usr/share/nodejs", JS_EXT), ("usr/lib/nodejs", JS_EXT), ("usr/include", C_EXT), ("usr/src", C_EXT))


def read_deb(root: Path, name: str) -> tuple[list[str], Files]:
    """Go sources (gocode/src), Rust crates (cargo/registry), Node modules (nodejs) or C and C++ headers and
    sources (include, src); licences from DEP-5."""
    copyright = root / "usr/share/doc" / name / "copyright"
    statements = dep5_statements(copyright.read_text(errors="replace")) if copyright.is_file() else []
    files = []
    for base, exts in DEB_TREES:
        top = root / base
        for dirpath, _dirs, names in os.walk(top):
            for fn in sorted(names):
                p = Path(dirpath) / fn
                if fn.endswith(exts) and not p.is_symlink():
                    files.append((p.relative_to(top).as_posix(), p.read_text(encoding="utf-8", errors="replace")))
    if name.startswith("node-"):
        files = own_sources(files)
    return statements, sorted(files)
