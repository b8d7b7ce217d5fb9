"""Issue 39 item 3: the big files' parts are read the lowest part number first across the
files under way (A0, B0, A1, B1, ...), so that every file's md5 keeps up with its parts and
the download does not end with one file's whole window of parts left to hash; what is
pending when the pool shuts down is cancelled, what is under way finishes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import CancelledError

import pytest

from zarrchive.client.download import PartsPool


def test_pending_parts_run_lowest_rank_first_across_files() -> None:
    pool = PartsPool(1)
    gate = threading.Event()
    ran: list[str] = []

    def hold() -> None:
        gate.wait()

    def part(name: str) -> Callable[[], None]:
        return lambda: ran.append(name)

    busy = pool.submit(0, hold)  # the one thread held while the files submit
    futures = [
        pool.submit(index, part(f"{file}{index}"))
        for file in "ABC"  # each file submits all its parts, one file after another
        for index in range(3)
    ]
    gate.set()
    for future in [busy, *futures]:
        future.result(timeout=60)
    pool.shutdown()
    assert ran == ["A0", "B0", "C0", "A1", "B1", "C1", "A2", "B2", "C2"]


def test_shutdown_cancels_what_is_pending_and_waits_for_what_runs() -> None:
    pool = PartsPool(1)
    started, gate = threading.Event(), threading.Event()
    done: list[int] = []

    def hold() -> None:
        started.set()
        gate.wait()
        done.append(0)

    under_way = pool.submit(0, hold)
    pending = pool.submit(1, lambda: done.append(1))
    assert started.wait(60)
    closing = threading.Thread(target=pool.shutdown)
    closing.start()
    gate.set()
    closing.join(60)
    assert not closing.is_alive()
    assert under_way.result(timeout=0) is None and done == [0]
    with pytest.raises(CancelledError):
        pending.result(timeout=0)


def test_a_failed_part_is_its_future_s_exception() -> None:
    pool = PartsPool(2)

    def fail() -> None:
        raise OSError("disk full")

    try:
        with pytest.raises(OSError, match="disk full"):
            pool.submit(0, fail).result(timeout=60)
        assert pool.submit(1, lambda: None).result(timeout=60) is None  # the thread lives on
    finally:
        pool.shutdown()
