"""Key/value storage for one batch, and the context kept across requests.

KVCache is a static buffer per layer, [B, K, capacity, D]: the context's keys/values are
written once at [0, C), and every denoising step overwrites the span's slot at [C, C + A).
Nothing is concatenated per step.

ContextCache remembers which tokens (id and position) the buffer's first rows hold, so a
later request whose context starts with the same tokens reuses them. That is exact only
when context keys/values cannot depend on anything after them, i.e. for models whose
context attends causally ("context_causal" and "causal"); the engine only asks then.
"""

from __future__ import annotations

from collections import OrderedDict

import torch


class KVCache:
    def __init__(self, layers: int, B: int, kv_heads: int, capacity: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        shape = (B, kv_heads, capacity, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]

    @property
    def batch(self) -> int:
        return self.k[0].shape[0]

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor):
        """Store this block's keys/values at [start, start + T); return all keys/values up to its end."""
        end = start + k.shape[2]
        assert end <= self.capacity, (end, self.capacity)
        self.k[layer][:, :, start:end] = k
        self.v[layer][:, :, start:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def rows_view(self, start: int, stop: int) -> "KVCache":
        """Rows [start, stop) as a cache of their own whose writes land in this one."""
        view = KVCache.__new__(KVCache)
        view.k, view.v = [t[start:stop] for t in self.k], [t[start:stop] for t in self.v]
        return view

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only these batch rows (e.g. the winning span-length candidate)."""
        rows = rows.to(self.k[0].device)
        self.k = [t.index_select(0, rows) for t in self.k]
        self.v = [t.index_select(0, rows) for t in self.v]

    def ensure(self, capacity: int, keep: int) -> None:
        """Grow to at least `capacity` positions, keeping the first `keep`."""
        if capacity <= self.capacity:
            return
        new = max(capacity, int(self.capacity * 1.5))
        for store in (self.k, self.v):
            for i, t in enumerate(store):
                grown = t.new_zeros(t.shape[0], t.shape[1], new, t.shape[3])
                grown[:, :, :keep] = t[:, :, :keep]
                store[i] = grown

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


class ContextCache:
    """A batch-1 KVCache plus the (token, position) pairs its first rows hold."""

    def __init__(self) -> None:
        self.kv: KVCache | None = None
        self.tokens: list[tuple[int, int]] = []

    def reusable(self, tokens: list[tuple[int, int]]) -> int:
        """Length of the longest common prefix with what is cached."""
        n = 0
        for a, b in zip(self.tokens, tokens):
            if a != b:
                break
            n += 1
        return n

    def store(self, kv: KVCache, tokens: list[tuple[int, int]]) -> None:
        self.kv, self.tokens = kv, list(tokens)

    def clear(self) -> None:
        self.kv, self.tokens = None, []


class ContextStore:
    """ContextCaches by key (a document), least recently used out first once the tokens they
    hold pass `max_tokens` (the one in use always stays). Counts hits: requests that reused
    at least one context token, and misses: requests with a key that reused none."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._caches: OrderedDict[str, ContextCache] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.evicted = 0

    def get(self, key: str) -> ContextCache:
        """The cache for `key` (a new, empty one the first time), now the most recently used."""
        cache = self._caches.pop(key, None) or ContextCache()
        self._caches[key] = cache
        return cache

    def record(self, reused: int) -> None:
        """One request with a key ran, reusing `reused` context tokens; then trim to the bound."""
        if reused > 0:
            self.hits += 1
        else:
            self.misses += 1
        self.trim()

    def trim(self) -> None:
        while len(self._caches) > 1 and self.tokens > self.max_tokens:
            self._caches.popitem(last=False)
            self.evicted += 1

    def forget(self, key: str) -> None:
        self._caches.pop(key, None)

    def __contains__(self, key: str) -> bool:
        return key in self._caches

    def __len__(self) -> int:
        return len(self._caches)

    @property
    def tokens(self) -> int:
        return sum(len(c.tokens) for c in self._caches.values())

    def stats(self) -> dict:
        return {"documents": len(self._caches), "tokens": self.tokens, "max_tokens": self.max_tokens,
                "hits": self.hits, "misses": self.misses, "evicted": self.evicted}
