"""Tokenizer size against compression: bytes per token per language for several vocabularies.

    python tests/bench/bench_tokenizer.py --corpus CORPUS --vocab 8192 12288 16384 24576 32768

Each size is trained (engine/training/tokenizer.py, the trainer `redraft train tokenizer` uses) on
the same sample of the training split, `--sample-mb` per language, and measured on the
validation split. Read with bench_train.py's tokens per second for the same vocabularies:
training throughput in bytes of code a second is tokens/s x bytes/token.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from redraft.engine.training.corpus import read_split
from redraft.engine.training.tokenizer import sample_by_language, train_tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--vocab", type=int, nargs="+", default=[8192, 12288, 16384, 24576, 32768])
    ap.add_argument("--sample-mb", type=float, default=8.0, help="training text per language (MB)")
    ap.add_argument("--valid-mb", type=float, default=2.0, help="measured text per language (MB)")
    ap.add_argument("--save", type=Path, default=None, help="keep each tokenizer under SAVE/vocab-N/")
    args = ap.parse_args()
    train_texts = sample_by_language(read_split(args.corpus, "train"), args.sample_mb, 0)
    valid_texts = sample_by_language(read_split(args.corpus, "valid"), args.valid_mb, 1)
    for v in args.vocab:
        tok = train_tokenizer((t for texts in train_texts.values() for t in texts), v)
        if args.save:
            from redraft.engine.training.tokenizer import save_tokenizer
            save_tokenizer(tok, args.save / f"vocab-{v}")
        row = {"vocab": v}
        for lang, texts in sorted(valid_texts.items()):
            n_bytes = sum(len(t.encode()) for t in texts)
            n_tok = sum(len(e.ids) for e in tok.encode_batch(texts))
            row[lang] = round(n_bytes / max(n_tok, 1), 3)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
