"""Step forwards of several requests run one by one vs as one pass (engine/ragged.py).

    python tests/bench/bench_ragged.py [--runs 1,4,16] [--rows 1] [--span 17] [--threads 1]
        [--json tests/bench/results/2026-12-01-ragged-cpu.json]

Each request has its own context (600-700 random tokens, encoded causally into its own cache,
lengths apart as different documents are) and an active block of `rows` x `span` tokens, the
shape of a typing request's denoising step (one 16-token span and its end token). Reported per
number of requests: the median time of their forwards one after another and of one merged pass,
and the ratio (the throughput a continuous-batching replica gains per step on this machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from redraft.engine import Engine
from redraft.engine.cache import KVCache
from redraft.engine.ragged import Forward, run_together


def paused(model, rows: int, context: int, span: int, seed: int) -> Forward:
    cfg = model.config
    g = torch.Generator().manual_seed(seed)
    p = next(model.parameters())
    kv = KVCache(cfg.num_hidden_layers, rows, cfg.num_key_value_heads, context + span, cfg.head_dim, p.dtype, "cpu")
    ctx = torch.randint(8, cfg.vocab_size - 64, (rows, context), generator=g)
    model(ctx, torch.arange(context).expand(rows, context), kv, start=0, causal=True)
    ids = torch.randint(8, cfg.vocab_size - 64, (rows, span), generator=g)
    return Forward(model, ids, torch.arange(context, context + span).expand(rows, span), kv, context, None)


@torch.inference_mode()
def measure(model, n: int, rows: int, span: int, repeats: int) -> dict:
    forwards = [paused(model, rows, 600 + 7 * i, span, i) for i in range(n)]
    alone, merged = [], []
    for f in forwards:  # warm-up
        f.run()
    run_together(forwards)
    for _ in range(repeats):
        t0 = time.perf_counter()
        for f in forwards:
            f.run()
        alone.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        run_together(forwards)
        merged.append(time.perf_counter() - t0)
    a, m = statistics.median(alone) * 1000, statistics.median(merged) * 1000
    return {"one_by_one_ms": round(a, 1), "merged_ms": round(m, 1), "ratio": round(a / m, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="1,4,16")
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--span", type=int, default=17)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    engine = Engine.load()
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__},
              "model": engine.name, "dtype": engine.info().dtype, "threads": args.threads, "rows": args.rows,
              "span": args.span, "results": {}}
    for n in (int(x) for x in args.runs.split(",")):
        report["results"][n] = measure(engine.model, n, args.rows, args.span, args.repeats)
        print(n, report["results"][n], flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
