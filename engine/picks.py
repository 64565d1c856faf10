"""What one step picks at each masked position: a token (greedy, or temperature / top-p
sampling) and the scores the unmask rule reads (max-prob, margin or exp(-entropy)).

Shapes: N positions, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import SamplerConfig


@dataclass
class Picks:
    """The token picked at each masked position of a step, and its scores."""

    tokens: torch.Tensor  # [N]
    score: torch.Tensor  # [N] what the threshold is compared with
    prob: torch.Tensor  # [N] probability of the chosen token (at the sampling temperature)
    logp: torch.Tensor  # [N] log-probability of the chosen token at temperature 1
    top_logp: torch.Tensor  # [N] log of the largest probability (first-step length choice)
    copied: torch.Tensor | None = None  # [N] continues a copied run (the cache model), when one is mixed in

    def select(self, sel: torch.Tensor) -> "Picks":
        return Picks(*(None if t is None else t[sel] for t in self.__dict__.values()))

    def cpu(self) -> "Picks":
        return Picks(*(None if t is None else t.cpu() for t in self.__dict__.values()))


def choose(logits: torch.Tensor, scfg: SamplerConfig, gen: torch.Generator | None) -> Picks:
    """logits [N, V] (fp32, banned ids already -inf) -> one token per row and its scores."""
    logp_raw = torch.log_softmax(logits, dim=-1)
    if scfg.temperature > 0:
        probs = torch.softmax(logits / scfg.temperature, dim=-1)
        if scfg.top_p < 1.0:
            probs = _top_p(probs, scfg.top_p)
        tokens = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
    else:
        probs = logp_raw.exp()
        tokens = probs.argmax(-1)
    prob = probs.gather(-1, tokens[:, None]).squeeze(-1)
    if scfg.score == "maxprob":
        score = prob
    elif scfg.score == "margin":
        top2 = probs.topk(2, dim=-1).values
        score = top2[:, 0] - top2[:, 1]
    else:  # entropy, mapped to (0, 1] so one threshold serves every score
        ent = -(probs * torch.log(probs.clamp_min(1e-12))).sum(-1)
        score = torch.exp(-ent)
    return Picks(tokens, score, prob, logp_raw.gather(-1, tokens[:, None]).squeeze(-1), logp_raw.max(-1).values)


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_p, order = probs.sort(dim=-1, descending=True)
    drop = sorted_p.cumsum(-1) - sorted_p > top_p
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    out = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return out / out.sum(-1, keepdim=True)
