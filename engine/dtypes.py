"""Whether a device can run the model at all, and which dtype it runs in when asked for
"auto" (measured once per process).

Knows nothing of models or requests: torch's build and a few small matrix products decide.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Callable

import torch

from . import int8
from .errors import DeviceUnavailableError


def check_device(device: str | torch.device) -> torch.device:
    """The device, or DeviceUnavailableError saying why this torch cannot run on it: checked
    before anything touches it, since torch's own failure there (a CPU build asked for CUDA)
    is an AssertionError from deep inside its lazy CUDA set-up."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise DeviceUnavailableError(f"unknown device {str(device)!r} (cpu, cuda, cuda:N or mps)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            build = torch.version.cuda or getattr(torch.version, "hip", None)
            why = (f"this torch ({torch.__version__}) is a CPU build" if not build
                   else f"torch ({torch.__version__}) sees no GPU")
            raise DeviceUnavailableError(f"device {str(device)!r} is not available: {why}; use the CPU (device cpu)"
                                         + ("" if build else " or install a CUDA build of torch"))
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise DeviceUnavailableError(f"device {str(device)!r} is not available: this machine has {count} "
                                         f"GPU{'s' if count != 1 else ''} (cuda:0..cuda:{count - 1})")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise DeviceUnavailableError(f"device {str(device)!r} is not available (no Apple GPU here); use the CPU")
    return dev


@functools.cache
def auto_dtype(device: str) -> str:
    """bfloat16 where it is fast; on other CPUs int8 linears where they are faster than
    float32 (x86), else float32.

    GPUs and CPUs with native bf16 arithmetic (AVX512-BF16, AMX, recent Arm) run the model
    faster in bf16, but CPUs without it (AVX2-only x86 such as many AMD EPYC/Ryzen and older
    Intel parts) emulate bf16 matmuls some 50x slower than fp32 (0.6 vs 33 GFLOP/s measured on
    an AVX2 EPYC). No flag torch reports says which, so small matmuls decide (once per
    process, a few ms). On those CPUs a denoising step reads every weight for a few dozen
    rows, and int8 weights (int8.py) made it ~2x faster on the AVX2 EPYC."""
    if torch.device(device).type != "cpu":
        return "bfloat16"
    times, threads = {}, torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: a busy machine stalls a parallel matmul, not a serial one
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(64, 256, dtype=dtype), torch.randn(256, 256, dtype=dtype)
        times[dtype] = _fastest(lambda: a @ b)
    if times[torch.bfloat16] < times[torch.float32]:
        torch.set_num_threads(threads)
        return "bfloat16"
    choice = "float32"
    if int8.available():  # a step's shape: a few rows through a weight larger than the caches
        x, w = torch.randn(16, 256), torch.randn(4096, 256)
        packed = int8.pack(w)
        with torch.inference_mode():
            if _fastest(lambda: int8.linear(x, packed)) < _fastest(lambda: x @ w.t()):
                choice = "int8"
    torch.set_num_threads(threads)
    return choice


def _fastest(call: Callable[[], object]) -> float:
    """Seconds of the fastest of four calls, after one untimed: other processes only ever
    slow one down, and the first pays kernel selection and the thread pool."""
    call()
    best = math.inf
    for _ in range(4):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best
