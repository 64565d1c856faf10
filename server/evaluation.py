"""`redraft eval infill`: run the engine on sampled cursor positions and score what it fills.

For every sample (samples.py) the engine gets a plain prefix/suffix split of the file at
the cursor, with the kind's span budget and otherwise one SamplerConfig for all kinds.
The raw completion is checked for new parse errors (syntax.py), cut at the end of its unit
and scored (metrics.py). Every model gets the unit-end test as `stop`: a causal one checks
it per token, a diffusion one per step on the span's contiguously committed beginning, so
both stop as soon as the unit is complete. Per kind the report holds:

  n                 samples scored
  exact_match, correct_prefix, edit_similarity, syntax_valid   means, in [0, 1]
  p50_ms, p95_ms    percentiles (linear interpolation) of the request's total ms
  encode_ms, generate_ms   medians
  forwards, tokens_per_forward   means (span tokens / denoising forwards, context excluded)

Every request starts from a cold context cache (the cache is dropped before each one) and
one untimed warm-up request runs first, so timings do not depend on sample order. Does not
know the tree-sitter contexts, post-processing or servers to come: the split is the file
text at the cursor, nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from . import metrics, syntax
from .samples import KINDS, SPAN_BUDGET, Sample, Source, draw

if TYPE_CHECKING:
    from redraft.engine import Stats

CACHE_KEY = "redraft-eval"
RATES = ("exact_match", "correct_prefix", "edit_similarity", "syntax_valid")
FIELDS = ("n", *RATES, "p50_ms", "p95_ms", "encode_ms", "generate_ms", "forwards", "tokens_per_forward")


@dataclass
class Outcome:
    """One scored sample."""

    sample: Sample
    raw: str  # the completion as the engine returned it
    text: str  # cut at the end of its unit
    exact_match: bool
    correct_prefix: float
    edit_similarity: float
    syntax_valid: bool
    stats: Stats | None  # the engine's stats for the request


def stop_rule(sample: Sample) -> Callable[[str], bool]:
    """The unit-end test for `engine.infill(..., stop=...)`: called with the text so far."""
    return lambda text: metrics.unit_ended(sample.kind, text, sample.header_indent)


def complete(engine, source: Source, sample: Sample, sampler):
    """Run the engine on one sample; it stops at the end of the unit."""
    prefix, suffix = sample.split(source.text)
    stop = stop_rule(sample)  # both kinds of model stop once the unit is complete
    engine.forget(CACHE_KEY)  # cold context: timings independent of the order of samples
    return engine.infill(prefix, suffix, sampler=sampler.with_(span=SPAN_BUDGET[sample.kind]),
                         cache_key=CACHE_KEY, stop=stop)


def score(source: Source, sample: Sample, raw: str, stats=None, errors_before: int | None = None) -> Outcome:
    """Score one raw completion of `sample` (no model involved)."""
    text = metrics.cut(sample.kind, raw, sample.header_indent)
    return Outcome(
        sample=sample, raw=raw, text=text,
        exact_match=metrics.exact_match(sample.kind, text, sample.expected),
        correct_prefix=metrics.correct_prefix(text, sample.expected),
        edit_similarity=metrics.edit_similarity(text, sample.expected),
        syntax_valid=syntax.syntax_valid(source.text, sample.start, sample.end, raw, errors_before),
        stats=stats)


def run(engine, sources: list[Source], kinds: list[str], limit: int, seed: int, sampler,
        on_outcome: Callable[[Outcome], None] | None = None) -> dict[str, list[Outcome]]:
    """Draw `limit` samples per kind, complete and score each; outcomes per kind."""
    drawn = {kind: draw(sources, kind, limit, seed) for kind in kinds}
    first = next((s for k in kinds for s in drawn[k]), None)
    if first is not None:  # warm-up: the first request pays one-time costs; not counted
        complete(engine, sources[first.file], first, sampler)
    errors: dict[int, int] = {}  # parse errors of each original file, counted once
    out: dict[str, list[Outcome]] = {}
    for kind in kinds:
        out[kind] = []
        for sample in drawn[kind]:
            src = sources[sample.file]
            if sample.file not in errors:
                errors[sample.file] = syntax.count_errors(src.text)
            result = complete(engine, src, sample, sampler)
            o = score(src, sample, result.text, result.stats, errors[sample.file])
            out[kind].append(o)
            if on_outcome is not None:
                on_outcome(o)
    return out


def summarize(outcomes: list[Outcome]) -> dict:
    """The per-kind report (see the module docstring); metrics are None when n is 0."""
    n = len(outcomes)
    if n == 0:
        return {"n": 0, **{k: None for k in FIELDS[1:]}}
    total = [o.stats.total_ms for o in outcomes]
    return {
        "n": n,
        **{k: round(float(np.mean([float(getattr(o, k)) for o in outcomes])), 4) for k in RATES},
        "p50_ms": round(float(np.percentile(total, 50)), 3),
        "p95_ms": round(float(np.percentile(total, 95)), 3),
        "encode_ms": round(float(np.median([o.stats.encode_ms for o in outcomes])), 3),
        "generate_ms": round(float(np.median([o.stats.generate_ms for o in outcomes])), 3),
        "forwards": round(float(np.mean([o.stats.forwards for o in outcomes])), 3),
        "tokens_per_forward": round(float(np.mean([o.stats.tokens_per_forward for o in outcomes])), 3),
    }


def report(model: str, sources: list[Source], seed: int, outcomes: dict[str, list[Outcome]]) -> dict:
    return {"model": model, "files": len(sources), "seed": seed,
            "kinds": {kind: summarize(outs) for kind, outs in outcomes.items()}}


def format_table(rep: dict) -> str:
    """The report as a readable table, one row per kind."""
    head = ("kind", "n", "exact", "prefix", "edit_sim", "syntax", "p50_ms", "p95_ms", "enc_ms", "gen_ms",
            "fwd", "tok/fwd")
    keys = FIELDS
    rows = [head]
    for kind, s in rep["kinds"].items():
        rows.append((kind, *("-" if s[k] is None else
                             f"{s[k]:.3f}" if k in RATES else
                             str(s[k]) if k == "n" else f"{s[k]:.1f}" for k in keys)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [f"model {rep['model']}, {rep['files']} files, seed {rep['seed']}"]
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def parse_kinds(spec: str | None) -> list[str]:
    """'a,b' -> ['a', 'b'] in the order given, each a known kind; None -> all kinds."""
    if spec is None:
        return list(KINDS)
    kinds = [k.strip() for k in spec.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ValueError(f"unknown kind(s) {', '.join(bad) or repr(spec)} (choose from {', '.join(KINDS)})")
    return list(dict.fromkeys(kinds))
