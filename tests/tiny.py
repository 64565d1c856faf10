"""Tiny checkpoints built inside the tests, in every family's real on-disk format.

A byte-level BPE tokenizer trained on a few hundred lines of Python, and random-weight
models written by transformers' own save_pretrained (Qwen2/LLaMA), renamed to LLaDA's
names, or saved by redraft's checkpoint writer. Nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

# The model shape of the training tests' tiny runs (engine/training/train.py --shape).
TRAIN_SHAPE = json.dumps(dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=16))

SPECIALS = ["<|endoftext|>", "<|mask|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]

CORPUS = '''
def add(a, b):
    return a + b


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def norm(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5


for i in range(10):
    print(i, add(i, i))

items = [1, 2, 3]
total = sum(items)
name = "héllo wörld ✓"
\tindented_with_tab = True
'''


def make_tokenizer(folder: Path, vocab_size: int = 400) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS] * 20, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>"}))


def vocab(folder: Path) -> int:
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size()


def token_id(folder: Path, token: str) -> int:
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(folder / "tokenizer.json")).token_to_id(token)


def hf_config(kind: str, V: int, **kw):
    from transformers import LlamaConfig, Qwen2Config
    base = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6)
    base.update(kw)
    return Qwen2Config(**base) if kind == "qwen2" else LlamaConfig(**base)


def hf_model(kind: str, V: int, seed: int = 0, **kw):
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM
    torch.manual_seed(seed)
    cls = Qwen2ForCausalLM if kind == "qwen2" else LlamaForCausalLM
    model = cls(hf_config(kind, V, **kw)).eval()
    with torch.no_grad():  # random biases, so a dropped bias would show
        for name, p in model.named_parameters():
            if name.endswith("bias") or "layernorm" in name or "norm.weight" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def make_family(folder: Path, family: str, seed: int = 0) -> Path:
    """A checkpoint folder of `family`: dream | open-dcoder | llada | llama | redraft | redraft-ar."""
    make_tokenizer(folder)
    V = vocab(folder)
    kind = "llama" if family in ("llada", "llama") else "qwen2"
    model = hf_model(kind, V, seed)
    model.save_pretrained(folder)
    cfg = json.loads((folder / "config.json").read_text())
    if family == "dream":
        cfg["model_type"] = "Dream"
        cfg["mask_token_id"] = token_id(folder, "<|mask|>")
        (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    elif family == "llada":
        to_llada(folder, model, cfg)
        return folder
    elif family == "redraft":
        cfg.update(model_type="redraft", attention_pattern="context_causal", shifted=False, attention_bias=True,
                   layout=["extra", "suffix", "prefix", "span"],
                   segment_tokens={"suffix": "<|fim_suffix|>", "prefix": "<|fim_prefix|>"})
    elif family == "redraft-ar":
        cfg.update(model_type="redraft", attention_pattern="causal", shifted=True, attention_bias=True,
                   layout=["extra", "prefix", "suffix", "span"],
                   segment_tokens={"prefix": "<|fim_prefix|>", "suffix": "<|fim_suffix|>",
                                   "span": "<|fim_middle|>"})
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def to_llada(folder: Path, model, cfg: dict) -> None:
    """Rewrite a Llama checkpoint with LLaDA's config keys and OLMo-style tensor names."""
    from safetensors.torch import save_file
    rename = {
        "model.embed_tokens.weight": "model.transformer.wte.weight",
        "model.norm.weight": "model.transformer.ln_f.weight",
        "lm_head.weight": "model.transformer.ff_out.weight",
    }
    layer = {"self_attn.q_proj": "q_proj", "self_attn.k_proj": "k_proj", "self_attn.v_proj": "v_proj",
             "self_attn.o_proj": "attn_out", "mlp.gate_proj": "ff_proj", "mlp.up_proj": "up_proj",
             "mlp.down_proj": "ff_out", "input_layernorm": "attn_norm", "post_attention_layernorm": "ff_norm"}
    state = {}
    for name, t in model.state_dict().items():
        if name in rename:
            new = rename[name]
        else:
            _, _, i, rest = name.split(".", 3)
            sub, leaf = rest.rsplit(".", 1)
            new = f"model.transformer.blocks.{i}.{layer[sub]}.{leaf}"
        state[new] = t.contiguous()
    for f in folder.glob("*.safetensors"):
        f.unlink()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    llada = {"model_type": "llada", "architectures": ["LLaDAModelLM"], "d_model": cfg["hidden_size"],
             "n_heads": cfg["num_attention_heads"], "n_kv_heads": cfg["num_key_value_heads"],
             "n_layers": cfg["num_hidden_layers"], "mlp_hidden_size": cfg["intermediate_size"],
             "vocab_size": cfg["vocab_size"], "embedding_size": cfg["vocab_size"], "rope": True,
             "rope_theta": 10000.0, "rms_norm_eps": cfg["rms_norm_eps"], "block_type": "llama",
             "activation_type": "silu", "layer_norm_type": "rms", "weight_tying": False,
             "include_bias": False, "max_sequence_length": 512, "mask_token_id": token_id(folder, "<|mask|>")}
    (folder / "config.json").write_text(json.dumps(llada))
