"""A training run's state on disk: the model as a redraft-format checkpoint plus the optimizers'
tensors (safetensors, no pickles) and the log, written so that a run killed at any moment
resumes from its last complete save.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..checkpoint import save_checkpoint
from ..prompt import END, LAYOUT, MASK, SEGMENT_TOKENS


def model_config(shape: dict, tokenizer, *, causal: bool) -> dict:
    """config.json for a redraft-format checkpoint of the given shape."""
    tid = tokenizer.token_to_id
    return {
        "model_type": "redraft",
        "architectures": ["RedraftForMaskedDiffusion" if not causal else "RedraftForCausalLM"],
        **shape,
        "attention_bias": False,
        "tie_word_embeddings": True,
        "shifted": True,
        "attention_pattern": "causal" if causal else "context_causal",
        "layout": LAYOUT,
        "segment_tokens": SEGMENT_TOKENS,
        "mask_token_id": tid(MASK),
        "pad_token_id": tid(END),
        "eos_token_id": tid(END),
        "bos_token_id": tid(END),
    }


def save_state(folder: Path, model, opt, step: int, log: list, meta: dict, tok_dir: Path) -> None:
    """A resumable checkpoint: a redraft-format model folder plus optimizer tensors.

    Tensors are named `optimizer.param.name` ("1.3.exp_avg"), one param_groups list per optimizer.
    Written beside `folder` and swapped in by renames, so a run killed while saving keeps its
    previous state (restore_state puts it back).
    """
    tmp, old = folder.with_name(folder.name + ".tmp"), folder.with_name(folder.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    _write_state(tmp, model, opt, step, log, meta, tok_dir)
    if folder.exists():
        shutil.rmtree(old, ignore_errors=True)
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def restore_state(folder: Path) -> None:
    """Put back the previous state of a run killed between save_state's two renames."""
    old = folder.with_name(folder.name + ".old")
    if not folder.exists() and old.is_dir():
        old.rename(folder)


def _write_state(folder: Path, model, opt, step: int, log: list, meta: dict, tok_dir: Path) -> None:
    cfg = model_config(meta["shape"], _tok(tok_dir), causal=meta["objective"] == "ar")
    if meta["objective"] != "ar":
        cfg["attention_pattern"] = meta.get("attention", "context_causal")
        if cfg["attention_pattern"] == "block_causal":  # the block the rows were cut in is the one served
            cfg["redraft_block_size"] = int(meta["block_size"])
    save_checkpoint(model, folder, cfg, dtype=torch.float32)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / name, folder / name)
    tensors, groups = {}, []
    for o, sd in enumerate(x.state_dict() for x in opt.opts):
        for idx, st in sd["state"].items():
            for k, v in st.items():
                tensors[f"{o}.{idx}.{k}"] = v.detach().clone() if torch.is_tensor(v) else torch.tensor(v)
        groups.append(sd["param_groups"])
    save_file(tensors, str(folder / "optimizer.safetensors"))
    (folder / "train_state.json").write_text(json.dumps(
        {"step": step, "log": log, "meta": meta, "optimizers": groups}) + "\n")


def load_state(folder: Path, model, opt) -> tuple[int, list]:
    state = json.loads((folder / "train_state.json").read_text())
    weights = load_file(str(folder / "model.safetensors"))
    model.load_state_dict(weights, strict=False)
    tensors = load_file(str(folder / "optimizer.safetensors"))
    if "optimizers" not in state:  # one AdamW, tensors named "param.name"
        state["optimizers"] = [state["param_groups"]]
        tensors = {f"0.{k}": v for k, v in tensors.items()}
    if len(state["optimizers"]) != len(opt.opts):
        raise SystemExit(f"{folder} was trained with another optimizer ({state['meta'].get('optimizer', 'adamw')})")
    st: list[dict[int, dict]] = [{} for _ in opt.opts]
    for key, v in tensors.items():
        o, idx, name = key.split(".", 2)
        st[int(o)].setdefault(int(idx), {})[name] = v
    for o, groups, s in zip(opt.opts, state["optimizers"], st):
        o.load_state_dict({"state": s, "param_groups": groups})
    return state["step"], state["log"]


def _tok(folder: Path):  # (train.py reads the tokenizer the same way)
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(folder / "tokenizer.json"))
