"""Scheduling of background work per key (a document): latest wins, at most two in flight.

`await scheduler.run(key, fn)` runs `fn(flag)` on the inference executor and returns
(True, value), or (False, None) as soon as a newer `run` for the same key arrives: the
newer one sets the older one's CancelFlag (the engine checks it between steps) and the
older caller returns at once without waiting for its job to wind down. A key never has
more than `max_in_flight` jobs queued or running; a request over the cap waits for a
slot (and gives up the moment it is superseded). If the awaiting task itself is
cancelled (`$/cancelRequest`), its flag is set and CancelledError propagates.

A `deadline` (time.monotonic() seconds, the end of the request's time budget) bounds the
wait, and rides on the job's flag a little sooner (pipeline.engine_deadline: the engine stops
at the next step past it, leaving time to finish that step and post-process): a job not done
by the deadline (queued behind another, or in a forward that outlasts it) is stopped and the
caller gets (True, None) at once (`expired` counts them).

It knows nothing of LSP, documents or models; jobs run on the executor it is given.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Callable

from redraft.engine import CancelFlag

from ..core.pipeline import engine_deadline

MAX_IN_FLIGHT = 2


@dataclass
class _Ticket:
    flag: CancelFlag = field(default_factory=CancelFlag)
    superseded: asyncio.Event = field(default_factory=asyncio.Event)

    def supersede(self) -> None:
        self.flag.cancel()
        self.superseded.set()


@dataclass
class _Lane:
    latest: _Ticket | None = None
    running: int = 0  # jobs submitted to the executor and not yet returned
    waiters: list[asyncio.Future] = field(default_factory=list)


class Scheduler:
    def __init__(self, executor: Executor, max_in_flight: int = MAX_IN_FLIGHT):
        self.executor = executor
        self.max_in_flight = max_in_flight
        self.peak_in_flight = 0
        self.expired = 0  # requests answered at their deadline without their job's result
        self._lanes: dict[str, _Lane] = {}

    @property
    def running(self) -> int:
        """Jobs submitted to the executor and not yet returned, over all keys."""
        return sum(lane.running for lane in self._lanes.values())

    def supersede(self, key: str) -> None:
        """Cancel whatever is pending for `key` (a newer request, or the document closed)."""
        lane = self._lanes.get(key)
        if lane is not None and lane.latest is not None:
            lane.latest.supersede()
            lane.latest = None

    async def run(self, key: str, fn: Callable[[CancelFlag], Any], deadline: float | None = None
                  ) -> tuple[bool, Any]:
        lane = self._lanes.setdefault(key, _Lane())
        self.supersede(key)
        me = _Ticket()
        me.flag.deadline = None if deadline is None else engine_deadline(deadline)
        lane.latest = me
        loop = asyncio.get_running_loop()
        try:
            while lane.running >= self.max_in_flight:
                slot = loop.create_future()
                lane.waiters.append(slot)
                if not await self._first(slot, me, _left(deadline)):
                    if me.superseded.is_set():
                        return False, None
                    self.expired += 1
                    return True, None
            if me.superseded.is_set():
                return False, None
            lane.running += 1
            self.peak_in_flight = max(self.peak_in_flight, lane.running)
            job = loop.run_in_executor(self.executor, fn, me.flag)
            job.add_done_callback(lambda f: self._finished(key, lane, f))
            if not await self._first(job, me, _left(deadline)):
                if me.superseded.is_set():
                    return False, None
                me.flag.cancel()  # past its budget: queued, it never starts; running, it stops
                self.expired += 1
                return True, None
            return True, job.result()
        except asyncio.CancelledError:
            me.flag.cancel()  # the job may still be queued or running: stop it between steps
            raise
        finally:
            if lane.latest is me:
                lane.latest = None

    async def _first(self, fut: asyncio.Future, me: _Ticket, timeout: float | None = None) -> bool:
        """Wait for `fut` or for `me` to be superseded (or `timeout` seconds); True when `fut`
        finished first."""
        sup = asyncio.ensure_future(me.superseded.wait())
        try:
            await asyncio.wait({fut, sup}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sup.cancel()
        return fut.done() and not me.superseded.is_set()

    def _finished(self, key: str, lane: _Lane, f: asyncio.Future) -> None:
        lane.running -= 1
        if not f.cancelled():
            f.exception()  # retrieved here so an abandoned job's error is not reported twice
        waiters, lane.waiters = lane.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)
        if lane.running == 0 and lane.latest is None and self._lanes.get(key) is lane:
            del self._lanes[key]


def _left(deadline: float | None) -> float | None:
    """Seconds a request may still wait for its job (None: no budget)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
