"""Remote-engine benchmark: the same infill requests in process and through RemoteEngine on loopback.

    python tests/bench/bench_remote.py [--file some/module.py] [--n 40] [--threads 1] [--json out.json]
    python tests/bench/bench_remote.py --null [--n 200]

The server is the real `redraft serve --http PORT` in a process of its own (the engine
protocol's routes, on its inference thread), serving the shipped default model; this process
loads the same model (`Engine.load()`, the dtype the server reports) for the in-process side.
Cursor samples are bench_http.py's (--n assignment / return lines, 60 lines above and 20
below, ~512 tokens); each goes once to each engine (in turns, either first), with the LSP server's settings
(a 16-token span, the line's Unit as stop rule, one document key, no previews). Reported:
p50/p95 wall time per side, the added p50 (remote minus in process: the target is <= 5 ms),
the p50 of the per-request differences, and the transport overhead per request (wall time
minus the engine's own total_ms, which the remote's stats carry back): on a busy machine the
two engines' own times differ by more than the transport costs, and the overhead is the figure
that isolates what the remote path adds. Both sides run torch on --threads threads. WARM_UP
requests per side are not counted.

`--null` measures the protocol's floor instead: the same requests to the engine routes over an
engine that answers at once (this script, `--serve-null PORT`, in a process of its own), the
round trip per request (JSON both ways, HTTP on loopback, the server's thread hand-offs).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import torch

from bench_http import samples
from redraft.engine import Completion, Engine, SamplerConfig, Stats
from redraft.server.core import wire
from redraft.server.core.context import Mode
from redraft.server.core.postprocess import Unit
from redraft.server.core.remote import RemoteEngine

WARM_UP = 3
KEY = "file:///bench/module.py"


def pct(xs: list[float], q: float) -> float:
    return round(float(np.percentile(xs, q)), 2)


class NullEngine:
    """The Engine interface, answering every infill at once with a fixed 10-token completion."""

    name, sampler = "null", SamplerConfig()

    def info(self):
        from types import SimpleNamespace
        return SimpleNamespace(name=self.name, parameters=0, dtype="float32", device="cpu", scores_edits=False)

    def context_budget(self, span: int) -> int:
        return max(1, 4096 - span)

    def infill_batch(self, requests, **kw) -> list[Completion]:
        return [Completion("x" * 10, list(range(10)), [0.5] * 10, 16, Stats()) for _ in requests]


def serve_null(port: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from starlette.applications import Starlette

    from redraft.server.http.app import listen, make_server
    from redraft.server.http.engine_routes import engine_routes
    engine = NullEngine()
    app = Starlette(routes=engine_routes(lambda: engine, None, executor=ThreadPoolExecutor(1)))
    make_server(app).run(sockets=[listen("127.0.0.1", port)])


def start_server(threads: int, timeout: float = 120.0, null: bool = False) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = ([sys.executable, __file__, "--serve-null", str(port)] if null else
               [sys.executable, "-m", "redraft.server.cli", "serve", "--http", str(port)])
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + wire.INFO, timeout=2).status_code == 200:
                return server, url
        except httpx.HTTPError:
            pass
        if server.poll() is not None:
            raise SystemExit(f"the server exited ({server.returncode})")
        time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not start")


def run(local: Engine, remote: RemoteEngine, cases: list, span: int) -> dict:
    sampler = local.sampler.with_(span=span, lengths=())
    stop = Unit(Mode.LINE, "", 8)
    out = {"local": [], "remote": [], "local_engine": [], "remote_engine": [], "same_text": 0}
    def timed(engine):
        t0 = time.perf_counter()
        c = engine.infill(prefix, suffix, sampler=sampler, cache_key=KEY, stop=stop)
        return c, (time.perf_counter() - t0) * 1000

    for n, (prefix, suffix, _) in enumerate(cases[:WARM_UP] + cases):
        if n % 2:  # every other sample the remote goes first: neither side always runs second
            (b, tb), (a, ta) = timed(remote), timed(local)
        else:
            (a, ta), (b, tb) = timed(local), timed(remote)
        if n < WARM_UP:
            continue
        out["local"].append(ta)
        out["remote"].append(tb)
        out["local_engine"].append(a.stats.total_ms)
        out["remote_engine"].append(b.stats.total_ms)
        out["same_text"] += a.text == b.text
    return out


def null_round_trip(args, cases: list) -> int:
    server, url = start_server(args.threads, null=True)
    remote, stop, times = RemoteEngine(url), Unit(Mode.LINE, "", 8), []
    try:
        for n in range(WARM_UP + args.n):
            prefix, suffix, _ = cases[n % len(cases)]
            t0 = time.perf_counter()
            remote.infill(prefix, suffix, sampler=SamplerConfig(span=args.span), cache_key=KEY, stop=stop)
            if n >= WARM_UP:
                times.append((time.perf_counter() - t0) * 1000)
    finally:
        remote.close()
        server.terminate()
        server.wait(timeout=10)
    rep = {"engine": "null", "requests": len(times), "round_trip_ms": {"p50": pct(times, 50), "p95": pct(times, 95)}}
    print(json.dumps(rep, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(rep, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", type=Path, default=None, help="a Python file (default: pip's vendored requests/sessions.py)")
    ap.add_argument("--n", type=int, default=40, help="cursor samples (default 40)")
    ap.add_argument("--span", type=int, default=16, help="span tokens (default 16, the server's for a line)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on each side (default 1)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--null", action="store_true", help="the protocol's floor: an engine that answers at once")
    ap.add_argument("--serve-null", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_null is not None:
        serve_null(args.serve_null)
        return 0
    if args.file is None:
        import pip._vendor.requests.sessions as vendored
        args.file = Path(vendored.__file__)
    cases = samples(args.file.read_text(encoding="utf-8"), args.n)
    torch.set_num_threads(args.threads)
    if args.null:
        return null_round_trip(args, cases)
    server, url = start_server(args.threads)
    remote = RemoteEngine(url, timeout_s=60)
    try:
        info = remote.connect()
        local = Engine.load(dtype=info.dtype)
        r = run(local, remote, cases, args.span)
    finally:
        remote.close()
        server.terminate()
        server.wait(timeout=10)
    over_local = [w - e for w, e in zip(r["local"], r["local_engine"])]
    over_remote = [w - e for w, e in zip(r["remote"], r["remote_engine"])]
    rep = {"model": info.name, "dtype": info.dtype, "threads": args.threads, "samples": len(r["local"]),
           "same_text": r["same_text"], "file": str(args.file),
           "in_process_ms": {"p50": pct(r["local"], 50), "p95": pct(r["local"], 95)},
           "remote_ms": {"p50": pct(r["remote"], 50), "p95": pct(r["remote"], 95)},
           "added_p50_ms": round(pct(r["remote"], 50) - pct(r["local"], 50), 2),
           "paired_difference_p50_ms": pct([b - a for a, b in zip(r["local"], r["remote"])], 50),
           "overhead_in_process_p50_ms": pct(over_local, 50),
           "overhead_remote_ms": {"p50": pct(over_remote, 50), "p95": pct(over_remote, 95)},
           "engine_ms_p50": {"in_process": pct(r["local_engine"], 50), "remote": pct(r["remote_engine"], 50)}}
    print(json.dumps(rep, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(rep, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
