"""Int8 linears for CPU inference: fbgemm's dynamic quantized matmul.

A denoising step multiplies a few dozen rows by every weight matrix, so on a CPU it is
bound by reading the weights, not by arithmetic: int8 weights are a quarter of float32's
bytes. On the 2-core AVX2 development machine a step of the default model (1 row x 18 tokens)
takes 11 ms instead of 21 and encoding 320 context tokens 50 ms instead of 80; its held-out
answers are the same but for 2 of 200 (docs/evaluation.md).

Weights are quantized once per output channel (symmetric, scale = max |w| / 127), which keeps
rows of very different sizes (the output head) accurate; activations are quantized per call
over their own range. `reduce_range` keeps them to 7 bits, as fbgemm needs on x86: its
u8 x s8 pair products must not saturate int16. Nothing here keeps state; model.py caches the
packed weights per module.
"""

from __future__ import annotations

import functools
import warnings

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


def pack(weight: torch.Tensor, bias: torch.Tensor | None = None) -> object:
    """A float [out, in] weight (and bias) as fbgemm's packed int8 weight."""
    w = weight.detach().float().cpu()
    scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
    with warnings.catch_warnings():  # the deprecation notice, once per process, is for torch's own users
        warnings.filterwarnings("ignore", message=".*quantize_per_channel.*deprecated", category=UserWarning)
        q = torch.quantize_per_channel(w, scale, torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(q, None if bias is None else bias.detach().float().cpu())


def linear(x: torch.Tensor, packed: object) -> torch.Tensor:
    """x [..., in] (float32) through a packed weight: [..., out] float32."""
    return torch.ops.quantized.linear_dynamic(x, packed, True)
