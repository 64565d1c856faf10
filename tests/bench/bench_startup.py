"""Start-up benchmark: how soon a fresh `redraft serve` answers, over stdio, as an editor
starting with a file open would see it.

    python tests/bench/bench_startup.py [--runs 5] [--model redraft-diffusion] [--file F]
        [--json tests/bench/results/2026-12-01-startup.json] [--baseline OTHER.json]

Per run, a fresh server process: `initialize`, `initialized`, `didOpen` of the file, and an
inline completion at once (at the end of a line that repeats the start of an earlier one, so
a draft exists). Measured from the moment the process is spawned:

- first answer: the first completion's answer (and whether drafts or the model gave it, from
  `redraft/stats`), also from its `didOpen`;
- first model answer: once the server's `$/progress` for the load ends (the client says
  it takes progress; waiting on that rather than polling sends nothing that could hold the
  load back), a completion in a freshly opened copy of the file, if the model answers it
  (`model_runs` grows);
- loaded: once the model is in, a new document is opened and completed at once, three times:
  the time from `didOpen` to the answer.

Also, each in its own fresh process: importing the LSP server module, and loading the model
(Engine.load plus the server's warm-up). Medians over the runs; the machine is noisy (its load
average is recorded with the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lsprotocol import types as T
from pygls.lsp.client import LanguageClient

from bench_lsp import finish, timed_items

ROOT = Path(__file__).resolve().parents[2]
CAPS = T.ClientCapabilities(
    text_document=T.TextDocumentClientCapabilities(synchronization=T.TextDocumentSyncClientCapabilities(),
                                                   inline_completion=T.InlineCompletionClientCapabilities()),
    window=T.WindowClientCapabilities(work_done_progress=True))
LOADED_DOCS = 3  # documents opened and completed per run once the model is in


def with_cursor(text: str) -> tuple[str, int, int]:
    """The file plus a last line that repeats the first 60% of its longest call line, and the
    cursor at that line's end: a position where a draft from the buffer exists."""
    lines = text.rstrip("\n").split("\n")
    calls = [s for s in lines if "(" in s and s.strip() and not s.lstrip().startswith("#")]
    model = max(calls or lines, key=len)
    cut = model[:max(1, int(len(model) * 0.6))]
    return text.rstrip("\n") + "\n" + cut + "\n", len(lines), len(cut.encode("utf-16-le")) // 2


def open_doc(client: LanguageClient, uri: str, text: str) -> None:
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        text_document=T.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))


async def server_stats(client: LanguageClient) -> dict:
    s = await client.protocol.send_request_async("redraft/stats", None)
    return s._asdict() if hasattr(s, "_asdict") else dict(s)


def progress_watch(client: LanguageClient) -> asyncio.Event:
    """Set when a `$/progress` ends (the model load's)."""
    ended = asyncio.Event()

    @client.feature(T.WINDOW_WORK_DONE_PROGRESS_CREATE)
    def create(params):
        return None

    @client.feature(T.PROGRESS)
    def progress(params):
        value = params.value
        kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
        if kind == "end":
            ended.set()
    return ended


async def one_run(args, text: str, row: int, col: int) -> dict:
    client = LanguageClient("redraft-bench", "0")
    ended = progress_watch(client)
    cmd = [sys.executable, "-m", "redraft.server.cli", "serve"] + (["--model", args.model] if args.model else [])
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    t0 = time.perf_counter()
    await client.start_io(*cmd, env=env)

    def since_start() -> float:
        return (time.perf_counter() - t0) * 1000

    await client.initialize_async(T.InitializeParams(capabilities=CAPS, initialization_options={}))
    client.initialized(T.InitializedParams())
    initialized_ms = since_start()
    uri = "file:///bench/startup.py"
    opened = time.perf_counter()
    open_doc(client, uri, text)
    ms, outcome, items = await timed_items(client, uri, row, col)
    first_ms = since_start()
    first_from_open = (time.perf_counter() - opened) * 1000
    s = await server_stats(client)
    first_by = "model" if s.get("model_runs", 0) else ("drafts" if items else "nothing")

    # The first answer the model gives, once the load is over: a fresh document (no type-through).
    model_ms = ready_ms = None
    if s.get("model_state") != "ready":
        try:
            await asyncio.wait_for(ended.wait(), args.max_wait)
        except asyncio.TimeoutError:
            pass
    ready_ms = since_start()
    open_doc(client, "file:///bench/startup-model.py", text)
    await timed_items(client, "file:///bench/startup-model.py", row, col)
    if (await server_stats(client)).get("model_runs", 0):
        model_ms = since_start()

    loaded = []
    for i in range(LOADED_DOCS):
        u = f"file:///bench/loaded-{i}.py"
        t = time.perf_counter()
        open_doc(client, u, text)
        _, outcome_i, _ = await timed_items(client, u, row, col)
        loaded.append({"ms": round((time.perf_counter() - t) * 1000, 1), "outcome": outcome_i})
        await asyncio.sleep(0.1)
    cpu, peak, raw = await finish(client, client._server.pid)
    stats = raw._asdict() if hasattr(raw, "_asdict") else dict(raw)
    return {"initialized_ms": round(initialized_ms, 1), "first_answer_ms": round(first_ms, 1),
            "first_answer_after_open_ms": round(first_from_open, 1), "first_answer_by": first_by,
            "first_answer_outcome": outcome,
            "first_model_answer_ms": None if model_ms is None else round(model_ms, 1),
            "load_over_ms": round(ready_ms, 1),
            "loaded_open_to_answer": loaded, "server_cpu_s": round(cpu, 2), "server_peak_mib": round(peak),
            "model_state": stats.get("model_state"), "answered_loading": stats.get("answered_loading")}


def timed_python(code: str) -> float:
    """Milliseconds a fresh interpreter takes to run `code`, which prints its own figure."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    return float(out.stdout.strip().splitlines()[-1])


IMPORT = ("import time; t = time.perf_counter(); import redraft.server.lsp.server; "
          "print((time.perf_counter() - t) * 1000)")
LOAD = ("import time; t = time.perf_counter(); from redraft.server.core.inference import Inference; "
        "i = Inference(); e = i.load({model!r}, 'cpu', 'auto').result(); assert e is None, e; "
        "print((time.perf_counter() - t) * 1000)")


def median(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 1) if xs else None


def summarize(runs: list[dict], imports: list[float], loads: list[float]) -> dict:
    return {
        "first_answer_ms": median([r["first_answer_ms"] for r in runs]),
        "first_answer_after_open_ms": median([r["first_answer_after_open_ms"] for r in runs]),
        "first_answer_by": [r["first_answer_by"] for r in runs],
        "first_model_answer_ms": median([r["first_model_answer_ms"] for r in runs]),
        "loaded_open_to_answer_ms": median([d["ms"] for r in runs for d in r["loaded_open_to_answer"]]),
        "initialized_ms": median([r["initialized_ms"] for r in runs]),
        "import_server_ms": median(imports),
        "load_model_ms": median(loads),
    }


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--model", default=None, help="the server's --model (default: the shipped default)")
    ap.add_argument("--file", default=str(ROOT / "server" / "core" / "history.py"))
    ap.add_argument("--max-wait", type=float, default=60.0, help="seconds to wait for a model answer")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--note", default=None, help="a sentence kept with the figures (the conditions)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a JSON this script wrote for another tree (e.g. with PYTHONPATH pointing at an older "
                         "checkout), embedded as `baseline` for comparison")
    args = ap.parse_args(argv)
    text, row, col = with_cursor(Path(args.file).read_text(encoding="utf-8"))
    load_before = os.getloadavg()
    runs, imports, loads = [], [], []
    for i in range(args.runs):
        runs.append(asyncio.run(one_run(args, text, row, col)))
        imports.append(timed_python(IMPORT))
        loads.append(timed_python(LOAD.format(model=args.model)))
        r = runs[-1]
        print(f"run {i + 1}: first answer {r['first_answer_ms']:.0f} ms from start "
              f"({r['first_answer_after_open_ms']:.0f} ms after didOpen, {r['first_answer_by']}), "
              f"first model answer {r['first_model_answer_ms']} ms, loaded didOpen->answer "
              f"{[d['ms'] for d in r['loaded_open_to_answer']]} ms; import {imports[-1]:.0f} ms, "
              f"load {loads[-1]:.0f} ms", flush=True)
    medians = summarize(runs, imports, loads)
    print(json.dumps(medians, indent=1))
    if args.json is not None:
        out = {"date": datetime.date.today().isoformat(), "commit": git_commit(),
               "command": "python tests/bench/bench_startup.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "machine": {"cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                           "load_average_after": [round(x, 2) for x in os.getloadavg()],
                           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                           # 1: the tree's own modules are compiled from source at every start
                           "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE"),
                           "PYTHONPATH": os.environ.get("PYTHONPATH")},
               "note": args.note,
               "model": args.model or "redraft-diffusion (default)", "file": os.path.relpath(args.file, ROOT),
               "cursor": {"line": row, "character": col},
               "targets": {"first_answer_after_open_ms": 500, "first_model_answer_ms": 2500,
                           "loaded_open_to_answer_ms": 150},
               "medians": medians, "runs": runs, "import_server_ms": imports, "load_model_ms": loads}
        if args.baseline is not None:
            base = json.loads(args.baseline.read_text(encoding="utf-8"))
            out["baseline"] = {k: base.get(k) for k in ("commit", "machine", "medians")}
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
