"""Issue 35: a big file that DANDI's ``finalize`` leaves out of the batch it ends has its S3
multipart upload aborted at once, as cancelling the batch does (before: it stayed open, its
parts held in S3, until ``admin gc``).

The batch is opened by ``zarrchive upload``'s route (``upload/``, sizes declared: the big
file goes in parts, one of two sent), then extended, PUT and finalized through DANDI's
routes (``files/``, ``finalize/``) as dandi-cli does; what S3 holds is read with boto3's
ListParts and ListMultipartUploads against the test's SeaweedFS.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers.api_uploads import s3_body
from tests.helpers.dandi_zarr import announce, put_all, wait_complete
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.interrupted_upload import PART, parts_in_s3
from tests.helpers.multipart import MIB, big_bytes, open_sized, put_small, send_parts
from tests.helpers.zarr_client import expect, oracle_checksum
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import staging_zarr_prefix

pytestmark = [pytest.mark.settings(multipart_threshold=PART), SQLITE_ONLY]

BIG = big_bytes(PART + MIB, seed=351)  # two parts
SMALL = {".zgroup": b'{"zarr_format": 2}', "arr/.zarray": b"{}"}


def open_uploads(s3: Any, bucket: str, zarr_id: str) -> list[tuple[str, str]]:
    """``(key, upload id)`` of the multipart uploads S3 has open under the Zarr's staging
    area."""
    page = s3.list_multipart_uploads(Bucket=bucket, Prefix=staging_zarr_prefix(zarr_id))
    return [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])]


def start_big(
    api: httpx.Client, zarr_id: str, files: dict[str, bytes], s3: Any, bucket: str
) -> tuple[str, str]:
    """Open a batch of *files* through ``upload/`` (sizes declared), PUT the small ones and
    the first part of ``arr/0``: its staging key and S3 upload id."""
    opened = open_sized(api, zarr_id, files)
    assert opened.status_code == 200, opened.text
    put_small(opened.json(), files)
    send_parts(api, zarr_id, "arr/0", BIG, PART, only=[1])
    ((key, upload_id),) = open_uploads(s3, bucket, zarr_id)
    assert parts_in_s3(s3, bucket, key, upload_id) == {1: PART}
    return key, upload_id


def test_finalize_aborts_the_upload_of_a_big_file_it_drops(
    api: httpx.Client, zarr_id: str, archive: Archive, s3: Any, bucket: str
) -> None:
    files = {**SMALL, "arr/0": BIG}
    key, upload_id = start_big(api, zarr_id, files, s3, bucket)
    # dandi-cli announces and PUTs a file of its own into the open batch, and finalizes it
    dandi_files = {"arr/1": b"one"}
    put_all(announce(api, zarr_id, dandi_files), dandi_files)
    report = expect(api.post(f"/api/zarr/{zarr_id}/finalize/"))
    assert [(d["path"], d["reason"]) for d in report["dropped"]] == [("arr/0", "missing")]
    assert report["files"] == len(SMALL) + 1
    assert parts_in_s3(s3, bucket, key, upload_id) is None, "the dropped file's upload is open"
    assert open_uploads(s3, bucket, zarr_id) == []
    done = wait_complete(api, zarr_id)
    assert done["checksum"] == oracle_checksum({**SMALL, **dandi_files})
    assert s3_body(archive, zarr_id, "arr/0") is None


def test_finalize_of_a_batch_left_empty_aborts_its_upload(
    api: httpx.Client, zarr_id: str, s3: Any, bucket: str
) -> None:
    key, upload_id = start_big(api, zarr_id, {"arr/0": BIG}, s3, bucket)
    report = expect(api.post(f"/api/zarr/{zarr_id}/finalize/"))
    assert (report["files"], [d["path"] for d in report["dropped"]]) == (0, ["arr/0"])
    assert parts_in_s3(s3, bucket, key, upload_id) is None, "the dropped file's upload is open"
    assert open_uploads(s3, bucket, zarr_id) == []
    assert not expect(api.get(f"/api/zarr/{zarr_id}/"))["upload_in_progress"]
