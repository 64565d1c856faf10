import gzip
import json

import pytest

import tiny
from redraft.engine import Engine
from redraft.engine.training import corpus, tokenizer


@pytest.fixture(scope="session")
def engines(tmp_path_factory):
    """Tiny random engines, one per attention style, loaded once (fp32 for exact comparisons)."""
    root = tmp_path_factory.mktemp("engines")
    return {f: Engine.load(tiny.make_family(root / f, f, seed=7), dtype="float32")
            for f in ("dream", "llada", "redraft", "redraft-ar")}


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    """Thirty standard-library files as train, five as validation, in the corpus builder's format."""
    root = tmp_path_factory.mktemp("corpus")
    files = [f for f in corpus.stdlib_files() if 2_000 < len(f[1]) < 20_000][:35]
    for split, chunk in (("train", files[:30]), ("valid", files[30:])):
        with gzip.open(root / f"{split}.jsonl.gz", "wt") as f:
            for path, text in chunk:
                f.write(json.dumps({"package": "cpython-stdlib", "path": path, "text": text}) + "\n")
    tok = tokenizer.train_tokenizer([t for _, t in files[:30]], vocab_size=1024)
    tokenizer.save_tokenizer(tok, root / "tok")
    return root
