"""What every launcher shares: launch counters, the device's parallelism, output buffers and
the checks on its tensor operands.

A leaf: the kernel modules import it, and so may anything that reads the counters; it
imports nothing of this package and never triton.
"""

from __future__ import annotations

import functools
from collections import Counter

import torch

launches: Counter[str] = Counter()  # launcher calls per op, so a test can tell the kernels really ran


def count(op: str) -> None:
    launches[op] += 1


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def multiprocessors(device: torch.device) -> int:
    """How many programs run at once: the SM count on CUDA; 2 under the interpreter, which
    runs programs one after another, so small grids keep it fast."""
    if device.type == "cuda":
        return _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return 2


def empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every buffer a launcher writes comes from here (tests swap in NaN-filled ones)."""
    return torch.empty(shape, dtype=dtype, device=device)


def check_operands(operands: dict[str, object], dims: int, dtypes: tuple[torch.dtype, ...], last: str) -> None:
    """Each operand is a `dims`-D tensor of one of `dtypes`, contiguous in its last (`last`)
    dimension; ValueError naming the operand otherwise."""
    for name, t in operands.items():
        if not isinstance(t, torch.Tensor) or t.dim() != dims:
            raise ValueError(f"{name} must be a {dims}-D tensor, got {getattr(t, 'shape', type(t))}")
        if t.dtype not in dtypes:
            raise ValueError(f"{name} must be one of {', '.join(str(d)[6:] for d in dtypes)}, got {t.dtype}")
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last {last}")
