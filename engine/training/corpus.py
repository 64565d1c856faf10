"""The training corpus: permissively licensed Python, de-duplicated, split by package.

Sources: the running CPython's standard library (PSF license; its test suites left out)
and the pinned PyPI wheels below, fetched with `pip download` (a registry, at build time
only; nothing downloads at run time). Each package lands whole in one split: train,
valid or heldout. Vendored copies of other projects and generated data files are skipped.

    python -m redraft.engine.training.corpus --out corpus/

writes train/valid/heldout.jsonl.gz ({"package","path","text"} per file), heldout/ and
valid/ as plain .py trees (for `redraft eval --files`), and manifest.json.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

# name, version, split. Licenses are read from each wheel's metadata and checked.
PACKAGES = [
    ("django", "5.2.19", "train"), ("networkx", "3.6.1", "train"), ("sqlalchemy", "2.1.9", "train"),
    ("flask", "3.1.3", "train"), ("werkzeug", "3.1.9", "train"), ("jinja2", "3.1.6", "train"),
    ("click", "8.5.1", "train"), ("attrs", "26.1.0", "train"), ("boltons", "26.2.0", "train"),
    ("more-itertools", "11.2.1", "train"), ("toolz", "1.2.0", "train"), ("pyparsing", "3.3.3", "train"),
    ("pygments", "2.21.0", "train"), ("pytest", "9.2.0", "train"), ("setuptools", "84.2.1", "train"),
    ("pip", "26.3", "train"),
    ("rich", "15.0.0", "valid"), ("httpx", "0.28.1", "valid"),
    ("requests", "2.34.2", "heldout"), ("marshmallow", "4.4.0", "heldout"), ("arrow", "1.4.0", "heldout"),
    ("invoke", "3.0.3", "heldout"),
]
PERMISSIVE = re.compile(r"\b(MIT|BSD|Apache|PSF|Python Software Foundation|ISC|Unlicense|0BSD)\b", re.I)
SKIP_PARTS = {"_vendor", "vendor", "vendored", "test", "tests", "testing", "__pycache__", "site-packages"}
MAX_BYTES = 200_000
MAX_MEAN_LINE = 120  # longer on average means data tables, not code


def wheel_license(zf: zipfile.ZipFile) -> str:
    meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
    if meta is None:
        return ""
    found = []
    for line in zf.read(meta).decode("utf-8", "replace").splitlines():
        if line.startswith(("License-Expression:", "License:")) and len(line) < 200:
            found.append(line.split(":", 1)[1].strip())
        elif line.startswith("Classifier: License ::"):
            found.append(line.rsplit("::", 1)[1].strip())
        elif not line.strip():
            break
    return "; ".join(found)


def keep(path: str, text: str) -> bool:
    parts = set(Path(path).parts)
    if parts & SKIP_PARTS or not path.endswith(".py"):
        return False
    if not text.strip() or len(text.encode()) > MAX_BYTES:
        return False
    lines = text.count("\n") + 1
    return len(text) / lines <= MAX_MEAN_LINE


def stdlib_files() -> list[tuple[str, str]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel.split("/")[0] in ("test", "idlelib", "lib2to3", "turtledemo"):
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        if keep(rel, text):
            out.append((rel, text))
    return out


def wheel_files(wheel: Path) -> tuple[str, list[tuple[str, str]]]:
    with zipfile.ZipFile(wheel) as zf:
        lic = wheel_license(zf)
        files = []
        for name in sorted(zf.namelist()):
            if name.endswith(".py"):
                text = zf.read(name).decode("utf-8", "replace")
                if keep(name, text):
                    files.append((name, text))
    return lic, files


def download(dest: Path) -> dict[str, Path]:
    dest.mkdir(parents=True, exist_ok=True)
    specs = [f"{n}=={v}" for n, v, _ in PACKAGES]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.11", "-d", str(dest), *specs], check=True)
    wheels = {}
    for n, v, _ in PACKAGES:
        norm = n.replace("-", "_").lower()
        match = [w for w in dest.glob("*.whl") if w.name.lower().startswith(f"{norm}-{v}-")]
        if not match:
            raise FileNotFoundError(f"no wheel for {n}=={v} in {dest}")
        wheels[n] = match[0]
    return wheels


def fingerprint(text: str) -> str:
    return hashlib.sha1(re.sub(r"\s+", " ", text).strip().encode()).hexdigest()


def build(out: Path, wheels_dir: Path) -> dict:
    wheels = download(wheels_dir)
    sources = [("cpython-stdlib", sys.version.split()[0], "train", "PSF-2.0", stdlib_files())]
    for name, version, split in PACKAGES:
        lic, files = wheel_files(wheels[name])
        sources.append((name, version, split, lic, files))
    seen: set[str] = set()
    splits: dict[str, list[dict]] = {"train": [], "valid": [], "heldout": []}
    manifest = []
    # Held-out and validation first, so a file they share with training stays out of training.
    for name, version, split, lic, files in sorted(sources, key=lambda s: s[2] == "train"):
        if not PERMISSIVE.search(lic):
            print(f"skipping {name} {version}: license {lic!r} is not known to be permissive", file=sys.stderr)
            continue
        kept = 0
        for path, text in files:
            fp = fingerprint(text)
            if fp in seen:
                continue
            seen.add(fp)
            splits[split].append({"package": name, "path": path, "text": text})
            kept += 1
        manifest.append({"package": name, "version": version, "split": split, "license": lic, "files": kept,
                         "bytes": sum(len(d["text"].encode()) for d in splits[split] if d["package"] == name)})
    out.mkdir(parents=True, exist_ok=True)
    for split, docs in splits.items():
        with gzip.open(out / f"{split}.jsonl.gz", "wt", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d) + "\n")
        if split != "train":
            for d in docs:
                p = out / split / d["package"] / d["path"]
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(d["text"], encoding="utf-8")
    summary = {"packages": manifest,
               "splits": {s: {"files": len(d), "bytes": sum(len(x["text"].encode()) for x in d)}
                          for s, d in splits.items()}}
    (out / "manifest.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def read_split(folder: Path, split: str) -> list[dict]:
    with gzip.open(folder / f"{split}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="redraft train corpus", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--wheels", type=Path, default=None, help="where wheels are downloaded (default OUT/wheels)")
    args = ap.parse_args(argv)
    summary = build(args.out, args.wheels or args.out / "wheels")
    print(json.dumps(summary["splits"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
