"""Fused output head and confidence: hidden x embedding^T -> greedy token and its scores.

A denoising step needs, per span position, the argmax token and how sure the model is of it
(max probability, top-1 minus top-2 margin, exp(-entropy)). Written out, the logits are
N x 152k floats per step, read back three times by softmax, argmax and topk. Here they
never leave the chip: each program multiplies a block of rows by a slice of the vocabulary,
one [rows, BLOCK_V] tile at a time, and keeps online statistics per row - running max
(with its id) and second max, the sum of e^(y - max), and the sum of e^(y - max)(y - max)
for the entropy - then a second launch merges the slices. At 0.5B shapes the step is bound
by reading the embedding once (272 MB), so the grid is split over the vocabulary to put
every multiprocessor to work even for a single row block; the split index is the slow grid
axis so that row blocks sharing a slice run together and hit L2 for it.

Greedy only: sampling needs the whole distribution and stays in torch.

Shapes: N rows, E hidden size, V vocabulary, S vocabulary slices.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import launch

try:
    import triton
    import triton.language as tl
except ImportError:  # the reference still works; the launcher says what is missing
    triton = tl = None

BLOCK_E = 64  # hidden-size step of the dot: [rows, 64] x [64, BLOCK_V] per stage
MAX_SLICES = 512
N_STATS = 6  # per (row, slice): max y, second y, sum e^(y-m), sum e^(y-m)(y-m), max z, sum e^(z-mz)


def _const(x):
    """A global the kernels may read (Triton only lets them read constexpr globals)."""
    return tl.constexpr(x) if tl is not None else x


NEG = _const(-1.0e30)  # a finite "minus infinity" for excluded ids: no inf - inf ever appears
_STATS = _const(N_STATS)


@dataclass
class Confidence:
    """Per row, greedy choice and scores; y = logits / temperature.

    tokens: int64 argmax id (the lowest id among equal maxima, as torch.argmax);
    prob: its probability at the temperature; margin: top-1 minus top-2 probability;
    exp_neg_entropy: exp(-entropy) of the tempered distribution, in (0, 1];
    logp: the argmax's log-probability at temperature 1.
    Excluded ids (vocab_limit, banned) count as logits of -inf in every score.
    """

    tokens: torch.Tensor
    prob: torch.Tensor
    margin: torch.Tensor
    exp_neg_entropy: torch.Tensor
    logp: torch.Tensor

    def score(self, kind: str) -> torch.Tensor:
        """The score a sampler thresholds: 'maxprob', 'margin' or 'entropy'."""
        return {"maxprob": self.prob, "margin": self.margin, "entropy": self.exp_neg_entropy}[kind]


def _jit(fn):
    return triton.jit(fn) if triton is not None else fn


@_jit
def _head_confidence_kernel(
    Hd, W, ALLOWED, P, PI, N, E, v_end, tiles_per_slice, n_slices, n_row_blocks, inv_t,
    sh, sw,
    HAS_ALLOWED: tl.constexpr, TEMPERED: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_E: tl.constexpr,
):
    pid = tl.program_id(0)
    rb = pid % n_row_blocks  # row blocks vary fastest: programs sharing a slice run together
    sl = pid // n_row_blocks
    rows = rb * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    e = tl.arange(0, BLOCK_E)
    lo = sl * tiles_per_slice * BLOCK_V
    hi = tl.minimum(lo + tiles_per_slice * BLOCK_V, v_end)

    y1 = tl.full([BLOCK_N], NEG, tl.float32)  # max tempered logit, its id, the second one
    i1 = tl.zeros([BLOCK_N], tl.int32)
    y2 = tl.full([BLOCK_N], NEG, tl.float32)
    s = tl.zeros([BLOCK_N], tl.float32)  # sum e^(y - y1)
    w = tl.zeros([BLOCK_N], tl.float32)  # sum e^(y - y1) (y - y1)
    z1 = tl.full([BLOCK_N], NEG, tl.float32)  # the same max and sum at temperature 1
    s1 = tl.zeros([BLOCK_N], tl.float32)
    for v0 in range(lo, hi, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        col_ok = cols < hi
        acc = tl.zeros([BLOCK_N, BLOCK_V], tl.float32)
        for e0 in range(0, E, BLOCK_E):
            e_ok = (e0 + e) < E
            h = tl.load(Hd + rows[:, None] * sh + (e0 + e)[None, :], mask=row_ok[:, None] & e_ok[None, :],
                        other=0.0)
            wt = tl.load(W + cols.to(tl.int64)[:, None] * sw + (e0 + e)[None, :],  # V * E may pass 2^31
                         mask=col_ok[:, None] & e_ok[None, :], other=0.0)
            if IEEE:
                acc = tl.dot(h, tl.trans(wt), acc, input_precision="ieee")
            else:
                acc = tl.dot(h, tl.trans(wt), acc)
        ok = col_ok
        if HAS_ALLOWED:
            ok = ok & (tl.load(ALLOWED + cols, mask=col_ok, other=0) != 0)
        ok2 = row_ok[:, None] & ok[None, :]
        y = tl.where(ok2, acc * inv_t, NEG)

        # Top two of the tile (tl.argmax keeps the lowest index among ties), then of the run.
        t1 = tl.max(y, 1)
        ti = tl.argmax(y, 1)
        t2 = tl.max(tl.where(tl.arange(0, BLOCK_V)[None, :] == ti[:, None], NEG, y), 1)
        better = t1 > y1  # strict: an earlier tile keeps its id on a tie
        y2 = tl.where(better, tl.maximum(y1, t2), tl.maximum(y2, t1))
        i1 = tl.where(better, v0 + ti.to(tl.int32), i1)
        m = tl.maximum(y1, t1)
        alpha = tl.exp(y1 - m)
        ex = tl.where(ok2, tl.exp(y - m[:, None]), 0.0)
        w = alpha * (w + s * (y1 - m)) + tl.sum(ex * (y - m[:, None]), 1)
        s = alpha * s + tl.sum(ex, 1)
        y1 = m
        if TEMPERED:
            z = tl.where(ok2, acc, NEG)
            mz = tl.maximum(z1, tl.max(z, 1))
            s1 = s1 * tl.exp(z1 - mz) + tl.sum(tl.where(ok2, tl.exp(z - mz[:, None]), 0.0), 1)
            z1 = mz

    base = (rows * n_slices + sl) * _STATS
    tl.store(P + base + 0, y1, mask=row_ok)
    tl.store(P + base + 1, y2, mask=row_ok)
    tl.store(P + base + 2, s, mask=row_ok)
    tl.store(P + base + 3, w, mask=row_ok)
    tl.store(P + base + 4, z1, mask=row_ok)
    tl.store(P + base + 5, s1, mask=row_ok)
    tl.store(PI + rows * n_slices + sl, i1, mask=row_ok)


@_jit
def _head_confidence_combine_kernel(
    P, PI, TOK, PROB, MARGIN, EXPNEGENT, LOGP, N, n_slices,
    TEMPERED: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < N
    sl = tl.arange(0, BLOCK_S)
    ok = row_ok[:, None] & (sl < n_slices)[None, :]
    base = (rows[:, None] * n_slices + sl[None, :]) * _STATS
    y1 = tl.load(P + base + 0, mask=ok, other=NEG)
    y2 = tl.load(P + base + 1, mask=ok, other=NEG)
    s = tl.load(P + base + 2, mask=ok, other=0.0)
    w = tl.load(P + base + 3, mask=ok, other=0.0)
    i1 = tl.load(PI + rows[:, None] * n_slices + sl[None, :], mask=ok, other=0)

    m = tl.max(y1, 1)
    a = tl.exp(y1 - m[:, None])
    S = tl.where(row_ok, tl.sum(a * s, 1), 1.0)  # rows past N: no 1/0 warnings
    Wt = tl.sum(a * (w + s * (y1 - m[:, None])), 1)
    top = y1 == m[:, None]
    idx = tl.min(tl.where(top, i1, 2147483647), 1)  # lowest id among the slices' equal maxima
    win = top & (i1 == idx[:, None])
    second = tl.max(tl.where(win, y2, y1), 1)  # another slice's max may be the runner-up

    prob = 1.0 / S
    entropy = tl.log(S) - Wt / S
    if TEMPERED:
        z1 = tl.load(P + base + 4, mask=ok, other=NEG)
        s1 = tl.load(P + base + 5, mask=ok, other=0.0)
        mz = tl.max(z1, 1)
        S1 = tl.where(row_ok, tl.sum(tl.exp(z1 - mz[:, None]) * s1, 1), 1.0)
    else:
        S1 = S
    tl.store(TOK + rows, idx.to(tl.int64), mask=row_ok)
    tl.store(PROB + rows, prob, mask=row_ok)
    tl.store(MARGIN + rows, (1.0 - tl.exp(second - m)) * prob, mask=row_ok)
    tl.store(EXPNEGENT + rows, tl.exp(-entropy), mask=row_ok)
    tl.store(LOGP + rows, -tl.log(S1), mask=row_ok)  # the argmax is the max logit at any temperature


def _check(hidden, weight, temperature, vocab_limit, banned,
           dtypes=(torch.float16, torch.bfloat16, torch.float32)) -> None:
    launch.check_operands({"hidden": hidden, "weight": weight}, 2, dtypes, "dimension")
    if hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden [N, E] = {tuple(hidden.shape)} and weight [V, E] = {tuple(weight.shape)} "
                         "must share E")
    if hidden.dtype != weight.dtype:
        raise ValueError(f"hidden and weight must share a dtype, got {hidden.dtype} and {weight.dtype}")
    if hidden.device != weight.device:
        raise ValueError("hidden and weight must be on one device")
    if hidden.shape[0] < 1 or weight.shape[0] < 1:
        raise ValueError("need at least one row and one vocabulary entry")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (greedy choice, tempered scores), got {temperature}")
    if vocab_limit is not None and vocab_limit < 1:
        raise ValueError(f"vocab_limit must be >= 1, got {vocab_limit}")
    if banned is not None:
        if not isinstance(banned, torch.Tensor) or banned.dim() != 1 or banned.is_floating_point() \
                or banned.dtype == torch.bool:
            raise ValueError("banned must be a 1-D integer tensor of token ids")
        if banned.device != weight.device:
            raise ValueError("banned must be on weight's device")


def _slices(row_blocks: int, tiles: int, device: torch.device) -> int:
    """Vocabulary slices: enough programs for about two per multiprocessor."""
    target = 2 * launch.multiprocessors(device)
    return max(1, min(triton.cdiv(target, row_blocks), tiles, MAX_SLICES))


def head_confidence(hidden: torch.Tensor, weight: torch.Tensor, temperature: float = 1.0,
                    vocab_limit: int | None = None, banned: torch.Tensor | None = None, *,
                    slices: int | None = None) -> Confidence:
    """Greedy token and confidence per row of hidden [N, E] against weight [V, E].

    Ids >= vocab_limit and those in banned (1-D int tensor) are never chosen and carry no
    probability. `slices` overrides how many vocabulary slices run in parallel (tests).
    """
    if triton is None:
        raise RuntimeError("head_confidence needs triton (pip install 'redraft[gpu]'); "
                           "head_confidence_ref runs without it")
    _check(hidden, weight, temperature, vocab_limit, banned)
    N, E = hidden.shape
    V = weight.shape[0]
    v_end = V if vocab_limit is None else min(V, int(vocab_limit))  # a limit past V limits nothing
    dev = hidden.device

    BLOCK_N = max(16, min(128, triton.next_power_of_2(N)))
    BLOCK_V = 128 if BLOCK_N <= 64 else 64  # the [rows, ids] tile and its temporaries stay in registers
    row_blocks = triton.cdiv(N, BLOCK_N)
    tiles = triton.cdiv(v_end, BLOCK_V)
    n = _slices(row_blocks, tiles, dev) if slices is None else int(slices)
    if not 1 <= n <= tiles:
        raise ValueError(f"slices must be in [1, {tiles}], got {slices}")
    tiles_per_slice = triton.cdiv(tiles, n)
    n = triton.cdiv(tiles, tiles_per_slice)  # rounding may leave fewer, never empty, slices

    allowed = None
    if banned is not None and banned.numel():
        allowed = torch.ones(V, dtype=torch.uint8, device=dev)
        allowed[banned] = 0
    parts = launch.empty((N, n, N_STATS), torch.float32, dev)
    part_ids = launch.empty((N, n), torch.int32, dev)
    tempered = float(temperature) != 1.0
    _head_confidence_kernel[(row_blocks * n,)](
        hidden, weight, allowed if allowed is not None else hidden, parts, part_ids,
        N, E, v_end, tiles_per_slice, n, row_blocks, 1.0 / float(temperature),
        hidden.stride(0), weight.stride(0),
        HAS_ALLOWED=allowed is not None, TEMPERED=tempered, IEEE=hidden.dtype == torch.float32,
        BLOCK_N=BLOCK_N, BLOCK_V=BLOCK_V, BLOCK_E=BLOCK_E,
        num_warps=8 if BLOCK_N * BLOCK_V > 4096 else 4, num_stages=3,
    )
    launch.count("head_confidence")
    out = Confidence(launch.empty((N,), torch.int64, dev),
                     *(launch.empty((N,), torch.float32, dev) for _ in range(4)))
    BLOCK_S = max(2, triton.next_power_of_2(n))
    BLOCK_R = max(1, min(64, 4096 // BLOCK_S))  # a [BLOCK_R, BLOCK_S] tile per statistic
    _head_confidence_combine_kernel[(triton.cdiv(N, BLOCK_R),)](
        parts, part_ids, out.tokens, out.prob, out.margin, out.exp_neg_entropy, out.logp, N, n,
        TEMPERED=tempered, BLOCK_R=BLOCK_R, BLOCK_S=BLOCK_S, num_warps=4,
    )
    return out


def head_confidence_ref(hidden: torch.Tensor, weight: torch.Tensor, temperature: float = 1.0,
                        vocab_limit: int | None = None, banned: torch.Tensor | None = None) -> Confidence:
    """The same scores from the full fp32 logits, as the engine's torch path computes them
    (float64 inputs give float64 logits)."""
    _check(hidden, weight, temperature, vocab_limit, banned,
           dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64))
    logits = hidden @ weight.T
    logits = logits if logits.dtype == torch.float64 else logits.float()
    if vocab_limit is not None:
        logits[:, vocab_limit:] = float("-inf")
    if banned is not None:
        logits[:, banned] = float("-inf")
    probs = torch.softmax(logits / temperature, dim=-1)
    top = probs.topk(min(2, probs.shape[-1]), dim=-1)
    tokens = logits.argmax(-1)
    prob = top.values[:, 0]
    margin = prob - top.values[:, 1] if probs.shape[-1] > 1 else prob
    entropy = -(probs * torch.log(probs.clamp_min(1e-12))).sum(-1)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    return Confidence(tokens, prob, margin, torch.exp(-entropy), logp)
