"""The client against a server that applies batches in the background (its job queue, as
``zarrchive serve`` runs it): it opens the next batch as soon as ``complete`` answers, and
compares checksums only once the Zarr is at rest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.local_zarr import file_count, make_zarr, zarr_checksum_of
from zarrchive.client import ApiClient, Uploader
from zarrchive.client.upload import BatchRecords
from zarrchive.jobs import InProcessJobQueue
from zarrchive.services.runtime import Archive, set_current_archive


@pytest.fixture
def background(archive: Archive) -> Iterator[InProcessJobQueue]:
    queue = InProcessJobQueue(backoff=0.1)
    archive.jobs = queue
    set_current_archive(archive)
    try:
        yield queue
    finally:
        queue.close(timeout=60)
        archive.jobs = None
        set_current_archive(None)


def test_pipelined_upload_ends_at_rest_with_the_local_checksum(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    records: BatchRecords,
    background: InProcessJobQueue,
) -> None:
    local = tmp_path / "data.zarr"
    make_zarr(local)
    total = file_count(local)
    uploader = Uploader(client, jobs=8, batch_files=300, records=records)
    first = uploader.upload(local, dandiset=dandiset)
    assert first.ok and first.batches == -(-total // 300)
    assert first.remote_checksum == zarr_checksum_of(local)
    assert "apply" in first.timings
    zarr = client.get_zarr(first.zarr_id or "")
    assert (zarr.upload_state, zarr.file_count) == ("at_rest", total)

    # change and delete files: deletions, then pipelined batches, then the wait
    chunks = sorted(p for p in (local / "a" / "c").rglob("*") if p.is_file())
    for p in chunks[:400]:
        p.write_bytes(p.read_bytes() + b"changed")
    for p in chunks[400:410]:
        p.unlink()
    second = uploader.upload(local, dandiset=dandiset)
    assert (second.uploaded, second.deleted) == (400, 10)
    assert second.ok and second.remote_checksum == zarr_checksum_of(local)
    assert client.get_zarr(first.zarr_id or "").upload_state == "at_rest"
