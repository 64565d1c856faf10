"""The engine on the Triton backend gives the same tokens as on the PyTorch one, and the
kernels really ran (under TRITON_INTERPRET=1 on a CPU; compiled on a GPU)."""

from __future__ import annotations

import pytest
import torch
from tolerances import DEVICE, ON_GPU

import tiny
from redraft.engine import Engine, EngineConfig, SamplerConfig
from redraft.kernels import backend, launch

pytest.importorskip("triton")

PROMPTS = [("def add(a, b):\n    return ", "\n\n\nclass Point:\n"),
           ("for i in range(", "):\n    print(i)\n")]


@pytest.mark.parametrize("steps", ["off", "on"], ids=["dynamic-step", "static-step"])
@pytest.mark.parametrize("family", ["redraft", "dream"])
def test_same_tokens_on_both_backends(tmp_path, family, steps):
    """With `steps` on, the kernels run inside the static step (captured as a graph on CUDA)."""
    folder = tiny.make_family(tmp_path / family, family)
    dtype = "bfloat16" if ON_GPU else "float32"  # the interpreter's bf16 dot is wrong
    plain = Engine.load(folder, device=DEVICE, dtype=dtype, config=EngineConfig(kernels="torch", step_graphs="off"))
    fast = Engine.load(folder, device=DEVICE, dtype=dtype, config=EngineConfig(kernels="triton", step_graphs=steps))
    assert plain.kernels is None and fast.kernels is not None and fast.kernels.triton
    scfg = SamplerConfig(span=5, heal=False)  # greedy, no healing constraint: the fused head runs
    before = dict(launch.launches)
    for prefix, suffix in PROMPTS:
        a = plain.infill(prefix, suffix, sampler=scfg)
        b = fast.infill(prefix, suffix, sampler=scfg)
        assert a.token_ids == b.token_ids, (prefix, a.text, b.text)
    for op in ("span_attention", "head_confidence"):
        assert launch.launches[op] > before.get(op, 0), op
    if steps == "on":
        assert sum(s.runs for s in fast.steps._steps.values()) > 0


def test_auto_picks_torch_on_a_cpu():
    if ON_GPU:
        pytest.skip("a GPU is here")
    assert not backend.use_triton(torch.device("cpu"), "auto")
