"""Confidence-threshold parallel unmasking of a masked span (Fast-dLLM style).

Each step reads the output head only at still-masked positions, picks a token per position
(greedy, or temperature / top-p sampling; picks.py), scores it (max-prob, margin or exp(-entropy))
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

The cache model (cachemodel.py): a request with one has its cache's next-token prediction mixed
into every masked position's distribution, left to right along each row (a position's chain is
the span before it, committed or picked in this step), so copied text clears the threshold
several tokens at a time and may run past the semi-autoregressive block. Scores stay the model's.

`Denoiser.run` in steps: encode the context, judge the drafts, then step (pick at masked
positions, hold some back, choose the span length, commit, stream a preview) until nothing is
masked, and score what is left. The rules of which picks commit are unmask.py's. The rows and
everything kept per row live in one `Running` object (running.py, with `Denoised`); rows are
dropped only through `Running.keep`, so every per-row field follows.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Generator

import torch

from .batch import Batch, encode_context, encode_contexts
from .cache import ContextCache, KVCache
from .cachemodel import CacheModel, mix_along_rows
from .config import SamplerConfig
from .errors import Cancelled
from .model import DiffusionLM
from .picks import Picks, choose
from .ragged import Forward
from .running import Denoised, Running, drain
from .step import StepGraphs
from .unmask import (best_rows_first_step, block_ends, commit_mask, cut_at_first_mask, defer_early_ends, fewer,
                     fill_after_end, mean_to_end, outside_block, span_positions, stop_finished_units)
from .window_lookup import (WindowLookup, guesses as guess_probes, judge as judge_probes, positions as probe_positions,
                            show as show_probes)

MARGINAL_CHUNK = 16  # row copies per forward when drafts are judged by masked marginals


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
    # request -> its cache model (cachemodel.py), mixed into every masked position's distribution.
    # Mixing needs the logits, so requests with a cache take the plain head (no fused head, no
    # static step).
    caches: dict[int, CacheModel] = field(default_factory=dict)
    # request -> its document's ContextCache, for batches of several requests (`reuse` is the
    # one cache of a single-request batch); only for causally attending contexts.
    reuses: dict[int, ContextCache] = field(default_factory=dict)
    # Prompt lookup inside span windows (window_lookup.py; SamplerConfig.window_lookup), or None.
    lookup: WindowLookup | None = None
    reused_by: dict[int, int] = field(init=False, default_factory=dict)  # request -> context tokens reused
    running: Running | None = field(init=False, default=None)  # the rows of the current (or last) run
    ends_host: torch.Tensor = field(init=False)  # end_ids for the host-side decision

    def __post_init__(self) -> None:
        self.ends_host = self.end_ids.cpu()

    @property
    def alive(self) -> list[int]:
        """Request index of each row still running."""
        return list(self.owners) if self.running is None else self.running.alive

    @property
    def _shift(self) -> int:
        return 1 if self.model.config.shifted else 0

    @property
    def _mask_id(self) -> int:
        mask = self.model.config.mask_token_id
        return mask if mask is not None else 0

    def run(self, batch: Batch) -> Denoised:
        """Encode, judge the drafts, then step until nothing is masked; score the rows left."""
        return drain(self.run_steps(batch))

    def run_steps(self, batch: Batch) -> Generator[Forward | None, None, Denoised]:
        """`run`, pausing after every denoising step (yields None) and before each forward
        over the active block - judging the drafts, each step, the final scoring - (yields the
        `Forward`, for a scheduler to run with other runs' forwards). A
        scheduler steps several runs in turn; it must not interleave runs that share a static
        step's workspace or a context cache."""
        gen = torch.Generator(device="cpu").manual_seed(self.scfg.seed) if self.scfg.temperature > 0 else None
        t0 = time.perf_counter()
        st, reused = self._encode(batch)
        self.running = st
        encode_ms = (time.perf_counter() - t0) * 1000
        t1 = time.perf_counter()
        if bool(st.seeded.any()):
            self._check_cancel()
            yield from self._judge_step(st)
        judged = st.steps  # the judging forward is not one of the capped denoising steps
        denoised = bool(st.masked.any())
        max_steps = self.scfg.max_steps or int(st.masked.sum(1).max())
        # The unmask decision works on host copies: one read-back per step (see step.py).
        dev = st.x.device
        st.move(torch.device("cpu"))
        late = False
        while bool(st.masked.any()):
            self._check_cancel()
            if late := self._out_of_time():
                cut_at_first_mask(st.x, st.masked, st.batch.span_at, self.pad_id)
                break
            yield from self._step(st, st.steps + 1 - judged, max_steps, gen)
            if self.scfg.give_up_after and st.steps - judged >= self.scfg.give_up_after:
                self._give_up_unfinished(st)
            yield
        st.move(dev)
        score = None
        if not late and not set(st.alive) <= st.hopeless:
            score = yield from self._final_scores(st, rescore=denoised)
        gen_ms = (time.perf_counter() - t1) * 1000
        return Denoised(st.batch, st.x, st.conf, st.logp, st.steps, st.forwards, encode_ms, gen_ms, reused, batch.B,
                        st.kept, score, st.static_steps, st.hopeless, dict(self.reused_by), st.window_steps,
                        st.positions, st.lookup_kept, st.guess_kept)

    def _check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled()

    def _out_of_time(self) -> bool:
        """The request's time budget (CancelFlag.deadline) has run out."""
        expired = getattr(self.cancel, "expired", None)
        return expired is not None and expired()

    def _encode(self, batch: Batch) -> tuple[Running, int]:
        """The context's keys/values (for "full" attention, the whole first pass) and the rows'
        starting state: seeded draft positions, masked positions. Also how many context tokens
        came from an earlier request."""
        hidden, reused = None, 0
        if self.model.config.attention == "full":
            kv = self._new_cache(batch)
            hidden = self._full_pass(batch, kv)
        elif self.reuses:
            kv, self.reused_by = encode_contexts(self.model, batch, self.owners, self.reuses, extra=batch.A)
        else:
            kv, reused = encode_context(self.model, batch, self.reuse, extra=batch.A)
        kvalid = None if bool(batch.key_valid().all()) else batch.key_valid()
        x = batch.act_ids.clone()
        span = span_positions(batch)
        seeded = span & (x != self._mask_id)
        conf = torch.ones(x.shape, dtype=torch.float32, device=x.device)
        logp = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        kept = torch.zeros(batch.B, dtype=torch.long)
        return Running(batch, kv, kvalid, x, span & ~seeded, seeded, conf, logp, kept, list(self.owners),
                       hidden), reused

    def _judge_step(self, st: Running) -> Generator[Forward, None, None]:
        """One forward judges every draft token: those the model agrees with stay, the rest
        are masked again. A request with a draft kept whole keeps that row alone."""
        lp, other, n = yield from self._judge_drafts(st.batch, st.kv, st.kvalid, st.x, st.seeded)
        st.forwards += n
        bar = math.log(max(self.scfg.draft_keep, 1e-12))
        keep = st.seeded & ((lp >= bar) if self.scfg.draft_rule == "keep" else (other < bar))
        st.logp[keep], st.conf[keep] = lp[keep], lp[keep].exp()
        drop = st.seeded & ~keep
        st.x[drop], st.masked[drop] = self._mask_id, True
        st.kept = keep.sum(1).cpu()
        st.steps = 1
        whole = st.seeded.any(1) & ~drop.any(1)
        if self.scfg.accept_whole_drafts and bool(whole.any()):
            rows = self._accept_whole(whole, st.alive)
            if rows is not None:
                st.keep(rows)
        self._stream(st)

    def _step(self, st: Running, step: int, max_steps: int, gen) -> Generator[Forward, None, None]:
        """One denoising step (`step` counts from 1 after the judging forward): pick a token at
        every masked position, hold some back, choose the span length, commit, stream. Yields
        the step's forward, if it needs one, for the caller to run (alone or with others)."""
        b_idx, a_idx = st.masked.nonzero(as_tuple=True)
        estimate = self._abstain_bar(step)
        if step > 1 and estimate is None and self.scfg.block_size and not self.caches and not self.scfg.max_steps:
            # Only the leftmost block may commit (outside_block); picks elsewhere only estimate
            # whole rows (abstention, span length). Where nothing is estimated the output head, ~a
            # sixth of a CPU step over a 16-token span, runs on the block's positions alone.
            inside = a_idx < block_ends(st.masked, st.batch.span_at, self.scfg.block_size)[b_idx]
            b_idx, a_idx = b_idx[inside], a_idx[inside]
        window = self._window(st)
        probes = self._probes(st) if window is not None else {}
        if probes:  # the window runs on through each proposal and the position after it
            show_probes(st.x, probes)
            reach = max(p.end + p.ahead for p in probes.values()) - self._shift
            window = (window[0], min(max(window[1], reach), st.x.shape[1]))
        if window is not None:  # picks only where the window's outputs land
            lo, hi = window[0] + self._shift, window[1] + self._shift
            inside = (a_idx >= lo) & (a_idx < hi)
            b_idx, a_idx = probe_positions(b_idx[inside], a_idx[inside], probes, st.x.shape[1])
        picks = yield from self._pick(st, b_idx, a_idx, gen, window, causal=bool(probes))
        raw_score = picks.score.clone() if probes else None
        if st.guess is not None:
            st.guess[b_idx, a_idx], st.guess_logp[b_idx, a_idx] = picks.tokens, picks.top_logp
        st.forwards += 1
        st.steps += 1
        if self.scfg.end_in_order:
            defer_early_ends(picks, b_idx, a_idx, st.masked, self.ends_host)
        if self.scfg.block_size:
            outside_block(picks, b_idx, a_idx, st.masked, st.batch.span_at, self.scfg.block_size)
        if probes:
            b_idx, a_idx, picks, kept = judge_probes(probes, b_idx, a_idx, picks, raw_score, st.x, self._mask_id,
                                                     self.scfg.threshold)
            st.lookup_kept += sum(n for b, n in kept.items() if not probes[b].guessed)
            st.guess_kept += sum(n for b, n in kept.items() if probes[b].guessed)
        if step == 1 and self.scfg.length_choice == "first_step" and st.batch.B > 1:
            b_idx, a_idx, picks = self._choose_length(st, b_idx, a_idx, picks)
        self._commit(st, b_idx, a_idx, picks, step, max_steps)
        if estimate is not None:
            self._give_up_hopeless(st, b_idx, a_idx, picks, estimate)
        self._drop_beaten(st)
        self._stream(st)
        refresh = self.scfg.refresh_every
        if self.model.config.attention == "full" and bool(st.masked.any()) and refresh and st.steps % refresh == 0:
            # new context keys: the static step is loaded again
            st.hidden, st.static = self._full_pass(st.batch, st.kv, st.x.to(st.batch.act_ids.device)), None

    def _abstain_bar(self, step: int) -> float | None:
        """The estimate below which a request is given up after this step (see
        `_give_up_hopeless`): `min_score` less `abstain_margin` after the first step, less
        `recheck_margin` after later ones; None when nothing is estimated."""
        margin = self.scfg.abstain_margin if step == 1 else self.scfg.recheck_margin
        bar = self.scfg.min_score - margin
        return bar if math.isfinite(bar) else None

    def _give_up_hopeless(self, st: Running, b_idx, a_idx, picks: Picks, bar: float) -> None:
        """Abstain early: after a step, a request whose every row would score below `bar` even
        if each position still masked became the token this step liked best stops here, instead
        of running the whole schedule to show nothing. A row's estimate is its mean log-prob up
        to where it would end (its first picked end token, or sooner where the caller's stop rule
        ends the unit, the padding after it counting 0 as in the final score), plus the draft
        bonus for seeded rows."""
        est, tok = st.logp.clone(), st.x.clone()
        if st.guess is not None:  # positions outside a window: their latest picks
            est[st.masked], tok[st.masked] = st.guess_logp[st.masked], st.guess[st.masked]
        est[b_idx, a_idx], tok[b_idx, a_idx] = picks.top_logp, picks.tokens
        ends, at = torch.isin(tok, self.ends_host), st.batch.span_at
        best: dict[int, float] = {}
        for b, row in enumerate(st.batch.rows):
            span_end = at + row.length
            hits = ends[b, at:span_end].nonzero()
            stop = at + int(hits[0]) + 1 if hits.numel() else span_end
            unit = self._unit_end(b, tok[b, at:stop].tolist())  # the caller's stop rule may end it sooner
            mean = float(est[b, at:stop].mean()) if unit is None else float(est[b, at:at + unit].sum()) / (unit + 1)
            score = mean + (self.scfg.draft_bonus if bool(st.seeded[b].any()) else 0.0)
            req = st.alive[b]
            best[req] = max(best.get(req, -math.inf), score)
        self._give_up(st, {req for req, score in best.items() if score < bar})

    def _drop_beaten(self, st: Running) -> None:
        """Rows that cannot win stop costing forwards. A row without a draft scores its mean
        log-prob, at most 0; a draft row scores its own plus `draft_bonus`. Once a draft row is
        finished (nothing masked) and its mean log-prob at commit plus the bonus exceeds
        `beaten_margin`, the unfinished plain rows of its request are dropped: to win, they
        would need the draft's final rescoring to fall by more than that margin. (A draft
        seeding the model kept its tokens because the model agreed; here the model's own
        candidate, often a long block at one token a forward, ran on after it to lose.) Draft
        rows whose estimate (`_give_up_hopeless`'s) trailed a finished one by the margin were
        dropped too in a trial: no forward fewer on the validation packages, so they run on."""
        bonus, margin = self.scfg.draft_bonus, self.scfg.beaten_margin
        if st.batch.B < 2 or bonus <= 0 or not math.isfinite(margin):
            return
        drafted = st.seeded.any(1).tolist()
        unfinished = st.masked.any(1).tolist()
        at, lead = st.batch.span_at, {}
        for b, req in enumerate(st.alive):
            if drafted[b] and not unfinished[b] and req not in st.hopeless:
                score = mean_to_end(st.logp[b], st.x[b], st.batch.rows[b].length, at, self.ends_host) + bonus
                lead[req] = max(lead.get(req, -math.inf), score)
        if not lead:
            return
        beaten = {b for b, req in enumerate(st.alive)
                  if unfinished[b] and not drafted[b] and lead.get(req, -math.inf) > margin}
        rows = fewer(set(range(st.batch.B)) - beaten, st.batch.B)
        if rows is not None:
            st.keep(rows)
            st.beaten += len(beaten)

    def _give_up_unfinished(self, st: Running) -> None:
        """`give_up_after` steps are spent: every request with a row still masked abstains, or
        (out_of_steps "prefix") its rows keep what they committed before their first mask and
        only a request whose every such row is empty abstains."""
        unfinished = {st.alive[b] for b in range(st.batch.B) if bool(st.masked[b].any())}
        if self.scfg.out_of_steps == "abstain":
            self._give_up(st, unfinished)
            return
        at = st.batch.span_at
        wrote = {st.alive[b] for b in range(st.batch.B) if not bool(st.masked[b, at])}
        cut_at_first_mask(st.x, st.masked, at, self.pad_id)
        self._give_up(st, unfinished - wrote)

    def _give_up(self, st: Running, requests: set[int]) -> None:
        """Stop `requests` here: their rows' masked positions become padding and they abstain."""
        st.hopeless |= requests
        for b in range(st.batch.B):
            if st.alive[b] in st.hopeless:
                st.x[b, st.masked[b]] = self.pad_id
                st.masked[b] = False

    def _unit_end(self, b: int, ids: list[int]) -> int | None:
        """Tokens of `ids` after which the stop rule says the row's unit is complete (None: never)."""
        if self.stop is not None:
            for k in range(1, len(ids) + 1):
                if self.stop(b, ids[:k]):
                    return k
        return None

    def _probes(self, st: Running) -> dict:
        """This window step's proposals for a run down to one row (rows of one forward share
        its window, and a proposal would widen it for all): prompt lookup's (window_lookup.py),
        else the model's own guesses from its last forward (`window_guesses`), which then also
        runs that many masked positions ahead to guess anew."""
        scfg = self.scfg
        if st.batch.B != 1 or scfg.temperature > 0 or self.caches:
            return {}
        lengths = [r.length for r in st.batch.rows]
        probes = {} if self.lookup is None else self.lookup.probes(st.x, st.masked, st.batch.span_at, lengths,
                                                                   st.alive)
        if not scfg.window_guesses or st.guess is None:
            return probes
        if not probes:
            stops = set(self.ends_host.tolist()) | {self.pad_id}
            probes = guess_probes(st.x, st.masked, st.guess, st.batch.span_at, lengths, scfg.window_guesses,
                                  stops, self._mask_id)
        return {b: replace(p, ahead=scfg.window_guesses) for b, p in probes.items()}

    def _window(self, st: Running) -> tuple[int, int] | None:
        """The span positions [lo, hi) this step runs (`SamplerConfig.span_window`), or None for
        the whole span. Positions before the open block that committed a token since they last
        ran run again, so the block sees them as committed; the window does not see the masks
        after it (semi-autoregressive blocks over a cached prefix). Letting it see them, with
        their keys from the last whole-span forward (Fast-dLLM's approximate cache), lost right
        answers on long blocks (docs/training-log.md). Only a "context_causal" model's span
        attends both ways over cached context, so only it has a window; the static step runs
        whole spans."""
        scfg = self.scfg
        if (not scfg.span_window or st.ran is None or self.model.config.attention != "context_causal"
                or self.steps is not None or st.hidden is not None):
            return None
        if scfg.window_refresh and st.since_full + 1 >= scfg.window_refresh:
            return None
        live = st.masked.any(1)
        if not bool(live.any()):
            return None
        A, s = st.x.shape[1], self._shift
        idx = torch.arange(A)
        first = torch.where(st.masked, idx, A).min(1).values[live]
        changed = torch.where(st.x != st.ran, idx, A).min(1).values[live]
        lo = int(torch.minimum(first - s, changed).min().clamp_min(0))
        if scfg.block_size:
            hi = int(block_ends(st.masked, st.batch.span_at, scfg.block_size)[live].max()) - s
        else:
            hi = A - s
        return lo, min(max(hi, lo + 1), A)

    def _pick(self, st: Running, b_idx, a_idx, gen, window: tuple[int, int] | None = None,
              causal: bool = False) -> Generator[Forward, None, Picks]:
        """Picks at the masked positions (b_idx, a_idx): from hidden states already computed,
        the static step, or a forward over the active block or a window of it (yielded: see
        ragged.py)."""
        if window is not None:
            lo, hi = window
            part = yield from self._forward(st.x, st.batch, st.kv, st.kvalid, window, causal)
            hidden = part.new_zeros(part.shape[0], st.x.shape[1], part.shape[2])
            hidden[:, lo:hi] = part
            st.ran[:, lo:hi] = st.x[:, lo:hi]
            st.since_full += 1
            st.window_steps += 1
            st.positions += part.shape[0] * (hi - lo)
            return self._choose_rows(hidden, b_idx, a_idx, st, gen)
        if self.scfg.span_window and st.hidden is None and self.steps is None:
            # this step runs the whole span: everything runs with today's inputs
            st.ran, st.since_full = st.x.clone(), 0
            if st.guess is None:
                st.guess = torch.full(st.x.shape, self._mask_id, dtype=torch.long)
                st.guess_logp = torch.zeros(st.x.shape, dtype=torch.float32)
        hidden, st.hidden = st.hidden, None
        if hidden is None and self.steps is not None and self.scfg.temperature == 0 and not self.caches:
            if st.static is None:
                st.static = self.steps.prepare(st.batch, st.kv, self.scfg.score)
            hidden, packed = st.static.run(st.x)
            st.static_steps += 1
            rows = packed[:, b_idx, a_idx - self._shift]
            picks = Picks(rows[0].long(), rows[1], rows[2], rows[3], rows[3])
            self._fix_first_rows(picks, hidden, b_idx, a_idx, st.batch.span_at)
            return picks
        if hidden is None:
            hidden = yield from self._forward(st.x, st.batch, st.kv, st.kvalid)
            st.positions += st.x.numel()
        return self._choose_rows(hidden, b_idx, a_idx, st, gen)

    def _forward(self, x, batch: Batch, kv: KVCache, kvalid, window: tuple[int, int] | None = None,
                 causal: bool = False, rows: slice | None = None) -> Generator[Forward, None, torch.Tensor]:
        """The active block's hidden states over the cached context, or those of its positions
        [lo, hi) (`window`), which write their keys/values in place and attend to what is
        before them and to each other (`causal`: each only to those before it), not to the span
        after them; only for `rows` when given (their hidden states alone come back): the
        forward is yielded first, so a scheduler can run it in one pass with other runs'
        (ragged.py); run here when it was not."""
        lo, hi = (0, x.shape[1]) if window is None else window
        r = slice(None) if rows is None else rows
        forward = Forward(self.model, x[r, lo:hi].to(batch.act_ids.device), batch.act_pos[r, lo:hi],
                          kv if rows is None else kv.rows_view(rows.start, rows.stop), batch.C + lo,
                          None if kvalid is None else kvalid[r, :batch.C + hi], causal=causal)
        yield forward
        return forward.hidden if forward.hidden is not None else forward.run()

    def _choose_length(self, st: Running, b_idx, a_idx, picks: Picks):
        """Keep each request's most confident span length after the first step; the step's
        picks follow the rows that stay."""
        rows = best_rows_first_step(b_idx, picks.top_logp, st.alive)
        if rows is None:
            return b_idx, a_idx, picks
        st.keep(rows)
        remap = {old: new for new, old in enumerate(rows.tolist())}
        sel = torch.tensor([int(b) in remap for b in b_idx.tolist()], dtype=torch.bool)
        b_idx = torch.tensor([remap[int(b)] for b in b_idx[sel].tolist()], dtype=torch.long)
        return b_idx, a_idx[sel], picks.select(sel)

    def _commit(self, st: Running, b_idx, a_idx, picks: Picks, step: int, max_steps: int) -> None:
        """Unmask the picks that clear the threshold (at least one per row), then pad after end
        tokens and stop rows whose unit is complete."""
        commit = commit_mask(b_idx, picks.score, st.masked, step, max_steps, st.batch.B, self.scfg)
        cb, ca = b_idx[commit], a_idx[commit]
        st.x[cb, ca] = picks.tokens[commit]
        st.conf[cb, ca] = picks.prob[commit]
        st.logp[cb, ca] = picks.logp[commit]
        st.masked[cb, ca] = False
        if self.scfg.end_fills_rest:
            fill_after_end(st.x, st.masked, cb, ca, picks.tokens[commit], self.ends_host, self.pad_id)
        if self.stop is not None:
            stop_finished_units(st.x, st.masked, st.batch.span_at, self.ends_host, self.pad_id, self.stop)

    def _stream(self, st: Running) -> None:
        if self.on_step is not None:
            self.on_step(st.steps, self, st.batch, st.x, st.masked, st.logp)

    def _final_scores(self, st: Running, rescore: bool) -> Generator[Forward, None, torch.Tensor | None]:
        """One scoring of every row, when there is something to compare: several rows for one
        request, or a draft row."""
        if st.batch.B <= len(set(st.alive)) and not bool(st.seeded.any()):
            return None
        # rows written only by the judging forward already hold that scoring's log-probs
        score, n = yield from self._score_rows(st.batch, st.kv, st.kvalid, st.x, st.logp, rescore=rescore)
        st.forwards += n
        return score

    def judge(self, batch: Batch) -> torch.Tensor:
        """[B] mean log-prob of each row's span, every span token seeded, from one judging
        pass: alternatives for one place (the text as it is, a proposed edit) scored alike."""
        kv, _ = encode_context(self.model, batch, self.reuse, extra=batch.A)
        kvalid = None if bool(batch.key_valid().all()) else batch.key_valid()
        seeded = span_positions(batch)
        self.running = None  # every row stays: alive is the owners
        lp, _, _ = drain(self._judge_drafts(batch, kv, kvalid, batch.act_ids, seeded))
        return lp.masked_fill(~seeded, 0.0).sum(1) / seeded.sum(1).clamp_min(1)

    def _choose_rows(self, hidden, b_idx, a_idx, st: Running, gen) -> Picks:
        """The picks at masked positions (b_idx, a_idx) from the step's hidden states, on the host."""
        span_at = st.batch.span_at
        rows = hidden[b_idx.to(hidden.device), (a_idx - self._shift).to(hidden.device)]
        if self.head is not None and self.scfg.temperature == 0 and not self.caches:
            banned = torch.tensor(self.banned, dtype=torch.long, device=rows.device) if self.banned else None
            conf = self.head(rows.contiguous(), self.model.lm_head.weight, 1.0, self.vocab_limit, banned)
            picks = Picks(conf.tokens, conf.score(self.scfg.score).clone(), conf.prob, conf.logp, conf.logp).cpu()
            self._fix_first_rows(picks, hidden, b_idx, a_idx, span_at)
            return picks
        logits = self.model.logits(rows)
        self._constrain(logits, b_idx, a_idx - span_at)
        if not self.caches:
            return choose(logits, self.scfg, gen).cpu()
        model_logp = torch.log_softmax(logits.float(), dim=-1)
        caches = [self.caches.get(req) for req in st.alive]
        copied = mix_along_rows(caches, logits, b_idx, a_idx, st.x, [r.length for r in st.batch.rows],
                                st.batch.span_at, set(self.ends_host.tolist()), self.scfg.threshold)
        picks = choose(logits, self.scfg, gen)
        # Scores (abstention, early or late, comparing rows) stay the model's own: copied text
        # is no evidence that it fits here, and the copy baseline shows how often it does not.
        picks.logp = model_logp.gather(-1, picks.tokens[:, None]).squeeze(-1)
        picks.top_logp = model_logp.max(-1).values
        picks = picks.cpu()
        picks.copied = copied
        return picks

    def _fix_first_rows(self, picks: Picks, hidden, b_idx, a_idx, span_at: int) -> None:
        """The fused head knows only banned ids; a request whose first token must start with
        the healed text gets that row chosen again, constrained (usually one row, one step)."""
        if not self.first_allowed:
            return
        sel = [n for n in ((a_idx - span_at) == 0).nonzero(as_tuple=True)[0].tolist()
               if self.alive[int(b_idx[n])] in self.first_allowed]
        if not sel:
            return
        sel = torch.tensor(sel, dtype=torch.long)
        b, a = b_idx[sel], a_idx[sel]
        logits = self.model.logits(hidden[b.to(hidden.device), (a - self._shift).to(hidden.device)])
        self._constrain(logits, b, a - span_at)
        fixed = choose(logits, self.scfg, None)
        for name, t in fixed.__dict__.items():
            if t is not None:
                getattr(picks, name)[sel] = t.cpu().to(getattr(picks, name).dtype)

    # -- drafts ----------------------------------------------------------------------------

    def _judge_drafts(self, batch: Batch, kv: KVCache, kvalid,
                      x, seeded) -> Generator[Forward, None, tuple[torch.Tensor, torch.Tensor, int]]:
        """[B, A] log-probability the model gives each seeded token, [B, A] the largest it gives
        any other token (-inf off the seeds), and the forwards it took ("visible": the one
        forward is yielded, for the caller to run, perhaps with other runs').

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
            rows = _draft_rows(seeded)
            hidden = yield from self._forward(x, batch, kv, kvalid, rows=rows)
            first = 0 if rows is None else rows.start
            lp[b_idx, a_idx], other[b_idx, a_idx] = self._token_logp(
                hidden[b_idx - first, a_idx - self._shift], x[b_idx, a_idx], b_idx, a_idx - batch.span_at)
            return lp, other, 1
        forwards = 0
        for lo in range(0, b_idx.numel(), MARGINAL_CHUNK):
            b, a = b_idx[lo:lo + MARGINAL_CHUNK], a_idx[lo:lo + MARGINAL_CHUNK]
            n = torch.arange(b.numel(), device=x.device)
            xs = x[b].clone()
            xs[n, a] = self._mask_id
            sub = KVCache.__new__(KVCache)
            sub.k, sub.v = [t.index_select(0, b) for t in kv.k], [t.index_select(0, b) for t in kv.v]
            hidden = self.model(xs, batch.act_pos[b], sub, start=batch.C,
                                key_valid=None if kvalid is None else kvalid[b])
            lp[b, a], other[b, a] = self._token_logp(hidden[n, a - self._shift], x[b, a], b, a - batch.span_at)
            forwards += 1
        return lp, other, forwards

    def _token_logp(self, hidden, tokens, b_idx, span_idx) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of `tokens` and the largest log-probability of any other token."""
        logits = self.model.logits(hidden).float()
        self._constrain(logits, b_idx, span_idx)
        logp = torch.log_softmax(logits, dim=-1)
        own = logp.gather(-1, tokens[:, None]).squeeze(-1)
        return own, logp.scatter(-1, tokens[:, None], float("-inf")).max(-1).values

    @staticmethod
    def _accept_whole(whole, owners: list[int]) -> torch.Tensor | None:
        """Rows to keep when some drafts were kept whole: per such request, its first whole
        draft alone (drafts come ranked by the caller); other requests keep all their rows."""
        best: dict[int, int] = {}
        for b in whole.nonzero(as_tuple=True)[0].tolist():
            best.setdefault(owners[b], b)
        return fewer(set(best.values()) | {b for b in range(len(owners)) if owners[b] not in best}, len(owners))

    def _score_rows(self, batch: Batch, kv: KVCache, kvalid, x, logp,
                    rescore: bool) -> Generator[Forward, None, tuple[torch.Tensor, int]]:
        """[B] mean log-prob of each row's span up to its first end token, one scoring for all.

        Models that judge visible tokens get one more forward with every span token shown;
        others are scored by the log-probabilities their tokens had when committed.
        """
        cfg = self.model.config
        ends = torch.isin(x, self.end_ids)
        span = span_positions(batch)
        # positions up to and including the first end token
        after_end = (torch.cumsum((ends & span).long(), dim=1) - (ends & span).long()) > 0
        use = span & ~after_end
        n = 0
        if rescore and cfg.draft_scoring == "visible" and cfg.attention != "full":
            b_idx, a_idx = use.nonzero(as_tuple=True)
            hidden = yield from self._forward(x, batch, kv, kvalid)
            logp = torch.zeros_like(logp)
            logp[b_idx, a_idx] = self._token_logp(hidden[b_idx, a_idx - self._shift], x[b_idx, a_idx], b_idx,
                                                  a_idx - batch.span_at)[0]
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


def _draft_rows(seeded: torch.Tensor) -> slice | None:
    """The rows a judging forward needs: those holding a draft token, when they are one run
    and not every row. The plain rows beside them (all masks) gain nothing from it: their
    first step runs the whole span again, rewriting every row's keys/values, and a draft kept
    whole drops them. On held-out blocks with drafts, one row in two or three is plain."""
    has = seeded.any(1).tolist()
    if all(has) or not any(has):
        return None
    start = has.index(True)
    stop = len(has) - has[::-1].index(True)
    return slice(start, stop) if all(has[start:stop]) else None
