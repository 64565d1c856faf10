"""Whether a checkpoint copies yet: next-token loss on the second copy of a random token
sequence against the first (the induction-head test of Olsson et al. 2022).

    python tests/bench/induction_score.py RUN/step-2000 [RUN/last ...]

A model that copies from its context predicts the second copy far better than the first
(random tokens cannot be guessed otherwise); one that does not scores both alike. Cheap (one
forward of 8 rows of 120 tokens), so it can follow a run between its quality points.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from tokenizers import Tokenizer

from redraft.engine.training import train


def load(folder: Path):
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    cfg = json.loads((folder / "config.json").read_text())
    objective = "ar" if cfg.get("attention_pattern") == "causal" else "diffusion"
    shape = {k: cfg[k] for k in train.SHAPE if k in cfg}
    model = train.build_model(objective, tok, shape)
    model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
    return model.eval()


@torch.no_grad()
def induction(model, rows: int = 8, length: int = 60, seed: int = 0) -> dict:
    """Next-token loss (every position causal) on each copy, and top-1 accuracy on the second."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    seq = torch.randint(vocab // 16, vocab - 64, (rows, length), generator=g)  # skip specials and bytes
    ids = torch.cat([seq, seq], 1)
    T = ids.shape[1]
    hidden = model(ids, torch.arange(T).expand(rows, T), causal=True, mask=None)
    logits = model.lm_head(hidden[:, :-1]).float()
    ce = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    right = (logits.argmax(-1) == ids[:, 1:]).float()
    skip = 5  # the first tokens of each copy have no pattern to follow yet
    return {"first": round(ce[:, skip:length - 1].mean().item(), 3),
            "second": round(ce[:, length + skip:].mean().item(), 3),
            "second_top1": round(right[:, length + skip:].mean().item(), 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args(argv)
    for f in args.folders:
        print(json.dumps({"model": str(f), **induction(load(f))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
