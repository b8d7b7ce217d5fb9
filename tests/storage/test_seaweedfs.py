"""The harness itself: a real SeaweedFS behaves like the S3 the archive relies on."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.helpers.s3 import object_store
from tests.helpers.waiting import EVENT_TIMEOUT
from zarrchive.errors import StorageUnavailable
from zarrchive.storage.objects import ObjectStore, md5_to_content_md5
from zarrchive.storage.seaweedfs import SeaweedFS, _port_free, free_port, write_private


@pytest.fixture
def store(seaweedfs: SeaweedFS, fresh_bucket: str) -> ObjectStore:
    return object_store(seaweedfs, fresh_bucket)


def test_versioned_put_returns_a_version_id(s3: Any, fresh_bucket: str) -> None:
    bucket = fresh_bucket
    first = s3.put_object(Bucket=bucket, Key="a/b", Body=b"one")
    second = s3.put_object(Bucket=bucket, Key="a/b", Body=b"two")
    assert first["VersionId"] and second["VersionId"]
    assert first["VersionId"] != second["VersionId"]
    versions = s3.list_object_versions(Bucket=bucket, Prefix="a/b")["Versions"]
    assert {v["VersionId"] for v in versions} == {first["VersionId"], second["VersionId"]}
    assert s3.get_object(Bucket=bucket, Key="a/b")["Body"].read() == b"two"


def test_presigned_put_with_content_md5_accepts_the_right_body(store: ObjectStore) -> None:
    body = b"the right body"
    md5 = hashlib.md5(body).hexdigest()
    url = store.presign_put("k/right", md5, 60)
    response = httpx.put(url, content=body, headers={"Content-MD5": md5_to_content_md5(md5)})
    assert response.status_code == 200, response.text
    head = store.head("k/right")
    assert head is not None and head.etag == md5 and head.size == len(body)


def test_presigned_put_refuses_a_wrong_body_and_stores_nothing(store: ObjectStore) -> None:
    md5 = hashlib.md5(b"what was announced").hexdigest()
    url = store.presign_put("k/wrong", md5, 60)
    response = httpx.put(
        url, content=b"something else", headers={"Content-MD5": md5_to_content_md5(md5)}
    )
    assert response.status_code == 400
    assert "BadDigest" in response.text
    assert store.head("k/wrong") is None
    # Without the header the signature does not match: refused as well.
    response = httpx.put(url, content=b"what was announced")
    assert response.status_code == 403
    assert store.head("k/wrong") is None


def test_latest_version_and_delete_version_restore_old_content(store: ObjectStore) -> None:
    store.put("x", b"old")
    store.put("x", b"new")
    latest = store.latest_version("x")
    assert latest is not None and latest.etag == hashlib.md5(b"new").hexdigest()
    store.delete_version("x", latest.version_id)
    assert store.get("x") == b"old"


def test_weed_dies_with_its_parent(tmp_path: Path) -> None:
    """No orphan weed process, even when the parent is killed with SIGKILL."""
    script = (
        "import sys, time, pathlib\n"
        "from zarrchive.storage.seaweedfs import SeaweedFS\n"
        "s = SeaweedFS(pathlib.Path(sys.argv[1]), 'k', 's')\n"
        "s.start()\n"
        "print(s.process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "s3")], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    weed_pid = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + EVENT_TIMEOUT  # generous: the machine may be loaded
    while time.monotonic() < deadline:
        try:
            os.kill(weed_pid, 0)
        except ProcessLookupError:
            return
        # reap if it is our grandchild turned zombie (it is re-parented, so just poll)
        time.sleep(0.2)
    os.kill(weed_pid, signal.SIGKILL)
    pytest.fail("weed outlived its parent")


def test_public_buckets_are_world_readable_and_others_not(
    s3: Any, bucket: str, embargo_bucket: str, seaweedfs: SeaweedFS
) -> None:
    key = f"zarr/{uuid.uuid4()}"
    for name in (bucket, embargo_bucket):
        s3.put_object(Bucket=name, Key=key, Body=b"data")
    assert httpx.get(f"{seaweedfs.endpoint_url}/{bucket}/{key}").content == b"data"
    assert httpx.get(f"{seaweedfs.endpoint_url}/{embargo_bucket}/{key}").status_code == 403
    # anonymous writes are refused everywhere
    assert httpx.put(f"{seaweedfs.endpoint_url}/{bucket}/{key}", content=b"x").status_code == 403


@pytest.mark.parametrize("others", [0, 1100])
def test_find_lists_or_heads_and_reports_exactly(store: ObjectStore, others: int) -> None:
    """find() agrees with HEAD for present, absent and wrong keys, whatever the directory holds."""
    keys = [f"d/k{i:04d}" for i in range(0, 300, 2)]
    present = keys[::3]
    store.map(lambda k: store.put(k, k.encode()), present)
    # other keys interleaved within the range make listing expensive: find falls back to HEADs
    store.map(lambda i: store.put(f"d/k0000y{i:05d}", b"other"), range(others))
    store.put("d/sub/k0002", b"not in d/ itself")
    found = store.find([*keys, "e/only", "d/sub/k0002"], max_pages=1)
    for key in keys:
        info = found[key]
        if key in present:
            assert info is not None and info.etag == hashlib.md5(key.encode()).hexdigest()
            assert info.size == len(key)
        else:
            assert info is None
    assert found["e/only"] is None
    assert found["d/sub/k0002"] is not None


def test_fast_timestamp_parser_agrees_with_botocore() -> None:
    import botocore.utils

    from zarrchive.storage.objects import parse_timestamp

    for text in (
        "2022-06-27T23:09:39.000Z",
        "2022-06-27T23:09:39Z",
        "2022-06-27T23:09:39+02:00",
        "Sun, 22 Nov 2026 05:40:31 GMT",
        "1700000000",
    ):
        assert parse_timestamp(text) == botocore.utils.parse_timestamp(text), text


def test_public_bucket_is_listable_anonymously_and_the_embargo_bucket_not(
    s3: Any, bucket: str, embargo_bucket: str, seaweedfs: SeaweedFS
) -> None:
    """As DANDI's public bucket: ``aws s3 ls --no-sign-request`` works; the embargo bucket
    stays private."""
    prefix = f"zarr/{uuid.uuid4()}/"
    for name in (bucket, embargo_bucket):
        s3.put_object(Bucket=name, Key=prefix + "a/0", Body=b"data")
    anonymous = boto3.client(
        "s3",
        endpoint_url=seaweedfs.endpoint_url,
        region_name="us-east-1",
        config=Config(signature_version=UNSIGNED),
    )
    listed = anonymous.list_objects_v2(Bucket=bucket, Prefix=prefix)
    assert [o["Key"] for o in listed["Contents"]] == [prefix + "a/0"]
    with pytest.raises(ClientError) as refused:
        anonymous.list_objects_v2(Bucket=embargo_bucket, Prefix=prefix)
    assert refused.value.response["Error"]["Code"] == "AccessDenied"


def test_port_in_time_wait_counts_as_free() -> None:
    """After Ctrl-C the embedded S3's port holds TIME_WAIT sockets for a minute: a restart
    must not take them for a running server."""
    port = free_port()
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its end goes to TIME_WAIT
    time.sleep(0.1)
    client.close()
    server.close()
    assert _port_free(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # what the old probe did: TIME_WAIT got in its way
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    busy.bind(("127.0.0.1", port))
    busy.listen()
    try:
        assert not _port_free(port)  # a listening socket is really in the way
    finally:
        busy.close()


def test_private_files_are_never_readable_by_others(tmp_path: Path) -> None:
    path = tmp_path / "secret.json"
    write_private(path, '{"k": 1}')
    assert path.read_text() == '{"k": 1}' and (path.stat().st_mode & 0o777) == 0o600
    write_private(path, '{"k": 2}')
    assert path.read_text() == '{"k": 2}' and (path.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["secret.json"]


@pytest.mark.parametrize("name", ["a#b", "q?x=1", "100%", "with space", "é/ü"])
def test_public_urls_are_percent_encoded(
    store: ObjectStore, seaweedfs: SeaweedFS, bucket: str, name: str
) -> None:
    public = object_store(seaweedfs, bucket)
    key = f"zarr/{uuid.uuid4()}/{name}"
    public.put(key, b"exact bytes")
    assert httpx.get(public.public_url(key)).content == b"exact bytes"


def test_unreachable_s3_is_storage_unavailable() -> None:
    port = free_port()  # nothing listens there
    store = ObjectStore(
        endpoint_url=f"http://127.0.0.1:{port}",
        bucket="nowhere",
        access_key_id="k",
        secret_access_key="s",
    )
    started = time.monotonic()
    with pytest.raises(StorageUnavailable, match="retry later"):
        store.get("a")
    assert time.monotonic() - started < 15


#: Sibling names that differ after a character that sorts before "/" ("data/" and "data-2/",
#: "a.b" and "a/"): S3 orders keys by their bytes, so "data-2/x" < "data/x".
_TRICKY_KEYS = sorted(
    [f"z/data/{i}" for i in range(3)]
    + [f"z/data-2/{i}" for i in range(3)]
    + ["z/a.b", "z/a/0", "z/a/1", "z/a-/0"]
)


def _paged_versions(s3: Any, bucket: str, page: int) -> list[str]:
    keys: list[str] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": "z/", "MaxKeys": page}
    while True:
        answer = s3.list_object_versions(**kwargs)
        keys += [v["Key"] for v in answer.get("Versions", [])]
        if not answer.get("IsTruncated"):
            return keys
        kwargs["KeyMarker"] = answer["NextKeyMarker"]
        kwargs["VersionIdMarker"] = answer.get("NextVersionIdMarker", "")


def test_seaweedfs_lists_every_version_in_one_page(s3: Any, fresh_bucket: str) -> None:
    for key in _TRICKY_KEYS:
        s3.put_object(Bucket=fresh_bucket, Key=key, Body=b"x")
    assert _paged_versions(s3, fresh_bucket, 1000) == _TRICKY_KEYS


@pytest.mark.xfail(
    strict=True,
    reason="SeaweedFS 4.48 bug: a paged ListObjectVersions loses or misorders versions when "
    "sibling names differ after a character below '/' (data/ vs data-2/); listings of more "
    "than 1000 versions on such names (verify of big batches, purge, unembargo history, "
    "fsck --repair, gc, manifests) are affected. AWS S3 pages them correctly.",
)
def test_seaweedfs_pages_versions_in_byte_order(s3: Any, fresh_bucket: str) -> None:
    for key in _TRICKY_KEYS:
        s3.put_object(Bucket=fresh_bucket, Key=key, Body=b"x")
    assert _paged_versions(s3, fresh_bucket, 2) == _TRICKY_KEYS
