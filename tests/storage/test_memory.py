"""What the in-memory store's URLs refuse, beyond the conformance suite: S3's rules of
presigned requests (expiry, signed Content-Type, a tampered URL, unsigned writes), ranges,
a private bucket, and DANDI's presigned completion of an upload."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from zarrchive.storage.memory import MemoryObjectStore
from zarrchive.storage.objects import md5_to_content_md5

pytestmark = pytest.mark.unit
MiB = 1024 * 1024


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> Iterator[MemoryObjectStore]:
    store = MemoryObjectStore("zpub-memory", clock=clock)
    yield store
    store.close()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def put(url: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.put(
        url, content=body, headers={"Content-MD5": md5_to_content_md5(md5(body))} | headers
    )


def test_an_expired_url_is_refused(store: MemoryObjectStore, clock: Clock) -> None:
    url = store.presign_put("k", md5(b"body"), 60)
    clock.now += timedelta(seconds=61)
    refused = put(url, b"body")
    assert refused.status_code == 403 and b"expired" in refused.content
    assert store.head("k") is None
    clock.now -= timedelta(seconds=2)  # within its time: taken
    assert put(url, b"body").status_code == 200
    assert store.get("k") == b"body"


def test_a_signed_content_type_must_be_sent_as_signed(store: MemoryObjectStore) -> None:
    url = store.presign_put("t", md5(b"{}"), 60, content_type="application/json")
    assert put(url, b"{}", **{"Content-Type": "text/html"}).status_code == 403
    assert put(url, b"{}").status_code == 403  # (httpx sends no type of its own)
    assert store.head("t") is None
    assert put(url, b"{}", **{"Content-Type": "application/json"}).status_code == 200
    stored = store.stored("t")
    assert stored is not None and stored.content_type == "application/json"


def test_a_tampered_url_is_refused(store: MemoryObjectStore) -> None:
    url = store.presign_put("mine", md5(b"x"), 60)
    for forged in (
        url.replace("/mine?", "/theirs?"),
        url.replace("X-Amz-Expires=60", "X-Amz-Expires=600"),
        url[:-4] + ("0000" if not url.endswith("0000") else "1111"),
        url.replace("X-Amz-Credential=memory", "X-Amz-Credential=other"),
        url.replace("127.0.0.1", "localhost"),  # signed for another host
    ):
        assert 400 <= put(forged, b"x").status_code < 500, forged
    assert list(store.iter_versions("")) == []


def test_unsigned_writes_and_private_reads_are_refused() -> None:
    store = MemoryObjectStore("zemb-private", public_read=False)
    try:
        store.put("secret", b"s")
        assert httpx.put(store.public_url("new"), content=b"n").status_code == 403
        assert httpx.get(store.public_url("secret")).status_code == 403
        assert httpx.get(store.presign_get("secret", 60)).content == b"s"
        assert store.head("new") is None
    finally:
        store.close()


def test_ranges_and_versions_are_served(store: MemoryObjectStore) -> None:
    old = store.put("r", b"0123456789")
    store.put("r", b"abcdefghij")
    assert old is not None
    url = store.presign_get("r", 60)
    ranged = httpx.get(url, headers={"Range": "bytes=2-4"})
    assert (ranged.status_code, ranged.content) == (206, b"cde")
    assert httpx.get(url, headers={"Range": "bytes=-3"}).content == b"hij"
    assert httpx.get(url, headers={"Range": "bytes=20-"}).status_code == 416
    assert httpx.get(store.presign_get_version("r", old, 60)).content == b"0123456789"
    assert httpx.get(store.public_version_url("r", old)).content == b"0123456789"
    assert httpx.get(store.presign_get("absent", 60)).status_code == 404


def test_an_upload_completed_by_its_presigned_post(store: MemoryObjectStore) -> None:
    """DANDI's clients complete their uploads themselves: the parts' XML to a presigned POST."""
    bodies = [b"a" * (5 * MiB), b"tail"]
    upload_id = store.create_multipart_upload("blobs/x")
    etags = []
    for number, body in enumerate(bodies, start=1):
        answer = put(store.presign_upload_part("blobs/x", upload_id, number, 60, md5(body)), body)
        assert answer.status_code == 200
        etags.append(answer.headers["ETag"])
    xml = (
        "<CompleteMultipartUpload>"
        + "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>"
            for n, e in enumerate(etags, start=1)
        )
        + "</CompleteMultipartUpload>"
    )
    url = store.presign_complete_multipart("blobs/x", upload_id, 60)
    wrong = xml.replace(etags[0], '"' + md5(b"other") + '"')
    assert httpx.post(url, content=wrong).status_code == 400
    done = httpx.post(url, content=xml)
    assert done.status_code == 200 and b"-2" in done.content
    assert store.get("blobs/x") == b"".join(bodies)
    assert store.list_parts("blobs/x", upload_id) is None
    assert httpx.post(url, content=xml).status_code == 404  # NoSuchUpload


def test_a_part_of_an_unknown_upload_is_refused(store: MemoryObjectStore) -> None:
    assert put(store.presign_upload_part("k", "no-such-upload", 1, 60), b"p").status_code == 404
