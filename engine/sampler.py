"""Confidence-threshold parallel unmasking of a masked span (Fast-dLLM style).

Each step reads the output head only at still-masked positions, picks a token per position
(greedy, or temperature / top-p sampling), scores it (max-prob, margin or exp(-entropy))
and commits every position whose score clears the threshold — at least one per row, more
when a step cap demands it, or a fixed number per step. Context keys/values come from the
cache; for "full"-attention models they were computed with the span all-masked and can be
refreshed every R steps (R = 1 is exact full recomputation).

Seeded rows (drafts): span positions that start with a token instead of the mask are a
draft to revise. One forward judges every draft token (see `_judge_drafts`); the tokens
the model agrees with stay, the others are re-masked and denoised as usual. A draft kept
whole answers its request at once. When a request has several rows (drafts, the plain
all-mask row, span lengths), one last forward scores every finished row the same way so
they can be compared (`Denoised.score`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .batch import Batch, encode_context
from .cache import ContextCache, KVCache
from .config import SamplerConfig
from .errors import Cancelled
from .model import DiffusionLM
from .step import StepGraphs

MARGINAL_CHUNK = 16  # row copies per forward when drafts are judged by masked marginals


@dataclass
class Choice:
    tokens: torch.Tensor  # [N]
    score: torch.Tensor  # [N] what the threshold is compared with
    prob: torch.Tensor  # [N] probability of the chosen token (at the sampling temperature)
    logp: torch.Tensor  # [N] log-probability of the chosen token at temperature 1
    top_logp: torch.Tensor  # [N] log of the largest probability (first-step length choice)


def choose(logits: torch.Tensor, scfg: SamplerConfig, gen: torch.Generator | None) -> Choice:
    """logits [N, V] (fp32, banned ids already -inf) -> one token per row and its scores."""
    logp_raw = torch.log_softmax(logits, dim=-1)
    if scfg.temperature > 0:
        probs = torch.softmax(logits / scfg.temperature, dim=-1)
        if scfg.top_p < 1.0:
            probs = _top_p(probs, scfg.top_p)
        tokens = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
    else:
        probs = logp_raw.exp()
        tokens = probs.argmax(-1)
    prob = probs.gather(-1, tokens[:, None]).squeeze(-1)
    if scfg.score == "maxprob":
        score = prob
    elif scfg.score == "margin":
        top2 = probs.topk(2, dim=-1).values
        score = top2[:, 0] - top2[:, 1]
    else:  # entropy, mapped to (0, 1] so one threshold serves every score
        ent = -(probs * torch.log(probs.clamp_min(1e-12))).sum(-1)
        score = torch.exp(-ent)
    return Choice(tokens, score, prob, logp_raw.gather(-1, tokens[:, None]).squeeze(-1),
                  logp_raw.max(-1).values)


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_p, order = probs.sort(dim=-1, descending=True)
    drop = sorted_p.cumsum(-1) - sorted_p > top_p
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    out = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return out / out.sum(-1, keepdim=True)


@dataclass
class Denoised:
    batch: Batch  # rows still alive at the end (after first-step pruning)
    x: torch.Tensor  # [B, A] final active block
    conf: torch.Tensor  # [B, A] probability at commit
    logp: torch.Tensor  # [B, A] log-probability at commit
    steps: int = 0
    forwards: int = 0
    encode_ms: float = 0.0
    generate_ms: float = 0.0
    reused: int = 0
    rows_run: int = 0
    kept: torch.Tensor | None = None  # [B] draft tokens each row kept (0 for plain rows)
    score: torch.Tensor | None = None  # [B] mean log-prob of each row's span under one scoring
    static_steps: int = 0  # steps run by the static (graph-captured on CUDA) step


@dataclass
class Denoiser:
    model: DiffusionLM
    scfg: SamplerConfig
    owners: list[int]  # request index of each row
    end_ids: torch.Tensor  # [E] ids that end a span
    pad_id: int  # written after an end token
    banned: list[int]  # ids never produced (mask, ...)
    first_allowed: dict[int, torch.Tensor] = field(default_factory=dict)  # request -> ids allowed at span[0]
    vocab_limit: int | None = None  # ids >= this (padding rows of the embedding) are never produced
    reuse: ContextCache | None = None
    cancel: object | None = None  # anything with is_set()
    on_step: Callable[[int, "Denoiser", Batch, torch.Tensor, torch.Tensor, torch.Tensor], None] | None = None
    # stop(row, ids) -> True once the row's unit is complete: ids are the span's tokens
    # committed contiguously from its start (up to the first mask or end token).
    stop: Callable[[int, list[int]], bool] | None = None
    # The fused head kernel (kernels.head_confidence): greedy choice and confidence without
    # writing the logits; used when nothing but banned ids constrains the choice.
    head: Callable | None = None
    # Static-shape steps (step.StepGraphs), replayed as CUDA graphs: the greedy span steps over
    # cached context keys/values (not the full passes of "full"-attention models).
    steps: StepGraphs | None = None
    alive: list[int] = field(init=False, default_factory=list)  # request index of each row still running
    ends_host: torch.Tensor = field(init=False)  # end_ids for the host-side decision

    def __post_init__(self) -> None:
        self.ends_host = self.end_ids.cpu()

    def run(self, batch: Batch) -> Denoised:
        cfg = self.model.config
        shift = 1 if cfg.shifted else 0
        gen = torch.Generator(device="cpu").manual_seed(self.scfg.seed) if self.scfg.temperature > 0 else None
        self.alive = list(self.owners)
        t0 = time.perf_counter()
        full = cfg.attention == "full"
        if full:
            kv = self._new_cache(batch)
            hidden = self._full_pass(batch, kv)
            reused = 0
        else:
            kv, reused = encode_context(self.model, batch, self.reuse, extra=batch.A)
            hidden = None
        kvalid = None if bool(batch.key_valid().all()) else batch.key_valid()
        encode_ms = (time.perf_counter() - t0) * 1000
        t1 = time.perf_counter()

        x = batch.act_ids.clone()
        span = torch.zeros_like(batch.act_valid)
        span[:, batch.span_at:] = True
        mask_id = cfg.mask_token_id if cfg.mask_token_id is not None else 0
        seeded = span & batch.act_valid & (x != mask_id)
        masked = span & batch.act_valid & ~seeded
        conf = torch.ones(x.shape, dtype=torch.float32, device=x.device)
        logp = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        kept = torch.zeros(batch.B, dtype=torch.long)
        steps = forwards = 0
        rows_run = batch.B
        if bool(seeded.any()):
            if self.cancel is not None and self.cancel.is_set():
                raise Cancelled()
            lp, other, forwards = self._judge_drafts(batch, kv, kvalid, x, seeded)
            bar = math.log(max(self.scfg.draft_keep, 1e-12))
            keep = seeded & ((lp >= bar) if self.scfg.draft_rule == "keep" else (other < bar))
            logp[keep], conf[keep] = lp[keep], lp[keep].exp()
            drop = seeded & ~keep
            x[drop], masked[drop] = mask_id, True
            kept = keep.sum(1).cpu()
            steps = 1
            whole = seeded.any(1) & ~drop.any(1)
            if self.scfg.accept_whole_drafts and bool(whole.any()):
                sel = self._accept_whole(whole, batch.B)
                if sel is not None:
                    batch, kv = batch.select(sel), _select(kv, sel)
                    x, masked, conf, logp, kept = x[sel], masked[sel], conf[sel], logp[sel], kept[sel]
                    seeded = seeded[sel]
                    kvalid = None if kvalid is None else kvalid[sel]
            if self.on_step is not None:
                self.on_step(steps, self, batch, x, masked, logp)
        judged = steps  # the judging forward is not one of the capped denoising steps
        denoised = bool(masked.any())
        max_steps = self.scfg.max_steps or int(masked.sum(1).max())
        # The unmask decision works on host copies: one read-back per step (see step.py).
        dev = x.device
        x, masked, conf, logp = x.cpu(), masked.cpu(), conf.cpu(), logp.cpu()
        static, static_steps = None, 0  # the static step loaded for the current rows
        while bool(masked.any()):
            if self.cancel is not None and self.cancel.is_set():
                raise Cancelled()
            b_idx, a_idx = masked.nonzero(as_tuple=True)
            if hidden is None and self.steps is not None and self.scfg.temperature == 0:
                if static is None:
                    static = self.steps.prepare(batch, kv, self.scfg.score)
                hidden, packed = static.run(x)
                static_steps += 1
                rows = packed[:, b_idx, a_idx - shift]
                c = Choice(rows[0].long(), rows[1], rows[2], rows[3], rows[3])
                self._fix_first_rows(c, hidden, b_idx, a_idx, batch.span_at)
            else:
                if hidden is None:
                    hidden = self.model(x.to(dev), batch.act_pos, kv, start=batch.C, key_valid=kvalid)
                c = self._choose_rows(hidden, b_idx, a_idx, batch.span_at, gen)
            forwards += 1
            steps += 1
            if self.scfg.end_in_order:
                self._defer_early_ends(c, b_idx, a_idx, masked)
            if self.scfg.block_size:
                self._outside_block(c, b_idx, a_idx, masked, batch.span_at)
            if steps - judged == 1 and self.scfg.length_choice == "first_step" and batch.B > 1:
                keep = self._best_rows_first_step(b_idx, c.top_logp, batch)
                if keep is not None:
                    batch, kv, static = batch.select(keep), _select(kv, keep), None
                    x, masked, conf, logp = x[keep], masked[keep], conf[keep], logp[keep]
                    kvalid = None if kvalid is None else kvalid[keep.to(dev)]
                    remap = {int(old): new for new, old in enumerate(keep.tolist())}
                    sel = torch.tensor([int(b) in remap for b in b_idx.tolist()], dtype=torch.bool)
                    b_idx = torch.tensor([remap[int(b)] for b in b_idx[sel].tolist()], dtype=torch.long)
                    a_idx, c = a_idx[sel], Choice(*(t[sel] for t in c.__dict__.values()))
            commit = self._commit_mask(b_idx, c.score, masked, steps - judged, max_steps, batch.B)
            cb, ca = b_idx[commit], a_idx[commit]
            x[cb, ca] = c.tokens[commit]
            conf[cb, ca] = c.prob[commit]
            logp[cb, ca] = c.logp[commit]
            masked[cb, ca] = False
            if self.scfg.end_fills_rest:
                self._fill_after_end(x, masked, cb, ca, c.tokens[commit])
            if self.stop is not None:
                self._stop_finished_units(x, masked, batch.span_at)
            if self.on_step is not None:
                self.on_step(steps, self, batch, x, masked, logp)
            hidden = None
            if full and bool(masked.any()) and self.scfg.refresh_every and steps % self.scfg.refresh_every == 0:
                hidden, static = self._full_pass(batch, kv, x.to(dev)), None  # new context keys: reload
        x, masked, conf, logp = x.to(dev), masked.to(dev), conf.to(dev), logp.to(dev)
        score = None
        if batch.B > len(set(self.alive)) or bool(seeded.any()):
            # rows written only by the judging forward already hold that scoring's log-probs
            score, n = self._score_rows(batch, kv, kvalid, x, logp, rescore=denoised)
            forwards += n
        gen_ms = (time.perf_counter() - t1) * 1000
        return Denoised(batch, x, conf, logp, steps, forwards, encode_ms, gen_ms, reused, rows_run, kept, score,
                        static_steps)

    def judge(self, batch: Batch) -> torch.Tensor:
        """[B] mean log-prob of each row's span, every span token seeded, from one judging
        pass: alternatives for one place (the text as it is, a proposed edit) scored alike."""
        kv, _ = encode_context(self.model, batch, self.reuse, extra=batch.A)
        kvalid = None if bool(batch.key_valid().all()) else batch.key_valid()
        span = torch.zeros_like(batch.act_valid)
        span[:, batch.span_at:] = True
        seeded = span & batch.act_valid
        self.alive = list(self.owners)
        lp, _, _ = self._judge_drafts(batch, kv, kvalid, batch.act_ids, seeded)
        return lp.masked_fill(~seeded, 0.0).sum(1) / seeded.sum(1).clamp_min(1)

    def _choose_rows(self, hidden, b_idx, a_idx, span_at: int, gen) -> Choice:
        """The choice at masked positions (b_idx, a_idx) from the step's hidden states, on the host."""
        shift = 1 if self.model.config.shifted else 0
        rows = hidden[b_idx.to(hidden.device), (a_idx - shift).to(hidden.device)]
        if self.head is not None and self.scfg.temperature == 0:
            banned = torch.tensor(self.banned, dtype=torch.long, device=rows.device) if self.banned else None
            conf = self.head(rows.contiguous(), self.model.lm_head.weight, 1.0, self.vocab_limit, banned)
            c = Choice(conf.tokens, conf.score(self.scfg.score).clone(), conf.prob, conf.logp, conf.logp)
            c = Choice(*(t.cpu() for t in c.__dict__.values()))
            self._fix_first_rows(c, hidden, b_idx, a_idx, span_at)
            return c
        logits = self.model.logits(rows)
        self._constrain(logits, b_idx, a_idx - span_at)
        return Choice(*(t.cpu() for t in choose(logits, self.scfg, gen).__dict__.values()))

    def _fix_first_rows(self, c: Choice, hidden, b_idx, a_idx, span_at: int) -> None:
        """The fused head knows only banned ids; a request whose first token must start with
        the healed text gets that row chosen again, constrained (usually one row, one step)."""
        if not self.first_allowed:
            return
        sel = [n for n in ((a_idx - span_at) == 0).nonzero(as_tuple=True)[0].tolist()
               if self.alive[int(b_idx[n])] in self.first_allowed]
        if not sel:
            return
        sel = torch.tensor(sel, dtype=torch.long)
        shift = 1 if self.model.config.shifted else 0
        b, a = b_idx[sel], a_idx[sel]
        logits = self.model.logits(hidden[b.to(hidden.device), (a - shift).to(hidden.device)])
        self._constrain(logits, b, a - span_at)
        fixed = choose(logits, self.scfg, None)
        for name, t in fixed.__dict__.items():
            getattr(c, name)[sel] = t.cpu().to(getattr(c, name).dtype)

    # -- drafts ----------------------------------------------------------------------------

    def _judge_drafts(self, batch: Batch, kv: KVCache, kvalid, x, seeded) -> tuple[torch.Tensor, torch.Tensor, int]:
        """[B, A] log-probability the model gives each seeded token, [B, A] the largest it gives
        any other token (-inf off the seeds), and the forwards it took.

        "visible": one forward with the drafts as they are; the model was trained to predict
        the right token at a visible, possibly wrong, one. "masked": each draft token masked
        in a copy of its row, all copies in one batched pass (chunked to bound the memory of
        the copied keys/values) - the marginal any masked-diffusion model can give.
        """
        cfg = self.model.config
        lp = torch.full(x.shape, float("-inf"), dtype=torch.float32, device=x.device)
        other = lp.clone()
        b_idx, a_idx = seeded.nonzero(as_tuple=True)
        if cfg.draft_scoring == "visible" or cfg.attention == "full":
            # ("full" attention keeps the context keys of an all-masked span: a visible draft
            # is the closest judgement available without recomputing the whole context.)
            hidden = self.model(x, batch.act_pos, kv, start=batch.C, key_valid=kvalid)
            lp[b_idx, a_idx], other[b_idx, a_idx] = self._token_logp(
                hidden[b_idx, a_idx - (1 if cfg.shifted else 0)], x[b_idx, a_idx], b_idx, a_idx - batch.span_at)
            return lp, other, 1
        mask_id = cfg.mask_token_id if cfg.mask_token_id is not None else 0
        forwards = 0
        for lo in range(0, b_idx.numel(), MARGINAL_CHUNK):
            b, a = b_idx[lo:lo + MARGINAL_CHUNK], a_idx[lo:lo + MARGINAL_CHUNK]
            n = torch.arange(b.numel(), device=x.device)
            xs = x[b].clone()
            xs[n, a] = mask_id
            sub = KVCache.__new__(KVCache)
            sub.k, sub.v = [t.index_select(0, b) for t in kv.k], [t.index_select(0, b) for t in kv.v]
            hidden = self.model(xs, batch.act_pos[b], sub, start=batch.C,
                                key_valid=None if kvalid is None else kvalid[b])
            lp[b, a], other[b, a] = self._token_logp(hidden[n, a - (1 if cfg.shifted else 0)], x[b, a], b,
                                                     a - batch.span_at)
            forwards += 1
        return lp, other, forwards

    def _token_logp(self, hidden, tokens, b_idx, span_idx) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of `tokens` and the largest log-probability of any other token."""
        logits = self.model.logits(hidden).float()
        self._constrain(logits, b_idx, span_idx)
        logp = torch.log_softmax(logits, dim=-1)
        own = logp.gather(-1, tokens[:, None]).squeeze(-1)
        return own, logp.scatter(-1, tokens[:, None], float("-inf")).max(-1).values

    def _accept_whole(self, whole, B: int) -> torch.Tensor | None:
        """Rows to keep when some drafts were kept whole: per such request, its first whole
        draft alone (drafts come ranked by the caller); other requests keep all their rows."""
        owners = self.alive
        best: dict[int, int] = {}
        for b in whole.nonzero(as_tuple=True)[0].tolist():
            best.setdefault(owners[b], b)
        keep = sorted(set(best.values()) | {b for b in range(B) if owners[b] not in best})
        if len(keep) == B:
            return None
        self.alive = [owners[b] for b in keep]
        return torch.tensor(keep, dtype=torch.long)

    def _score_rows(self, batch: Batch, kv: KVCache, kvalid, x, logp, rescore: bool) -> tuple[torch.Tensor, int]:
        """[B] mean log-prob of each row's span up to its first end token, one scoring for all.

        Models that judge visible tokens get one more forward with every span token shown;
        others are scored by the log-probabilities their tokens had when committed.
        """
        cfg = self.model.config
        ends = torch.isin(x, self.end_ids)
        span = torch.zeros_like(batch.act_valid)
        span[:, batch.span_at:] = True
        span &= batch.act_valid
        # positions up to and including the first end token
        after_end = (torch.cumsum((ends & span).long(), dim=1) - (ends & span).long()) > 0
        use = span & ~after_end
        n = 0
        if rescore and cfg.draft_scoring == "visible" and cfg.attention != "full":
            b_idx, a_idx = use.nonzero(as_tuple=True)
            hidden = self.model(x, batch.act_pos, kv, start=batch.C, key_valid=kvalid)
            logp = torch.zeros_like(logp)
            logp[b_idx, a_idx] = self._token_logp(hidden[b_idx, a_idx - (1 if cfg.shifted else 0)],
                                                  x[b_idx, a_idx], b_idx, a_idx - batch.span_at)[0]
            n = 1
        total = (logp * use).sum(1)
        return total / use.sum(1).clamp_min(1), n

    # -- pieces ----------------------------------------------------------------------------

    def _new_cache(self, batch: Batch) -> KVCache:
        cfg, p = self.model.config, next(self.model.parameters())
        return KVCache(cfg.num_hidden_layers, batch.B, cfg.num_key_value_heads, batch.C + batch.A,
                       cfg.head_dim, p.dtype, p.device)

    def _full_pass(self, batch: Batch, kv: KVCache, act: torch.Tensor | None = None) -> torch.Tensor:
        """Context + active block together, full attention; returns the active block's hidden states."""
        ids = torch.cat([batch.ctx_ids, batch.act_ids if act is None else act.to(batch.act_ids.device)], dim=1)
        pos = torch.cat([batch.ctx_pos, batch.act_pos], dim=1)
        valid = batch.key_valid()
        hidden = self.model(ids, pos, kv, start=0, key_valid=None if bool(valid.all()) else valid)
        return hidden[:, batch.C:]

    def _constrain(self, logits: torch.Tensor, b_idx: torch.Tensor, span_idx: torch.Tensor) -> None:
        if self.vocab_limit is not None and self.vocab_limit < logits.shape[-1]:
            logits[:, self.vocab_limit:] = float("-inf")
        logits[:, self.banned] = float("-inf")
        if not self.first_allowed:
            return
        for n in (span_idx == 0).nonzero(as_tuple=True)[0].tolist():
            allowed = self.first_allowed.get(self.alive[int(b_idx[n])])
            if allowed is not None:
                keep = logits[n, allowed].clone()
                logits[n] = float("-inf")
                logits[n, allowed] = keep

    def _best_rows_first_step(self, b_idx, top_logp, batch: Batch) -> torch.Tensor | None:
        """Per request, keep the candidate length whose first-step predictions are most confident."""
        owners = self.alive
        best: dict[int, tuple[float, int]] = {}
        for b in range(batch.B):
            sel = b_idx == b
            score = float(top_logp[sel].mean()) if bool(sel.any()) else -math.inf
            if owners[b] not in best or score > best[owners[b]][0]:
                best[owners[b]] = (score, b)
        keep = sorted(b for _, b in best.values())
        if len(keep) == batch.B:
            return None
        self.alive = [owners[b] for b in keep]
        return torch.tensor(keep, dtype=torch.long)

    def _commit_mask(self, b_idx, score, masked, step: int, max_steps: int, B: int) -> torch.Tensor:
        commit = torch.zeros_like(score, dtype=torch.bool)
        left = masked.sum(1)
        steps_left = max(1, max_steps - step + 1)
        for b in range(B):
            rows = (b_idx == b).nonzero(as_tuple=True)[0]
            if rows.numel() == 0:
                continue
            s = score[rows]
            if self.scfg.tokens_per_step > 0:
                k = self.scfg.tokens_per_step
            else:
                k = int((s >= self.scfg.threshold).sum())
            k = max(k, 1, math.ceil(int(left[b]) / steps_left))
            k = min(k, rows.numel())
            commit[rows[s.topk(k).indices]] = True
        return commit

    def _defer_early_ends(self, c: Choice, b_idx, a_idx, masked) -> None:
        """An end token may be committed only where nothing before it is still masked.

        Trailing padding is the easiest thing to predict, so without this a model that was
        trained with padded spans commits the padding first and then ends the span early.
        """
        ended = torch.isin(c.tokens, self.ends_host)
        if not bool(ended.any()):
            return
        first_masked = torch.where(masked, torch.arange(masked.shape[1], device=masked.device),
                                   masked.shape[1]).min(1).values
        early = ended & (a_idx > first_masked[b_idx])
        c.score[early] = -1.0  # below any threshold; still chosen if nothing else is (never: the first is eligible)

    def _outside_block(self, c: Choice, b_idx, a_idx, masked, span_at: int) -> None:
        """Semi-autoregressive blocks (LLaDA / Fast-dLLM): only the leftmost block that still
        has masks may be unmasked; the threshold decides how many of its tokens go per step."""
        n = self.scfg.block_size
        idx = torch.arange(masked.shape[1], device=masked.device)
        first = torch.where(masked, idx, masked.shape[1]).min(1).values  # first masked position per row
        block_start = span_at + (first - span_at) // n * n
        outside = a_idx >= block_start[b_idx] + n
        c.score[outside] = -2.0  # never above the threshold, and below every in-block position

    def _stop_finished_units(self, x, masked, span_at: int) -> None:
        """Rows whose committed beginning already completes the unit end here: the rest is padding."""
        ends = set(self.ends_host.tolist())
        for b in range(x.shape[0]):
            if not bool(masked[b].any()):
                continue
            first = int(masked[b].nonzero()[0])
            ids = []
            for t in x[b, span_at:first].tolist():
                if t in ends:
                    break
                ids.append(t)
            if ids and self.stop(b, ids):
                x[b, masked[b]] = self.pad_id
                masked[b] = False

    def _fill_after_end(self, x, masked, cb, ca, tokens) -> None:
        ended = torch.isin(tokens, self.ends_host)
        if not bool(ended.any()):
            return
        pad = self.pad_id
        for b, a in zip(cb[ended].tolist(), ca[ended].tolist()):
            later = masked[b].clone()
            later[: a + 1] = False
            x[b, later] = pad
            masked[b, later] = False


def _select(kv: KVCache, keep: torch.Tensor) -> KVCache:
    kv.select_rows(keep)
    return kv
