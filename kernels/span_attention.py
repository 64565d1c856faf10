"""Span attention: a denoising step's queries over the cached context plus the span itself.

One masked-diffusion step recomputes only the span (A <= 128 positions): its queries attend,
non-causally, to every cached context key and to the span's own keys. That is a short, wide
problem - few queries, thousands of keys, a handful of kv heads - so one program per
(batch, kv head) would leave most of an H200's 132 multiprocessors idle at batch 1. As in
flash-decoding, the keys are split into chunks: each program runs an online softmax over
one chunk for all the query heads that share its kv head (grouped-query: the G = Hq / Hkv
heads' A queries form one [G*A, D] block, so each key/value tile is loaded once for all of
them), and a second launch merges the chunks' partial results. With one chunk the first
launch writes the normalised output directly.

Shapes: B batch, Hq query heads, Hkv kv heads, G = Hq / Hkv, A span queries, T keys
(context then span), D head dim, S key chunks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import launch

try:
    import triton
    import triton.language as tl
except ImportError:  # the references still work; the launcher says what is missing
    triton = tl = None

MAX_QUERIES = 128
MAX_HEAD_DIM = 256
BLOCK_N = 64  # keys per tile: a multiple of 16 for tl.dot, and what FlashAttention uses on Hopper
MIN_KEYS_PER_CHUNK = 256  # below this the partial results cost more traffic than the split saves
MAX_CHUNKS = 16  # past this the merge, not the keys, dominates


def _jit(fn):
    return triton.jit(fn) if triton is not None else fn


@_jit
def _span_attention_kernel(
    Q, K, V, KEY_VALID, O, PO, PM, PL,
    sqb, sqh, sqa, skb, skh, skt, svb, svh, svt, sob, soh, soa, s_valid,
    Hkv, G, A, T, D, keys_per_chunk, n_chunks, qk_scale,
    HAS_VALID: tl.constexpr, DIRECT: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_s = tl.program_id(2)
    b = (pid_bh // Hkv).to(tl.int64)  # batch strides of a large cache may pass 2^31 elements
    kvh = pid_bh % Hkv

    # Row r of the block is query a of head kvh*G + g (r = g*A + a).
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < G * A
    head = kvh * G + rows // A
    a = rows % A
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q = tl.load(Q + b * sqb + head[:, None] * sqh + a[:, None] * sqa + d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    k_base = K + b * skb + kvh * skh
    v_base = V + b * svb + kvh * svh
    start = pid_s * keys_per_chunk
    end = tl.minimum(start + keys_per_chunk, T)

    # Online softmax in base 2 (qk_scale carries log2(e)); m is -inf until a valid key shows.
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < end
        kv_mask = col_ok[:, None] & d_ok[None, :]
        k = tl.load(k_base + cols[:, None] * skt + d[None, :], mask=kv_mask, other=0.0)
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        ok = col_ok
        if HAS_VALID:
            ok = ok & (tl.load(KEY_VALID + b * s_valid + cols, mask=col_ok, other=0) != 0)
        s = tl.where(ok[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no (-inf) - (-inf)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * svt + d[None, :], mask=kv_mask, other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    out_mask = row_ok[:, None] & d_ok[None, :]
    if DIRECT:
        # A row with no valid key at all gets zeros, not NaN.
        o = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(O + b * sob + head[:, None] * soh + a[:, None] * soa + d[None, :],
                 o.to(O.dtype.element_ty), mask=out_mask)
    else:
        # Partials, row-major over (b, head, a, chunk): unnormalised sums plus their stats.
        prow = ((b * Hkv * G + head) * A + a) * n_chunks + pid_s
        tl.store(PO + prow[:, None] * BLOCK_D + d[None, :], acc, mask=out_mask)
        tl.store(PM + prow, m_i, mask=row_ok)
        tl.store(PL + prow, l_i, mask=row_ok)


@_jit
def _span_attention_combine_kernel(
    PO, PM, PL, O, sob, soh, soa, Hq, A, D, n_rows, n_chunks,
    BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # BLOCK_R output rows per program; chunk s weighs e^(m_s - M) (0 for a chunk of no valid key).
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_rows
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    st_mask = row_ok[:, None] & (s < n_chunks)[None, :]
    m = tl.load(PM + rows[:, None] * n_chunks + s[None, :], mask=st_mask, other=float("-inf"))
    l = tl.load(PL + rows[:, None] * n_chunks + s[None, :], mask=st_mask, other=0.0)
    m_max = tl.max(m, 1)
    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)
    denom = tl.sum(tl.exp2(m - m_safe[:, None]) * l, 1)
    acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
    for c in range(0, n_chunks):  # one [BLOCK_R, D] tile per chunk keeps registers bounded
        m_c = tl.load(PM + rows * n_chunks + c, mask=row_ok, other=float("-inf"))
        po = tl.load(PO + (rows * n_chunks + c)[:, None] * BLOCK_D + d[None, :],
                     mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        acc += po * tl.exp2(m_c - m_safe)[:, None]
    o = acc / tl.where(denom == 0.0, 1.0, denom)[:, None]
    b = rows // (Hq * A)
    head = (rows // A) % Hq
    a = rows % A
    tl.store(O + b[:, None] * sob + head[:, None] * soh + a[:, None] * soa + d[None, :],
             o.to(O.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


def _check(q, k, v, key_valid, dtypes=(torch.float16, torch.bfloat16, torch.float32)) -> None:
    launch.check_operands({"q": q, "k": k, "v": v}, 4, dtypes, "(head) dimension")
    B, Hq, A, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be [B, Hkv, T, D] "
                         f"with q's B={B} and D={D}")
    Hkv, T = k.shape[1], k.shape[2]
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of kv heads ({Hkv})")
    if not (1 <= A <= MAX_QUERIES) or T < 1:
        raise ValueError(f"need 1 <= A <= {MAX_QUERIES} queries and T >= 1 keys, got A={A}, T={T}")
    if not (1 <= D <= MAX_HEAD_DIM):
        raise ValueError(f"head dim must be in [1, {MAX_HEAD_DIM}], got {D}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ValueError("q, k, v must be on one device")
    if key_valid is not None:
        if key_valid.dtype != torch.bool or tuple(key_valid.shape) != (B, T):
            raise ValueError(f"key_valid must be a bool [B, T] = [{B}, {T}] tensor, "
                             f"got {key_valid.dtype} {tuple(key_valid.shape)}")
        if key_valid.device != q.device:
            raise ValueError("key_valid must be on q's device")


def _chunks(work: int, key_tiles: int, device: torch.device) -> int:
    """How many key chunks: about two programs per multiprocessor, chunks not too short."""
    target = 2 * launch.multiprocessors(device)
    most = max(1, min(MAX_CHUNKS, key_tiles * BLOCK_N // MIN_KEYS_PER_CHUNK))
    return max(1, min(triton.cdiv(target, work), most))


def span_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   key_valid: torch.Tensor | None = None, scale: float | None = None, *,
                   chunks: int | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v per head, grouped-query, non-causal.

    q [B, Hq, A, D], k/v [B, Hkv, T, D] (any strides with a unit last one, so slices of a
    static cache pass as they are), key_valid [B, T] bool (False keys are ignored; a row
    with none valid gets zeros). Returns [B, Hq, A, D] in q's dtype, laid out [B, A, Hq, D]
    in memory so that the caller's transpose(1, 2).reshape(B, A, Hq * D) is free.
    `chunks` overrides the number of key chunks (tests).
    """
    if triton is None:
        raise RuntimeError("span_attention needs triton (pip install 'redraft[gpu]'); "
                           "span_attention_ref runs without it")
    _check(q, k, v, key_valid)
    B, Hq, A, D = q.shape
    Hkv, T = k.shape[1], k.shape[2]
    G = Hq // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)

    BLOCK_D = max(16, triton.next_power_of_2(D))
    # The [BLOCK_M, BLOCK_D] fp32 accumulator lives in registers: 128 rows up to D = 128.
    BLOCK_M = max(16, min(128 if BLOCK_D <= 128 else 64, triton.next_power_of_2(G * A)))
    m_blocks = triton.cdiv(G * A, BLOCK_M)
    key_tiles = triton.cdiv(T, BLOCK_N)
    n = _chunks(B * Hkv * m_blocks, key_tiles, q.device) if chunks is None else int(chunks)
    if not 1 <= n <= key_tiles:
        raise ValueError(f"chunks must be in [1, {key_tiles}] for T={T}, got {chunks}")
    keys_per_chunk = triton.cdiv(key_tiles, n) * BLOCK_N
    n = triton.cdiv(T, keys_per_chunk)  # rounding may leave fewer, never empty, chunks

    out = launch.empty((B, A, Hq, D), q.dtype, q.device).transpose(1, 2)
    if key_valid is not None:
        valid, s_valid = key_valid.contiguous().view(torch.uint8), T
    else:
        valid, s_valid = q, 0  # q: an unused placeholder
    direct = n == 1
    if direct:
        po = pm = pl = out  # unused placeholders
    else:
        po = launch.empty((B * Hq * A * n, BLOCK_D), torch.float32, q.device)
        pm = launch.empty((B * Hq * A * n,), torch.float32, q.device)
        pl = launch.empty((B * Hq * A * n,), torch.float32, q.device)
    # Two warpgroups for 128 rows (or D = 256): 4 warps would need ~230 registers each (sm_90).
    warps = 8 if BLOCK_M * BLOCK_D >= 128 * 64 else 4
    _span_attention_kernel[(B * Hkv, m_blocks, n)](
        q, k, v, valid, out, po, pm, pl,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2), s_valid,
        Hkv, G, A, T, D, keys_per_chunk, n, scale * math.log2(math.e),
        HAS_VALID=key_valid is not None, DIRECT=direct, IEEE=q.dtype == torch.float32,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D, num_warps=warps, num_stages=3,
    )
    launch.count("span_attention")
    if not direct:
        rows = B * Hq * A
        BLOCK_R = 32
        _span_attention_combine_kernel[(triton.cdiv(rows, BLOCK_R),)](
            po, pm, pl, out, out.stride(0), out.stride(1), out.stride(2), Hq, A, D, rows, n,
            BLOCK_R=BLOCK_R, BLOCK_S=max(2, triton.next_power_of_2(n)), BLOCK_D=BLOCK_D, num_warps=4,
        )
    return out


def span_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       key_valid: torch.Tensor | None = None, scale: float | None = None) -> torch.Tensor:
    """The same function through torch's scaled_dot_product_attention (float64 too)."""
    _check(q, k, v, key_valid, dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64))
    G = q.shape[1] // k.shape[1]
    if G > 1:
        k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    mask = None if key_valid is None else key_valid[:, None, None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    if key_valid is not None:  # rows with no valid key: zeros, as the kernel gives, not NaN
        out = out.masked_fill(~key_valid.any(-1)[:, None, None, None], 0.0)
    return out
