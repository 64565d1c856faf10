"""Bounds of one engine-protocol request (engine_routes.py), checked before the engine sees it.

The engine batches every candidate row of a call (per request: one per span length, one per
draft) into one forward, so a body asks for memory and time in proportion to
requests x rows x span tokens. A client with a sane sampler stays far inside these bounds (one
request, a span of 16-48 tokens, up to 4 drafts); a body past one is refused with 400 and a
message naming the field and the bound, never clamped in silence:

  span, each of lengths, block_size, and every other count in the sampler (steps, tokens per
  step)     at most the model's context (its position limit): a longer span has no context left
  seed      0 .. 2^63 - 1 (what the generator takes)
  requests  MAX_REQUESTS per body;  lengths  MAX_LENGTHS;  drafts  MAX_DRAFTS per request
  rows x span  at most MAX_SPAN_TOKENS per call (the logits and keys/values a call holds)
  score     MAX_TEXTS texts, each at most the model's context in tokens (counted on the
            engine's thread, where the tokenizer lives: `check_score_tokens`)
  cache_key MAX_KEY_CHARS; stop.max_lines MAX_STOP_LINES

It knows the protocol's decoded calls (wire.py) and the sampler's fields; nothing of HTTP.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from redraft.engine import SamplerConfig

from ..core import wire

MAX_REQUESTS = 8
MAX_LENGTHS = 8
MAX_DRAFTS = 16  # the server's max_drafts setting goes up to 16
MAX_SPAN_TOKENS = 4096  # a row's logits are span x vocabulary floats: 4096 x 8192 x 4 B = 128 MiB at most
MAX_TEXTS = 16  # a judged edit sends 2
MAX_KEY_CHARS = 256  # a document key is a hash (remote.session_id) or a short name
MAX_STOP_LINES = 1000
MAX_SEED = (1 << 63) - 1
_INTS = [f.name for f in fields(SamplerConfig) if isinstance(f.default, int) and not isinstance(f.default, bool)]


class LimitError(ValueError):
    """A request past one of the bounds; the message names the field."""


def context_limit(engine: Any) -> int | None:
    """The model's context in tokens, read from an in-process engine's configs (as
    wire.encode_info does); None for an engine that must be asked (a proxy, a batcher)."""
    cfg, mc = getattr(engine, "config", None), getattr(engine, "model_config", None)
    if cfg is None or mc is None or not hasattr(cfg, "max_context_tokens"):
        return None
    return min(cfg.max_context_tokens, mc.max_position_embeddings)


def asked_limit(engine: Any) -> int:
    """The context limit of an engine without configs, from its budget at span 0 (a lower
    bound of its limit, as wire.encode_info reports it). Calls the engine: on its thread."""
    return context_limit(engine) or engine.context_budget(0)


def check_infill(call: wire.InfillCall, limit: int) -> None:
    check_sampler(call.sampler, limit)
    if len(call.requests) > MAX_REQUESTS:
        raise LimitError(f"body.requests holds {len(call.requests)} requests, more than {MAX_REQUESTS}")
    for i, r in enumerate(call.requests):
        if len(r.drafts) > MAX_DRAFTS:
            raise LimitError(f"requests[{i}].drafts holds {len(r.drafts)} drafts, more than {MAX_DRAFTS}")
    lengths = call.sampler.candidate_lengths
    rows = sum(len(lengths) + len(set(r.drafts)) for r in call.requests)
    if rows * max(lengths) > MAX_SPAN_TOKENS:
        raise LimitError(f"the body asks for {rows} rows of up to {max(lengths)} span tokens, more than "
                         f"{MAX_SPAN_TOKENS} span tokens in all: send fewer requests, lengths or drafts")
    if len(call.cache_key) > MAX_KEY_CHARS:
        raise LimitError(f"body.cache_key is {len(call.cache_key)} characters long, more than {MAX_KEY_CHARS}")
    if call.stop is not None and call.stop.max_lines > MAX_STOP_LINES:
        raise LimitError(f"stop.max_lines is {call.stop.max_lines}, more than {MAX_STOP_LINES}")


def check_sampler(s: SamplerConfig, limit: int) -> None:
    if len(s.lengths) > MAX_LENGTHS:
        raise LimitError(f"sampler.lengths holds {len(s.lengths)} lengths, more than {MAX_LENGTHS}")
    for name in _INTS:
        value, most = getattr(s, name), MAX_SEED if name == "seed" else limit
        if not 0 <= value <= most:
            raise LimitError(f"sampler.{name} is {_shown(value)}, outside 0..{most}"
                             + ("" if name == "seed" else f" (this model's context is {limit} tokens)"))
    for n in s.lengths:
        if n > limit:
            raise LimitError(f"sampler.lengths holds {_shown(n)}, more than this model's context of {limit} tokens")


def check_score(texts: list[str]) -> None:
    if len(texts) > MAX_TEXTS:
        raise LimitError(f"body.texts holds {len(texts)} texts, more than {MAX_TEXTS}")


def check_score_tokens(engine: Any, texts: list[str], limit: int) -> None:
    """Each text at most the model's context in tokens (on the engine's thread)."""
    for i, t in enumerate(texts):
        n = engine.count_tokens(t)
        if n > limit:
            raise LimitError(f"body.texts[{i}] has {n} tokens, more than this model's context of {limit}")


def _shown(n: int) -> str:
    """An integer as a message shows it: a huge one by its size alone."""
    text = str(n)
    return text if len(text) <= 20 else f"a {len(text)}-digit number"
