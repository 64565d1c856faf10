"""Which implementation runs: the Triton launchers or their plain-PyTorch references.

The engine asks `use_triton(device)` once, when it loads, and keeps the answer. Triton runs on
CUDA devices when it is installed; everything else uses the references. `REDRAFT_KERNELS`
overrides the choice for tests and benchmarks: `torch` forces the references, `triton` the
kernels (on a CPU that needs `TRITON_INTERPRET=1`, Triton's NumPy interpreter).

Chooses and imports the kernels; they never import it (what every launcher shares, such as
the launch counters, lives in launch.py). Nothing here imports triton until `ops` loads the
kernel modules.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Callable

import torch

ENV = "REDRAFT_KERNELS"

def triton_installed() -> bool:
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as none
        return False


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def use_triton(device: torch.device | str, choice: str | None = None) -> bool:
    """True when this device should run the Triton kernels. `choice` ('auto', 'torch',
    'triton'; the engine's config) wins over the environment."""
    device = torch.device(device)
    forced = (choice if choice not in (None, "") else os.environ.get(ENV, "")).strip().lower()
    if forced not in ("", "auto", "torch", "triton"):
        raise ValueError(f"{ENV} must be 'torch', 'triton' or 'auto', got {forced!r}")
    if forced == "torch":
        return False
    if forced == "triton":
        if not triton_installed():
            raise RuntimeError(f"{ENV}=triton but triton is not installed (pip install 'redraft[gpu]')")
        if device.type != "cuda" and not interpreting():
            raise RuntimeError(f"{ENV}=triton on a {device.type} device needs TRITON_INTERPRET=1")
        return True
    return device.type == "cuda" and triton_installed()


@dataclass(frozen=True)
class Ops:
    """The implementations one device runs; the kernels and references take the same arguments."""

    span_attention: Callable
    head_confidence: Callable
    triton: bool


def ops(device: torch.device | str, choice: str | None = None) -> Ops:
    """The engine's pick, made once when it loads."""
    from . import head_confidence as hc, span_attention as sa  # imports triton if installed
    fast = use_triton(device, choice)
    return Ops(sa.span_attention if fast else sa.span_attention_ref,
               hc.head_confidence if fast else hc.head_confidence_ref, fast)
