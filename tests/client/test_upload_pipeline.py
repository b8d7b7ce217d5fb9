"""The client against a server that applies batches in the background (its job queue, as
``zarrchive serve`` runs it): it opens the next batch as soon as ``complete`` answers, and
compares checksums only once the Zarr is at rest.

Each test uploads a Zarr of about 920 files (:data:`COARSE`) in batches of 150 files
(:data:`BATCH_FILES`): seven batches, as many as 1,850 files in batches of 300, at half the
files to send and apply."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.helpers.local_zarr import file_count, make_zarr, zarr_checksum_of
from tests.helpers.upload_batches import batch_count
from zarrchive.client import ApiClient, Uploader
from zarrchive.client.api import OpenedBatch
from zarrchive.client.upload import BatchRecords
from zarrchive.client.upload.pipeline import BatchPipeline
from zarrchive.db.models import BatchState, UploadBatch
from zarrchive.jobs import InProcessJobQueue
from zarrchive.services.runtime import Archive, set_current_archive
from zarrchive.storage.keys import staging_prefix

#: :func:`make_zarr`'s ``coarse``: about 920 files
COARSE = 2
#: files per batch: seven batches of the Zarr
BATCH_FILES = 150


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
    make_zarr(local, coarse=COARSE)
    total = file_count(local)
    uploader = Uploader(client, jobs=8, batch_files=BATCH_FILES, records=records)
    first = uploader.upload(local, dandiset=dandiset)
    assert first.ok and first.batches == batch_count(total, BATCH_FILES)
    assert first.remote_checksum == zarr_checksum_of(local)
    assert "apply" in first.timings
    zarr = client.get_zarr(first.zarr_id or "")
    assert (zarr.upload_state, zarr.file_count) == ("at_rest", total)

    # change and delete files: deletions, then pipelined batches, then the wait
    chunks = sorted(p for p in (local / "a" / "c").rglob("*") if p.is_file())
    for p in chunks[:200]:  # two batches
        p.write_bytes(p.read_bytes() + b"changed")
    for p in chunks[200:210]:
        p.unlink()
    second = uploader.upload(local, dandiset=dandiset)
    assert (second.uploaded, second.deleted) == (200, 10)
    assert second.batches == 2, second.batches
    assert second.ok and second.remote_checksum == zarr_checksum_of(local)
    assert client.get_zarr(first.zarr_id or "").upload_state == "at_rest"


@pytest.mark.parametrize("answer_lost", [False, True], ids=["answered", "answer_lost"])
def test_a_batch_the_apply_refuses_is_sent_again(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    records: BatchRecords,
    background: InProcessJobQueue,
    archive: Archive,
    monkeypatch: pytest.MonkeyPatch,
    answer_lost: bool,
) -> None:
    # Each batch is completed with verify=apply (queued at once, checked by its apply).  A
    # staged file of the second batch vanishes from S3 just before its `complete`: its apply
    # refuses it whole (nothing of it visible), and the uploader, once the Zarr is at rest,
    # sends that batch again (verified before its `complete` answers).  *answer_lost*: that
    # `complete`'s answer does not name the batch (its retry found it queued already): the
    # uploader knows the uid from the batch's `open`.
    local = tmp_path / "data.zarr"
    make_zarr(local, coarse=COARSE)
    total = file_count(local)
    completes: list[bool] = []
    real = BatchPipeline._complete

    def complete(self: BatchPipeline, *, queue: bool = False) -> str | None:
        zarr_id = self.zarr_id
        completes.append(queue)
        if len(completes) == 2:  # a file of the open batch (not of one applied before it)
            with archive.db.session() as session:
                uid = session.scalars(
                    select(UploadBatch.uid).where(
                        UploadBatch.zarr_id == zarr_id,
                        UploadBatch.state == BatchState.OPEN,
                        UploadBatch.follows.is_(None),  # not the next batch, opened ahead
                    )
                ).one()
            staged = list(archive.store.iter_versions(staging_prefix(zarr_id, uid)))
            victim = sorted(v.key for v in staged if v.is_latest and not v.is_delete_marker)[0]
            archive.store.delete(victim)  # a delete marker: the staged object is gone
        return real(self, queue=queue)

    monkeypatch.setattr(BatchPipeline, "_complete", complete)
    if answer_lost:
        queue_upload = ApiClient.queue_upload

        def lost(self: ApiClient, zarr_id: str) -> str | None:
            uid = queue_upload(self, zarr_id)
            return None if len(completes) == 2 else uid

        monkeypatch.setattr(ApiClient, "queue_upload", lost)
    uploader = Uploader(client, jobs=8, batch_files=BATCH_FILES, records=records)
    result = uploader.upload(local, dandiset=dandiset)
    assert result.ok and result.remote_checksum == zarr_checksum_of(local)
    assert result.uploaded == total
    assert any("refused a batch" in note for note in result.notes), result.notes
    assert completes.count(False) == 1 and completes[-1] is False  # the one sent again
    refused = client.refused_batches(result.zarr_id or "", [])
    assert refused == {}
    rows = client.request("GET", f"/api/zarr/{result.zarr_id}/upload/refused/").json()
    assert len(rows) == 1 and rows[0]["found_md5"] == "missing"
    zarr = client.get_zarr(result.zarr_id or "")
    assert (zarr.upload_state, zarr.file_count) == ("at_rest", total)


def test_each_batch_is_opened_ahead_while_the_one_before_is_sent(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    records: BatchRecords,
    background: InProcessJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No PUT waits on a batch boundary: every batch after the first is opened `after` the
    # one before, before that one is completed (its files follow the one before's at once).
    local = tmp_path / "data.zarr"
    make_zarr(local, coarse=COARSE)
    total = file_count(local)
    events: list[tuple[str, str | None, str | None]] = []  # (what, uid, after)
    open_upload, queue_upload = ApiClient.open_upload, ApiClient.queue_upload

    def opening(
        self: ApiClient,
        zarr_id: str,
        files: Sequence[tuple[str, str, int | None]],
        *,
        resume: bool = False,
        after: str | None = None,
    ) -> OpenedBatch:
        opened = open_upload(self, zarr_id, files, resume=resume, after=after)
        events.append(("open", opened.uid, after))
        return opened

    def queueing(self: ApiClient, zarr_id: str) -> str | None:
        uid = queue_upload(self, zarr_id)
        events.append(("complete", uid, None))
        return uid

    monkeypatch.setattr(ApiClient, "open_upload", opening)
    monkeypatch.setattr(ApiClient, "queue_upload", queueing)
    result = Uploader(client, jobs=8, batch_files=BATCH_FILES, records=records).upload(
        local, dandiset=dandiset
    )
    assert result.ok and result.remote_checksum == zarr_checksum_of(local)
    assert result.uploaded == total and result.batches == batch_count(total, BATCH_FILES) > 2
    opens = [(uid, after) for what, uid, after in events if what == "open"]
    completes = [uid for what, uid, _ in events if what == "complete"]
    assert [uid for uid, _ in opens] == completes  # each batch once, completed in order
    assert [after for _, after in opens] == [None, *completes[:-1]]
    for (uid, after), position in zip(opens[1:], range(1, len(opens)), strict=True):
        opened_at = events.index(("open", uid, after))
        assert opened_at < events.index(("complete", after, None)), (position, events)
    assert not client.upload_in_progress(result.zarr_id or "")
    assert not records.get(client.url, result.zarr_id or "")
