"""Freed memory goes back to the system, at most once per interval, after engine jobs."""

from __future__ import annotations

import os
import sys

import pytest

from redraft.server.core.heap import HeapTrim


def rss_mb() -> float:
    for line in open(f"/proc/{os.getpid()}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_trims_at_most_once_per_interval():
    now = [100.0]
    trim = HeapTrim(every=10.0, clock=lambda: now[0])
    if trim._trim is None:
        pytest.skip("not glibc")
    trim.after_job()
    now[0] = 109.0
    trim.after_job()
    assert trim.trims == 0  # within the interval since it was made
    now[0] = 111.0
    trim.after_job()
    trim.after_job()
    assert trim.trims == 1
    now[0] = 125.0
    trim.after_job()
    assert trim.trims == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_trim_gives_back_freed_pages_that_stay_resident_otherwise():
    now = [0.0]
    trim = HeapTrim(every=1.0, clock=lambda: now[0])
    if trim._trim is None:
        pytest.skip("not glibc")
    blocks = [bytearray(64_000) for _ in range(2_500)]  # ~160 MB in blocks below mmap's threshold
    del blocks[::2]  # half freed, scattered between live ones: the heap cannot shrink from its top
    before = rss_mb()
    now[0] = 2.0
    trim.after_job()
    assert trim.trims == 1
    assert rss_mb() < before - 40
    del blocks
