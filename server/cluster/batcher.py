"""One engine shared by many callers, their requests run together: batching across users.

`BatchingEngine(engine)` has the Engine interface (`infill_batch`, `infill`, `score`, `forget`,
`info`, `sampler`, `with_sampler`, `context_budget`, `count_tokens`, `name`); any number of
threads call it at once. One loop thread owns the engine and runs one denoising step of every
running caller's batch at a time. Each step's forwards are one: every running batch pauses at
its step's forward (`Engine.infill_steps` yields it), those forwards run as one pass over all
their rows (`Engine.run_forwards`: the token-wise matmuls over every batch's tokens together,
attention per batch over its own context keys/values, engine/ragged.py), and each batch resumes
to pick and commit its own tokens. Between steps the loop starts the callers that arrived
meanwhile (up to `max_rows` candidate rows running in all) and drops those that are done or
whose callers left. So a request starts at the next step, its rows join the running forward,
and it leaves as soon as its own rows are done, not when the slowest caller's are: continuous
batching at the granularity of a step. A newcomer's context is encoded on its own (its first
pause: the others wait that long). Two callers of one document never run at once (one key/value
cache): the later waits for the earlier. An engine with a static step (one workspace per shape,
on CUDA: `Engine.interleavable` is False; `Engine.dynamic_steps` lifts it) cannot interleave:
there the callers waiting together start as one batch (one forward per step for all of them)
once the running one has finished.

What each caller keeps as it would alone: its own stop rule and document key (each request
carries them; a document's context keys/values are reused inside a batch of several callers,
see `engine.batch.encode_contexts`), its previews (renumbered to its own requests), its cancel
flag: a caller whose flag is set leaves at once with Cancelled and its results are dropped; a
batch stops between steps once every caller in it has left. A batch that fails for another
reason is run again one caller at a time, so one caller's bad input fails only that caller.
`score` and `forget` run on the loop between steps.

It knows nothing of HTTP, Ray or documents; `stats()` says what it did (batch sizes, callers
waiting and running, steps shared by several batches, forwards run as one and how many batches
each held, the engine's context-cache hits).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable, Generator

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

    def keys(self) -> set[str]:
        """The documents whose context keys/values its requests use."""
        return {r.cache_key for r in self.merged() if r.cache_key} | {self.cache_key}

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
        self._forward_sizes: Counter[int] = Counter()  # callers whose step forwards ran as one -> times
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
            per_forward = dict(sorted(self._forward_sizes.items()))
            out = {"batches": sum(sizes.values()), "requests_per_batch": sizes,
                   "callers_per_batch": dict(sorted(self._callers.items())),
                   "callers_per_forward": per_forward,
                   # the most callers computed together: in one batch, or in one step forward
                   "max_batch": max(max(sizes, default=0), max(per_forward, default=0)),
                   "queued": len(self._jobs), "running": sum(not j.gone for j in self._running),
                   **{k: self._counts[k] for k in ("requests", "cancelled", "errors", "rerun_alone",
                                                   "shared_steps", "most_in_turn", "forwards",
                                                   "most_rows_per_forward")}}
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
        active: list[_Group] = []  # batches started and not finished, stepped in turn
        while True:
            with self._lock:
                while not (self._jobs or self._calls or self._closed or active):
                    self._lock.wait()
                if self._closed:
                    for group in active:
                        group.steps.close()
                    self._fail_waiting([j for g in active for j in g.jobs])
                    return
                calls, self._calls = self._calls, []
                admitted = self._admit(active)
                self._running = [j for g in active for j in g.jobs] + [j for batch in admitted for j in batch]
            for call in calls:  # score, forget: between steps (they use no running batch's state)
                self._call(call)
            active += [self._start(batch) for batch in admitted]
            if len(active) > 1:
                with self._lock:
                    self._counts["shared_steps"] += 1
                    self._counts["most_in_turn"] = max(self._counts["most_in_turn"], len(active))
            # Every batch to its next forward (newcomers encode their context first), those
            # forwards as one, then every batch past it to the end of its step.
            active = [g for g in active if not self._advance(g)]
            self._forward([g for g in active if g.pending is not None])
            active = [g for g in active if g.pending is None or not self._advance(g)]
            with self._lock:
                self._running = [j for g in active for j in g.jobs]

    def _admit(self, active: list["_Group"]) -> list[list[_Job]]:
        """Batches to start now (under the lock). On an engine whose batches take turns, every
        waiting caller starts as a batch of its own (its step forwards join the running ones',
        and it leaves when its own rows are done, not the slowest caller's), oldest first, while
        the rows fit beside the running ones, skipping a caller whose document is in a running
        batch (they would share its keys/values) until that one ends. On one that cannot, when
        nothing runs, the callers waiting together that fit start as one batch."""
        self._drop_gone()
        if not getattr(self.engine, "interleavable", False):
            return [] if active or not self._jobs else [self._take(set())]
        keys = set().union(*(g.keys for g in active)) if active else set()
        rows = sum(g.rows for g in active)
        batches: list[list[_Job]] = []
        for job in list(self._jobs):
            if job.keys() & keys:
                continue
            if (active or batches) and rows + job.rows() > self.max_rows:
                break
            self._jobs.remove(job)
            batches.append([job])
            keys |= job.keys()
            rows += job.rows()
        return batches

    def _start(self, jobs: list[_Job]) -> "_Group":
        requests, owner, on_preview = self._requests(jobs)
        if getattr(self.engine, "interleavable", False):
            steps = self.engine.infill_steps(requests, sampler=jobs[0].sampler, on_preview=on_preview,
                                             cancel=_AllGone(jobs), cache_key=jobs[0].cache_key)
        else:
            steps = _at_once(partial(self.engine.infill_batch, requests, sampler=jobs[0].sampler,
                                     on_preview=on_preview, cancel=_AllGone(jobs), cache_key=jobs[0].cache_key))
        return _Group(jobs, steps, owner, set().union(*(j.keys() for j in jobs)), sum(j.rows() for j in jobs))

    def _forward(self, groups: list["_Group"]) -> None:
        """The step forwards these running batches wait at, as one pass over all their rows
        (`Engine.run_forwards`). Should that fail, each batch runs its own on resuming, so an
        error reaches only the batch it belongs to."""
        run = getattr(self.engine, "run_forwards", None)
        if not groups or run is None:
            return
        forwards = [g.pending for g in groups]
        try:
            run(forwards)
        except Exception as e:  # noqa: BLE001 - the batches run their own forwards instead
            log.warning("a merged forward failed (%s); its batches run theirs alone", e)
            for f in forwards:
                f.hidden = None
            return
        rows = sum(f.ids.shape[0] for f in forwards)
        with self._lock:
            self._counts["forwards"] += 1
            self._forward_sizes[sum(len(g.jobs) for g in groups)] += 1
            self._counts["most_rows_per_forward"] = max(self._counts["most_rows_per_forward"], rows)

    def _advance(self, group: "_Group") -> bool:
        """Resume a running batch up to its next pause: the forward of its next step (left in
        `pending`) or the end of a step. True once it has finished (answered or failed)."""
        group.pending = None
        if all(j.gone for j in group.jobs):  # every caller left: stop it between steps
            group.steps.close()
            for job in group.jobs:
                job.finish(error=Cancelled())
            return True
        try:
            group.pending = next(group.steps)
            return False
        except StopIteration as done:
            per_job: dict[_Job, list[Completion]] = {j: [] for j in group.jobs}
            for (job, _), completion in zip(group.owner, done.value):
                per_job[job].append(completion)
            for job in group.jobs:
                job.finish(result=per_job[job])
        except Cancelled:
            for job in group.jobs:
                job.finish(error=Cancelled())
        except Exception as e:
            self._failed(group.jobs, e)
        return True

    def _drop_gone(self) -> None:
        for job in [j for j in self._jobs if j.gone]:
            self._jobs.remove(job)
            job.finish(error=Cancelled())

    def _take(self, busy: set[str]) -> list[_Job]:
        """The next batch (under the lock): the oldest job still wanted, then every later one with
        the same sampler settings while the rows fit and its documents are not `busy`."""
        first = self._jobs[0]
        batch, rows, keys = [first], first.rows(), set(first.keys())
        for job in self._jobs[1:]:
            if job.sampler == first.sampler and rows + job.rows() <= self.max_rows and not job.keys() & (busy | keys):
                batch.append(job)
                rows += job.rows()
                keys |= job.keys()
        self._jobs = [j for j in self._jobs if j not in batch]
        return batch

    def _call(self, call: _Call) -> None:
        try:
            call.result = call.fn()
        except Exception as e:  # handed to the caller, who raises it
            call.error = e
        call.done.set()

    def _failed(self, jobs: list[_Job], e: Exception) -> None:
        """A batch failed for a reason of its own: run its callers one by one (blocking), so only
        those whose input fails get the error."""
        if len(jobs) == 1:
            log.warning("an engine call failed: %s", e)
            with self._lock:
                self._counts["errors"] += 1
            jobs[0].finish(error=e)
            return
        with self._lock:
            self._counts["rerun_alone"] += 1
        for job in jobs:
            requests, owner, on_preview = self._requests([job])
            try:
                job.finish(result=self.engine.infill_batch(requests, sampler=job.sampler, on_preview=on_preview,
                                                           cancel=_AllGone([job]), cache_key=job.cache_key))
            except Cancelled:
                job.finish(error=Cancelled())
            except Exception as alone:
                self._failed([job], alone)

    def _requests(self, jobs: list[_Job]) -> tuple[list[InfillRequest], list[tuple[_Job, int]], Callable | None]:
        """Every job's requests in one list, the (job, its own index) of each, and the previews'
        router to their callers (renumbered to each caller's requests)."""
        requests, owner = [], []  # owner[i]: (job, the job's own request index)
        for job in jobs:
            for k, r in enumerate(job.merged()):
                requests.append(r)
                owner.append((job, k))
        with self._lock:
            self._sizes[len(requests)] += 1
            self._callers[len(jobs)] += 1
            self._counts["requests"] += len(requests)
        if not any(j.on_preview is not None for j in jobs):
            return requests, owner, None

        def on_preview(p: Preview) -> None:
            job, k = owner[p.request]
            if job.on_preview is not None and not job.gone:
                try:
                    job.on_preview(replace(p, request=k))
                except Exception:  # one caller's preview sink must not stop the others' batch
                    log.exception("a preview callback failed")
        return requests, owner, on_preview

    def _fail_waiting(self, running: list[_Job]) -> None:
        closed = RuntimeError("the batching engine is closed")
        for job in self._jobs + running:
            job.finish(error=closed)
        for call in self._calls:
            call.error = closed
            call.done.set()
        self._jobs, self._calls = [], []


@dataclass(eq=False)
class _Group:
    """A batch started on the engine: its step generator and whose requests it holds."""

    jobs: list[_Job]
    steps: Generator
    owner: list[tuple[_Job, int]]
    keys: set[str]  # the documents whose keys/values it uses
    rows: int
    pending: object | None = None  # the engine's Forward it paused at, waiting to be run


def _at_once(fn: Callable[[], list[Completion]]) -> Generator[None, None, list[Completion]]:
    """A whole engine call as a step generator of no pauses (an engine that cannot take turns)."""
    return fn()
    yield  # noqa: unreachable - makes this a generator function
