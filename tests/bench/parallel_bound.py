"""How many tokens a forward a perfect student of the twin could commit: a ceiling for distillation.

    python tests/bench/parallel_bound.py --files CORPUS/valid/python --limit 100 --seed 3 \
        [--teacher redraft-ar] [--student redraft-diffusion] [--ext py] [--out RESULT.json]

The twin (a causal model) answers the eval's samples alone (drafts, names, cache and lookup
off: plain greedy decoding), and each token it writes comes with its probability given the
text before it. A masked-diffusion student that knew the twin's distribution exactly (its
marginals) could commit a run of the twin's tokens in one step with confidence τ whenever
the run's joint probability, the product of those conditionals, is at least τ: each token's
marginal is at least that product. Cutting every answer greedily into such runs gives the
tokens a forward this ideal student reaches at threshold τ, writing exactly the twin's text.
It is a lower bound for the ideal student (marginals can be surer than the joint), and an
upper bound in practice for a real one of this size: what distillation from this twin could
buy at the quality of the twin.

The served commit rule looks at the two leftmost masked positions (`block_size` 2). For it a
bound the other way holds too: the next token's marginal is at most 1 − c₁(1 − c₂) (c₁, c₂ the
two conditionals: it is right whenever both are, and at best whenever the first is wrong), so
an ideal student commits a pair only where that clears τ; `pair_upper` counts every such pair
as committed together, an upper bound on what any student commits a forward in blocks of two.

With `--student`, that model answers the same samples alone in the same run (each sample by
both, in turn: `run_side_by_side`), so its real tokens a forward stand beside the ceiling.
Requests that abstain are left out of the ceiling (their tokens are not shown); their count
is reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from redraft.engine import Engine
from redraft.server.core.settings import ServerConfig
from redraft.server.eval.infill import parse_kinds, run_side_by_side
from redraft.server.eval.samples import load_sources


def runs(confidences: list[float], tau: float) -> int:
    """Forwards to commit these tokens left to right, each forward committing the longest run
    (at least one token) whose probabilities multiply to at least `tau`."""
    forwards, joint = 0, None
    for p in confidences:
        if joint is not None and joint * p >= tau:
            joint *= p
            continue
        forwards, joint = forwards + 1, p
    return forwards


def pairs_upper(confidences: list[float], tau: float) -> int:
    """Forwards to commit these tokens two at most at a time, a pair wherever the second token's
    marginal could reach `tau`: 1 - c1 * (1 - c2) >= tau (fewest forwards, greedy from the left)."""
    forwards, i = 0, 0
    while i < len(confidences):
        pair = i + 1 < len(confidences) and 1 - confidences[i] * (1 - confidences[i + 1]) >= tau
        forwards, i = forwards + 1, i + (2 if pair else 1)
    return forwards


def ceiling(completions: list[list[float]], taus: list[float]) -> dict:
    """Tokens a forward at each threshold over these answers, all requests pooled (committed
    tokens over forwards, as the eval counts), and the share of single tokens at least that sure."""
    tokens = sum(len(c) for c in completions)
    out = {"answers": len(completions), "tokens": tokens}
    for tau in taus:
        forwards = sum(runs(c, tau) for c in completions)
        sure = sum(p >= tau for c in completions for p in c)
        paired = sum(pairs_upper(c, tau) for c in completions)
        out[f"{tau:g}"] = {"tokens_per_forward": round(tokens / forwards, 3) if forwards else None,
                           "pair_upper": round(tokens / paired, 3) if paired else None,
                           "sure_share": round(sure / tokens, 3) if tokens else None}
    return out


def recording(engine: Engine, into: list) -> None:
    """Keep each completion `engine.infill` returns (the server's path calls it once a request)."""
    infill = engine.infill

    def record(*args, **kwargs):
        done = infill(*args, **kwargs)
        into.append(done)
        return done
    engine.infill = record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=Path, required=True)
    ap.add_argument("--ext", default="py")
    ap.add_argument("--kinds", default="rest_of_line,block")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--teacher", default="redraft-ar")
    ap.add_argument("--student", default=None, help="a diffusion model to run alone on the same samples")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--taus", default="0.9,0.7,0.5")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    taus = [float(t) for t in args.taus.split(",")]
    sources, _ = load_sources(args.files, ("." + args.ext.lstrip("."),))
    if not sources:
        sys.exit(f"{args.files}: no *.{args.ext} files")
    teacher = Engine.load(args.teacher, dtype=args.dtype)
    if teacher.model.config.attention != "causal":
        sys.exit(f"{args.teacher}: the teacher must be a causal model")
    teacher.with_sampler(seed=args.seed, lookup=False)
    engines = [teacher]
    if args.student is not None:
        engines.append(Engine.load(args.student, dtype=args.dtype))
        engines[1].with_sampler(seed=args.seed)
    config = ServerConfig(drafts="off", cache=False, names=False)
    kinds = parse_kinds(args.kinds)
    report = {"teacher": args.teacher, "student": args.student, "files": str(args.files), "seed": args.seed,
              "dtype": args.dtype, "kinds": {}}
    for kind in kinds:
        got: list = []
        recording(teacher, got)
        answered = run_side_by_side(engines, sources, [kind], args.limit, args.seed, config)
        teacher.infill = Engine.infill.__get__(teacher)
        got = got[1:]  # the first is the warm-up request
        row_n = sum(1 for o in answered[0][kind] if o.stats and o.stats.forwards)
        shown = [c.confidences for c in got if not c.abstained and c.confidences]
        row = {"recorded": len(got), "ran": row_n, "teacher": ceiling(shown, taus), "teacher_abstained": sum(c.abstained for c in got),
               "teacher_mean_p": round(statistics.fmean(p for c in shown for p in c), 3) if shown else None,
               "teacher_exact": round(statistics.fmean(o.exact_match for o in answered[0][kind]), 3)}
        if args.student is not None:
            outs = answered[1][kind]
            tokens = sum(o.stats.span_tokens for o in outs if o.stats)
            forwards = sum(o.stats.forwards for o in outs if o.stats)
            row["student"] = {"tokens_per_forward": round(tokens / forwards, 3) if forwards else None,
                              "exact": round(statistics.fmean(o.exact_match for o in outs), 3),
                              "abstained": sum(o.abstained for o in outs)}
        report["kinds"][kind] = row
        print(kind, json.dumps(row), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
