"""Cluster benchmark: simulated editors typing held-out files, one engine alone vs Ray Serve replicas.

    python tests/bench/bench_cluster.py [--files /work/corpus/heldout] [--editors 1,4,16]
        [--keys 10] [--replicas 1,2] [--json tests/bench/results/2026-12-01-cluster-cpu.json]

Each editor types one line of its own held-out Python file, a keystroke at a time, and asks for
a completion after every keystroke once the last one is answered (closed loop, no think time:
the load is as high as the service allows). A request is what the editor-side server sends: a
prefix window (~2 kB, cut at a line start) and a suffix window (~600 B, cut at a line end), the
LSP defaults (a 16-token span, the line's Unit as stop rule), the file's URI as document key.

  (a) baseline: every editor's requests served one at a time by one in-process Engine (the
      same requests, interleaved round-robin as the editors would send them), i.e. each
      editor's own in-process engine, served sequentially;
  (b) cluster: `redraft cluster`'s application on a local Ray with 1 and then 2 replicas (one CPU
      and one torch thread each), every editor with its own RemoteEngine (the engine protocol,
      `x-session-id` from the document key) on its own thread.

Reported per setting: p50/p95 request latency (client side), completions per second, the batch
sizes the replicas reached (callers whose step forwards ran as one pass), context-cache hits and misses, and affinity: the share of requests
answered by the replica that answered most of their document's requests. Targets (checked, not
assumed): 16 editors on 2 replicas p95 <= 2x one editor's, completions/s >= 3x the sequential
baseline, affinity >= 99%.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx
import numpy as np
import torch

from redraft.engine import Engine, InfillRequest
from redraft.server.core.context import Mode
from redraft.server.core.postprocess import Unit
from redraft.server.core.remote import RemoteEngine

PREFIX_CHARS, SUFFIX_CHARS = 2000, 600
SPAN = 16
WARM_UP = 2  # requests per editor not counted (first contact: connections, the document's context)


def pct(xs: list[float], q: float) -> float:
    return round(float(np.percentile(xs, q)), 1) if xs else float("nan")


def files(root: Path, n: int, seed: int = 0) -> list[Path]:
    found = sorted(p for p in root.rglob("*.py") if 4000 <= p.stat().st_size <= 200_000)
    random.Random(seed).shuffle(found)
    if len(found) < n:
        raise SystemExit(f"need {n} Python files of 4-200 kB under {root}, found {len(found)}")
    return found[:n]


def keystrokes(path: Path, keys: int, seed: int) -> list[tuple[str, str]]:
    """(prefix, suffix) windows after each of `keys` keystrokes typing a line of `path`."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    rng = random.Random(seed)
    candidates = [i for i, ln in enumerate(lines) if len(ln.strip()) >= keys and i > 20]
    row = rng.choice(candidates or [len(lines) // 2])
    start = sum(len(ln) for ln in lines[:row])
    line = lines[row]
    indent = len(line) - len(line.lstrip())
    after = text[start + len(line):]
    out = []
    for k in range(1, keys + 1):
        prefix = text[:start + indent + k]
        cut = prefix[-PREFIX_CHARS:]
        window = cut[cut.find("\n") + 1:] if len(prefix) > PREFIX_CHARS else cut
        suffix = after[:SUFFIX_CHARS]
        suffix = suffix[:suffix.rfind("\n") + 1] or suffix
        out.append((window, "\n" + suffix))
    return out


def workload(paths: list[Path], keys: int) -> list[tuple[str, list[tuple[str, str]]]]:
    return [(f"file:///bench/{i}/{p.name}", keystrokes(p, keys + WARM_UP, seed=i)) for i, p in enumerate(paths)]


def baseline(engine: Engine, work, sampler, stop) -> dict:
    """Every editor's requests one at a time, round-robin, through one in-process engine."""
    lat, t0, n = [], None, 0
    before = engine.context_stats()
    for k in range(len(work[0][1])):
        if k == WARM_UP:
            t0 = time.perf_counter()
        for key, strokes in work:
            prefix, suffix = strokes[k]
            s = time.perf_counter()
            engine.infill_batch([InfillRequest(prefix, suffix)], sampler=sampler, cache_key=key, stop=stop)
            if k >= WARM_UP:
                lat.append((time.perf_counter() - s) * 1000)
                n += 1
    wall = time.perf_counter() - t0
    return {"p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95), "completions": n, "wall_s": round(wall, 2),
            "completions_per_s": round(n / wall, 2),
            **{f"cache_{k}": engine.context_stats()[k] - before[k] for k in ("hits", "misses")}}


def health(url: str) -> dict:
    return httpx.get(url + "/v1/redraft/health", timeout=30).json()


def editors(url: str, work, sampler, stop) -> dict:
    """Every editor on its own thread with its own RemoteEngine; closed loop."""
    lat: list[float] = []
    served: dict[str, Counter] = defaultdict(Counter)  # session -> replica -> requests
    errors: list[str] = []
    go = threading.Barrier(len(work) + 1)
    counted = threading.Barrier(len(work) + 1)
    lock = threading.Lock()

    def editor(key: str, strokes) -> None:
        remote = RemoteEngine(url, timeout_s=120)

        def seen(response: httpx.Response) -> None:
            if response.request.url.path.endswith("/infill"):
                with lock:
                    served[response.request.headers.get("x-session-id", "")][
                        response.headers.get("x-redraft-replica", "?")] += 1
        remote._client.event_hooks["response"].append(seen)
        go.wait()
        try:
            for k, (prefix, suffix) in enumerate(strokes):
                if k == WARM_UP:
                    counted.wait()
                s = time.perf_counter()
                try:
                    remote.infill_batch([InfillRequest(prefix, suffix)], sampler=sampler, cache_key=key, stop=stop)
                except Exception as e:  # noqa: BLE001 (counted and reported)
                    with lock:
                        errors.append(f"{type(e).__name__}: {e}")
                    continue
                if k >= WARM_UP:
                    with lock:
                        lat.append((time.perf_counter() - s) * 1000)
        finally:
            remote.close()

    threads = [threading.Thread(target=editor, args=w) for w in work]
    for t in threads:
        t.start()
    go.wait()
    counted.wait()
    before, t0 = health(url), time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    time.sleep(1.2)  # the replicas' next load reports
    after = health(url)
    total = sum(sum(c.values()) for c in served.values())
    home = sum(max(c.values()) for c in served.values())
    return {"p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95), "completions": len(lat), "errors": errors[:5],
            "error_count": len(errors), "wall_s": round(wall, 2),
            "completions_per_s": round(len(lat) / wall, 2), "affinity": round(home / total, 4) if total else None,
            **batches(before, after)}


def batches(before: dict, after: dict) -> dict:
    """Batch sizes and cache hits during the run: the replicas' counters after minus before.
    A batch size is the callers whose step forwards ran as one pass (continuous batching)."""
    sizes: Counter = Counter()
    started = hits = misses = 0
    old = {r["replica"]: r for r in before["replicas"]}
    empty = {"callers_per_forward": {}, "requests_per_batch": {}, "context_cache": {"hits": 0, "misses": 0}}
    for r in after["replicas"]:
        prev = old.get(r["replica"], empty)
        for size, count in r["callers_per_forward"].items():
            sizes[int(size)] += count - prev["callers_per_forward"].get(size, 0)
        started += sum(r["requests_per_batch"].values()) - sum(prev["requests_per_batch"].values())
        hits += r["context_cache"]["hits"] - prev["context_cache"]["hits"]
        misses += r["context_cache"]["misses"] - prev["context_cache"]["misses"]
    sizes = Counter({s: c for s, c in sizes.items() if c})
    n = sum(sizes.values())
    return {"batches": started, "forwards": n, "callers_per_forward": dict(sorted(sizes.items())),
            "mean_batch": round(sum(s * c for s, c in sizes.items()) / n, 2) if n else 0,
            "max_batch": max(sizes, default=0), "cache_hits": hits, "cache_misses": misses,
            "replicas": len(after["replicas"])}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=Path, default=Path("/work/corpus/heldout"))
    ap.add_argument("--editors", default="1,4,16")
    ap.add_argument("--keys", type=int, default=10, help="keystrokes counted per editor")
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--model", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    counts = [int(n) for n in args.editors.split(",")]
    torch.set_num_threads(1)
    engine = Engine.load(args.model) if args.model else Engine.load()
    sampler = engine.sampler.with_(span=SPAN, lengths=())
    stop = Unit(Mode.LINE, "", 8)
    paths = files(args.files, max(counts))
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__},
              "model": engine.name, "dtype": engine.info().dtype, "keys_per_editor": args.keys, "span": SPAN,
              "baseline": {}, "cluster": {}}
    for n in counts:
        report["baseline"][n] = baseline(engine, workload(paths[:n], args.keys), sampler, stop)
        print("baseline", n, report["baseline"][n], flush=True)
    dtype = engine.info().dtype
    del engine
    import ray

    from redraft.server.cluster import app
    ray.init(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    try:
        url = None
        for r in (int(x) for x in args.replicas.split(",")):
            config = app.ClusterConfig(model=args.model, replicas=r, num_cpus=1, threads=1, dtype=dtype,
                                       max_ongoing_requests=max(counts) + 2)
            url = app.deploy(config, port=free_port()) if url is None else _redeploy(app, config, url)
            deadline = time.monotonic() + 120
            while len(health(url)["replicas"]) != r and time.monotonic() < deadline:
                time.sleep(0.5)
            for n in counts:
                # a fresh document key space per setting: the first request of each starts cold
                work = [(f"{key}#r{r}n{n}", strokes) for key, strokes in workload(paths[:n], args.keys)]
                report["cluster"].setdefault(f"{r} replicas", {})[n] = editors(url, work, sampler, stop)
                print(f"{r} replicas", n, report["cluster"][f"{r} replicas"][n], flush=True)
    finally:
        app.teardown()
        ray.shutdown()
    report["targets"] = targets(report, counts)
    print(json.dumps(report["targets"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


def _redeploy(app, config, url: str) -> str:
    from ray import serve
    serve.run(app.application(config), name=app.APP_NAME, route_prefix="/", blocking=False)
    return url


def targets(report: dict, counts: list[int]) -> dict:
    two = report["cluster"].get("2 replicas", {})
    low, high = min(counts), max(counts)
    if low not in two or high not in two:
        return {}
    single = two[low]["p95_ms"]
    sequential = report["baseline"][high]["completions_per_s"]
    return {f"p95 {high} editors / p95 {low} editor (<= 2)": round(two[high]["p95_ms"] / single, 2),
            f"completions/s {high} editors / sequential (>= 3)": round(two[high]["completions_per_s"] / sequential, 2),
            "affinity (>= 0.99)": min(v["affinity"] or 0 for v in two.values())}


if __name__ == "__main__":
    main()
