"""span_attention against torch's SDPA: odd shapes, strided inputs, padding, key chunks.

Shapes: B batch, Hq/Hkv heads, A span queries, T keys (context then span), D head dim.
"""

from __future__ import annotations

import pytest
import torch

from tolerances import DTYPES, assert_close

pytest.importorskip("triton", reason="the kernels need triton (pip install 'redraft[gpu]')")

from redraft.kernels import launch  # noqa: E402
from redraft.kernels.span_attention import span_attention, span_attention_ref  # noqa: E402

# B, Hq, Hkv, A, T, D, chunks (None: the launcher's choice), padded context, strided inputs
CASES = [
    (1, 2, 2, 1, 1, 16, None, False, False),
    (2, 4, 2, 3, 7, 16, None, True, True),
    (1, 2, 2, 5, 40, 32, None, True, False),
    (2, 4, 2, 17, 130, 32, 3, True, True),  # three chunks, the last one short
    (1, 4, 2, 17, 130, 16, 2, False, False),
    (1, 14, 2, 5, 70, 16, 2, True, True),  # Qwen's 7 query heads per kv head
    (1, 2, 1, 70, 75, 32, None, False, True),  # 140 rows: two row blocks
]


def make(B, Hq, Hkv, A, T, D, padded, strided, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(dtype).to(device)

    if strided:  # q as the model makes it ([B, A, Hq, D] transposed), k/v as slices of a cache
        q = rnd(B, A, Hq, D).transpose(1, 2)
        k = rnd(B, Hkv, T + 9, D)[:, :, :T]
        v = rnd(B, Hkv, T + 9, D)[:, :, :T]
    else:
        q, k, v = rnd(B, Hq, A, D), rnd(B, Hkv, T, D), rnd(B, Hkv, T, D)
    valid = None
    if padded:  # every row but the first has a shorter context, right-padded; the span stays valid
        C = T - A
        valid = torch.ones(B, T, dtype=torch.bool)
        for b in range(1, B):
            valid[b, max(0, C - 2 * b - 1):C] = False
        if B == 1 and C > 2:
            valid[0, C - 2:C] = False
        valid = valid.to(device)
    return q, k, v, valid


def reference(q, k, v, valid, scale=None):
    return span_attention_ref(q.double(), k.double(), v.double(), valid, scale)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}-H{}x{}-A{}-T{}-D{}-c{}-{}{}".format(
    *c[:7], "pad" if c[7] else "full", "-strided" if c[8] else ""))
def test_matches_sdpa(case, dtype, device, poison):
    B, Hq, Hkv, A, T, D, chunks, padded, strided = case
    q, k, v, valid = make(B, Hq, Hkv, A, T, D, padded, strided, dtype, device)
    before = launch.launches["span_attention"]
    out = span_attention(q, k, v, valid, chunks=chunks)
    assert launch.launches["span_attention"] == before + 1
    assert out.shape == (B, Hq, A, D) and out.dtype == dtype and out.device == q.device
    assert_close(out, reference(q, k, v, valid), "span_attention", dtype, str(case))


def test_scale_and_layout(device, poison):
    q, k, v, valid = make(2, 4, 2, 5, 40, 16, True, False, torch.float32, device, seed=3)
    out = span_attention(q, k, v, valid, scale=0.3)
    assert_close(out, reference(q, k, v, valid, 0.3), "span_attention", torch.float32, "scale")
    # Memory is [B, A, Hq, D]: the model's transpose(1, 2).reshape is a view.
    flat = out.transpose(1, 2).reshape(2, 5, 4 * 16)
    assert flat.data_ptr() == out.data_ptr()


def test_chunks_agree(device):
    """The split over keys changes the summation order only."""
    q, k, v, valid = make(1, 4, 2, 9, 200, 32, True, True, torch.float32, device, seed=5)
    one = span_attention(q, k, v, valid, chunks=1)
    for n in (2, 4):
        assert_close(span_attention(q, k, v, valid, chunks=n), one, "span_attention", torch.float32, f"chunks={n}")


def test_bad_inputs_raise(device):
    q, k, v, _ = make(1, 4, 2, 3, 7, 16, False, False, torch.float32, device)
    bad = {
        "q not 4-D": (q[0], k, v, None),
        "Hq not a multiple of Hkv": (torch.cat([q, q[:, :1]], 1), k, v, None),
        "k/v shapes differ": (q, k, v[:, :, :5], None),
        "head dims differ": (q[..., :8], k, v, None),
        "batch differs": (q.expand(2, -1, -1, -1), k, v, None),
        "dtype mismatch": (q.half(), k, v, None),
        "integer dtype": (q.long(), k.long(), v.long(), None),
        "last dim strided": (q.transpose(2, 3).contiguous().transpose(2, 3), k, v, None),
        "key_valid not bool": (q, k, v, torch.ones(1, 7, device=device)),
        "key_valid wrong shape": (q, k, v, torch.ones(1, 6, dtype=torch.bool, device=device)),
        "too many queries": (torch.zeros(1, 4, 129, 16, device=device), k, v, None),
    }
    for what, args in bad.items():
        with pytest.raises(ValueError):
            span_attention(*args)
            pytest.fail(what)
    with pytest.raises(ValueError):
        span_attention(q, k, v, chunks=5)  # 7 keys make one 64-key tile
