"""The engine's front door: load a checkpoint, fill masked spans from text.

`Engine.load(path_or_name)` reads any known checkpoint family; `engine.infill(prefix,
suffix)` returns a Completion with text, per-token confidence and stats. Requests can be
batched (`infill_batch`), seeded with drafts (copy candidates taken from the code), cancelled
between steps (CancelFlag), and streamed (`on_preview` gets the whole current text after
every step). `engine.info()` says what the engine is and can do. The request and run types
live in request.py (importable from here too). Knows nothing of LSP, files or editors.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Generator

import torch

from .autoregressive import decode, score_spans
from .blockwise import decode_blocks
from .drafting import Drafter
from .batch import Batch, make_batch
from .cache import ContextCache, ContextStore
from .cachemodel import CacheModel, Lookup
from .checkpoint import DEFAULT_MODEL, DTYPES, load_model, read_config, read_sampler_defaults, resolve
from .config import EngineConfig, ModelConfig, SamplerConfig
from .dtypes import auto_dtype
from .errors import Cancelled, CheckpointError
from .layout import Row, build_row, fit, seed_row
from .model import DiffusionLM
from .ragged import Forward, run_together
from .request import EngineInfo, InfillRequest, _Prepared, _Run
from .result import Completion, Preview, Stats
from .sampler import Denoised, Denoiser, drain
from .speculative import LookupSource
from .step import StepGraphs
from .window_lookup import WindowLookup
from .tokenizer import Tokenizer
from redraft.kernels import backend


class Engine:
    def __init__(self, model: DiffusionLM, tokenizer: Tokenizer, config: EngineConfig | None = None,
                 name: str = "model", path: Path | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or EngineConfig()
        self.name = name
        self.path = path
        mc = self.model_config
        if mc.is_causal and not mc.shifted:
            raise CheckpointError(f"{name}: a causal model must predict the next token (shifted)")
        dev = self.device
        self._end_ids = torch.tensor(sorted(mc.end_token_ids) or [0], dtype=torch.long, device=dev)
        self._pad_id = mc.pad_token_id if mc.pad_token_id is not None else int(self._end_ids[0])
        # what closes a seeded draft: the padding the model saw after spans, when it ends them
        self._draft_end = self._pad_id if self._pad_id in self._end_ids.tolist() else int(self._end_ids[0])
        # Never produced: the mask, and special tokens other than the end/pad ones (sentinels,
        # chat markers) — code does not contain them.
        self._banned = sorted((set(tokenizer.special_ids) | {mc.mask_token_id}) - set(mc.end_token_ids) - {None})
        self._vocab_limit = min(tokenizer.vocab_size, mc.vocab_size)
        self._contexts = ContextStore(self.config.context_cache_tokens)
        self._info: EngineInfo | None = None
        # The kernel backend, chosen once: Triton on CUDA (when installed), PyTorch elsewhere.
        self.kernels = backend.ops(dev, self.config.kernels) if backend.use_triton(dev, self.config.kernels) else None
        self.model.span_attention = None if self.kernels is None else self.kernels.span_attention
        self.steps = self._step_graphs(dev)

    def _step_graphs(self, dev: torch.device) -> StepGraphs | None:
        choice = self.config.step_graphs
        if choice not in ("auto", "on", "off"):
            raise ValueError(f"step_graphs must be 'auto', 'on' or 'off', got {choice!r}")
        if self.model_config.is_causal or choice == "off" or (choice == "auto" and dev.type != "cuda"):
            return None
        head = (self.kernels or backend.ops(dev, "torch")).head_confidence
        return StepGraphs(self.model, head, self._banned, self._vocab_limit, capture=dev.type == "cuda")

    # -- loading -------------------------------------------------------------------------

    @classmethod
    def load(cls, path_or_name: str | Path = DEFAULT_MODEL, device: str | None = None, dtype: str | None = None,
             config: EngineConfig | None = None) -> "Engine":
        folder = resolve(path_or_name)
        if config is None:  # the checkpoint may carry sampler defaults tuned for it
            config = EngineConfig()
            defaults = read_sampler_defaults(folder)
            if defaults:
                config = replace(config, sampler=config.sampler.with_(**defaults))
        device = device or config.device
        dtype = dtype or config.dtype
        if dtype == "auto":
            dtype = auto_dtype(device)
        quantized = dtype == "int8"  # float32 weights, linears in int8 (int8.py)
        if quantized:
            if torch.device(device).type != "cpu":
                raise ValueError(f"dtype int8 runs on the CPU only, not on {device}")
            dtype = "float32"
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPES)}, int8)")
        if config.threads and device == "cpu":
            torch.set_num_threads(config.threads)
        tokenizer = Tokenizer.from_folder(folder)
        cfg = read_config(folder, tokenizer)
        model = load_model(folder, cfg, torch.device(device), DTYPES[dtype])
        if quantized:
            model.use_int8()
        name = str(path_or_name) if not Path(str(path_or_name)).exists() else folder.name
        return cls(model, tokenizer, config, name=name, path=folder)

    @property
    def model_config(self) -> ModelConfig:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- what it is ----------------------------------------------------------------------

    def info(self) -> EngineInfo:
        """What this engine is and can do, for callers that describe or route to it."""
        if self._info is None:
            p = next(self.model.parameters())
            dtype = "int8" if self.model.int8 else str(p.dtype).removeprefix("torch.")
            self._info = EngineInfo(name=self.name, parameters=sum(t.numel() for t in self.model.parameters()),
                                    dtype=dtype, device=str(p.device),
                                    scores_edits=True,
                                    languages=self.model_config.languages)
        return self._info

    @property
    def sampler(self) -> SamplerConfig:
        """The sampler settings a request without its own uses."""
        return self.config.sampler

    def with_sampler(self, **changes) -> SamplerConfig:
        """Change the default sampler settings in place (e.g. the seed); returns the new ones."""
        self.config = replace(self.config, sampler=self.config.sampler.with_(**changes))
        return self.config.sampler

    @property
    def interleavable(self) -> bool:
        """Whether batches may run in turn, step by step (`infill_steps`): not with a static
        step, whose one workspace per shape holds a single batch's context."""
        return self.steps is None

    def dynamic_steps(self) -> None:
        """Run every step dynamically from now on, without the static (CUDA-graph) step: a
        scheduler that merges several batches' forwards (`run_forwards`) needs them to take
        turns, which one static workspace per shape cannot (`interleavable` becomes True)."""
        self.steps = None

    @torch.inference_mode()
    def run_forwards(self, forwards: list[Forward]) -> None:
        """The step forwards that several runs of `infill_steps` paused at (each yields its
        `Forward`), run as one pass (ragged.py); each run then reads its own `hidden`."""
        run_together(forwards)

    # -- infill --------------------------------------------------------------------------

    def infill(self, prefix: str, suffix: str = "", extra: str = "", *, drafts=(), sampler: SamplerConfig | None = None,
               on_preview: Callable[[Preview], None] | None = None, cancel=None, cache_key: str = "default",
               stop: Callable[[str], bool] | None = None, lookup: Lookup | None = None) -> Completion:
        return self.infill_batch([InfillRequest(prefix, suffix, extra, tuple(drafts), lookup)], sampler=sampler,
                                 on_preview=on_preview, cancel=cancel, cache_key=cache_key, stop=stop)[0]

    def infill_batch(self, requests: list[InfillRequest], *, sampler: SamplerConfig | None = None,
                     on_preview: Callable[[Preview], None] | None = None, cancel=None, cache_key: str = "default",
                     stop: Callable[[str], bool] | None = None) -> list[Completion]:
        """Fill every request's span in one batch; each request tries every candidate span length.
        `infill_steps` is the same, pausing after each denoising step."""
        return drain(self.infill_steps(requests, sampler=sampler, on_preview=on_preview, cancel=cancel,
                                       cache_key=cache_key, stop=stop))

    @torch.inference_mode()  # entered again at every resumption (torch wraps generator functions)
    def infill_steps(self, requests: list[InfillRequest], *, sampler: SamplerConfig | None = None,
                     on_preview: Callable[[Preview], None] | None = None, cancel=None, cache_key: str = "default",
                     stop: Callable[[str], bool] | None = None
                     ) -> Generator[Forward | None, None, list[Completion]]:
        """`infill_batch` as a generator that pauses after every denoising step (yielding None;
        causal models decode in one go), for a scheduler that steps several batches in turn.
        Before a step's forward it yields that `Forward` (ragged.py): the scheduler runs it,
        alone (`Forward.run`) or with other batches' (`run_forwards`), before resuming; a
        Forward left unrun is run by the batch itself. Two batches in
        turn must not share a document's context keys/values (`cache_key`) nor, on CUDA, the
        static step's workspace (`steps`): `interleavable` says whether the engine has one.

        `stop` and `cache_key` apply to requests without their own (`InfillRequest.stop`,
        `.cache_key`). A single request reuses its document's context keys/values; in a batch of
        several, each request with its own `cache_key` does (diffusion models; causal ones reuse
        only in single-request batches)."""
        if not requests:
            return []
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        scfg = sampler or self.config.sampler
        t0 = time.perf_counter()
        prepared = [self._prepare(r, scfg) for r in requests]
        rows, owners, sources = self._rows(requests, prepared, scfg)
        batch = make_batch(rows, self._pad_id, self.device)
        tokenize_ms = (time.perf_counter() - t0) * 1000
        run = _Run(scfg, owners, prepared, None, cancel, [r.stop or stop for r in requests], on_preview,
                   self._cache_models(requests, prepared))
        self._reuse(run, requests, cache_key)
        if self.model_config.is_causal:
            out, alive = self._decode(batch, run, requests)
        else:
            out, alive = yield from self._denoise(batch, run)
        self._record_reuse(run, out)
        source_of = {id(row): s for row, s in zip(rows, sources)}  # rows survive pruning as the same objects
        row_sources = [source_of[id(row)] for row in out.batch.rows]
        best = self._winners(out, alive, row_sources, scfg)
        total_ms = (time.perf_counter() - t0) * 1000
        results = []
        for i in range(len(requests)):
            score, r = best[i]
            if i in out.hopeless:  # given up early (a hopeless estimate, or out of steps)
                score = float("-inf")
            drafts = sum(1 for o, s in zip(owners, sources) if o == i and s >= 0)
            results.append(self._completion(out, i, r, score, prepared[i], row_sources[r], drafts, scfg,
                                            tokenize_ms, total_ms))
            cache = run.caches.get(i)
            results[-1].stats.cache_queries = 0 if cache is None else cache.queries
        return results

    def _reuse(self, run: "_Run", requests: list[InfillRequest], cache_key: str) -> None:
        """The document caches a run reuses: a single request's (its own key, else the batch's);
        in a batch of several (diffusion models only), each request that names its own key."""
        if not self.config.reuse_cache:
            return
        if len(requests) == 1:
            run.reuse = self._context_cache(requests[0].cache_key or cache_key)
        elif not self.model_config.is_causal:
            keyed = {i: self._context_cache(r.cache_key) for i, r in enumerate(requests) if r.cache_key}
            run.reuses = {i: c for i, c in keyed.items() if c is not None}

    def _record_reuse(self, run: "_Run", out: Denoised) -> None:
        if run.reuse is not None:
            self._contexts.record(out.reused)
        for i in run.reuses:
            self._contexts.record(out.reused_by.get(i, 0))

    def context_stats(self) -> dict:
        """The document key/value store: documents, tokens held, hits and misses so far."""
        return self._contexts.stats()

    def _cache_models(self, requests: list[InfillRequest], prepared: list[_Prepared]) -> dict[int, CacheModel]:
        if not self.config.cache.enabled:
            return {}
        return {i: CacheModel(r.lookup, self.tokenizer, p.healed, self.config.cache)
                for i, (r, p) in enumerate(zip(requests, prepared)) if r.lookup is not None}

    def _rows(self, requests: list[InfillRequest], prepared: list[_Prepared],
              scfg: SamplerConfig) -> tuple[list[Row], list[int], list[int]]:
        """Every candidate row: per request one per span length, then one per usable draft.
        Also the request of each row and its draft index (-1 for all-mask rows)."""
        rows, owners, sources = [], [], []
        for i, (r, p) in enumerate(zip(requests, prepared)):
            for length in scfg.candidate_lengths:
                rows.append(build_row(self.model_config, p.prefix, p.suffix, p.extra, length))
                owners.append(i)
                sources.append(-1)
            if self.model_config.is_causal:
                continue  # causal models decode left to right: drafts are verified there (_decode)
            for d, ids in enumerate(self._draft_ids(r.drafts, p, scfg)):
                rows.append(seed_row(build_row(self.model_config, p.prefix, p.suffix, p.extra, len(ids)), ids))
                owners.append(i)
                sources.append(d)
        return rows, owners, sources

    def _decode(self, batch: Batch, run: "_Run", requests: list[InfillRequest]) -> tuple[Denoised, list[int]]:
        """Causal models: left to right, greedy decoding verifying the requests' drafts and
        prompt-lookup drafts several tokens a forward (SamplerConfig.lookup, speculative.py).
        Returns the output and the request of each row."""
        rule, on_preview, owners, prepared = run.stop_rule(), run.on_preview, run.owners, run.prepared
        stop = None if rule is None else (lambda b, ids: rule(owners[b], self._text(ids, prepared[owners[b]])))
        on_step = None if on_preview is None else \
            (lambda step, b, x, done, counts: self._emit_ar(step, b, x, done, counts, owners, prepared, on_preview))
        drafter = None
        if self.model_config.is_blockwise and run.scfg.self_draft and run.scfg.temperature == 0:
            # Its own drafts, verified by its clean stream (drafting.py); prompt lookup first.
            block = min(run.scfg.draft_block or self.model_config.block_size, self.model_config.block_size)
            drafter = Drafter(block, self.model_config.mask_token_id, self._pad_id) if block >= 2 else None
        if drafter is None and self.model_config.is_blockwise and not run.scfg.self_draft:
            # several tokens a forward, by the model's own blocks (self-drafting with a temperature:
            # the clean stream samples token by token below)
            out = decode_blocks(self.model, batch, run.scfg, block=self.model_config.block_size,
                                mask_id=self.model_config.mask_token_id, end_ids=self._end_ids, pad_id=self._pad_id,
                                banned=self._banned, first_allowed=run.first_allowed, owners=owners,
                                vocab_limit=self._vocab_limit, reuse=run.reuse, cancel=run.cancel, stop=stop,
                                on_step=on_step, caches=run.caches)
            return out, owners
        sources = None
        # Greedy only: a verified block gives each token what a one-token forward gives it (int8
        # linears included: causal models quantize each row alone, int8.py).
        if run.scfg.lookup and run.scfg.temperature == 0:
            sources = {i: LookupSource(self._draft_ids(r.drafts, p, run.scfg), p.prefix, [p.extra, p.suffix])
                       for i, (r, p) in enumerate(zip(requests, prepared))}
        elif drafter is not None:
            sources = {}  # its own drafts only
        out = decode(self.model, batch, run.scfg, end_ids=self._end_ids, pad_id=self._pad_id, banned=self._banned,
                     first_allowed=run.first_allowed, owners=owners, vocab_limit=self._vocab_limit, reuse=run.reuse,
                     cancel=run.cancel, caches=run.caches, stop=stop, sources=sources, on_step=on_step,
                     drafter=drafter)
        return out, owners

    def _denoise(self, batch: Batch, run: "_Run") -> Generator[Forward | None, None, tuple[Denoised, list[int]]]:
        """Masked-diffusion models: all span positions in parallel. Returns the output and the
        request of each row still alive at the end."""
        on_preview, prepared = run.on_preview, run.prepared
        denoiser = Denoiser(self.model, run.scfg, run.owners, self._end_ids, self._pad_id, self._banned,
                            run.first_allowed, self._vocab_limit, run.reuse, run.cancel,
                            head=None if self.kernels is None else self.kernels.head_confidence, steps=self.steps,
                            caches=run.caches, reuses=run.reuses,
                            on_step=None if on_preview is None else
                            (lambda step, d, b, x, m, lp: self._emit(step, d.alive, b, x, m, lp, prepared, on_preview)))
        scfg = run.scfg
        if scfg.window_lookup and scfg.span_window and scfg.temperature == 0 and not run.caches:
            denoiser.lookup = WindowLookup({i: LookupSource([], p.prefix, [p.extra, p.suffix])
                                            for i, p in enumerate(prepared)}, scfg.lookup_tokens, scfg.lookup_ngram)
        stop = run.stop_rule()
        if stop is not None:
            denoiser.stop = lambda b, ids: stop(denoiser.alive[b], self._text(ids, prepared[denoiser.alive[b]]))
        out = yield from denoiser.run_steps(batch)
        return out, denoiser.alive

    def _winners(self, out: Denoised, alive: list[int], sources: list[int],
                 scfg: SamplerConfig) -> dict[int, tuple[float, int]]:
        """request -> (mean log-prob, row) of the candidate that wins: the one scoring of every
        row when there is one (drafts with their bonus), else each row's commit log-probs."""
        best: dict[int, tuple[float, int]] = {}
        # A request scores its rows only when it has something to compare (several rows or a
        # draft), as it would alone, whatever the other requests of the batch needed.
        compared = {req for req in alive if alive.count(req) > 1}
        compared |= {req for req, s in zip(alive, sources) if s >= 0}
        for r, req in enumerate(alive):
            if out.score is not None and req in compared:
                lp = float(out.score[r])
                if sources[r] >= 0:
                    lp += scfg.draft_bonus
            else:
                lp = self._mean_logp(out.logp[r], out.x[r], out.batch.rows[r].length, out.batch.span_at)
            if req not in best or lp > best[req][0]:
                best[req] = (lp, r)
        return best

    def _completion(self, out: Denoised, req: int, r: int, score: float, p: _Prepared, source: int, drafts: int,
                    scfg: SamplerConfig, tokenize_ms: float, total_ms: float) -> Completion:
        """Row `r`'s text and stats; empty (abstained) when its score is below the bar."""
        row = out.batch.rows[r]  # (request `req`'s winning row)
        ids, confs = self._span(out.x[r], out.conf[r], row.length, out.batch.span_at)
        c = Completion(self._text(ids, p), ids, confs, row.length, healed=p.healed,
                       score=score - (scfg.draft_bonus if source >= 0 else 0.0))
        # With the draft bonus: a draft is evidence too. A request given up early abstains whatever
        # the bar (out of steps, its span is unfinished).
        if score < scfg.min_score or req in out.hopeless:
            c.text, c.token_ids, c.confidences, c.abstained = "", [], [], True
        c.stats = Stats(context_tokens=len(row.ctx_ids) + out.batch.span_at,
                        reused_tokens=out.reused_by.get(req, 0) if out.reused_by else out.reused,
                        span_tokens=len(c.token_ids), steps=out.steps, forwards=out.forwards, rows=out.rows_run,
                        tokenize_ms=tokenize_ms, encode_ms=out.encode_ms, generate_ms=out.generate_ms,
                        total_ms=total_ms, drafts=drafts, draft=source,
                        draft_kept=0 if out.kept is None else int(out.kept[r]),
                        window_steps=out.window_steps, positions=out.positions, lookup_kept=out.lookup_kept,
                        guess_kept=out.guess_kept)
        return c

    @torch.inference_mode()
    def score(self, prefix: str, suffix: str, texts: list[str], extra: str = "") -> list[float]:
        """Mean log-prob of each text (and its end) as the span between prefix and suffix, all
        in one batch sharing one context: how likely the model finds each alternative for the
        same place. Used to compare a region as it is with a proposed edit of it."""
        if not texts:
            return []
        scfg = self.config.sampler.with_(heal=False)
        tok = self.tokenizer
        seqs = [tok.encode(t) + [self._draft_end] for t in texts]
        p = self._prepare(InfillRequest(prefix, suffix, extra), scfg.with_(span=max(len(s) for s in seqs)))
        rows = [seed_row(build_row(self.model_config, p.prefix, p.suffix, p.extra, len(s)), s) for s in seqs]
        batch = make_batch(rows, self._pad_id, self.device)
        if self.model_config.is_causal:  # teacher-forced: the clean stream's own probabilities
            got = score_spans(self.model, batch, vocab_limit=self._vocab_limit, banned=self._banned)
            return [float(v) for v in got]
        denoiser = Denoiser(self.model, scfg, [0] * len(rows), self._end_ids, self._pad_id, self._banned, {},
                            self._vocab_limit)
        return [float(v) for v in denoiser.judge(batch)]

    def context_budget(self, span: int) -> int:
        """Context tokens (prefix + suffix + extra) a request with this span may carry.

        Positions past what the model was trained on are out of distribution, so the budget
        stops there too. Callers that cut windows at line boundaries within this budget keep
        the engine from trimming mid-line (which would shift the context every keystroke).
        """
        limit = min(self.config.max_context_tokens, self.model_config.max_position_embeddings)
        return max(1, limit - span - 4 - len(self.model_config.segment_tokens))

    def count_tokens(self, text: str) -> int:
        """Tokens `text` takes in this model's tokenizer (context budgets are in tokens)."""
        return len(self.tokenizer.encode(text))

    def forget(self, cache_key: str) -> None:
        """Drop the keys/values kept for `cache_key` (e.g. a closed document)."""
        self._contexts.forget(cache_key)

    # -- helpers -------------------------------------------------------------------------

    def _prepare(self, r: InfillRequest, scfg: SamplerConfig) -> _Prepared:
        tok = self.tokenizer
        prefix, suffix, extra = tok.encode(r.prefix), tok.encode(r.suffix), tok.encode(r.extra)
        healed, allowed = "", None
        if scfg.heal and prefix and prefix[-1] not in tok.special_ids:
            text = tok.decode([prefix[-1]])
            if text and "\ufffd" not in text and r.prefix.endswith(text):
                ids = tok.ids_starting_with(text)
                if ids:
                    healed, allowed = text, torch.tensor(ids, dtype=torch.long, device=self.device)
                    prefix = prefix[:-1]
        prefix, suffix, extra = fit(prefix, suffix, extra, self.context_budget(max(scfg.candidate_lengths)))
        return _Prepared(prefix, suffix, extra, healed, allowed)

    def _draft_ids(self, drafts: tuple[str, ...], p: _Prepared, scfg: SamplerConfig) -> list[list[int]]:
        """Token ids of each usable draft, ending with an end token (the draft's length is the
        span length it proposes); drafts that are empty, repeated or too long are skipped."""
        out, seen = [], set()
        limit = max(scfg.candidate_lengths) * 2
        for text in drafts:
            if not text or text in seen:
                continue
            seen.add(text)
            ids = self.tokenizer.encode_healed(p.healed, text)
            if ids is not None and len(ids) < limit:
                out.append(ids + [self._draft_end])
        return out

    def _context_cache(self, key: str) -> ContextCache | None:
        if self.model_config.attention == "full":
            return None  # context keys/values depend on the span: never exact across requests
        return self._contexts.get(key)

    def _span(self, x: torch.Tensor, conf: torch.Tensor, length: int, at: int) -> tuple[list[int], list[float]]:
        ids = x[at:at + length].tolist()
        confs = conf[at:at + length].tolist()
        ends = set(self._end_ids.tolist())
        for n, t in enumerate(ids):
            if t in ends:
                return ids[:n], confs[:n]
        return ids, confs

    def _mean_logp(self, logp: torch.Tensor, x: torch.Tensor, length: int, at: int) -> float:
        ids = x[at:at + length].tolist()
        ends = set(self._end_ids.tolist())
        n = next((k + 1 for k, t in enumerate(ids) if t in ends), len(ids))  # include the end token
        return float(logp[at:at + n].mean()) if n else 0.0

    def _text(self, ids: list[int], p: _Prepared) -> str:
        text = self.tokenizer.decode(ids)
        if p.healed and text.startswith(p.healed):
            text = text[len(p.healed):]
        return text

    def _emit(self, step, alive, batch, x, masked, logp, prepared, on_preview) -> None:
        best: dict[int, tuple[float, int]] = {}
        for r, req in enumerate(alive):
            done = ~masked[r]
            score = float(logp[r][done].mean()) if bool(done.any()) else 0.0
            if req not in best or score > best[req][0]:
                best[req] = (score, r)
        ends = set(self._end_ids.tolist())
        for req, (_, r) in sorted(best.items()):
            row = batch.rows[r]
            ids = []
            for a in range(batch.span_at, batch.span_at + row.length):
                if masked[r, a]:
                    continue
                t = int(x[r, a])
                if t in ends:
                    break
                ids.append(t)
            on_preview(Preview(req, step, self._text(ids, prepared[req]), int(masked[r].sum())))

    def _emit_ar(self, step, batch, x, done, counts, owners, prepared, on_preview) -> None:
        for r, req in enumerate(owners):
            ids, _ = self._span(x[r], x[r].float(), counts[r], 1)
            masked = 0 if done[r] else batch.rows[r].length - counts[r]
            on_preview(Preview(req, step, self._text(ids, prepared[req]), masked))
