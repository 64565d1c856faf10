"""Int8 linears (engine/int8.py) against float32: the matmul, the shipped model's predictions,
repacking after a weight changes, and where int8 may and may not run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from redraft.engine import Engine, int8
from redraft.engine.cache import KVCache
from redraft.server.core.settings import parse

pytestmark = pytest.mark.skipif(not int8.available(), reason="this torch has no x86 int8 kernels")

CODE = (Path(__file__).resolve().parents[2] / "server" / "core" / "history.py").read_text()[:3000]


@pytest.mark.parametrize("shape", [(1, 256), (18, 256), (2, 9, 768)])
def test_linear_is_within_int8_error_of_float(shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    w = torch.randn(512, shape[-1], generator=g) * torch.linspace(0.01, 3.0, 512)[:, None]  # rows of all sizes
    b = torch.randn(512, generator=g)
    want = x @ w.t() + b
    with torch.inference_mode():
        got = int8.linear(x, int8.pack(w, b))
    assert got.shape == want.shape
    assert (got - want).norm() / want.norm() < 0.03
    # Per output channel, against the size of its terms: small rows are as exact as large ones.
    err = (got - want).reshape(-1, 512).abs().amax(0)
    terms = x.reshape(-1, shape[-1]).abs().amax() * w.abs().sum(1)
    assert (err / terms).max() < 0.01


@pytest.mark.parametrize("rows", [2, 5, 17, 64])
def test_rows_alone_gives_each_row_its_one_row_result_bit_for_bit(rows):
    """The causal models' packing: a row's result does not depend on the rows beside it, even
    rows a thousand times larger or all zero; and it stays within int8 error of float."""
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 256, generator=g) * torch.logspace(-2, 1, rows)[:, None]
    x[rows // 2] = 0.0
    w, b = torch.randn(384, 256, generator=g), torch.randn(384, generator=g)
    packed = int8.pack(w, b, rows_alone=True)
    with torch.inference_mode():
        together = int8.linear(x, packed)
        alone = torch.cat([int8.linear(x[i:i + 1], packed) for i in range(rows)])
        batched = int8.linear(x.reshape(1, rows, 256), packed)
    assert torch.equal(together, alone) and torch.equal(batched[0], together)
    assert torch.equal(together[rows // 2], b)
    want = x @ w.t() + b
    err = (together - want).norm(dim=1) / (x @ w.t()).norm(dim=1).clamp_min(1e-6)
    assert err[torch.arange(rows) != rows // 2].max() < 0.03


def test_only_causal_models_quantize_rows_alone():
    assert Engine.load("redraft-ar", dtype="int8").model.int8 == "rows"
    assert Engine.load(dtype="int8").model.int8 is True


@pytest.fixture(scope="module")
def pair():
    return Engine.load(dtype="float32"), Engine.load(dtype="int8")


def hidden_and_logits(engine: Engine, ids: torch.Tensor):
    m, cfg = engine.model, engine.model_config
    kv = KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, ids.shape[1], cfg.head_dim, torch.float32, "cpu")
    with torch.inference_mode():
        h = m(ids, torch.arange(ids.shape[1])[None], kv, start=0, causal=True)
        return h, m.logits(h)


def test_the_shipped_model_predicts_as_in_float32(pair):
    fp32, q8 = pair
    assert (fp32.info().dtype, q8.info().dtype) == ("float32", "int8")
    ids = torch.tensor([fp32.tokenizer.encode(CODE)[:400]])
    _, want = hidden_and_logits(fp32, ids)
    _, got = hidden_and_logits(q8, ids)
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    assert agree >= 0.9, agree
    # Where float32 is sure (p >= 0.5), int8 picks the same token nearly always.
    p = torch.softmax(want, -1).amax(-1)
    sure = p >= 0.5
    assert sure.sum() > 50
    assert (got.argmax(-1) == want.argmax(-1))[sure].float().mean().item() >= 0.98


def test_a_changed_weight_is_packed_again(pair):
    _, q8 = pair
    ids = torch.tensor([q8.tokenizer.encode("def add(a, b):\n    return a + b\n")])
    h0, l0 = hidden_and_logits(q8, ids)
    w = q8.model.model.layers[0].mlp.down_proj.weight
    with torch.no_grad():
        w.mul_(2.0)  # in place: the cached int8 copy is stale
    try:
        h1, _ = hidden_and_logits(q8, ids)
        assert not torch.allclose(h0, h1, atol=1e-3)
    finally:
        with torch.no_grad():
            w.div_(2.0)
    h2, l2 = hidden_and_logits(q8, ids)
    assert torch.allclose(h0, h2, atol=1e-4) and torch.equal(l0.argmax(-1), l2.argmax(-1))


def test_training_and_autograd_keep_float32(pair):
    _, q8 = pair
    m = q8.model
    ids = torch.tensor([q8.tokenizer.encode("x = 1\n")])
    h = m(ids, torch.arange(ids.shape[1])[None], causal=True)  # no inference mode: the float path
    m.logits(h).sum().backward()
    assert m.model.layers[0].mlp.down_proj.weight.grad is not None
    m.zero_grad(set_to_none=True)


def test_int8_is_a_cpu_choice_and_a_setting():
    with pytest.raises(ValueError, match="CPU only"):
        Engine.load(dtype="int8", device="cuda")
    config, problems = parse({"dtype": "int8"})
    assert config.dtype == "int8" and not problems
    config, problems = parse({"dtype": "int4"})
    assert config.dtype == "auto" and problems


def test_an_explicit_int8_says_why_it_cannot_run(monkeypatch):
    monkeypatch.setattr(int8, "unavailable", lambda: "int8 linears failed here (AttributeError: gone)")
    engine = Engine.load(dtype="float32")
    with pytest.raises(RuntimeError, match="AttributeError: gone"):
        engine.model.use_int8()
    assert not engine.model.int8 and engine.info().dtype == "float32"
