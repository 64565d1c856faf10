"""What one forward costs, by how many positions it runs: the fixed cost every decoding step pays.

    python tests/bench/bench_forward_cost.py [--model redraft-ar] [--dtypes bfloat16,float32] \
        [--widths 1,3,8,26] [--context 300] [--compile] [--out RESULT.json]

A context of `--context` tokens is encoded once into the key/value cache; then a block of each
width runs over it, causally as the twin's steps do (the diffusion model's windows cost the same
to within noise), one thread, as the server runs. Per dtype and width: the fastest mean of three
rounds of calls, in ms, and that of the output head over the block's rows. With `--compile`,
the same forward through `torch.compile(dynamic=True)` beside it, and the seconds its first call
took at each width (compiling, or recompiling for a new shape). Name the host (`lscpu`) beside
the figures: small bf16 matrix products cost several times float32's on some CPUs with AMX.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Callable

import torch

from redraft.engine import Engine
from redraft.engine.cache import KVCache


def fastest_ms(call: Callable[[], object], n: int = 50) -> float:
    call()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, (time.perf_counter() - t0) / n)
    return round(best * 1000, 3)


def measure(model, widths: list[int], context: int, compiled: bool) -> dict:
    cfg = model.config
    dtype = next(model.parameters()).dtype
    cache = KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, context + max(widths), cfg.head_dim,
                    dtype, "cpu")
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(10, cfg.vocab_size, (1, context), generator=gen)
    out: dict = {}
    # no_grad rather than inference_mode: compiled graphs cannot take inference tensors' version counters
    with torch.no_grad():
        model(ids, torch.arange(context)[None], cache, 0, causal=True)
        step = torch.compile(model.forward, dynamic=True) if compiled else None
        for T in widths:
            block = torch.randint(10, cfg.vocab_size, (1, T), generator=gen)
            pos = torch.arange(context, context + T)[None]
            hidden = torch.randn(1, T, cfg.hidden_size, dtype=dtype, generator=gen)
            row = {"forward_ms": fastest_ms(lambda: model(block, pos, cache, context, causal=True)),
                   "head_ms": fastest_ms(lambda: model.logits(hidden))}
            if step is not None:
                t0 = time.perf_counter()
                step(block, pos, cache, context, causal=True, pos_limit=context + T)
                row["compile_first_call_s"] = round(time.perf_counter() - t0, 1)
                row["compiled_forward_ms"] = fastest_ms(
                    lambda: step(block, pos, cache, context, causal=True, pos_limit=context + T))
            out[str(T)] = row
            print(T, json.dumps(row), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="redraft-ar")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--widths", default="1,3,8,26")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    widths = [int(w) for w in args.widths.split(",")]
    report = {"model": args.model, "context": args.context, "dtypes": {}}
    for dtype in args.dtypes.split(","):
        print(dtype, flush=True)
        engine = Engine.load(args.model, dtype=dtype)
        report["dtypes"][dtype] = measure(engine.model, widths, args.context, args.compile)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
