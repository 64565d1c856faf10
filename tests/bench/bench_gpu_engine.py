"""End-to-end infill latency at real model shapes (random weights), diffusion vs autoregressive.

    python tests/bench/bench_gpu_engine.py --device cuda [--shapes open-dcoder-0.5b,diffucoder-7b]
        [--context 2048] [--spans 32,64] [--batches 1,8] [--repeats 20] [--out results.json]

The engine's kernel backend (Triton on CUDA when installed, else PyTorch), random bf16
weights of the named shape, a fixed 8 denoising steps per 32 span tokens (random weights
never clear a confidence threshold), `--context` tokens of context; encoding (the context's
keys/values) and generation (the denoising steps, or autoregressive decoding of the same
span with the same backbone attending causally) are timed separately, medians over
`--repeats` runs after warm-up, with device synchronisation around each region. Diffusion
runs twice: with the static step captured as a CUDA graph (what the engine does on CUDA)
and with the dynamic eager step; the autoregressive path is eager. Only redraft.engine is
imported (the GPU machine has no server dependencies). `--device cpu --shapes tiny` is a
smoke test (there the static step runs eagerly).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from redraft.engine.autoregressive import decode
from redraft.engine.batch import make_batch
from redraft.engine.config import ModelConfig, SamplerConfig
from redraft.engine.layout import build_row
from redraft.engine.model import DiffusionLM
from redraft.engine.sampler import Denoiser
from redraft.engine.step import StepGraphs
from redraft.kernels import backend

SHAPES = {
    "open-dcoder-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                             num_attention_heads=14, num_key_value_heads=2, head_dim=64, attention_bias=True),
    "diffucoder-7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                          num_attention_heads=28, num_key_value_heads=4, head_dim=128, attention_bias=True),
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16),
}
MASK, END = 3, 0


def build(shape: str, device: str, dtype: torch.dtype, attention: str) -> DiffusionLM:
    cfg = ModelConfig(**SHAPES[shape], shifted=True, attention=attention, mask_token_id=MASK, pad_token_id=END,
                      end_token_ids=(END,), max_position_embeddings=32768)
    with torch.device("meta"):
        model = DiffusionLM(cfg)
    model = model.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=gen)
    model = model.to(dtype).eval()
    # the engine's backend choice (Triton on CUDA when installed), as Engine.__init__ makes it
    ops = backend.ops(device) if backend.use_triton(device) else None
    model.span_attention = None if ops is None else ops.span_attention
    model.head = None if ops is None else ops.head_confidence
    head = (ops or backend.ops(device, "torch")).head_confidence
    model.steps = StepGraphs(model, head, [MASK, END], None, capture=device.startswith("cuda"))
    return model


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def batch_for(model: DiffusionLM, context: int, span: int, B: int, device: str):
    g = torch.Generator().manual_seed(1)
    rows = []
    for b in range(B):
        ctx = torch.randint(10, model.config.vocab_size, (context,), generator=g).tolist()
        rows.append(build_row(model.config, ctx[: context * 3 // 4], ctx[context * 3 // 4:], [], span))
    return make_batch(rows, END, device)


@torch.inference_mode()
def run_once(model, batch, span: int, device: str, causal: bool, graphs: bool = False) -> tuple[float, float]:
    """(encode ms, generate ms) of one request."""
    scfg = SamplerConfig(span=span, tokens_per_step=max(1, span // 8), threshold=1.0, heal=False)
    end = torch.tensor([END], device=device)
    owners = list(range(batch.B))
    sync(device)
    if causal:
        # END is banned too: random weights would otherwise end spans at random places
        out = decode(model, batch, scfg, end_ids=end, pad_id=END, banned=[MASK, END], first_allowed={}, owners=owners)
        assert out.steps == span, out.steps
    else:
        out = Denoiser(model, scfg, owners, end, END, [MASK, END], head=model.head,
                       steps=model.steps if graphs else None).run(batch)
        assert out.steps == span // scfg.tokens_per_step, out.steps
        assert out.static_steps == (out.steps if graphs else 0)
    sync(device)
    return out.encode_ms, out.generate_ms


def measure(shape: str, device: str, context: int, span: int, B: int, repeats: int) -> dict:
    res = {"shape": shape, "context": context, "span": span, "batch": B}
    for attention in ("context_causal", "causal"):
        model = build(shape, device, torch.bfloat16, attention)
        batch = batch_for(model, context, span, B, device)
        runs = (("diffusion", False, True), ("diffusion_eager", False, False)) if attention != "causal" \
            else (("autoregressive", True, False),)
        for kind, causal, graphs in runs:
            for _ in range(3):
                run_once(model, batch, span, device, causal, graphs)
            enc, gen = zip(*(run_once(model, batch, span, device, causal, graphs) for _ in range(repeats)))
            res[kind] = {"encode_ms": round(statistics.median(enc), 3),
                         "generate_ms": round(statistics.median(gen), 3)}
        del model, batch
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    for kind in ("diffusion", "diffusion_eager"):
        res[f"generate_ratio_ar_over_{kind}"] = round(res["autoregressive"]["generate_ms"]
                                                      / max(res[kind]["generate_ms"], 1e-9), 2)
    return res


def write(args, results: list[dict]) -> None:
    from bench_kernels import describe  # date, commit, device name, versions (this folder)
    meta = {**describe("cuda" if args.device.startswith("cuda") else "cpu"),
            "kernels": "triton" if backend.use_triton(args.device) else "torch",
            "cuda_graphs": args.device.startswith("cuda"), "context": args.context, "results": results}
    with open(args.out, "w") as f:
        json.dump(meta, f, indent=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shapes", default="open-dcoder-0.5b,diffucoder-7b")
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--spans", default="32,64")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=None, help="write the results here as JSON")
    args = ap.parse_args(argv)
    results = []
    t0 = time.time()
    # The targets' cases (span 32, batch 1) first, both shapes: a run cut short still has them.
    for span in map(int, args.spans.split(",")):
        for B in map(int, args.batches.split(",")):
            for shape in args.shapes.split(","):
                r = measure(shape, args.device, args.context, span, B, args.repeats)
                results.append(r)
                print(json.dumps(r), flush=True)
                if args.out:
                    write(args, results)
    print("| shape | span | batch | encode ms | generate ms (static step) | generate ms (dynamic) | AR generate ms "
          "| AR / diffusion (static) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['shape']} | {r['span']} | {r['batch']} | {r['diffusion']['encode_ms']} | "
              f"{r['diffusion']['generate_ms']} | {r['diffusion_eager']['generate_ms']} | "
              f"{r['autoregressive']['generate_ms']} | {r['generate_ratio_ar_over_diffusion']} |")
    print(f"total {time.time() - t0:.0f} s on {args.device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
