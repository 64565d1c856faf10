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

The same holds within one forward whose rows are padded to the longest: the rows of a request
(drafts of different lengths, span-length candidates) and of merged requests. Where padding is
a large share of a block (a third of the positions of the judging forwards of blocks on the
held-out packages), each row runs as its own forward of its own length, all in one pass, and
the padding runs nowhere; its hidden states are zeros, which nothing reads (picks and scores
read span positions only, unmask.py `span_positions`).
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
    causal: bool = False  # the block attends causally within itself (window_lookup.py judging)

    @property
    def tokens(self) -> int:
        return self.ids.numel()

    def run(self) -> torch.Tensor:
        """This forward alone (what the run does when nobody batches it)."""
        rows = self.rows_trimmed()
        if rows is not None:
            _run_rows([self], [rows])
        else:
            self.hidden = self.model(self.ids, self.pos, self.kv, start=self.start, causal=self.causal,
                                     key_valid=self.key_valid)
        return self.hidden

    def rows_trimmed(self) -> list[Forward] | None:
        """One forward a row, each cut to the row's own tokens, when padding after the rows'
        tokens is at least PADDED_SHARE of the block; None otherwise (or when some row's valid
        tokens are not a prefix of its block). Their keys/values go to this forward's cache."""
        if self.key_valid is None or self.ids.shape[1] < 2:
            return None
        valid = self.key_valid[:, self.start:]
        lengths = valid.sum(1)
        B, T = valid.shape
        if int(lengths.sum()) > (1 - PADDED_SHARE) * B * T or int(lengths.min()) == 0:
            return None
        if not bool((valid == (torch.arange(T, device=valid.device) < lengths[:, None])).all()):
            return None
        out = []
        for b, n in enumerate(lengths.tolist()):
            kv = self.kv.rows_view(b, b + 1)  # row b's slice of the cache: writes land in it
            keys = self.key_valid[b:b + 1, :self.start + n]
            out.append(Forward(self.model, self.ids[b:b + 1, :n], self.pos[b:b + 1, :n], kv, self.start,
                               None if bool(keys.all()) else keys, causal=self.causal))
        return out


PADDED_SHARE = 0.25  # below this, one padded call costs less than a call a row


def run_together(forwards: list[Forward]) -> None:
    """Run every forward (all of one model) in one pass; each gets its `hidden`. Forwards whose
    rows are padded run as one forward a row, cut to its length (`Forward.rows_trimmed`)."""
    if not forwards:
        return
    parts = [f.rows_trimmed() for f in forwards]
    if any(p is not None for p in parts):
        _run_rows(forwards, parts)
    elif len(forwards) == 1:
        forwards[0].run()
    else:
        _run_merged(forwards)


def _run_rows(forwards: list[Forward], parts: list[list[Forward] | None]) -> None:
    """The forwards in one pass, those with `parts` as their rows cut to length; the rows'
    hidden states are laid back into their blocks, zeros over the padding."""
    _run_merged([g for f, p in zip(forwards, parts) for g in (p if p is not None else [f])])
    for f, p in zip(forwards, parts):
        if p is not None:
            f.hidden = torch.zeros((*f.ids.shape, p[0].hidden.shape[-1]), dtype=p[0].hidden.dtype,
                                   device=p[0].hidden.device)
            for b, g in enumerate(p):
                f.hidden[b, :g.ids.shape[1]] = g.hidden[0]


def _run_merged(forwards: list[Forward]) -> None:
    """Token-wise work over every forward's tokens laid end to end, attention per forward."""
    if len(forwards) == 1:
        f = forwards[0]
        f.hidden = f.model(f.ids, f.pos, f.kv, start=f.start, causal=f.causal, key_valid=f.key_valid)
        return
    model = forwards[0].model
    assert all(f.model is model for f in forwards), "one model per merged forward"
    body = model.model
    ids = torch.cat([f.ids.reshape(-1) for f in forwards])
    x = body.embed_tokens(ids)  # [N, E]
    sizes = [f.tokens for f in forwards]
    rotary = [body.rotary_emb(f.pos, x.dtype) for f in forwards]
    fast = model.span_attention
    masks = [None if fast is not None and not f.causal else
             attention_mask(f.ids.shape[0], f.ids.shape[1], f.start, f.causal, f.key_valid, ids.device)
             for f in forwards]
    for layer in body.layers:
        attn = layer.self_attn
        q, k, v = attn.project(layer.input_layernorm(x))
        parts = []
        for f, (cos, sin), mask, q_i, k_i, v_i in zip(forwards, rotary, masks, q.split(sizes), k.split(sizes),
                                                        v.split(sizes)):
            B, T = f.ids.shape
            y = attn.attend(q_i.view(B, T, -1), k_i.view(B, T, -1), v_i.view(B, T, -1), cos, sin, f.kv, f.start,
                            mask, None if f.causal else fast, f.key_valid)
            parts.append(y.reshape(B * T, -1))
        x = x + attn.out(torch.cat(parts))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    x = body.norm(x)
    for f, h in zip(forwards, x.split(sizes)):
        f.hidden = h.view(*f.ids.shape, -1)
