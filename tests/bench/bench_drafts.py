"""Draft-index benchmark: find / lookup / one-keystroke edit latency on a ~5,000-line file.

    python tests/bench/bench_drafts.py [--lines 5000] [--cursors 2000] [--accuracy [--key-chars 4]]

The document is stdlib Python files concatenated (argparse, subprocess, dataclasses, ... from
this interpreter's library) and cut at --lines. Cursors sit mid-line (after the indentation,
before the line end) with up to 400 characters of text before them. Reported per operation:
median, p95 and max in ms, then one JSON line per row. `lookup` asks the buffer, two other open
stdlib files and a 30-line recent snippet (whose indexing is timed on its own row); `+kind`
adds tree-sitter kinds. --accuracy prints, by length of the best match, how often its
continuation is exactly the rest of the cursor's line (the evidence behind drafts.MIN_CHARS);
--key-chars files positions under shorter keys so that shorter matches are seen too.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import sysconfig
import time
import tracemalloc
from pathlib import Path

from redraft.server.core import drafts, keyruns
from redraft.server.core.document import split_lines, utf8_len
from redraft.server.core.drafts import DraftIndex
from redraft.server.core.draftsearch import DraftSource, lookup, recent_source, syntactic_kind, tree_kind_at
from redraft.server.core.languages import new_parser, syntax_for

FILES = ["argparse", "subprocess", "dataclasses", "typing", "enum", "inspect"]
OPEN = ["configparser", "textwrap"]
BEFORE_CHARS = 400


def stdlib_lines(names: list[str], limit: int) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = [root / f"{n}.py" for n in names]
    text = "".join(p.read_text(encoding="utf-8") for p in paths if p.exists())
    lines = split_lines(text)[:limit]
    lines[-1] = lines[-1].rstrip("\n")  # the last line has no terminator
    return lines


def cursors(lines: list[str], n: int, rng: random.Random) -> list[tuple[int, int]]:
    out = []
    while len(out) < n:
        r = rng.randrange(len(lines))
        b = lines[r].rstrip("\n")
        indent = len(b) - len(b.lstrip())
        if len(b) - indent >= 8:
            out.append((r, rng.randrange(indent + 1, len(b))))
    return out


def before_at(offsets: list[int], text: str, row: int, col: int) -> str:
    o = offsets[row] + col
    return text[max(0, o - BEFORE_CHARS):o]


def timed(fn, *args, **kw) -> float:
    t = time.perf_counter()
    fn(*args, **kw)
    return (time.perf_counter() - t) * 1e3


def row_stats(name: str, ms: list[float]) -> dict:
    ms = sorted(ms)
    return {"op": name, "n": len(ms), "median_ms": statistics.median(ms),
            "p95_ms": ms[min(len(ms) - 1, int(0.95 * len(ms)))], "max_ms": ms[-1]}


def accuracy(idx: DraftIndex, lines: list[str], text: str, offsets: list[int], points) -> None:
    bins = [4, 6, 8, 12, 16, 24, 32, 48, 64]
    hits: dict[int, list[bool]] = {b: [] for b in [0] + bins}
    for row, col in points:
        got = idx.find(before_at(offsets, text, row, col), exclude=(row, col), limit=1, min_chars=1)
        if not got:
            hits[0].append(False)
            continue
        m = got[0]
        b = max([x for x in bins if m.matched >= x], default=0)
        hits[b].append(idx.continuation(m.row, m.col) == lines[row].rstrip("\n")[col:])
    print(f"# best match length -> continuation is exactly the rest of the line ({len(points)} cursors)")
    for b, h in hits.items():
        label = "none" if b == 0 else f">={b}"
        print(f"{label:>12}  {len(h):>6} cursors  {100 * sum(h) / max(len(h), 1):5.1f}% exact")
    total = sum(sum(h) for h in hits.values())
    print(f"{'all':>12}  {len(points):>6} cursors  {100 * total / len(points):5.1f}% exact")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=5000)
    ap.add_argument("--cursors", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--accuracy", action="store_true")
    ap.add_argument("--key-chars", type=int, default=drafts.KEY_CHARS)
    args = ap.parse_args(argv)
    drafts.KEY_CHARS = args.key_chars
    if args.key_chars != keyruns.KEY_CHARS:  # runs key on KEY_CHARS characters: file position by position
        drafts.BULK_CHARS = 1 << 62
    rng = random.Random(args.seed)

    lines = stdlib_lines(FILES, args.lines)
    text = "".join(lines)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    t = time.perf_counter()
    idx = DraftIndex(lines)
    build_ms = (time.perf_counter() - t) * 1e3
    tracemalloc.start()
    kept = DraftIndex(lines)
    mem = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    print(f"# bench_drafts  python {sys.version.split()[0]}  {len(lines)} lines, {len(text)} chars: "
          f"index built in {build_ms:.0f} ms, {mem / 2**20:.1f} MiB")

    points = cursors(lines, args.cursors, rng)
    if args.accuracy:
        accuracy(idx, lines, text, offsets, points)
        return 0

    tree = new_parser(syntax_for("python").grammar).parse(text.encode())
    others = [DraftSource(DraftIndex(stdlib_lines([n], 10**9)), "open", f"file:///{n}.py") for n in OPEN]
    kind_at = tree_kind_at(tree, idx)
    rows: dict[str, list[float]] = {k: [] for k in ["find", "recent snippet index", "lookup", "lookup+kind",
                                                    "edit: one char", "edit: Enter", "find after Enter"]}
    for row, col in points:
        before = before_at(offsets, text, row, col)
        rows["find"].append(timed(idx.find, before, exclude=(row, col)))
        lo = max(0, row - 100)  # a region the user was in a moment ago
        t = time.perf_counter()
        recent = recent_source("".join(lines[lo:lo + 30]), "file:///buf.py", lo, (row, col))
        rows["recent snippet index"].append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        lookup(before, [DraftSource(idx, "buffer", "file:///buf.py", (row, col)), recent, *others])
        rows["lookup"].append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        kind = syntactic_kind(tree, row, utf8_len(lines[row][:col]))
        lookup(before, [DraftSource(idx, "buffer", "file:///buf.py", (row, col), kind_at=kind_at), recent,
                        *others], kind=kind)
        rows["lookup+kind"].append((time.perf_counter() - t) * 1e3)

    # Edits leave the document as it was, so every cursor above stays valid.
    for row, col in points[:500]:
        old = lines[row]
        rows["edit: one char"].append(timed(idx.replace_lines, row, 1, [old[:col] + "x" + old[col:]]))
        idx.replace_lines(row, 1, [old])
        rows["edit: Enter"].append(timed(idx.replace_lines, row, 1, [old[:col] + "\n", old[col:]]))
        before = before_at(offsets, text, row, col) + "\n"
        rows["find after Enter"].append(timed(idx.find, before, exclude=(row + 1, 0)))
        idx.replace_lines(row, 2, [old])
    assert idx.text == text

    stats = [row_stats(k, v) for k, v in rows.items()]
    print(f"{'operation':<20}{'n':>6}{'median ms':>11}{'p95 ms':>9}{'max ms':>9}")
    for s in stats:
        print(f"{s['op']:<20}{s['n']:>6}{s['median_ms']:>11.3f}{s['p95_ms']:>9.3f}{s['max_ms']:>9.3f}")
    for s in stats:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in s.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
