"""`redraft eval infill`: run the server's completion path on sampled cursor positions.

For every sample (samples.py) the file minus the removed region becomes a document with
the cursor at the sample's start, and the request goes the way the server sends it: the
snapshot and context windows (context.py), drafts from the same document (drafts.py),
`inference.answer` (engine call with the unit-end stop, post-processing). The unit is
set by the sample's kind rather than detected (rest_of_line, next_line and node use the
LINE unit, block the BLOCK unit with the sample's header indentation), so every sample is
answered or abstained on. Its span budget is the kind's (samples.SPAN_BUDGET, room for the
whole expected text of a long block) unless `spans` is "server": then the server's own
(`lineTokens`, `blockTokens`), what users get, a long block then cut where the budget ends.
`drafts` picks the mode: "seeded" (the server's default: drafts seed the model's candidates),
"only" (the best draft, no model) or "off" (model alone).
The result (post-processed text, "" when nothing is shown) is checked for new parse errors
(syntax.py) and scored (metrics.py). Every sample is also answered by the plain-copy
baseline (baseline.py: the longest earlier match in the same document, continued and
post-processed the same way, no model), scored the same way. Per kind the report holds the
mode's row:

  n                 samples scored
  exact_match, correct_prefix, edit_similarity, syntax_valid   means, in [0, 1]
  abstain_rate      share of samples answered with nothing (counted as misses above)
  sources           what the shown answers came from: model / buffer (a draft) ... -> count
  p50_ms, p95_ms    percentiles (linear interpolation) of the request's total ms
  encode_ms, generate_ms   medians
  forwards          mean denoising forwards (context encoding excluded); for a causal model
                    its decoding forwards, each verifying drafted tokens (lookup decoding)
  tokens_per_forward   span tokens / denoising forwards over the kind's requests; None
                    (with a line in `notes`) when they ran no model forward
  copy              the same fields for the plain-copy baseline
  vs_copy           exact_match and correct_prefix of the mode over the copy's (None when
                    the copy scored 0)

Every request starts from a cold context cache (the cache is dropped before each one) and
one untimed warm-up request runs first, so timings do not depend on sample order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from redraft.engine import Stats

from ..core.context import AskedMode, Mode, own_drafts, text_snapshot
from ..core.drafts import DraftIndex
from ..core.inference import Answer, answer
from ..core.languages import canonical
from ..core.settings import ServerConfig
from ..core.workspace import Workspace
from . import metrics, syntax
from .baseline import copy_answer, ratio
from .samples import KINDS, SPAN_BUDGET, Sample, Source, draw

URI = "file:///redraft-eval/sample.py"
DRAFT_MODES = ("seeded", "only", "off")
RATES = ("exact_match", "correct_prefix", "edit_similarity", "syntax_valid")
FIELDS = ("n", *RATES, "abstain_rate", "p50_ms", "p95_ms", "encode_ms", "generate_ms", "forwards",
          "tokens_per_forward")
VS_COPY = ("exact_match", "correct_prefix")  # the mode's rates reported over the copy baseline's
MODE_OF_KIND = {"rest_of_line": Mode.LINE, "next_line": Mode.LINE, "block": Mode.BLOCK, "node": Mode.LINE}


@dataclass
class Scored:
    """One scored sample."""

    sample: Sample
    raw: str  # what would be shown ("" when nothing)
    text: str  # cut at the end of its unit
    exact_match: bool
    correct_prefix: float
    edit_similarity: float
    syntax_valid: bool
    stats: Stats | None  # the engine's stats for the request (timing only, for drafts alone)
    abstained: bool = False
    source: str = ""
    copy: Scored | None = None  # the plain-copy baseline on the same sample


def snapshot(source: Source, sample: Sample, config: ServerConfig, spans: str = "kind"):
    """The server's snapshot for a sample: a document without the removed region, the cursor
    at its start, the unit set by the kind, drafts looked up in the same document. `spans`:
    "kind", the span budget of the sample's kind (SPAN_BUDGET: room for the whole expected
    text), or "server", the config's own `line_tokens` / `block_tokens`, as the server asks."""
    prefix, suffix = sample.split(source.text)
    kind_cfg = config if spans == "server" else replace(config, line_tokens=SPAN_BUDGET[sample.kind],
                                                         block_tokens=SPAN_BUDGET[sample.kind])
    mode = MODE_OF_KIND[sample.kind]
    header = " " * max(sample.header_indent, 0) if mode is Mode.BLOCK else None
    uri = URI.rsplit(".", 1)[0] + source.path[source.path.rfind("."):]  # the file's language, by its extension
    return text_snapshot(uri, prefix + suffix, len(prefix), kind_cfg, canonical(None, uri) or "python",
                         asked=AskedMode(mode, f"eval {sample.kind}", header))


def answer_sample(engine, source: Source, sample: Sample, config: ServerConfig,
                  workspace: Workspace | None = None, spans: str = "kind") -> Answer:
    """One sample through the server's path; the drafts lookup is timed with the request.
    With a `workspace` (the other files of the sample's package), drafts come from its files
    nearest the sample's too, as the server's do when the client names a root folder."""
    snap, doc = snapshot(source, sample, config, spans)
    index = DraftIndex(doc.lines)  # the server keeps this up to date as edits arrive: not timed
    t0 = time.perf_counter()
    near = [] if workspace is None else workspace.nearest(_path(source))
    snap = own_drafts(snap, doc, config, index, near)
    if engine is not None:
        engine.forget(URI)  # cold context: timings independent of the order of samples
    lookup_ms = (time.perf_counter() - t0) * 1000
    got = answer(engine, snap)
    if got.stats is None:  # drafts alone: time the whole request
        return replace(got, stats=Stats(total_ms=(time.perf_counter() - t0) * 1000))
    got.stats.total_ms += lookup_ms
    return got


def score(source: Source, sample: Sample, raw: str, stats=None, errors_before: int | None = None,
          abstained: bool = False, source_name: str = "") -> Scored:
    """Score one completion of `sample` (no model involved)."""
    text = metrics.cut(sample.kind, raw, sample.header_indent)
    return Scored(
        sample=sample, raw=raw, text=text,
        exact_match=metrics.exact_match(sample.kind, text, sample.expected),
        correct_prefix=metrics.correct_prefix(text, sample.expected),
        edit_similarity=metrics.edit_similarity(text, sample.expected),
        syntax_valid=syntax.syntax_valid(source.text, sample.start, sample.end, raw, errors_before),
        stats=stats, abstained=abstained, source=source_name)


def copy_sample(source: Source, sample: Sample, config: ServerConfig, spans: str = "kind") -> Answer:
    """The plain-copy baseline's answer (baseline.py) at the same cursor, same unit."""
    snap, _ = snapshot(source, sample, config, spans)
    return copy_answer(snap, source.text[:sample.start], source.text[sample.end:])


def score_sample(engine, source: Source, sample: Sample, config: ServerConfig,
                 errors_before: int | None = None, workspace: Workspace | None = None, spans: str = "kind") -> Scored:
    """The mode's answer scored, with the copy baseline's scored beside it (the baseline copies
    from the same file only, workspace or not)."""
    def scored(a: Answer) -> Scored:
        text = "" if a.edit is None else a.edit.text
        return score(source, sample, text, a.stats, errors_before, a.edit is None,
                     a.source if a.edit is not None else "")
    out = scored(answer_sample(engine, source, sample, config, workspace, spans))
    out.copy = scored(copy_sample(source, sample, config, spans))
    return out


def run(engine, sources: list[Source], kinds: list[str], limit: int, seed: int, config: ServerConfig,
        on_outcome: Callable[[Scored], None] | None = None, workspace: bool = False,
        spans: str = "kind") -> dict[str, list[Scored]]:
    """Draw `limit` samples per kind, complete and score each; outcomes per kind. With
    `workspace`, each sample's drafts also come from the other files of its package (the
    first folder of its path)."""
    return run_side_by_side([engine], sources, kinds, limit, seed, config, on_outcome, workspace, spans)[0]


def run_side_by_side(engines: list, sources: list[Source], kinds: list[str], limit: int, seed: int,
                     config: ServerConfig, on_outcome: Callable[[Scored], None] | None = None,
                     workspace: bool = False, spans: str = "kind") -> list[dict[str, list[Scored]]]:
    """`run` for several engines (a model and its twin) on the same samples, each sample answered
    by every engine in turn, the order alternating from sample to sample: a machine that is
    busy for a while slows each alike, so their times compare (each engine still sees the
    samples in the same order as alone). Outcomes per engine, per kind."""
    spaces = packages(sources) if workspace else {}
    drawn = {kind: draw(sources, kind, limit, seed) for kind in kinds}
    first = next((s for k in kinds for s in drawn[k]), None)
    if first is not None:  # warm-up: the first request pays one-time costs; not counted
        for engine in engines:
            answer_sample(engine, sources[first.file], first, config, spans=spans)
    errors: dict[int, int] = {}  # parse errors of each original file, counted once
    out: list[dict[str, list[Scored]]] = [{} for _ in engines]
    turn = 0
    for kind in kinds:
        for o in out:
            o[kind] = []
        for sample in drawn[kind]:
            src = sources[sample.file]
            if sample.file not in errors:
                errors[sample.file] = syntax.count_errors(src.text)
            order = list(range(len(engines)))
            if turn % 2:
                order.reverse()
            turn += 1
            for i in order:
                o = score_sample(engines[i], src, sample, config, errors[sample.file], spaces.get(_package(src)), spans)
                out[i][kind].append(o)
                if on_outcome is not None:
                    on_outcome(o)
    return out


def packages(sources: list[Source]) -> dict[str, Workspace]:
    """A workspace per package (the first folder of the files' paths) of its files' texts."""
    texts: dict[str, dict[Path, str]] = {}
    for src in sources:
        texts.setdefault(_package(src), {})[_path(src)] = src.text
    return {name: Workspace.of_texts(files) for name, files in texts.items()}


def _package(src: Source) -> str:
    return src.path.split("/", 1)[0] if "/" in src.path else ""


def _path(src: Source) -> Path:
    return Path("/", *src.path.split("/"))


def summarize(outcomes: list[Scored]) -> dict:
    """The per-kind report (see the module docstring); metrics are None when n is 0."""
    n = len(outcomes)
    if n == 0:
        return {"n": 0, **{k: None for k in FIELDS[1:]}, "sources": {}}
    total = [o.stats.total_ms for o in outcomes]
    forwards = sum(o.stats.forwards for o in outcomes)
    return {
        "n": n,
        **{k: round(float(np.mean([float(getattr(o, k)) for o in outcomes])), 4) for k in RATES},
        "abstain_rate": round(sum(o.abstained for o in outcomes) / n, 4),
        "sources": {s: sum(1 for o in outcomes if o.source == s) for s in sorted({o.source for o in outcomes} - {""})},
        "p50_ms": round(float(np.percentile(total, 50)), 3),
        "p95_ms": round(float(np.percentile(total, 95)), 3),
        "encode_ms": round(float(np.median([o.stats.encode_ms for o in outcomes])), 3),
        "generate_ms": round(float(np.median([o.stats.generate_ms for o in outcomes])), 3),
        "forwards": round(float(np.mean([o.stats.forwards for o in outcomes])), 3),
        # a ratio of sums: requests without a forward (drafts alone) weigh nothing, not 0
        "tokens_per_forward": round(sum(o.stats.span_tokens for o in outcomes) / forwards, 3) if forwards else None,
    }


def report(model: str, sources: list[Source], seed: int, outcomes: dict[str, list[Scored]],
           drafts: str = "seeded", workspace: bool = False, names: bool = True) -> dict:
    """Per kind the mode's row with the copy baseline's row and the ratios beside it."""
    kinds = {}
    for kind, outs in outcomes.items():
        row = summarize(outs)
        copy = summarize([o.copy for o in outs if o.copy is not None])
        kinds[kind] = {**row, "copy": copy, "vs_copy": {k: ratio(row[k], copy[k]) for k in VS_COPY}}
    idle = [kind for kind, s in kinds.items() if s["n"] and s["tokens_per_forward"] is None]
    notes = [f"no model forwards in {', '.join(idle)}: tokens_per_forward is None"] if idle else []
    return {"model": model, "files": len(sources), "seed": seed, "drafts": drafts, "workspace": workspace,
            "names": names, "kinds": kinds, "notes": notes}


# What a model is compared with its twin on (another model run on the same samples in the same
# run): speed as a ratio (this model's over the twin's: under 1 is faster), quality as a
# difference in points (this model's minus the twin's).
VS_TWIN_RATIO = ("generate_ms", "p50_ms", "tokens_per_forward")
VS_TWIN_POINTS = ("exact_match", "correct_prefix", "edit_similarity")


def with_twin(rep: dict, twin: dict) -> dict:
    """`rep` with, per kind, the twin's row (`twin`) and the comparison (`vs_twin`)."""
    rep = {**rep, "twin": twin["model"], "kinds": dict(rep["kinds"])}
    for kind, s in rep["kinds"].items():
        t = {k: v for k, v in twin["kinds"][kind].items() if k not in ("copy", "vs_copy")}
        vs = {k: ratio(s[k], t[k]) for k in VS_TWIN_RATIO}
        vs |= {k: None if s[k] is None or t[k] is None else round(s[k] - t[k], 4) for k in VS_TWIN_POINTS}
        rep["kinds"][kind] = {**s, "twin": t, "vs_twin": vs}
    return rep


def _cell(key: str, value) -> str:
    if value is None:
        return "-"
    if key == "n":
        return str(value)
    if key in RATES or key == "abstain_rate":
        return f"{value:.3f}"
    return f"{value:.2f}" if key == "tokens_per_forward" else f"{value:.1f}"


def format_table(rep: dict) -> str:
    """The report as a readable table: per kind the mode's row, then the copy baseline's; the
    mode's row ends with its exact match and correct prefix over the copy's."""
    head = ("kind", "answers", "n", "exact", "prefix", "edit_sim", "syntax", "abstain", "p50_ms", "p95_ms", "enc_ms",
            "gen_ms", "fwd", "tok/fwd", "exact/copy", "prefix/copy")
    mode = rep.get("drafts", "-")
    rows = [head]
    for kind, s in rep["kinds"].items():
        vs = s.get("vs_copy", {})
        ratios = ("-" if vs.get(k) is None else f"{vs[k]:.2f}x" for k in VS_COPY)
        rows.append((kind, mode, *(_cell(k, s[k]) for k in FIELDS), *ratios))
        if "twin" in s:
            rows.append((kind, "twin", *(_cell(k, s["twin"][k]) for k in FIELDS), "", ""))
        if "copy" in s:
            rows.append((kind, "copy", *(_cell(k, s["copy"][k]) for k in FIELDS), "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [f"model {rep['model']}, {rep['files']} files, seed {rep['seed']}, drafts {mode}"
             + ("" if rep.get("names", True) else ", names off")]
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    lines += [f"note: {n}" for n in rep.get("notes", [])]
    if "twin" in rep:
        lines.append(f"twin: {rep['twin']}, the same samples and settings in the same run")
        for kind, s in rep["kinds"].items():
            vs = s["vs_twin"]
            speed = "-" if vs["generate_ms"] is None else f"{vs['generate_ms']:.2f}x the twin's generate time"
            points = ", ".join("-" if vs[k] is None else f"{k} {100 * vs[k]:+.1f} points" for k in VS_TWIN_POINTS)
            lines.append(f"  {kind}: {speed}; {points}")
    lines.append("copy: the longest earlier match in the same file, continued and post-processed; no model")
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
