"""A job queued while another job of its key runs is never lost: it runs after that one
(once, with the newest arguments), without holding a worker meanwhile; and if the worker
running a job dies, the next job of its key still runs.  Both queues: in-process (several
threads) and RQ with two real ``zarrchive worker`` processes on Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from redis import Redis
from tests.helpers.rq_workers import REDIS_URL, redis_skip_reason

from zarrchive.jobs import InProcessJobQueue, JobLane, JobQueue, RedisJobQueue

ROOT = Path(__file__).parents[2]
GATED = "tests.helpers.job_functions:gated_span"
APPEND = "tests.helpers.job_functions:append_line"
#: A deadline for a job's run, generous for a loaded machine (issue #41: not a speed target).
#: The old RQ queue held the second worker until the gate opened: these waits never ended.
PROMPTLY = 120.0

Logs = Callable[[], str]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.05)


class RQWorkers:
    """Two ``zarrchive worker`` processes on a queue of their own."""

    def __init__(self, queue_name: str, log_dir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src")])
        env["ZARRCHIVE_REDIS_QUEUE"] = queue_name  # every lane's RQ queue is named after it
        code = "import typer; from zarrchive.cli.worker import worker; typer.run(worker)"
        command = [sys.executable, "-c", code, "--redis-url", REDIS_URL]
        self.log_dir = log_dir
        self.processes = [
            subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=(log_dir / f"worker-{i}.log").open("ab"),
                stderr=subprocess.STDOUT,
            )
            for i in range(2)
        ]

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.log_dir.glob("worker-*.log"))
        )

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@pytest.fixture(params=["inprocess", "redis"])
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[JobQueue, Logs]]:
    """A queue with two consumers per lane (two threads each, or two RQ workers of every
    lane) and their logs."""
    if request.param == "inprocess":
        local = InProcessJobQueue(threads=2, max_retries=0)
        yield local, lambda: ""
        local.close(wait=False, timeout=5)
        return
    reason = redis_skip_reason(REDIS_URL)
    if reason is not None:
        pytest.skip(reason)
    name = f"zarrchive-rerun-{uuid.uuid4().hex}"
    q = RedisJobQueue(REDIS_URL, queue_name=name, max_retries=0, result_ttl=60, key_lease=3)
    workers = RQWorkers(name, tmp_path)
    try:
        yield q, workers.logs
    finally:
        workers.stop()
        q.close()
        forget_queue(name)


def forget_queue(name: str) -> None:
    conn = Redis.from_url(REDIS_URL)
    for key in conn.scan_iter(f"*{name}*"):
        conn.delete(key)
    conn.close()


@pytest.mark.parametrize("lane", list(JobLane))
def test_a_job_queued_while_its_key_runs_runs_after_it_with_the_newest_arguments(
    queue: tuple[JobQueue, Logs], tmp_path: Path, lane: JobLane
) -> None:
    jobs, logs = queue
    out, other = tmp_path / "out", tmp_path / "other"
    gate = tmp_path / "gate"
    jobs.enqueue(GATED, {"path": str(out), "text": "A", "gate": str(gate)}, key="k", lane=lane)
    wait_until(lambda: "start A" in lines(out), 120, "job A to start")
    for text in ("B", "C"):  # queued while A runs: B, then C (coalesced: C runs)
        jobs.enqueue(GATED, {"path": str(out), "text": text, "gate": str(gate)}, key="k", lane=lane)
        time.sleep(1.0)  # let the free consumer pick it up (and find its key running)
    # the second consumer is not held by the waiting job: other work runs meanwhile
    jobs.enqueue(APPEND, {"path": str(other), "text": "meanwhile"}, key="other", lane=lane)
    wait_until(lambda: lines(other) == ["meanwhile"], PROMPTLY, "another key's job")
    assert lines(out) == ["start A"], logs()  # nothing of key k ran beside A
    gate.touch()
    wait_until(lambda: len(lines(out)) >= 4, PROMPTLY, "the job queued meanwhile")
    time.sleep(1.5)  # a second rerun would show by now
    assert lines(out) == ["start A", "end A", "start C", "end C"], logs()


def test_the_next_job_of_a_key_runs_when_the_worker_running_it_dies(tmp_path: Path) -> None:
    reason = redis_skip_reason(REDIS_URL)
    if reason is not None:
        pytest.skip(reason)
    name = f"zarrchive-rerun-{uuid.uuid4().hex}"
    q = RedisJobQueue(REDIS_URL, queue_name=name, max_retries=0, result_ttl=60, key_lease=2)
    workers = RQWorkers(name, tmp_path)
    out, gate = tmp_path / "out", tmp_path / "gate"
    try:
        q.enqueue(GATED, {"path": str(out), "text": "A", "gate": str(gate)}, key="k")
        wait_until(lambda: "start A" in lines(out), 120, "job A to start")
        q.enqueue(APPEND, {"path": str(out), "text": "B"}, key="k")
        time.sleep(1.0)  # the other worker finds k running: B is to run after A
        # A's work horse dies (killed, out of memory...): it never gives its key up
        os.kill(int(Path(f"{out}.pid").read_text()), signal.SIGKILL)
        # its lease expires and B runs (not an hour later, when the old lock expired)
        wait_until(lambda: "B" in lines(out), PROMPTLY, f"B after A died\n{workers.logs()}")
        assert lines(out) == ["start A", "B"], workers.logs()
    finally:
        gate.touch()
        workers.stop()
        q.close()
        forget_queue(name)
