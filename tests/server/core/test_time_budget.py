"""The time budget of a request (the `max_time` setting): the engine stops at the step its
deadline has passed and keeps what each row committed before its first masked position; a
job whose budget ran out while it waited never reaches the engine; the scheduler answers a
request at its deadline, whatever runs ahead of it on the one worker. With a tiny random
model, which is sure of no token and so commits one a step."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from redraft.engine import CancelFlag, Engine
from redraft.server.core.context import Mode, text_snapshot
from redraft.server.core.inference import answer
from redraft.server.core.settings import ServerConfig, parse
from redraft.server.lsp.scheduler import Scheduler

CONFIG = ServerConfig(drafts="off", names=False, line_tokens=16, block_tokens=16)
BLOCK = "def area(width, height):\n    "


class StepsLeft(CancelFlag):
    """A budget counted in deadline checks (one per step) instead of milliseconds."""

    def __init__(self, checks: int) -> None:
        super().__init__()
        self.checks = checks

    def expired(self) -> bool:
        self.checks -= 1
        return self.checks < 0


def test_the_engine_stops_at_the_budget_with_what_it_committed(tiny_model):
    engine = Engine.load(str(tiny_model), device="cpu", dtype="float32")
    sampler = engine.sampler.with_(span=16, lengths=())
    full = engine.infill(BLOCK, "\n", sampler=sampler, cache_key="full")
    assert full.stats.steps > 4 and len(full.token_ids) > 3
    cut = engine.infill(BLOCK, "\n", sampler=sampler, cancel=StepsLeft(3), cache_key="cut")
    assert cut.stats.steps == 3  # the fourth check found the budget spent
    assert 1 <= len(cut.token_ids) <= 3 and not cut.abstained
    spent = engine.infill(BLOCK, "\n", sampler=sampler, cancel=CancelFlag(deadline=time.monotonic() - 1),
                          cache_key="spent")
    assert spent.stats.steps == 0 and spent.text == ""


def test_a_request_out_of_time_before_it_starts_never_reaches_the_engine(tiny_model):
    engine = Engine.load(str(tiny_model), device="cpu", dtype="float32")
    calls = []
    infill = engine.infill
    engine.infill = lambda *a, **k: calls.append(1) or infill(*a, **k)
    snap, _ = text_snapshot("file:///b.py", BLOCK, len(BLOCK), CONFIG, "python")
    assert snap.mode is Mode.BLOCK
    got = answer(engine, snap, CancelFlag(deadline=time.monotonic() - 0.001))
    assert got.expired and not got.ran_model and got.edit is None and calls == []
    got = answer(engine, snap, CancelFlag(deadline=time.monotonic() + 60))
    assert not got.expired and got.ran_model and calls == [1]
    got = answer(engine, snap, StepsLeft(3))  # one check before the engine, two steps, then out of time
    assert got.expired and got.ran_model and got.stats.steps == 2


def test_a_request_queued_behind_a_long_job_answers_at_its_deadline():
    async def scenario():
        executor = ThreadPoolExecutor(max_workers=1)
        scheduler, ran = Scheduler(executor), []
        release = threading.Event()

        def long_job(flag):  # another document's job that outlasts the second request's budget
            release.wait(5)
            return "long"

        def short_job(flag):
            ran.append(flag.is_set())  # answer() returns at once on a set flag
            return "short"
        first = asyncio.ensure_future(scheduler.run("a.py", long_job))
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        done, value = await scheduler.run("b.py", short_job, deadline=t0 + 0.1)
        waited = time.monotonic() - t0
        long_still_running = not first.done()  # the answer did not wait for the job ahead of it
        release.set()
        assert await first == (True, "long")
        await asyncio.get_running_loop().run_in_executor(executor, lambda: None)
        executor.shutdown()
        return done, value, waited, ran, scheduler.expired, long_still_running
    done, value, waited, ran, expired, long_still_running = asyncio.run(scenario())
    assert (done, value, expired) == (True, None, 1)
    assert long_still_running and waited >= 0.1  # answered at its deadline, not before, not after the long job
    assert ran == [True]  # stopped while queued: when the worker reached it, its flag said so


def test_max_time_and_exclude_settings():
    cfg, problems = parse({"maxTime": 20, "exclude": ["*.secret.py"]})
    assert problems == [] and cfg.max_time == 20 and cfg.exclude == ("*.secret.py",)
    assert cfg.excludes("file:///p/a.secret.py") and cfg.excludes("file:///p/.env")  # the defaults stay
    assert not cfg.excludes("file:///p/main.py")
    off, _ = parse({"excludeSecrets": False}, cfg)
    assert not off.excludes("file:///p/.env") and off.excludes("/p/a.secret.py")
    assert ServerConfig().max_time == 500
    _, problems = parse({"maxTime": 0, "exclude": [3]})
    assert len(problems) == 2
