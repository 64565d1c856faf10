"""One denoising step at static shapes, captured once as a CUDA graph and replayed.

The dynamic step (sampler.Denoiser) runs the model on the span, gathers the still-masked rows
and reads the output head there: shapes that change every step, and at 0.5B shapes some 400
kernel launches per step whose launch cost is larger than the math. Here every shape is
fixed per (B rows, A active tokens, C context slots):

- the span's ids and positions sit in static buffers; the context's keys/values are copied
  once per request into a workspace cache at [0, C'), padded to a bucket of 256 slots
  (padding keys masked out), so requests a few tokens apart share one capture;
- the forward writes the span's keys/values at the fixed slot [C, C + A), attends over all
  C + A keys with a validity mask, and the fused head picks a token for every active row
  (at 0.5B the head is bound by reading the embedding once, so all rows cost what the
  masked ones would);
- the step's choices (token, score, probability, log-probability per row) land in one
  packed [4, B, A] buffer that the host copies out.

That copy is the step's only host sync, and it stays: the unmask decision is host logic on
those choices (threshold with at least one token per row, ends in order, blocks, the
caller's stop rule on decoded text, streamed previews), and the loop has to know whether
anything is still masked before it launches the next step. Everything before it - ids in,
every layer, the head - is one graph launch.

On a CPU there is nothing to capture; the same static step runs eagerly (tests use it to
check that the static path gives the dynamic path's tokens).

Shapes: B rows, A active tokens, C context slots (a bucket), E hidden size.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Callable

import torch

from .batch import Batch
from .cache import KVCache
from .model import DiffusionLM

log = logging.getLogger(__name__)

BUCKET = 256  # context slots are padded to a multiple of this: one capture serves nearby lengths
MAX_STEPS_KEPT = 4  # captured shapes kept (each holds a workspace cache of B x (C + A) keys/values)
FIELDS = ("tokens", "score", "prob", "logp")  # rows of the packed output


class StaticStep:
    """The denoising step of one (B, A, C) shape, with its own workspace cache."""

    def __init__(self, model: DiffusionLM, head: Callable, B: int, A: int, C: int, score: str,
                 banned: list[int], vocab_limit: int | None, capture: bool):
        cfg = model.config
        p = next(model.parameters())
        self.model, self.head, self.score_kind = model, head, score
        self.B, self.A, self.C = B, A, C
        self.device = p.device
        self.kv = KVCache(cfg.num_hidden_layers, B, cfg.num_key_value_heads, C + A, cfg.head_dim, p.dtype, p.device)
        self.ids = torch.zeros((B, A), dtype=torch.long, device=p.device)
        self.pos = torch.zeros((B, A), dtype=torch.long, device=p.device)
        self.key_valid = torch.zeros((B, C + A), dtype=torch.bool, device=p.device)
        self.banned = torch.tensor(banned, dtype=torch.long, device=p.device) if banned else None
        self.vocab_limit = vocab_limit
        self.rope_limit, self._rope_ptr = 0, 0  # rotary table size the step reads, and where it is (load)
        self.capture = capture and p.device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.failure: str | None = None  # why capture failed, when it did
        self.staging = torch.zeros((B, A), dtype=torch.long, pin_memory=self.capture)
        self.hidden: torch.Tensor | None = None  # [B, A, E] outputs of the last run
        self.packed: torch.Tensor | None = None  # [4, B, A] float32
        self.runs = 0

    def load(self, batch: Batch, kv: KVCache) -> None:
        """This request's context keys/values, validity and span positions into the buffers."""
        assert (batch.B, batch.A) == (self.B, self.A) and batch.C <= self.C, (batch.B, batch.A, batch.C, self.C)
        n = batch.C
        for dst, src in zip(self.kv.k + self.kv.v, kv.k + kv.v):
            dst[:, :, :n].copy_(src[:, :, :n])
        self.key_valid.zero_()
        self.key_valid[:, :n] = batch.ctx_valid
        self.key_valid[:, self.C:] = batch.act_valid
        self.pos.copy_(batch.act_pos)
        # Grow the rotary tables before any capture: a graph keeps reading the tables it saw.
        rotary = self.model.model.rotary_emb
        top = max(max(r.act_pos) for r in batch.rows) + 1
        cos, _ = rotary.tables(max(top, self.rope_limit), self.kv.k[0].dtype)
        if self.graph is not None and cos.data_ptr() != self._rope_ptr:
            self.graph = None  # the tables moved: capture again
        self.rope_limit, self._rope_ptr = cos.shape[0], cos.data_ptr()

    def run(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step on the active block `x` [B, A] (host tensor): the hidden states [B, A, E]
        (device) and the packed choices [4, B, A] (host), see FIELDS."""
        self.runs += 1
        if self.capture and self.graph is None:
            try:
                self._capture()
            except RuntimeError as exc:  # a driver or an op that cannot be captured: stay eager
                log.warning("CUDA graph capture failed (%s); this step shape runs eagerly", exc)
                self.capture, self.failure = False, str(exc)
        if not self.capture:
            self.ids.copy_(x)
            self.hidden, self.packed = self._forward()
            return self.hidden, self.packed.cpu()
        self.staging.copy_(x)
        self.ids.copy_(self.staging, non_blocking=True)
        self.graph.replay()
        return self.hidden, self.packed.cpu()  # the step's one sync

    def _forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The step itself, from the buffers: hidden states and packed choices."""
        B, A = self.B, self.A
        hidden = self.model(self.ids, self.pos, self.kv, start=self.C, key_valid=self.key_valid,
                            pos_limit=self.rope_limit)
        conf = self.head(hidden.reshape(B * A, -1), self.model.lm_head.weight, 1.0, self.vocab_limit, self.banned)
        packed = torch.stack([conf.tokens.float(), conf.score(self.score_kind), conf.prob, conf.logp])
        return hidden, packed.view(len(FIELDS), B, A)

    def _capture(self) -> None:
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):  # warm-up off the default stream: kernel compiles, library handles
            for _ in range(2):
                self._forward()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.hidden, self.packed = self._forward()  # the graph's outputs, rewritten by each replay
        self.graph = graph


class StepGraphs:
    """The engine's static steps, one per shape bucket, least recently used dropped first."""

    def __init__(self, model: DiffusionLM, head: Callable, banned: list[int], vocab_limit: int | None,
                 capture: bool):
        self.model, self.head, self.banned, self.vocab_limit, self.capture = model, head, banned, vocab_limit, capture
        self._steps: OrderedDict[tuple, StaticStep] = OrderedDict()

    def prepare(self, batch: Batch, kv: KVCache, score: str) -> StaticStep:
        """The step for this batch's shape, loaded with its context."""
        C = max(BUCKET, -(-batch.C // BUCKET) * BUCKET)
        key = (batch.B, batch.A, C, score)
        step = self._steps.pop(key, None)
        if step is None:
            step = StaticStep(self.model, self.head, batch.B, batch.A, C, score, self.banned, self.vocab_limit,
                              self.capture)
        self._steps[key] = step
        while len(self._steps) > MAX_STEPS_KEPT:
            self._steps.popitem(last=False)
        step.load(batch, kv)
        return step

    def __len__(self) -> int:
        return len(self._steps)
