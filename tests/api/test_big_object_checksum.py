"""Big files carry S3's full-object CRC32 and their md5 (#39): every big Zarr object the
archive writes by a multipart copy (the apply of a file uploaded in parts, an import in
parts, a restore) has the CRC32 of its bytes as S3's ``FULL_OBJECT`` checksum and the md5
the archive verified as ``x-amz-meta-zarrchive-md5``; a client checks a download with the
CRC32 (fast) instead of an md5.  A file uploaded in one PUT has neither.  The download URLs
of an embargoed Zarr come with a presigned ``head_url`` (S3 refuses a HEAD of a URL
presigned for GET) that answers them; a public Zarr's answer is as before (its plain URL
answers a HEAD).  On the test SeaweedFS and on the in-memory store."""

from __future__ import annotations

import random
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.api_uploads import info, oracle
from tests.helpers.databases import SQLITE_ONLY, new_sqlite_database
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.multipart import MIB, THRESHOLD, open_sized, put_small, send_parts
from tests.helpers.s3_zarr import put_in_parts, source_s3_client
from tests.helpers.snapshots import pin_as_published, snapshot_base
from tests.helpers.zarr_client import md5
from zarrchive.db.models import Dandiset, EmbargoStatus
from zarrchive.services.dandi.embargo import move_to_public
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import write_manifest
from zarrchive.storage.crc32 import crc32_base64
from zarrchive.storage.keys import zarr_object_key
from zarrchive.storage.seaweedfs import SeaweedFS

SOURCE = f"zcrc-{uuid.uuid4().hex[:10]}"
pytestmark = [
    SQLITE_ONLY,
    pytest.mark.settings(multipart_threshold=THRESHOLD, import_buckets=(SOURCE,)),
]
BIG = random.Random(1).randbytes(THRESHOLD + MIB)  # two parts: 8 and 1 MiB
OTHER = random.Random(2).randbytes(THRESHOLD + 2 * MIB)
SMALL = {"zarr.json": b'{"zarr_format": 3}', "a/0": b"zero"}
MODE = {"x-amz-checksum-mode": "ENABLED"}


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return new_sqlite_database(tmp_path / "zarrchive.sqlite3")


@pytest.fixture(params=["s3", pytest.param("memory", marks=pytest.mark.unit)])
def archive(request: pytest.FixtureRequest) -> Iterator[Archive]:
    """The archive on the test SeaweedFS, then on the in-memory store."""
    if request.param == "memory":
        yield request.getfixturevalue("memory_archive")
        return
    archive = Archive.from_settings(request.getfixturevalue("settings"))
    try:
        yield archive
    finally:
        archive.close()


def crc(data: bytes) -> str:
    return crc32_base64(zlib.crc32(data))


def upload_parted(api: httpx.Client, zarr_id: str, files: dict[str, bytes]) -> None:
    """One batch of *files*, those above the threshold sent in parts; applied."""
    opened = open_sized(api, zarr_id, files)
    assert opened.status_code == 200, opened.text
    put_small(opened.json(), files)
    for path, body in files.items():
        if len(body) > THRESHOLD:
            send_parts(api, zarr_id, path, body, THRESHOLD)
    done = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
    assert done.status_code == 200, done.text


def checksums(archive: Archive, zarr_id: str, path: str, *, embargoed: bool = False) -> Any:
    """``(full-object CRC32, recorded md5)`` of the current object of *path*."""
    found = archive.store_for(embargoed).head(zarr_object_key(zarr_id, path))
    assert found is not None
    return found.full_object_crc32, found.recorded_md5


def test_a_file_uploaded_in_parts_carries_its_crc32_and_md5(
    api: httpx.Client, archive: Archive, zarr_id: str
) -> None:
    files = {**SMALL, "a/big": BIG}
    upload_parted(api, zarr_id, files)
    assert info(api, zarr_id)["checksum"] == oracle(files)
    assert checksums(archive, zarr_id, "a/big") == (crc(BIG), md5(BIG))
    assert checksums(archive, zarr_id, "a/0") == (None, None)  # one PUT: neither
    # a public Zarr's download answer is as before; its plain URL answers the HEAD
    answer = api.post(f"/api/zarr/{zarr_id}/download/", json=[{"path": "a/big"}, {"path": "a/0"}])
    assert answer.status_code == 200, answer.text
    assert [sorted(item) for item in answer.json()] == [["path", "url"], ["path", "url"]]
    big_url, small_url = (item["url"] for item in answer.json())
    with httpx.Client(timeout=30) as anonymous:
        head = anonymous.head(big_url, headers=MODE)
        assert head.status_code == 200
        assert head.headers["x-amz-checksum-crc32"] == crc(BIG)
        assert head.headers["x-amz-checksum-type"] == "FULL_OBJECT"
        assert head.headers["x-amz-meta-zarrchive-md5"] == md5(BIG)
        small = anonymous.head(small_url, headers=MODE)
        assert small.status_code == 200 and "x-amz-checksum-type" not in small.headers


def test_a_restore_copies_a_big_file_with_its_crc32_and_md5(
    api: httpx.Client, archive: Archive, zarr_id: str, held: HeldJobQueue
) -> None:
    upload_parted(api, zarr_id, {**SMALL, "a/big": BIG})
    before = info(api, zarr_id)["checksum"]
    write_manifest(archive, zarr_id)
    upload_parted(api, zarr_id, {"a/big": OTHER})
    assert checksums(archive, zarr_id, "a/big") == (crc(OTHER), md5(OTHER))
    restored = api.post(f"/api/zarr/{zarr_id}/restore/", json={"checksum": before})
    assert restored.status_code == 200, restored.text
    held.run("apply:")
    assert info(api, zarr_id)["checksum"] == before
    assert checksums(archive, zarr_id, "a/big") == (crc(BIG), md5(BIG))


def test_an_embargoed_download_has_a_head_url(
    api: httpx.Client, archive: Archive, embargoed: tuple[str, str]
) -> None:
    _dandiset, zarr_id = embargoed
    upload_parted(api, zarr_id, {**SMALL, "a/big": BIG})
    assert checksums(archive, zarr_id, "a/big", embargoed=True) == (crc(BIG), md5(BIG))
    answer = api.post(f"/api/zarr/{zarr_id}/download/", json=[{"path": "a/big"}])
    assert answer.status_code == 200, answer.text
    [item] = answer.json()
    assert sorted(item) == ["head_url", "path", "url"]
    with httpx.Client(timeout=30) as s3:
        head = s3.head(item["head_url"], headers=MODE)
        assert head.status_code == 200, head.text
        assert head.headers["x-amz-checksum-crc32"] == crc(BIG)
        assert head.headers["x-amz-checksum-type"] == "FULL_OBJECT"
        assert head.headers["x-amz-meta-zarrchive-md5"] == md5(BIG)
        assert int(head.headers["content-length"]) == len(BIG)
        assert s3.get(item["head_url"], headers=MODE).status_code == 403  # HEAD only
        assert s3.head(item["url"]).status_code == 403  # (why it is there: GET only)
        assert s3.get(item["url"]).content == BIG


def test_a_snapshots_head_url_names_the_pinned_version(
    api: httpx.Client, archive: Archive, embargoed: tuple[str, str]
) -> None:
    """Pinned through the service (publishing an embargoed dandiset is refused), then
    overwritten: the snapshot's ``head_url`` answers the pinned version's checksums."""
    _dandiset, zarr_id = embargoed
    upload_parted(api, zarr_id, {**SMALL, "a/big": BIG})
    checksum = info(api, zarr_id)["checksum"]
    pin_as_published(archive, zarr_id)
    upload_parted(api, zarr_id, {"a/big": OTHER})
    answer = api.post(snapshot_base(zarr_id, checksum) + "download/", json=[{"path": "a/big"}])
    assert answer.status_code == 200, answer.text
    [item] = answer.json()
    assert sorted(item) == ["head_url", "path", "url", "version_id"]
    assert f"versionId={item['version_id']}" in item["head_url"]
    with httpx.Client(timeout=30) as s3:
        head = s3.head(item["head_url"], headers=MODE)
        assert head.status_code == 200, head.text
        assert head.headers["x-amz-checksum-crc32"] == crc(BIG)
        assert head.headers["x-amz-meta-zarrchive-md5"] == md5(BIG)


@pytest.mark.parametrize("archive", ["s3"], indirect=True)  # (imports read S3 buckets)
def test_an_import_in_parts_carries_its_crc32_and_md5(
    api: httpx.Client, archive: Archive, zarr_id: str, seaweedfs: SeaweedFS
) -> None:
    source = source_s3_client(seaweedfs, SOURCE)
    prefix = f"z/{uuid.uuid4().hex[:8]}"
    put_in_parts(source, SOURCE, f"{prefix}/a/big", BIG)  # its ETag is no md5
    etag = source.head_object(Bucket=SOURCE, Key=f"{prefix}/a/big")["ETag"]
    opened = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "a/big", "etag": md5(BIG)}])
    assert opened.status_code == 200, opened.text
    imported = api.post(
        f"/api/zarr/{zarr_id}/upload/import/",
        json={
            "batch": opened.headers["X-Zarrchive-Batch"],
            "bucket": SOURCE,
            "prefix": prefix,
            "files": [{"path": "a/big", "etag": etag}],
        },
    )
    assert imported.status_code == 200, imported.text
    done = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
    assert done.status_code == 200, done.text
    assert info(api, zarr_id)["checksum"] == oracle({"a/big": BIG})
    assert checksums(archive, zarr_id, "a/big") == (crc(BIG), md5(BIG))


@pytest.mark.parametrize("archive", ["s3"], indirect=True)  # (copies across S3 buckets)
def test_an_unembargo_copy_in_parts_keeps_the_crc32_and_md5(
    api: httpx.Client, archive: Archive, embargoed: tuple[str, str]
) -> None:
    """Above its copy threshold an unembargo copies an object in parts: with the source's
    CRC32 (S3 checks it against the parts it copied) and metadata."""
    dandiset, zarr_id = embargoed
    upload_parted(api, zarr_id, {**SMALL, "a/big": BIG})
    with archive.db.write_session() as session:
        row = session.get(Dandiset, int(dandiset))
        assert row is not None
        row.embargo_status = EmbargoStatus.UNEMBARGOING.value
    move_to_public(archive, int(dandiset), copy_threshold=THRESHOLD, copy_part_size=5 * MIB)
    moved = archive.store.head(zarr_object_key(zarr_id, "a/big"))
    assert moved is not None and moved.etag.endswith("-2")  # 5 + 4 MiB: copied in parts
    assert (moved.full_object_crc32, moved.recorded_md5) == (crc(BIG), md5(BIG))
    assert archive.store.get(zarr_object_key(zarr_id, "a/big")) == BIG
