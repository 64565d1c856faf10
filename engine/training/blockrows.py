"""Training rows for block-causal diffusion: the span decoded in small blocks whose finished
blocks join the key/value cache (semi-autoregressive block diffusion, as BD3-LM, SDAR,
Fast-dLLM v2 and D2F train it), laid out so training sees exactly what serving computes.

A row is two streams (BD3-LM's vectorized form, with a causal clean stream):

    clean:  ctx ... <|fim_middle|> m0 m1 ... <|endoftext|>     causal, next-token loss everywhere
    noisy:  <|fim_middle|> ? ? ? | m3 ? ? ? | m7 ? ...          one copy of the span's inputs

The model is shifted (position j predicts token j + 1), so the inputs of the span are
`<|fim_middle|>` and the span's tokens but its last; they are cut into blocks of `block` inputs.
The first input of a block is always clean: it is `<|fim_middle|>` or the last token the block
before it committed. The others are masked with ratio t (or show a draft with edits, as
recipe.corrupt_span makes them). A noisy block attends to the clean stream before its first
input and to itself, both ways; the clean stream attends causally, as the twin does. Serving
then caches a finished block exactly as the twin caches tokens (causal keys/values, the same
ones the context has), and one step runs only the open block's positions against that cache.

The loss: next token on the whole clean stream (the model stays a full autoregressive model;
with blocks of one it is one), and on each noisy position whose target the block cannot see
(masked, edited, or past the block's end).

Knows nothing of files or the corpus: token ids in, tensors out.
"""

from __future__ import annotations

import random

import torch

from .recipe import corrupt_span


def block_rows(rows, B: int, block: int, mask: int, end: int, rng: random.Random, *, edit_share: float = 0.0,
               edit_rate: float = 0.3, special: frozenset[int] = frozenset(), full_share: float = 0.0) -> dict:
    """A batch of two-stream rows from encoded examples (`ids`, `span_at`, `middle`; no span padding).

    `full_share` of the rows mask every noisy input but each block's first (TiDAR's drafting rows:
    what engine/drafting.py serves, a block drafted whole from committed text in one forward).

    Returns ids, pos (the noisy copy reuses its clean twin's positions), mask ([B, 1, W, W] bool,
    True = attend), target, weight (noisy positions), ar_weight (the clean stream), masked (the
    noisy positions a step would fill), twin_at (for each noisy position, the clean position
    that predicts the same target; -1 elsewhere), plus the row layout (clean length, span inputs) for tests.
    """
    assert block >= 1
    layouts = []
    for r in rows:
        clean = list(r.ids[:r.span_at + r.middle + 1])  # context, <|fim_middle|>, middle, end
        clean[-1] = end
        layouts.append((clean, r.span_at, r.middle + 1))  # n inputs: <|fim_middle|> and the middle
    W = max(len(c) + n for c, _, n in layouts)
    ids = torch.full((B, W), end, dtype=torch.long)
    pos = torch.zeros(B, W, dtype=torch.long)
    target = torch.full((B, W), end, dtype=torch.long)
    weight, ar_weight = torch.zeros(B, W), torch.zeros(B, W)
    masked = torch.zeros(B, W, dtype=torch.bool)
    twin_at = torch.full((B, W), -1, dtype=torch.long)  # the clean position predicting the same target
    attend = torch.zeros(B, 1, W, W, dtype=torch.bool)
    shape = []
    for b, (clean, S, n) in enumerate(layouts):
        N = len(clean)
        first = S - 1  # <|fim_middle|>: the span's first input
        inputs = clean[first:first + n]
        # No draw when the share is 0, so earlier runs see the rows they always did.
        t = 1.0 if full_share and rng.random() < full_share else 0.02 + 0.98 * rng.random()
        noisy = list(inputs)
        seen = [True] * n
        edited = edit_share and rng.random() < edit_share
        draft = None
        if edited:  # a draft of the span with mistakes; the loss covers every noisy position
            pool = [x for x in clean[:first] if x not in special]
            draft, _ = corrupt_span(inputs[1:], n - 1, pool, edit_rate, rng, end)
        for j in range(n):
            if j % block == 0:
                continue  # a block's first input is committed before it opens
            if rng.random() < t:
                noisy[j], seen[j] = mask, False
            elif draft is not None:
                noisy[j] = draft[j - 1]
        ids[b, :N] = torch.tensor(clean)
        ids[b, N:N + n] = torch.tensor(noisy)
        pos[b, :N] = torch.arange(N)
        pos[b, N:N + n] = torch.arange(first, first + n)
        pos[b, N + n:] = torch.arange(N + n, W) - n  # padding: any position, never read
        target[b, :N - 1] = torch.tensor(clean[1:])
        ar_weight[b, :N - 1] = 1.0
        target[b, N:N + n] = torch.tensor(clean[first + 1:first + n + 1])
        twin_at[b, N:N + n] = torch.arange(first, first + n)
        for j in range(n):
            last = j % block == block - 1 or j == n - 1  # its target is the next block's first input
            hidden = last or not seen[j + 1] or (edited and noisy[j + 1] != inputs[j + 1])
            if hidden or edited:
                weight[b, N + j] = 1.0
                masked[b, N + j] = hidden
        # Who sees whom: the clean stream causally; a noisy block the clean stream before its
        # first input, and itself both ways. Padding attends to itself only (never read).
        attend[b, 0, :N, :N] = torch.ones(N, N, dtype=torch.bool).tril()
        for s in range(0, n, block):
            e = min(s + block, n)
            attend[b, 0, N + s:N + e, :first + s] = True
            attend[b, 0, N + s:N + e, N + s:N + e] = True
        attend[b, 0, range(N + n, W), range(N + n, W)] = True
        shape.append((N, n))
    return dict(ids=ids, pos=pos, mask=attend, target=target, weight=weight, ar_weight=ar_weight, masked=masked,
                twin_at=twin_at, causal=False, layout=shape)
