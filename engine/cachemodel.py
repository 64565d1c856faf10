"""The decode-time cache model: next-token predictions copied from the code around the cursor.

Code repeats itself, and a small model copies badly. A cache model asks the caller's text
lookup (continuations of the longest matches of the text before a position, found in the
document, other open documents and recent edits) and turns them into a distribution over the
next token, which the sampler mixes into the model's at every masked position:

    p = (1 - alpha) * p_model + alpha * p_cache

p_cache counts the next token of every live match, each weighted by its locality (the
lookup's `weight`) and the square of its match length, so the longest, most local matches
decide (nested cache models: the most local confident scope wins). alpha grows with the
length of the best agreeing match and with how far the matches agree:

    alpha = max_alpha * (1 - exp(-(matched - min_matched) / length_scale)) * agreement ** 2

Matches are followed token by token (a "walk"): while the chain of tokens decoded so far
agrees with a match's continuation, that match goes on and its matched length grows; where
every match breaks, the lookup is asked again with the new text, so the cache keeps going past
the point where one whole copied continuation (a draft) would stop. Walk states are memoised
per chain, so a step that re-reads the same positions costs dictionary lookups.

Copied text gets p close to max_alpha, above the unmask threshold, so several copied tokens
commit in one denoising step. Where the lookup finds nothing the model's distribution is left
exactly as it is. It knows nothing of documents or LSP: the lookup is the caller's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .config import CacheConfig
from .lookup import Lookup


@dataclass(frozen=True)
class Prediction:
    ids: torch.Tensor  # [K] candidate next tokens
    probs: torch.Tensor  # [K] their cache probabilities (sum 1)
    alpha: float  # the cache's share of the mixture
    matched: int  # characters of the best agreeing match


@dataclass
class _Match:
    tokens: list[int]
    chars: list[int]  # characters of each token
    weight: float


_State = tuple[tuple[_Match, int, int], ...]  # (match, next token offset, matched chars)


class CacheModel:
    """One request's cache: `predict(chain)` is the distribution of the token after the span
    tokens `chain` (those decoded so far, from the span's start)."""

    def __init__(self, lookup: Lookup, tokenizer, healed: str = "", config: CacheConfig = CacheConfig()) -> None:
        self.lookup, self.tok, self.healed, self.cfg = lookup, tokenizer, healed, config
        self._states: dict[tuple[int, ...], _State] = {}
        self._predictions: dict[tuple[int, ...], Prediction | None] = {}
        self.queries = 0

    def predict(self, chain: Sequence[int]) -> Prediction | None:
        key = tuple(chain)
        if key not in self._predictions:
            self._predictions[key] = self._predict(self._state(key))
        return self._predictions[key]

    def mix(self, logits: torch.Tensor, chain: Sequence[int]) -> Prediction | None:
        """Mix the prediction after `chain` into one position's logits [V] in place (they
        become log-probabilities of the mixture); untouched when the cache has nothing."""
        pred = self.predict(chain)
        if pred is None:
            return None
        p = torch.softmax(logits.float(), dim=-1) * (1.0 - pred.alpha)
        p.index_add_(0, pred.ids.to(p.device), pred.probs.to(p.device) * pred.alpha)
        logits.copy_(torch.log(p).to(logits.dtype))
        return pred

    # -- walking -------------------------------------------------------------------------

    def _state(self, key: tuple[int, ...]) -> _State:
        state = self._states.get(key)
        if state is not None:
            return state
        if not key:
            state = self._query(key)
        else:
            last = key[-1]
            state = tuple((m, off + 1, matched + m.chars[off]) for m, off, matched in self._state(key[:-1])
                          if off < len(m.tokens) and m.tokens[off] == last)
            if not any(off < len(m.tokens) for m, off, _ in state):
                state = self._query(key)
        self._states[key] = state
        return state

    def _query(self, key: tuple[int, ...]) -> _State:
        """Ask the lookup again after the chain's text."""
        if self.queries >= self.cfg.max_queries:
            return ()
        self.queries += 1
        text = self.tok.decode(list(key))
        if key and not text.startswith(self.healed):
            return ()  # the chain does not continue what the cursor's token began
        typed = text[len(self.healed):]
        lead = self.healed if not key else ""  # the span's first token re-states the healed text
        out = []
        for c in self.lookup(typed):
            if c.matched < self.cfg.min_matched or not c.text:
                continue
            ids = self.tok.encode(lead + c.text)[: self.cfg.max_tokens]
            if ids:
                strings = self.tok.strings()
                out.append((_Match(ids, [len(strings[i]) for i in ids], c.weight), 0, c.matched))
        return tuple(out)

    def _predict(self, state: _State) -> Prediction | None:
        votes: dict[int, float] = {}
        best: dict[int, int] = {}
        for m, off, matched in state:
            if off >= len(m.tokens):
                continue
            t = m.tokens[off]
            votes[t] = votes.get(t, 0.0) + m.weight * matched * matched
            best[t] = max(best.get(t, 0), matched)
        total = sum(votes.values())
        if total <= 0:
            return None
        top = max(votes, key=votes.get)
        agreement = votes[top] / total
        longer = max(0, best[top] - self.cfg.min_matched)  # the shortest acceptable match weighs nothing
        alpha = self.cfg.max_alpha * (1.0 - math.exp(-longer / self.cfg.length_scale)) * agreement ** 2
        ids = torch.tensor(list(votes), dtype=torch.long)
        probs = torch.tensor([v / total for v in votes.values()], dtype=torch.float32)
        return Prediction(ids, probs, alpha, best[top])


def mix_along_rows(caches: Sequence[CacheModel | None], logits: torch.Tensor, b_idx: torch.Tensor,
                   a_idx: torch.Tensor, x: torch.Tensor, lengths: Sequence[int], span_at: int,
                   ends: set[int], threshold: float) -> torch.Tensor:
    """Mix each row's cache (None: none) into the logits [N, V] of its masked positions
    (b_idx, a_idx), left to right: a position's chain is the span's tokens before it (x [B, A]),
    committed or picked in this step. Returns [N] whether each position continues a copied run
    from the row's first masked position, its mixed probability clearing `threshold` (a copied
    run may be committed past the semi-autoregressive block)."""
    copied = torch.zeros(b_idx.numel(), dtype=torch.bool)
    at = {(b, a): n for n, (b, a) in enumerate(zip(b_idx.tolist(), a_idx.tolist()))}
    for b, cache in enumerate(caches):
        if cache is None:
            continue
        chain: list[int] = []
        run = True  # every masked position so far was copied
        for a in range(span_at, span_at + lengths[b]):
            n = at.get((b, a))
            if n is None:
                tok = int(x[b, a])
            else:
                pred = cache.mix(logits[n], chain)
                tok = int(logits[n].argmax())
                run = run and pred is not None and int(pred.ids[pred.probs.argmax()]) == tok \
                    and float(logits[n, tok].exp()) >= threshold
                copied[n] = run
            if tok in ends:
                break
            chain.append(tok)
    return copied
