"""Token-by-token decoding for causal checkpoints (the autoregressive twin), with a KV cache.

The span segment of the layout comes last for these models (fill-in-the-middle as
prefix-suffix-middle), so infill is plain continuation: encode the context once (reusing
an earlier request's keys/values where they match), then one forward per token, with the
request's cache model (cachemodel.py) mixed into each token's distribution. Rows of a
batch advance in lockstep; a row stops at an end token, at its length, or when `stop`
says its unit is complete.

Given `sources` (what each request's drafts come from), greedy decoding verifies drafted
tokens several at a time instead (prompt-lookup speculative decoding, speculative.py): the
same tokens in fewer forwards. With a temperature it decodes token by token, as below
(keeping the sampled distribution exact would need speculative sampling's rejection rule,
which is not implemented).
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from .batch import Batch, encode_context
from .cache import ContextCache
from .cachemodel import CacheModel
from .config import SamplerConfig
from .errors import Cancelled
from .model import DiffusionLM
from .picks import choose
from .sampler import Denoised
from .drafting import Drafter
from .speculative import LookupSource, restricted, decode_lookup


def decode(model: DiffusionLM, batch: Batch, scfg: SamplerConfig, *, end_ids: torch.Tensor, pad_id: int,
           banned: list[int], first_allowed: dict[int, torch.Tensor], owners: list[int],
           vocab_limit: int | None = None, reuse: ContextCache | None = None, cancel=None,
           stop: Callable[[int, list[int]], bool] | None = None,
           on_step: Callable[[int, Batch, torch.Tensor, torch.Tensor, list[int]], None] | None = None,
           caches: dict[int, CacheModel] | None = None,
           sources: dict[int, LookupSource] | None = None, drafter: Drafter | None = None) -> Denoised:
    """Decode every row's span. `on_step(step, batch, x, done, counts)` sees the span so far
    after every forward (`counts`: tokens each row has committed); `sources` (request -> what
    its drafts come from) turns on lookup decoding when `scfg.lookup` and greedy; `drafter`
    (a block-causal model's own drafts, drafting.py) turns it on in any case when greedy."""
    assert batch.span_at == 1, "causal decoding feeds the token before the span first"
    if sources is not None and (scfg.lookup or drafter is not None) and scfg.temperature == 0:
        return decode_lookup(model, batch, scfg, sources=sources, end_ids=end_ids, pad_id=pad_id, banned=banned,
                             first_allowed=first_allowed, owners=owners, vocab_limit=vocab_limit, reuse=reuse,
                             cancel=cancel, stop=stop, on_step=on_step, caches=caches, drafter=drafter)
    gen = torch.Generator(device="cpu").manual_seed(scfg.seed) if scfg.temperature > 0 else None
    t0 = time.perf_counter()
    kv, reused = encode_context(model, batch, reuse, extra=batch.A)
    encode_ms = (time.perf_counter() - t0) * 1000
    t1 = time.perf_counter()

    B, L = batch.B, batch.A - 1
    x = batch.act_ids.clone()
    lengths = batch.act_valid.sum(1) - 1
    dev = x.device
    conf = torch.ones(x.shape, dtype=torch.float32, device=dev)
    logp = torch.zeros(x.shape, dtype=torch.float32, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    valid = torch.cat([batch.ctx_valid, torch.ones(B, batch.A, dtype=torch.bool, device=dev)], dim=1)
    all_valid = bool(batch.ctx_valid.all())
    steps = 0
    for t in range(L):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        start = batch.C + t
        hidden = model(x[:, t:t + 1], batch.act_pos[:, t:t + 1], kv, start=start,
                       key_valid=None if all_valid else valid[:, :start + 1])
        logits = _restrict(model.logits(hidden[:, 0]), vocab_limit, banned,
                           first_allowed if t == 0 else None, owners)
        model_logp = torch.log_softmax(logits.float(), dim=-1) if caches else None
        for b, cache in ((b, (caches or {}).get(owners[b])) for b in range(B)):
            if cache is not None and not done[b]:
                cache.mix(logits[b], x[b, 1:t + 1].tolist())  # the span so far: x[:, 0] is the token before it
        c = choose(logits, scfg, gen)
        if model_logp is not None:  # scores stay the model's own (as in sampler.py)
            c.logp = model_logp.gather(-1, c.tokens[:, None]).squeeze(-1)
        steps += 1
        tok = torch.where(done, torch.full_like(c.tokens, pad_id), c.tokens)
        x[:, t + 1] = tok
        conf[:, t + 1] = torch.where(done, torch.ones_like(c.prob), c.prob)
        logp[:, t + 1] = torch.where(done, torch.zeros_like(c.logp), c.logp)
        done |= torch.isin(tok, end_ids) | (lengths <= t + 1)
        if stop is not None:
            for b in range(B):
                if not done[b] and stop(b, x[b, 1:t + 2].tolist()):
                    done[b] = True
        if on_step is not None:
            on_step(steps, batch, x[:, : t + 2], done, [t + 1] * B)
        if bool(done.all()):
            x[:, t + 2:] = pad_id
            break
    gen_ms = (time.perf_counter() - t1) * 1000
    return Denoised(batch, x, conf, logp, steps, steps, encode_ms, gen_ms, reused, B)


def score_spans(model: DiffusionLM, batch: Batch, *, vocab_limit: int | None, banned: list[int],
                reuse: ContextCache | None = None) -> torch.Tensor:
    """[B] mean log-prob of each row's span (every span token given, the end token last),
    teacher-forced: one causal forward over the spans after the shared context, each token
    judged by the distribution greedy decoding draws it from (ids past the vocabulary and banned
    ids ruled out). What `Engine.score` asks of a causal model: alternatives for one place
    scored alike."""
    assert batch.span_at == 1, "causal scoring feeds the token before the span first"
    kv, _ = encode_context(model, batch, reuse, extra=batch.A)
    ids, pos = batch.act_ids[:, :-1], batch.act_pos[:, :-1]
    all_valid = bool(batch.ctx_valid.all())
    valid = None if all_valid else torch.cat([batch.ctx_valid, batch.act_valid[:, :-1]], dim=1)
    hidden = model(ids, pos, kv, start=batch.C, causal=ids.shape[1] > 1, key_valid=valid)
    logits = restricted(model.logits(hidden), vocab_limit, banned)  # [B, A - 1, V]
    lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, batch.act_ids[:, 1:, None]).squeeze(-1)
    given = batch.act_valid[:, 1:]
    return lp.masked_fill(~given, 0.0).sum(1) / given.sum(1).clamp_min(1)


def _restrict(logits: torch.Tensor, vocab_limit: int | None, banned: list[int],
              first_allowed: dict[int, torch.Tensor] | None, owners: list[int]) -> torch.Tensor:
    """`logits` (B, V) with the tokens a step may not write ruled out, in place: ids past the
    tokenizer's vocabulary, the banned ids, and on the first token (`first_allowed` given) all
    but the ids a row's owner allows there."""
    if vocab_limit is not None and vocab_limit < logits.shape[-1]:
        logits[:, vocab_limit:] = float("-inf")
    logits[:, banned] = float("-inf")
    for b in range(logits.shape[0]) if first_allowed else ():
        allowed = first_allowed.get(owners[b])
        if allowed is not None:
            keep = logits[b, allowed].clone()
            logits[b] = float("-inf")
            logits[b, allowed] = keep
    return logits
