"""A long session through the real `redraft serve`: memory and latency over time.

    python tests/bench/bench_soak.py [--minutes 30] [--requests N] [--interval-ms 60]
        [--model redraft-diffusion] [--out tests/bench/out/soak]

Types through copies of a real module (redraft's own server/core/context.py) one character
every `--interval-ms`, an inline completion request after each keystroke, next-edit
requests now and then, opening a fresh document every 2,000 requests and closing the old
one, for `--minutes` (or until `--requests`). Every 250 requests it records the server's
resident memory (VmRSS from /proc) and the window's answer latency p50 / p95. Writes
OUT.json (the series; memory growth after the warm-up of the first 1,000 requests, and over
the last 10,000 when the run is longer) and OUT.png (memory and latency against time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "server" / "lsp")]

import numpy as np  # noqa: E402
from lsprotocol import types as T  # noqa: E402
from pytest_lsp import ClientServerConfig  # noqa: E402

from lsp_helpers import CAPABILITIES, completion_params, plain  # noqa: E402

WINDOW = 250
WARM_UP = 1000
DOC_REQUESTS = 2000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _open(client, uri: str, text: str) -> None:
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, "python", 1, text)))


async def soak(args) -> dict:
    cmd = [sys.executable, "-m", "redraft.server.cli", "serve"] + (["--model", args.model] if args.model else [])
    client = await ClientServerConfig(server_command=cmd).start()
    await client.initialize_session(T.InitializeParams(capabilities=CAPABILITIES, initialization_options={}))
    pid = client._server.pid
    source = (ROOT / "server" / "core" / "context.py").read_text()
    lines = source.split("\n")
    series, window, n, t0 = [], [], 0, time.perf_counter()
    uri, version, row = None, 1, 0
    while True:
        if n % DOC_REQUESTS == 0:  # a fresh document: the old one closes
            if uri is not None:
                client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))
            uri, version = f"file:///soak/doc{n // DOC_REQUESTS}.py", 1
            head = "\n".join(lines[:40]) + "\n"
            _open(client, uri, head)
            row, col, src_row, src_col = 40, 0, 40, 0
        target = lines[src_row % len(lines)]
        ch = target[src_col] if src_col < len(target) else "\n"
        version += 1
        client.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(version, uri),
            [T.TextDocumentContentChangePartial(T.Range(T.Position(row, col), T.Position(row, col)), ch)]))
        if ch == "\n":
            row, col, src_row, src_col = row + 1, 0, src_row + 1, 0
        else:
            col, src_col = col + 1, src_col + 1
        t = time.perf_counter()
        await client.text_document_inline_completion_async(completion_params(uri, row, col))
        window.append((time.perf_counter() - t) * 1000)
        if n % 97 == 0:
            await client.protocol.send_request_async("textDocument/copilotInlineEdit",
                                                     {"textDocument": {"uri": uri, "version": version}})
        n += 1
        if n % WINDOW == 0:
            series.append({"requests": n, "seconds": round(time.perf_counter() - t0, 1), "rss_mb": round(rss_mb(pid), 1),
                           "p50_ms": round(float(np.percentile(window, 50)), 2),
                           "p95_ms": round(float(np.percentile(window, 95)), 2)})
            print(json.dumps(series[-1]), file=sys.stderr)
            window = []
        if (args.requests and n >= args.requests) or time.perf_counter() - t0 >= args.minutes * 60:
            break
        await asyncio.sleep(args.interval_ms / 1000)
    stats = plain(await client.protocol.send_request_async("redraft/stats", {}))
    await client.shutdown_session()
    return {"requests": n, "minutes": round((time.perf_counter() - t0) / 60, 1), "interval_ms": args.interval_ms,
            "rss_growth_after_warm_up_mb": growth(series, WARM_UP),
            "rss_growth_last_10000_mb": growth(series, n - 10_000) if n > 10_000 + WARM_UP else None,
            "rss_peak_per_document_mb": peaks(series),
            "rss_mb_first": series[0]["rss_mb"] if series else None,
            "rss_mb_last": series[-1]["rss_mb"] if series else None, "errors": stats["errors"],
            "peak_in_flight": stats["peak_in_flight"], "model": stats["model"], "series": series}


def growth(series: list[dict], after: int) -> float | None:
    """Resident memory at the end minus at the first window past `after` requests: what a
    session keeps once the allocator has seen the largest documents of the run (the first
    document cycles raise its high-water mark)."""
    past = [s for s in series if s["requests"] > after]
    return round(past[-1]["rss_mb"] - past[0]["rss_mb"], 1) if len(past) > 1 else None


def peaks(series: list[dict]) -> list[float]:
    """The highest resident size while each document was typed (DOC_REQUESTS requests each).
    Memory follows the open document (its contexts, tree and index grow as it is typed, and
    go when it closes), so a leak shows as peaks that keep rising from document to document,
    while end-to-end differences also depend on where in a document the run stopped."""
    out: dict[int, float] = {}
    for s in series:
        k = (s["requests"] - 1) // DOC_REQUESTS
        out[k] = max(out.get(k, 0.0), s["rss_mb"])
    return [out[k] for k in sorted(out)]


def plot(rep: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = rep["series"]
    minutes = [x["seconds"] / 60 for x in s]
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    a.plot(minutes, [x["rss_mb"] for x in s])
    a.set_ylabel("server RSS (MB)")
    a.set_title(f"redraft serve soak: {rep['requests']} requests, {rep['model']}")
    b.plot(minutes, [x["p50_ms"] for x in s], label="p50")
    b.plot(minutes, [x["p95_ms"] for x in s], label="p95")
    b.set_ylabel(f"answer latency per {WINDOW} requests (ms)")
    b.set_xlabel("minutes")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--requests", type=int, default=0, help="stop after this many requests (0: by time only)")
    ap.add_argument("--interval-ms", type=float, default=60.0, help="pause between keystrokes")
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "bench" / "out" / "soak")
    args = ap.parse_args()
    rep = asyncio.run(soak(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(rep, indent=1) + "\n")
    plot(rep, args.out.with_suffix(".png"))
    print(json.dumps({k: v for k, v in rep.items() if k != "series"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
