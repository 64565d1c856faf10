"""Training redraft's models on the CPU: the autoregressive twin and the diffusion model.

    python -m redraft.engine.training.train --objective ar --corpus corpus/ --tokenizer tok/ --out runs/ar \
        --steps 2000 --snapshot-at 1000
    python -m redraft.engine.training.train --objective diffusion --corpus corpus/ --init runs/ar/step-1000 \
        --out runs/diffusion --steps 1000

Autoregressive: next-token loss on every position of fill-in-the-middle rows (causal).
Diffusion (MDLM / LLaDA weighting): the span (middle, end token, padding) is masked with
ratio t ~ U(0.02, 1) and the loss on masked positions is weighted 1/t; in a share of rows
the visible span is a draft with edits (tokens replaced, inserted or dropped) and the loss
covers every span position, so the model learns to judge and repair a visible draft; an
entropy penalty on masked positions already predicted right makes right answers confident.
Context attends causally, the span block attends to everything ("context_causal"), so
context keys/values are exact and reusable at inference. Both objectives see the same
rows, shaped by examples.py, copy-rich ones first (a share annealed to 0), optionally
short rows first. Muon on hidden matrices and AdamW elsewhere (recipe.py), cosine schedule,
bf16 autocast where the CPU has native bf16 (float32 otherwise); checkpoints hold the model
and optimizer in safetensors (no pickles), --resume continues a run exactly, and --deadline
stops it at a wall-clock time.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import random
import signal
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from ..dtypes import auto_dtype
from ..config import ModelConfig
from ..model import DiffusionLM
from .corpus import read_split
from .state import _tok, load_state, restore_state, save_state
from .examples import EncodedExample, copy_example, encode_example, load_distilled, sample_example
from .ship import warm_start_history
from .blockrows import block_rows
from .recipe import block_pattern, build_optimizers, certainty_penalty, corrupt_span, seq_at, share_at
from ..prompt import END, MASK, SPECIAL_TOKENS

SHAPE = dict(vocab_size=12288, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
             num_attention_heads=8, num_key_value_heads=4, head_dim=32, rms_norm_eps=1e-6,
             rope_theta=10000.0, max_position_embeddings=2048)
DRAFT_SHARE = 0.15


class Rows:
    """An endless, seeded stream of training batches from a corpus split.

    Files are drawn by length (capped); with `mix` ({language: share}), each language's files
    together get that share of the rows (languages it leaves out: none).
    `copy_share` of the rows (falling to 0 over `copy_anneal` steps; constant when 0) are
    copy-rich (examples.copy_example); `edit_share` of diffusion rows show a corrupted draft
    (recipe.corrupt_span, edits at `edit_rate` of the middle); `block_share` of the others are
    masked as semi-autoregressive decoding in blocks of `block_size` sees them
    (recipe.block_pattern); rows grow from 128 tokens to T over `seq_warmup` steps.
    """

    def __init__(self, docs: list[dict], tok, T: int, B: int, seed: int, diffusion: bool, context_ar: bool = False,
                 *, copy_share: float = 0.0, copy_anneal: int = 0, edit_share: float = DRAFT_SHARE,
                 edit_rate: float = 0.3, block_share: float = 0.0, block_size: int = 2, seq_warmup: int = 0,
                 mix: dict[str, float] | None = None, block_causal: int = 0,
                 distilled: list[EncodedExample] | None = None, distill_share: float = 0.0, full_share: float = 0.0):
        docs = [d for d in docs if len(d["text"]) > 200]
        self.docs = [d["text"] for d in docs]
        weights = [min(len(t), 40_000) for t in self.docs]  # long files count, but not without bound
        if mix:
            weights = mix_weights([d.get("lang", "python") for d in docs], weights, mix)
        # Cumulative once: random.choices would sum every document's weight for every row.
        self.cum_weights = list(itertools.accumulate(weights))
        self.tok, self.T, self.B, self.seed, self.diffusion = tok, T, B, seed, diffusion
        self.context_ar = context_ar
        self.copy_share, self.copy_anneal, self.seq_warmup = copy_share, copy_anneal, seq_warmup
        self.edit_share, self.edit_rate = edit_share, edit_rate
        self.block_share, self.block_size = block_share, block_size
        self.block_causal = block_causal  # > 0: two-stream block-causal rows, blocks of this many (blockrows.py)
        self.full_share = full_share  # block-causal rows whose noisy blocks are masked whole
        self.distilled, self.distill_share = distilled or [], distill_share if distilled else 0.0
        self.end = tok.token_to_id(END)
        self.mask = tok.token_to_id(MASK)
        self.special = {tok.token_to_id(t) for t in SPECIAL_TOKENS}

    def seq(self, step: int) -> int:
        return seq_at(step, self.T, self.seq_warmup)

    def copy(self, step: int) -> float:
        return share_at(step, self.copy_share, self.copy_anneal)

    def batch(self, step: int) -> dict:
        rng = random.Random(self.seed * 1_000_003 + step)
        T, copy = self.seq(step), self.copy(step)
        rows = []
        while len(rows) < self.B:
            # The twin's own spans (distill.py), where given; no draw otherwise, as above.
            if self.distill_share and rng.random() < self.distill_share:
                rows.append(rng.choice(self.distilled))
                continue
            text = rng.choices(self.docs, cum_weights=self.cum_weights)[0]
            # No draw when the share is 0, so runs without copy rows see the rows they always did.
            pick = copy_example if copy and rng.random() < copy else sample_example
            ex = pick(text, rng)
            if ex is None or not ex.middle.strip():
                continue
            rows.append(encode_example(ex, self.tok, T, rng, pad_span=self.diffusion and not self.block_causal))
        if self.diffusion and self.block_causal:
            return block_rows(rows, self.B, self.block_causal, self.mask, self.end, rng, edit_share=self.edit_share,
                              edit_rate=self.edit_rate, special=frozenset(self.special), full_share=self.full_share)
        return self._diffusion(rows, rng, T) if self.diffusion else self._ar(rows, T)

    def _ar(self, rows, T: int) -> dict:
        ids = torch.full((self.B, T), self.end, dtype=torch.long)
        weight = torch.zeros(self.B, T)
        for b, r in enumerate(rows):
            ids[b, :len(r.ids)] = torch.tensor(r.ids)
            weight[b, :len(r.ids) - 1] = 1.0  # position j predicts j + 1
        target = torch.roll(ids, -1, dims=1)
        return dict(ids=ids, target=target, weight=weight, causal=True)

    def _diffusion(self, rows, rng: random.Random, T: int) -> dict:
        B = self.B
        ids = torch.full((B, T), self.end, dtype=torch.long)
        target = torch.full((B, T), self.end, dtype=torch.long)
        weight, ar_weight = torch.zeros(B, T), torch.zeros(B, T)
        masked = torch.zeros(B, T, dtype=torch.bool)  # at j - 1 when token j is masked
        ctx, stop = torch.zeros(B, dtype=torch.long), torch.zeros(B, dtype=torch.long)
        edited = torch.zeros(B, dtype=torch.bool)
        for b, r in enumerate(rows):
            row = list(r.ids)
            t = 0.02 + 0.98 * rng.random()
            edited[b] = rng.random() < self.edit_share
            if edited[b]:  # a draft with mistakes; the loss then covers every span position
                pool = [x for x in row[:r.span_at] if x not in self.special]
                draft, _ = corrupt_span(row[r.span_at:], r.middle, pool, self.edit_rate, rng, self.end)
            # No draw when the share is 0, so runs without block rows see the rows they always did.
            blocks = None
            if self.block_share and not edited[b] and rng.random() < self.block_share:
                blocks = block_pattern(len(row) - r.span_at, r.middle, self.block_size, t, rng)
            for k, j in enumerate(range(r.span_at, len(row))):
                target[b, j - 1] = r.ids[j]  # shifted: position j - 1 predicts token j
                if blocks is not None:  # unweighted: the mask ratio of a block row is not t
                    if blocks[k]:
                        row[j] = self.mask
                        weight[b, j - 1], masked[b, j - 1] = 1.0, True
                elif rng.random() < t:
                    row[j] = self.mask
                    weight[b, j - 1], masked[b, j - 1] = 1.0 / t, True
                elif edited[b]:
                    row[j] = draft[k]
                    weight[b, j - 1] = 1.0
            ids[b, :len(row)] = torch.tensor(row)
            ctx[b] = r.span_at - 1  # <|fim_middle|> opens the span block
            stop[b] = len(row)
            if self.context_ar:  # the context attends causally: each position may predict the next
                target[b, :r.span_at - 2] = torch.tensor(r.ids[1:r.span_at - 1])
                ar_weight[b, :r.span_at - 2] = 1.0
        return dict(ids=ids, target=target, weight=weight, causal=False, ctx=ctx, stop=stop, ar_weight=ar_weight,
                    masked=masked, edited=edited)


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


def loss_of(model: DiffusionLM, batch: dict, stats: dict | None = None) -> torch.Tensor:
    """The batch's loss; with `stats`, also masked-position accuracy and the share right and ≥ 90% sure."""
    ids = batch["ids"]
    B, T = ids.shape
    pos = batch["pos"] if "pos" in batch else torch.arange(T).expand(B, T)
    mask = batch.get("mask")  # an explicit pattern (block-causal rows)
    if mask is None and not batch["causal"]:
        mask = span_mask(batch["ctx"], batch["stop"], T, batch.get("full", False))
    hidden = model(ids, pos, causal=batch["causal"], mask=mask)
    loss = _weighted_ce(model, hidden, batch["target"], batch["weight"], batch.get("masked"),
                        batch.get("certainty", 0.0), stats)
    if "ar_weight" in batch and bool((batch["ar_weight"] > 0).any()):
        # Next-token loss on the causal context: its own mean, so the span keeps its weight.
        loss = loss + _weighted_ce(model, hidden, batch["target"], batch["ar_weight"])
    if stats is not None and "twin_at" in batch:  # how often block decoding's verification would accept
        with torch.no_grad():
            b, j = batch["masked"].nonzero(as_tuple=True)
            if b.numel():
                noisy = model.lm_head(hidden[b, j]).argmax(-1)
                clean = model.lm_head(hidden[b, batch["twin_at"][b, j]]).argmax(-1)
                stats["agree"] = float((noisy == clean).float().mean())
    if batch.get("consistency", 0.0) and "twin_at" in batch:
        loss = loss + batch["consistency"] * _consistency(model, hidden, batch["twin_at"], batch["masked"])
    return loss


def _consistency(model: DiffusionLM, hidden, twin_at, masked) -> torch.Tensor:
    """Soft cross-entropy of each masked noisy position against the clean stream's prediction
    of the same target, held fixed: the noisy block learns to say what the clean stream (the
    model read causally, as the twin) would say there, and to be as sure only where it can be
    (the clean stream sees the true text before the target; D2F's asymmetric distillation).
    Block decoding's commits then agree with what verifying them accepts (blockwise.py)."""
    b, j = masked.nonzero(as_tuple=True)
    if b.numel() == 0:
        return hidden.sum() * 0.0
    student = model.lm_head(hidden[b, j]).float().log_softmax(-1)
    with torch.no_grad():
        teacher = model.lm_head(hidden[b, twin_at[b, j]]).float().softmax(-1)
    return -(teacher * student).sum(-1).mean()


def _weighted_ce(model: DiffusionLM, hidden, target, w, masked=None, certainty: float = 0.0,
                 stats: dict | None = None) -> torch.Tensor:
    sel = w > 0
    logits = model.lm_head(hidden[sel]).float()
    tgt = target[sel]
    ce = F.cross_entropy(logits, tgt, reduction="none")
    loss = (ce * w[sel]).sum() / sel.sum().clamp_min(1)
    if masked is None:
        return loss
    m = masked[sel]
    n = m.sum().clamp_min(1)
    if certainty:  # per masked position, so its weight does not depend on the mask ratio
        loss = loss + certainty * certainty_penalty(logits[m], tgt[m]).sum() / n
    if stats is not None:
        with torch.no_grad():
            p, guess = logits[m].softmax(-1).max(-1)
            right = guess == tgt[m]
            stats["acc"] = float(right.sum() / n)
            stats["sure"] = float((right & (p >= 0.9)).sum() / n)
    return loss


def mix_weights(langs: list[str], weights: list[float], mix: dict[str, float]) -> list[float]:
    """`weights` rescaled so that each language's files sum to its share of `mix` (a language
    that `mix` leaves out gets 0)."""
    total: dict[str, float] = {}
    for lang, w in zip(langs, weights):
        total[lang] = total.get(lang, 0.0) + w
    share = sum(mix.values())
    return [w * mix.get(lang, 0.0) / share / total[lang] for lang, w in zip(langs, weights)]


def lr_at(step: int, steps: int, peak: float, warmup: int, schedule: str = "cosine", decay: float = 0.2) -> float:
    """Linear warm-up, then cosine down to 10% of the peak; or, with schedule "wsd"
    (warm-up, stable, decay), the peak until the last `decay` share of the steps, then linear
    to 10% — a run whose length is not known up front: raising --steps on resume only
    lengthens the stable part."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if schedule == "wsd":
        start = steps - int(decay * steps)
        return peak if step < start else peak * (1 - 0.9 * (step - start) / max(1, steps - start))
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def shape_for(tok, overrides: dict | None = None) -> dict:
    """SHAPE with the tokenizer's vocabulary (rounded up to a multiple of 64) and any overrides."""
    shape = dict(SHAPE, vocab_size=-(-tok.get_vocab_size() // 64) * 64)
    shape.update(overrides or {})
    return shape


def build_model(objective: str, tok, shape: dict, attention: str = "context_causal", block_size: int = 0) -> DiffusionLM:
    block = objective != "ar" and attention == "block_causal"
    cfg = ModelConfig(**shape, tie_word_embeddings=True, family="redraft", shifted=True,
                      attention="causal" if objective == "ar" else attention, block_size=block_size if block else 0,
                      mask_token_id=tok.token_to_id(MASK), pad_token_id=tok.token_to_id(END),
                      end_token_ids=(tok.token_to_id(END),))
    model = DiffusionLM(cfg)
    for name, p in model.named_parameters():
        if p.dim() > 1:
            std = 0.02 / math.sqrt(2 * cfg.num_hidden_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            torch.nn.init.normal_(p, std=std)
    return model


@contextlib.contextmanager
def _stop_on_sigterm():
    """A list that becomes non-empty on SIGTERM while the loop runs: it then ends after its
    step and saves (`kill PID` stops a background run without losing the steps since its last
    save). The previous handler is back afterwards (a process that trains in-process keeps
    its own)."""
    stop: list = []
    try:
        before = signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    except ValueError:  # not the main thread: no handler, no stop
        before = None
    try:
        yield stop
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def train(args) -> Path:
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    tok_dir = Path(args.tokenizer) if args.tokenizer else Path(args.init)
    tok = _tok(tok_dir)
    shape = shape_for(tok, json.loads(args.shape) if args.shape else None)
    model = start_model(args, tok, shape)
    bf16 = args.precision == "bf16" or (args.precision == "auto" and native_bf16())
    opt = build_optimizers(model, args.lr, args.optimizer, bf16)
    out = Path(args.out)
    step, log = 0, []
    if args.resume:
        restore_state(out / "last")
    if args.resume and (out / "last" / "train_state.json").is_file():
        step, log = load_state(out / "last", model, opt)
        print(f"resumed at step {step}", file=sys.stderr)
    if args.compile:  # the trunk only: the loss reads a varying number of positions
        model.forward = torch.compile(model.forward)
    rows, valid_batches = data(args, tok)
    meta = {k: getattr(args, k) for k in META}
    if args.init:  # absolute: the ship card reads the warm start's log from wherever it runs
        meta["init"] = str(Path(args.init).resolve())
        # What the warm start had seen, kept with the run from its first stretch on: a shipped
        # model it started from may be replaced (by this run's own result) before it ships.
        saved = out / "last" / "train_state.json"
        history = json.loads(saved.read_text())["meta"].get("init_history") if step and saved.is_file() else None
        history = history or warm_start_history(Path(args.init))
        if history:
            meta["init_history"] = list(history)
    meta["shape"] = shape
    if args.init and not log:  # where the warm start stands, on the same validation batches
        log.append(dict(step=0, tokens=0, seconds=0.0, **valid_entry(model, valid_batches, bf16)))
    from tqdm import tqdm
    bar = tqdm(total=args.steps, initial=step, desc=args.objective, file=sys.stderr, mininterval=10)
    # Seconds count on from the saved log, so a resumed run's wall time is the sum of its stretches.
    started, saved, took = time.time() - (log[-1]["seconds"] if log else 0.0), step, 0.0
    until = min(args.until or args.steps, args.steps)
    with _stop_on_sigterm() as stop:
        while step < until and time.time() + took < args.deadline and not stop:  # no step that would end past it
            began = time.time()
            for g in opt.param_groups:
                g["lr"] = lr_at(step, args.steps, args.lr, args.warmup, args.schedule, args.decay)
            batch = dict(rows.batch(step), full=args.attention == "full", certainty=args.certainty,
                         consistency=args.consistency)
            stats: dict = {}
            loss = train_step(model, opt, batch, stats, bf16)
            step += 1
            tokens = (log[-1]["tokens"] if log else 0) + batch["ids"].numel()  # rows may grow
            entry = {"step": step, "loss": round(loss, 4), "tokens": tokens, "seconds": round(time.time() - started, 1),
                     **{k: round(v, 4) for k, v in stats.items()}}
            if step % args.eval_every == 0 or step == args.steps:
                entry.update(valid_entry(model, valid_batches, bf16))
            log.append(entry)
            bar.update(1)
            bar.set_postfix(loss=entry["loss"], valid=entry.get("valid"))
            if args.print_every and (step % args.print_every == 0 or "valid" in entry):
                bar.write(json.dumps(dict(entry, seq=batch["ids"].shape[1], copy=round(rows.copy(step - 1), 3))),
                          file=sys.stderr)
            if step in args.snapshot_at:
                save_state(out / f"step-{step}", model, opt, step, log, meta, tok_dir)
            if step % args.save_every == 0 or step == until:
                save_state(out / "last", model, opt, step, log, meta, tok_dir)
                saved = step
            took = time.time() - began
    bar.close()
    if saved != step or not (out / "last").is_dir():  # stopped by the deadline between saves
        save_state(out / "last", model, opt, step, log, meta, tok_dir)
    plot(log, out / "loss.png", args.objective)
    return out / "last"


def start_model(args, tok, shape: dict) -> DiffusionLM:
    """The model to train: fresh, or the --init checkpoint's weights."""
    model = build_model(args.objective, tok, shape, args.attention, args.block_size)
    if args.init:
        model.load_state_dict(load_file(str(Path(args.init) / "model.safetensors")), strict=False)
    return model.train()


META = ("objective", "seq", "batch", "lr", "seed", "init", "steps", "attention", "context_ar", "optimizer",
        "copy_share", "copy_anneal", "edit_share", "edit_rate", "block_share", "block_size", "certainty", "consistency", "seq_warmup",
        "precision", "schedule", "decay", "mix", "distill", "distill_share", "full_share")


def valid_entry(model: DiffusionLM, batches: list[dict], bf16: bool) -> dict:
    stats: dict = {}
    loss = evaluate(model, batches, stats, bf16)
    model.train()
    return {"valid": round(loss, 4), **{f"valid_{k}": round(v, 4) for k, v in stats.items()}}


def data(args, tok) -> tuple[Rows, list[dict]]:
    """The training stream and the fixed validation batches (plain rows: runs compare)."""
    diffusion = args.objective == "diffusion"
    corpus = Path(args.corpus)
    if args.context_ar and (not diffusion or args.attention != "context_causal"):
        raise SystemExit("--context-ar needs --objective diffusion with --attention context_causal")
    blocks = args.block_size if diffusion and args.attention == "block_causal" else 0
    recipe = dict(copy_share=args.copy_share, copy_anneal=int(args.copy_anneal * args.steps),
                  edit_share=args.edit_share, edit_rate=args.edit_rate, block_share=args.block_share,
                  block_size=args.block_size, seq_warmup=args.seq_warmup)
    mix = json.loads(args.mix) if args.mix else None
    distilled = load_distilled(Path(args.distill), tok.token_to_id(END), args.seq) if args.distill else None
    if args.distill and not distilled:
        raise SystemExit(f"--distill {args.distill}: no rows of at most {args.seq} tokens")
    rows = Rows(read_split(corpus, "train"), tok, args.seq, args.batch, args.seed, diffusion, args.context_ar,
                mix=mix, block_causal=blocks, distilled=distilled, distill_share=args.distill_share,
                full_share=args.full_share, **recipe)
    # Validation loss without the context term, so runs with and without it compare.
    valid = Rows(read_split(corpus, "valid"), tok, args.seq, args.batch, args.seed + 1, diffusion, mix=mix,
                 block_causal=blocks)
    batches = [dict(valid.batch(10_000_000 + i), full=args.attention == "full") for i in range(args.valid_batches)]
    for b in batches if blocks else ():
        b["ar_weight"] = torch.zeros_like(b["ar_weight"])  # the span's loss alone, as above
    return rows, batches


def train_step(model: DiffusionLM, opt, batch: dict, stats: dict | None = None, bf16: bool = True) -> float:
    """One optimizer step on `batch` (bf16 autocast if asked, gradients clipped at 1); returns the loss."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = loss_of(model, batch, stats)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


@torch.no_grad()
def evaluate(model: DiffusionLM, batches: list[dict], stats: dict | None = None, bf16: bool = True) -> float:
    """Mean loss over `batches`; `stats` gets the mean of each loss_of statistic."""
    model.eval()
    total, sums = 0.0, {}
    for b in batches:
        one: dict = {}
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            total += float(loss_of(model, b, one))
        for k, v in one.items():
            sums[k] = sums.get(k, 0.0) + v / len(batches)
    if stats is not None:
        stats.update(sums)
    return total / len(batches)


def plot(log: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    t = [e for e in log if "loss" in e]  # a warm start's step 0 has only a validation loss
    ax.plot([e["tokens"] / 1e6 for e in t], [e["loss"] for e in t], lw=0.6, alpha=0.6, label="train")
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
    ap = argparse.ArgumentParser(prog="redraft train model",
                                 description="Train redraft's autoregressive twin or diffusion model.")
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
    ap.add_argument("--schedule", choices=["cosine", "wsd"], default="cosine",
                    help="learning rate after the warm-up: cosine to 10%%, or wsd (stable, then the last --decay "
                         "share of the steps linear to 10%%; --steps can grow on --resume)")
    ap.add_argument("--decay", type=float, default=0.2, help="wsd: the share of the steps that decays")
    ap.add_argument("--mix", help="JSON {language: share} of the rows (default: files by length, any language)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--valid-batches", type=int, default=4)
    ap.add_argument("--save-every", type=int, default=200)
    ap.add_argument("--snapshot-at", type=int, nargs="*", default=[])
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--attention", choices=["context_causal", "full", "block_causal"], default="context_causal",
                    help="diffusion only: how the context attends (the span always sees everything); block_causal: "
                         "the span in blocks of --block-size, finished blocks cached as the context (blockrows.py)")
    ap.add_argument("--context-ar", action="store_true",
                    help="diffusion with context_causal attention: also a next-token loss on the context")
    ap.add_argument("--until", type=int, default=0, help="stop after this step (resume later with --resume)")
    ap.add_argument("--deadline", type=deadline, default=math.inf,
                    help="stop (and save) before this UTC wall-clock time, HH:MM today or an ISO date-time: "
                         "no step starts that would end past it, judged by the step before")
    ap.add_argument("--print-every", type=int, default=0, help="print every Nth log entry as a JSON line")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model's forward: 0.85x the step time of a 8 x 256 model on the "
                         "2-core CPU (docs/training-log.md), after a minute of compiling")
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto",
                    help="bf16 autocast or float32; auto: bf16 where the CPU has native bf16")
    recipe = ap.add_argument_group("recipe", "beyond plain masked diffusion (engine/training/recipe.py)")
    recipe.add_argument("--optimizer", choices=["muon", "adamw"], default="muon",
                        help="muon: Muon on hidden matrices, AdamW on embeddings and norms")
    recipe.add_argument("--copy-share", type=float, default=0.5,
                        help="share of copy-rich rows (the middle recurs in the prefix) at the start")
    recipe.add_argument("--copy-anneal", type=float, default=0.3,
                        help="fraction of --steps over which the copy share falls to 0 (0: it stays)")
    recipe.add_argument("--edit-share", type=float, default=0.25,
                        help="diffusion: share of rows whose visible span is a draft with edits")
    recipe.add_argument("--edit-rate", type=float, default=0.3, help="diffusion: edits per true span token")
    recipe.add_argument("--block-share", type=float, default=0.0,
                        help="diffusion: share of the other rows masked as decoding in blocks sees them (a clean "
                             "beginning, one block partly masked, the rest masked)")
    recipe.add_argument("--block-size", type=int, default=2,
                        help="diffusion: the block of --block-share rows (the shipped sampler's block_size)")
    recipe.add_argument("--distill", default=None,
                        help="JSON lines of the twin's own spans (redraft train distill): sequence-level distillation")
    recipe.add_argument("--distill-share", type=float, default=0.5,
                        help="share of the rows drawn from --distill")
    recipe.add_argument("--consistency", type=float, default=0.0,
                        help="block-causal rows: weight of the soft cross-entropy of each masked noisy position "
                             "against the clean stream's prediction of the same target (0 = off)")
    recipe.add_argument("--full-share", type=float, default=0.0,
                        help="block-causal rows: share whose noisy blocks are masked whole after their first input "
                             "(TiDAR's drafting rows, as engine/drafting.py serves them)")
    recipe.add_argument("--certainty", type=float, default=0.2,
                        help="diffusion: weight of the entropy penalty on masked positions already right")
    recipe.add_argument("--seq-warmup", type=int, default=0,
                        help="steps over which rows grow from 128 tokens to --seq (0: none)")
    ap.add_argument("--shape", help="JSON overrides of the model shape, e.g. '{\"num_hidden_layers\": 2}'")
    return ap


def native_bf16() -> bool:
    """Whether bf16 is fast on this CPU (the engine's own measurement, dtypes.auto_dtype); without
    native bf16 its matmuls are ~70x slower than float32."""
    return auto_dtype("cpu") == "bfloat16"


def deadline(text: str) -> float:
    """Seconds since the epoch of `text`: "HH:MM" (UTC, today) or an ISO date-time (UTC unless it says)."""
    from datetime import datetime, timezone
    now = datetime.now(timezone.utc)
    if len(text) <= 5:
        h, m = map(int, text.split(":"))
        return now.replace(hour=h, minute=m, second=0, microsecond=0).timestamp()
    at = datetime.fromisoformat(text)
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if not args.tokenizer and not args.init:
        parser().error("--tokenizer or --init is needed")
    print(train(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
