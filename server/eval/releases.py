"""Next edits on real edits: two releases of one package, each small hunk of their diff in turn
taken as the user's edit, the server's next-edit path on it, scored against the new release.

Scenarios. For each .py file in both releases (test and vendored folders left out), the lines
of old and new are diffed (difflib). Every hunk of at most MAX_HUNK_LINES lines a side that
changes more than whitespace is one scenario: the document is the old file, the user's edit
is that hunk, sent as an LSP change would be (the old and new hunk text with their common
characters trimmed at both ends, widened to whole words, so `class X(object):` -> `class X:`
deletes `(object)`),
and the file's other hunks are what might follow. At most `limit` scenarios per package,
drawn with random.Random(f"{seed}:{package}"), files sorted: deterministic.

Scoring. After the user's edit the document D differs from the new release N by the other
hunks, each a run of rows of D and the lines N holds for them. For a proposal (one line of D
as it is and as it would be):
  right      it lies in another hunk and its line is one of the lines N holds there
             (applied alone, D is one line nearer N);
  closer     it lies in another hunk and its line is more like the most similar of those
             lines than it was (difflib ratio): partial progress, e.g. one of two changes;
  reversal   it touches a row of the user's edit, or changes what the user inserted back
             into what they removed (their token change inverted);
and per scenario, with all proposals applied: recovered = other hunks whose rows then read
exactly as in N (a hunk that adds or drops lines can never be, proposals being one line each).
Per package and overall: fires = scenarios with at least one proposal / scenarios;
precision = right / proposals; recall = recovered / other hunks; reversal = reversals /
proposals; p50/p95 ms of the path (rules and judgement, timed together), and p50 over the
scenarios that fired (where the model judged something).

The ceiling: a hunk's token changes are the (removed tokens, inserted tokens) runs of a token
diff of its two sides. A scenario recurs when one of its token changes is also one of
another hunk's in the same file: `recurs` is the share of scenarios that do, `recur_hunks`
the share of other hunks that share one — the most that propagating the user's own change
could recover, so readers see the headroom.

Release pairs are fetched at build time (`python -m redraft.server.eval.releases fetch
OUT_DIR`: pip download, no dependencies), never at run time. Knows nothing of LSP or the CLI.
"""

from __future__ import annotations

import argparse
import difflib
import random
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from ..core.document import body, split_lines, utf16_len
from ..core.nextedit import shared_ends
from .nextedit import propose

# Consecutive releases of small, permissive, pure-Python packages outside the training corpus
# (engine/training/corpus.py), each pair a modernisation: Python 2 idioms dropped, typing added.
RELEASES = [
    ("cachetools", "3.1.1", "4.0.0"),  # MIT: drops Python 2 (__future__, time.monotonic)
    ("isodate", "0.6.1", "0.7.2"),  # BSD-3-Clause: drops six and Python 2
    ("itsdangerous", "1.1.0", "2.0.0"),  # BSD-3-Clause: drops _compat, adds annotations
    ("packaging", "20.9", "21.0"),  # Apache-2.0/BSD: type comments become annotations
    ("pyjwt", "1.7.1", "2.0.0"),  # MIT: drops Python 2 (class X(object), compat), API changes
    ("rsa", "4.0", "4.1"),  # Apache-2.0: drops Python 2 (PY2 branches, coding lines), annotations
]
MAX_HUNK_LINES = 3  # a side; larger hunks are rewrites, not one edit a user makes
MAX_DIFF_TOKENS = 4000  # a side; a larger hunk's token changes are not read (quadratic diff)
SKIP_PARTS = {"test", "tests", "testing", "_vendor", "vendor", "vendored", "__pycache__"}
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d[\w.]*|\"[^\"\n]*\"|'[^'\n]*'|\S")


@dataclass(frozen=True)
class Hunk:
    old_start: int  # rows old_start..old_end-1 of the old file become new_start..new_end-1
    old_end: int
    new_start: int
    new_end: int


@dataclass
class ReleaseFile:
    path: str  # relative to the release folder
    old: list[str]  # lines (document.split_lines), terminators kept
    new: list[str]
    hunks: list[Hunk] = field(default_factory=list)

    @cached_property
    def token_changes(self) -> list[set[tuple[tuple[str, ...], tuple[str, ...]]]]:
        """Per hunk, its (removed tokens, inserted tokens) runs."""
        return [_token_changes("".join(self.old[h.old_start:h.old_end]), "".join(self.new[h.new_start:h.new_end]))
                for h in self.hunks]


@dataclass(frozen=True)
class Scenario:
    package: str
    file: ReleaseFile
    edit: int  # index of the user's hunk in file.hunks; the others are what might follow

    @property
    def others(self) -> list[int]:
        return [i for i in range(len(self.file.hunks)) if i != self.edit]


def _token_changes(old: str, new: str) -> set:
    a, b = TOKEN.findall(old), TOKEN.findall(new)
    if max(len(a), len(b)) > MAX_DIFF_TOKENS:
        return set()
    return {(tuple(a[i1:i2]), tuple(b[j1:j2])) for tag, i1, i2, j1, j2
            in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if tag != "equal"}


def diff_hunks(old: list[str], new: list[str]) -> list[Hunk]:
    return [Hunk(i1, i2, j1, j2) for tag, i1, i2, j1, j2
            in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes() if tag != "equal"]


def is_small(f: ReleaseFile, h: Hunk) -> bool:
    """A hunk a user could type as one edit: few lines, more than whitespace changed."""
    old, new = f.old[h.old_start:h.old_end], f.new[h.new_start:h.new_end]
    return (len(old) <= MAX_HUNK_LINES and len(new) <= MAX_HUNK_LINES and h.old_start < len(f.old)
            and "".join(old).split() != "".join(new).split())


def _py_files(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*.py")
            if not SKIP_PARTS & set(p.relative_to(root).parts[:-1])}


def release_files(old_dir: Path, new_dir: Path) -> list[ReleaseFile]:
    """The .py files both releases hold, sorted by path, with their hunks."""
    old, new = _py_files(old_dir), _py_files(new_dir)
    out = []
    for path in sorted(old.keys() & new.keys()):
        a = split_lines(old[path].read_text(encoding="utf-8", errors="replace"))
        b = split_lines(new[path].read_text(encoding="utf-8", errors="replace"))
        if a != b:
            out.append(ReleaseFile(path, a, b, diff_hunks(a, b)))
    return out


def build_scenarios(package: str, files: list[ReleaseFile], limit: int | None = None, seed: int = 0) -> list[Scenario]:
    """Every small hunk of every file as the user's edit, in file and hunk order; at most
    `limit` of them drawn (deterministically) when given."""
    found = [Scenario(package, f, i) for f in files for i, h in enumerate(f.hunks) if is_small(f, h)]
    if limit is not None and len(found) > limit:
        rng = random.Random(f"{seed}:{package}")
        keep = set(rng.sample(range(len(found)), limit))
        found = [s for i, s in enumerate(found) if i in keep]
    return found


def _position(lines: list[str], row: int, text: str, offset: int) -> tuple[int, int]:
    """(row, UTF-16 column) of character `offset` of `text`, which starts at (row, 0)."""
    r = row + text.count("\n", 0, offset)
    col = offset - (text.rfind("\n", 0, offset) + 1)
    return r, utf16_len(lines[r][:col]) if r < len(lines) else 0


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def user_change(s: Scenario) -> tuple[tuple[int, int, int, int], str]:
    """The hunk as an LSP content change on the old file: its old text replaced by its new
    text, the characters both share at either end left out, widened to whole words (what an
    editor sends)."""
    f, h = s.file, s.file.hunks[s.edit]
    old, new = "".join(f.old[h.old_start:h.old_end]), "".join(f.new[h.new_start:h.new_end])
    p, q = shared_ends(old, new)
    # Whole words, as a user replaces a name (timestamp -> ts_int, not imestamp -> s_int):
    # the model is shown the event's removed and inserted text.
    while p and _word(old[p - 1]) and (_word(old[p:p + 1]) or _word(new[p:p + 1])):
        p -= 1
    e, f_end = len(old) - q, len(new) - q  # where the shared ends begin
    while q and _word(old[e]) and (_word(old[e - 1:e]) or _word(new[f_end - 1:f_end])):
        q, e, f_end = q - 1, e + 1, f_end + 1
    start = _position(f.old, h.old_start, old, p)
    end = _position(f.old, h.old_start, old, len(old) - q)
    return (*start, *end), new[p:len(new) - q]


def _user_tokens(s: Scenario) -> tuple[str, str]:
    """(removed, inserted) of the user's edit at token level, the shared tokens at either end
    trimmed: what a proposal undoing it would put back and take away."""
    f, h = s.file, s.file.hunks[s.edit]
    a = TOKEN.findall("".join(f.old[h.old_start:h.old_end]))
    b = TOKEN.findall("".join(f.new[h.new_start:h.new_end]))
    p, q = shared_ends(a, b)
    return "".join(a[p:len(a) - q]), "".join(b[p:len(b) - q])


@dataclass
class Score:
    proposals: int = 0
    right: int = 0
    closer: int = 0
    reversals: int = 0
    recovered: int = 0
    others: int = 0
    recur_hunks: int = 0  # other hunks sharing one of the user's token changes
    ms: float = 0.0


def _targets(s: Scenario) -> list[tuple[int, int, list[str]]]:
    """The other hunks as (first row, end row) of the document after the user's edit, and the
    lines (bodies) the new release holds there."""
    f, k = s.file, s.file.hunks[s.edit]
    shift = (k.new_end - k.new_start) - (k.old_end - k.old_start)
    out = []
    for i in s.others:
        h = f.hunks[i]
        d = shift if h.old_start >= k.old_end else 0
        out.append((h.old_start + d, h.old_end + d, [body(x) for x in f.new[h.new_start:h.new_end]]))
    return out


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(a=a, b=b, autojunk=False).ratio()


def score(s: Scenario, lines: list[str], props: list, ms: float = 0.0) -> Score:
    """`props` (nextedit.LineEdit) judged against the new release; `lines` is the document
    after the user's edit. See the module's docstring for each count."""
    f, k = s.file, s.file.hunks[s.edit]
    targets = _targets(s)
    mine = range(k.old_start, k.old_start + (k.new_end - k.new_start))
    removed, inserted = _user_tokens(s)
    out = Score(proposals=len(props), others=len(targets), ms=ms)
    for p in props:
        undo = "".join(TOKEN.findall(p.text)) == removed and \
            "".join(TOKEN.findall(p.original[p.start:p.end])) == inserted and bool(removed or inserted)
        if p.row in mine or undo:
            out.reversals += 1
            continue
        place = next((want for a, b, want in targets if a <= p.row < b), None)
        if place is None:
            continue
        out.right += p.proposed in place
        out.closer += bool(place) and max(_ratio(p.proposed, w) for w in place) > \
            max(_ratio(p.original, w) for w in place)
    after = {p.row: p.proposed for p in props}
    for a, b, want in targets:
        if b - a == len(want) and any(r in after for r in range(a, b)):
            out.recovered += all(after.get(r, body(lines[r])) == w for r, w in zip(range(a, b), want))
    mine_changes = f.token_changes[s.edit]
    out.recur_hunks = sum(1 for i in s.others if mine_changes & f.token_changes[i])
    return out


def run_scenario(engine, s: Scenario, margin: float, refill: bool = False) -> Score:
    doc, _, props, ms = propose(engine, "".join(s.file.old), [user_change(s)], margin, refill)
    return score(s, doc.lines, props, ms)


def summarize(scores: list[Score]) -> dict:
    n = len(scores)
    if not n:
        return {"scenarios": 0}
    props = sum(x.proposals for x in scores)
    others = sum(x.others for x in scores)
    ms = [x.ms for x in scores]
    fired = [x.ms for x in scores if x.proposals]  # the judgement's cost shows here

    def ratio(a, b):
        return round(a / b, 4) if b else None
    return {
        "scenarios": n,
        "fires": ratio(sum(x.proposals > 0 for x in scores), n),
        "proposals": props,
        "precision": ratio(sum(x.right for x in scores), props),
        "closer": ratio(sum(x.closer for x in scores), props),
        "recall": ratio(sum(x.recovered for x in scores), others),
        "reversal": ratio(sum(x.reversals for x in scores), props),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p95_ms": round(float(np.percentile(ms, 95)), 3),
        "fired_p50_ms": round(float(np.percentile(fired, 50)), 3) if fired else None,
        "recurs": ratio(sum(x.recur_hunks > 0 for x in scores), n),
        "recur_hunks": ratio(sum(x.recur_hunks for x in scores), others),
        "other_hunks": others,
    }


def _version_key(v: str):
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.findall(r"\d+|[A-Za-z]+", v)]


def release_pairs(root: Path) -> list[tuple[str, Path, Path]]:
    """(label, old, new) for each consecutive pair of ROOT/NAME/VERSION folders, names sorted."""
    out = []
    for pkg in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        versions = sorted((v for v in pkg.iterdir() if v.is_dir()), key=lambda v: _version_key(v.name))
        out += [(f"{pkg.name} {a.name}->{b.name}", a, b) for a, b in zip(versions, versions[1:])]
    return out


def evaluate_pair(label: str, old_dir: Path, new_dir: Path, engine, limit: int, seed: int,
                  margin: float, refill: bool = False) -> tuple[dict, list[Score]]:
    scores = [run_scenario(engine, s, margin, refill)
              for s in build_scenarios(label, release_files(old_dir, new_dir), limit, seed)]
    return summarize(scores), scores


def evaluate_releases(root: Path, engine, limit: int = 100, seed: int = 0, margin: float = -1.0) -> dict:
    """Every release pair under `root` (ROOT/NAME/VERSION): per pair and overall."""
    return _report([(label, a, b) for label, a, b in release_pairs(root)], engine, limit, seed, margin)


def _report(pairs, engine, limit: int, seed: int, margin: float, refill: bool = False) -> dict:
    packages, pooled = {}, []
    for label, a, b in pairs:
        packages[label], scores = evaluate_pair(label, a, b, engine, limit, seed, margin, refill)
        pooled += scores
    return {"model": None if engine is None else engine.name, "limit": limit, "seed": seed, "margin": margin,
            "refill": refill, "packages": packages, "overall": summarize(pooled)}


def run(old_dir_or_root: Path, new_dir: Path | None, engine, limit: int, seed: int, margin: float,
        refill: bool = False) -> dict:
    """The report for one pair (OLD_DIR NEW_DIR) or, without `new_dir`, for every pair under a
    ROOT/NAME/VERSION folder. Raises ValueError for a folder that is not there or holds none."""
    for d in (old_dir_or_root, new_dir):
        if d is not None and not Path(d).is_dir():
            raise ValueError(f"{d}: not a folder")
    if new_dir is not None:
        old, new = Path(old_dir_or_root), Path(new_dir)
        name = old.parent.name if old.parent == new.parent else old.name
        pairs = [(f"{name} {old.name}->{new.name}", old, new)]
    else:
        pairs = release_pairs(Path(old_dir_or_root))
        if not pairs:
            raise ValueError(f"{old_dir_or_root}: no NAME/VERSION folders with two versions")
    return _report(pairs, engine, limit, seed, margin, refill)


def format_table(report: dict) -> str:
    cols = [("scenarios", "d"), ("fires", ".3f"), ("proposals", "d"), ("precision", ".3f"), ("closer", ".3f"),
            ("recall", ".3f"), ("reversal", ".3f"), ("p50_ms", ".1f"),
            ("fired_p50_ms", ".1f"), ("recurs", ".3f"), ("recur_hunks", ".3f")]
    rows = [*report["packages"].items(), ("overall", report["overall"])]
    width = max(len(label) for label, _ in rows)

    def cell(v, fmt):
        return "-" if v is None else format(v, fmt)
    out = [f"model {report['model']}, limit {report['limit']} per package, seed {report['seed']}, "
           f"margin {report['margin']}",
           f"{'release':{width}} " + " ".join(f"{c:>{max(len(c), 6)}}" for c, _ in cols)]
    for label, r in rows:
        out.append(f"{label:{width}} " + " ".join(f"{cell(r.get(c), fmt):>{max(len(c), 6)}}" for c, fmt in cols))
    return "\n".join(out)


# -- fetching, at build time -----------------------------------------------------------------

def _unpack(archive: Path, dest: Path) -> None:
    """A wheel as it is; an sdist without its top folder."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    top = list(tmp.iterdir())
    src = top[0] if archive.suffix != ".whl" and len(top) == 1 and top[0].is_dir() else tmp
    shutil.rmtree(dest, ignore_errors=True)
    src.rename(dest)
    shutil.rmtree(tmp, ignore_errors=True)


def fetch(out: Path, releases=RELEASES) -> list[Path]:
    """pip download (no dependencies; a wheel, else the sdist) each release and unpack it to
    OUT/NAME/VERSION; releases already there are kept. Returns the release folders."""
    done = []
    for name, *versions in releases:
        for version in versions:
            dest = out / name / version
            if not dest.is_dir():
                dl = out / "_downloads" / f"{name}-{version}"
                dl.mkdir(parents=True, exist_ok=True)
                subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dl),
                                f"{name}=={version}"], check=True)
                archive = sorted(dl.iterdir(), key=lambda p: p.suffix != ".whl")[0]
                _unpack(archive, dest)
            done.append(dest)
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m redraft.server.eval.releases",
                                 description="fetch the pinned release pairs for the next-edit evaluation")
    sub = ap.add_subparsers(dest="task", required=True)
    sub.add_parser("fetch", help="download and unpack them to OUT_DIR/NAME/VERSION").add_argument("out", type=Path)
    args = ap.parse_args(argv)
    for path in fetch(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
