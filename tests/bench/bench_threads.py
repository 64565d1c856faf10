"""Engine latency at 1 and 2 torch threads beside 0, 1 and 2 CPU-saturating processes.

A laptop's other work (a browser, a build) takes cores the engine's threads wait for: an
intra-op thread that loses its core stalls every matrix product of the step. This measures
the engine call the server makes for a newly opened document (context encoded from nothing)
and for the next keystroke (context reused), the shipped model, at line ends of this
repository's `server/` sources, under each load. The hogs (`while True: pass`) are started
and stopped here. Run it on an otherwise quiet machine:

    python tests/bench/bench_threads.py [--cases 12] [--out results/DATE-threads-cpu.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from redraft.engine import Engine

ROOT = Path(__file__).resolve().parents[2]


def cases(n: int) -> list[tuple[str, str]]:
    """(prefix, suffix) at the end of a line in the middle of n files of server/core."""
    out = []
    for path in sorted((ROOT / "server" / "core").glob("*.py"))[:n]:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        cut = len("".join(lines[: len(lines) // 2]))
        cut += len(lines[len(lines) // 2].rstrip("\n")) // 2
        out.append((text[max(0, cut - 4000):cut], text[cut:cut + 800]))
    return out


def measure(engine: Engine, items, threads: int) -> dict:
    torch.set_num_threads(threads)
    sampler = engine.with_sampler(span=16)
    cold, warm = [], []
    for i, (prefix, suffix) in enumerate(items):
        key = f"doc{i}-{threads}-{time.monotonic()}"
        t = time.perf_counter()
        engine.infill_batch([_req(prefix, suffix, key)], sampler=sampler)
        cold.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()  # the next keystroke: one more character typed, context reused
        engine.infill_batch([_req(prefix + " ", suffix, key)], sampler=sampler)
        warm.append((time.perf_counter() - t) * 1000)
        engine.forget(key)
    return {"cold_p50_ms": round(statistics.median(cold), 1), "warm_p50_ms": round(statistics.median(warm), 1),
            "cold_max_ms": round(max(cold), 1), "warm_max_ms": round(max(warm), 1)}


def _host() -> str:
    """The host kind speed figures name: AVX512-BF16 or AVX2 only (Linux)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    return "avx512_bf16" if "avx512_bf16" in flags else "avx2" if "avx2" in flags else "other"


def _req(prefix, suffix, key):
    from redraft.engine import InfillRequest
    return InfillRequest(prefix, suffix, cache_key=key)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=12)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    engine = Engine.load()
    items = cases(args.cases)
    measure(engine, items[:2], 1)  # warm-up
    rows = []
    for hogs in (0, 1, 2):
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
        try:
            time.sleep(1.0)
            for threads in (1, 2):
                row = {"hogs": hogs, "threads": threads, **measure(engine, items, threads)}
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            for p in procs:
                p.kill()
                p.wait()
    rep = {"date": time.strftime("%Y-%m-%d"), "cpu": platform.processor() or platform.machine(), "host": _host(),
           "model": engine.name, "dtype": str(next(engine.model.parameters()).dtype),
           "int8": bool(engine.model.int8), "cases": len(items), "rows": rows}
    if args.out is not None:
        args.out.write_text(json.dumps(rep, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
