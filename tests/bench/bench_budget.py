"""Time-budget benchmark: cold and warm latency per language, on a quiet machine and beside
CPU-saturating processes.

    python tests/bench/bench_budget.py --files DIR [--cases 12] [--busy 2] [--max-time 500]
        [--langs python,typescript,go,rust] [--seed 0] [--json OUT]

DIR holds held-out source files (searched recursively, by extension: .py .ts .go .rs). For
each language, --cases cursors are drawn from its files (seeded): a line with at least 12
characters of code, the cursor a third of the way into it, the rest of the line removed.
Each case goes to one real `redraft serve` process over stdio as a new document: the first
inlineCompletion request there is the cold one; then one keystroke (the first removed
character) and a second request, the warm one; then didClose (`answered`: the cold requests
that got an item). With --busy N, N processes
spinning on a CPU (`while 1: pass`) run beside the server for the whole run (and are ended
after it). Latency is the client's round trip (the budget counts from the request's
arrival, so a request may not take longer than max_time plus the time the answer takes to
cross the pipe): p50 is the median, p95 the nearest rank, max the slowest. The server's
`budget_expired` counter says how many requests its budget cut short, and its own
`engine_latency_ms` (arrival to answer, on the server) is reported beside. Figures from one run
on a shared machine: noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
from pathlib import Path

from lsprotocol import types as T

from bench_lsp import busy, finish, started, timed_items  # this folder is on sys.path when run as a script

LANGS = {"python": ".py", "typescript": ".ts", "go": ".go", "rust": ".rs"}
MIN_CODE = 12


def draw(files: list[Path], n: int, rng: random.Random) -> list[tuple[Path, str, int, int]]:
    """n cases (file, text, row, col) from the files: the cursor a third into a line of code."""
    spots = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for row, line in enumerate(text.split("\n")):
            code = line.strip()
            if len(code) >= MIN_CODE and not code.startswith(("//", "#", "/*", "*")):
                indent = len(line) - len(line.lstrip())
                spots.append((path, text, row, indent + len(code) // 3))
    return rng.sample(spots, min(n, len(spots)))


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))] if s else 0.0


async def run_case(client, uri: str, lang: str, text: str, row: int, col: int) -> tuple[float, float, bool]:
    """(cold ms, warm ms, whether the cold request got an item) of one case."""
    lines = text.split("\n")
    line = lines[row]
    lines[row] = line[:col]
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, lang, 1, "\n".join(lines))))
    cold, kind, _ = await timed_items(client, uri, row, col)
    ch = line[col]
    client.text_document_did_change(T.DidChangeTextDocumentParams(
        T.VersionedTextDocumentIdentifier(uri=uri, version=2),
        [T.TextDocumentContentChangePartial(range=T.Range(T.Position(row, col), T.Position(row, col)), text=ch)]))
    warm, _, _ = await timed_items(client, uri, row, col + 1)
    client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))
    return cold, warm, kind == "item"


async def run(args, cases: dict) -> dict:
    client = await started({"maxTime": args.max_time})
    await run_case(client, "file:///bench/warmup.py", "python", "def add(a, b):\n    return a + b\n", 1, 10)
    out = {}
    for lang, picked in cases.items():
        times = [await run_case(client, f"file:///bench/{lang}/{i}{LANGS[lang]}", lang, text, row, col)
                 for i, (_, text, row, col) in enumerate(picked)]
        cold, warm = [t[0] for t in times], [t[1] for t in times]
        out[lang] = {"cases": len(times), "cold_p50": statistics.median(cold), "cold_p95": pct(cold, 0.95),
                     "warm_p50": statistics.median(warm), "warm_p95": pct(warm, 0.95), "max": max(cold + warm),
                     "answered": sum(t[2] for t in times)}
    _, _, stats = await finish(client, client._server.pid)
    out["budget_expired"], out["requests"] = stats.budget_expired, stats.requests
    lat = stats.engine_latency_ms  # the server's: arrival to answer, requests that waited for the engine
    out["server_engine_ms"] = {"p50": lat.p50, "p95": lat.p95, "count": lat.count}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", required=True)
    ap.add_argument("--cases", type=int, default=12, help="cursors per language")
    ap.add_argument("--busy", type=int, default=0, help="CPU-spinning processes beside the server")
    ap.add_argument("--max-time", type=int, default=500)
    ap.add_argument("--langs", default=",".join(LANGS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    cases = {lang: draw(sorted(Path(args.files).rglob(f"*{LANGS[lang]}")), args.cases, rng)
             for lang in args.langs.split(",")}
    with busy(args.busy):
        out = asyncio.run(run(args, cases))
    out.update(busy=args.busy, max_time=args.max_time)
    print(f"maxTime {args.max_time} ms, {args.busy} busy processes; {out['budget_expired']} of "
          f"{out['requests']} requests cut by the budget; server side (arrival to answer) p50 "
          f"{out['server_engine_ms']['p50']:.0f} ms, p95 {out['server_engine_ms']['p95']:.0f} ms")
    print(f"{'language':<11} {'cases':>5} {'answered':>8} {'cold p50':>9} {'cold p95':>9} {'warm p50':>9} "
          f"{'warm p95':>9} {'max':>7}")
    for lang in cases:
        r = out[lang]
        print(f"{lang:<11} {r['cases']:>5} {r['answered']:>8} {r['cold_p50']:>9.0f} {r['cold_p95']:>9.0f} "
              f"{r['warm_p50']:>9.0f} "
              f"{r['warm_p95']:>9.0f} {r['max']:>7.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
