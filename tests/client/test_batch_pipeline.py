"""The upload's batch pipeline alone (:class:`zarrchive.client.upload.pipeline.BatchPipeline`):
given files and a Zarr, it opens each batch ahead of the one being sent, PUTs, completes,
and when interrupted leaves its batches open with what S3 holds.  No planner, no Uploader:
the live archive and its S3."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.multipart import write_tree
from tests.helpers.upload_batches import batch_count, entries
from zarrchive.client import ApiClient
from zarrchive.client.remote import local_digests
from zarrchive.client.upload import BatchRecords, UploadResult
from zarrchive.client.upload.batches import wait_at_rest
from zarrchive.client.upload.pipeline import BatchPipeline

FILES = {f"a/{i:02}": f"chunk {i}".encode() for i in range(45)} | {".zgroup": b"{}"}


def _result(total: int) -> UploadResult:
    return UploadResult("z", "x.zarr", False, False, total, 0, "", None)


def test_the_pipeline_sends_files_in_batches_each_opened_ahead(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    local = tmp_path / "sent.zarr"
    write_tree(local, FILES)
    zarr = client.create_zarr("sent.zarr", dandiset)
    opened: list[int] = []
    pipeline = BatchPipeline(
        client, zarr.zarr_id, str(local), jobs=2, records=records, on_batch_open=opened.append
    )
    sent = entries(FILES)
    result = _result(len(sent))
    pipeline.run(sent, 12, result)
    assert (result.uploaded, result.uploaded_bytes) == (len(sent), sum(e.size for e in sent))
    assert result.batches == len(opened) == batch_count(len(sent), 12) == 4
    assert sum(opened) == len(sent) and pipeline.ahead  # every batch after the first ahead
    assert {"open", "put", "complete"} <= set(result.timings)
    assert pipeline.left_open is None and not records.get(client.url, zarr.zarr_id)
    at_rest = wait_at_rest(client, zarr.zarr_id)
    assert (at_rest.checksum, at_rest.file_count) == (local_digests(sent)[""], len(sent))


def test_an_interrupted_pipeline_leaves_its_batches_open_for_the_next_run(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    local = tmp_path / "interrupted.zarr"
    write_tree(local, FILES)
    zarr = client.create_zarr("interrupted.zarr", dandiset)
    opened: list[int] = []

    def ctrl_c_at_the_third_batch(size: int) -> None:
        opened.append(size)
        if len(opened) == 3:
            raise KeyboardInterrupt

    pipeline = BatchPipeline(
        client,
        zarr.zarr_id,
        str(local),
        jobs=2,
        records=records,
        on_batch_open=ctrl_c_at_the_third_batch,
    )
    sent = entries(FILES)
    with pytest.raises(KeyboardInterrupt):
        pipeline.run(sent, 12, _result(len(sent)))
    left = pipeline.left_open
    assert left is not None and left.zarr_id == zarr.zarr_id
    assert left.files == opened[1] and 0 <= left.files_in_s3 <= left.files
    assert (left.big_files, left.parts_in_s3) == (0, 0)
    assert client.upload_in_progress(zarr.zarr_id)  # left open, for the next run
    assert records.get(client.url, zarr.zarr_id) is not None  # and recorded as ours

    # the next run's first batch, of the same files, takes the open one up
    again = BatchPipeline(client, zarr.zarr_id, str(local), jobs=2, records=records)
    rest = sent[opened[0] :]  # the first batch was completed
    result = _result(len(rest))
    again.run(rest, 12, result)
    assert result.uploaded == len(rest) and not client.upload_in_progress(zarr.zarr_id)
    at_rest = wait_at_rest(client, zarr.zarr_id)
    assert (at_rest.checksum, at_rest.file_count) == (local_digests(sent)[""], len(sent))
