"""Prompt-lookup speculative decoding for causal checkpoints (the autoregressive twin).

The twin gets the drafts the diffusion model gets, used the way an autoregressive engine
uses them (transformers' `prompt_lookup_num_tokens`, llama.cpp's lookup decoding): each
forward feeds a row its last committed token followed by up to K drafted tokens, as one
block against the cached keys/values, causal within the block. Greedy decoding is then read
off the block left to right: while the model's token equals the drafted one, the next
position's prediction is already there. A row commits the agreeing prefix plus the model's
own next token, so a correct draft of k tokens costs one forward, and a wrong one costs one
forward and still yields the greedy token. The keys/values of the rejected tail are
discarded: the row's write position simply does not move past them, and they are
overwritten or masked.

Where a row's drafts come from (`Proposer`): the request's drafts (token ids from the span's
start) while the span so far follows one of them; else prompt lookup: the last n tokens of
the text so far (n = 3, 2, 1; the prefix, then the span) looked up in the context (prefix,
suffix, extra context), the drafts and the span itself, the latest occurrence first, and the
K tokens that followed it proposed. Matches shorter than `SamplerConfig.lookup_ngram` (3 by
default) propose nothing: on a CPU a block costs more than a one-token forward, and they are
seldom right.

Batches: rows advance by different amounts in one forward. Every row writes its block at one
common slot `s` of the cache (position ids stay each row's own); afterwards `s` moves past the
longest accepted run, and a row that accepted less leaves a hole of invalid slots, masked out
of every later forward (`key_valid`). A batch of one never has holes.

Exact: the output is plain greedy decoding's (autoregressive.py), up to floating-point
differences between a block forward and a one-token forward (a near-tie could break the other
way). Not with int8 linears, which quantize a call's activations over the whole block: the
engine decodes those token by token. The request's cache model (cachemodel.py) is mixed in
exactly: position j of a block is mixed with the chain of the span so far plus the first j
drafted tokens, which is the chain plain decoding has there when those tokens are accepted, and
positions are mixed left to right only up to the first disagreement, so the cache model is
asked exactly what plain decoding asks it. Greedy only: with a temperature the caller decodes
token by token.

Shapes: B rows, T block tokens, V vocabulary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .batch import Batch, encode_context
from .cachemodel import CacheModel
from .config import SamplerConfig
from .drafting import Drafter
from .errors import Cancelled
from .model import DiffusionLM
from .picks import choose
from .running import Denoised

MAX_NGRAM = 3  # the longest n-gram looked up; shorter ones are tried after it

_Index = dict[tuple[int, ...], tuple[list[int], int]]  # n-gram -> (sequence, index of the token after it)


@dataclass(frozen=True)
class LookupSource:
    """What one request's drafts come from, in token ids of the model's tokenizer."""

    drafts: list[list[int]] = field(default_factory=list)  # copy candidates, from the span's first token
    before: list[int] = field(default_factory=list)  # the text the span continues (the prefix)
    others: list[list[int]] = field(default_factory=list)  # the rest of the context (suffix, extra)

    def index(self) -> _Index:
        """n-grams of the context and drafts, each to the latest place it is followed by a token:
        the prefix last, so its own occurrences win."""
        out: _Index = {}
        for seq in (*self.others, *self.drafts, self.before):
            for i in range(1, len(seq)):
                for n in range(1, min(MAX_NGRAM, i) + 1):
                    out[tuple(seq[i - n:i])] = (seq, i)
        return out


class Proposer:
    """One row's drafts: `propose(limit)` after the span so far, `append(token)` as it grows."""

    def __init__(self, source: LookupSource, static: _Index, shortest: int = 1) -> None:
        self.drafts = source.drafts
        self.shortest = shortest  # the shortest n-gram match that proposes
        self.stream = list(source.before)  # the prefix, then the span's tokens
        self.start = len(self.stream)
        self.static = static
        self.own: _Index = {}  # n-grams followed by a span token (the most recent)

    def append(self, token: int) -> None:
        s = self.stream
        i = len(s)
        s.append(token)
        for n in range(1, min(MAX_NGRAM, i) + 1):
            self.own[tuple(s[i - n:i])] = (s, i)

    def propose(self, limit: int) -> list[int]:
        if limit <= 0:
            return []
        s = self.stream
        done = len(s) - self.start
        span = s[self.start:]
        for d in self.drafts:  # a draft the span still follows
            if len(d) > done and d[:done] == span:
                return d[done:done + limit]
        for n in range(min(MAX_NGRAM, len(s)), self.shortest - 1, -1):
            key = tuple(s[len(s) - n:])
            hit = self.own.get(key) or self.static.get(key)
            if hit is not None:
                seq, i = hit
                return seq[i:i + limit]
        return []


def decode_lookup(model: DiffusionLM, batch: Batch, scfg: SamplerConfig, *, sources: dict[int, LookupSource],
                  end_ids: torch.Tensor, pad_id: int, banned: list[int], first_allowed: dict[int, torch.Tensor],
                  owners: list[int], vocab_limit: int | None = None, reuse=None, cancel=None,
                  stop: Callable[[int, list[int]], bool] | None = None, on_step=None,
                  caches: dict[int, CacheModel] | None = None, drafter: Drafter | None = None) -> Denoised:
    """Greedy decoding of every row, verifying drafts (module docstring). Arguments as
    autoregressive.decode's; `sources`: request -> what its drafts come from; `drafter`: a
    block-causal model's own drafts where lookup has none (drafting.py). `Denoised.kept`
    holds the drafted tokens each row accepted; steps and forwards count the forwards."""
    assert batch.span_at == 1, "causal decoding feeds the token before the span first"
    assert scfg.temperature == 0, "lookup decoding verifies greedy decoding only"
    t0 = time.perf_counter()
    kv, reused = encode_context(model, batch, reuse, extra=batch.A)
    encode_ms = (time.perf_counter() - t0) * 1000
    t1 = time.perf_counter()

    B, A, C = batch.B, batch.A, batch.C
    dev = batch.act_ids.device
    caches = caches or {}
    ends = set(end_ids.tolist())
    lengths = (batch.act_valid.sum(1) - 1).tolist()
    base = batch.act_pos[:, 0].tolist()  # position id of each row's token before the span
    last = batch.act_ids[:, 0].tolist()  # each row's token not yet in the cache
    spans: list[list[int]] = [[] for _ in range(B)]
    confs: list[list[float]] = [[] for _ in range(B)]
    logps: list[list[float]] = [[] for _ in range(B)]
    accepted = [0] * B
    done = [L <= 0 for L in lengths]
    indexes = {req: src.index() for req, src in sources.items()}
    proposers = [Proposer(sources.get(owners[b], LookupSource()), indexes.get(owners[b], {}), scfg.lookup_ngram)
                 for b in range(B)]
    x = torch.full((B, A), pad_id, dtype=torch.long)
    x[:, 0] = batch.act_ids[:, 0].cpu()
    allowed = {b: first_allowed[owners[b]] for b in range(B) if owners[b] in first_allowed}

    # Which cache slots each row may attend to: its context, then what it accepted.
    kvalid = torch.ones(B, C + A, dtype=torch.bool, device=dev)
    kvalid[:, :C] = batch.ctx_valid
    holes = not bool(batch.ctx_valid.all())
    s = C  # the next slot every row writes its block to
    forwards = 0
    own: list[list[int]] = [[] for _ in range(B)]  # each row's next drafts from the model itself
    while not all(done):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        limits = [min(scfg.lookup_tokens, lengths[b] - len(spans[b]) - 1) for b in range(B)]
        looked = [[] if done[b] or not scfg.lookup else proposers[b].propose(limits[b]) for b in range(B)]
        props = [looked[b] or ([] if done[b] else own[b][:max(limits[b], 0)]) for b in range(B)]
        # Pre-draft blocks only while some live row has no prompt-lookup draft: a row that has one
        # is likely to have the next one from lookup too, and on a CPU the blocks cost time.
        blocks = drafter is not None and any(not looked[b] for b in range(B) if not done[b])
        T = 1 + max(len(p) for p in props)
        ids = [[last[b]] + p + [pad_id] * (T - 1 - len(p)) for b, p in enumerate(props)]
        pos = [[base[b] + len(spans[b]) + j for j in range(T)] for b in range(B)]
        size = drafter.size(T - 1) if blocks else T  # the pre-draft blocks ride behind
        if s + size > kv.capacity:
            kv.ensure(s + size, keep=s)
        if s + size > kvalid.shape[1]:
            kvalid = torch.cat([kvalid, kvalid.new_ones(B, s + size - kvalid.shape[1])], dim=1)
        kvalid[:, s:s + T] = True
        ids_t = torch.tensor(ids, dtype=torch.long, device=dev)
        pos_t = torch.tensor(pos, dtype=torch.long, device=dev)
        if not blocks:
            hidden = model(ids_t, pos_t, kv, start=s, causal=T > 1, key_valid=kvalid[:, :s + T] if holes else None)
        else:
            ids_t, pos_t, mask = drafter.extend(ids_t, pos_t, kvalid[:, :s], s)
            hidden = model(ids_t, pos_t, kv, start=s, mask=mask)
        forwards += 1
        logits = restricted(model.logits(hidden[:, :T]), vocab_limit, banned)  # [B, T, V]
        for b, ok in allowed.items():  # token healing: the span's first token
            if not spans[b] and not done[b]:
                keep = logits[b, 0, ok].clone()
                logits[b, 0] = float("-inf")
                logits[b, 0, ok] = keep
        plain = None
        if any(owners[b] not in caches for b in range(B)):
            c = choose(logits.reshape(B * T, -1), scfg, None)
            plain = (c.tokens.view(B, T).tolist(), c.prob.view(B, T).tolist(), c.logp.view(B, T).tolist())
        advance = []
        for b in range(B):
            if done[b]:
                continue
            cache = caches.get(owners[b])
            n = 0  # block slots whose keys stay: the token fed first and the drafted tokens accepted
            for j in range(T):
                if cache is None:
                    tok, prob, logp = plain[0][b][j], plain[1][b][j], plain[2][b][j]
                else:  # mixed left to right up to the first disagreement, as plain decoding mixes
                    row = logits[b, j].clone()
                    logp_model = torch.log_softmax(row, dim=-1)  # scores stay the model's own
                    cache.mix(row, spans[b])
                    c = choose(row[None], scfg, None)
                    tok, prob = int(c.tokens[0]), float(c.prob[0])
                    logp = float(logp_model[tok])
                n = j + 1
                spans[b].append(tok)
                confs[b].append(prob)
                logps[b].append(logp)
                proposers[b].append(tok)
                last[b] = tok
                agreed = j < len(props[b]) and tok == props[b][j]
                accepted[b] += agreed
                if tok in ends or len(spans[b]) >= lengths[b] or (stop is not None and stop(b, list(spans[b]))):
                    done[b] = True
                    break
                if not agreed:
                    break
            if not done[b]:
                advance.append((b, n))
                # the block that assumed exactly these n - 1 drafts accepted (none without blocks)
                own[b] = [] if not blocks else drafter.drafts(lambda h: restricted(model.logits(h), vocab_limit, banned),
                                                              hidden, b, n - 1, lengths[b] - len(spans[b]) - 1,
                                                              scfg.draft_floor)
        step = max((n for _, n in advance), default=T)
        for b, n in advance:  # the rejected tail (and a shorter run's share of the step) is masked
            if n < step:
                kvalid[b, s + n:s + step] = False
                holes = True
        s += step
        if on_step is not None:
            _fill(x, spans)
            done_t = torch.tensor(done, device=dev)
            on_step(forwards, batch, x[:, :1 + max(len(sp) for sp in spans)].to(dev), done_t,
                    [len(sp) for sp in spans])
    gen_ms = (time.perf_counter() - t1) * 1000
    _fill(x, spans)
    conf = torch.ones(B, A, dtype=torch.float32)
    logp = torch.zeros(B, A, dtype=torch.float32)
    for b in range(B):
        conf[b, 1:1 + len(confs[b])] = torch.tensor(confs[b], dtype=torch.float32)
        logp[b, 1:1 + len(logps[b])] = torch.tensor(logps[b], dtype=torch.float32)
    out = Denoised(batch, x.to(dev), conf.to(dev), logp.to(dev), forwards, forwards, encode_ms, gen_ms, reused, B)
    out.kept = torch.tensor(accepted, dtype=torch.long)
    return out


def restricted(logits: torch.Tensor, vocab_limit: int | None, banned: list[int]) -> torch.Tensor:
    """`logits` with ids past the vocabulary and the banned ids ruled out, in place."""
    if vocab_limit is not None and vocab_limit < logits.shape[-1]:
        logits[..., vocab_limit:] = float("-inf")
    logits[..., banned] = float("-inf")
    return logits


def _fill(x: torch.Tensor, spans: list[list[int]]) -> None:
    for b, sp in enumerate(spans):
        if sp:
            x[b, 1:1 + len(sp)] = torch.tensor(sp, dtype=torch.long)
