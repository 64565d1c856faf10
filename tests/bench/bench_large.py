"""Large-paste benchmark: a 5 MB paste, then typing, against `redraft serve` over stdio.

    python tests/bench/bench_large.py [--scenario all|ordinary|lines|minified] [--mb 5]
        [--keystrokes 50] [--interval-ms 60] [--model redraft-diffusion] [--verbose]

Each scenario runs in a fresh server with the shipped default model (or --model). A small
Python function is opened; `lines` then pastes ~5 MB of Python (stdlib code, repeated) at the
top of it in one didChange, `minified` pastes the same text as one line, and `ordinary`
opens the function below the last 64 KB of that code and pastes nothing: the usual warm
latency, with the same context windows as after the paste. Then --keystrokes characters are typed at
the end of the document, each a didChange followed by an inlineCompletion request sent
without waiting for the previous answer, as an editor does (a request still running when
the next keystroke arrives is superseded: at 60 ms a keystroke, only runs shorter than that
finish, so --interval-ms 150 shows the engine's own spread better). Reports per scenario: how long
the paste took to be acknowledged (a redraft/stats round trip right after it), p50/p95 of
the answered requests' latency as the client saw it, the first request's, the server's own
figures from redraft/stats (all answered requests, and those that ran the engine), errors,
and whether the server's text (redraft/document) equals the client's. Medians from one
run; the machine is noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import sysconfig
import time
from pathlib import Path

from lsprotocol import types as T
from pygls.lsp.client import LanguageClient

from bench_lsp import timed_request  # this folder is on sys.path when run as a script

CAPS = T.ClientCapabilities(text_document=T.TextDocumentClientCapabilities(
    synchronization=T.TextDocumentSyncClientCapabilities(),
    inline_completion=T.InlineCompletionClientCapabilities()))

OPENED = '''import math


def area(radius):
    return math.pi * radius ** 2


def total_area(shapes):
    result = 0
    for shape in shapes:
'''
TYPED = "        result += area(shape.radius) * shape.count + offset(shape)"


def paste_text(mb: float) -> str:
    """About `mb` MB of real Python: the standard library's modules, repeated."""
    want = int(mb * (1 << 20))
    parts, size = [], 0
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    while size < want:
        for f in files:
            t = f.read_text(encoding="utf-8", errors="replace")
            t = t if t.endswith("\n") else t + "\n"
            parts.append(t)
            size += len(t)
            if size >= want:
                break
    return "".join(parts)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


async def scenario(name: str, args) -> dict:
    client = LanguageClient("redraft-bench", "0")
    cmd = [sys.executable, "-m", "redraft.server.cli", "serve"] + (["--model", args.model] if args.model else [])
    await client.start_io(*cmd)
    await client.initialize_async(T.InitializeParams(capabilities=CAPS, initialization_options={}))
    client.initialized(T.InitializedParams())
    for _ in range(1200):  # wait for the model, so no request measures its load
        if (await client.protocol.send_request_async("redraft/stats", None)).model is not None:
            break
        await asyncio.sleep(0.05)
    uri = "file:///bench/large.py"
    text, version = OPENED, 1
    if name == "ordinary":  # the paste's last 64 KB: the same context windows as after it
        tail = paste_text(args.mb)[-(64 << 10):]
        text = tail[tail.index("\n") + 1:] + OPENED
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        text_document=T.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    paste_ms = 0.0
    if name != "ordinary":
        pasted = paste_text(args.mb)
        if name == "minified":
            pasted = pasted.replace("\n", " ") + "\n"
        version += 1
        t = time.perf_counter()
        client.text_document_did_change(T.DidChangeTextDocumentParams(
            text_document=T.VersionedTextDocumentIdentifier(version=version, uri=uri),
            content_changes=[T.TextDocumentContentChangePartial(
                range=T.Range(start=T.Position(0, 0), end=T.Position(0, 0)), text=pasted)]))
        await client.protocol.send_request_async("redraft/stats", None)
        paste_ms = (time.perf_counter() - t) * 1000
        text = pasted + text
    row = text.count("\n")
    col = 0
    gc.collect()
    gc.freeze()  # the client's own collections (its copy of 5 MB of text) stay out of the figures
    results: list[tuple[int, float, str]] = []  # (keystroke, ms, outcome)

    async def ask(k: int, line: int, character: int):
        results.append((k, *await timed_request(client, uri, line, character)))

    pending = []
    for k, ch in enumerate(TYPED[:args.keystrokes]):
        version += 1
        here = T.Position(line=row, character=col)
        client.text_document_did_change(T.DidChangeTextDocumentParams(
            text_document=T.VersionedTextDocumentIdentifier(version=version, uri=uri),
            content_changes=[T.TextDocumentContentChangePartial(range=T.Range(start=here, end=here), text=ch)]))
        text += ch
        col += 1
        pending.append(asyncio.ensure_future(ask(k, row, col)))
        await asyncio.sleep(args.interval_ms / 1000)
    await asyncio.gather(*pending)
    stats = await client.protocol.send_request_async("redraft/stats", None)
    doc = await client.protocol.send_request_async("redraft/document", {"uri": uri})
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return {"results": results, "stats": stats, "paste_ms": paste_ms, "same_text": getattr(doc, "text", None) == text,
            "mb": len(text.encode()) / (1 << 20)}


def summarize(name: str, out: dict, verbose: bool = False) -> None:
    res = out["results"]
    answered = [ms for _, ms, o in res if o != "cancelled"]
    first = [ms for k, ms, o in res if k == 0]
    st = out["stats"]
    print(f"[{name}] document {out['mb']:.1f} MB, paste acknowledged in {out['paste_ms']:.0f} ms, "
          f"server text equals client's: {out['same_text']}")
    print(f"  requests {len(res)}: with item {sum(o == 'item' for *_, o in res)}, "
          f"empty {sum(o == 'empty' for *_, o in res)}, cancelled {sum(o == 'cancelled' for *_, o in res)}")
    print(f"  client latency ms: p50 {statistics.median(answered) if answered else float('nan'):.1f}  "
          f"p95 {pct(answered, .95):.1f}  first request {first[0] if first else float('nan'):.1f}")
    print(f"  server: answered p50 {st.latency_ms.p50:.1f} p95 {st.latency_ms.p95:.1f} ms (n {st.latency_ms.count}); "
          f"engine runs p50 {st.engine_latency_ms.p50:.1f} p95 {st.engine_latency_ms.p95:.1f} ms "
          f"(n {st.engine_latency_ms.count}); type-through {st.type_through}, superseded {st.cancelled}, "
          f"errors {st.errors}")
    if verbose:
        print("  per keystroke (ms):", " ".join(f"{ms:.0f}{o[0]}" for _, ms, o in sorted(res)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="all", choices=["all", "ordinary", "lines", "minified"])
    ap.add_argument("--mb", type=float, default=5.0, help="size of the paste")
    ap.add_argument("--keystrokes", type=int, default=50)
    ap.add_argument("--interval-ms", type=float, default=60.0)
    ap.add_argument("--model", default=None)
    ap.add_argument("--verbose", action="store_true", help="print every request's latency and outcome")
    args = ap.parse_args(argv)
    args.keystrokes = min(args.keystrokes, len(TYPED))
    names = ["ordinary", "lines", "minified"] if args.scenario == "all" else [args.scenario]
    for name in names:
        summarize(name, asyncio.run(scenario(name, args)), args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
