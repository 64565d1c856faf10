"""The unmask decision's rules, on host copies of a run's span state (sampler.Denoiser).

Each step the sampler has a pick (token, score) at every masked position (b_idx, a_idx). These
functions decide which picks may commit and what follows from a commit: ends wait for what
is before them, only the leftmost semi-autoregressive block unmasks, the threshold (at least
one per row, more when the step cap demands it) picks the commits, an end token pads the rest
of its row, and a row whose committed beginning already completes the caller's unit stops.
Also the row bookkeeping the sampler shares: span positions, and which rows to keep.

Shapes: B rows, A active tokens; x, masked [B, A].
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from .batch import Batch
from .config import SamplerConfig
from .picks import Picks


def span_positions(batch: Batch) -> torch.Tensor:
    """[B, A] the active block's span positions that hold a token of the row (not padding)."""
    span = torch.zeros_like(batch.act_valid)
    span[:, batch.span_at:] = True
    return span & batch.act_valid


def mean_to_end(logp: torch.Tensor, x: torch.Tensor, length: int, at: int, ends: torch.Tensor) -> float:
    """One row's mean log-prob over its span [at, at + length) up to and including its first
    end token."""
    hits = torch.isin(x[at:at + length], ends).nonzero()
    n = int(hits[0]) + 1 if hits.numel() else length
    return float(logp[at:at + n].mean()) if n else 0.0


def fewer(keep: set[int], B: int) -> torch.Tensor | None:
    """The rows to keep as an ascending index, or None when that is every row."""
    return None if len(keep) == B else torch.tensor(sorted(keep), dtype=torch.long)


def best_rows_first_step(b_idx, top_logp, owners: list[int]) -> torch.Tensor | None:
    """Per request, keep the candidate length whose first-step predictions are most confident."""
    best: dict[int, tuple[float, int]] = {}
    for b in range(len(owners)):
        sel = b_idx == b
        score = float(top_logp[sel].mean()) if bool(sel.any()) else -math.inf
        if owners[b] not in best or score > best[owners[b]][0]:
            best[owners[b]] = (score, b)
    return fewer({b for _, b in best.values()}, len(owners))


def commit_mask(b_idx, score, masked, step: int, max_steps: int, B: int, scfg: SamplerConfig) -> torch.Tensor:
    """Which picks commit: per row those clearing the threshold (or a fixed number per step), at
    least one, and at least enough to finish within `max_steps`."""
    commit = torch.zeros_like(score, dtype=torch.bool)
    left = masked.sum(1)
    steps_left = max(1, max_steps - step + 1)
    for b in range(B):
        rows = (b_idx == b).nonzero(as_tuple=True)[0]
        if rows.numel() == 0:
            continue
        s = score[rows]
        if scfg.tokens_per_step > 0:
            k = scfg.tokens_per_step
        else:
            k = int((s >= scfg.threshold).sum())
        k = max(k, 1, math.ceil(int(left[b]) / steps_left))
        k = min(k, rows.numel())
        commit[rows[s.topk(k).indices]] = True
    return commit


def defer_early_ends(picks: Picks, b_idx, a_idx, masked, ends: torch.Tensor) -> None:
    """An end token may be committed only where nothing before it is still masked.

    Trailing padding is the easiest thing to predict, so without this a model that was
    trained with padded spans commits the padding first and then ends the span early.
    """
    ended = torch.isin(picks.tokens, ends)
    if not bool(ended.any()):
        return
    first_masked = torch.where(masked, torch.arange(masked.shape[1], device=masked.device),
                               masked.shape[1]).min(1).values
    early = ended & (a_idx > first_masked[b_idx])
    picks.score[early] = -1.0  # below any threshold; still chosen if nothing else is (never: the first is eligible)


def block_ends(masked, span_at: int, block_size: int) -> torch.Tensor:
    """[B] the end (exclusive) of each row's leftmost block that still has masks."""
    n = block_size
    idx = torch.arange(masked.shape[1], device=masked.device)
    first = torch.where(masked, idx, masked.shape[1]).min(1).values  # first masked position per row
    return span_at + (first - span_at) // n * n + n


def outside_block(picks: Picks, b_idx, a_idx, masked, span_at: int, block_size: int) -> None:
    """Semi-autoregressive blocks (LLaDA / Fast-dLLM): only the leftmost block that still
    has masks may be unmasked; the threshold decides how many of its tokens go per step."""
    outside = a_idx >= block_ends(masked, span_at, block_size)[b_idx]
    if picks.copied is not None:
        outside &= ~picks.copied  # a copied run goes on past the block
    picks.score[outside] = -2.0  # never above the threshold, and below every in-block position


def stop_finished_units(x, masked, span_at: int, ends: torch.Tensor, pad_id: int,
                        stop: Callable[[int, list[int]], bool]) -> None:
    """Rows whose committed beginning already completes the unit (`stop(row, ids)`) end here:
    the rest is padding."""
    end_ids = set(ends.tolist())
    for b in range(x.shape[0]):
        if not bool(masked[b].any()):
            continue
        first = int(masked[b].nonzero()[0])
        ids = []
        for t in x[b, span_at:first].tolist():
            if t in end_ids:
                break
            ids.append(t)
        if ids and stop(b, ids):
            x[b, masked[b]] = pad_id
            masked[b] = False


def cut_at_first_mask(x, masked, span_at: int, pad_id: int) -> None:
    """Out of time: every row keeps the tokens it committed before its first masked position;
    from there on it is padding (later committed tokens would be text with a hole in it)."""
    for b in range(x.shape[0]):
        if bool(masked[b].any()):
            first = int(masked[b].nonzero()[0])
            x[b, max(first, span_at):] = pad_id
            masked[b] = False


def fill_after_end(x, masked, cb, ca, tokens, ends: torch.Tensor, pad_id: int) -> None:
    """Committed end tokens (rows cb, positions ca): every masked position after one is padding."""
    ended = torch.isin(tokens, ends)
    if not bool(ended.any()):
        return
    for b, a in zip(cb[ended].tolist(), ca[ended].tolist()):
        later = masked[b].clone()
        later[: a + 1] = False
        x[b, later] = pad_id
        masked[b, later] = False
