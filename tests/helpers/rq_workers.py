"""``zarrchive worker`` processes on a test queue, configured like a deployment's."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from redis import Redis
from rq import Queue, Worker

from tests.helpers.server_process import zarrchive_command
from zarrchive.config import Settings
from zarrchive.jobs import JobLane

ROOT = Path(__file__).parents[2]  # the workers import tests.helpers.* job functions
#: The tests' Redis (``ZARRCHIVE_TEST_REDIS_URL``; a local one by default).
REDIS_URL = os.environ.get("ZARRCHIVE_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"


def redis_skip_reason(url: str) -> str | None:
    """None if Redis answers at *url*, else why not (for ``pytest.skip``)."""
    conn = Redis.from_url(url, socket_connect_timeout=2)
    try:
        conn.ping()
    except Exception as exc:
        return (
            f"Redis is not reachable at {url} ({exc}): jobs on several workers go through "
            "Redis; start it or set ZARRCHIVE_TEST_REDIS_URL"
        )
    finally:
        conn.close()
    return None


@contextmanager
def fresh_queue_name(prefix: str, url: str = REDIS_URL) -> Iterator[str]:
    """A queue name no other test uses (*prefix*, then a random part), every Redis key of it
    deleted afterwards; the test is skipped when Redis does not answer at *url*."""
    reason = redis_skip_reason(url)
    if reason is not None:
        pytest.skip(reason)
    name = f"{prefix}-{uuid.uuid4().hex}"
    try:
        yield name
    finally:
        conn = Redis.from_url(url)
        for key in conn.scan_iter(f"*{name}*"):
            conn.delete(key)
        conn.close()


def worker_environment(settings: Settings) -> dict[str, str]:
    """The ``ZARRCHIVE_*`` environment of a worker of *settings*' archive (and its queue)."""
    assert settings.redis_url
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "src")]),
        ZARRCHIVE_DATA_DIR=str(settings.data_dir),
        ZARRCHIVE_DATABASE_URL=settings.database_url,
        ZARRCHIVE_S3_ENDPOINT_URL=str(settings.s3_endpoint_url),
        ZARRCHIVE_S3_BUCKET=settings.s3_bucket,
        ZARRCHIVE_S3_EMBARGO_BUCKET=settings.s3_embargo_bucket,
        ZARRCHIVE_S3_ACCESS_KEY_ID=str(settings.s3_access_key_id),
        ZARRCHIVE_S3_SECRET_ACCESS_KEY=str(settings.s3_secret_access_key),
        ZARRCHIVE_REDIS_URL=settings.redis_url,
        ZARRCHIVE_REDIS_QUEUE=settings.redis_queue,
    )
    return env


class Workers:
    """*count* ``zarrchive worker`` processes (logs in *log_dir*, one file each, named after
    *name*), of every lane or of *lane* (``--queue LANE``); stopped by :meth:`stop`."""

    def __init__(
        self,
        settings: Settings,
        log_dir: Path,
        count: int = 2,
        *,
        lane: str | None = None,
        name: str = "worker",
        env: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.count = count
        self.lane = lane
        self.name = name
        self.env = env or {}
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, timeout: float = 300) -> None:
        """Start the workers and wait until each listens on the queue."""
        env = {**worker_environment(self.settings), **self.env}
        lanes = ["--queue", self.lane] if self.lane else []
        for i in range(self.count):
            with (self.log_dir / f"{self.name}-{i}.log").open("ab") as log:
                self.processes.append(
                    subprocess.Popen(
                        [*zarrchive_command(), "worker", "--log-level", "INFO", *lanes],
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        assert self.settings.redis_url
        conn = Redis.from_url(self.settings.redis_url)
        try:
            lane = JobLane(self.lane or JobLane.ZARR)  # a worker of every lane is on this one too
            queue = Queue(lane.queue_name(self.settings.redis_queue), connection=conn)
            deadline = time.monotonic() + timeout
            while len(Worker.all(queue=queue)) < self.count:
                for process in self.processes:
                    assert process.poll() is None, self.logs()
                assert time.monotonic() < deadline, f"the workers did not start\n{self.logs()}"
                time.sleep(0.1)
        finally:
            conn.close()

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted(self.log_dir.glob(f"{self.name}-*.log"))
        )
