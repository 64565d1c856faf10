"""Training throughput on this CPU: tokens a second for model shapes, vocabularies and modes.

    python tests/bench/bench_train.py --vocab 8192 12288 16384 24576 32768 --steps 6
    python tests/bench/bench_train.py --compile --precision bf16 fp32

Random token rows, the autoregressive objective (every position carries a loss, so the output
head's cost is all there), batch × seq tokens a step, Muon + AdamW as the trainer uses them.
The first two steps (warm-up, compilation) are not timed; the median of the rest is reported,
as wall-clock tokens a second and as CPU seconds (all threads) per thousand tokens — the second
holds its value on a machine busy with other work, where the wall clock does not.
Used to pick the tokenizer's size (compression per byte against the head's cost) and the
training modes that pay on this CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from redraft.engine.config import ModelConfig
from redraft.engine.model import DiffusionLM
from redraft.engine.training.recipe import build_optimizers
from redraft.engine.training.train import SHAPE, loss_of


def tokens_per_second(vocab: int, shape: dict, batch: int, seq: int, steps: int, bf16: bool, compile_: bool,
                      optimizer: str) -> tuple[float, float]:
    cfg = ModelConfig(**dict(shape, vocab_size=vocab), tie_word_embeddings=True, family="redraft", shifted=True,
                      attention="causal", mask_token_id=1, pad_token_id=0, end_token_ids=(0,))
    model = DiffusionLM(cfg).train()
    opt = build_optimizers(model, 1e-3, optimizer, bf16)
    fwd = torch.compile(loss_of) if compile_ else loss_of
    g = torch.Generator().manual_seed(0)
    times, cpu = [], []
    for i in range(steps + 2):
        ids = torch.randint(2, vocab, (batch, seq), generator=g)
        b = dict(ids=ids, target=torch.roll(ids, -1, 1), weight=torch.ones(batch, seq), causal=True)
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = fwd(model, b)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return batch * seq / statistics.median(times), statistics.median(cpu) / (batch * seq / 1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, nargs="+", default=[12288])
    ap.add_argument("--shape", default="{}", help="JSON overrides of the trainer's SHAPE")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", nargs="+", default=["bf16"], choices=["bf16", "fp32"])
    ap.add_argument("--compile", action="store_true", help="also time with torch.compile on the forward")
    ap.add_argument("--optimizer", default="muon", choices=["muon", "adamw"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    shape = dict(SHAPE, **json.loads(args.shape))
    for prec in args.precision:
        for comp in ([False, True] if args.compile else [False]):
            for v in args.vocab:
                tps, cpu_per_k = tokens_per_second(v, shape, args.batch, args.seq, args.steps, prec == "bf16", comp, args.optimizer)
                print(json.dumps(dict(vocab=v, precision=prec, compile=comp, batch=args.batch, seq=args.seq,
                                      layers=shape["num_hidden_layers"], hidden=shape["hidden_size"],
                                      tokens_per_s=round(tps), cpu_s_per_1k_tokens=round(cpu_per_k, 4))), flush=True)


if __name__ == "__main__":
    main()
