"""Unseen-code benchmark: what a user gets through LSP on held-out files, beside the plain copy.

    python tests/bench/bench_unseen.py --files /work/corpus/heldout [--cases 200] [--seed 0]
        [--model redraft-diffusion] [--settings '{"cache": false}'] [--json OUT]
        [--cases-json CASES]

Cases are `rest_of_line` samples drawn by the infill evaluation's own sampler
(server/eval/samples.py) from the *.py files under --files. Each case goes to a real
`redraft serve` process over stdio as a new document (its own uri) holding the file with the
rest of the cursor's line removed. The first inlineCompletion request at the cursor is the
cold one (a document the server has not seen); then one keystroke (didChange inserting the
first expected character) and a second request, the warm one; then didClose. The answer's
first item (insertText replacing its range) gives what the line would read after the cursor,
scored against the removed text with the evaluation's metrics (server/eval/metrics.py: exact
match, correct prefix); the warm answer is scored against the removed text less its first
character. The plain-copy baseline (server/eval/baseline.py: the longest earlier match in the
same file, continued and post-processed, no model) answers the same cases in the same run,
scored the same way, and the cold figures are reported over it (exact/copy, prefix/copy).

--autoclose models an editor that closes brackets and quotes as they are typed (VS Code's
default): the cursor line holds, right of the cursor, the closers of what the text before it
left open on that line (`foo(a, "b` -> `")`), a keystroke keeps them consistent, and an answer
reads as the line would after its edit (its text replacing its range, the closers it did not
replace after it). Cases whose removed text is nothing but those closers are left out (nothing
to type). The copy baseline answers the same autoclosed documents.

--settings is passed as initializationOptions; a setting the server rejects is reported in a
window/showMessage, listed under the table (with the server's last stderr lines), and the run
goes on with the server's defaults.
One untimed request in a throwaway document runs first, once the model is loaded, so the
first case does not pay one-time costs. Latency is the client's round trip: p50 is the
median, p95 the nearest rank, as bench_lsp reports them. Medians from one run; the machine is
noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from lsprotocol import types as T
from pygls.lsp.client import LanguageClient

from bench_lsp import CAPS, finish, proc_stats, timed_items  # this folder is on sys.path when run as a script
from redraft.server.core.context import AskedMode, Mode, text_snapshot
from redraft.server.core.languages import CLOSERS, OPEN_CLOSE, QUOTES, canonical
from redraft.server.core.settings import parse
from redraft.server.eval import metrics
from redraft.server.eval.baseline import copy_answer, ratio
from redraft.server.eval.infill import snapshot
from redraft.server.eval.samples import SPAN_BUDGET, Sample, Source, draw, load_sources

KIND = "rest_of_line"
WARMUP = "def warm_up(a, b):\n    return a + b\n\nvalue = warm_up(1, 2)\n"  # one untimed case, first


@dataclass
class Case:
    """One sample's LSP round: what the line reads after the cursor, cold and warm, and the ms."""

    sample: Sample
    cold: str
    cold_ms: float
    cold_outcome: str
    warm: str | None = None  # None when there was no keystroke to type
    warm_ms: float | None = None
    warm_outcome: str | None = None
    copy: str = ""  # the plain-copy baseline's text at the cold cursor


def utf16(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def char_index(line: str, units: int) -> int:
    """The character index of a UTF-16 column in `line` (clamped to the line's end)."""
    at = 0
    for i, ch in enumerate(line):
        if at >= units:
            return i
        at += utf16(ch)
    return len(line)


def after_cursor(line: str, col: int, item: T.InlineCompletionItem) -> str:
    """What `line` reads right of character `col` once the item's insertText replaces its range."""
    text = item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value
    if item.range is None:
        start = end = col
    else:
        start, end = char_index(line, item.range.start.character), char_index(line, item.range.end.character)
    return (line[:start] + text + line[end:])[col:].split("\n", 1)[0]


async def ask(client, uri: str, line: str, row: int, col: int) -> tuple[float, str, str]:
    """(ms, outcome, what the line would read after the cursor) of one request at (row, col);
    "" when nothing is shown."""
    ms, outcome, items = await timed_items(client, uri, row, utf16(line[:col]))
    return ms, outcome, after_cursor(line, col, items[0]) if items else ""


def autoclosed(left: str) -> str:
    """The closers an auto-closing editor would hold right of a cursor after `left` (the cursor
    line's text before it): one per bracket or quote opened on the line and not closed."""
    stack: list[str] = []
    quote = ""
    escaped = False
    for ch in left:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch == "#":
            break  # a comment: nothing after it is closed for you
        elif ch in QUOTES:
            quote = ch
        elif ch in OPEN_CLOSE:
            stack.append(OPEN_CLOSE[ch])
        elif ch in CLOSERS and stack and stack[-1] == ch:
            stack.pop()
    return quote + "".join(reversed(stack))


def language_of(path: str) -> str:
    """The LSP language id a client sends for `path` (by its extension; Python when unknown)."""
    return canonical(None, path) or "python"


async def run_case(client, uri: str, source: Source, sample: Sample, autoclose: bool = False) -> Case:
    """Open the case's document, ask cold, type the first expected character, ask warm, close."""
    prefix, suffix = sample.split(source.text)
    row, col = sample.line, sample.col
    left = prefix[prefix.rfind("\n") + 1:]
    right = autoclosed(left) if autoclose else ""
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        text_document=T.TextDocumentItem(uri=uri, language_id=language_of(source.path), version=1, text=prefix + right + suffix)))
    cold_ms, cold_outcome, cold = await ask(client, uri, left + right, row, col)
    case = Case(sample, cold, cold_ms, cold_outcome)
    if sample.expected:
        ch = sample.expected[0]
        typed = autoclosed(left + ch) if autoclose else ""  # the editor's closers after the keystroke
        here = T.Position(line=row, character=utf16(left))
        gone = T.Position(line=row, character=utf16(left + right))
        client.text_document_did_change(T.DidChangeTextDocumentParams(
            text_document=T.VersionedTextDocumentIdentifier(version=2, uri=uri),
            content_changes=[T.TextDocumentContentChangePartial(range=T.Range(start=here, end=gone), text=ch + typed)]))
        case.warm_ms, case.warm_outcome, case.warm = await ask(client, uri, left + ch + typed, row, col + 1)
    client.text_document_did_close(T.DidCloseTextDocumentParams(text_document=T.TextDocumentIdentifier(uri=uri)))
    return case


def copy_text(source: Source, sample: Sample, config, autoclose: bool = False) -> str:
    """What the line reads after the cursor with the copy baseline's answer ("" when it
    abstains), in the same document the server saw."""
    snap = snapshot(source, sample, config)[0]
    right = ""
    if autoclose:
        prefix, suffix = sample.split(source.text)
        right = autoclosed(prefix[prefix.rfind("\n") + 1:])
        kind_cfg = replace(config, line_tokens=SPAN_BUDGET[KIND], block_tokens=SPAN_BUDGET[KIND])
        snap = text_snapshot(snap.uri, prefix + right + suffix, len(prefix), kind_cfg, language_of(source.path),
                             asked=AskedMode(Mode.LINE, f"eval {KIND}"))[0]
    got = copy_answer(snap, source.text[:sample.start], right + source.text[sample.end:])
    return "" if got.edit is None else got.edit.text + right[got.edit.replace:]


async def start(args, options: dict) -> tuple[LanguageClient, list[str], list[str]]:
    """A `redraft serve` process, initialized with `options`, its model loaded; the client, the
    window/showMessage texts it sends and the server's stderr lines (both kept as they come)."""
    client = LanguageClient("redraft-bench", "0")
    messages: list[str] = []
    client.feature(T.WINDOW_SHOW_MESSAGE)(lambda params: messages.append(params.message))
    cmd = [sys.executable, "-m", "redraft.server.cli", "serve"] + (["--model", args.model] if args.model else [])
    await client.start_io(*cmd)
    stderr: list[str] = []

    async def drain():  # an unread stderr pipe would stall a chatty server
        async for raw in client._server.stderr:
            stderr.append(raw.decode("utf-8", "replace").rstrip())
    asyncio.ensure_future(drain())
    root = Path(args.files).resolve().as_uri() if args.workspace else None
    await client.initialize_async(T.InitializeParams(capabilities=CAPS, initialization_options=options,
                                                     root_uri=root))
    client.initialized(T.InitializedParams())
    for _ in range(1200):  # cold = the first request in a new document, not the model load (nor indexing)
        st = await client.protocol.send_request_async("redraft/stats", None)
        if st.model is not None and (root is None or (st.workspace is not None and st.workspace.ready)):
            break
        await asyncio.sleep(0.05)
    else:
        messages.append("model (or workspace) not reported ready after 60 s; going on")
    return client, messages, stderr


async def bench(args, options: dict, sources: list[Source], samples: list[Sample]) -> dict:
    client, messages, stderr = await start(args, options)
    pid = client._server.pid
    at = WARMUP.index("m_up(1, 2)")
    await run_case(client, "file:///bench/unseen/warm-up.py", Source("warm-up.py", WARMUP),
                   Sample(KIND, 0, 3, at - WARMUP.rfind("\n", 0, at) - 1, at, at + 10, "m_up(1, 2)"))
    cpu0, _ = proc_stats(pid)
    cases = []
    for i, sample in enumerate(samples):
        src = sources[sample.file]
        # With the workspace, the case is the file itself (the workspace's copy of it, which still
        # holds the removed text, is never searched for its own document).
        uri = (Path(args.files).resolve() / src.path).as_uri() if args.workspace else \
            f"file:///bench/unseen/{i:04d}/{src.path}"
        cases.append(await run_case(client, uri, src, sample, args.autoclose))
    cpu1, peak, stats = await finish(client, pid)
    return {"cases": cases, "cpu_s": cpu1 - cpu0, "peak_mib": peak, "messages": messages,
            "stderr": stderr, "type_through": stats.type_through, "abstained": stats.abstained,
            "sources": dict(stats.sources._asdict()) if stats.sources is not None else {}}


def pct(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile, as bench_lsp reports p95; None for no values."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else None


def scores(texts: list[str], expected: list[str]) -> dict:
    """answered (count of non-empty texts), exact and prefix (means) of texts against expected."""
    n = len(texts)
    cut = [metrics.cut(KIND, t) for t in texts]
    return {"answered": sum(bool(t) for t in texts),
            "exact": round(sum(metrics.exact_match(KIND, c, e) for c, e in zip(cut, expected)) / n, 4) if n else None,
            "prefix": round(sum(metrics.correct_prefix(c, e) for c, e in zip(cut, expected)) / n, 4) if n else None}


def latency(ms: list[float]) -> dict:
    return {"p50": round(statistics.median(ms), 1) if ms else None, "p95": None if not ms else round(pct(ms, .95), 1)}


def figures(cases: list[Case]) -> dict:
    """The run's figures: cold, warm and copy scores, latency, and cold over copy."""
    cold = scores([c.cold for c in cases], [c.sample.expected for c in cases])
    typed = [c for c in cases if c.warm is not None]
    warm = scores([c.warm for c in typed], [c.sample.expected[1:] for c in typed])
    copy = scores([c.copy for c in cases], [c.sample.expected for c in cases])
    return {
        "n": len(cases), **cold,
        "cold_ms": latency([c.cold_ms for c in cases if c.cold_outcome != "cancelled"]),
        "warm_ms": latency([c.warm_ms for c in typed if c.warm_outcome != "cancelled"]),
        "cancelled": sum(c.cold_outcome == "cancelled" for c in cases) + sum(c.warm_outcome == "cancelled" for c in typed),
        "warm": {"n": len(typed), **warm},
        "copy": copy,
        "vs_copy": {"exact": ratio(cold["exact"], copy["exact"]), "prefix": ratio(cold["prefix"], copy["prefix"])},
    }


def git_commit() -> str:
    here = Path(__file__).resolve().parent
    run = lambda *a: subprocess.run(["git", *a], cwd=here, capture_output=True, text=True).stdout.strip()  # noqa: E731
    commit = run("rev-parse", "HEAD") or "unknown"
    return commit + ("-dirty" if run("status", "--porcelain", "--untracked-files=no") else "")


def table(out: dict) -> str:
    """The figures as a small table: the server cold and warm, the copy baseline, the ratios."""
    f = out["figures"]

    def cell(v, fmt):
        return "-" if v is None else format(v, fmt)
    rows = [("", "n", "answered", "exact", "prefix", "p50_ms", "p95_ms"),
            ("server cold", str(f["n"]), str(f["answered"]), cell(f["exact"], ".3f"), cell(f["prefix"], ".3f"),
             cell(f["cold_ms"]["p50"], ".1f"), cell(f["cold_ms"]["p95"], ".1f")),
            ("server warm", str(f["warm"]["n"]), str(f["warm"]["answered"]), cell(f["warm"]["exact"], ".3f"),
             cell(f["warm"]["prefix"], ".3f"), cell(f["warm_ms"]["p50"], ".1f"), cell(f["warm_ms"]["p95"], ".1f")),
            ("copy", str(f["n"]), str(f["copy"]["answered"]), cell(f["copy"]["exact"], ".3f"),
             cell(f["copy"]["prefix"], ".3f"), "", "")]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"{out['files']} files, {f['n']} {KIND} cases, seed {out['seed']}, model {out['model'] or 'default'}, "
             f"settings {json.dumps(out['settings'])}" + (", editor auto-closing" if out.get("autoclose") else "")]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    vs = f["vs_copy"]
    lines.append(f"cold over copy: exact {cell(vs['exact'], '.2f')}x, prefix {cell(vs['prefix'], '.2f')}x "
                 f"(warm scored against the expected text less the typed character)")
    lines.append(f"server: type-through {out['server']['type_through']}, abstained {out['server']['abstained']}, "
                 f"sources {out['server']['sources']}, cancelled {f['cancelled']}, "
                 f"CPU {out['server']['cpu_s']:.1f} s, peak RSS {out['server']['peak_mib']:.0f} MiB")
    lines += [f"server message: {m}" for m in out["messages"]]
    lines += [f"server stderr: {m}" for m in out["stderr"][-5:]]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", required=True, help="folder of held-out source files")
    ap.add_argument("--ext", default=".py", help="comma-separated file name endings (default .py; .ts, .go, .rs ...)")
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None)
    ap.add_argument("--settings", type=json.loads, default={}, help="initializationOptions, a JSON object")
    ap.add_argument("--workspace", action="store_true",
                    help="initialize with --files as the root folder (drafts from the other files too); "
                         "each case is then opened under its file's own path")
    ap.add_argument("--autoclose", action="store_true",
                    help="an editor that closes brackets and quotes as they are typed (see above)")
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--cases-json", default=None,
                    help="write every case here (file, cursor, expected, cold / warm / copy texts, ms)")
    args = ap.parse_args(argv)
    sources, _ = load_sources(Path(args.files), tuple(e if e.startswith(".") else "." + e
                                                      for e in args.ext.split(",") if e))
    samples = draw(sources, KIND, args.cases, args.seed)
    if args.autoclose:  # nothing to type where the editor already closed all that was removed
        samples = [s for s in samples if s.expected.rstrip() != autoclosed(_left(sources, s))]
    run = asyncio.run(bench(args, args.settings, sources, samples))
    config, _ = parse(args.settings)  # the baseline's post-processing under the same settings
    for case in run["cases"]:
        case.copy = copy_text(sources[case.sample.file], case.sample, config, args.autoclose)
    out = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": git_commit(),
           "model": args.model, "settings": args.settings, "workspace": args.workspace,
           "autoclose": args.autoclose, "files": len(sources), "seed": args.seed, "kind": KIND,
           "figures": figures(run["cases"]), "messages": run["messages"], "stderr": run["stderr"][-20:],
           "server": {k: run[k] for k in ("cpu_s", "peak_mib", "type_through", "abstained", "sources")}}
    print(table(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    if args.cases_json:
        Path(args.cases_json).write_text(json.dumps([case_record(sources, c) for c in run["cases"]], indent=1) + "\n",
                                         encoding="utf-8")
    return 0


def case_record(sources: list[Source], c: Case) -> dict:
    """One case as the server and the copy baseline answered it, for reading answers one by one."""
    s = c.sample
    return {"file": sources[s.file].path, "line": s.line, "col": s.col, "expected": s.expected,
            "cold": c.cold, "cold_outcome": c.cold_outcome, "cold_ms": round(c.cold_ms, 1),
            "warm": c.warm, "warm_outcome": c.warm_outcome,
            "warm_ms": None if c.warm_ms is None else round(c.warm_ms, 1), "copy": c.copy}


def _left(sources: list[Source], sample: Sample) -> str:
    text = sources[sample.file].text
    return text[text.rfind("\n", 0, sample.start) + 1:sample.start]


if __name__ == "__main__":
    sys.exit(main())
