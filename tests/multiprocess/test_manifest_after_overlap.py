"""Two RQ workers, a Zarr's apply and manifest jobs forced to overlap: the manifest job runs
while the apply holds the batch (it finds the Zarr busy) and still runs when the apply ends
and queues the next manifest job.  That job runs after it, without holding the other
worker meanwhile (another Zarr's batch is applied and gets its manifest at once), and
every resting checksum gets exactly one manifest.

Nothing here is timed: the test waits for each event (a marker file, a manifest row, the
workers idle) with a generous deadline.  The old bug (a job waiting for its key inside a
worker, up to the job timeout of an hour) deadlocks this test: the first manifest job is
released only once the other Zarr has its manifest, which needs the held worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis import Redis
from rq import Queue, Worker
from sqlalchemy import select
from tests.helpers.api_uploads import complete, info, open_and_put
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.overlap_jobs import wait_for
from tests.helpers.rq_workers import REDIS_URL, Workers, fresh_queue_name
from tests.helpers.s3 import on_s3
from tests.helpers.waiting import wait_until

from zarrchive.db.models import ZarrManifest
from zarrchive.jobs import RedisJobQueue
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads import APPLY_JOB

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

#: How long to wait for a job's work (seconds): the jobs take seconds here, but each runs in
#: a forked work horse and the dandiset's validation job (dandischema, 12-14 s on a loaded
#: machine) may take the free worker first; a generous bound, not a speed target.
JOB_WAIT = 240.0


@pytest.fixture
def queue_name() -> Iterator[str]:
    with fresh_queue_name("zarrchive-overlap") as name:
        yield name


def manifest_rows(archive: Archive, zarr_id: str) -> list[tuple[str, str]]:
    with archive.db.session() as session:
        return [
            (row.checksum, row.listing_checksum)
            for row in session.scalars(select(ZarrManifest).where(ZarrManifest.zarr_id == zarr_id))
        ]


def jobs_idle(conn: Redis, queue_name: str) -> bool:
    """No job queued on the test's queues (a queue per lane, named after it) and none
    running on their workers."""
    queues = [q for q in Queue.all(connection=conn) if q.name.startswith(queue_name)]
    if any(q.count for q in queues):
        return False
    workers = [
        w
        for w in Worker.all(connection=conn)
        if any(name.startswith(queue_name) for name in w.queue_names())
    ]
    return bool(workers) and all(w.get_state() != "busy" for w in workers)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_overlapping_apply_and_manifest_jobs_leave_one_prompt_manifest_per_resting_checksum(
    api: httpx.Client,
    zarr_id: str,
    dandiset: str,
    archive: Archive,
    held: HeldJobQueue,
    queue_name: str,
    tmp_path: Path,
) -> None:
    other = api.post("/api/zarr/", json={"name": "other.zarr", "dandiset": dandiset})
    assert other.status_code == 200, other.text
    other_id = other.json()["zarr_id"]
    settings = archive.settings.with_overrides(redis_url=REDIS_URL, redis_queue=queue_name)
    signals = tmp_path / "signals"
    signals.mkdir()
    workers = Workers(settings, tmp_path, count=2)
    workers.start()  # before the batches: their start-up sweep finds none to apply
    queue = RedisJobQueue(REDIS_URL, queue_name=queue_name)
    try:
        for zarr in (zarr_id, other_id):  # verified and queued; their apply jobs held here
            open_and_put(api, zarr, {"a/0": zarr.encode(), "a/1": b"1", "b": b"2"})
            complete(api, zarr)
        assert sorted(held.queued()) == sorted([f"apply:{zarr_id}", f"apply:{other_id}"])
        archive.jobs = queue
        # the apply job claims the batch, then pauses until the manifest job found it busy
        queue.enqueue(
            "tests.helpers.overlap_jobs:apply_pausing_after_claim",
            {"zarr_id": zarr_id, "signals": str(signals), "until": "manifest-checked"},
            key=f"apply:{zarr_id}",
        )
        assert wait_for(signals / "apply-claimed", JOB_WAIT), workers.logs()
        # meanwhile the Zarr's manifest job runs on the other worker, and outlives the apply
        queue.enqueue(
            "tests.helpers.overlap_jobs:manifest_outliving_the_apply",
            {"zarr_id": zarr_id, "signals": str(signals)},
            key=f"manifest:{zarr_id}",
        )
        assert wait_for(signals / "apply-done", JOB_WAIT), workers.logs()
        state = info(api, zarr_id)
        assert state["upload_state"] == "at_rest"
        checksum = state["checksum"]
        assert manifest_rows(archive, zarr_id) == []  # the first manifest job found it busy

        # the manifest job the apply queued must wait for the running one, but not hold a
        # worker meanwhile: the other Zarr's batch is applied and gets its manifest
        queue.enqueue(APPLY_JOB, {"zarr_id": other_id}, key=f"apply:{other_id}")
        wait_until(
            lambda: bool(manifest_rows(archive, other_id)),
            lambda: f"the other Zarr's manifest (while the first one's job runs)\n{workers.logs()}",
            JOB_WAIT,
        )
        assert info(api, other_id)["upload_state"] == "at_rest"
        assert manifest_rows(archive, zarr_id) == []  # its manifest job still runs

        (signals / "release-manifest").touch()
        wait_until(
            lambda: bool(manifest_rows(archive, zarr_id)),
            lambda: f"Zarr {zarr_id}'s manifest (at rest at {checksum})\n{workers.logs()}",
            JOB_WAIT,
        )
        conn = Redis.from_url(REDIS_URL)
        try:  # a second manifest (row or S3 version) would be written by a job: none is left
            for _ in range(2):  # twice: a job popped may not have marked its worker busy yet
                wait_until(
                    lambda: jobs_idle(conn, queue_name),
                    lambda: f"the workers to finish every job\n{workers.logs()}",
                    JOB_WAIT,
                )
        finally:
            conn.close()
        for zarr, expected in ((zarr_id, checksum), (other_id, info(api, other_id)["checksum"])):
            assert manifest_rows(archive, zarr) == [(expected, expected)]
            key = f"zarr-manifest/{zarr}/{expected}.json"
            versions = (
                on_s3(archive.store)
                .client.list_object_versions(Bucket=settings.s3_bucket, Prefix=key)
                .get("Versions", [])
            )
            assert [v["Key"] for v in versions] == [key]  # written once
    finally:
        (signals / "release-manifest").touch()
        archive.jobs = held
        queue.close()
        workers.stop()
