"""Full-object CRC32 checksums of objects copied in parts (#39), on both stores: S3 on the
test SeaweedFS and the in-memory store (with its HTTP face).

A multipart upload created with ``full_object_crc32`` answers each part copy's CRC32 and is
completed with the parts' and the whole object's CRC32s; a wrong one is refused
(:class:`ChecksumRefused`) and writes nothing.  ``head`` says the CRC32 and the recorded
``zarrchive-md5``; a presigned HEAD URL signing ``x-amz-checksum-mode`` answers them as S3's
headers (and nothing else: a GET of it, or a HEAD without the header, is refused); the plain
public URL answers them to an anonymous HEAD with the header.  An object PUT in one piece
(as clients upload small files) has none.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator

import httpx
import pytest

from tests.helpers.presigned import put_headers
from tests.helpers.s3 import object_store
from tests.helpers.zarr_client import md5
from zarrchive.errors import ChecksumRefused
from zarrchive.storage.crc32 import crc32_base64
from zarrchive.storage.memory import MemoryObjectStore
from zarrchive.storage.objects import MD5_METADATA
from zarrchive.storage.protocol import ObjectStoreProtocol
from zarrchive.storage.seaweedfs import SeaweedFS

PART = 5 * 1024**2
DATA = random.Random(39).randbytes(PART + 4321)  # two parts
MODE = {"x-amz-checksum-mode": "ENABLED"}


def crc(data: bytes) -> str:
    return crc32_base64(zlib.crc32(data))


class FullObjectChecksumTests:
    """Every test runs on each store (the subclasses give the ``store`` fixture)."""

    @pytest.fixture
    def store(self) -> ObjectStoreProtocol:
        raise NotImplementedError

    def copy_in_parts(
        self, store: ObjectStoreProtocol, key: str
    ) -> tuple[str, list[tuple[int, str]], dict[int, str]]:
        """``src`` (put whole) copied to a new upload of *key* with a full-object CRC32 and
        the md5 metadata: the upload id, its parts and their CRC32s as S3 answered."""
        store.put("src", DATA)
        upload = store.create_multipart_upload(
            key, metadata={MD5_METADATA: md5(DATA)}, full_object_crc32=True
        )
        ranges = [(1, 0, PART - 1), (2, PART, len(DATA) - 1)]
        copied = [
            (n, store.upload_part_copy("src", None, key, upload, n, first, last))
            for n, first, last in ranges
        ]
        assert [p.checksum_crc32 for _n, p in copied] == [crc(DATA[:PART]), crc(DATA[PART:])]
        parts = [(n, p.etag) for n, p in copied]
        crcs = {n: p.checksum_crc32 for n, p in copied if p.checksum_crc32}
        return upload, parts, crcs

    def test_a_copy_in_parts_carries_the_full_object_crc32_and_the_md5(
        self, store: ObjectStoreProtocol
    ) -> None:
        upload, parts, crcs = self.copy_in_parts(store, "big")
        store.complete_multipart(
            "big", upload, parts, part_crc32s=crcs, full_object_crc32=crc(DATA)
        )
        info = store.head("big")
        assert info is not None and info.etag.endswith("-2")
        assert (info.full_object_crc32, info.recorded_md5) == (crc(DATA), md5(DATA))
        assert store.head("big", info.version_id) == info
        # the presigned HEAD URL (of that version) answers them as S3's headers
        assert info.version_id is not None
        url = store.presign_head("big", 60, version_id=info.version_id, checksum_mode=True)
        with httpx.Client(timeout=30) as http:
            head = http.head(url, headers=MODE)
            assert head.status_code == 200, head.text
            assert head.headers["x-amz-checksum-crc32"] == crc(DATA)
            assert head.headers["x-amz-checksum-type"] == "FULL_OBJECT"
            assert head.headers[f"x-amz-meta-{MD5_METADATA}"] == md5(DATA)
            assert int(head.headers["content-length"]) == len(DATA)
            # it signs the method and the header: nothing else is answered
            assert http.get(url, headers=MODE).status_code == 403
            assert http.head(url).status_code == 403
            # an unsigned checksum header on a URL that does not sign it: refused too
            plain = store.presign_head("big", 60)
            assert http.head(plain).status_code == 200
            assert http.head(plain, headers=MODE).status_code == 403
            # anonymous readers of the public bucket ask with the header
            public = http.head(store.public_url("big"), headers=MODE)
            assert public.status_code == 200
            assert public.headers["x-amz-checksum-crc32"] == crc(DATA)

    def test_a_wrong_full_object_crc32_is_refused_and_writes_nothing(
        self, store: ObjectStoreProtocol
    ) -> None:
        store.put("big", b"before")
        upload, parts, crcs = self.copy_in_parts(store, "big")
        wrong = crc(DATA[::-1])
        with pytest.raises(ChecksumRefused):
            store.complete_multipart(
                "big", upload, parts, part_crc32s=crcs, full_object_crc32=wrong
            )
        assert store.get("big") == b"before"
        store.abort_multipart_upload("big", upload)

    def test_a_copy_of_an_object_keeps_its_crc32_and_md5(self, store: ObjectStoreProtocol) -> None:
        upload, parts, crcs = self.copy_in_parts(store, "big")
        store.complete_multipart(
            "big", upload, parts, part_crc32s=crcs, full_object_crc32=crc(DATA)
        )
        store.copy_within("big", "copied")
        info = store.head("copied")
        assert info is not None
        assert (info.full_object_crc32, info.recorded_md5) == (crc(DATA), md5(DATA))

    def test_an_object_put_in_one_piece_has_neither(self, store: ObjectStoreProtocol) -> None:
        body = b"a small chunk"
        url = store.presign_put("small", md5(body), 60)
        with httpx.Client(timeout=30) as http:
            assert http.put(url, content=body, headers=put_headers(url, body)).status_code == 200
            head = http.head(store.presign_head("small", 60, checksum_mode=True), headers=MODE)
        assert head.status_code == 200
        assert "x-amz-checksum-crc32" not in head.headers
        assert f"x-amz-meta-{MD5_METADATA}" not in head.headers
        info = store.head("small")
        assert info is not None and info.etag == md5(body)
        assert (info.full_object_crc32, info.recorded_md5) == (None, None)


class TestS3(FullObjectChecksumTests):
    @pytest.fixture
    def store(self, seaweedfs: SeaweedFS, fresh_bucket: str) -> Iterator[ObjectStoreProtocol]:
        store = object_store(seaweedfs, fresh_bucket)
        yield store
        store.close()


@pytest.mark.unit
class TestMemory(FullObjectChecksumTests):
    @pytest.fixture
    def store(self) -> Iterator[ObjectStoreProtocol]:
        store = MemoryObjectStore("zpub-memory")
        yield store
        store.close()
