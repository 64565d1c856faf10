"""Several runs' denoising steps in one forward: continuous batching across requests.

A run paused at a step (sampler.Denoiser.run_steps) asks for its forward as a `Forward`: its
active block (B rows x T tokens), their positions, its own key/value cache with the context
at [0, start) and the validity of those keys. Runs that started apart have different context
lengths, block widths and caches, so their keys/values are not merged into one padded
tensor (a copy of every context per step); instead the token-wise work - embedding, the
q/k/v, output and MLP projections, the norms - runs once over every run's tokens laid end
to end ([N, E], N = sum of B x T), and only attention runs per run, over its own cache.
That is where batching pays: one large matmul per weight instead of one small one per run
(and on a GPU, one kernel launch instead of one per run). Each run gets back exactly the
hidden states its own forward would have given (up to float summation order).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .cache import KVCache
from .model import DiffusionLM, attention_mask


@dataclass(eq=False)
class Forward:
    """One run's step forward, waiting to be run alone or with others; `hidden` once run."""

    model: DiffusionLM
    ids: torch.Tensor  # [B, T]
    pos: torch.Tensor  # [B, T]
    kv: KVCache
    start: int  # where the block's keys/values go in `kv`
    key_valid: torch.Tensor | None  # [B, start + T], None when every key is valid
    hidden: torch.Tensor | None = None  # [B, T, E] after the final norm

    @property
    def tokens(self) -> int:
        return self.ids.numel()

    def run(self) -> torch.Tensor:
        """This forward alone (what the run does when nobody batches it)."""
        self.hidden = self.model(self.ids, self.pos, self.kv, start=self.start, key_valid=self.key_valid)
        return self.hidden


def run_together(forwards: list[Forward]) -> None:
    """Run every forward (all of one model) in one pass; each gets its `hidden`."""
    if not forwards:
        return
    if len(forwards) == 1:
        forwards[0].run()
        return
    model = forwards[0].model
    assert all(f.model is model for f in forwards), "one model per merged forward"
    body = model.model
    ids = torch.cat([f.ids.reshape(-1) for f in forwards])
    x = body.embed_tokens(ids)  # [N, E]
    sizes = [f.tokens for f in forwards]
    rotary = [body.rotary_emb(f.pos, x.dtype) for f in forwards]
    fast = model.span_attention
    masks = [None if fast is not None else
             attention_mask(f.ids.shape[0], f.ids.shape[1], f.start, False, f.key_valid, ids.device)
             for f in forwards]
    for layer in body.layers:
        attn = layer.self_attn
        q, k, v = attn.project(layer.input_layernorm(x))
        parts = []
        for f, (cos, sin), mask, q_i, k_i, v_i in zip(forwards, rotary, masks, q.split(sizes), k.split(sizes),
                                                        v.split(sizes)):
            B, T = f.ids.shape
            y = attn.attend(q_i.view(B, T, -1), k_i.view(B, T, -1), v_i.view(B, T, -1), cos, sin, f.kv, f.start,
                            mask, fast, f.key_valid)
            parts.append(y.reshape(B * T, -1))
        x = x + attn.out(torch.cat(parts))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    x = body.norm(x)
    for f, h in zip(forwards, x.split(sizes)):
        f.hidden = h.view(*f.ids.shape, -1)
