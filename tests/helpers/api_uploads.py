"""Uploading to a Zarr through the API as any client would (presigned PUTs), batch by batch
(open, put, complete), and checking the result: the oracle checksum, the Zarr's info, the
objects and ``.checksum`` nodes in S3, the batches the database records, fsck."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select
from zarr_checksum import compute_zarr_checksum
from zarr_checksum.generators import ZarrArchiveFile

from tests.helpers.presigned import put_headers
from tests.helpers.zarr_client import md5
from zarrchive.checksum import iter_directory_digests
from zarrchive.db.models import UploadBatch
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.fsck import fsck
from zarrchive.storage.keys import checksum_prefix

#: A small Zarr of nested directories.
FILES = {
    ".zgroup": b'{"zarr_format":2}',
    "arr/.zarray": b'{"shape":[4]}',
    "arr/0": b"zero",
    "arr/1": b"one",
    "arr/sub/deep/x": b"deep x",
    "arr/sub/deep/y": b"deep y",
    "other/only": b"only child",
}


def oracle(files: dict[str, bytes]) -> str:
    """The Dandi Zarr checksum of *files*, computed by zarr-checksum."""
    return str(
        compute_zarr_checksum(
            ZarrArchiveFile(path=Path(p), size=len(b), digest=md5(b)) for p, b in files.items()
        )
    )


def info(api: httpx.Client, zarr_id: str) -> dict[str, Any]:
    response = api.get(f"/api/zarr/{zarr_id}/")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def s3_body(archive: Archive, zarr_id: str, path: str) -> bytes | None:
    return archive.store.get(f"zarr/{zarr_id}/{path}")


def assert_nodes_match(
    archive: Archive, zarr_id: str, files: dict[str, bytes], s3: Any = None
) -> None:
    """Every .checksum object in S3 is byte-equal to the node computed from the files (read
    with the raw boto3 client *s3*; without one, through the archive's store: the in-memory
    store's tests)."""
    entries = [(p, len(b), md5(b)) for p, b in files.items()]
    expected = {}
    for d in iter_directory_digests(entries, with_nodes=True):
        if files or d.path:
            key = f"zarr_checksums/{zarr_id}/{d.path + '/' if d.path else ''}.checksum"
            assert d.node_json is not None
            expected[key] = d.node_json.encode()
    prefix = checksum_prefix(zarr_id)
    if s3 is None:
        objects = archive.store.iter_objects(prefix)
        assert {o.key: archive.store.get(o.key) for o in objects} == expected
        return
    listed = s3.list_objects_v2(Bucket=archive.store.bucket, Prefix=prefix).get("Contents", [])
    stored = {
        o["Key"]: s3.get_object(Bucket=archive.store.bucket, Key=o["Key"])["Body"].read()
        for o in listed
    }
    assert stored == expected


def put_files(urls: list[dict[str, str]], files: Mapping[str, bytes]) -> None:
    """PUT each file to its presigned URL, as any client would."""
    with httpx.Client(timeout=60) as client:
        for item in urls:
            body = files[item["path"]]
            response = client.put(
                item["upload_url"],
                content=body,
                headers=put_headers(item["upload_url"], body),
            )
            assert response.status_code == 200, response.text


def upload(
    api: httpx.Client, zarr_id: str, files: Mapping[str, bytes], batch_size: int = 500
) -> dict[str, Any]:
    """Upload *files* in batches through the API; returns the final Zarr info."""
    items = list(files.items())
    info: dict[str, Any] = {}
    for start in range(0, len(items), batch_size):
        batch = dict(items[start : start + batch_size])
        response = api.post(
            f"/api/zarr/{zarr_id}/upload/",
            json=[{"path": p, "etag": md5(b)} for p, b in batch.items()],
        )
        assert response.status_code == 200, response.text
        put_files(response.json(), batch)
        # wait=true: applied before the answer, so its checksum is the new one
        response = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
        assert response.status_code == 200, response.text
        info = response.json()
    return info


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file below *root*: relative '/' path -> content."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def open_batch(api: httpx.Client, zarr_id: str, files: dict[str, bytes]) -> list[dict[str, str]]:
    """Open a batch of *files*; its presigned URLs (nothing is PUT)."""
    response = api.post(
        f"/api/zarr/{zarr_id}/upload/", json=[{"path": p, "etag": md5(b)} for p, b in files.items()]
    )
    assert response.status_code == 200, response.text
    urls: list[dict[str, str]] = response.json()
    return urls


def open_and_put(api: httpx.Client, zarr_id: str, files: dict[str, bytes]) -> None:
    """Open a batch of *files* and PUT them (the batch stays open)."""
    response = api.post(
        f"/api/zarr/{zarr_id}/upload/", json=[{"path": p, "etag": md5(b)} for p, b in files.items()]
    )
    assert response.status_code == 200, response.text
    put_files(response.json(), files)


def complete(api: httpx.Client, zarr_id: str, **params: str) -> dict[str, Any]:
    """Complete the open batch (*params*: e.g. ``wait="true"``); the answer."""
    response = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params=params)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def batches(archive: Archive, zarr_id: str) -> list[tuple[str, int | None]]:
    """The Zarr's upload batches in the database: (state, seq), oldest first."""
    with archive.db.session() as session:
        rows = session.execute(
            select(UploadBatch.state, UploadBatch.seq)
            .where(UploadBatch.zarr_id == zarr_id)
            .order_by(UploadBatch.id)
        ).all()
        return [(str(state), seq) for state, seq in rows]


def assert_clean(archive: Archive, zarr_id: str) -> None:
    """fsck finds nothing wrong with the Zarr."""
    report = fsck(archive, zarr_id)
    assert report.ok, report.problems
