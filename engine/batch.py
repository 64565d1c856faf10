"""Rows of one batch as padded tensors, and encoding their context into a KVCache.

Context is right-padded to the longest row (padding keys are masked out); the active block
follows it at [C, C + A). When every row has the same context (one request, span lengths
that do not move the suffix) it is encoded once and, for causally-attending contexts,
the part an earlier request already encoded is reused. Rows of several requests are encoded
per request (`encode_contexts`), each from its own request's cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .cache import ContextCache, KVCache
from .layout import Row
from .model import DiffusionLM


@dataclass
class Batch:
    rows: list[Row]
    ctx_ids: torch.Tensor  # [B, C]
    ctx_pos: torch.Tensor
    ctx_valid: torch.Tensor  # [B, C] bool
    act_ids: torch.Tensor  # [B, A]
    act_pos: torch.Tensor
    act_valid: torch.Tensor  # [B, A] bool
    span_at: int

    @property
    def B(self) -> int:
        return self.act_ids.shape[0]

    @property
    def C(self) -> int:
        return self.ctx_ids.shape[1]

    @property
    def A(self) -> int:
        return self.act_ids.shape[1]

    def key_valid(self) -> torch.Tensor:
        return torch.cat([self.ctx_valid, self.act_valid], dim=1)

    def select(self, keep: torch.Tensor) -> "Batch":
        idx = keep.tolist()
        keep = keep.to(self.act_ids.device)
        return Batch([self.rows[i] for i in idx], self.ctx_ids[keep], self.ctx_pos[keep], self.ctx_valid[keep],
                     self.act_ids[keep], self.act_pos[keep], self.act_valid[keep], self.span_at)


def make_batch(rows: list[Row], pad_id: int, device) -> Batch:
    C = max(len(r.ctx_ids) for r in rows)
    A = max(len(r.act_ids) for r in rows)

    def padded(seqs, width, fill):
        out = torch.full((len(seqs), width), fill, dtype=torch.long)
        for i, s in enumerate(seqs):
            out[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        return out.to(device)

    def valid(seqs, width):
        out = torch.zeros((len(seqs), width), dtype=torch.bool)
        for i, s in enumerate(seqs):
            out[i, :len(s)] = True
        return out.to(device)

    return Batch(
        rows,
        padded([r.ctx_ids for r in rows], C, pad_id), padded([r.ctx_pos for r in rows], C, 0),
        valid([r.ctx_ids for r in rows], C),
        padded([r.act_ids for r in rows], A, pad_id), padded([r.act_pos for r in rows], A, 0),
        valid([r.act_ids for r in rows], A),
        rows[0].span_at,
    )


def encode_context(model: DiffusionLM, batch: Batch, reuse: ContextCache | None, extra: int) -> tuple[KVCache, int]:
    """Causally encode the context into a cache with room for `extra` more positions.

    Returns the cache and how many context tokens came from `reuse` (an earlier request).
    Only for models whose context attends causally: their keys/values are then exact.
    """
    cfg = model.config
    p = next(model.parameters())
    shared = batch.B == 1 or all(r.ctx_ids == batch.rows[0].ctx_ids and r.ctx_pos == batch.rows[0].ctx_pos
                                 for r in batch.rows)
    capacity = batch.C + extra
    reused = 0
    if shared and reuse is not None:
        pairs = batch.rows[0].context_pairs
        reused = reuse.reusable(pairs) if reuse.kv is not None else 0
        kv = reuse.kv if reused > 0 else None
        if kv is None:
            kv = KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, capacity + 256, cfg.head_dim, p.dtype, p.device)
        kv.ensure(capacity, keep=reused)
        if batch.C > reused:
            model(batch.ctx_ids[:1, reused:], batch.ctx_pos[:1, reused:], kv, start=reused, causal=True)
        reuse.store(kv, pairs)
    elif shared:
        kv = KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, capacity, cfg.head_dim, p.dtype, p.device)
        if batch.C:
            model(batch.ctx_ids[:1], batch.ctx_pos[:1], kv, start=0, causal=True)
    else:
        kv = KVCache(cfg.num_hidden_layers, batch.B, cfg.num_key_value_heads, capacity, cfg.head_dim, p.dtype, p.device)
        if batch.C:
            model(batch.ctx_ids, batch.ctx_pos, kv, start=0, causal=True, key_valid=batch.ctx_valid)
    if kv.batch != batch.B:
        # One context for several candidate rows: copy it out so each row owns its span slot
        # (and the reusable cache is not overwritten by other rows).
        kv = _expand(kv, batch.B, capacity)
    return kv, reused


def encode_contexts(model: DiffusionLM, batch: Batch, owners: list[int], reuses: dict[int, ContextCache],
                    extra: int) -> tuple[KVCache, dict[int, int]]:
    """Several requests' contexts (e.g. different documents batched together), each encoded on
    its own from its request's ContextCache where it has one, into one B-row cache with room
    for `extra` more positions. Rows keep their context at [0, len) and the padding after it is
    masked by `ctx_valid`, so a row attends to exactly what it would alone.

    Returns the cache and, per request with a ContextCache, the context tokens it reused. A
    request whose rows hold different contexts reuses its cache for the first of them only."""
    cfg = model.config
    p = next(model.parameters())
    kv = KVCache(cfg.num_hidden_layers, batch.B, cfg.num_key_value_heads, batch.C + extra, cfg.head_dim, p.dtype,
                 p.device)
    groups: dict[tuple, list[int]] = {}
    for b, row in enumerate(batch.rows):
        groups.setdefault((owners[b], tuple(row.ctx_ids), tuple(row.ctx_pos)), []).append(b)
    reused: dict[int, int] = {}
    for (req, _, _), rows in groups.items():
        reuse = reuses.get(req) if req not in reused else None
        one = make_batch([batch.rows[rows[0]]], 0, p.device)
        sub, n = encode_context(model, one, reuse, extra=0)
        if reuse is not None:
            reused[req] = n
        width = one.C
        idx = torch.tensor(rows, dtype=torch.long, device=p.device)
        for store, part in ((kv.k, sub.k), (kv.v, sub.v)):
            for layer, t in enumerate(part):
                store[layer][idx, :, :width] = t[:1, :, :width]
    return kv, reused


def _expand(kv: KVCache, B: int, capacity: int) -> KVCache:
    out = KVCache.__new__(KVCache)
    out.k = [t[:, :, :capacity].expand(B, -1, -1, -1).contiguous() for t in kv.k]
    out.v = [t[:, :, :capacity].expand(B, -1, -1, -1).contiguous() for t in kv.v]
    return out
