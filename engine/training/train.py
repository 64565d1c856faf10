"""Training redraft's models on the CPU: the autoregressive twin and the diffusion model.

    python -m redraft.engine.training.train --objective ar --corpus corpus/ --tokenizer tok/ --out runs/ar \
        --steps 2000 --snapshot-at 1000
    python -m redraft.engine.training.train --objective diffusion --corpus corpus/ --init runs/ar/step-1000 \
        --out runs/diffusion --steps 1000

Autoregressive: next-token loss on every position of fill-in-the-middle rows (causal).
Diffusion (MDLM / LLaDA weighting): the span (middle, end token, padding) is masked with
ratio t ~ U(0.02, 1) and the loss on masked positions is weighted 1/t; in a share of rows
visible span tokens are swapped for plausible wrong ones (tokens of the same row) and the
loss covers every span position, so the model learns to judge and repair a visible draft.
Context attends causally, the span block attends to everything ("context_causal"), so
context keys/values are exact and reusable at inference. Both objectives see the same
rows, shaped by examples.py. bf16 autocast, AdamW, cosine schedule; checkpoints hold the
model and optimizer in safetensors (no pickles), and --resume continues a run exactly.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from ..checkpoint import save_checkpoint
from ..config import ModelConfig
from ..model import DiffusionLM
from .corpus import read_split
from .examples import encode_example, sample_example
from ..prompt import END, LAYOUT, MASK, SEGMENT_TOKENS

SHAPE = dict(vocab_size=12288, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
             num_attention_heads=8, num_key_value_heads=4, head_dim=32, rms_norm_eps=1e-6,
             rope_theta=10000.0, max_position_embeddings=2048)
DRAFT_SHARE = 0.15


class Rows:
    """An endless, seeded stream of training batches from a corpus split."""

    def __init__(self, docs: list[dict], tok, T: int, B: int, seed: int, diffusion: bool, context_ar: bool = False):
        self.docs = [d["text"] for d in docs if len(d["text"]) > 200]
        self.weights = [min(len(t), 40_000) for t in self.docs]  # long files count, but not without bound
        self.tok, self.T, self.B, self.seed, self.diffusion = tok, T, B, seed, diffusion
        self.context_ar = context_ar
        self.end = tok.token_to_id(END)
        self.mask = tok.token_to_id(MASK)

    def batch(self, step: int) -> dict:
        rng = random.Random(self.seed * 1_000_003 + step)
        rows = []
        while len(rows) < self.B:
            text = rng.choices(self.docs, self.weights)[0]
            ex = sample_example(text, rng)
            if ex is None or not ex.middle.strip():
                continue
            rows.append(encode_example(ex, self.tok, self.T, rng, pad_span=self.diffusion))
        return self._diffusion(rows, rng) if self.diffusion else self._ar(rows)

    def _ar(self, rows) -> dict:
        ids = torch.full((self.B, self.T), self.end, dtype=torch.long)
        weight = torch.zeros(self.B, self.T)
        for b, r in enumerate(rows):
            ids[b, :len(r.ids)] = torch.tensor(r.ids)
            weight[b, :len(r.ids) - 1] = 1.0  # position j predicts j + 1
        target = torch.roll(ids, -1, dims=1)
        return dict(ids=ids, target=target, weight=weight, causal=True)

    def _diffusion(self, rows, rng: random.Random) -> dict:
        ids = torch.full((self.B, self.T), self.end, dtype=torch.long)
        target = torch.full((self.B, self.T), self.end, dtype=torch.long)
        weight = torch.zeros(self.B, self.T)
        ctx = torch.zeros(self.B, dtype=torch.long)
        stop = torch.zeros(self.B, dtype=torch.long)
        ar_weight = torch.zeros(self.B, self.T)
        for b, r in enumerate(rows):
            row = list(r.ids)
            t = 0.02 + 0.98 * rng.random()
            draft = rng.random() < DRAFT_SHARE
            context_tokens = row[:r.span_at]
            for j in range(r.span_at, len(row)):
                true = r.ids[j]
                target[b, j - 1] = true  # shifted: position j - 1 predicts token j
                if rng.random() < t:
                    row[j] = self.mask
                    weight[b, j - 1] = 1.0 / t
                elif draft:
                    if rng.random() < 0.3:
                        row[j] = rng.choice(context_tokens)
                    weight[b, j - 1] = 1.0
            ids[b, :len(row)] = torch.tensor(row)
            ctx[b] = r.span_at - 1  # <|fim_middle|> opens the span block
            stop[b] = len(row)
            if self.context_ar:  # the context attends causally: each position may predict the next
                target[b, :r.span_at - 2] = torch.tensor(r.ids[1:r.span_at - 1])
                ar_weight[b, :r.span_at - 2] = 1.0
        return dict(ids=ids, target=target, weight=weight, causal=False, ctx=ctx, stop=stop, ar_weight=ar_weight)


def span_mask(ctx: torch.Tensor, stop: torch.Tensor, T: int, full: bool = False) -> torch.Tensor:
    """[B, 1, T, T]: context causal, the span block (from ctx to stop) sees everything before stop.

    With `full`, every position before stop sees every other (bidirectional, as Dream / LLaDA).
    Padding after stop attends causally; its outputs are never read.
    """
    q = torch.arange(T)[None, :, None]
    k = torch.arange(T)[None, None, :]
    c, s = ctx[:, None, None], stop[:, None, None]
    in_block = ((q >= c) if not full else (q >= 0)) & (q < s)
    return ((k <= q) | (in_block & (k < s))).unsqueeze(1)


def loss_of(model: DiffusionLM, batch: dict) -> torch.Tensor:
    ids = batch["ids"]
    B, T = ids.shape
    pos = torch.arange(T).expand(B, T)
    mask = None if batch["causal"] else span_mask(batch["ctx"], batch["stop"], T, batch.get("full", False))
    hidden = model(ids, pos, causal=batch["causal"], mask=mask)
    loss = _weighted_ce(model, hidden, batch["target"], batch["weight"])
    if "ar_weight" in batch and bool((batch["ar_weight"] > 0).any()):
        # Next-token loss on the causal context: its own mean, so the span keeps its weight.
        loss = loss + _weighted_ce(model, hidden, batch["target"], batch["ar_weight"])
    return loss


def _weighted_ce(model: DiffusionLM, hidden, target, w) -> torch.Tensor:
    sel = w > 0
    logits = model.lm_head(hidden[sel]).float()
    ce = F.cross_entropy(logits, target[sel], reduction="none")
    return (ce * w[sel]).sum() / sel.sum().clamp_min(1)


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def model_config(shape: dict, tokenizer, *, causal: bool) -> dict:
    """config.json for a redraft-format checkpoint of the given shape."""
    tid = tokenizer.token_to_id
    return {
        "model_type": "redraft",
        "architectures": ["RedraftForMaskedDiffusion" if not causal else "RedraftForCausalLM"],
        **shape,
        "attention_bias": False,
        "tie_word_embeddings": True,
        "shifted": True,
        "attention_pattern": "causal" if causal else "context_causal",
        "layout": LAYOUT,
        "segment_tokens": SEGMENT_TOKENS,
        "mask_token_id": tid(MASK),
        "pad_token_id": tid(END),
        "eos_token_id": tid(END),
        "bos_token_id": tid(END),
    }


def save_state(folder: Path, model, opt, step: int, log: list, meta: dict, tok_dir: Path) -> None:
    """A resumable checkpoint: a redraft-format model folder plus optimizer tensors."""
    cfg = model_config(meta["shape"], _tok(tok_dir), causal=meta["objective"] == "ar")
    if meta["objective"] != "ar":
        cfg["attention_pattern"] = meta.get("attention", "context_causal")
    save_checkpoint(model, folder, cfg, dtype=torch.float32)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / name, folder / name)
    tensors = {}
    sd = opt.state_dict()
    for idx, st in sd["state"].items():
        for k, v in st.items():
            tensors[f"{idx}.{k}"] = v.detach().clone().reshape(v.shape) if torch.is_tensor(v) else torch.tensor(v)
    save_file(tensors, str(folder / "optimizer.safetensors"))
    (folder / "train_state.json").write_text(json.dumps(
        {"step": step, "log": log, "meta": meta, "param_groups": sd["param_groups"]}) + "\n")


def load_state(folder: Path, model, opt) -> tuple[int, list]:
    state = json.loads((folder / "train_state.json").read_text())
    weights = load_file(str(folder / "model.safetensors"))
    model.load_state_dict(weights, strict=False)
    tensors = load_file(str(folder / "optimizer.safetensors"))
    st: dict[int, dict] = {}
    for key, v in tensors.items():
        idx, name = key.split(".", 1)
        st.setdefault(int(idx), {})[name] = v
    opt.load_state_dict({"state": st, "param_groups": state["param_groups"]})
    return state["step"], state["log"]


def _tok(folder: Path):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def shape_for(tok, overrides: dict | None = None) -> dict:
    """SHAPE with the tokenizer's vocabulary (rounded up to a multiple of 64) and any overrides."""
    shape = dict(SHAPE, vocab_size=-(-tok.get_vocab_size() // 64) * 64)
    shape.update(overrides or {})
    return shape


def build_model(objective: str, tok, shape: dict, attention: str = "context_causal") -> DiffusionLM:
    cfg = ModelConfig(**shape, tie_word_embeddings=True, family="redraft", shifted=True,
                      attention="causal" if objective == "ar" else attention,
                      mask_token_id=tok.token_to_id(MASK), pad_token_id=tok.token_to_id(END),
                      end_token_ids=(tok.token_to_id(END),))
    model = DiffusionLM(cfg)
    for name, p in model.named_parameters():
        if p.dim() > 1:
            std = 0.02 / math.sqrt(2 * cfg.num_hidden_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            torch.nn.init.normal_(p, std=std)
    return model


def train(args) -> Path:
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    tok_dir = Path(args.tokenizer) if args.tokenizer else Path(args.init)
    tok = _tok(tok_dir)
    shape = shape_for(tok, json.loads(args.shape) if args.shape else None)
    model = build_model(args.objective, tok, shape, args.attention)
    if args.init:
        model.load_state_dict(load_file(str(Path(args.init) / "model.safetensors")), strict=False)
    model.train()
    opt = optimizer(model, args.lr)
    out = Path(args.out)
    step, log = 0, []
    if args.resume and (out / "last" / "train_state.json").is_file():
        step, log = load_state(out / "last", model, opt)
        print(f"resumed at step {step}", file=sys.stderr)
    rows, valid_batches = data(args, tok)
    meta = {"objective": args.objective, "seq": args.seq, "batch": args.batch, "lr": args.lr, "seed": args.seed,
            "init": args.init, "steps": args.steps, "shape": shape, "attention": args.attention,
            "context_ar": args.context_ar}
    from tqdm import tqdm
    bar = tqdm(total=args.steps, initial=step, desc=args.objective, file=sys.stderr, mininterval=10)
    started = time.time()
    until = min(args.until or args.steps, args.steps)
    while step < until:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        loss = train_step(model, opt, dict(rows.batch(step), full=args.attention == "full"))
        step += 1
        entry = {"step": step, "loss": round(loss, 4), "tokens": step * args.batch * args.seq,
                 "seconds": round(time.time() - started, 1)}
        if step % args.eval_every == 0 or step == args.steps:
            entry["valid"] = round(evaluate(model, valid_batches), 4)
            model.train()
        log.append(entry)
        bar.update(1)
        bar.set_postfix(loss=entry["loss"], valid=entry.get("valid"))
        if step in args.snapshot_at:
            save_state(out / f"step-{step}", model, opt, step, log, meta, tok_dir)
        if step % args.save_every == 0 or step == until:
            save_state(out / "last", model, opt, step, log, meta, tok_dir)
    bar.close()
    plot(log, out / "loss.png", args.objective)
    return out / "last"


def optimizer(model: DiffusionLM, lr: float) -> torch.optim.Optimizer:
    """AdamW, weight decay on matrices only."""
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if p.dim() <= 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), fused=False)


def data(args, tok) -> tuple[Rows, list[dict]]:
    """The training stream and the fixed validation batches."""
    diffusion = args.objective == "diffusion"
    corpus = Path(args.corpus)
    if args.context_ar and (not diffusion or args.attention != "context_causal"):
        raise SystemExit("--context-ar needs --objective diffusion with --attention context_causal")
    rows = Rows(read_split(corpus, "train"), tok, args.seq, args.batch, args.seed, diffusion, args.context_ar)
    # Validation loss without the context term, so runs with and without it compare.
    valid = Rows(read_split(corpus, "valid"), tok, args.seq, args.batch, args.seed + 1, diffusion)
    return rows, [dict(valid.batch(10_000_000 + i), full=args.attention == "full") for i in range(args.valid_batches)]


def train_step(model: DiffusionLM, opt: torch.optim.Optimizer, batch: dict) -> float:
    """One optimizer step on `batch` (bf16 autocast, gradients clipped at 1); returns the loss."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_of(model, batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


@torch.no_grad()
def evaluate(model: DiffusionLM, batches: list[dict]) -> float:
    model.eval()
    total = 0.0
    for b in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            total += float(loss_of(model, b))
    return total / len(batches)


def plot(log: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([e["tokens"] / 1e6 for e in log], [e["loss"] for e in log], lw=0.6, alpha=0.6, label="train")
    v = [e for e in log if "valid" in e]
    ax.plot([e["tokens"] / 1e6 for e in v], [e["valid"] for e in v], "o-", label="validation")
    ax.set_xlabel("training tokens (M)")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="Train redraft's autoregressive twin or diffusion model.")
    ap.add_argument("--objective", choices=["ar", "diffusion"], required=True)
    ap.add_argument("--corpus", required=True, help="folder written by redraft.engine.training.corpus")
    ap.add_argument("--tokenizer", help="folder with tokenizer.json (default: the --init folder's)")
    ap.add_argument("--init", help="start from this checkpoint folder (e.g. an autoregressive snapshot)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--valid-batches", type=int, default=4)
    ap.add_argument("--save-every", type=int, default=200)
    ap.add_argument("--snapshot-at", type=int, nargs="*", default=[])
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--attention", choices=["context_causal", "full"], default="context_causal",
                    help="diffusion only: how the context attends (the span always sees everything)")
    ap.add_argument("--context-ar", action="store_true",
                    help="diffusion with context_causal attention: also a next-token loss on the context")
    ap.add_argument("--until", type=int, default=0, help="stop after this step (resume later with --resume)")
    ap.add_argument("--shape", help="JSON overrides of the model shape, e.g. '{\"num_hidden_layers\": 2}'")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if not args.tokenizer and not args.init:
        parser().error("--tokenizer or --init is needed")
    print(train(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
