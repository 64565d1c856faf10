"""The device kernel tests run on, the one tolerance table, and the comparison that reads it.

With a CUDA device the kernels compile and run on it; without one, Triton's interpreter runs
them on the CPU through NumPy. Triton picks interpreter or compiler when a kernel is
defined, i.e. once per process, so TRITON_INTERPRET is set on import of this module, which
the folder's conftest imports before any test module.

Outputs are compared with a float64 reference computed from the same (rounded) inputs, so
what is left is the kernel's own arithmetic: float32 dots in IEEE mode (no tf32); fp16/bf16
attention rounds its probabilities to the input dtype before P @ V and its output on the way
out; the head accumulates in float32 whatever the input dtype.
"""

from __future__ import annotations

import os

import torch

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"
DEVICE = "cuda" if ON_GPU else "cpu"
# The interpreter's bf16 tl.dot is wrong: bf16 is tested on GPUs only.
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if ON_GPU else [])

# (op, dtype) -> (atol, rtol)
TOLERANCES = {
    ("span_attention", torch.float32): (1e-5, 1e-5),
    ("span_attention", torch.float16): (2e-3, 2e-3),
    ("span_attention", torch.bfloat16): (2e-2, 2e-2),
    ("head_confidence", torch.float32): (2e-5, 1e-4),
    ("head_confidence", torch.float16): (1e-4, 1e-4),
    ("head_confidence", torch.bfloat16): (1e-4, 1e-4),
}
# Logit gap under which two ids count as tied when the kernel and reference pick differently.
TIE_GAP = 1e-4


def assert_close(out: torch.Tensor, ref: torch.Tensor, op: str, dtype: torch.dtype, what: str = "") -> None:
    atol, rtol = TOLERANCES[(op, dtype)]
    assert not out.isnan().any(), f"{op} {what}: NaN (an unwritten or broken element)"
    torch.testing.assert_close(out.double().cpu(), ref.double().cpu(), atol=atol, rtol=rtol,
                               msg=lambda m: f"{op} {what} {dtype}: {m}")
