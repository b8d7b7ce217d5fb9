"""The RQ path against the real Redis (ZARRCHIVE_TEST_REDIS_URL, default 127.0.0.1:6379/0)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from tests.helpers.rq_workers import REDIS_URL

from zarrchive.config import Settings
from zarrchive.jobs import JobLane, RedisJobQueue, job_queue_from_settings, run_worker

pytestmark = pytest.mark.redis

HERE = Path(__file__).parent
ROOT = HERE.parents[1]  # the job functions are tests.helpers.job_functions:...
SRC = ROOT / "src"
APPEND = "tests.helpers.job_functions:append_line"
FLAKY = "tests.helpers.job_functions:fail_then_append"
RECORD_IMPORTED = "tests.helpers.job_functions:record_dandischema_imported"


@pytest.fixture(scope="module")
def redis_conn() -> Iterator[Redis]:
    conn = Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        conn.ping()
    except Exception as exc:
        pytest.skip(f"Redis is not reachable at {REDIS_URL} ({exc}); set ZARRCHIVE_TEST_REDIS_URL")
    yield conn
    conn.close()


@pytest.fixture
def queue_name(redis_conn: Redis) -> Iterator[str]:
    name = f"zarrchive-test-{uuid.uuid4().hex}"
    yield name
    for key in redis_conn.scan_iter(f"*{name}*"):
        redis_conn.delete(key)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


WORKER_CODE = "import typer; from zarrchive.cli.worker import worker; typer.run(worker)"


def worker_env(queue_name: str) -> dict[str, str]:
    """A worker's environment: the archive's queue name *queue_name*, Redis from the flag."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(SRC)])}
    env.pop("ZARRCHIVE_REDIS_URL", None)
    env["ZARRCHIVE_REDIS_QUEUE"] = queue_name
    return env


def run_cli_worker(queue_name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``zarrchive worker --burst [ARGS]`` in a subprocess (the CLI function through typer)."""
    return subprocess.run(
        [sys.executable, "-c", WORKER_CODE, "--redis-url", REDIS_URL, "--burst", *args],
        env=worker_env(queue_name),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_worker_cli_runs_jobs_and_coalesces(
    redis_conn: Redis, queue_name: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    q = RedisJobQueue(REDIS_URL, queue_name=queue_name, max_retries=0, result_ttl=60)
    first = q.enqueue(APPEND, {"path": str(out), "text": "unkeyed"})
    ids = [
        q.enqueue(APPEND, {"path": str(out), "text": f"checksum-{i}"}, key="zarr-1")
        for i in range(10)
    ]
    q.enqueue(APPEND, {"path": str(out), "text": "other"}, key="zarr-2")
    assert len(set([first, *ids])) == 11
    assert q.queue.count == 3  # nine replaced jobs were removed from the queue
    q.close()
    result = run_cli_worker(queue_name)
    assert result.returncode == 0, result.stderr
    assert lines(out) == ["unkeyed", "checksum-9", "other"]


def test_worker_retries_a_failing_job(redis_conn: Redis, queue_name: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    q = RedisJobQueue(
        redis_conn, queue_name=queue_name, max_retries=2, retry_intervals=[0], result_ttl=60
    )
    q.enqueue(FLAKY, {"path": str(out), "text": "ok", "failures": 2})
    assert run_worker(REDIS_URL, queue_name=queue_name, burst=True, logging_level="WARNING")
    assert lines(out) == ["ok"]
    assert Path(str(out) + ".attempts").read_text() == "3"


def test_worker_gives_up_after_retries(redis_conn: Redis, queue_name: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    q = RedisJobQueue(
        redis_conn, queue_name=queue_name, max_retries=1, retry_intervals=[0], failure_ttl=60
    )
    job_id = q.enqueue(FLAKY, {"path": str(out), "text": "never", "failures": 5})
    run_worker(REDIS_URL, queue_name=queue_name, burst=True, logging_level="WARNING")
    assert lines(out) == []
    assert Path(str(out) + ".attempts").read_text() == "2"
    assert job_id in q.queue.failed_job_registry.get_job_ids()


def test_a_started_job_is_not_replaced(redis_conn: Redis, queue_name: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    q = RedisJobQueue(redis_conn, queue_name=queue_name, result_ttl=60)
    q.enqueue(APPEND, {"path": str(out), "text": "first"}, key="k")
    # simulate a worker having popped the job (started): it is no longer in the queue list
    popped = redis_conn.lpop(q.queue.key)
    assert popped is not None
    q.enqueue(APPEND, {"path": str(out), "text": "second"}, key="k")
    assert q.queue.count == 1
    run_worker(REDIS_URL, queue_name=queue_name, burst=True, logging_level="WARNING")
    assert lines(out) == ["second"]


def test_factory_uses_redis_when_configured(queue_name: str) -> None:
    q = job_queue_from_settings(
        Settings.from_env({"ZARRCHIVE_REDIS_URL": REDIS_URL}), queue_name=queue_name
    )
    assert isinstance(q, RedisJobQueue)
    assert q.queue.name == queue_name
    q.close()


def test_worker_cli_without_redis_url_explains() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ZARRCHIVE_REDIS_URL"}
    env["PYTHONPATH"] = str(SRC)
    code = "import typer; from zarrchive.cli.worker import worker; typer.run(worker)"
    result = subprocess.run(
        [sys.executable, "-c", code, "--burst"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "set ZARRCHIVE_REDIS_URL or pass --redis-url" in result.stderr


def test_cli_lanes_are_the_jobs_lanes() -> None:
    from zarrchive.cli import worker
    from zarrchive.jobs import DEFAULT_QUEUE, JobLane

    assert tuple(lane.value for lane in JobLane) == worker.LANES
    assert Settings.from_env({}).redis_queue == DEFAULT_QUEUE


def test_each_lane_has_its_own_rq_queue_and_keys(
    redis_conn: Redis, queue_name: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    q = RedisJobQueue(redis_conn, queue_name=queue_name, max_retries=0, result_ttl=60)
    assert q.queues[JobLane.ZARR].name == queue_name
    assert q.queues[JobLane.CONTENT].name == f"{queue_name}-content"
    assert str(q) == f"RQ queues {queue_name} (zarr), {queue_name}-content (content)"
    q.enqueue(APPEND, {"path": str(out), "text": "zarr"}, key="k")
    for i in range(3):  # coalesced in its lane, not with the Zarr lane's job of the key
        q.enqueue(APPEND, {"path": str(out), "text": f"content-{i}"}, key="k", lane=JobLane.CONTENT)
    assert (q.queues[JobLane.ZARR].count, q.queues[JobLane.CONTENT].count) == (1, 1)
    assert redis_conn.get(f"zarrchive:jobs:{queue_name}-content:key:k") is not None


def test_a_worker_consumes_the_lanes_it_is_given(
    redis_conn: Redis, queue_name: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    q = RedisJobQueue(redis_conn, queue_name=queue_name, max_retries=0, result_ttl=60)
    q.enqueue(APPEND, {"path": str(out), "text": "content"}, key="c", lane=JobLane.CONTENT)
    q.enqueue(APPEND, {"path": str(out), "text": "zarr"}, key="z")
    result = run_cli_worker(queue_name, "--queue", "zarr")
    assert result.returncode == 0, result.stderr
    assert lines(out) == ["zarr"]  # the content job waits for a worker of its lane
    assert q.queues[JobLane.CONTENT].count == 1
    result = run_cli_worker(queue_name, "--queue", f"{queue_name}-content")  # by queue name
    assert result.returncode == 0, result.stderr
    assert lines(out) == ["zarr", "content"]
    # a worker of every lane (the default) takes a Zarr's job first
    q.enqueue(APPEND, {"path": str(out), "text": "content 2"}, lane=JobLane.CONTENT)
    q.enqueue(APPEND, {"path": str(out), "text": "zarr 2"})
    assert run_worker(REDIS_URL, queue_name=queue_name, burst=True, logging_level="WARNING")
    assert lines(out)[2:] == ["zarr 2", "content 2"]


def test_worker_cli_refuses_an_unknown_queue(queue_name: str) -> None:
    result = run_cli_worker(queue_name, "--queue", "conversions")
    assert result.returncode == 1
    assert "--queue 'conversions' names no lane: give zarr or content" in result.stderr
    assert f"{queue_name}, {queue_name}-content" in result.stderr


def test_jobs_of_one_key_never_overlap_on_two_workers(queue_name: str, tmp_path: Path) -> None:
    """A keyed job that started is not replaced; the next one of its key, popped by a second
    worker, waits until the first has finished (jobs of one Zarr run one after the other)."""
    out = tmp_path / "out.txt"
    q = RedisJobQueue(REDIS_URL, queue_name=queue_name, result_ttl=60)
    q.enqueue(
        "tests.helpers.job_functions:span", {"path": str(out), "text": "A", "seconds": 3}, key="k"
    )
    env = worker_env(queue_name)
    command = [sys.executable, "-c", WORKER_CODE, "--redis-url", REDIS_URL]
    first = subprocess.Popen([*command, "--burst"], env=env)
    try:
        deadline = time.monotonic() + 120  # generous: the machine may be loaded
        while "start A" not in lines(out):
            assert time.monotonic() < deadline, "the first worker did not start job A"
            time.sleep(0.05)
        q.enqueue(
            "tests.helpers.job_functions:span",
            {"path": str(out), "text": "B", "seconds": 0},
            key="k",
        )
        second = subprocess.run([*command, "--burst"], env=env, timeout=120, check=False)
        assert second.returncode == 0
    finally:
        first.wait(120)
    assert lines(out) == ["start A", "end A", "start B", "end B"]
    q.close()


def test_the_worker_imports_dandischema_once_for_its_jobs(
    redis_conn: Redis, queue_name: str, tmp_path: Path
) -> None:
    """Validation jobs run in forked children: the worker imports dandischema before forking
    them (importing it per job took 12-14 s under load); a Zarr-only worker does not."""
    out = tmp_path / "out"
    q = RedisJobQueue(REDIS_URL, queue_name=queue_name, max_retries=0, result_ttl=60)
    for i in range(2):
        q.enqueue(RECORD_IMPORTED, {"path": str(out)}, key=f"v{i}", lane=JobLane.CONTENT)
    q.enqueue(RECORD_IMPORTED, {"path": str(out)}, key="zarr", lane=JobLane.ZARR)
    q.close()
    result = run_cli_worker(queue_name, "--queue", "zarr")
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in lines(out)] == ["imported=False"]
    result = run_cli_worker(queue_name)
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in lines(out)] == ["imported=False", *["imported=True"] * 2]
