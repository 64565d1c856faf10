"""Block-causal decoding: the span filled a block of positions at a time, several tokens a forward.

For checkpoints trained as engine/training/blockrows.py lays rows out ("block_causal"
attention, config.json `redraft_block_size` = b). The layout is the causal twin's (span last,
the token before it leading the active block), and the context is encoded causally, as the
twin's. The span's inputs (the token before it, then its tokens but the last) are cut into
blocks of b. A block opens with its first input committed (the token before the span, or the
last token the block before it committed) and the rest masked; each forward runs the open
block's b positions against the cached keys/values, attending to each other both ways, and
position j's output predicts input j + 1. Every masked target whose probability clears the
threshold is committed, and at least the leftmost open one (its whole left context is known,
as in the clean stream; the most likely one instead, as Fast-dLLM v2 commits, wrote runs of
garbage with the first, little-trained checkpoint), so a forward commits one token or more. An end token is committed only once every position before it is: the text ends there.

A finished block joins the keys/values as the clean stream holds it in training: its b clean
inputs, causally. That costs no forward of its own: it rides in front of the next block's
first step (one forward of 2b positions, an explicit mask saying who sees whom).

Verified (SamplerConfig.verify_blocks, off by default; greedy, one row, no cache model): the forward that
caches a finished block runs it causally, as the clean stream, so its outputs are the clean
stream's own next-token choices given committed text only, what the twin's training taught it.
Where one differs from what the block committed, that token is replaced by the clean stream's,
everything after it is dropped, and a block opens there (its keys/values before that point are
already the clean ones); the last block gets a forward of its own for the check. The text is
then exactly the clean stream's greedy decoding: the block's parallel commits are drafts it
accepts or cuts, as speculative decoding accepts a draft's agreeing prefix. The threshold
then trades wasted forwards against tokens per forward, never quality.

Greedy only (a temperature picks a token by sampling but commits by the same rule), batch rows
in lockstep (a row that finished its block waits for the others; several rows are not
verified). With a threshold of 1 it commits one token a forward, the leftmost.

Shapes: B rows, b block, W span inputs rounded up to whole blocks, V vocabulary.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from .batch import Batch, encode_context
from .cachemodel import CacheModel
from .config import SamplerConfig
from .errors import Cancelled
from .model import DiffusionLM
from .picks import choose
from .running import Denoised


def decode_blocks(model: DiffusionLM, batch: Batch, scfg: SamplerConfig, *, block: int, mask_id: int,
                  end_ids: torch.Tensor, pad_id: int, banned: list[int], first_allowed: dict[int, torch.Tensor],
                  owners: list[int], vocab_limit: int | None = None, reuse=None, cancel=None,
                  stop: Callable[[int, list[int]], bool] | None = None,
                  on_step: Callable[[int, Batch, torch.Tensor, torch.Tensor, list[int]], None] | None = None,
                  caches: dict[int, CacheModel] | None = None) -> Denoised:
    """Decode every row's span block by block. `on_step(step, batch, x, done, counts)` sees the
    span after every forward (`counts`: each row's committed prefix, in tokens)."""
    assert batch.span_at == 1, "block decoding feeds the token before the span first"
    assert block >= 1
    gen = torch.Generator(device="cpu").manual_seed(scfg.seed) if scfg.temperature > 0 else None
    B, A, C = batch.B, batch.A, batch.C
    L = A - 1  # span tokens at most; inputs 0..L-1 (input j predicts token j + 1)
    W = -(-L // block) * block
    t0 = time.perf_counter()
    kv, reused = encode_context(model, batch, reuse, extra=W + 1 + block)
    encode_ms = (time.perf_counter() - t0) * 1000
    t1 = time.perf_counter()

    dev = batch.act_ids.device
    verify = scfg.verify_blocks and scfg.temperature == 0 and B == 1 and not caches
    X = W + 1 + (block if verify else 0)  # a rollback can open a block at any input
    x = torch.full((B, X), mask_id, dtype=torch.long, device=dev)
    x[:, 0] = batch.act_ids[:, 0]
    pos = batch.act_pos[:, :1] + torch.arange(X, device=dev)
    committed = torch.zeros(B, X, dtype=torch.bool, device=dev)
    committed[:, 0] = True
    lengths = batch.act_valid.sum(1) - 1  # each row's span budget
    needed = torch.arange(X, device=dev)[None, :] <= lengths[:, None]  # targets 1..length
    needed[:, 0] = False
    conf = torch.ones(B, X, dtype=torch.float32, device=dev)
    logp = torch.zeros(B, X, dtype=torch.float32, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    ctx_valid = None if bool(batch.ctx_valid.all()) else batch.ctx_valid
    end_list = end_ids.to(dev)
    steps, s, pending = 0, 0, None  # pending: the finished block not yet cached clean
    checked = 0  # with `verify`: targets 1..checked agree with the clean stream's greedy choice
    while True:
        if s >= L or bool(done.all()):
            n = int(_prefix_lengths(committed)[0]) - checked if verify else 0
            if n <= 0:
                break
            pending, s = checked, checked + n  # the last block: checked by a forward of its own
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        e = s + block if s < L and not bool(done.all()) else s
        lo = s if pending is None else pending
        ids, ppos = x[:, lo:e], pos[:, lo:e]
        hidden = model(ids, ppos, kv, start=C + lo, mask=_mask(B, C, lo, s, e, ctx_valid, dev))
        steps += 1
        if verify and lo < s:
            t = _check(model, hidden[:, :s - lo], x, lo, s, int(lengths[0]), end_list, scfg, gen, vocab_limit,
                       banned, first_allowed if lo == 0 else None, owners, conf, logp)
            pending = None
            if t is not None:  # the clean stream disagrees at target t: it keeps its own token there
                committed[:, t + 1:] = False
                x[:, t + 1:] = mask_id
                ended = bool(torch.isin(x[0, t], end_list))
                done[:] = ended or t >= int(lengths[0])
                checked, s = t, t
                if on_step is not None:
                    on_step(steps, batch, _shown(x, committed, pad_id)[:, :A], done, [t])
                continue
            checked = s
            if e == s:
                break
        if e == s:
            break
        logits = model.logits(hidden[:, s - lo:])  # [B, b, V]: position j predicts input s + j + 1
        pending = None
        open_ = needed[:, s + 1:e + 1] & ~committed[:, s + 1:e + 1] & ~done[:, None]
        _restrict(logits, vocab_limit, banned, first_allowed if s == 0 else None, owners)
        _mix(logits, caches, owners, x, committed, open_, s)
        c = choose(logits.reshape(B * block, -1), scfg, gen)
        tok, prob, lp = (t.reshape(B, block) for t in (c.tokens, c.prob, c.logp))
        take = _commits(open_, c.score.reshape(B, block), tok, end_list, scfg.threshold)
        sl = slice(s + 1, e + 1)
        x[:, sl] = torch.where(take, tok, x[:, sl])
        conf[:, sl] = torch.where(take, prob, conf[:, sl])
        logp[:, sl] = torch.where(take, lp, logp[:, sl])
        committed[:, sl] |= take
        ended = (take & torch.isin(tok, end_list)).any(1)
        done |= ended
        prefix = _prefix_lengths(committed)
        done |= prefix >= lengths
        if stop is not None:
            for b in range(B):
                if not done[b] and stop(b, x[b, 1:1 + int(prefix[b])].tolist()):
                    done[b] = True
        if on_step is not None:
            on_step(steps, batch, _shown(x, committed, pad_id)[:, :A], done, [int(n) for n in prefix])
        finished = done | ~(needed[:, s + 1:e + 1] & ~committed[:, s + 1:e + 1]).any(1)
        if bool(finished.all()):
            pending, s = s, e
    gen_ms = (time.perf_counter() - t1) * 1000
    out = _shown(x, committed, pad_id)
    out = _after_end(out, end_list, pad_id)
    return Denoised(batch, out[:, :A], conf[:, :A], logp[:, :A], steps, steps, encode_ms, gen_ms, reused, B)


def _check(model: DiffusionLM, clean: torch.Tensor, x: torch.Tensor, lo: int, s: int, length: int,
           ends: torch.Tensor, scfg: SamplerConfig, gen, vocab_limit, banned, first_allowed, owners,
           conf: torch.Tensor, logp: torch.Tensor) -> int | None:
    """The clean stream's verdict on targets lo+1..s (one row): `clean` holds the outputs of
    inputs [lo, s) run causally, as the twin runs them, so each predicts the next target from
    committed text alone. Returns the first target where its greedy choice differs from what
    the block committed (written there, with its probability), or None when all agree. Targets
    after an end token or past the span budget are not asked about."""
    logits = model.logits(clean)
    _restrict(logits, vocab_limit, banned, first_allowed, owners)
    c = choose(logits.reshape(-1, logits.shape[-1]), scfg, gen)
    for j in range(s - lo):
        t = lo + 1 + j
        if t > length:
            return None
        if int(c.tokens[j]) != int(x[0, t]):
            x[0, t] = c.tokens[j]
            conf[0, t], logp[0, t] = c.prob[j], c.logp[j]
            return t
        if bool(torch.isin(x[0, t], ends)):
            return None
    return None


def _mask(B: int, C: int, lo: int, s: int, e: int, ctx_valid, dev) -> torch.Tensor:
    """Who sees whom in one forward of inputs [lo, e) written at C + lo: the finished block
    [lo, s) (if any) causally, as the clean stream; the open block [s, e) everything before it
    and itself both ways. [B, 1, e - lo, C + e] bool."""
    T, S = e - lo, C + e
    q = torch.arange(lo, e, device=dev)[:, None] + C  # each query's slot
    k = torch.arange(S, device=dev)[None, :]
    allowed = k <= q  # causal
    allowed[s - lo:, :C + e] = True  # the open block: everything up to its end
    allowed = allowed.expand(B, T, S).clone()
    if ctx_valid is not None:
        allowed[:, :, :C] &= ctx_valid[:, None, :]
    return allowed[:, None]


def _restrict(logits: torch.Tensor, vocab_limit: int | None, banned: list[int],
              first_allowed: dict[int, torch.Tensor] | None, owners: list[int]) -> None:
    """Rule out, in place, ids past the vocabulary and the banned ids; on the span's first token
    (the first block's position 0), all but the ids a row's owner allows there."""
    if vocab_limit is not None and vocab_limit < logits.shape[-1]:
        logits[..., vocab_limit:] = float("-inf")
    logits[..., banned] = float("-inf")
    for b in range(logits.shape[0]) if first_allowed else ():
        allowed = first_allowed.get(owners[b])
        if allowed is not None:
            keep = logits[b, 0, allowed].clone()
            logits[b, 0] = float("-inf")
            logits[b, 0, allowed] = keep


def _mix(logits, caches, owners, x, committed, open_, s) -> None:
    """The request's cache model, mixed into the one open position whose whole span before it is
    committed (the chain it is asked about is then the text so far, as in causal decoding)."""
    if not caches:
        return
    for b in range(logits.shape[0]):
        cache = caches.get(owners[b])
        if cache is None or not bool(open_[b].any()):
            continue
        j = int(open_[b].float().argmax())
        if bool(committed[b, 1:s + j + 1].all()):
            cache.mix(logits[b, j], x[b, 1:s + j + 1].tolist())


def _commits(open_: torch.Tensor, score: torch.Tensor, tok: torch.Tensor, ends: torch.Tensor,
             threshold: float) -> torch.Tensor:
    """Which open positions commit this step: those scoring at least `threshold`, at least the
    leftmost open one of each row with any open; an end token only where no position before it stays
    open (the text ends there)."""
    score = score.masked_fill(~open_, -1.0)
    take = open_ & (score >= threshold)
    first = open_.int().argmax(1)
    none = open_.any(1) & ~take.any(1)
    take[none, first[none]] = True
    is_end = torch.isin(tok, ends)
    left_open = (open_ & ~take).int().cumsum(1) - (open_ & ~take).int()  # open, untaken positions before j
    bad_end = take & is_end & (left_open > 0)
    if bool(bad_end.any()):
        take &= ~bad_end
        empty = open_.any(1) & ~take.any(1)
        take[empty, first[empty]] = True
    return take


def _prefix_lengths(committed: torch.Tensor) -> torch.Tensor:
    """Span tokens committed without a gap from its start, per row."""
    return committed[:, 1:].int().cumprod(1).sum(1)


def _shown(x: torch.Tensor, committed: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The span as committed, with padding where nothing is."""
    return torch.where(committed, x, torch.full_like(x, pad_id))


def _after_end(x: torch.Tensor, ends: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Padding after each row's first end token."""
    is_end = torch.isin(x[:, 1:], ends)
    after = (is_end.int().cumsum(1) - is_end.int()) > 0
    x = x.clone()
    x[:, 1:][after] = pad_id
    return x
