"""Int8 linears for CPU inference: fbgemm's dynamic quantized matmul, one scale per row.

A denoising step multiplies a few dozen rows by every weight matrix, so on a CPU it is
bound by reading the weights, not by arithmetic: int8 weights are a quarter of float32's
bytes. On the 2-core AVX2 development machine a step of the default model (1 row x 18 tokens)
takes 11 ms instead of 21 and encoding 320 context tokens 50 ms instead of 80; its held-out
answers are the same but for 2 of 200 (docs/evaluation.md).

Weights are quantized once per output channel (symmetric, scale = max |w| / 127), which keeps
rows of very different sizes (the output head) accurate. Activations are quantized per call,
over the range of the whole call: so a row's result depends on the rows beside it, and a
verified block of drafts could decode differently from one token at a time. Where that matters
(causal models, whose drafts are verified so: speculative.py) the weights are packed
`rows_alone`: each row is divided by its own largest magnitude and two constant inputs, +1 and
-1 (against two zero weight columns), pin every call's range to [-1, 1]. Each row is then
quantized on the same grid whatever else is in the call, its integer products are exact, and
the result, times the row's magnitude, is bit for bit the row's result alone; the four extra
element-wise passes cost ~1.5 ms a forward of the shipped twin (~25% at one token).
`reduce_range` keeps activations to 7 bits, as fbgemm needs on x86: its u8 x s8 pair products
must not saturate int16. Nothing here keeps state; model.py caches the packed weights per
module.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import torch


@functools.cache
def unavailable() -> str | None:
    """Why int8 linears cannot run here, or None when they can: this torch must have the x86
    kernels (fbgemm) and the quantized tensors they take, which torch deprecates. Found by
    running one tiny product, once per process; the error is kept as the reason."""
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return "this torch build has no x86 quantized kernels (fbgemm)"
    try:
        with torch.inference_mode():
            linear(torch.ones(1, 4), pack(torch.ones(2, 4)))
    except Exception as e:  # whatever a torch without them raises: int8 is then simply not used
        return f"int8 linears failed here ({type(e).__name__}: {e})"
    return None


def available() -> bool:
    return unavailable() is None


class Packed(NamedTuple):
    weight: object  # fbgemm's packed int8 weight ([out, in + 2] when rows_alone)
    bias: torch.Tensor | None  # rows_alone: added after each row's magnitude is restored
    rows_alone: bool


def pack(weight: torch.Tensor, bias: torch.Tensor | None = None, rows_alone: bool = False) -> Packed:
    """A float [out, in] weight (and bias) as fbgemm's packed int8 weight; `rows_alone`: with
    the two zero input columns that take linear()'s range pins."""
    w = weight.detach().float().cpu()
    b = None if bias is None else bias.detach().float().cpu()
    if rows_alone:
        w = torch.nn.functional.pad(w, (0, 2))
    scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
    with warnings.catch_warnings():  # the deprecation notice, once per process, is for torch's own users
        warnings.filterwarnings("ignore", message=".*quantize_per_channel.*deprecated", category=UserWarning)
        q = torch.quantize_per_channel(w, scale, torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
    if rows_alone:
        return Packed(torch.ops.quantized.linear_prepack(q, None), b, True)
    return Packed(torch.ops.quantized.linear_prepack(q, b), None, False)


_PINS = torch.tensor([[1.0, -1.0]])


def linear(x: torch.Tensor, packed: Packed) -> torch.Tensor:
    """x [..., in] (float32) through a packed weight: [..., out] float32 (rows_alone: each row
    exactly as it would be alone in the call)."""
    if not packed.rows_alone:
        return torch.ops.quantized.linear_dynamic(x, packed.weight, True)
    lead, k = x.shape[:-1], x.shape[-1]
    rows = x.reshape(-1, k)
    size = rows.abs().amax(dim=1, keepdim=True).clamp_min_(1e-30)  # (vector_norm(inf): 15x slower)
    pinned = torch.cat([rows / size, _PINS.expand(rows.shape[0], 2)], 1)
    y = torch.ops.quantized.linear_dynamic(pinned, packed.weight, True).mul_(size)
    if packed.bias is not None:
        y.add_(packed.bias)
    return y.reshape(*lead, y.shape[-1])
