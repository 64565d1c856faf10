"""Kernel tests: each Triton launcher against its reference, on the device at hand.

Importing `tolerances` first picks the device and, without a GPU, sets TRITON_INTERPRET
before any test module imports a kernel. Every module skips itself when triton is not
installed.
"""

from __future__ import annotations

import pytest
import torch
from tolerances import DEVICE, ON_GPU


@pytest.fixture(params=[DEVICE], ids=["cuda" if ON_GPU else "interpreter"])
def device(request) -> str:
    return request.param


@pytest.fixture
def poison(monkeypatch):
    """Launcher buffers start as NaN (floats) or a sentinel (ints), so unwritten elements show."""
    from redraft.kernels import launch

    def empty(shape, dtype, device):
        fill = float("nan") if dtype.is_floating_point else -7
        return torch.full(shape, fill, dtype=dtype, device=device)

    monkeypatch.setattr(launch, "empty", empty)
