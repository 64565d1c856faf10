"""The parts of the training recipe beyond plain masked diffusion, each behind a train.py flag.

- Edit corruption (Seed Diffusion): a visible draft of the span with plausible mistakes in it —
  tokens replaced, a token inserted (the rest shifted right by one) or dropped (shifted left) —
  so the model learns that a visible token may be wrong and repairs it.
- Certainty forcing (dParallel): an entropy penalty on masked positions the model already
  predicts correctly, so right answers become confident and several commit per step.
- Muon (Keller Jordan; Moonlight): orthogonalized momentum for the hidden 2-D matrices,
  AdamW for embeddings (tied with the head) and norms. Our own few lines rather than
  torch.optim.Muon: that one runs Newton–Schulz in bf16, which on CPUs without native bf16
  (AVX2) is ~70x slower than float32 (18 s a step for this model's matrices).
- Semi-autoregressive block rows (BD3-LM, Fast-dLLM v2, SDAR): the span as the sampler sees it
  when it decodes in blocks — a clean beginning, the current block partly masked, the rest
  masked — instead of a uniform random mask that leaves later tokens visible more often than
  decoding ever does.
- Schedules: the share of copy-rich rows annealed to zero, and a sequence-length warm-up.
Knows nothing of files or the corpus: token ids, tensors and parameters only.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch

EDIT_OPS = (("replace", 0.6), ("shift", 0.2), ("drop", 0.2))


@dataclass
class Edits:
    """What corrupt_span did: counts per kind and where (indices into the span)."""

    replaced: list[int] = field(default_factory=list)
    shifted: list[int] = field(default_factory=list)  # a token inserted here, the rest one to the right
    dropped: list[int] = field(default_factory=list)  # the token here deleted, the rest one to the left


def corrupt_span(span: list[int], n_true: int, pool: list[int], rate: float, rng: random.Random,
                 fill: int, ops=EDIT_OPS) -> tuple[list[int], Edits]:
    """A draft of `span` (same length) with edits at about `rate` of its first `n_true` tokens.

    Edits go left to right over the true tokens; each chosen position gets one op from `ops`.
    An insertion pushes the tail right (the last token falls off), a drop pulls it left and
    `fill` (the end token) pads the end, as a draft one token too long or too short would.
    """
    draft, edits = [], Edits()
    names, weights = [k for k, _ in ops], [w for _, w in ops]
    for j, true in enumerate(span):
        op = rng.choices(names, weights)[0] if j < n_true and rng.random() < rate else None
        wrong = plausible(true, span, j, pool, rng) if op in ("replace", "shift") else None
        if op is None or wrong == true:  # nothing wrong to put here: the token stays
            draft.append(true)
        elif op == "replace":
            draft.append(wrong)
            edits.replaced.append(j)
        elif op == "shift":
            draft += [wrong, true]
            edits.shifted.append(j)
        else:
            edits.dropped.append(j)
    draft = (draft + [fill] * len(span))[:len(span)]
    return draft, edits


def plausible(true: int, span: list[int], j: int, pool: list[int], rng: random.Random) -> int:
    """A wrong token a model might write here: a neighbour in the span (a stutter) or one from the context."""
    near = [t for t in span[max(0, j - 4):j + 5] if t != true]
    far = [t for t in pool if t != true]
    choices = near if near and (rng.random() < 0.5 or not far) else far
    return rng.choice(choices) if choices else true


def certainty_penalty(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """[N]: the entropy of each prediction whose argmax already is the target, 0 elsewhere.

    Added to the loss on masked positions, it sharpens only what is right (dParallel's
    certainty forcing); wrong predictions keep their plain cross-entropy gradient.
    """
    logp = logits.float().log_softmax(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return entropy * (logits.argmax(-1) == target)


def block_pattern(n: int, n_true: int, block: int, t: float, rng: random.Random) -> list[bool]:
    """Which of a span's `n` positions are masked in a block row: a cut at a block boundary
    within the true tokens or at the end token (index `n_true`; decoding stops there, so no
    later cut), every position before it visible, the block after it masked at ratio `t`
    (at least one), everything after that block masked."""
    cut = block * rng.randrange(n_true // block + 1)
    masked = [False] * cut
    inside = [rng.random() < t for _ in range(min(block, n - cut))]
    if inside and not any(inside):
        inside[rng.randrange(len(inside))] = True
    return masked + inside + [True] * (n - cut - len(inside))


NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # Keller Jordan's quintic: steep at 0, lands in ~[0.7, 1.2]


def orthogonalize(g: torch.Tensor, steps: int = 5, eps: float = 1e-7,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """U·S'·Vᵀ with S' ≈ 1 for g = U·S·Vᵀ: 5 Newton–Schulz iterations in `dtype`. bf16 gives
    the same spread of singular values (the iteration only lands them in ~[0.7, 1.15]) at a
    third of float32's time where the CPU multiplies bf16 natively."""
    a, b, c = NS_COEFFICIENTS
    x = g.to(dtype)
    tall = x.size(0) > x.size(1)
    if tall:  # iterate on the wide side: the Gram matrix is the smaller one
        x = x.T
    x = x / (x.norm() + eps)  # Frobenius ≥ spectral norm: singular values start in (0, 1]
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


class Muon(torch.optim.Optimizer):
    """Nesterov momentum whose update is orthogonalized, for 2-D matrices only.

    Every direction of the update moves by about the same amount, so rare directions
    learn as fast as common ones. The step is scaled by 0.2·√max(rows, cols) to match
    AdamW's update RMS (Moonlight), so AdamW's learning rate and schedule carry over.
    """

    def __init__(self, params, lr: float, weight_decay: float = 0.1, momentum: float = 0.95,
                 nesterov: bool = True, ns_steps: int = 5, ns_dtype: torch.dtype = torch.float32):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                                      ns_steps=ns_steps))
        self.ns_dtype = ns_dtype  # not a group setting: saved state stays the same either way

    @torch.no_grad()
    def step(self) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                assert p.dim() == 2, "Muon is for matrices"
                st = self.state[p]
                if "momentum_buffer" not in st:
                    st["momentum_buffer"] = torch.zeros_like(p)
                buf = st["momentum_buffer"]
                buf.lerp_(p.grad, 1 - g["momentum"])
                update = p.grad.lerp(buf, g["momentum"]) if g["nesterov"] else buf
                p.mul_(1 - g["lr"] * g["weight_decay"])  # decoupled weight decay
                scale = 0.2 * math.sqrt(max(p.shape))  # orthogonal update RMS is 1/√max; this makes it 0.2
                p.add_(orthogonalize(update, g["ns_steps"], dtype=self.ns_dtype).to(p.dtype), alpha=-g["lr"] * scale)


class Optimizers:
    """Several optimizers over disjoint parameters, stepped, scheduled and saved as one."""

    def __init__(self, opts: list[torch.optim.Optimizer], kind: str):
        self.opts, self.kind = opts, kind

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.opts for g in o.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.opts:
            o.step()


def hidden_matrices(model: torch.nn.Module) -> tuple[list, list, list]:
    """(hidden 2-D matrices, embeddings/head, norms): Muon takes only the first."""
    hidden, embed, norms = [], [], []
    for name, p in model.named_parameters():  # tied head and embedding appear once
        if p.dim() < 2:
            norms.append(p)
        elif "embed" in name or "lm_head" in name:
            embed.append(p)
        else:
            hidden.append(p)
    return hidden, embed, norms


def build_optimizers(model: torch.nn.Module, lr: float, kind: str = "muon", bf16: bool = False) -> Optimizers:
    """Muon (5 Newton–Schulz steps, Nesterov momentum 0.95) on hidden matrices, AdamW elsewhere.

    Muon's updates are scaled to AdamW's RMS, so one learning rate and one schedule serve both.
    kind="adamw": AdamW everywhere, as the first models were trained. `bf16`: Newton–Schulz in
    bf16 (only where bf16 is fast: on AVX2 it would be ~50× slower than float32).
    """
    hidden, embed, norms = hidden_matrices(model)
    adam = dict(lr=lr, betas=(0.9, 0.95), fused=False)
    if kind == "adamw":
        return Optimizers([torch.optim.AdamW([{"params": hidden + embed, "weight_decay": 0.1},
                                              {"params": norms, "weight_decay": 0.0}], **adam)], kind)
    muon = Muon(hidden, lr=lr, weight_decay=0.1, momentum=0.95, nesterov=True, ns_steps=5,
                ns_dtype=torch.bfloat16 if bf16 else torch.float32)
    rest = torch.optim.AdamW([{"params": embed, "weight_decay": 0.1}, {"params": norms, "weight_decay": 0.0}],
                             **adam)
    return Optimizers([muon, rest], kind)


def share_at(step: int, start: float, anneal_steps: int) -> float:
    """A share that falls linearly from `start` to 0 over the first `anneal_steps` steps."""
    if anneal_steps <= 0 or step >= anneal_steps:
        return 0.0 if anneal_steps > 0 else start
    return start * (1 - step / anneal_steps)


def seq_at(step: int, seq: int, warmup_steps: int, first: int = 128) -> int:
    """Row length at `step`: from `first` up to `seq` over the warm-up, in multiples of 64."""
    if warmup_steps <= 0 or step >= warmup_steps or first >= seq:
        return seq
    return min(seq, 64 * math.ceil((first + (seq - first) * step / warmup_steps) / 64))
