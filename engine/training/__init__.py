"""redraft.engine.training: how the shipped default models are made, reproducibly.

corpus.py builds the code corpus (Python, TypeScript/JavaScript, Go, Rust, C/C++ from pinned,
permissively licensed PyPI, npm and Debian packages, de-duplicated, split by package; its
sources, licence checks, file filters and dedup live in corpus_*.py); tokenizer.py trains the byte-level
BPE; examples.py shapes training rows like the job (fill-in-the-middle with character-level
splits, padded variable-length spans, drafts to repair, synthetic renames with an edit
history, copy-rich rows whose middle recurs in the prefix, in the engine's prompt format:
engine/prompt.py); recipe.py holds what training adds to plain masked diffusion (edit
corruption, certainty forcing, Muon, schedules); train.py runs the autoregressive twin and
the masked-diffusion adaptation; ship.py copies a checkpoint into the package.
Needs nothing from the server.
"""
