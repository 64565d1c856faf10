"""Every family loads from a folder saved here; bad folders raise typed errors that say why."""

import json
import struct

import pytest
import torch

import tiny
from redraft.engine import (Engine, InsufficientMemoryError, MissingFileError, ModelNotFoundError,
                            NoMaskTokenError, ShapeMismatchError, UnknownModelTypeError)
from redraft.engine.checkpoint import resolve

FAMILIES = {
    "dream": dict(shifted=True, attention="full"),
    "open-dcoder": dict(shifted=True, attention="full"),
    "llada": dict(shifted=False, attention="full"),
    "llama": dict(shifted=False, attention="full"),
    "redraft": dict(shifted=False, attention="context_causal"),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_loads_with_its_conventions(tmp_path, family):
    folder = tiny.make_family(tmp_path / family, family)
    engine = Engine.load(folder, dtype="float32")
    cfg = engine.model_config
    assert cfg.family == family
    assert cfg.shifted == FAMILIES[family]["shifted"]
    assert cfg.attention == FAMILIES[family]["attention"]
    assert cfg.mask_token_id == tiny.token_id(folder, "<|mask|>")
    assert tiny.token_id(folder, "<|endoftext|>") in cfg.end_token_ids
    out = engine.infill("def add(a, b):\n    return ", "\n", sampler=engine.config.sampler.with_(span=6))
    assert out.stats.forwards >= 1 and len(out.token_ids) <= 6


def test_llada_names_give_the_llama_logits(tmp_path):
    llama = Engine.load(tiny.make_family(tmp_path / "llama", "llama", seed=3), dtype="float32").model
    llada = Engine.load(tiny.make_family(tmp_path / "llada", "llada", seed=3), dtype="float32").model
    ids = torch.randint(0, llama.config.vocab_size, (1, 10))
    pos = torch.arange(10)[None]
    assert torch.allclose(llama.logits(llama(ids, pos)), llada.logits(llada(ids, pos)), atol=1e-5)


def test_dream_mask_falls_back_to_the_family_default(tmp_path):
    folder = tiny.make_family(tmp_path, "dream")
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["mask_token_id"]
    (folder / "config.json").write_text(json.dumps(cfg))
    # the tiny vocabulary is too small for Dream's real id, which shows the default was taken
    from redraft.engine.checkpoint import read_config
    from redraft.engine.tokenizer import Tokenizer
    assert read_config(folder, Tokenizer.from_folder(folder)).mask_token_id == 151666


def test_tied_embeddings_load_without_lm_head(tmp_path):
    tiny.make_tokenizer(tmp_path)
    model = tiny.hf_model("llama", tiny.vocab(tmp_path), tie_word_embeddings=True)
    model.save_pretrained(tmp_path)
    engine = Engine.load(tmp_path, dtype="float32")
    assert engine.model.lm_head.weight.data_ptr() == engine.model.model.embed_tokens.weight.data_ptr()
    ids = torch.arange(8)[None]
    want = model(ids, attention_mask=torch.zeros(1, 1, 8, 8)).logits
    assert torch.allclose(engine.model.logits(engine.model(ids, ids)), want, atol=1e-4)


def test_missing_config(tmp_path):
    with pytest.raises(MissingFileError, match="config.json"):
        Engine.load(tmp_path)


def test_missing_weights_and_pickles_refused(tmp_path):
    folder = tiny.make_family(tmp_path, "dream")
    for f in folder.glob("*.safetensors"):
        f.unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(MissingFileError, match="pickled weights are never loaded"):
        Engine.load(folder)


def test_missing_tokenizer(tmp_path):
    folder = tiny.make_family(tmp_path, "dream")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(MissingFileError, match="tokenizer.json"):
        Engine.load(folder)


def test_unknown_model_type(tmp_path):
    folder = tiny.make_family(tmp_path, "dream")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "mamba"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnknownModelTypeError, match="mamba"):
        Engine.load(folder)


def test_shape_mismatch_names_the_tensor(tmp_path):
    folder = tiny.make_family(tmp_path, "dream")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ShapeMismatchError, match="mlp"):
        Engine.load(folder)


def test_no_mask_token(tmp_path):
    folder = tiny.make_family(tmp_path, "open-dcoder")
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    with pytest.raises(NoMaskTokenError):
        Engine.load(folder)


def test_not_enough_memory(tmp_path):
    """A real (sparse) safetensors file declaring 32 GiB of weights, more than this machine has."""
    folder = tiny.make_family(tmp_path, "dream")
    for f in folder.glob("*.safetensors"):
        f.unlink()
    n = 1_000_000 * 8192 * 4
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "F32", "shape": [1_000_000, 8192],
                                                       "data_offsets": [0, n]}}).encode()
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + n)
    with pytest.raises(InsufficientMemoryError, match="GiB"):
        Engine.load(folder, dtype="float32")


def test_unknown_names(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no checkpoint folder"):
        resolve("no-such-model")
    with pytest.raises(ModelNotFoundError, match="not downloaded"):
        resolve("nobody/nothing-here")
