"""``POST /api/zarr/{id}/upload/import/``: the archive copies server-side only from what its
operator allowed (``ZARRCHIVE_IMPORT_BUCKETS``: a bucket, or a bucket and prefix), never from
its own buckets (another Zarr's keys, an embargoed dandiset's objects), never outside the
prefix named, and only into the caller's own open batch.  Each refusal is a 4xx that leaves
the batch's staging area empty and the Zarr unchanged.  (One database: the subject is the
archive's S3 access, not SQL.)"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, Users, make_settings
from zarrchive.config import Settings
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import staging_zarr_prefix, zarr_object_key
from zarrchive.storage.seaweedfs import SeaweedFS

SOURCE = f"zimport-{os.getpid()}-{uuid.uuid4().hex[:6]}"
DATA = b"source bytes"
MD5 = hashlib.md5(DATA).hexdigest()


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}"


@pytest.fixture
def settings(
    request: pytest.FixtureRequest,
    seaweedfs: SeaweedFS,
    bucket: str,
    embargo_bucket: str,
    database_url: str,
    tmp_path: Path,
) -> Settings:
    """Imports allowed from ``SOURCE/allowed`` and, to show they are refused even when
    listed, from the archive's own buckets (``@pytest.mark.settings`` overrides)."""
    marker = request.node.get_closest_marker("settings")
    values: dict[str, Any] = {"import_buckets": (f"{SOURCE}/allowed", bucket, embargo_bucket)}
    values.update(marker.kwargs if marker is not None else {})
    return make_settings(seaweedfs, bucket, database_url, tmp_path, **values)


@pytest.fixture(scope="module")
def source(seaweedfs: SeaweedFS) -> str:
    s3: Any = seaweedfs.client()
    s3.create_bucket(Bucket=SOURCE)
    for prefix in ("allowed/z", "allowedx/z", "other/z"):
        s3.put_object(Bucket=SOURCE, Key=f"{prefix}/a/0", Body=DATA)
    return SOURCE


def _open(api: httpx.Client, zarr_id: str, path: str = "a/0") -> str:
    response = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": path, "etag": MD5}])
    assert response.status_code == 200, response.text
    return response.headers["X-Zarrchive-Batch"]


def _import(
    client: httpx.Client, zarr_id: str, uid: str, bucket: str, prefix: str, path: str = "a/0"
) -> httpx.Response:
    return client.post(
        f"/api/zarr/{zarr_id}/upload/import/",
        json={
            "batch": uid,
            "bucket": bucket,
            "prefix": prefix,
            "files": [{"path": path, "etag": MD5}],
        },
    )


def _staged(archive: Archive, zarr_id: str) -> list[str]:
    return [o.key for o in archive.store.iter_objects(staging_zarr_prefix(zarr_id))]


def test_an_allowed_source_is_copied(
    api: httpx.Client, archive: Archive, zarr_id: str, source: str
) -> None:
    """The control: the same request from the allowed prefix copies and completes."""
    uid = _open(api, zarr_id)
    response = _import(api, zarr_id, uid, source, "allowed/z")
    assert response.status_code == 200, response.text
    assert response.json() == {"batch": uid, "copied": 1, "declined": []}
    assert len(_staged(archive, zarr_id)) == 1
    done = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
    assert done.status_code == 200, done.text
    assert archive.store.get(zarr_object_key(zarr_id, "a/0")) == DATA


#: What a hostile (or mistaken) import names, and the refusal's status.
REFUSED = {
    "own-bucket": 403,
    "embargo-bucket": 403,
    "unlisted-bucket": 403,
    "other-prefix": 403,
    "sibling-prefix": 403,
    "dot-dot-prefix": 400,
    "dot-dot-path": 400,
    "path-not-in-batch": 400,
}


def test_a_source_outside_what_was_allowed_is_refused(
    api: httpx.Client, archive: Archive, settings: Settings, zarr_id: str, source: str
) -> None:
    # another Zarr's file in the archive's own bucket (and one in the embargo bucket): what a
    # hostile import would read
    other = uuid.uuid4().hex
    for store in (archive.store, archive.embargo_store):
        store.put(zarr_object_key(other, "a/0"), DATA, "application/octet-stream")
    uid = _open(api, zarr_id)
    sources = {
        "own-bucket": (settings.s3_bucket, f"zarr/{other}", "a/0"),
        "embargo-bucket": (settings.s3_embargo_bucket, f"zarr/{other}", "a/0"),
        "unlisted-bucket": (f"{source}-not", "allowed/z", "a/0"),
        "other-prefix": (source, "other/z", "a/0"),
        "sibling-prefix": (source, "allowedx/z", "a/0"),
        "dot-dot-prefix": (source, "allowed/../other/z", "a/0"),
        "dot-dot-path": (source, "allowed/z", "../../other/z/a/0"),
        "path-not-in-batch": (source, "allowed/z", "a/1"),
    }
    answered = {where: _import(api, zarr_id, uid, *sources[where]) for where in REFUSED}
    assert {where: r.status_code for where, r in answered.items()} == REFUSED, {
        where: r.text for where, r in answered.items()
    }
    assert _staged(archive, zarr_id) == []
    assert api.get(f"/api/zarr/{zarr_id}/").json()["file_count"] == 0


@pytest.mark.settings(import_buckets=())
def test_server_side_import_is_off_without_the_setting(
    api: httpx.Client, archive: Archive, zarr_id: str, source: str
) -> None:
    uid = _open(api, zarr_id)
    response = _import(api, zarr_id, uid, source, "allowed/z")
    assert response.status_code == 403, response.text
    assert "ZARRCHIVE_IMPORT_BUCKETS" in response.json()["detail"]
    assert _staged(archive, zarr_id) == []


def test_only_into_the_callers_own_open_batch(
    api: httpx.Client,
    live_server: LiveServer,
    users: Users,
    archive: Archive,
    zarr_id: str,
    source: str,
) -> None:
    uid = _open(api, zarr_id)
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"token {users.other}"}, timeout=60
    ) as other:
        assert _import(other, zarr_id, uid, source, "allowed/z").status_code == 403
    assert _import(api, zarr_id, "0" * 32, source, "allowed/z").status_code == 404
    assert _staged(archive, zarr_id) == []
