"""Issue 20: ``zarrchive upload`` sends files above the archive's multipart threshold in
parts, resumes an interrupted one without sending its finished parts again, and the Zarr's
checksum is zarr-checksum's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.api_uploads import read_tree
from tests.helpers.local_zarr import zarr_checksum_of
from tests.helpers.multipart import MIB, THRESHOLD, big_bytes, write_tree
from zarrchive.client import ApiClient, NullProgress, Uploader
from zarrchive.client.download import Downloader
from zarrchive.client.multipart import PartSender
from zarrchive.client.upload import BatchRecords
from zarrchive.client.upload.pipeline import BatchPipeline
from zarrchive.services.runtime import Archive

pytestmark = pytest.mark.settings(multipart_threshold=THRESHOLD)

FILES = {
    ".zgroup": b'{"zarr_format": 2}',
    "big/.zarray": b"{}",
    "big/0": big_bytes(4 * THRESHOLD + MIB, seed=5),  # five parts
    "big/1": big_bytes(THRESHOLD + 1, seed=6),  # two parts, the last of one byte
    "big/2": big_bytes(THRESHOLD, seed=7),  # at the threshold: one PUT
    **{f"small/{i}": f"small {i}".encode() for i in range(30)},
}


class Killed(BaseException):
    """The client process dies (no cleanup of any kind)."""


def test_big_files_round_trip_with_zarr_checksum(
    tmp_path: Path, client: ApiClient, dandiset: str, archive: Archive, records: BatchRecords
) -> None:
    local = tmp_path / "big.zarr"
    write_tree(local, FILES)
    uploader = Uploader(client, jobs=4, records=records, progress=NullProgress())
    result = uploader.upload(local, dandiset=dandiset)
    assert result.ok and result.remote_checksum == zarr_checksum_of(local)
    assert result.uploaded == len(FILES)
    assert uploader.pipeline is not None and uploader.pipeline.parts is not None
    assert uploader.pipeline.parts.sent == 5 + 2  # big/2 (at the threshold) is one PUT
    assert result.zarr_id is not None
    copy = tmp_path / "copy"
    with Downloader(client, jobs=4) as downloader:
        downloader.download(result.zarr_id, copy)
    assert read_tree(copy) == FILES
    # nothing to do the second time
    again = Uploader(client, jobs=2, records=records).upload(local, dandiset=dandiset)
    assert again.ok and again.uploaded == 0


def test_interrupted_big_file_resumes_without_resending_parts(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    records: BatchRecords,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    local = tmp_path / "resumed.zarr"
    files = {".zgroup": b"{}", "a/0": FILES["big/0"], "a/1": b"small"}
    write_tree(local, files)
    real_put = PartSender._put
    sent: list[int] = []

    def dies_after_three_parts(self: PartSender, *args: Any) -> None:
        number = args[3]
        if len(sent) >= 3:
            raise Killed
        real_put(self, *args)
        sent.append(number)

    monkeypatch.setattr(PartSender, "_put", dies_after_three_parts)
    monkeypatch.setattr(BatchPipeline, "_abort", lambda self: None)  # killed: no cleanup
    with pytest.raises(Killed):
        Uploader(client, jobs=1, records=records).upload(local, dandiset=dandiset)
    monkeypatch.undo()
    zarr = client.find_zarr(dandiset, "resumed.zarr")
    assert zarr is not None and zarr.upload_in_progress and zarr.file_count == 0

    progress = NullProgress()
    uploader = Uploader(client, jobs=2, records=records, progress=progress)
    result = uploader.upload(local, dandiset=dandiset)
    assert result.stale_batch == "resumed"
    assert uploader.pipeline is not None and uploader.pipeline.parts is not None
    assert (uploader.pipeline.parts.skipped, uploader.pipeline.parts.sent) == (3, 2)
    assert result.ok and result.remote_checksum == zarr_checksum_of(local)
    assert not client.upload_in_progress(zarr.zarr_id)


def test_big_files_are_read_once_before_they_are_sent(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    records: BatchRecords,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The walk hashes a big file's parts in the same read as its md5 (issue 20 item 7):
    the sender reads nothing to hash them, and what it sends is right."""
    from zarrchive.client import multipart
    from zarrchive.client.local import parts

    # the archive's part size for the tests' threshold is the one the client expects
    monkeypatch.setattr(parts, "DEFAULT_PART_SIZE", THRESHOLD)
    monkeypatch.setattr(parts, "PART_HASH_MIN", THRESHOLD)
    parts.forget_all()

    def no_second_read(*args: Any) -> str:
        raise AssertionError("a part was read again to hash it")

    monkeypatch.setattr(multipart, "_md5_of", no_second_read)
    local = tmp_path / "once.zarr"
    write_tree(local, FILES)
    uploader = Uploader(client, jobs=4, records=records, progress=NullProgress())
    result = uploader.upload(local, dandiset=dandiset)
    assert result.ok and result.remote_checksum == zarr_checksum_of(local)
    assert uploader.pipeline is not None and uploader.pipeline.parts is not None
    assert (uploader.pipeline.parts.recalled, uploader.pipeline.parts.sent) == (5 + 2, 5 + 2)
    parts.forget_all()
