"""Training the byte-level BPE of redraft's models on the training split.

Byte-level, so any text round-trips exactly (tabs, unicode, trailing spaces); whitespace
runs are kept whole by the pre-tokenizer's regex so indentation costs few tokens.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from ..prompt import END, MASK, SPECIAL_TOKENS

# GPT-2's split, except that runs of spaces/tabs stay together (indentation) and a
# newline keeps the indentation that follows it.
SPLIT = (r"\n[ \t]*|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}[\p{L}\p{N}_]*| ?\p{N}{1,3}|"
         r" ?[^\s\p{L}\p{N}]+|[ \t]+(?=\S)|[ \t]+|\s+")


def new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(texts, vocab_size: int = 12288) -> Tokenizer:
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def sample_by_language(docs: list[dict], mb_per_lang: float, seed: int = 0) -> dict[str, list[str]]:
    """Up to `mb_per_lang` MB of texts per language ("lang" of each record; Python when absent),
    files drawn at random: every language gets its merges, whatever its share of the corpus."""
    import random
    by_lang: dict[str, list[str]] = {}
    for d in docs:
        by_lang.setdefault(d.get("lang", "python"), []).append(d["text"])
    rng = random.Random(seed)
    out = {}
    for lang, texts in sorted(by_lang.items()):
        rng.shuffle(texts)
        got, size = [], 0
        for t in texts:
            if size >= mb_per_lang * 1e6:
                break
            got.append(t)
            size += len(t.encode())
        out[lang] = got
    return out


def save_tokenizer(tok: Tokenizer, folder: Path) -> None:
    import json
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": END, "pad_token": END, "bos_token": END, "mask_token": MASK,
         "additional_special_tokens": SPECIAL_TOKENS[2:]}, indent=2) + "\n")


def main(argv=None) -> int:
    import argparse
    from .corpus import read_split
    ap = argparse.ArgumentParser(prog="redraft train tokenizer",
                                 description="Train redraft's byte-level BPE on a corpus' training split.")
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--sample-mb", type=float, default=0,
                    help="train on this many MB of each language, drawn at random (default: the whole split)")
    args = ap.parse_args(argv)
    docs = read_split(args.corpus, "train")
    texts = ((d["text"] for d in docs) if not args.sample_mb else
             (t for ts in sample_by_language(docs, args.sample_mb).values() for t in ts))
    tok = train_tokenizer(texts, args.vocab)
    save_tokenizer(tok, args.out)
    print(args.out / "tokenizer.json")
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main())
