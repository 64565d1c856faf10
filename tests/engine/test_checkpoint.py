"""Every family loads from a folder saved here; bad folders raise typed errors that say why."""

import json
import struct

import pytest
import torch

import tiny
from safetensors.torch import load_file, save_file

from redraft.engine import (CheckpointError, CorruptFileError, Engine, EngineError, InsufficientMemoryError,
                            InvalidConfigError, MissingFileError, ModelNotFoundError, NoMaskTokenError,
                            NonFiniteWeightError, ShapeMismatchError, UnknownModelTypeError)
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
    # the tiny vocabulary is too small for Dream's real id: refused by name, which shows the default was taken
    from redraft.engine.checkpoint import read_config
    from redraft.engine.tokenizer import Tokenizer
    with pytest.raises(InvalidConfigError, match=r"mask_token_id=151666 is outside the vocabulary \(0\.\.368\)"):
        read_config(folder, Tokenizer.from_folder(folder))
    cfg["vocab_size"] = 151667
    (folder / "config.json").write_text(json.dumps(cfg))
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
    """A consistent checkpoint (a sparse safetensors file holding every tensor its config implies)
    of ~69G parameters: ~275 GB in float32, more than any test machine has; refused from the
    sizes alone, before a file is mapped."""
    import crafted
    from redraft.engine.checkpoint import read_config
    from redraft.engine.tokenizer import Tokenizer
    from redraft.engine.weights import expected_shapes
    folder = tiny.make_family(tmp_path, "redraft")
    _edit_config(folder, vocab_size=1 << 20, hidden_size=1 << 15, num_attention_heads=32, num_key_value_heads=8,
                 intermediate_size=64, num_hidden_layers=1)
    cfg = read_config(folder, Tokenizer.from_folder(folder))
    crafted.write_safetensors(_weights(folder), {k: ("BF16", list(v), None) for k, v in expected_shapes(cfg).items()})
    assert _weights(folder).stat().st_size > 128 << 30
    with pytest.raises(InsufficientMemoryError, match=r"weights need 2\d\d\.\d GiB in float32 but cpu has"):
        Engine.load(folder, dtype="float32")


def test_unknown_names(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no checkpoint folder"):
        resolve("no-such-model")
    with pytest.raises(ModelNotFoundError, match="not downloaded"):
        resolve("nobody/nothing-here")


# -- damaged files: every one a CheckpointError that names the file and the problem --------


def _weights(folder):
    return folder / "model.safetensors"


def _edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(cfg | changes))


@pytest.mark.parametrize("keep", [0, 5, 100, 0.5, -1])
def test_truncated_weights(tmp_path, keep):
    """Cut anywhere: inside the size field, the header, the tensors (a half-copied download)."""
    folder = tiny.make_family(tmp_path, "redraft")
    f = _weights(folder)
    data = f.read_bytes()
    f.write_bytes(data[:int(len(data) * keep) if isinstance(keep, float) else keep if keep >= 0 else len(data) - 1])
    with pytest.raises(CorruptFileError, match=r"model\.safetensors: truncated"):
        Engine.load(folder)


def test_weights_that_are_not_safetensors(tmp_path):
    folder = tiny.make_family(tmp_path, "redraft")
    _weights(folder).write_bytes(b"<html>404 Not Found</html>" * 100)  # what a failed download leaves
    with pytest.raises(CorruptFileError, match="not a safetensors file"):
        Engine.load(folder)
    header = b"[1, 2, 3]"  # a well-formed size and JSON, but not a table of tensors
    _weights(folder).write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(CorruptFileError, match="not a safetensors file"):
        Engine.load(folder)
    data = _weights(tiny.make_family(tmp_path / "again", "redraft")).read_bytes()
    _weights(folder).write_bytes(data + b"\0" * 16)
    with pytest.raises(CorruptFileError, match="16 bytes after its last tensor"):
        Engine.load(folder)


def test_a_bad_shard_index(tmp_path):
    folder = tiny.make_family(tmp_path, "redraft")
    (folder / "model.safetensors.index.json").write_text('{"metadata": {}}')
    with pytest.raises(CorruptFileError, match="weight_map"):
        Engine.load(folder)


@pytest.mark.parametrize("value,says", [(float("nan"), "holds 2 NaN and 0 Inf"), (float("inf"), "holds 0 NaN and 2 Inf"),
                                        (float("-inf"), "holds 0 NaN and 2 Inf")])
def test_non_finite_weights_name_the_tensor(tmp_path, value, says):
    folder = tiny.make_family(tmp_path, "redraft")
    state = load_file(_weights(folder))
    state["model.layers.1.self_attn.k_proj.weight"][0, :2] = value
    save_file(state, _weights(folder), metadata={"format": "pt"})
    with pytest.raises(NonFiniteWeightError, match=rf"model\.layers\.1\.self_attn\.k_proj\.weight {says}"):
        Engine.load(folder, dtype="float32")


def test_weights_that_overflow_the_chosen_dtype(tmp_path):
    folder = tiny.make_family(tmp_path, "redraft")
    state = {k: v.float() for k, v in load_file(_weights(folder)).items()}
    state["model.norm.weight"][0] = 1e6  # finite in float32 and bfloat16, Inf in float16
    save_file(state, _weights(folder), metadata={"format": "pt"})
    assert Engine.load(folder, dtype="bfloat16").model_config.family == "redraft"
    with pytest.raises(NonFiniteWeightError, match=r"model\.norm\.weight overflows to Inf in float16"):
        Engine.load(folder, dtype="float16")


def test_a_tokenizer_that_cannot_be_read(tmp_path):
    folder = tiny.make_family(tmp_path, "redraft")
    (folder / "tokenizer.json").write_text('{"version": "1.0", "truncat')
    with pytest.raises(CorruptFileError, match="tokenizer.json: not a tokenizer"):
        Engine.load(folder)
    folder = tiny.make_family(tmp_path / "config", "redraft")
    (folder / "tokenizer_config.json").write_text("mask_token: <|mask|>")
    with pytest.raises(CorruptFileError, match="tokenizer_config.json: not valid JSON"):
        Engine.load(folder)


@pytest.mark.parametrize("text,says", [
    ('{"model_type": "redraft",', "not valid JSON"),
    ("[1, 2]", "must hold a JSON object"),
])
def test_config_that_is_not_an_object(tmp_path, text, says):
    folder = tiny.make_family(tmp_path, "redraft")
    (folder / "config.json").write_text(text)
    with pytest.raises(InvalidConfigError, match=says):
        Engine.load(folder)


@pytest.mark.parametrize("changes,says", [
    ({"num_hidden_layers": "two"}, "wrong type"),
    ({"num_attention_heads": 0}, "wrong type or range"),
    ({"num_key_value_heads": -2}, "num_key_value_heads=-2 must be positive"),
    ({"rope_scaling": [1, 2]}, "wrong type"),
    ({"segment_tokens": ["<|fim_prefix|>"]}, "wrong type"),
    ({"hidden_size": None}, "lacks 'hidden_size'"),
    ({"redraft_sampler": {"no_such_knob": 1}}, "redraft_sampler"),
    ({"redraft_sampler": "fast"}, "redraft_sampler must be an object"),
    ({"redraft_sampler": {"span_window": "yes"}}, "span_window must be true or false"),
    ({"redraft_sampler": {"window_lookup": "yes"}}, "window_lookup must be true or false"),
    ({"redraft_sampler": {"window_refresh": -1}}, "window_refresh=-1 must be a whole number"),
    ({"redraft_sampler": {"self_draft": 1}}, "self_draft must be true or false"),
    ({"redraft_sampler": {"draft_block": 2000}}, "draft_block=2000 must be a whole number"),
    ({"redraft_sampler": {"draft_block": 100}}, "draft_block must be 0 \\(the model's block\\) or 1..64"),
])
def test_config_values_of_the_wrong_type(tmp_path, changes, says):
    folder = tiny.make_family(tmp_path, "redraft")
    _edit_config(folder, **changes)
    with pytest.raises(InvalidConfigError, match=says):
        Engine.load(folder)


def test_every_checkpoint_error_is_an_engine_error():
    for cls in (CorruptFileError, InvalidConfigError, NonFiniteWeightError, MissingFileError, ShapeMismatchError,
                UnknownModelTypeError, NoMaskTokenError, ModelNotFoundError):
        assert issubclass(cls, CheckpointError) and issubclass(cls, EngineError)


# -- the bounds on config.json leave room for every real family -------------------------------

REAL_CONFIGS = {  # config.json as published (the keys the loader reads), and the parameters it implies
    "Dream-v0-Base-7B / DiffuCoder-7B": (dict(
        model_type="Dream", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
        num_key_value_heads=4, vocab_size=152064, max_position_embeddings=131072, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False, rope_scaling=None, mask_token_id=151666,
        pad_token_id=151643, bos_token_id=151643, eos_token_id=151643), 7.6e9),
    "LLaDA-8B-Base": (dict(
        model_type="llada", d_model=4096, n_heads=32, n_kv_heads=32, n_layers=32, mlp_hidden_size=12288,
        vocab_size=126464, embedding_size=126464, max_sequence_length=4096, rope_theta=500000.0, rms_norm_eps=1e-5,
        mask_token_id=126336, eos_token_id=126081, pad_token_id=126081, weight_tying=False, block_type="llama",
        activation_type="silu", layer_norm_type="rms", include_bias=False, include_qkv_bias=False), 8.0e9),
    "Open-dCoder-0.5B": (dict(
        model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, mask_token_id=151665, eos_token_id=151643), 0.49e9),
    "LLaMA-3.1-8B layout, llama3 rope": (dict(
        model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
        rms_norm_eps=1e-5, mask_token_id=128255, rope_scaling=dict(
            rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=8192)), 8.0e9),
}


@pytest.mark.parametrize("name", list(REAL_CONFIGS))
def test_real_families_fit_the_bounds(tmp_path, name):
    from redraft.engine.checkpoint import read_config
    from redraft.engine.weights import parameter_count
    raw, parameters = REAL_CONFIGS[name]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    cfg = read_config(tmp_path, None)
    assert cfg.num_hidden_layers == raw.get("num_hidden_layers", raw.get("n_layers"))
    assert abs(parameter_count(cfg) - parameters) < 0.05 * parameters


def test_the_shipped_models_fit_the_bounds():
    from redraft.engine.checkpoint import SHIPPED, SHIPPED_DIR, read_config
    from redraft.engine.tokenizer import Tokenizer
    from redraft.engine.weights import check_tables, read_table, weight_files
    from redraft.engine.folder import Folder
    shipped = [SHIPPED_DIR / n for n in SHIPPED if (SHIPPED_DIR / n / "config.json").is_file()]
    assert shipped
    for folder in shipped:
        cfg = read_config(folder, Tokenizer.from_folder(folder))
        place = Folder(folder)
        tables = {f: read_table(place, f) for f in weight_files(place)}
        assert sum(len(p) for p in check_tables(folder, tables, cfg).values()) > 0
