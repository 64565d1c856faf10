"""The training corpus: permissively licensed code in the languages editors are used for.

Sources (corpus_sources.py; registries at build time only, nothing downloads at run time):
the running CPython's standard library, pinned PyPI wheels, npm tarballs (TypeScript
sources, or plain JavaScript outside built folders) and Debian's golang-*-dev and
librust-*-dev packages. corpus_packages.json pins every package's version and split.
Packages whose licences are not all permissive stay out (corpus_license.py); vendored,
generated, minified and test-data files stay out (corpus_filters.py); exact and near
duplicates stay out, held-out and validation packages first so that a file they share
with training stays out of training (corpus_dedup.py). Each package lands whole in one
split, and a package's other versions (Rust crates) land with it.

    redraft train corpus --out corpus

builds into OUT-next and then swaps it for OUT: train/valid/heldout.jsonl.gz
({"package","lang","path","text"} per file), valid/ and heldout/ as plain trees
(<lang>/<package>/<path>, for `redraft eval --files`), manifest.json and READY (the
estimated tokens per language). Downloads are cached (--cache) and never fetched twice.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import re
import shutil
import sys
import tarfile
import time
import zipfile
from pathlib import Path

from . import corpus_sources as src
import numpy as np

from .corpus_dedup import NUM_PERM, Dedup, exact_key, signature
from .corpus_filters import package_langs, select
from .corpus_license import PERMISSIVE, verdict
from .corpus_sources import stdlib_files  # noqa: F401  (re-exported: tests build tiny corpora from it)

PINS = Path(__file__).with_name("corpus_packages.json")
SOURCES = ("python", "npm", "node", "go", "rust", "c")  # node, c: Debian's node-* and C/C++ -dev packages
SPLITS = ("heldout", "valid", "train")  # dedup order: what evaluation sees is kept first
BYTES_PER_TOKEN = 3.7  # an estimate for code under a byte-level BPE; token counts in the manifest use it
STDLIB = "cpython-stdlib"  # a python pin of this name is the running interpreter's standard library


class CorpusError(Exception):
    """The pins are inconsistent (a package on two sides) or a build cannot be written."""


def load_pins(path: Path = PINS) -> list[tuple[str, str, str, str]]:
    """(source, name, version, split) for every pinned package."""
    data = json.loads(path.read_text())
    return [(source, n, v, s) for source in SOURCES for n, v, s in data.get(source, [])]


def group_key(source: str, name: str) -> str:
    """What a split is decided on: a Rust crate's versioned packages are one group."""
    if source == "rust":
        name = re.sub(r"-\d+(\.\d+)*-dev$", "-dev", name)
    if source == "node":  # Debian's node-foo is npm's foo
        source, name = "npm", name.removeprefix("node-")
    if source == "python":
        name = re.sub(r"[-_.]+", "-", name).lower()
    return f"{source}:{name}"


def check_sides(pins: list[tuple[str, str, str, str]]) -> None:
    sides: dict[str, str] = {}
    for source, name, _v, split in pins:
        key = group_key(source, name)
        if sides.setdefault(key, split) != split:
            raise CorpusError(f"{key} is pinned to both {sides[key]} and {split}")


def fetch(pins: list[tuple[str, str, str, str]], cache: Path) -> None:
    by = {s: [(n, v) for source, n, v, _ in pins if source == s and n != STDLIB] for s in SOURCES}
    src.fetch_wheels(cache / "pypi", by["python"])
    src.fetch_npm(cache / "npm", by["npm"])
    src.fetch_debs(cache, by["node"] + by["go"] + by["rust"] + by["c"])


def read_package(pin: tuple[str, str, str, str], cache: Path) -> tuple[list[str], list] | None:
    source, name, version, _split = pin
    if source == "python" and name == STDLIB:
        if version != "%d.%d.%d" % sys.version_info[:3]:
            print(f"corpus: pinned {STDLIB} {version}, reading {sys.version.split()[0]}", file=sys.stderr)
        return ["PSF-2.0"], src.stdlib_files()
    if source == "python":
        path = src.wheel_path(cache / "pypi", name, version)
        return src.read_wheel(path) if path else None
    if source == "npm":
        path = src.tarball_path(cache / "npm", name, version)
        return src.read_npm(path) if path.exists() else None
    root = src.deb_dir(cache, name, version)
    return src.read_deb(root, name) if root else None


def prepare(job: tuple) -> dict:
    """One package, read and filtered (runs in a worker): licence, kept files, why others stayed out."""
    pin, cache = job
    got = read_package(pin, cache)
    out = {"pin": pin, "files": [], "skipped": {}, "license": ""}
    if got is None:
        out["missing"] = True
        return out
    statements, files = got
    out["license"] = " AND ".join(dict.fromkeys(statements)) or "unknown"
    if verdict(statements) != PERMISSIVE:
        out["refused"] = True
        return out
    kept = select(files, out["skipped"])
    out["files"] = [(p, t, lang) for (p, t), lang in zip(kept, package_langs(kept))]
    return out


def _signatures(pin: tuple, cache: Path, texts: list[str]) -> tuple[list[str], list]:
    """Exact keys and MinHash signatures of `texts`, from the per-package cache where it has them."""
    store = cache / "sig" / pin[0] / f"{pin[1].replace('/', '_')}_{pin[2]}.npz"
    known: dict[str, np.ndarray] = {}
    if store.exists():
        with np.load(store) as z:
            known = dict(zip(z["keys"].tolist(), z["sigs"]))
    keys = [exact_key(t) for t in texts]
    fresh = False
    for k, t in zip(keys, texts):
        if k not in known:
            s = signature(t)
            known[k], fresh = (np.zeros(NUM_PERM, np.uint64) if s is None else s), True
    if fresh:
        store.parent.mkdir(parents=True, exist_ok=True)
        np.savez(store, keys=np.array(list(known), dtype="U40"), sigs=np.array(list(known.values()), dtype=np.uint64))
    # An all-zero row stands for "no word tokens": such a file is only checked for exact copies.
    return keys, [known[k] if known[k].any() else None for k in keys]


def prepare_all(job: tuple) -> dict:
    """prepare, then the files' dedup keys; a package that cannot be read is reported and left out."""
    try:
        out = prepare(job)
        out["keys"], out["sigs"] = _signatures(job[0], job[1], [t for _, t, _ in out["files"]])
    except (OSError, ValueError, IndexError, KeyError, UnicodeError, tarfile.TarError, zipfile.BadZipFile) as e:
        print(f"corpus: {job[0][1]} {job[0][2]}: {type(e).__name__}: {e}", file=sys.stderr)
        return {"pin": job[0], "files": [], "skipped": {}, "license": "", "error": f"{type(e).__name__}: {e}"}
    return out


def ordered(pins: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str, str]]:
    return sorted(pins, key=lambda p: (SPLITS.index(p[3]), p[0], p[1]))


def _add(got: dict, dedup: Dedup, writers: dict, out: Path, totals: dict) -> dict:
    """Dedup one prepared package into its split; its manifest entry."""
    source, name, version, split = got["pin"]
    entry = {"source": source, "package": name, "version": version, "split": split, "license": got["license"],
             "files": 0, "bytes": 0, "langs": {}, "filtered": got["skipped"], "duplicates": {}}
    for status in ("missing", "refused", "error"):
        if got.get(status):
            entry["status"] = {"refused": "licence"}.get(status, status)
            return entry
    for (path, text, lang), key, sig in zip(got["files"], got["keys"], got["sigs"]):
        why = dedup.seen(key, sig)
        if why:
            entry["duplicates"][why] = entry["duplicates"].get(why, 0) + 1
            continue
        writers[split].write(json.dumps({"package": name, "lang": lang, "path": path, "text": text}) + "\n")
        n = len(text.encode("utf-8", "replace"))
        if split != "train":
            p = out / split / lang / name / path
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        entry["files"] += 1
        entry["bytes"] += n
        entry["langs"][lang] = entry["langs"].get(lang, 0) + n
        t = totals.setdefault(lang, {}).setdefault(split, {"files": 0, "bytes": 0})
        t["files"] += 1
        t["bytes"] += n
    entry["status"] = "ok" if entry["files"] else "empty"
    return entry


def _summary(packages: list[dict], totals: dict, seconds: float) -> dict:
    def tok(d):
        return dict(d, tokens=round(d["bytes"] / BYTES_PER_TOKEN))
    splits = {s: {"files": sum(t.get(s, {}).get("files", 0) for t in totals.values()),
                  "bytes": sum(t.get(s, {}).get("bytes", 0) for t in totals.values())} for s in SPLITS}
    status: dict[str, int] = {}
    for p in packages:
        status[p["status"]] = status.get(p["status"], 0) + 1
    return {"tokens_note": f"tokens are estimated as bytes / {BYTES_PER_TOKEN}", "build_seconds": round(seconds),
            "package_status": status,
            "splits": {s: tok(v) for s, v in splits.items()},
            "languages": {lang: {s: tok(v) for s, v in sorted(per.items())} for lang, per in sorted(totals.items())},
            "packages": packages}


def _ready_text(summary: dict) -> str:
    lines = [f"# estimated tokens (bytes / {BYTES_PER_TOKEN}) per language and split"]
    for lang, per in summary["languages"].items():
        lines.append(f"{lang} " + " ".join(f"{s}={per.get(s, {}).get('tokens', 0)}" for s in ("train", "valid", "heldout")))
    lines.append("total " + " ".join(f"{s}={summary['splits'][s]['tokens']}" for s in ("train", "valid", "heldout")))
    return "\n".join(lines) + "\n"


def build(out: Path, cache: Path, pins_path: Path = PINS, workers: int = 2, download: bool = True) -> dict:
    """Build the corpus into OUT-next, then swap it for OUT; the manifest's summary."""
    started = time.time()
    pins = load_pins(pins_path)
    check_sides(pins)
    if download:
        fetch(pins, cache)
    tmp = out.with_name(out.name + "-next")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    writers = {s: gzip.open(tmp / f"{s}.jsonl.gz", "wt", encoding="utf-8", compresslevel=1) for s in SPLITS}
    dedup, packages, totals = Dedup(), [], {}
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for got in pool.imap(prepare_all, [(p, cache) for p in ordered(pins)]):
                packages.append(_add(got, dedup, writers, tmp, totals))
    finally:
        for w in writers.values():
            w.close()
    summary = _summary(packages, totals, time.time() - started)
    (tmp / "manifest.json").write_text(json.dumps(summary, indent=1) + "\n")
    (tmp / "READY").write_text(_ready_text(summary))
    swap(tmp, out)
    return summary


def swap(new: Path, out: Path) -> None:
    """Put the finished build `new` in place of `out` with two renames (readers never see a half build)."""
    old = out.with_name(out.name + "-old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    new.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def read_split(folder: Path, split: str) -> list[dict]:
    with gzip.open(Path(folder) / f"{split}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="redraft train corpus", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=None, help="downloads and signatures (default: OUT/../sources)")
    ap.add_argument("--pins", type=Path, default=PINS, help="the pinned package list (JSON)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-download", action="store_true", help="build from the cache only; missing packages are listed")
    args = ap.parse_args(argv)
    try:
        summary = build(args.out, args.cache or args.out.parent / "sources", args.pins, args.workers,
                        not args.no_download)
    except (CorpusError, OSError) as e:
        print(f"corpus: {e}", file=sys.stderr)
        return 1
    print(_ready_text(summary), end="")
    print("packages: " + ", ".join(f"{n} {status}" for status, n in sorted(summary["package_status"].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
