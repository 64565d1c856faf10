"""Lookup decoding of the autoregressive twin, span windows of the diffusion model, or a
block-causal model's own drafts: the same output in less time?

    python tests/bench/bench_lookup.py [--setting lookup|span_window|self_draft|int8_rows] [--model redraft-ar]
                                       [--dtype float32] [--files server] [--limit 40]
                                       [--kinds next_line,block] [--tokens 8] [--ngram 3] [--sampler JSON]
                                       [--cache] [--threads 1] [--repeats 1] [--out FILE.json]

Cursors at line starts of real files (by default this repository's own Python sources under
server/, code the shipped models are unlikely to have seen), drawn as `redraft eval infill` draws them
(next_line: the line at the cursor; block: a block's body). Each request is the server's engine
call: the server's windows, its drafts from the same document (post-processed as the server
seeds them), its unit-end stop, its sampler settings, a cold context cache. It runs twice, with
the setting off and on, in alternating order (each `--repeats` times, the fastest counting: on a
shared machine). `--setting lookup` (the default; a causal model): lookup decoding off (token by
token) and on (SamplerConfig.lookup), outputs identical by construction. `--setting
span_window` (a "context_causal" diffusion model, e.g. redraft-diffusion): whole-span steps
against span windows (SamplerConfig.span_window), whose stale keys may change an output.
`--setting self_draft` (a "block_causal" model): its clean stream verifying prompt-lookup
drafts only (`draft_block` 1: no block drafts), against self-drafting (engine/drafting.py: the
noisy blocks' drafts where lookup has none), outputs identical up to floating point.
`--setting int8_rows` (a causal model, int8 linears): activations quantized per call, token by
token (how int8 decoded before 2026-12-07), against each row quantized alone with lookup
decoding (engine/int8.py; outputs the same up to floating point and the quantization grid).
Reported per kind and overall: requests, identical outputs, median generate ms of each and their
ratio (off / on), mean generate ms, mean forwards, mean span positions run, tokens per forward (span tokens over
forwards), drafted tokens accepted per request, and how many requests had a server draft.
Prints one JSON object. Timings are this machine's (the host kind is named in the output:
`avx512_bf16` present or AVX2-only); quote medians and the ratio from one run.

The dtype defaults to float32, not the engine's `auto` (int8 linears on an AVX2-only CPU), so
that `lookup` figures compare across hosts; `--dtype int8` runs any setting with int8 linears
(causal models quantize each row alone there, so lookup verifies drafts as in float32).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from redraft.engine import Engine
from redraft.server.core import context, postprocess
from redraft.server.core.context import Mode, own_drafts
from redraft.server.core.drafts import DraftIndex
from redraft.server.core.pipeline import document_windows, fill, model_view, usable_drafts
from redraft.server.core.settings import ServerConfig
from redraft.server.eval.infill import URI, snapshot
from redraft.server.eval.samples import draw, load_sources

ROOT = Path(__file__).resolve().parents[2]


def host() -> dict:
    flags = ""
    try:
        flags = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        pass
    name = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("Model name")), "")
    return {"cpu": name, "avx512_bf16": "avx512_bf16" in flags,
            "kind": "AVX512-BF16" if "avx512_bf16" in flags else "AVX2-only", "threads": torch.get_num_threads()}


def request(engine: Engine, src, sample, config: ServerConfig, setting: str, on: bool):
    """The server's engine call for one sample (pipeline.run_engine's, without post-processing);
    None where the server would not run the model (prose, no unit)."""
    snap, doc = snapshot(src, sample, config)
    snap = own_drafts(snap, doc, config, DraftIndex(doc.lines))
    if snap.mode is Mode.NONE or snap.in_prose:
        return None, 0
    span_max = max(snap.config.line_tokens, snap.config.block_tokens)
    ctx = context.build(snap, engine.count_tokens, engine.context_budget(span_max))
    drafts = usable_drafts(snap, document_windows(snap))
    engine.forget(URI)  # cold: both runs encode the whole context
    if setting == "int8_rows":
        engine.model.use_int8(True, rows_alone=on)
    sampler = engine.sampler.with_(**SETTINGS[setting](on))
    out = fill(engine, snap, model_view(snap, ctx), ctx.span, [d.text for d in drafts], None, sampler=sampler,
               stop=postprocess.Unit.of(snap))
    return out, len(drafts)


SETTINGS = {  # what each side of a setting changes
    "lookup": lambda on: {"lookup": on},
    "span_window": lambda on: {"span_window": on},
    "self_draft": lambda on: {"self_draft": True} if on else {"self_draft": True, "draft_block": 1},
    "int8_rows": lambda on: {"lookup": on},
}


def summary(rows: list[dict]) -> dict:
    if not rows:
        return {"n": 0}
    off = [r["off"] for r in rows]
    on = [r["on"] for r in rows]
    med_off = statistics.median(r["generate_ms"] for r in off)
    med_on = statistics.median(r["generate_ms"] for r in on)

    def tpf(side):
        f = sum(r["forwards"] for r in side)
        return round(sum(r["span_tokens"] for r in side) / f, 3) if f else None

    return {
        "n": len(rows),
        "identical": sum(r["identical"] for r in rows),
        "with_drafts": sum(r["drafts"] > 0 for r in rows),
        "generate_ms_median": {"off": round(med_off, 3), "on": round(med_on, 3)},
        "ratio_off_over_on": round(med_off / med_on, 2) if med_on else None,
        "generate_ms_mean": {"off": round(statistics.mean(r["generate_ms"] for r in off), 3),
                             "on": round(statistics.mean(r["generate_ms"] for r in on), 3)},
        "forwards_mean": {"off": round(statistics.mean(r["forwards"] for r in off), 2),
                          "on": round(statistics.mean(r["forwards"] for r in on), 2)},
        "positions_mean": {"off": round(statistics.mean(r["positions"] for r in off), 1),
                           "on": round(statistics.mean(r["positions"] for r in on), 1)},
        "tokens_per_forward": {"off": tpf(off), "on": tpf(on)},
        "accepted_per_request": round(statistics.mean(r["draft_kept"] for r in on), 2),
        "encode_ms_median": round(statistics.median(r["encode_ms"] for r in on + off), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setting", choices=tuple(SETTINGS), default="lookup")
    ap.add_argument("--model", default=None, help="default: redraft-ar for lookup, redraft-diffusion for span_window")
    ap.add_argument("--dtype", default="float32", help="float32 | bfloat16 | auto | int8 (int8_rows: always int8)")
    ap.add_argument("--files", type=Path, default=ROOT / "server")
    ap.add_argument("--limit", type=int, default=40, help="samples per kind")
    ap.add_argument("--kinds", default="next_line,block")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=None, help="SamplerConfig.lookup_tokens (default: the engine's)")
    ap.add_argument("--ngram", type=int, default=None, help="SamplerConfig.lookup_ngram (default: the engine's)")
    ap.add_argument("--sampler", default="{}", metavar="JSON",
                    help='other sampler settings for both runs, e.g. \'{"window_ahead": 6}\'')
    ap.add_argument("--cache", action="store_true", help="mix the cache model in as well (the server's `cache`)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1, help="runs of each request per setting; the fastest counts")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model is None:
        args.model = "redraft-ar" if args.setting in ("lookup", "int8_rows") else "redraft-diffusion"
    engine = Engine.load(args.model, dtype="int8" if args.setting == "int8_rows" else args.dtype)
    changes = {k: v for k, v in (("lookup_tokens", args.tokens), ("lookup_ngram", args.ngram)) if v is not None}
    engine.with_sampler(**changes, **json.loads(args.sampler))
    if args.setting in ("lookup", "int8_rows") and not engine.model_config.is_causal:
        print(f"{args.model} is not a causal model: lookup decoding is the twin's", file=sys.stderr)
        return 2
    if args.setting == "span_window" and engine.model_config.attention != "context_causal":
        print(f"{args.model}: span windows are for 'context_causal' diffusion models", file=sys.stderr)
        return 2
    if args.setting == "self_draft" and not engine.model_config.is_blockwise:
        print(f"{args.model}: self-drafting is for 'block_causal' models", file=sys.stderr)
        return 2
    sources, _ = load_sources(args.files)
    config = ServerConfig(cache=args.cache)
    kinds = [k for k in args.kinds.split(",") if k]
    samples = [(k, s) for k in kinds for s in draw(sources, k, args.limit, args.seed)]
    request(engine, sources[samples[0][1].file], samples[0][1], config, args.setting, True)  # warm-up, not counted
    rows: dict[str, list[dict]] = {k: [] for k in kinds}
    for n, (kind, s) in enumerate(samples):
        got = {}
        for _ in range(args.repeats):
            for on in ((False, True) if n % 2 == 0 else (True, False)):
                out, drafts = request(engine, sources[s.file], s, config, args.setting, on)
                if out is not None and on in got:  # the fastest of the repeats (same tokens, same forwards)
                    out.stats.generate_ms = min(out.stats.generate_ms, got[on].stats.generate_ms)
                    out.stats.encode_ms = min(out.stats.encode_ms, got[on].stats.encode_ms)
                got[on] = out
        if got[True] is None:
            continue
        a, b = got[False], got[True]
        fields = ("generate_ms", "encode_ms", "forwards", "span_tokens", "draft_kept", "positions")
        rows[kind].append({"identical": a.token_ids == b.token_ids, "drafts": drafts,
                           "off": {k: getattr(a.stats, k) for k in fields},
                           "on": {k: getattr(b.stats, k) for k in fields}})
    result = {"setting": args.setting, "model": args.model, "dtype": engine.info().dtype, "files": str(args.files), "sources": len(sources),
              "seed": args.seed, "cache": args.cache, "lookup_tokens": engine.sampler.lookup_tokens,
              "lookup_ngram": engine.sampler.lookup_ngram, "repeats": args.repeats, "host": host(), "sampler": json.loads(args.sampler),
              "kinds": {k: summary(r) for k, r in rows.items()},
              "all": summary([r for rs in rows.values() for r in rs])}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
