"""Logits parity of the one model with transformers' Qwen2 and LLaMA, both attention modes."""

import pytest
import torch

import tiny
from redraft.engine.checkpoint import load_model, read_config
from redraft.engine.cache import KVCache
from redraft.engine.tokenizer import Tokenizer

ATOL = 1e-4


def ours(folder):
    cfg = read_config(folder, Tokenizer.from_folder(folder))
    return load_model(folder, cfg, torch.device("cpu"), torch.float32)


@pytest.fixture(params=["qwen2", "llama"])
def pair(request, tmp_path):
    kind = request.param
    tiny.make_tokenizer(tmp_path)
    V = tiny.vocab(tmp_path)
    ref = tiny.hf_model(kind, V, seed=1)
    ref.save_pretrained(tmp_path)
    # The tokenizer declares <|mask|>: all the loader needs to accept a plain qwen2/llama folder as a diffusion model.
    return ref, ours(tmp_path), V


def test_bidirectional_matches_transformers_with_zero_mask(pair):
    ref, model, V = pair
    ids = torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(11).expand(2, 11)
    want = ref(ids, attention_mask=torch.zeros(2, 1, 11, 11)).logits
    got = model.logits(model(ids, pos))
    assert torch.allclose(got, want, atol=ATOL), (got - want).abs().max()


def test_causal_matches_transformers_default(pair):
    ref, model, V = pair
    ids = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(9).expand(2, 9)
    want = ref(ids).logits
    got = model.logits(model(ids, pos, causal=True))
    assert torch.allclose(got, want, atol=ATOL), (got - want).abs().max()
    # and the two modes really differ, so the flag is not ignored
    assert not torch.allclose(model.logits(model(ids, pos)), want, atol=ATOL)


def test_cached_chunks_equal_one_causal_pass(pair):
    ref, model, V = pair
    cfg = model.config
    ids = torch.randint(0, V, (1, 12), generator=torch.Generator().manual_seed(2))
    pos = torch.arange(12)[None]
    whole = model(ids, pos, causal=True)
    kv = KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, 16, cfg.head_dim, torch.float32, "cpu")
    a = model(ids[:, :7], pos[:, :7], kv, start=0, causal=True)
    b = model(ids[:, 7:10], pos[:, 7:10], kv, start=7, causal=True)
    c = model(ids[:, 10:], pos[:, 10:], kv, start=10, causal=True)
    assert torch.allclose(torch.cat([a, b, c], 1), whole, atol=ATOL)


def test_padding_keys_do_not_leak(pair):
    _, model, V = pair
    ids = torch.randint(0, V, (1, 6), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(6)[None]
    alone = model(ids, pos)
    padded_ids = torch.cat([ids, torch.randint(0, V, (1, 3))], 1)
    padded_pos = torch.arange(9)[None]
    valid = torch.tensor([[True] * 6 + [False] * 3])
    got = model(padded_ids, padded_pos, key_valid=valid)[:, :6]
    assert torch.allclose(got, alone, atol=ATOL)


def test_fused_inference_projections_match_and_follow_weight_changes(pair):
    """On CPU, inference reads q/k/v and gate/up as one matrix each: same outputs, and an
    in-place weight change (training) is seen by the next inference call."""
    _, ours, V = pair
    ids = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(ids.shape[1]).unsqueeze(0).expand(2, -1)
    with torch.no_grad():
        plain = ours(ids, pos)
    with torch.inference_mode():
        fused = ours(ids, pos)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
    layer = ours.model.layers[0]
    with torch.no_grad():
        layer.self_attn.k_proj.weight.mul_(0.5)
        layer.mlp.up_proj.weight.add_(0.01)
        changed = ours(ids, pos)
    with torch.inference_mode():
        fused = ours(ids, pos)
    torch.testing.assert_close(fused, changed, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(changed, plain)
