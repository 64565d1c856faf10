"""redraft.kernels: Triton GPU kernels for masked-diffusion decoding, each beside its
plain-PyTorch reference.

- span_attention: a denoising step's span queries (A <= 128) over the cached context plus
  the span, grouped-query, non-causal, split over the keys flash-decoding style.
- head_confidence: output head fused with the greedy choice and its confidence (max
  probability, margin, exp(-entropy), log-probability) without writing the logits.
- backend: whether a device runs the kernels or the references (`backend.ops(device)`
  hands the engine one or the other); it imports the kernels, never the other way round.
- launch: what every launcher shares (launch counters, the device's parallelism, output
  buffers, operand checks); a leaf that the kernels import.

Tensors in, tensors out; knows nothing of models, checkpoints or the engine. Importing this
package never imports triton (the engine loads on machines without it): the op modules load
on first use (`redraft.kernels.span_attention.span_attention_ref`), and each one's `*_ref`
works without triton. Triton is the optional `gpu` extra; on a CPU, `TRITON_INTERPRET=1`
runs the kernels through Triton's interpreter (tests).
"""

from __future__ import annotations

import importlib

from . import backend, launch

_OPS = ("span_attention", "head_confidence")

__all__ = ["available", "backend", "launch", *_OPS]


def available() -> bool:
    """True when the Triton kernels can run here: triton installed and a CUDA device present,
    or TRITON_INTERPRET=1 (Triton's CPU interpreter)."""
    if not backend.triton_installed():
        return False
    if backend.interpreting():
        return True
    import torch
    return torch.cuda.is_available()


def __getattr__(name: str):
    # PEP 562: `redraft.kernels.span_attention` (the module: launcher, reference, kernel)
    # is imported, and triton with it, only when first asked for.
    if name in _OPS:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OPS))
