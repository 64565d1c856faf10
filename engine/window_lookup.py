"""Prompt lookup inside span windows: the twin's drafts, judged by a masked-diffusion model.

With span windows (sampler.py, `_window`) a diffusion model writes left to right a block at a
time, about one token a forward where no draft seeded the row: the model is seldom 90% sure
of the token after next. The twin gets its parallelism there from prompt lookup
(speculative.py): the tokens that followed the latest earlier occurrence of the text's last
few tokens, verified in one forward. Here the same proposals (`speculative.Proposer`, from
the context and the span so far) are shown to the diffusion model in the window's next masked
positions: one forward judges them, the run of them the model's own picks agree with is kept,
and so is the model's pick just after that run (it saw only the kept text before it).
Picks further on saw a wrong proposal before them and are dropped; those positions are masked
again, so the next window runs them anew. The judging window attends causally within itself,
so a position's pick sees the proposal before it, never the proposed token itself: seeing it,
the model agreed with what it was shown (on 200 held-out Python rest-of-line cursors, 1.0
point of correct prefix lost, against none judged causally; docs/training-log.md).

Greedy only, without the cache model (the sampler checks): agreement is the model's greedy
choice equalling the proposed token, as the twin's verification reads it.

Where lookup proposes nothing, the model can propose its own guesses (`guesses`,
SamplerConfig.window_guesses): the picks its last forward made at the next masked positions,
each with masks before it, which a masked-diffusion model can make in parallel and an
autoregressive one cannot. The window then also runs that many masked positions past what it
judges, so that every forward both verifies the last guesses and makes the next ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .picks import Picks
from .speculative import LookupSource, Proposer


@dataclass(frozen=True)
class Probe:
    """One row's proposal: `tokens` shown from span position `first` (the row's first masked)."""

    first: int
    tokens: list[int]
    ahead: int = 0  # masked positions run past the judged ones, for the model to guess (window_guesses)
    guessed: bool = False  # the tokens are the model's own earlier picks, not lookup's

    @property
    def end(self) -> int:
        """One past the last position whose pick the judging reads: the proposal, then the
        model's own pick after it."""
        return self.first + len(self.tokens) + 1


class WindowLookup:
    """Per request, what its proposals come from (the context; the seeded drafts are judged by
    the sampler's own judging forward, so they are not proposed again)."""

    def __init__(self, sources: dict[int, LookupSource], limit: int, shortest: int) -> None:
        self.sources = sources
        self.limit = limit
        self.shortest = shortest
        self._index = {req: src.index() for req, src in sources.items()}

    def probes(self, x: torch.Tensor, masked: torch.Tensor, span_at: int, lengths: list[int],
               owners: list[int]) -> dict[int, Probe]:
        """Row -> its proposal, for rows whose span so far (every position before the first
        masked one) ends in an n-gram found earlier. A proposal covers masked positions only and
        leaves the last one of their run to the model."""
        out: dict[int, Probe] = {}
        for b in range(x.shape[0]):
            src = self.sources.get(owners[b])
            if src is None or not bool(masked[b].any()):
                continue
            first, run = open_run(masked[b], span_at + lengths[b])
            room = min(self.limit, run - first - 1)
            if room < 1:
                continue
            proposer = Proposer(LookupSource([], src.before, src.others), self._index[owners[b]], self.shortest)
            for t in x[b, span_at:first].tolist():
                proposer.append(t)
            tokens = proposer.propose(room)
            if tokens:
                out[b] = Probe(first, tokens)
        return out


def open_run(masked_row: torch.Tensor, end: int) -> tuple[int, int]:
    """A row's first masked position and one past the run of masked positions from there
    (before `end`, the row's span end); the row has a masked position."""
    first = int(masked_row.nonzero()[0])
    run = first
    while run < end and bool(masked_row[run]):
        run += 1
    return first, run


def guesses(x: torch.Tensor, masked: torch.Tensor, guess: torch.Tensor, span_at: int, lengths: list[int],
            limit: int, stops: set[int], mask_id: int) -> dict[int, Probe]:
    """Row -> the model's own earlier picks (`guess`, each made with masks before it) at its
    next masked positions, up to `limit`, stopping before an end token (the model picks that
    itself) and leaving the last masked position of the run to the model, as lookup's
    proposals do. A right guess at the first masked position lets the pick after it see the
    right token: two tokens from one forward."""
    out: dict[int, Probe] = {}
    for b in range(x.shape[0]):
        if not bool(masked[b].any()):
            continue
        first, run = open_run(masked[b], span_at + lengths[b])
        tokens: list[int] = []
        for t in guess[b, first:first + min(limit, run - first - 1)].tolist():
            if t == mask_id or t in stops:
                break
            tokens.append(t)
        if tokens:
            out[b] = Probe(first, tokens, guessed=True)
    return out


def show(x: torch.Tensor, probes: dict[int, Probe]) -> None:
    """Write each proposal into its row (the positions stay masked until judged)."""
    for b, p in probes.items():
        x[b, p.first:p.first + len(p.tokens)] = torch.tensor(p.tokens, dtype=x.dtype)


def positions(b_idx: torch.Tensor, a_idx: torch.Tensor, probes: dict[int, Probe],
              width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The picks to read: `b_idx, a_idx` plus every probe position, the one after each
    proposal and the masked positions run ahead of it (their picks are guesses), each once;
    none at or past `width`, the end of the active block."""
    extra_b = [b for b, p in probes.items() for _ in range(p.first, min(p.end + p.ahead, width))]
    extra_a = [a for p in probes.values() for a in range(p.first, min(p.end + p.ahead, width))]
    if not extra_b:
        return b_idx, a_idx
    b = torch.cat([b_idx, torch.tensor(extra_b, dtype=b_idx.dtype)])
    a = torch.cat([a_idx, torch.tensor(extra_a, dtype=a_idx.dtype)])
    key = torch.unique(b * (int(a.max()) + 1) + a)  # sorted by row, then position
    width = int(a.max()) + 1
    return key // width, key % width


def judge(probes: dict[int, Probe], b_idx: torch.Tensor, a_idx: torch.Tensor, picks: Picks,
          raw_score: torch.Tensor, x: torch.Tensor, mask_id: int, threshold: float
          ) -> tuple[torch.Tensor, torch.Tensor, Picks, dict[int, int]]:
    """Keep each proposal's agreeing run and the model's pick just after it: their picks score
    at least the threshold, past the block too. The pick after the run saw only committed and
    agreed text before it, so it is what the next window would pick there: verified decoding
    keeps it, as the twin's does (until 2026-12-07 it had to clear the threshold itself, one
    forward more whenever it did not, for the same text). Picks after that are dropped and the
    rejected proposal is masked again in `x`. Rows without a proposal are untouched. Run after
    the block rules (unmask.py), before the commit; `raw_score` is the picks' score from before
    them. Returns the picks to commit from and, per probed row, how many proposed tokens were
    kept."""
    keep = torch.ones(b_idx.shape, dtype=torch.bool)
    kept: dict[int, int] = {}
    for b, p in probes.items():
        at = {int(a): n for n, a in zip((b_idx == b).nonzero(as_tuple=True)[0].tolist(), a_idx[b_idx == b].tolist())}
        agreed = 0
        for j, tok in enumerate(p.tokens):
            n = at.get(p.first + j)
            if n is None or int(picks.tokens[n]) != tok:
                break
            agreed += 1
            picks.score[n] = max(float(raw_score[n]), threshold)
        after = p.first + agreed
        n = at.get(after)
        if n is not None:
            picks.score[n] = max(float(raw_score[n]), threshold)
        for a, n in at.items():
            if a > after:
                keep[n] = False
        x[b, after:p.first + len(p.tokens)] = mask_id
        kept[b] = agreed
    return b_idx[keep], a_idx[keep], picks.select(keep), kept
