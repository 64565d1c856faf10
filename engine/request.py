"""What the engine is asked and what one batch run carries: a request (`InfillRequest`), what
an engine says of itself (`EngineInfo`), a request tokenized and fitted (`_Prepared`) and one
batch's settings and callbacks (`_Run`).

engine.py builds and reads them (and still exports the public names). Plain containers: no
model, no tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .cache import ContextCache
from .cachemodel import CacheModel
from .config import SamplerConfig
from .lookup import Lookup
from .result import Preview


@dataclass(frozen=True)
class InfillRequest:
    prefix: str
    suffix: str = ""
    extra: str = ""  # extra context (definitions, recent edits), placed where the layout says
    # Texts that may follow the cursor (e.g. a continuation of matching code elsewhere): each
    # seeds one more candidate row, revised by the model instead of written from masks.
    drafts: tuple[str, ...] = ()
    # The cache model's text lookup (cachemodel.py): continuations of code matching the text
    # before the cursor plus what the span has so far, mixed into every masked position.
    lookup: Lookup | None = field(default=None, compare=False)
    # This request's own stop rule and document key, for batches that mix requests of several
    # callers (the batch's `stop` and `cache_key` apply to requests without their own).
    stop: Callable[[str], bool] | None = field(default=None, compare=False)
    cache_key: str | None = None


@dataclass(frozen=True)
class EngineInfo:
    """What an engine is and can do."""

    name: str
    parameters: int
    dtype: str  # of the weights, e.g. "bfloat16"
    device: str  # e.g. "cpu", "cuda:0"
    scores_edits: bool  # `Engine.score` can compare alternatives for one place (every local model now)
    languages: tuple[str, ...] = ()  # what the model was trained on (empty: not said)


@dataclass
class _Prepared:
    prefix: list[int]
    suffix: list[int]
    extra: list[int]
    healed: str
    allowed: torch.Tensor | None


@dataclass
class _Run:
    """One batch's settings and callbacks, for decoding or denoising it."""

    scfg: SamplerConfig
    owners: list[int]  # request index of each row
    prepared: list[_Prepared]
    reuse: ContextCache | None  # a single request's document cache
    cancel: object | None
    stops: list[Callable[[str], bool] | None]  # per request
    on_preview: Callable[[Preview], None] | None
    caches: dict[int, CacheModel] = field(default_factory=dict)  # request -> its cache model
    reuses: dict[int, ContextCache] = field(default_factory=dict)  # request -> its document cache (several requests)

    def stop_rule(self) -> Callable[[int, str], bool] | None:
        """(request, text) -> whether that request's unit is complete; None when none has a rule."""
        if not any(self.stops):
            return None
        stops = self.stops
        return lambda req, text: stops[req] is not None and stops[req](text)

    @property
    def first_allowed(self) -> dict[int, torch.Tensor]:
        """request -> ids its span may start with (token healing)."""
        return {i: p.allowed for i, p in enumerate(self.prepared) if p.allowed is not None}
