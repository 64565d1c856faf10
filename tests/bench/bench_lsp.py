"""LSP benchmark: type a file out character by character against `redraft serve` over stdio.

    python tests/bench/bench_lsp.py --file some/heldout/module.py [--lines 40] [--interval-ms 60]
        [--model redraft-diffusion] [--drafts seeded|only|off]

The document opens holding the file up to a start line; the next --lines lines are typed one
character at a time, each keystroke a didChange followed by an inlineCompletion request
(not awaited before the next keystroke, as an editor does). Reports, per answered request,
p50/p95 latency, split into cold (the first request after didOpen, once the model is loaded)
and warm (after an edit in a document the server has seen), the share of requests answered
with an item, cancelled or superseded, the server's own latency figures (all answered
requests, and those that waited for an engine run rather than type-through), its CPU
seconds and peak resident memory. Medians from one run; the
machine is noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lsprotocol import types as T
from pygls.lsp.client import LanguageClient

CAPS = T.ClientCapabilities(text_document=T.TextDocumentClientCapabilities(
    synchronization=T.TextDocumentSyncClientCapabilities(),
    inline_completion=T.InlineCompletionClientCapabilities()))


def proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds, peak resident MiB) of a process, from /proc."""
    import os
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    peak = next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("VmHWM"))
    return cpu, peak / 1024


async def timed_items(client, uri: str, line: int, character: int) -> tuple[float, str, list]:
    """(ms, "item" | "empty" | "cancelled", items) of one inline completion request."""
    t = time.perf_counter()
    try:
        items = await client.text_document_inline_completion_async(T.InlineCompletionParams(
            text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=line, character=character),
            context=T.InlineCompletionContext(trigger_kind=T.InlineCompletionTriggerKind.Automatic)))
        got = items.items if isinstance(items, T.InlineCompletionList) else (items or [])
        return (time.perf_counter() - t) * 1000, "item" if got else "empty", list(got)
    except Exception:  # cancelled by the server or by the client
        return (time.perf_counter() - t) * 1000, "cancelled", []


async def timed_request(client, uri: str, line: int, character: int) -> tuple[float, str]:
    """(ms, "item" | "empty" | "cancelled") of one inline completion request."""
    ms, outcome, _ = await timed_items(client, uri, line, character)
    return ms, outcome


async def replay(args) -> dict:
    text = Path(args.file).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = min(args.start, max(0, len(lines) - args.lines))
    opened = "".join(lines[:start])
    typed = "".join(lines[start:start + args.lines])
    client = LanguageClient("redraft-bench", "0")
    cmd = [sys.executable, "-m", "redraft.server.cli", "serve"] + (["--model", args.model] if args.model else [])
    await client.start_io(*cmd)
    options = {} if args.drafts is None else {"drafts": args.drafts}
    await client.initialize_async(T.InitializeParams(capabilities=CAPS, initialization_options=options))
    client.initialized(T.InitializedParams())
    pid = client._server.pid
    for _ in range(600):  # cold = the first request after didOpen, not the model load
        if (await client.protocol.send_request_async("redraft/stats", None)).model is not None:
            break
        await asyncio.sleep(0.05)
    uri = "file:///bench/typed.py"
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        text_document=T.TextDocumentItem(uri=uri, language_id="python", version=1, text=opened)))
    row = opened.count("\n")
    col = 0
    results: list[tuple[bool, float, str]] = []  # (cold, ms, outcome)

    async def ask(cold: bool, line: int, character: int):
        results.append((cold, *await timed_request(client, uri, line, character)))

    # The cold request is awaited before typing starts: a keystroke would supersede it and
    # turn its latency into the typing interval.
    await ask(True, row, col)
    pending = []
    await asyncio.sleep(args.interval_ms / 1000)
    cpu0, _ = proc_stats(pid)
    version = 1
    for ch in typed:
        version += 1
        here = T.Position(line=row, character=col)
        client.text_document_did_change(T.DidChangeTextDocumentParams(
            text_document=T.VersionedTextDocumentIdentifier(version=version, uri=uri),
            content_changes=[T.TextDocumentContentChangePartial(range=T.Range(start=here, end=here), text=ch)]))
        if ch == "\n":
            row, col = row + 1, 0
        else:
            col += len(ch.encode("utf-16-le")) // 2
        pending.append(asyncio.ensure_future(ask(False, row, col)))
        await asyncio.sleep(args.interval_ms / 1000)
    await asyncio.gather(*pending)
    cpu1, peak, stats = await finish(client, pid)
    return {"results": results, "cpu_s": cpu1 - cpu0, "peak_mib": peak, "server_stats": stats,
            "keystrokes": len(typed)}


@contextlib.contextmanager
def busy(n: int):
    """n processes spinning on a CPU (`while 1: pass`) for the block's duration."""
    burners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in burners:
            p.kill()
            p.wait()


async def started(init_options: dict, *serve_args: str) -> LanguageClient:
    """A `redraft serve` over stdio, initialized with `init_options`, once its model is loaded."""
    client = LanguageClient("redraft-bench", "0")
    await client.start_io(sys.executable, "-m", "redraft.server.cli", "serve", *serve_args)
    await client.initialize_async(T.InitializeParams(capabilities=CAPS, initialization_options=init_options))
    client.initialized(T.InitializedParams())
    for _ in range(1200):
        if (await client.protocol.send_request_async("redraft/stats", None)).model is not None:
            break
        await asyncio.sleep(0.05)
    return client


async def finish(client, pid: int):
    """(CPU seconds, peak MiB, redraft/stats) of the server, then shut it down."""
    cpu, peak = proc_stats(pid)
    stats = await client.protocol.send_request_async("redraft/stats", None)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return cpu, peak, stats


def summarize(out: dict) -> None:
    res = out["results"]
    answered = [r for r in res if r[2] != "cancelled"]

    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")
    warm = [ms for cold, ms, o in answered if not cold]
    cold = [ms for c, ms, o in answered if c]
    print(f"keystrokes {out['keystrokes']}, requests {len(res)}: with item {sum(r[2] == 'item' for r in res)}, "
          f"empty {sum(r[2] == 'empty' for r in res)}, cancelled {sum(r[2] == 'cancelled' for r in res)}")
    print(f"warm latency ms: p50 {statistics.median(warm) if warm else float('nan'):.1f}  p95 {pct(warm, .95):.1f}")
    print(f"cold latency ms: {cold[0] if cold else float('nan'):.1f}")
    st = out["server_stats"]
    print(f"server side, answered: p50 {st.latency_ms.p50:.1f} p95 {st.latency_ms.p95:.1f} ms "
          f"(n {st.latency_ms.count}); those that ran the engine: p50 {st.engine_latency_ms.p50:.1f} "
          f"p95 {st.engine_latency_ms.p95:.1f} ms (n {st.engine_latency_ms.count}); "
          f"type-through {st.type_through}, superseded {st.cancelled}, abstained {st.abstained}")
    print(f"server CPU {out['cpu_s']:.1f} s while typing, peak RSS {out['peak_mib']:.0f} MiB")
    print(f"server stats: {out['server_stats']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--start", type=int, default=60, help="lines already in the document when it opens")
    ap.add_argument("--lines", type=int, default=20, help="lines typed character by character")
    ap.add_argument("--interval-ms", type=float, default=60.0)
    ap.add_argument("--model", default=None)
    ap.add_argument("--drafts", default=None, choices=["seeded", "only", "off"], help="the server's drafts setting")
    args = ap.parse_args(argv)
    summarize(asyncio.run(replay(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
