"""Sequence-level distillation data: the autoregressive twin's own greedy spans as targets.

A masked-diffusion model commits several tokens in one step only where it is sure of all of
them at once. On real code it rarely is: the next tokens are genuinely uncertain, and a model
trained on them learns that uncertainty. The twin's greedy span is a deterministic function of
the context, so a student trained on it can become sure of it (sequence-level knowledge
distillation; D2F and dParallel distil from a teacher's outputs for this reason).

This module writes those spans: training examples drawn as `redraft train model` draws them
(the same files, mix and cuts), the context encoded as the row encodes it, and the twin's
greedy continuation up to its end token in place of the true middle. Output is JSON lines
(`ctx`, `middle`, `true`, `lang`), appended in seeded order, so a stopped run resumes where
it stopped. Rows where the twin does not end its span within the cap are counted and left out
(their end would be a guess). `examples.load_distilled` reads them back as training rows.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..cache import KVCache
from ..prompt import END, SPECIAL_TOKENS
from .corpus import read_split
from .examples import EncodedExample, encode_example, sample_example
from .state import _tok

MAX_NEW = 96  # the longest twin span kept, in tokens
HEADROOM = 16  # tokens a twin span may run past the true middle's length


def twin_spans(model, contexts: list[list[int]], end: int, banned: list[int], max_new: list[int]) -> list[list[int] | None]:
    """The twin's greedy continuation of each context, up to and without its end token; None
    where none came within that row's `max_new` tokens. Rows are left-padded into one batch
    (padding keys masked, positions per row), then decoded in lockstep with a KV cache."""
    R, L = len(contexts), max(len(c) for c in contexts)
    steps = max(max_new)
    ids = torch.full((R, L), end, dtype=torch.long)
    valid = torch.zeros(R, L + steps, dtype=torch.bool)
    pos = torch.zeros(R, L, dtype=torch.long)
    for r, c in enumerate(contexts):
        ids[r, L - len(c):] = torch.tensor(c)
        valid[r, L - len(c):L] = True
        pos[r, L - len(c):] = torch.arange(len(c))
    cfg = model.config
    cache = KVCache(cfg.num_hidden_layers, R, cfg.num_key_value_heads, L + steps, cfg.head_dim, torch.float32, "cpu")
    lengths = torch.tensor([len(c) for c in contexts])
    out: list[list[int]] = [[] for _ in contexts]
    done = [False] * R
    ended = [False] * R
    with torch.inference_mode():
        hidden = model(ids, pos, cache, start=0, causal=True, key_valid=valid[:, :L])
        for t in range(steps):
            logits = model.logits(hidden[:, -1])
            logits[:, banned] = float("-inf")
            nxt = logits.argmax(-1)
            for r in range(R):
                if done[r]:
                    continue
                tok = int(nxt[r])
                if tok == end:
                    done[r] = ended[r] = True
                elif len(out[r]) >= max_new[r]:
                    done[r] = True
                else:
                    out[r].append(tok)
            if all(done):
                break
            valid[:, L + t] = True
            hidden = model(nxt[:, None], (lengths + t)[:, None], cache, start=L + t, causal=True,
                           key_valid=valid[:, :L + t + 1])
    return [o if e else None for o, e in zip(out, ended)]


def load_twin(folder: Path, tok):
    """The twin's weights in a causal model of the training code's shape (a folder of another
    shape fails here, not as nonsense spans later)."""
    from .train import build_model, shape_for
    config = json.loads((folder / "config.json").read_text())
    shape = shape_for(tok, {k: config[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                   "num_attention_heads", "num_key_value_heads", "head_dim")})
    model = build_model("ar", tok, shape)
    missing, unexpected = model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # the head is tied to the embeddings
        raise ValueError(f"{folder}: not a twin of this shape (missing {missing}, unexpected {unexpected})")
    return model.eval()


def examples(docs: list[dict], tok, T: int, seed: int, mix: dict[str, float] | None):
    """Endless (index, encoded example, language) drawn as Rows draws a training row's file."""
    import itertools

    from .train import mix_weights
    docs = [d for d in docs if len(d["text"]) > 200]
    weights = [min(len(d["text"]), 40_000) for d in docs]
    if mix:
        weights = mix_weights([d.get("lang", "python") for d in docs], weights, mix)
    cum = list(itertools.accumulate(weights))
    for i in itertools.count():
        rng = random.Random(seed * 1_000_003 + i)
        doc = rng.choices(docs, cum_weights=cum)[0]
        ex = sample_example(doc["text"], rng)
        if ex is None or not ex.middle.strip():
            continue
        # Cut as a row of T - HEADROOM tokens: the twin may write a span longer than the truth.
        yield i, encode_example(ex, tok, T - HEADROOM, rng, pad_span=False), doc.get("lang", "python")


def generate(args) -> int:
    torch.set_num_threads(args.threads)
    tok = _tok(Path(args.twin))
    model = load_twin(Path(args.twin), tok)
    end = tok.token_to_id(END)
    banned = [tok.token_to_id(t) for t in SPECIAL_TOKENS if t != END]
    out = Path(args.out)
    done = sum(1 for _ in out.open()) if out.is_file() else 0
    skip_to = json.loads(out.read_text().splitlines()[-1])["index"] if done else -1
    stream = examples(read_split(Path(args.corpus), "train"), tok, args.seq, args.seed,
                      json.loads(args.mix) if args.mix else None)
    kept, dropped, t0 = done, 0, time.time()
    batch: list = []
    with out.open("a") as f:
        for i, enc, lang in stream:
            if i <= skip_to:
                continue
            batch.append((i, enc, lang))
            if len(batch) < args.batch:
                continue
            ctxs = [e.ids[:e.span_at] for _, e, _ in batch]
            caps = [min(MAX_NEW, e.middle + HEADROOM, args.seq - len(c) - 1) for (_, e, _), c in zip(batch, ctxs)]
            spans = twin_spans(model, ctxs, end, banned, caps)
            for (j, e, lang), c, s in zip(batch, ctxs, spans):
                if s is None or not s:
                    dropped += 1
                    continue
                f.write(json.dumps({"index": j, "ctx": c, "middle": s, "true": e.middle, "lang": lang}) + "\n")
                kept += 1
            f.flush()
            batch = []
            rate = (kept - done) / max(time.time() - t0, 1e-9)
            print(json.dumps({"kept": kept, "dropped": dropped, "rows_per_s": round(rate, 2)}), file=sys.stderr)
            if kept >= args.rows:
                break
            if dropped > 4 * args.rows:  # a twin that rarely ends its spans: say so, do not spin
                print(f"stopped: the twin ended only {kept - done} of {kept - done + dropped} spans", file=sys.stderr)
                return 1
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="redraft train distill", description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="folder written by redraft train corpus")
    ap.add_argument("--twin", required=True, help="the autoregressive twin's checkpoint folder")
    ap.add_argument("--out", required=True, help="JSON lines file (appended; a rerun resumes)")
    ap.add_argument("--rows", type=int, default=20_000, help="stop once the file holds this many rows")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mix", default=None, help="JSON {language: share}, as redraft train model --mix")
    return ap


def main(argv=None) -> int:
    return generate(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
