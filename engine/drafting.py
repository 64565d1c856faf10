"""Self-drafting for block-causal checkpoints: one forward checks the last drafts causally and
writes the next ones by diffusion (TiDAR, "Think in Diffusion, Talk in Autoregression",
Liu et al. 2025, arXiv 2511.08923).

A block-causal model (engine/training/blockrows.py) is two models in one: its clean stream is
a causal model with the twin's next-token loss, and its noisy blocks fill b positions at once
from the clean text before them. speculative.decode_lookup verifies drafts with the clean
stream, exactly as the twin verifies prompt-lookup drafts; this module adds, to the same
forward, one noisy block per way that verification can end. With k drafts d1..dk fed after
the row's last committed token t0, the forward holds

    clean:   t0 d1 ... dk                      causal, against the cached keys/values
    block j: c_j ? ? ... ?   (j = 0..k)        c_0 = t0, c_j = dj; b positions, both ways

and block j attends to the cache, the clean inputs before c_j, and itself: what it sees in
training when c_j opens a block. If the clean stream accepts exactly j drafts, it commits
them and its own next token (at span offset j + 1), and block j, which assumed the same
accepted text, predicted offsets j + 1 .. j + b: its positions 1..b-1 (offsets j + 2 ..) are
the next forward's drafts, taken whole without a threshold, since verification decides. So no
forward is spent drafting and none is wasted by a rejection: every forward commits the
accepted drafts plus one token, and the text is the clean stream's greedy decoding (up to
floating-point differences between a block forward and a one-token forward). Prompt-lookup
drafts (the request's copies, repeated n-grams) go first where a row has one; the model's own
draft where it has none.

Knows nothing of requests: token ids in, inputs and masks out. Shapes: B rows, k drafts at
most, b block, T = (k + 1)(b + 1) positions a forward.
"""

from __future__ import annotations

import torch


class Drafter:
    """Extends each forward of speculative.decode_lookup with the noisy pre-draft blocks and
    reads a row's next drafts from the block its verification chose.

    `block`: positions a pre-draft block runs (its first input clean, so it drafts block - 1
    tokens; at most the trained block, whose tail it may leave out). A forward pre-drafts for
    every outcome of its check while it verifies at most `every` drafts (its own drafts), and
    for "none accepted" and "all accepted" only beyond that (long prompt-lookup drafts), since
    on a CPU each block's positions cost time; a row whose check ends elsewhere gets no draft
    of its own next."""

    def __init__(self, block: int, mask_id: int, pad_id: int, every: int | None = None) -> None:
        assert block >= 2, "a block of one drafts nothing"
        self.block, self.mask_id, self.pad_id = block, mask_id, pad_id
        self.every = block - 1 if every is None else every
        self.k = 0  # drafts per row in the last forward (the clean part is k + 1 long)
        self.outcomes: list[int] = [0]  # the accepted-draft counts the last forward pre-drafted for

    def plan(self, k: int) -> list[int]:
        """The outcomes (accepted drafts) a forward verifying k drafts pre-drafts for."""
        return list(range(k + 1)) if k <= self.every else [0, k]

    def size(self, k: int) -> int:
        """Positions of a forward that verifies k drafts."""
        return k + 1 + len(self.plan(k)) * self.block

    def extend(self, ids: torch.Tensor, pos: torch.Tensor, kvalid: torch.Tensor,
               start: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The forward's inputs, positions and mask. `ids`/`pos`: [B, k + 1] clean inputs (the last
        committed token, then drafts, padded), written at cache slot `start`; `kvalid`: [B, start]
        the cache slots each row may see. A row with fewer drafts is padded; the blocks its padding
        opens are never read. Returns ids and pos [B, T] and the mask [B, 1, T, start + T]."""
        B, k1 = ids.shape
        b = self.block
        self.k = k1 - 1
        self.outcomes = self.plan(self.k)
        T = self.size(self.k)
        dev = ids.device
        out_ids = torch.full((B, T), self.mask_id, dtype=ids.dtype, device=dev)
        out_pos = torch.empty((B, T), dtype=pos.dtype, device=dev)
        out_ids[:, :k1], out_pos[:, :k1] = ids, pos
        allowed = torch.zeros(B, T, start + T, dtype=torch.bool, device=dev)
        allowed[:, :, :start] = kvalid[:, None, :start]
        allowed[:, :k1, start:start + k1] = torch.ones(k1, k1, dtype=torch.bool, device=dev).tril()
        for n, j in enumerate(self.outcomes):  # block n opens with clean input j
            at = k1 + n * b
            out_ids[:, at] = ids[:, j]
            out_pos[:, at:at + b] = pos[:, j:j + 1] + torch.arange(b, device=dev)
            allowed[:, at:at + b, start:start + j] = True  # the clean inputs before c_j
            allowed[:, at:at + b, start + at:start + at + b] = True  # itself, both ways
        return out_ids, out_pos, allowed[:, None]

    def drafts(self, logits_of, hidden: torch.Tensor, row: int, accepted: int, limit: int,
               floor: float = 0.0) -> list[int]:
        """The next drafts of `row`, whose verification accepted `accepted` drafts: the positions
        1..b-1 of the block pre-drafted for that outcome, greedy, at most `limit` (none where no
        block was), cut before the first whose probability is under `floor` (an unlikely draft
        token costs the next forward positions and is seldom accepted). `logits_of(h)` turns
        hidden states [n, H] into restricted logits [n, V]."""
        if limit <= 0 or accepted not in self.outcomes:
            return []
        first = self.k + 1 + self.outcomes.index(accepted) * self.block
        h = hidden[row, first + 1:first + self.block][:limit]
        prob, tok = torch.softmax(logits_of(h).float(), dim=-1).max(-1)
        sure = (prob >= floor).int().cumprod(0).sum()
        return tok[:int(sure)].tolist()
