"""One model in several dtypes on the same cursors through the server's path: which is fastest here.

    python tests/bench/bench_dtype.py --files CORPUS/heldout/python --model redraft-diffusion \
        [--dtypes bfloat16,int8,float32] [--kinds next_line,block] [--limit 200] [--seed 5] [--out RESULT.json]

`auto` picks a dtype per host from a few matrix products (engine/dtypes.py); this measures what
users get from each on this host: every cursor answered by each copy of the model in turn
(`run_side_by_side`, the server's span budgets, one thread), so a busy spell slows all alike.
Per kind and dtype: exact / correct prefix / edit similarity, encode and generate medians, total
p50 and p95, and the answers with the same text as the first dtype's. Name the host (`lscpu`)
beside the figures: the ranking differs between CPUs with native bf16 and AVX2-only ones.
A dtype written `bfloat16+compile` runs that copy's forward through `torch.compile(dynamic=True)`
(not a serving option: its compiling lands in the first requests that meet each new shape, so
read its medians, not its p95).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from redraft.engine import Engine
from redraft.server.core.settings import ServerConfig
from redraft.server.eval.infill import parse_kinds, run_side_by_side
from redraft.server.eval.samples import load_sources


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(outcomes: list) -> dict:
    stats = [o.stats for o in outcomes if o.stats]
    assert stats, "no answer reached the model"
    total = [s.total_ms for s in stats]
    return {"exact": round(statistics.fmean(o.exact_match for o in outcomes), 3),
            "correct_prefix": round(statistics.fmean(o.correct_prefix for o in outcomes), 3),
            "edit_similarity": round(statistics.fmean(o.edit_similarity for o in outcomes), 3),
            "encode_ms_median": round(statistics.median(s.encode_ms for s in stats), 1),
            "generate_ms_median": round(statistics.median(s.generate_ms for s in stats), 1),
            "total_p50_ms": round(statistics.median(total), 1), "total_p95_ms": round(percentile(total, 0.95), 1)}


def load(model: str, spec: str) -> Engine:
    """The model in `spec`'s dtype; `DTYPE+compile`: its forward compiled as well."""
    dtype, _, extra = spec.partition("+")
    if extra not in ("", "compile"):
        raise SystemExit(f"unknown dtype suffix {extra!r} in {spec!r} (only +compile)")
    engine = Engine.load(model, dtype=dtype)
    if extra:
        engine.model.forward = torch.compile(engine.model.forward, dynamic=True)
    return engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=Path, required=True)
    ap.add_argument("--ext", default="py")
    ap.add_argument("--model", default="redraft-diffusion")
    ap.add_argument("--dtypes", default="bfloat16,int8,float32")
    ap.add_argument("--kinds", default="next_line,block")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)  # as the server runs the model
    dtypes = args.dtypes.split(",")
    sources, _ = load_sources(args.files, ("." + args.ext.lstrip("."),))
    engines = [load(args.model, d) for d in dtypes]
    for e in engines:
        e.with_sampler(seed=args.seed)
    kinds = parse_kinds(args.kinds)
    got = run_side_by_side(engines, sources, kinds, args.limit, args.seed, ServerConfig(), spans="server")
    report = {"model": args.model, "files": str(args.files), "seed": args.seed, "dtypes": dtypes, "kinds": {}}
    for kind in kinds:
        first = got[0][kind]
        assert first, f"no cursors of kind {kind}"
        report["kinds"][kind] = {
            d: {**summary(got[i][kind]), "same_text_as_first": sum(x.raw == y.raw for x, y in zip(first, got[i][kind]))}
            for i, d in enumerate(dtypes)} | {"n": len(first)}
        print(kind, json.dumps(report["kinds"][kind]), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
