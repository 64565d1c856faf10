"""Next edits after a rename, on a quiet machine and beside CPU-saturating processes.

    python tests/bench/bench_rename_busy.py --files DIR [--cases 20] [--busy 2] [--max-time 500]
        [--within 2000] [--seed 0] [--json OUT]

DIR holds Python files (searched recursively). Each case is a function of one of them whose
parameter is used at least twice in its body: the file is opened in one real `redraft serve`
over stdio (default settings but `maxTime`, as a user has them, so next edits are computed
ahead once typing pauses), the parameter is renamed at the definition in one change, and,
after the editor's 0.3 s pause, the client asks for `textDocument/copilotInlineEdit` as VS Code
does, again every 250 ms while the answer is empty, until `--within` ms after the change. A
case is delivered when an answer within that time has edits and each of them puts the new
name for the old one and changes nothing else (an edit may cover several uses on a line, or
one inside an f-string); its time is from the change to that answer. With --busy N, N
processes spinning on a CPU (`while 1: pass`) run beside the server for the whole run. The
server's `edits_late` and `edits_dropped` counters are reported beside. Figures from one run
on a shared machine: noisy.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path

from lsprotocol import types as T

from bench_lsp import busy, finish, started  # this folder is on sys.path when run as a script

PAUSE_S, POLL_S = 0.3, 0.25


def renames(path: Path) -> list[tuple[str, int, int, str, list[tuple[int, int]]]]:
    """(text, row, col, name, uses) for each parameter used ≥ 2 times in its function's body."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    lines = text.split("\n")
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(lines[fn.lineno - 1]) > 200:
            continue
        for arg in fn.args.args:
            name = arg.arg
            if name in ("self", "cls") or len(name) < 3 or arg.lineno != fn.lineno:
                continue
            uses = [(n.lineno - 1, n.col_offset) for stmt in fn.body for n in ast.walk(stmt)
                    if isinstance(n, ast.Name) and n.id == name]
            if len(uses) >= 2 and all(lines[r][c:c + len(name)] == name for r, c in uses):
                out.append((text, arg.lineno - 1, arg.col_offset, name, uses))
    return out


def draw(files: list[Path], n: int, rng: random.Random) -> list:
    spots = [case for path in files for case in renames(path)]
    return rng.sample(spots, min(n, len(spots)))


async def run_case(client, uri: str, case, within_s: float) -> tuple[bool, float | None, int]:
    """(delivered, ms from the change to the answer, edits proposed) for one rename."""
    text, row, col, name, _ = case
    new = name + "_value"
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, "python", 1, text)))
    await asyncio.sleep(0.1)
    t0 = time.perf_counter()
    client.text_document_did_change(T.DidChangeTextDocumentParams(
        T.VersionedTextDocumentIdentifier(uri=uri, version=2),
        [T.TextDocumentContentChangePartial(range=T.Range(T.Position(row, col), T.Position(row, col + len(name))),
                                            text=new)]))
    await asyncio.sleep(PAUSE_S)
    got = []
    while time.perf_counter() - t0 < within_s:
        result = await client.protocol.send_request_async("textDocument/copilotInlineEdit", {
            "textDocument": {"uri": uri, "version": 2}, "position": {"line": row, "character": col + len(new)},
            "context": {"triggerKind": 2}})
        got = list(result.edits) if result is not None else []
        if got:
            break
        await asyncio.sleep(POLL_S)
    ms = (time.perf_counter() - t0) * 1000
    client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))
    lines = text.split("\n")
    word = re.compile(rf"\b{re.escape(name)}\b")

    def renames_only(e) -> bool:  # the edit puts the new name for the old one, and changes nothing else
        r = e.range
        if r.start.line != r.end.line:
            return False
        old = lines[r.start.line][r.start.character:r.end.character]
        return word.search(old) is not None and word.sub(new, old) == e.text
    right = bool(got) and ms <= within_s * 1000 and all(renames_only(e) for e in got)
    return right, ms if got else None, len(got)


async def run(args, cases: list) -> dict:
    client = await started({"maxTime": args.max_time})
    results = [await run_case(client, f"file:///bench/rename/{i}.py", case, args.within / 1000)
               for i, case in enumerate(cases)]
    _, _, stats = await finish(client, client._server.pid)
    times = [ms for ok, ms, _ in results if ok]
    return {"cases": len(results), "delivered": sum(ok for ok, _, _ in results),
            "answered_wrong": sum(1 for ok, ms, n in results if not ok and n),
            "ms_p50": statistics.median(times) if times else None, "ms_max": max(times) if times else None,
            "edits_late": getattr(stats, "edits_late", None), "edits_dropped": getattr(stats, "edits_dropped", None)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", required=True)
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--busy", type=int, default=0, help="CPU-spinning processes beside the server")
    ap.add_argument("--max-time", type=int, default=500)
    ap.add_argument("--within", type=int, default=2000, help="ms from the change a delivery may take")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    cases = draw(sorted(Path(args.files).rglob("*.py")), args.cases, random.Random(args.seed))
    with busy(args.busy):
        out = asyncio.run(run(args, cases))
    out.update(busy=args.busy, max_time=args.max_time, within_ms=args.within)
    print(f"{args.busy} busy processes: {out['delivered']} of {out['cases']} renames got their edits within "
          f"{args.within} ms (p50 {out['ms_p50']} ms, max {out['ms_max']} ms); {out['answered_wrong']} answered "
          f"otherwise; edits_late {out['edits_late']}, edits_dropped {out['edits_dropped']}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
