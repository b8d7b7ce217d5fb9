"""The in-process job queue: runs, retries with backoff, coalesces by key, closes."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from zarrchive.config import Settings
from zarrchive.errors import ConfigurationError, InvalidJob, JobQueueClosed
from zarrchive.jobs import InProcessJobQueue, JobLane, import_string, job_queue_from_settings

APPEND = "tests.helpers.job_functions:append_line"
FLAKY = "tests.helpers.job_functions:fail_then_append"
SLOW = "tests.helpers.job_functions:slow_append"
SPAN = "tests.helpers.job_functions:span"
GATED = "tests.helpers.job_functions:gated_span"


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.01)


@pytest.fixture
def queue() -> Iterator[InProcessJobQueue]:
    q = InProcessJobQueue(max_retries=2, backoff=0.01, max_backoff=0.05)
    yield q
    q.close(wait=False, timeout=5)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_runs_a_job(queue: InProcessJobQueue, tmp_path: Path) -> None:
    out = tmp_path / "out"
    job_id = queue.enqueue(APPEND, {"path": str(out), "text": "hello"})
    assert len(job_id) == 32
    assert queue.join(timeout=60)
    assert lines(out) == ["hello"]
    assert (queue.succeeded, queue.failed) == (1, 0)


def test_retries_a_failing_job_then_succeeds(
    queue: InProcessJobQueue, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="zarrchive.jobs"):
        start = time.monotonic()
        queue.enqueue(FLAKY, {"path": str(out), "text": "ok", "failures": 2})
        assert queue.join(timeout=60)
        assert time.monotonic() - start >= 0.01 + 0.02  # exponential backoff
    assert lines(out) == ["ok"]
    assert Path(str(out) + ".attempts").read_text() == "3"
    assert (queue.succeeded, queue.failed) == (1, 0)
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2
    assert "attempt 1 of 3" in retries[0]


def test_gives_up_after_max_retries(
    queue: InProcessJobQueue, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "out"
    with caplog.at_level(logging.ERROR, logger="zarrchive.jobs"):
        queue.enqueue(FLAKY, {"path": str(out), "text": "never", "failures": 10})
        assert queue.join(timeout=60)
    assert lines(out) == []
    assert Path(str(out) + ".attempts").read_text() == "3"  # 1 + 2 retries
    assert (queue.succeeded, queue.failed) == (0, 1)
    assert any("failed after 3 attempts" in r.getMessage() for r in caplog.records)


def test_coalesces_by_key(queue: InProcessJobQueue, tmp_path: Path) -> None:
    out = tmp_path / "out"
    busy = tmp_path / "busy"
    # keep the single worker thread busy so the keyed jobs stay queued
    queue.enqueue(SLOW, {"path": str(busy), "text": "busy", "seconds": 0.3})
    ids = [
        queue.enqueue(APPEND, {"path": str(out), "text": f"checksum-{i}"}, key="zarr-1")
        for i in range(10)
    ]
    queue.enqueue(APPEND, {"path": str(out), "text": "other"}, key="zarr-2")
    assert len(set(ids)) == 10
    # zarr-1 and zarr-2 (one each), plus the slow job if it has not started yet
    assert queue.pending in (2, 3)
    assert queue.join(timeout=60)
    assert lines(out) == ["checksum-9", "other"]
    assert lines(busy) == ["busy"]


def test_a_started_job_is_not_replaced(queue: InProcessJobQueue, tmp_path: Path) -> None:
    out = tmp_path / "out"
    queue.enqueue(SLOW, {"path": str(out), "text": "first", "seconds": 0.2}, key="k")
    while queue.pending:  # wait until it has started
        threading.Event().wait(0.005)
    queue.enqueue(APPEND, {"path": str(out), "text": "second"}, key="k")
    assert queue.join(timeout=60)
    assert lines(out) == ["first", "second"]


def test_close_drains_then_refuses(tmp_path: Path) -> None:
    out = tmp_path / "out"
    q = InProcessJobQueue()
    for i in range(5):
        q.enqueue(APPEND, {"path": str(out), "text": str(i)})
    q.close(wait=True, timeout=10)
    assert lines(out) == ["0", "1", "2", "3", "4"]
    with pytest.raises(JobQueueClosed, match="closed"):
        q.enqueue(APPEND, {"path": str(out), "text": "late"})


def test_close_without_wait_drops_queued_jobs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    q = InProcessJobQueue()
    q.enqueue(SLOW, {"path": str(out), "text": "running", "seconds": 0.2})
    for i in range(5):
        q.enqueue(APPEND, {"path": str(out), "text": str(i)})
    while q.pending == 6:
        threading.Event().wait(0.005)
    q.close(wait=False, timeout=10)
    assert lines(out) == ["running"]


def test_validation_at_enqueue(queue: InProcessJobQueue, tmp_path: Path) -> None:
    with pytest.raises(InvalidJob, match="not an import string"):
        queue.enqueue("tests.helpers.job_functions.append_line", {})
    with pytest.raises(InvalidJob, match="cannot import module 'no_such_module_xyz'"):
        queue.enqueue("no_such_module_xyz:f", {})
    with pytest.raises(InvalidJob, match="has no function 'nope'"):
        queue.enqueue("tests.helpers.job_functions:nope", {})
    with pytest.raises(InvalidJob, match="JSON-serialisable"):
        queue.enqueue(APPEND, {"path": tmp_path, "text": "x"})
    with pytest.raises(InvalidJob, match="module-level"):
        queue.enqueue(lambda: None, {})
    assert queue.pending == 0


def test_callable_and_kwargs_copy(queue: InProcessJobQueue, tmp_path: Path) -> None:
    from tests.helpers import job_functions as jobs_helpers

    assert import_string(jobs_helpers.append_line) == APPEND
    out = tmp_path / "out"
    kwargs = {"path": str(out), "text": "original"}
    queue.enqueue(jobs_helpers.append_line, kwargs)
    kwargs["text"] = "mutated after enqueue"
    assert queue.join(timeout=60)
    assert lines(out) == ["original"]


def test_factory_picks_the_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    q = job_queue_from_settings(Settings.from_env({}))
    assert isinstance(q, InProcessJobQueue)
    q.close()
    url = "redis://127.0.0.1:1/0"  # nothing listens there: the factory connects eagerly
    with pytest.raises(ConfigurationError, match=re.escape(f"cannot reach Redis at '{url}'")):
        job_queue_from_settings(Settings.from_env({"ZARRCHIVE_REDIS_URL": url}))


def test_worker_command_is_registered() -> None:
    import importlib

    from zarrchive.cli import COMMANDS, worker

    entry = COMMANDS["worker"]  # the CLI imports a command's module when it runs
    assert getattr(importlib.import_module(entry.module), entry.attribute) is worker.worker


def test_the_archives_queue_runs_jobs_of_two_keys_at_once(tmp_path: Path) -> None:
    # `zarrchive serve`'s queue: a Zarr's manifest job runs while its apply job still drops
    # staging objects; jobs of one key still never overlap
    q = job_queue_from_settings(Settings.from_env({}))
    assert isinstance(q, InProcessJobQueue)
    out, gate = tmp_path / "out", tmp_path / "gate"
    try:  # the apply job runs until the manifest job has run beside it (events, not time)
        q.enqueue(
            GATED,
            {"path": str(out), "text": "apply", "gate": str(gate), "timeout": 600},
            key="apply:z",
        )
        wait_until(lambda: lines(out) == ["start apply"], "the apply job to start")
        q.enqueue(SPAN, {"path": str(out), "text": "manifest", "seconds": 0.0}, key="manifest:z")
        q.enqueue(SPAN, {"path": str(out), "text": "apply2", "seconds": 0.0}, key="apply:z")
        wait_until(lambda: "end manifest" in lines(out), "the manifest job beside the apply job")
    finally:
        gate.touch()
    try:
        assert q.join(timeout=60)
    finally:
        q.close(wait=False, timeout=5)
    assert lines(out) == [
        "start apply",
        "start manifest",
        "end manifest",
        "end apply",
        "start apply2",
        "end apply2",
    ]


def test_a_lane_runs_while_another_lane_is_fully_occupied(tmp_path: Path) -> None:
    # the Zarr lane's thread runs a job while every thread of the content lane is held
    q = InProcessJobQueue(threads={JobLane.ZARR: 1, JobLane.CONTENT: 2}, max_retries=0)
    held, out, gate = tmp_path / "held", tmp_path / "out", tmp_path / "gate"
    try:
        for name in ("c1", "c2", "c3"):  # the third waits for a content thread
            q.enqueue(
                GATED,
                {"path": str(held), "text": name, "gate": str(gate), "timeout": 600},
                lane=JobLane.CONTENT,
            )
        wait_until(lambda: len(lines(held)) == 2, "both content threads to be held")
        q.enqueue(APPEND, {"path": str(out), "text": "zarr"}, key="apply:z", lane=JobLane.ZARR)
        wait_until(lambda: lines(out) == ["zarr"], "the Zarr lane's job")
        assert sorted(lines(held)) == ["start c1", "start c2"]  # still held, c3 still queued
        assert q.pending == 1
    finally:
        gate.touch()
    assert q.join(timeout=60)
    q.close()
    assert sorted(lines(held)) == sorted(
        f"{e} {n}" for e in ("start", "end") for n in ("c1", "c2", "c3")
    )


def test_keys_coalesce_and_serialize_within_a_lane(tmp_path: Path) -> None:
    q = InProcessJobQueue(threads=2, max_retries=0)
    out, gate = tmp_path / "out", tmp_path / "gate"
    try:
        q.enqueue(
            GATED,
            {"path": str(out), "text": "A", "gate": str(gate), "timeout": 600},
            key="k",
            lane=JobLane.CONTENT,
        )
        wait_until(lambda: lines(out) == ["start A"], "job A to start")
        for text in ("B", "C"):  # queued while A runs: parked, C replaces B
            q.enqueue(
                SPAN, {"path": str(out), "text": text, "seconds": 0}, key="k", lane=JobLane.CONTENT
            )
        time.sleep(0.2)  # the free content thread finds k running
        assert lines(out) == ["start A"]
    finally:
        gate.touch()
    assert q.join(timeout=60)
    q.close()
    assert lines(out) == ["start A", "end A", "start C", "end C"]


def test_every_lane_needs_a_thread() -> None:
    with pytest.raises(
        ConfigurationError, match="at least one thread per lane; none for zarr, content"
    ):
        InProcessJobQueue(threads=0)
    with pytest.raises(ConfigurationError, match="none for content"):
        InProcessJobQueue(threads={JobLane.ZARR: 1})


def test_the_archives_queue_has_the_configured_threads_per_lane() -> None:
    settings = Settings.from_env(
        {"ZARRCHIVE_ZARR_JOB_THREADS": "3", "ZARRCHIVE_CONTENT_JOB_THREADS": "1"}
    )
    q = job_queue_from_settings(settings)
    try:
        assert isinstance(q, InProcessJobQueue)
        assert q.threads == {JobLane.ZARR: 3, JobLane.CONTENT: 1}
        assert str(q) == "in-process (threads per lane: zarr: 3, content: 1)"
    finally:
        q.close()
    default = job_queue_from_settings(Settings.from_env({}))
    assert isinstance(default, InProcessJobQueue)
    assert default.threads == {JobLane.ZARR: 2, JobLane.CONTENT: 2}
    default.close()
    with pytest.raises(ConfigurationError, match="CONTENT_JOB_THREADS"):
        Settings.from_env({"ZARRCHIVE_CONTENT_JOB_THREADS": "0"})
