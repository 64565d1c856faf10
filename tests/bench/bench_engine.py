"""Engine benchmark: per-step ms, forwards per completion, tokens per forward, cache vs no cache.

    python tests/bench/bench_engine.py [--model PATH_OR_NAME] [--dtype bfloat16] [--repeats 5]

Without --model it builds a random-weight model of the default model's shape (~9M
parameters, 8 layers, hidden 256, vocabulary 12k); random weights are rarely confident, so
threshold unmasking then commits one token per step, and a fixed 4-tokens-per-step run is
reported beside it. Context: 1,024 tokens; spans of 16 and 64. Prints a table of medians and
one JSON line per row. Timings are this machine's; quote medians and ratios from one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from redraft.engine import Engine, EngineConfig, SamplerConfig
from redraft.engine.batch import make_batch
from redraft.engine.config import ModelConfig
from redraft.engine.layout import build_row
from redraft.engine.model import DiffusionLM
from redraft.engine.sampler import Denoiser

CONTEXT = 1024


def random_model(attention: str, dtype: torch.dtype) -> DiffusionLM:
    cfg = ModelConfig(vocab_size=12288, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
                      num_attention_heads=8, num_key_value_heads=4, head_dim=32, tie_word_embeddings=True,
                      attention=attention, mask_token_id=3, pad_token_id=0, end_token_ids=(0,),
                      layout=("extra", "suffix", "prefix", "span") if attention != "full" else
                      ("extra", "prefix", "span", "suffix"), family="redraft", shifted=False)
    torch.manual_seed(0)
    model = DiffusionLM(cfg)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02) if p.dim() > 1 else torch.nn.init.ones_(p)
    return model.to(dtype).eval()


def run_rows(model: DiffusionLM, span: int, scfg: SamplerConfig, reuse=None) -> dict:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(10, model.config.vocab_size, (CONTEXT,), generator=gen).tolist()
    prefix, suffix = ids[: CONTEXT * 3 // 4], ids[CONTEXT * 3 // 4:]
    batch = make_batch([build_row(model.config, prefix, suffix, [], span)], 0, "cpu")
    d = Denoiser(model, scfg.with_(span=span), [0], torch.tensor([0]), 0, [3], reuse=reuse)
    with torch.inference_mode():
        out = d.run(batch)
    produced = int((out.x[:, out.batch.span_at:] != 0).sum())
    return dict(encode_ms=out.encode_ms, generate_ms=out.generate_ms, steps=out.steps, forwards=out.forwards,
                step_ms=out.generate_ms / max(out.steps, 1), tokens_per_forward=produced / max(out.forwards, 1),
                total_ms=out.encode_ms + out.generate_ms)


def median_of(fn, repeats: int) -> dict:
    fn()  # warm-up
    runs = [fn() for _ in range(repeats)]
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def bench_random(dtype: torch.dtype, repeats: int) -> list[dict]:
    rows = []
    full = random_model("full", dtype)
    ctx_causal = random_model("context_causal", dtype)
    for span in (16, 64):
        for label, scfg in (("threshold 0.9", SamplerConfig(threshold=0.9, heal=False, end_fills_rest=False)),
                            ("fixed 4/step", SamplerConfig(tokens_per_step=4, heal=False, end_fills_rest=False))):
            cached = median_of(lambda: run_rows(full, span, scfg), repeats)
            rows.append(dict(model="full attention", span=span, sampler=label, cache="context cached", **cached))
            nocache = median_of(lambda: run_rows(full, span, scfg.with_(refresh_every=1)), repeats)
            rows.append(dict(model="full attention", span=span, sampler=label, cache="recompute every step",
                             **nocache))
        scfg = SamplerConfig(tokens_per_step=4, heal=False, end_fills_rest=False)
        rows.append(dict(model="context_causal", span=span, sampler="fixed 4/step", cache="context cached",
                         **median_of(lambda: run_rows(ctx_causal, span, scfg), repeats)))
    return rows


def bench_checkpoint(path: str, dtype: str, repeats: int) -> list[dict]:
    engine = Engine.load(path, dtype=dtype, config=EngineConfig())
    import redraft.engine as pkg  # any real Python file serves as text
    text = open(pkg.engine.__file__, encoding="utf-8").read()
    tok = engine.tokenizer
    ids = tok.encode(text)
    cut = min(len(ids) * 3 // 4, CONTEXT * 3 // 4)
    prefix = tok.decode(ids[max(0, cut - CONTEXT * 3 // 4):cut])
    suffix = tok.decode(ids[cut:cut + CONTEXT // 4])
    rows = []
    for span in (16, 64):
        for label, cache_key in (("cold", None), ("reused context (+1 char)", "bench")):
            def once():
                if cache_key:
                    engine.infill(prefix, suffix, sampler=SamplerConfig(span=span), cache_key=cache_key)
                    r = engine.infill(prefix + " ", suffix, sampler=SamplerConfig(span=span), cache_key=cache_key)
                else:
                    engine.forget("bench")
                    r = engine.infill(prefix, suffix, sampler=SamplerConfig(span=span), cache_key="cold")
                    engine.forget("cold")
                s = r.stats
                return dict(encode_ms=s.encode_ms, generate_ms=s.generate_ms, steps=s.steps, forwards=s.forwards,
                            step_ms=s.generate_ms / max(s.steps, 1), tokens_per_forward=s.tokens_per_forward,
                            total_ms=s.total_ms)
            rows.append(dict(model=engine.name, span=span, sampler="threshold 0.9", cache=label,
                             **median_of(once, repeats)))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from redraft.engine.checkpoint import DTYPES
    rows = bench_checkpoint(args.model, args.dtype, args.repeats) if args.model else \
        bench_random(DTYPES[args.dtype], args.repeats)
    print(f"# bench_engine  torch {torch.__version__}  threads {torch.get_num_threads()}  dtype {args.dtype}  "
          f"context {CONTEXT} tokens  medians of {args.repeats}")
    print(f"{'model':<16}{'span':>5}  {'sampler':<14}{'cache':<26}{'encode':>8}{'gen':>8}{'step':>7}"
          f"{'steps':>6}{'fwd':>5}{'tok/fwd':>8}")
    for r in rows:
        print(f"{r['model']:<16}{r['span']:>5}  {r['sampler']:<14}{r['cache']:<26}{r['encode_ms']:>8.1f}"
              f"{r['generate_ms']:>8.1f}{r['step_ms']:>7.2f}{r['steps']:>6.0f}{r['forwards']:>5.0f}"
              f"{r['tokens_per_forward']:>8.2f}")
    for r in rows:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
