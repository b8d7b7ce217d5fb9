"""Slow conversions never hold a Zarr's jobs (issue #35): a Zarr's batch is applied, gets its
manifest and its dandiset is unembargoed while every consumer of the content lane is held by
a conversion of a hostile NWB file, in-process and on RQ alike (RQ: two ``zarrchive worker``
processes, ``--queue content`` and ``--queue zarr``, in the full budget only).

Two hostile files (HDF5 of 3,000 groups and 3,000 object references, as in the issue) are
uploaded as assets through the API: the archive queues their conversions itself.  Their job is the real conversion held until the test lets it go
(``tests.helpers.job_functions:held_conversion``), as a hostile file's conversion held its
thread for minutes: so the assertion is not a time bound but an order of events, "the
Zarr's work ended while the content lane was fully occupied".  Before the lanes, the
conversions took both job threads (or the workers) and the apply waited behind them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from tests.helpers.api_uploads import complete, info, open_and_put, oracle
from tests.helpers.assets import assets_url, ok, upload_blob
from tests.helpers.hostile_hdf5 import many_references
from tests.helpers.job_functions import GATES_ENV
from tests.helpers.reliability import FULL
from tests.helpers.rq_workers import REDIS_URL, Workers, fresh_queue_name
from tests.helpers.waiting import wait_until
from zarrchive.db.models import LindiFile, LindiState, ZarrManifest
from zarrchive.jobs import (
    InProcessJobQueue,
    JobLane,
    JobQueue,
    RedisJobQueue,
    job_queue_from_settings,
)
from zarrchive.services.dandi import lindi_files
from zarrchive.services.runtime import Archive, set_current_archive

HELD_CONVERSION = "tests.helpers.job_functions:held_conversion"
FILES = {"a/0": b"zero", "a/1": b"one", "b": b"bee"}
#: Generous for a loaded machine: the Zarr's jobs take a second or two when they run at all.
DEADLINE = 120.0


@dataclass
class Consumers:
    """The archive's job queue and what runs it, for one test."""

    jobs: JobQueue
    #: How many conversions run at once (the content lane's threads or workers).
    content_slots: int
    logs: Callable[[], str]


@pytest.fixture
def gates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The conversions the archive queues are held ones, meeting the test in *gates*."""
    directory = tmp_path / "gates"
    directory.mkdir()
    monkeypatch.setenv(GATES_ENV, str(directory))
    monkeypatch.setattr(lindi_files, "LINDI_JOB", HELD_CONVERSION)
    try:
        yield directory
    finally:
        (directory / "open").touch()  # never leave a job thread or worker held


def started(gates: Path) -> list[str]:
    return sorted(p.name.removesuffix(".started") for p in gates.glob("*.started"))


def converted(gates: Path) -> list[str]:
    return sorted(p.name.removesuffix(".converted") for p in gates.glob("*.converted"))


def manifests(archive: Archive, zarr_id: str) -> list[str]:
    with archive.db.session() as session:
        return list(
            session.scalars(select(ZarrManifest.checksum).where(ZarrManifest.zarr_id == zarr_id))
        )


def lindi_states(archive: Archive, blob_ids: list[str]) -> list[str | None]:
    with archive.db.session() as session:
        rows = [session.get(LindiFile, blob_id) for blob_id in blob_ids]
        return [None if row is None else row.state for row in rows]


def upload_hostile_assets(api: httpx.Client, dandiset: str) -> list[str]:
    """Two hostile NWB files as assets of *dandiset*: their blob ids (conversions queued)."""
    blob_ids = []
    for n, groups in enumerate((3000, 2999)):  # two files, two blobs (not one deduplicated)
        blob_id = upload_blob(api, dandiset, many_references(groups))
        body = {"metadata": {"path": f"sub-{n}/sub-{n}_ecephys.nwb"}, "blob_id": blob_id}
        ok(api.post(assets_url(dandiset), json=body))
        blob_ids.append(blob_id)
    return blob_ids


def zarr_work_while_conversions_hold_the_content_lane(
    api: httpx.Client,
    archive: Archive,
    consumers: Consumers,
    gates: Path,
    dandiset: str,
    embargoed: tuple[str, str],
) -> None:
    archive.jobs = consumers.jobs
    set_current_archive(archive)  # the conversions are queued once an asset's commit is done
    blob_ids = upload_hostile_assets(api, dandiset)
    holding = min(len(blob_ids), consumers.content_slots)
    wait_until(
        lambda: len(started(gates)) == holding,
        lambda: f"{holding} conversion(s) to hold the content lane\n{consumers.logs()}",
        DEADLINE,
    )
    assert set(started(gates)) <= set(blob_ids)  # the archive's own conversions

    # the content lane is fully occupied: a Zarr's apply, manifest and unembargo still run
    embargoed_dandiset, zarr_id = embargoed
    open_and_put(api, zarr_id, FILES)
    complete(api, zarr_id)
    rest = wait_until(
        lambda: (state := info(api, zarr_id))["upload_state"] == "at_rest" and state,
        lambda: f"Zarr {zarr_id}'s batch to be applied\n{consumers.logs()}",
        DEADLINE,
    )
    assert rest["checksum"] == oracle(FILES)
    wait_until(
        lambda: manifests(archive, zarr_id) == [rest["checksum"]],
        lambda: f"the manifest of Zarr {zarr_id}\n{consumers.logs()}",
        DEADLINE,
    )
    ok(api.post(f"/api/dandisets/{embargoed_dandiset}/unembargo/"))
    wait_until(
        lambda: api.get(f"/api/dandisets/{embargoed_dandiset}/").json()["embargo_status"] == "OPEN",
        lambda: f"dandiset {embargoed_dandiset} to be unembargoed\n{consumers.logs()}",
        DEADLINE,
    )
    # ... while the conversions held the content lane all along
    assert len(started(gates)) == holding and converted(gates) == [], consumers.logs()

    # let them go: the hostile files' conversions end (written or refused), none lost
    (gates / "open").touch()
    ended = (LindiState.READY, LindiState.FAILED)
    # (a job's state is committed inside the conversion, its gate file written after it
    # returns: wait for both, not the state alone)
    wait_until(
        lambda: (
            all(state in ended for state in lindi_states(archive, blob_ids))
            and converted(gates) == sorted(blob_ids)
        ),
        lambda: f"the conversions after the gate opened\n{consumers.logs()}",
        DEADLINE,
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_in_process_a_zarrs_jobs_run_while_conversions_hold_every_content_thread(
    api: httpx.Client,
    archive: Archive,
    gates: Path,
    dandiset: str,
    embargoed: tuple[str, str],
) -> None:
    jobs = job_queue_from_settings(archive.settings)  # `zarrchive serve`'s queue
    assert isinstance(jobs, InProcessJobQueue)
    try:
        consumers = Consumers(jobs, jobs.threads[JobLane.CONTENT], lambda: "")
        zarr_work_while_conversions_hold_the_content_lane(
            api, archive, consumers, gates, dandiset, embargoed
        )
        assert jobs.join(timeout=DEADLINE)
    finally:
        (gates / "open").touch()
        jobs.close(wait=False, timeout=30)
        archive.jobs = None
        set_current_archive(None)


@pytest.fixture
def queue_name() -> Iterator[str]:
    with fresh_queue_name("zarrchive-lanes") as name:
        yield name


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.skipif(
    not FULL,
    reason="a minute or two on a loaded machine (two worker processes, a forked child per job): "
    "ZARRCHIVE_RELIABILITY=full; make test covers the RQ lanes in tests/jobs/test_jobs_redis.py",
)
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_on_rq_a_zarr_lane_worker_runs_a_zarrs_jobs_while_conversions_hold_the_content_worker(
    api: httpx.Client,
    archive: Archive,
    gates: Path,
    dandiset: str,
    embargoed: tuple[str, str],
    queue_name: str,
    tmp_path: Path,
) -> None:
    settings = archive.settings.with_overrides(redis_url=REDIS_URL, redis_queue=queue_name)
    env = {GATES_ENV: str(gates)}
    content = Workers(settings, tmp_path, count=1, lane="content", name="content", env=env)
    zarr = Workers(settings, tmp_path, count=1, lane="zarr", name="zarr", env=env)
    jobs = RedisJobQueue(REDIS_URL, queue_name=queue_name)
    try:
        content.start()
        zarr.start()
        consumers = Consumers(jobs, 1, lambda: f"{content.logs()}\n{zarr.logs()}")
        zarr_work_while_conversions_hold_the_content_lane(
            api, archive, consumers, gates, dandiset, embargoed
        )
    finally:
        (gates / "open").touch()
        archive.jobs = None
        set_current_archive(None)
        jobs.close()
        content.stop()
        zarr.stop()
