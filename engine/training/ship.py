"""Turning a training checkpoint into a shipped model inside the engine package.

    python -m redraft.engine.training.ship --from runs/diffusion/last --name redraft-diffusion \
        --sampler '{"threshold": 0.7}'

Writes engine/models/NAME/: config.json, model.safetensors in bf16 (tied embeddings stored
once, no optimizer state), tokenizer.json, tokenizer_config.json and card.json (how the
model was made: data, shape, tokens seen, wall time, the training command). Shipped models
load by name: Engine.load("redraft-diffusion").
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..checkpoint import SHIPPED_DIR


def trained_seconds(log: list[dict]) -> float:
    """Wall time over every stretch of the run: logs written before resumed runs counted on
    restart their seconds at each resume."""
    total, last = 0.0, 0.0
    for e in log:
        s = e.get("seconds", 0.0)
        total += s - last if s >= last else s
        last = s
    return round(total, 1)


def warm_start_history(init: Path, depth: int = 0) -> tuple[int, float] | None:
    """(tokens, seconds) a warm start was trained for, its own warm starts included: a run's
    checkpoint (train_state.json, whose meta names its own init) or a shipped model (card.json,
    a run restarted from it when the run's state was lost). None where neither says."""
    state, card = init / "train_state.json", init / "card.json"
    if state.is_file():
        data = json.loads(state.read_text())
        log = data["log"]
        tokens, seconds = (log[-1]["tokens"] if log else 0), trained_seconds(log)
        earlier = init_history(data["meta"], depth + 1) if depth < 16 else None
        if earlier:
            tokens, seconds = tokens + earlier[0], seconds + earlier[1]
        return tokens, round(seconds, 1)
    if card.is_file():
        c = json.loads(card.read_text())
        return (c.get("total_tokens_seen", c.get("tokens_seen", 0)),
                round(c.get("init_wall_seconds", 0.0) + c.get("wall_seconds", 0.0), 1))
    return None


def init_history(meta: dict, depth: int = 0) -> tuple[int, float] | None:
    """(tokens, seconds) of a run's warm start: as recorded when the run started (the warm
    start may have been replaced since, e.g. a shipped model by this run's own result), else
    read from the warm start now."""
    if meta.get("init_history"):
        return tuple(meta["init_history"])
    return warm_start_history(Path(meta["init"]), depth) if meta.get("init") else None


def ship(source: Path, name: str, sampler: dict | None = None, dest_root: Path = SHIPPED_DIR) -> Path:
    dest = dest_root / name
    dest.mkdir(parents=True, exist_ok=True)
    config = json.loads((source / "config.json").read_text())
    state = json.loads((source / "train_state.json").read_text())
    # Trained on rows of `seq` tokens: the engine keeps contexts within that.
    config["max_position_embeddings"] = state["meta"]["seq"]
    if sampler:
        config["redraft_sampler"] = sampler  # defaults the engine uses for this model
    mix = state["meta"].get("mix")
    if mix:  # the languages it was trained on: the server lets drafts answer alone in others
        config["redraft_languages"] = sorted(json.loads(mix))
    weights = load_file(str(source / "model.safetensors"))
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in weights.items()}, str(dest / "model.safetensors"),
              metadata={"format": "pt"})
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / f, dest / f)
    log, meta = state["log"], state["meta"]
    card = {
        "name": name,
        "parameters": sum(v.numel() for v in weights.values()),
        "objective": meta["objective"],
        "init": "/".join(Path(meta["init"]).parts[-2:]) if meta.get("init") else None,  # e.g. ar/step-800
        "steps": state["step"],
        "tokens_seen": log[-1]["tokens"] if log else 0,
        "wall_seconds": trained_seconds(log),
        "final_train_loss": log[-1]["loss"] if log else None,
        "final_valid_loss": next((e["valid"] for e in reversed(log) if "valid" in e), None),
        "batch": meta["batch"], "seq": meta["seq"], "lr": meta["lr"], "seed": meta["seed"],
        "shape": meta["shape"],
    }
    history = init_history(meta)
    if history:  # the warm start's own training, back to the first run, for the whole story
        card["init_tokens_seen"], card["init_wall_seconds"] = history
        card["total_tokens_seen"] = card["init_tokens_seen"] + card["tokens_seen"]
    (dest / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="redraft train ship",
                                 description="Copy a training checkpoint into the package as a shipped model.")
    ap.add_argument("--from", dest="source", type=Path, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--sampler", default=None, help="JSON sampler defaults stored with the model")
    args = ap.parse_args(argv)
    print(ship(args.source, args.name, json.loads(args.sampler) if args.sampler else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
