"""``POST /api/zarr/{id}/upload/import/hash/`` (#39 item 1): the archive reads source objects
uploaded in parts (their ETag is no md5) and answers their md5s, so a server-side import's
client reads no byte of the source.  Only for writers of the Zarr and from the buckets an
import may read; a source changed since it was listed is refused (409); bounded per request
(413); an answer asked again is not read again.  (A second bucket of the test SeaweedFS; one
database: the subject is the reads.)"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, Users, make_settings
from tests.helpers.s3_zarr import PART, put_in_parts
from tests.helpers.zarr_client import md5
from zarrchive.config import Settings
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads import import_hash
from zarrchive.storage.objects import ObjectStore
from zarrchive.storage.seaweedfs import SeaweedFS

SOURCE = f"zhash-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}"


@pytest.fixture
def settings(seaweedfs: SeaweedFS, bucket: str, database_url: str, tmp_path: Path) -> Settings:
    return make_settings(seaweedfs, bucket, database_url, tmp_path, import_buckets=(SOURCE,))


@pytest.fixture(scope="module")
def source_s3(seaweedfs: SeaweedFS) -> Any:
    s3: Any = seaweedfs.client()
    s3.create_bucket(Bucket=SOURCE)
    return s3


@pytest.fixture
def reads(archive: Archive) -> Iterator[list[str]]:
    """The keys of the ``GetObject`` requests the archive's copy client sends while the
    fixture is live (the reads of the hashing)."""
    assert isinstance(archive.store, ObjectStore)
    events = archive.store.copy_client.meta.events
    seen: list[str] = []

    def count(params: dict[str, Any], **_kwargs: Any) -> None:
        seen.append(str(params.get("Key")))

    events.register("provide-client-params.s3.GetObject", count)
    try:
        yield seen
    finally:
        events.unregister("provide-client-params.s3.GetObject", count)


def _in_parts(s3: Any, files: dict[str, bytes]) -> tuple[str, dict[str, str]]:
    """*files* put in parts under a new prefix of :data:`SOURCE`: the prefix and ETags."""
    prefix = f"z/{uuid.uuid4().hex[:8]}"
    etags = {}
    for path, body in files.items():
        put_in_parts(s3, SOURCE, f"{prefix}/{path}", body)
        etags[path] = s3.head_object(Bucket=SOURCE, Key=f"{prefix}/{path}")["ETag"]
        assert etags[path].strip('"').endswith("-2")
    return prefix, etags


def _hash(
    api: httpx.Client,
    zarr_id: str,
    prefix: str,
    files: dict[str, tuple[int, str]],
    bucket: str = SOURCE,
) -> httpx.Response:
    return api.post(
        f"/api/zarr/{zarr_id}/upload/import/hash/",
        json={
            "bucket": bucket,
            "prefix": prefix,
            "files": [{"path": p, "size": n, "etag": e} for p, (n, e) in files.items()],
        },
    )


def test_the_archive_answers_the_md5s_and_reads_each_once(
    api: httpx.Client, zarr_id: str, source_s3: Any, reads: list[str]
) -> None:
    files = {"a/big": os.urandom(PART + 1000), "b/big": os.urandom(PART + 7)}
    prefix, etags = _in_parts(source_s3, files)
    listed = {p: (len(b), etags[p]) for p, b in files.items()}
    answer = _hash(api, zarr_id, prefix, listed)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"files": [{"path": p, "md5": md5(b)} for p, b in files.items()]}
    assert sorted(reads) == sorted(f"{prefix}/{p}" for p in files)  # each read once
    # asked again (a rerun): the answer kept, the source only checked (HeadObject)
    reads.clear()
    again = _hash(api, zarr_id, prefix, listed)
    assert again.status_code == 200 and again.json() == answer.json()
    assert reads == []


def test_a_source_changed_since_its_listing_is_refused(
    api: httpx.Client, zarr_id: str, source_s3: Any
) -> None:
    files = {"a/big": os.urandom(PART + 1000), "b/big": os.urandom(PART + 7)}
    prefix, etags = _in_parts(source_s3, files)
    listed = {p: (len(b), etags[p]) for p, b in files.items()}
    assert _hash(api, zarr_id, prefix, {"a/big": listed["a/big"]}).status_code == 200
    for path in files:  # both changed: one never hashed, one whose md5 the archive kept
        put_in_parts(source_s3, SOURCE, f"{prefix}/{path}", os.urandom(PART + 9))
    refused = _hash(api, zarr_id, prefix, listed)
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"]["paths"] == sorted(files)
    # the size is checked too: a listed size that is not the object's is a change
    etag = source_s3.head_object(Bucket=SOURCE, Key=f"{prefix}/a/big")["ETag"]
    wrong_size = _hash(api, zarr_id, prefix, {"a/big": (PART + 1, etag)})
    assert wrong_size.status_code == 409, wrong_size.text


def test_the_bounds_of_a_request(
    api: httpx.Client,
    zarr_id: str,
    source_s3: Any,
    reads: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    too_many = {f"c/{i}": (10, "0" * 32 + "-2") for i in range(import_hash.MAX_HASH_FILES + 1)}
    answer = _hash(api, zarr_id, "z", too_many)
    assert answer.status_code == 413, answer.text
    assert f"at most {import_hash.MAX_HASH_FILES}" in answer.text
    monkeypatch.setattr(import_hash, "MAX_HASH_BYTES", PART)
    files = {"a/big": os.urandom(PART + 1000), "b/big": os.urandom(PART + 7)}
    prefix, etags = _in_parts(source_s3, files)
    listed = {p: (len(b), etags[p]) for p, b in files.items()}
    too_big = _hash(api, zarr_id, prefix, listed)
    assert too_big.status_code == 413, too_big.text
    assert f"at most {PART} are hashed" in too_big.text
    assert reads == []  # refused before anything is read
    # one object alone may pass the bound: the only way to hash it
    alone = _hash(api, zarr_id, prefix, {"a/big": listed["a/big"]})
    assert alone.status_code == 200, alone.text
    assert alone.json()["files"] == [{"path": "a/big", "md5": md5(files["a/big"])}]


def test_who_and_what_may_be_hashed(
    api: httpx.Client,
    live_server: LiveServer,
    users: Users,
    zarr_id: str,
    bucket: str,
    source_s3: Any,
    reads: list[str],
) -> None:
    """The writer check first, then the source's: another user is refused even for an allowed
    bucket; a bucket not listed, the archive's own bucket and a path out of the prefix are
    refused; nothing is read."""
    files = {"a/big": os.urandom(PART + 3)}
    prefix, etags = _in_parts(source_s3, files)
    listed = {"a/big": (PART + 3, etags["a/big"])}
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"token {users.other}"}, timeout=60
    ) as other:
        assert _hash(other, zarr_id, prefix, listed).status_code in (403, 404)
    assert _hash(api, zarr_id, prefix, listed, bucket="zunlisted-bucket").status_code == 403
    assert _hash(api, zarr_id, prefix, listed, bucket=bucket).status_code == 403
    outside = _hash(api, zarr_id, prefix, {"../x": listed["a/big"]})
    assert outside.status_code in (400, 422), outside.text
    assert reads == []
