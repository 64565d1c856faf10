"""Where a request's time goes, for the diffusion model and its twin on the same cursors.

    python tests/bench/bench_block_cost.py --files CORPUS/heldout/python \
        [--model redraft-diffusion] [--twin redraft-ar] [--kinds next_line,block] [--limit 100] \
        [--seed 5] [--dtype auto] [--out RESULT.json]

Every cursor goes through the server's path (`answer_sample`, the server's span budgets, one
thread), answered by each model in turn. Each model call is timed where it happens: the
backbone's forwards (the context encode apart from the span's forwards) and the output head.
Per kind and model, medians and sums over requests: the encode, the span forwards (count,
positions a forward, ms a forward, ms in all, and of those the wide ones: at least WIDE
positions, as judging drafts, a whole span or the final scoring run), the head, and what is
left of the generate time (the sampler's own work between forwards: picks, commits, lookups,
bookkeeping). A model's speed over
its twin's is forwards × cost a forward + that remainder; this says which term to work on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from redraft.engine import Engine
from redraft.engine import ragged
from redraft.engine.model import DiffusionLM
from redraft.server.core.settings import ServerConfig
from redraft.server.eval.infill import answer_sample, parse_kinds
from redraft.server.eval.samples import draw, load_sources

ENCODE_MIN = 64  # a forward from position 0 over at least this many tokens encodes the context
WIDE = 32  # a span forward over at least this many positions (drafts judged, a whole span, scoring)


class Calls:
    """Timed model calls since the last `take()`."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, float]] = []  # (what, positions, ms)

    def take(self) -> list[tuple[str, int, float]]:
        rows, self.rows = self.rows, []
        return rows


@contextmanager
def timed_calls(calls: Calls):
    forward, logits, merged = DiffusionLM.forward, DiffusionLM.logits, ragged._run_merged

    def timed_forward(self, ids, pos, cache=None, start=0, *args, **kw):
        t = time.perf_counter()
        out = forward(self, ids, pos, cache, start, *args, **kw)
        B, T = ids.shape
        what = "encode" if start == 0 and T >= ENCODE_MIN else "span"
        calls.rows.append((what, B * T, (time.perf_counter() - t) * 1000))
        return out

    def timed_logits(self, hidden):
        t = time.perf_counter()
        out = logits(self, hidden)
        calls.rows.append(("head", hidden.numel() // hidden.shape[-1], (time.perf_counter() - t) * 1000))
        return out

    def timed_merged(forwards):  # rows cut to length run as one pass, not through forward()
        if len(forwards) == 1:
            return merged(forwards)
        t = time.perf_counter()
        merged(forwards)
        calls.rows.append(("span", sum(f.tokens for f in forwards), (time.perf_counter() - t) * 1000))

    DiffusionLM.forward, DiffusionLM.logits, ragged._run_merged = timed_forward, timed_logits, timed_merged
    try:
        yield
    finally:
        DiffusionLM.forward, DiffusionLM.logits, ragged._run_merged = forward, logits, merged


def one_request(rows: list[tuple[str, int, float]], stats) -> dict:
    span = [(n, ms) for what, n, ms in rows if what == "span"]
    span_ms = sum(ms for _, ms in span)
    head_ms = sum(ms for what, _, ms in rows if what == "head")
    wide = [ms for n, ms in span if n >= WIDE]
    return {"encode_ms": sum(ms for what, _, ms in rows if what == "encode"),
            "span_forwards": len(span), "wide_forwards": len(wide), "wide_ms": sum(wide), "positions_per_forward": sum(n for n, _ in span) / len(span) if span else 0.0,
            "ms_per_forward": span_ms / len(span) if span else 0.0, "span_ms": span_ms, "head_ms": head_ms,
            "generate_ms": stats.generate_ms, "rest_ms": max(stats.generate_ms - span_ms - head_ms, 0.0),
            "span_tokens": stats.span_tokens, "forwards": stats.forwards}


def summary(requests: list[dict]) -> dict:
    ran = [r for r in requests if r["span_forwards"]]
    assert ran, "no request ran a span forward"
    med = {k: round(statistics.median(r[k] for r in ran), 2) for k in ran[0]}
    forwards = sum(r["forwards"] for r in ran)
    return {"n": len(requests), "ran_model": len(ran), "medians": med,
            "sums_ms": {k: round(sum(r[k] for r in ran), 1) for k in ("encode_ms", "span_ms", "wide_ms", "head_ms",
                                                                      "rest_ms", "generate_ms")},
            "tokens_per_forward": round(sum(r["span_tokens"] for r in ran) / forwards, 2) if forwards else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=Path, required=True)
    ap.add_argument("--ext", default="py")
    ap.add_argument("--model", default="redraft-diffusion")
    ap.add_argument("--twin", default="redraft-ar")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--kinds", default="next_line,block")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)  # as the evaluation's figures are taken
    sources, _ = load_sources(args.files, ("." + args.ext.lstrip("."),))
    names = [args.model, args.twin]
    engines = [Engine.load(n, dtype=args.dtype) for n in names]
    for e in engines:
        e.with_sampler(seed=args.seed)
    config, calls = ServerConfig(), Calls()
    report = {"files": str(args.files), "seed": args.seed, "dtype": args.dtype, "models": names, "kinds": {}}
    with timed_calls(calls):
        for kind in parse_kinds(args.kinds):
            samples = draw(sources, kind, args.limit, args.seed)
            assert samples, f"no cursors of kind {kind}"
            for e in engines:  # warm-up, not counted
                answer_sample(e, sources[samples[0].file], samples[0], config, spans="server")
            got: list[list[dict]] = [[] for _ in engines]
            for turn, sample in enumerate(samples):
                order = range(len(engines)) if turn % 2 == 0 else reversed(range(len(engines)))
                for i in order:
                    calls.take()
                    a = answer_sample(engines[i], sources[sample.file], sample, config, spans="server")
                    if a.stats is not None and a.stats.forwards:
                        got[i].append(one_request(calls.take(), a.stats))
            report["kinds"][kind] = {n: summary(g) for n, g in zip(names, got)}
            print(kind, json.dumps(report["kinds"][kind]), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
