"""One engine shared by many callers, their requests run together: batching across users.

`BatchingEngine(engine)` has the Engine interface (`infill_batch`, `infill`, `score`, `forget`,
`info`, `sampler`, `with_sampler`, `context_budget`, `count_tokens`, `name`); any number of
threads call it at once. One loop thread owns the engine: it takes every waiting caller's
requests that share sampler settings (up to `max_rows` candidate rows), runs them as one
`Engine.infill_batch` and hands each caller its own completions. `score` and `forget` run on
the same thread between batches, so the engine is never used by two threads at once.

This is batch-at-a-time, not continuous batching: a request that arrives while a batch runs
waits for that batch to finish and goes into the next one. Joining a running batch between
denoising steps would need a step-level engine API that merges rows of different context
lengths into a running `Running` state (its keys/values, static step and per-request
settings); the engine has none today. A batch's denoising ends when its slowest row ends: a
short request batched with a long one waits for it, and its finished rows are still computed
at every step until then (on a CPU, where a step costs about the same per row batched or not,
that is why batching gains little there; dropping finished rows is the engine's next step).

What each caller keeps as it would alone: its own stop rule and document key (each request
carries them; a document's context keys/values are reused inside a batch of several callers,
see `engine.batch.encode_contexts`), its previews (renumbered to its own requests), its cancel
flag: a caller whose flag is set leaves at once with Cancelled and its results are dropped; the
batch stops early only when every caller in it has left. A batch that fails for another reason
is run again one caller at a time, so one caller's bad input fails only that caller.

It knows nothing of HTTP, Ray or documents; `stats()` says what it did (batch sizes, callers
waiting and running, the engine's context-cache hits).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable

from redraft.engine import Cancelled, Completion, InfillRequest, Preview, SamplerConfig

log = logging.getLogger(__name__)

POLL_S = 0.02  # how often a waiting caller looks at its cancel flag


@dataclass(eq=False)
class _Job:
    """One caller's call: its requests and settings, and where its answer goes."""

    requests: list[InfillRequest]
    sampler: SamplerConfig
    on_preview: Callable[[Preview], None] | None
    cancel: object | None
    cache_key: str
    stop: Callable[[str], bool] | None
    done: threading.Event = field(default_factory=threading.Event)
    result: list[Completion] | None = None
    error: BaseException | None = None
    left: bool = False  # the caller stopped waiting (cancelled)

    @property
    def gone(self) -> bool:
        return self.left or (self.cancel is not None and self.cancel.is_set())

    def rows(self) -> int:
        """Candidate rows this job adds to a batch (at most: repeated drafts are dropped later)."""
        per = len(self.sampler.candidate_lengths)
        return sum(per + len({d for d in r.drafts if d}) for r in self.requests)

    def merged(self) -> list[InfillRequest]:
        """The job's requests carrying its stop rule and, for a single request, its document key:
        what the engine would have applied to them in a batch of their own."""
        key = self.cache_key if len(self.requests) == 1 else None
        return [replace(r, stop=r.stop or self.stop, cache_key=r.cache_key or key) for r in self.requests]

    def finish(self, result: list[Completion] | None = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()


@dataclass(eq=False)
class _Call:
    """Work that needs the engine alone (score, forget), run between batches."""

    fn: Callable[[], object]
    done: threading.Event = field(default_factory=threading.Event)
    result: object = None
    error: BaseException | None = None


class _AllGone:
    """The batch's cancel flag: set once every caller in it has left."""

    def __init__(self, jobs: list[_Job]):
        self.jobs = jobs

    def is_set(self) -> bool:
        return all(j.gone for j in self.jobs)


class BatchingEngine:
    def __init__(self, engine, max_rows: int = 64):
        self.engine = engine
        self.max_rows = max(1, max_rows)
        self._lock = threading.Condition()
        self._jobs: list[_Job] = []
        self._calls: list[_Call] = []
        self._running: list[_Job] = []
        self._closed = False
        self._sizes: Counter[int] = Counter()  # requests per batch -> batches
        self._callers: Counter[int] = Counter()  # callers per batch -> batches
        self._counts: Counter[str] = Counter()
        self._thread = threading.Thread(target=self._loop, name="redraft-batcher", daemon=True)
        self._thread.start()

    # -- the Engine interface --------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.engine.name

    @property
    def path(self):
        return getattr(self.engine, "path", None)

    @property
    def sampler(self) -> SamplerConfig:
        return self.engine.sampler

    def with_sampler(self, **changes) -> SamplerConfig:
        return self.engine.with_sampler(**changes)

    def info(self):
        return self.engine.info()

    def context_budget(self, span: int) -> int:
        return self.engine.context_budget(span)

    def count_tokens(self, text: str) -> int:
        return self.engine.count_tokens(text)

    def infill(self, prefix: str, suffix: str = "", extra: str = "", *, drafts=(), sampler: SamplerConfig | None = None,
               on_preview: Callable[[Preview], None] | None = None, cancel=None, cache_key: str = "default",
               stop: Callable[[str], bool] | None = None, lookup=None) -> Completion:
        return self.infill_batch([InfillRequest(prefix, suffix, extra, tuple(drafts), lookup)], sampler=sampler,
                                 on_preview=on_preview, cancel=cancel, cache_key=cache_key, stop=stop)[0]

    def infill_batch(self, requests: list[InfillRequest], *, sampler: SamplerConfig | None = None,
                     on_preview: Callable[[Preview], None] | None = None, cancel=None, cache_key: str = "default",
                     stop: Callable[[str], bool] | None = None) -> list[Completion]:
        """The engine's answer for these requests, run in a batch with other callers' requests.
        Raises Cancelled as soon as `cancel` is set, without waiting for the batch."""
        if not requests:
            return []
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        job = _Job(list(requests), sampler or self.engine.sampler, on_preview, cancel, cache_key, stop)
        with self._lock:
            self._ensure_open()
            self._jobs.append(job)
            self._lock.notify_all()
        while not job.done.wait(POLL_S):
            if job.gone:
                job.left = True
                with self._lock:
                    self._counts["cancelled"] += 1
                raise Cancelled()
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def score(self, prefix: str, suffix: str, texts: list[str], extra: str = "") -> list[float]:
        return self._alone(lambda: self.engine.score(prefix, suffix, texts, extra))

    def forget(self, cache_key: str) -> None:
        self._alone(lambda: self.engine.forget(cache_key))

    # -- what it did -----------------------------------------------------------------------

    def stats(self) -> dict:
        """Batches run and their sizes, callers waiting and running, the context cache."""
        with self._lock:
            sizes = dict(sorted(self._sizes.items()))
            out = {"batches": sum(sizes.values()), "requests_per_batch": sizes,
                   "callers_per_batch": dict(sorted(self._callers.items())),
                   "max_batch": max(sizes, default=0),
                   "queued": len(self._jobs), "running": sum(not j.gone for j in self._running),
                   **{k: self._counts[k] for k in ("requests", "cancelled", "errors", "rerun_alone")}}
        contexts = getattr(self.engine, "context_stats", None)
        out["context_cache"] = contexts() if contexts is not None else None
        return out

    @property
    def active(self) -> int:
        """Callers waiting or running now."""
        with self._lock:
            return len(self._jobs) + sum(not j.gone for j in self._running)

    def close(self) -> None:
        """Stop the loop; callers still waiting get an error."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._thread.join(timeout=30)

    # -- the loop (its own thread: the only one that uses the engine) -------------------------

    def _ensure_open(self) -> None:
        if self._closed:
            raise RuntimeError("the batching engine is closed")

    def _alone(self, fn: Callable[[], object]):
        call = _Call(fn)
        with self._lock:
            self._ensure_open()
            self._calls.append(call)
            self._lock.notify_all()
        call.done.wait()
        if call.error is not None:
            raise call.error
        return call.result

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not (self._jobs or self._calls or self._closed):
                    self._lock.wait()
                if self._closed:
                    self._fail_waiting()
                    return
                calls, self._calls = self._calls, []
                batch = self._take() if not calls else []
                self._running = batch
            for call in calls:
                self._call(call)
            if batch:
                self._run(batch)
            with self._lock:
                self._running = []

    def _take(self) -> list[_Job]:
        """The next batch (under the lock): the oldest job still wanted, then every later one with
        the same sampler settings while the rows fit; cancelled jobs are dropped unrun."""
        for job in [j for j in self._jobs if j.gone]:
            self._jobs.remove(job)
            job.finish(error=Cancelled())
        if not self._jobs:
            return []
        first = self._jobs[0]
        batch, rows = [first], first.rows()
        for job in self._jobs[1:]:
            if job.sampler == first.sampler and rows + job.rows() <= self.max_rows:
                batch.append(job)
                rows += job.rows()
        self._jobs = [j for j in self._jobs if j not in batch]
        return batch

    def _call(self, call: _Call) -> None:
        try:
            call.result = call.fn()
        except Exception as e:  # handed to the caller, who raises it
            call.error = e
        call.done.set()

    def _run(self, jobs: list[_Job]) -> None:
        try:
            results = self._infill(jobs)
        except Cancelled:
            for job in jobs:
                job.finish(error=Cancelled())
            return
        except Exception as e:
            if len(jobs) == 1:
                log.warning("an engine call failed: %s", e)
                with self._lock:
                    self._counts["errors"] += 1
                jobs[0].finish(error=e)
                return
            with self._lock:
                self._counts["rerun_alone"] += 1
            for job in jobs:  # find whose input fails; the others still get their answers
                self._run([job])
            return
        for job, result in zip(jobs, results):
            job.finish(result=result)

    def _infill(self, jobs: list[_Job]) -> list[list[Completion]]:
        """One engine batch of every job's requests; each job's completions in its order."""
        requests, owner = [], []  # owner[i]: (job, the job's own request index)
        for job in jobs:
            for k, r in enumerate(job.merged()):
                requests.append(r)
                owner.append((job, k))
        with self._lock:
            self._sizes[len(requests)] += 1
            self._callers[len(jobs)] += 1
            self._counts["requests"] += len(requests)
        on_preview = None
        if any(j.on_preview is not None for j in jobs):
            def on_preview(p: Preview) -> None:
                job, k = owner[p.request]
                if job.on_preview is not None and not job.gone:
                    try:
                        job.on_preview(replace(p, request=k))
                    except Exception:  # one caller's preview sink must not stop the others' batch
                        log.exception("a preview callback failed")
        out = self.engine.infill_batch(requests, sampler=jobs[0].sampler, on_preview=on_preview,
                                       cancel=_AllGone(jobs), cache_key=jobs[0].cache_key)
        per_job: dict[_Job, list[Completion]] = {j: [] for j in jobs}
        for (job, _), completion in zip(owner, out):
            per_job[job].append(completion)
        return [per_job[j] for j in jobs]

    def _fail_waiting(self) -> None:
        closed = RuntimeError("the batching engine is closed")
        for job in self._jobs:
            job.finish(error=closed)
        for call in self._calls:
            call.error = closed
            call.done.set()
        self._jobs, self._calls = [], []
