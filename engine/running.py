"""What one denoising run holds and returns: its rows and their per-row state (`Running`), the
run's output (`Denoised`), and `drain`, which runs a step generator to its end.

The sampler (sampler.py) and causal decoding (autoregressive.py) return a `Denoised`; both
modules still export these names. Plain containers: no model, no decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generator, TypeVar

import torch

from .batch import Batch
from .cache import KVCache
from .ragged import Forward
from .step import StaticStep


@dataclass
class Running:
    """One run's rows and everything kept per row, plus its counters.

    Rows are dropped (a whole draft answers its request, a span length loses after the first
    step) only through `keep`, which prunes every per-row field together.
    """

    batch: Batch
    kv: KVCache
    kvalid: torch.Tensor | None  # [B, C + A] which keys are valid; None when all are
    x: torch.Tensor  # [B, A] the active block: committed and draft tokens, masks
    masked: torch.Tensor  # [B, A] span positions still masked
    seeded: torch.Tensor  # [B, A] span positions that started with a draft token
    conf: torch.Tensor  # [B, A] probability at commit
    logp: torch.Tensor  # [B, A] log-probability at commit
    kept: torch.Tensor  # [B] draft tokens each row kept (0 for plain rows)
    alive: list[int]  # request index of each row
    hidden: torch.Tensor | None = None  # [B, A, E] the next step's hidden states, when already computed
    static: StaticStep | None = None  # the static step loaded with these rows
    # Span windows (sampler.py, `_window`): the inputs each span position had when it last ran
    # (host), and each masked position's latest pick and its log-prob, for the estimates.
    ran: torch.Tensor | None = None  # [B, A]; None until a forward ran the whole span
    guess: torch.Tensor | None = None  # [B, A] token
    guess_logp: torch.Tensor | None = None  # [B, A]
    since_full: int = 0  # steps since the last forward over the whole span
    window_steps: int = 0  # steps that ran a window
    positions: int = 0  # span positions run by every forward (a whole span counts A a row)
    steps: int = 0
    forwards: int = 0
    static_steps: int = 0
    hopeless: set[int] = field(default_factory=set)  # requests given up early: they abstain
    beaten: int = 0  # plain rows dropped behind a finished draft (Denoiser._drop_beaten)
    lookup_kept: int = 0  # prompt-lookup tokens kept in span windows (window_lookup.py)
    guess_kept: int = 0  # the model's own guesses kept in span windows (SamplerConfig.window_guesses)

    def keep(self, rows: torch.Tensor) -> None:
        """Only `rows` (ascending indices, on the host) go on."""
        self.batch = self.batch.select(rows)
        self.kv.select_rows(rows)
        self.alive = [self.alive[b] for b in rows.tolist()]
        for name in ("kvalid", "x", "masked", "seeded", "conf", "logp", "kept", "hidden", "ran", "guess",
                     "guess_logp"):
            t = getattr(self, name)
            if t is not None:
                setattr(self, name, t[rows.to(t.device)])
        self.static = None  # loaded with the old rows

    def move(self, device: torch.device) -> None:
        """The tensors the unmask decision reads and writes, to `device`."""
        self.x, self.masked, self.conf, self.logp = (t.to(device) for t in (self.x, self.masked, self.conf, self.logp))


@dataclass
class Denoised:
    batch: Batch  # rows still alive at the end (after first-step pruning)
    x: torch.Tensor  # [B, A] final active block
    conf: torch.Tensor  # [B, A] probability at commit
    logp: torch.Tensor  # [B, A] log-probability at commit
    steps: int = 0
    forwards: int = 0
    encode_ms: float = 0.0
    generate_ms: float = 0.0
    reused: int = 0
    rows_run: int = 0
    kept: torch.Tensor | None = None  # [B] draft tokens each row kept (0 for plain rows)
    score: torch.Tensor | None = None  # [B] mean log-prob of each row's span under one scoring
    static_steps: int = 0  # steps run by the static (graph-captured on CUDA) step
    hopeless: set[int] = field(default_factory=set)  # requests given up early: they abstain
    reused_by: dict[int, int] = field(default_factory=dict)  # request -> context tokens reused (`reuses`)
    window_steps: int = 0  # steps that ran a span window alone
    positions: int = 0  # span positions every forward ran, summed
    lookup_kept: int = 0  # prompt-lookup tokens kept in span windows (window_lookup.py)
    guess_kept: int = 0  # the model's own guesses kept in span windows (SamplerConfig.window_guesses)


T = TypeVar("T")


def drain(steps: Generator[Forward | None, None, T]) -> T:
    """Run a step generator to its end and return what it returns (the forwards it asks for,
    left unrun here, it runs itself)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
