"""Each of the archive's jobs goes to its lane (issue #35): a Zarr's apply, its manifest and
unembargo on the Zarr lane; what reads or decodes uploaded content (LINDI conversions,
metadata validations, blob hashing) on the content lane, where it never holds them up."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest

from zarrchive.jobs import JobFunc, JobLane, JobQueue
from zarrchive.jobs.queue import prepare
from zarrchive.services.dandi import lindi_files, validation
from zarrchive.services.runtime import Archive, set_current_archive
from zarrchive.services.zarr_engine.uploads import apply, queue_manifest


class LaneRecorder(JobQueue):
    """Records the key and lane of every job queued (runs none)."""

    def __init__(self) -> None:
        self.queued: list[tuple[str, JobLane]] = []

    def enqueue(
        self,
        func: JobFunc,
        kwargs: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        lane: JobLane = JobLane.ZARR,
    ) -> str:
        name, _ = prepare(func, kwargs)
        self.queued.append(((key or name).split(":")[0], lane))
        return str(len(self.queued))

    def close(self, *, wait: bool = True, timeout: float | None = None) -> None:
        pass


@pytest.fixture
def recorder(archive: Archive) -> Iterator[LaneRecorder]:
    queue = LaneRecorder()
    archive.jobs = queue
    set_current_archive(archive)
    try:
        yield queue
    finally:
        archive.jobs = None
        set_current_archive(None)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_each_job_goes_to_its_lane(
    api: httpx.Client,
    archive: Archive,
    recorder: LaneRecorder,
    dandiset: str,
    embargoed: tuple[str, str],
) -> None:
    recorder.queued.clear()  # what creating the fixtures queued
    lindi_files.queue_conversion(archive, "blob")
    validation.queue_blob_sha256(archive, "blob")
    validation.queue_validation(archive, dandiset)
    assert apply.schedule_apply(archive, "zarr")
    queue_manifest(archive, "zarr")
    response = api.post(f"/api/dandisets/{embargoed[0]}/unembargo/")
    assert response.status_code == 200, response.text
    assert recorder.queued == [
        ("lindi", JobLane.CONTENT),
        ("sha256", JobLane.CONTENT),
        ("validate", JobLane.CONTENT),
        ("apply", JobLane.ZARR),
        ("manifest", JobLane.ZARR),
        ("unembargo", JobLane.ZARR),
    ]
