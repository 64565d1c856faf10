"""Kernel benchmark: each Triton kernel against its torch counterpart at real model shapes.

    python tests/bench/bench_kernels.py [--device cuda|cpu] [--out tests/bench/results]
                                        [--batches 1 8] [--spans 32 64]

Shapes, from the checkpoints' config.json: Open-dCoder-0.5B (hidden 896, 14 query / 2 kv
heads of 64, vocabulary 151,936) and DiffuCoder-7B (hidden 3,584, 28 / 4 heads of 128,
vocabulary 152,064); 2,048 context tokens plus the span; spans of 32 and 64; batch 1 and 8.

- span_attention vs torch SDPA (enable_gqa, the engine's call), without and with padding
  keys (a boolean mask), over a slice of a static cache as the engine passes it;
- head_confidence vs the engine's torch path (fp32 logits, softmax, top-2, entropy,
  log-softmax: `head_confidence_ref`) and vs the least a torch head does (matmul, softmax,
  max), N = batch x span rows.

On CUDA (bf16): each kernel is first checked against its reference on the same inputs, then
timed with triton.testing.do_bench medians; do_bench flushes L2 before every run, so reads
come from HBM as a layer's cache and the embedding do in a real step. Each row carries its
floor, max(bytes / 4.8 TB/s, flops / 990 TFLOP/s) - datasheet leads; a machine's measured
ceilings are lower. On a CPU (--device cpu, fp32) only the torch counterparts are timed
(the Triton interpreter's timings mean nothing), at batch 1 and span 32 unless asked.

Writes <out>/<date>-kernels-<device>.json and .md: date, git commit, device, versions, rows.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from redraft.kernels.head_confidence import head_confidence, head_confidence_ref
from redraft.kernels.span_attention import span_attention, span_attention_ref

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = 2048
HBM_BYTES_PER_S = 4.8e12  # H200 datasheet
BF16_FLOPS = 990e12  # H200 datasheet, dense
MODELS = {
    "Open-dCoder-0.5B": dict(hidden=896, heads=14, kv_heads=2, head_dim=64, vocab=151936),
    "DiffuCoder-7B": dict(hidden=3584, heads=28, kv_heads=4, head_dim=128, vocab=152064),
}
BANNED = [151643, 151665, 151666]  # a few special ids, as the engine bans them


def timer(device: str, repeats: int):
    """Median milliseconds of fn(): do_bench on CUDA, perf_counter on a CPU."""
    if device == "cuda":
        from triton.testing import do_bench
        return lambda fn: do_bench(fn, warmup=25, rep=50, return_mode="median")

    def cpu(fn):
        fn()
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)
    return cpu


def floor_ms(nbytes: float, flops: float) -> float:
    return max(nbytes / HBM_BYTES_PER_S, flops / BF16_FLOPS) * 1e3


def randn(shape, gen: torch.Generator, dtype, scale: float = 1.0) -> torch.Tensor:
    """Random data drawn on the device itself (never zeros: see METHOD.md)."""
    return (torch.randn(shape, generator=gen, device=gen.device) * scale).to(dtype)


def attention_inputs(m: dict, B: int, A: int, padded: bool, dtype, device, gen):
    """q as the model makes it ([B, A, Hq, D] transposed), k/v a slice of a static cache."""
    Hq, Hkv, D = m["heads"], m["kv_heads"], m["head_dim"]
    T = CONTEXT + A
    q = randn((B, A, Hq, D), gen, dtype).transpose(1, 2)
    k = randn((B, Hkv, T + 64, D), gen, dtype)[:, :, :T]
    v = randn((B, Hkv, T + 64, D), gen, dtype)[:, :, :T]
    valid = None
    if padded:  # row b's context is b * 37 tokens shorter, right-padded
        valid = torch.ones(B, T, dtype=torch.bool)
        for b in range(1, B):
            valid[b, CONTEXT - 37 * b:CONTEXT] = False
        valid = valid.to(device)
    return q, k, v, valid


def bench_attention(device, dtype, batches, spans, time_ms, fast: bool) -> list[dict]:
    rows = []
    gen = torch.Generator(device=device).manual_seed(0)
    for name, m in MODELS.items():
        for B in batches:
            for A in spans:
                for padded in (False, True):
                    q, k, v, valid = attention_inputs(m, B, A, padded, dtype, device, gen)
                    mask = None if valid is None else valid[:, None, None, :]
                    T = k.shape[2]
                    nbytes = (2 * q.numel() + 2 * k.numel()) * q.element_size()
                    flops = 4 * B * m["heads"] * A * T * m["head_dim"]
                    base = dict(op="span_attention", model=name, batch=B, span=A, padded=padded,
                                floor_ms=floor_ms(nbytes, flops))
                    sdpa = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True))
                    rows.append(dict(base, impl="torch sdpa", ms=sdpa))
                    if fast:
                        ref = span_attention_ref(q.float(), k.float(), v.float(), valid)
                        out = span_attention(q, k, v, valid).float()
                        err = float((out - ref).norm() / ref.norm())
                        ms = time_ms(lambda: span_attention(q, k, v, valid))
                        rows.append(dict(base, impl="triton", ms=ms, speedup=sdpa / ms, rel_err=err))
    return rows


def head_min(hidden, weight):
    """The least a torch head does: logits, softmax, max."""
    return torch.softmax((hidden @ weight.T).float(), dim=-1).max(-1)


def bench_head(device, dtype, batches, spans, time_ms, fast: bool) -> list[dict]:
    rows = []
    gen = torch.Generator(device=device).manual_seed(1)
    for name, m in MODELS.items():
        weight = randn((m["vocab"], m["hidden"]), gen, dtype, scale=0.02)
        banned = torch.tensor(BANNED, device=device)
        for B in batches:
            for A in spans:
                N = B * A
                hidden = randn((N, m["hidden"]), gen, dtype)
                nbytes = (weight.numel() + hidden.numel()) * weight.element_size()
                base = dict(op="head_confidence", model=name, batch=B, span=A, rows=N,
                            floor_ms=floor_ms(nbytes, 2 * N * m["vocab"] * m["hidden"]))
                ref_ms = time_ms(lambda: head_confidence_ref(hidden, weight, banned=banned))
                rows.append(dict(base, impl="torch (engine path)", ms=ref_ms))
                min_ms = time_ms(lambda: head_min(hidden, weight))
                rows.append(dict(base, impl="torch matmul+softmax+max", ms=min_ms))
                if fast:
                    ref = head_confidence_ref(hidden.float(), weight.float(), banned=banned)
                    out = head_confidence(hidden, weight, banned=banned)
                    agree = float((out.tokens == ref.tokens).float().mean())
                    err = float((out.prob - ref.prob).abs().max())
                    ms = time_ms(lambda: head_confidence(hidden, weight, banned=banned))
                    rows.append(dict(base, impl="triton", ms=ms, speedup=ref_ms / ms, speedup_min=min_ms / ms,
                                     token_agree=agree, prob_err=err))
    return rows


def describe(device: str) -> dict:
    if device == "cuda":
        name = torch.cuda.get_device_name()
    else:
        name = platform.processor() or platform.machine()
        try:
            for line in open("/proc/cpuinfo", encoding="utf-8"):
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        commit += "-dirty" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return dict(date=datetime.datetime.now().isoformat(timespec="seconds"), commit=commit, device=device,
                device_name=name, torch=torch.__version__, triton=triton_version, python=platform.python_version(),
                threads=torch.get_num_threads() if device == "cpu" else None)


def markdown(meta: dict, rows: list[dict]) -> str:
    lines = [f"# Kernel benchmark, {meta['device_name']}", "",
             f"{meta['date']}, commit {meta['commit']}, torch {meta['torch']}, triton {meta['triton']}, "
             f"{meta['dtype']}, context {CONTEXT} tokens. Medians in ms"
             + ("; floor = max(bytes / 4.8 TB/s, flops / 990 TFLOP/s)." if meta["device"] == "cuda" else
                "; torch only (no floor: the H200 figures do not apply)."), "",
             "| op | model | batch | span | padded | impl | ms | floor ms | speedup | check |",
             "|---|---|---:|---:|---|---|---:|---:|---:|---|"]
    for r in rows:
        speed = f"{r['speedup']:.2f}x" if "speedup" in r else ""
        if "speedup_min" in r:
            speed += f" ({r['speedup_min']:.2f}x vs min)"
        floor = f"{r['floor_ms']:.4f}" if r.get("floor_ms") is not None else ""
        check = f"rel err {r['rel_err']:.1e}" if "rel_err" in r else \
            f"tokens {r['token_agree']:.3f}, prob err {r['prob_err']:.1e}" if "token_agree" in r else ""
        lines.append(f"| {r['op']} | {r['model']} | {r['batch']} | {r['span']} | {r.get('padded', '')} | "
                     f"{r['impl']} | {r['ms']:.4f} | {floor} | {speed} | {check} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=str(ROOT / "tests" / "bench" / "results"))
    ap.add_argument("--batches", type=int, nargs="+", default=None)
    ap.add_argument("--spans", type=int, nargs="+", default=None)
    ap.add_argument("--repeats", type=int, default=3, help="CPU timing repeats (CUDA uses do_bench)")
    ap.add_argument("--ops", nargs="+", default=["span_attention", "head_confidence"])
    args = ap.parse_args(argv)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        ap.error("--device cuda but torch sees no CUDA device")
    batches = args.batches or ([1, 8] if cuda else [1])
    spans = args.spans or ([32, 64] if cuda else [32])
    dtype = torch.bfloat16 if cuda else torch.float32
    time_ms = timer(args.device, args.repeats)

    rows = []
    with torch.inference_mode():
        if "span_attention" in args.ops:
            rows += bench_attention(args.device, dtype, batches, spans, time_ms, fast=cuda)
        if "head_confidence" in args.ops:
            rows += bench_head(args.device, dtype, batches, spans, time_ms, fast=cuda)

    if not cuda:
        for r in rows:
            r["floor_ms"] = None
    meta = dict(describe(args.device), dtype=str(dtype).replace("torch.", ""), context=CONTEXT)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", meta["device_name"].lower()).strip("-")[:40] if cuda else "cpu"
    stem = out / f"{meta['date'][:10]}-kernels-{slug}"
    stem.with_suffix(".json").write_text(json.dumps(dict(meta, rows=rows), indent=1) + "\n", encoding="utf-8")
    text = markdown(meta, rows)
    stem.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {stem}.json and .md")
    bad = [r for r in rows if r.get("rel_err", 0) > 2e-2 or r.get("token_agree", 1) < 0.99
           or math.isnan(r.get("rel_err", 0)) or math.isnan(r.get("prob_err", 0))]
    if bad:
        print(f"FAILED checks in {len(bad)} rows", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
