"""Prompt lookup in span windows, on and off, on the same cursors through the server's path.

    python tests/bench/bench_window_lookup.py --files CORPUS/heldout/python --kinds block,next_line \
        --limit 200 --seed 5 [--ext py] [--dtype auto] [--out RESULT.json]

Two copies of the shipped diffusion model, one with `window_lookup` on and one off (the
rest of its sampler as shipped), answer every cursor in turn through the eval's own path
(`run_side_by_side`, the server's span budgets), so a busy spell slows both alike. Per kind:
exact / correct prefix / edit similarity, generate ms (mean, median), total p50, tokens a
forward, the tokens lookup kept, answers with the same text, and the ratio of summed generate
times (on / off).
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


def summary(outcomes: list) -> dict:
    stats = [o.stats for o in outcomes if o.stats]
    forwards = sum(s.forwards for s in stats)
    return {"exact": round(statistics.fmean(o.exact_match for o in outcomes), 3),
            "correct_prefix": round(statistics.fmean(o.correct_prefix for o in outcomes), 3),
            "edit_similarity": round(statistics.fmean(o.edit_similarity for o in outcomes), 3),
            "generate_ms_mean": round(statistics.fmean(s.generate_ms for s in stats), 1),
            "generate_ms_median": round(statistics.median(s.generate_ms for s in stats), 1),
            "total_p50_ms": round(statistics.median(s.total_ms for s in stats)),
            "tokens_per_forward": round(sum(s.span_tokens for s in stats) / forwards, 2) if forwards else None,
            "lookup_kept": sum(s.lookup_kept for s in stats)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=Path, required=True)
    ap.add_argument("--ext", default="py")
    ap.add_argument("--kinds", default="block,next_line")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--model", default="redraft-diffusion")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    sources, _ = load_sources(args.files, ("." + args.ext.lstrip("."),))
    on, off = Engine.load(args.model, dtype=args.dtype), Engine.load(args.model, dtype=args.dtype)
    on.with_sampler(seed=args.seed, window_lookup=True)
    off.with_sampler(seed=args.seed, window_lookup=False)
    kinds = parse_kinds(args.kinds)
    got = run_side_by_side([on, off], sources, kinds, args.limit, args.seed, ServerConfig(), spans="server")
    report = {"model": args.model, "files": str(args.files), "seed": args.seed, "dtype": args.dtype, "kinds": {}}
    for kind in kinds:
        a, b = got[0][kind], got[1][kind]
        assert a and len(a) == len(b)
        gen_on = sum(o.stats.generate_ms for o in a if o.stats)
        gen_off = sum(o.stats.generate_ms for o in b if o.stats)
        report["kinds"][kind] = {"n": len(a), "same_text": sum(x.raw == y.raw for x, y in zip(a, b)),
                                 "on": summary(a), "off": summary(b),
                                 "generate_ms_sum_ratio": round(gen_on / gen_off, 3) if gen_off else None}
        print(kind, json.dumps(report["kinds"][kind]), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
