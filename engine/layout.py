"""Placing prefix, suffix, extra context and the masked span in a checkpoint's format.

A layout lists the segments in position order (config.json `layout`), each optionally led
by a sentinel token. Physically the context (every segment but the span) comes first and
the active block last: the active block is the span, plus, for shifted models, the token
just before the span (its output predicts the span's first token). Only the active block
is recomputed per denoising step.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import ModelConfig


@dataclass(frozen=True)
class Row:
    """One sequence of a batch: a candidate span of `length` tokens for one request."""

    ctx_ids: list[int]
    ctx_pos: list[int]
    act_ids: list[int]  # [anchor] + span (mask ids)
    act_pos: list[int]
    span_at: int  # index of the span's first token inside the active block (0 or 1)
    length: int

    @property
    def context_pairs(self) -> list[tuple[int, int]]:
        return list(zip(self.ctx_ids, self.ctx_pos))


def build_row(cfg: ModelConfig, prefix: list[int], suffix: list[int], extra: list[int], length: int) -> Row:
    sentinels = cfg.sentinels
    segments = {"extra": extra, "prefix": prefix, "suffix": suffix}
    before: list[int] = []  # tokens ahead of the span, in position order
    after: list[int] = []
    target = before
    for name in cfg.layout:
        lead = [sentinels[name]] if name in sentinels else []
        if name == "span":
            before += lead
            target = after
            continue
        target += lead + segments[name]
    start_with_bos = cfg.bos_token_id is not None and (cfg.family == "llada" or (cfg.shifted and not before))
    if start_with_bos:
        before = [cfg.bos_token_id] + before
    if cfg.shifted and not before:
        before = [cfg.pad_token_id if cfg.pad_token_id is not None else cfg.end_token_ids[0]]
    pos_before = list(range(len(before)))
    span_pos = list(range(len(before), len(before) + length))
    pos_after = list(range(len(before) + length, len(before) + length + len(after)))
    mask = cfg.mask_token_id if cfg.mask_token_id is not None else 0
    if cfg.shifted:
        return Row(before[:-1] + after, pos_before[:-1] + pos_after,
                   [before[-1]] + [mask] * length, [pos_before[-1]] + span_pos, 1, length)
    return Row(before + after, pos_before + pos_after, [mask] * length, span_pos, 0, length)


def seed_row(row: Row, draft: list[int]) -> Row:
    """The row with its span holding `draft` (len(draft) == row.length) instead of masks."""
    act = list(row.act_ids)
    act[row.span_at:row.span_at + len(draft)] = draft
    return Row(row.ctx_ids, row.ctx_pos, act, row.act_pos, row.span_at, row.length)


def fit(prefix: list[int], suffix: list[int], extra: list[int], budget: int) -> tuple[list[int], list[int], list[int]]:
    """Trim to at most `budget` context tokens: extra goes first, then the far ends of prefix/suffix."""
    over = len(prefix) + len(suffix) + len(extra) - budget
    if over <= 0:
        return prefix, suffix, extra
    cut = min(over, len(extra))
    extra, over = extra[cut:], over - cut
    if over > 0:
        # Keep the prefix three times as long as the suffix: text before the cursor matters more.
        keep = len(prefix) + len(suffix) - over
        kp = min(len(prefix), keep - min(len(suffix), keep // 4))
        ks = min(len(suffix), keep - kp)
        prefix, suffix = prefix[len(prefix) - kp:], suffix[:ks]
    return prefix, suffix, extra
