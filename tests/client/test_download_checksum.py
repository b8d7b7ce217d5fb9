"""Issue 39 item 3: a big file is checked by S3's full-object CRC32 instead of its md5 when
the object's HEAD ties that CRC32 to the md5 the archive lists (``x-amz-meta-zarrchive-md5``,
written by the archive with the CRC32 when it copies a file uploaded in parts); its ranged
GETs must match the HEAD's ETag (``If-Match``: a replaced object answers 412); anything else
is checked by its md5 as before.

The Zarrs are uploaded through the archive with a multipart threshold of 5 MiB, so their big
file is copied into place in parts and carries the CRC32 (the real path); some tests replace
that object in the bucket (boto3, the test's credentials) to give it another checksum, other
metadata or other bytes."""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.local_zarr import upload_files, zarr_checksum_of
from tests.helpers.range_fetchers import CountingFetcher
from zarrchive.client import ApiClient, RetryEvent
from zarrchive.client.api import DownloadLink, ZarrInfo
from zarrchive.client.download import (
    PARTIAL_SUFFIX,
    PARTS_SUFFIX,
    Downloader,
    HttpFetcher,
    ObjectHead,
    Write,
)
from zarrchive.client.remote import RemoteFile
from zarrchive.client.upload import BatchRecords
from zarrchive.errors import TransferError
from zarrchive.services.runtime import Archive
from zarrchive.transport import RetryPolicy

MIB = 1 << 20
pytestmark = pytest.mark.settings(multipart_threshold=5 * MIB)

BIG_FILE, PART = MIB, MIB  # the big file below: 7 parts
BIG = hashlib.sha256(b"seed").digest() * ((6 * MIB + 123) // 32) + b"tail"
OTHER = bytes(reversed(BIG))  # the same size, other bytes
SMALL = {".zgroup": b'{"zarr_format": 2}', "arr/.zarray": b"{}", "arr/1": b"one" * 300}
QUICK = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.01)


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def put_object(
    s3: Any,
    bucket: str,
    key: str,
    body: bytes,
    *,
    meta_md5: str | None,
    crc32: bool = True,
    part: int = 5 * MIB,
) -> None:
    """*body* at *key*: with S3's full-object CRC32 (a multipart upload of parts of *part*
    bytes, as the archive's copies) and ``zarrchive-md5: meta_md5``, or a plain PUT without
    them.  (The same bytes in parts of another size: another ETag.)"""
    metadata = {} if meta_md5 is None else {"zarrchive-md5": meta_md5}
    if not crc32:
        s3.put_object(Bucket=bucket, Key=key, Body=body, Metadata=metadata)
        return
    upload = s3.create_multipart_upload(
        Bucket=bucket,
        Key=key,
        ChecksumAlgorithm="CRC32",
        ChecksumType="FULL_OBJECT",
        Metadata=metadata,
    )
    parts = []
    for number, start in enumerate(range(0, len(body), part), 1):
        answer = s3.upload_part(
            Bucket=bucket,
            Key=key,
            UploadId=upload["UploadId"],
            PartNumber=number,
            Body=body[start : start + part],
            ChecksumAlgorithm="CRC32",
        )
        parts.append(
            {"PartNumber": number, "ETag": answer["ETag"], "ChecksumCRC32": answer["ChecksumCRC32"]}
        )
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key=key,
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": parts},
        ChecksumCRC32=crc32_b64(body),
        ChecksumType="FULL_OBJECT",
    )


def upload(tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords) -> str:
    return upload_files(
        client, records, dandiset, tmp_path / "source.zarr", {**SMALL, "arr/0": BIG}
    )


@pytest.fixture
def zarr_id(tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords) -> str:
    return upload(tmp_path, client, dandiset, records)


@pytest.fixture
def key(zarr_id: str) -> str:
    return f"zarr/{zarr_id}/arr/0"


@pytest.fixture
def public(archive: Archive) -> str:
    return archive.settings.s3_bucket


def downloader(client: ApiClient, fetcher: HttpFetcher | None = None, **kw: Any) -> Downloader:
    return Downloader(client, jobs=3, fetcher=fetcher, big_file=BIG_FILE, part_size=PART, **kw)


def record_of(dest: Path) -> dict[str, Any] | None:
    record = dest / "arr" / ("0" + PARTIAL_SUFFIX + PARTS_SUFFIX)
    return dict(json.loads(record.read_text())) if record.exists() else None


def test_the_archives_copy_in_parts_is_checked_by_its_crc32(
    tmp_path: Path, client: ApiClient, zarr_id: str, s3: Any, public: str, key: str
) -> None:
    head = s3.head_object(Bucket=public, Key=key, ChecksumMode="ENABLED")
    assert head["ChecksumType"] == "FULL_OBJECT" and head["ChecksumCRC32"] == crc32_b64(BIG)
    assert head["Metadata"]["zarrchive-md5"] == md5(BIG)
    dest = tmp_path / "dest"
    fetcher = CountingFetcher()
    with downloader(client, fetcher) as d:
        result = d.download(zarr_id, dest)
    assert result.ok and result.crc32 == ["arr/0"]
    assert (dest / "arr" / "0").read_bytes() == BIG
    assert zarr_checksum_of(dest) == client.get_zarr(zarr_id).checksum
    assert len([r for r in fetcher.ranges if r[0] == "arr/0"]) == 7


def test_no_md5_is_computed_over_a_file_checked_by_crc32(
    tmp_path: Path, client: ApiClient, zarr_id: str, s3: Any, public: str, key: str
) -> None:
    # Other bytes, with their own right CRC32 and the listed md5 in their metadata: only
    # the CRC32 path accepts them (an md5 of the bytes is not the listed one).
    put_object(s3, public, key, OTHER, meta_md5=md5(BIG))
    dest = tmp_path / "dest"
    with downloader(client) as d:
        result = d.download(zarr_id, dest)
    assert result.ok and result.crc32 == ["arr/0"]
    assert (dest / "arr" / "0").read_bytes() == OTHER


def test_a_flipped_byte_is_caught_by_the_crc32_and_not_kept(
    tmp_path: Path, client: ApiClient, zarr_id: str
) -> None:
    class Flipping(HttpFetcher):
        """Flips the first byte of the second part, *times* times."""

        def __init__(self, times: int) -> None:
            super().__init__(max_connections=4)
            self.times = times

        def fetch_range(self, file: RemoteFile, start: int, end: int, write: Write) -> None:
            if file.path != "arr/0" or start != PART or self.times == 0:
                return super().fetch_range(file, start, end, write)
            self.times -= 1
            first = [True]

            def flip(block: bytes | memoryview) -> None:
                if first[0]:
                    first[0] = False
                    changed = bytearray(block)
                    changed[0] ^= 0xFF
                    block = bytes(changed)
                write(block)

            super().fetch_range(file, start, end, flip)

    events: list[RetryEvent] = []
    dest = tmp_path / "dest"
    with downloader(client, Flipping(1), retry=QUICK, on_retry=events.append) as d:
        result = d.download(zarr_id, dest)
    assert result.ok and result.crc32 == ["arr/0"]
    assert (dest / "arr" / "0").read_bytes() == BIG
    assert len(events) == 1 and "CRC32" in events[0].reason
    # wrong every time: an error, and neither the file nor its parts are kept
    again = tmp_path / "again"
    with (
        downloader(client, Flipping(10), retry=QUICK) as d,
        pytest.raises(TransferError, match="CRC32"),
    ):
        d.download(zarr_id, again)
    assert not (again / "arr" / "0").exists()
    assert not list(again.rglob("*" + PARTIAL_SUFFIX + "*"))


@pytest.mark.parametrize("kind", ["other md5 in the metadata", "no checksum"])
def test_without_a_crc32_tied_to_the_listed_md5_the_md5_is_checked(
    tmp_path: Path,
    client: ApiClient,
    zarr_id: str,
    s3: Any,
    public: str,
    key: str,
    kind: str,
) -> None:
    if kind == "no checksum":
        put_object(s3, public, key, BIG, meta_md5=md5(BIG), crc32=False)
    else:
        put_object(s3, public, key, BIG, meta_md5=md5(OTHER))
    dest = tmp_path / "dest"
    with downloader(client) as d:
        result = d.download(zarr_id, dest)
    assert result.ok and result.crc32 == []
    assert (dest / "arr" / "0").read_bytes() == BIG
    # and such an object with other bytes is refused by the md5
    put_object(s3, public, key, OTHER, meta_md5=md5(OTHER), crc32=kind != "no checksum")
    with (
        downloader(client, retry=QUICK) as d,
        pytest.raises(TransferError, match="md5"),
    ):
        d.download(zarr_id, tmp_path / "other")
    assert not (tmp_path / "other" / "arr" / "0").exists()


class Replacing(HttpFetcher):
    """Replaces the object after its first HEAD (before any GET): with *body*, its CRC32 and
    *meta_md5*, in parts of 6 MiB (another ETag than the archive's copy in 5 MiB parts)."""

    def __init__(self, s3: Any, bucket: str, key: str, body: bytes, meta_md5: str) -> None:
        super().__init__(max_connections=4)
        self.s3, self.bucket, self.key, self.body, self.meta_md5 = s3, bucket, key, body, meta_md5
        self.heads: list[ObjectHead | None] = []

    def head(self, file: RemoteFile) -> ObjectHead | None:
        answer = super().head(file)
        if not self.heads:
            put_object(
                self.s3, self.bucket, self.key, self.body, meta_md5=self.meta_md5, part=6 * MIB
            )
        self.heads.append(answer)
        return answer


def test_an_object_replaced_by_the_same_bytes_after_its_head_is_read_again_from_its_head(
    tmp_path: Path, client: ApiClient, zarr_id: str, s3: Any, public: str, key: str
) -> None:
    fetcher = Replacing(s3, public, key, BIG, md5(BIG))
    events: list[RetryEvent] = []
    dest = tmp_path / "dest"
    with downloader(client, fetcher, retry=QUICK, on_retry=events.append) as d:
        result = d.download(zarr_id, dest)
    assert result.ok and result.crc32 == ["arr/0"]
    assert (dest / "arr" / "0").read_bytes() == BIG
    assert len(fetcher.heads) == 2
    first, second = fetcher.heads
    assert first is not None and second is not None and first.etag != second.etag
    assert [e.what for e in events] == ["GET 'arr/0'"]
    assert "changed on S3" in events[0].reason


def test_an_object_replaced_by_other_bytes_is_never_kept_under_the_listed_md5(
    tmp_path: Path, client: ApiClient, zarr_id: str, s3: Any, public: str, key: str
) -> None:
    fetcher = Replacing(s3, public, key, OTHER, md5(OTHER))
    events: list[RetryEvent] = []
    dest = tmp_path / "dest"
    with (
        downloader(client, fetcher, retry=QUICK, on_retry=events.append) as d,
        pytest.raises(TransferError, match="md5"),
    ):
        d.download(zarr_id, dest)
    assert "changed on S3" in events[0].reason
    assert all("md5" in e.reason for e in events[1:])
    assert not (dest / "arr" / "0").exists()
    assert not list(dest.rglob("*" + PARTIAL_SUFFIX + "*"))


def test_resumption_keeps_the_parts_made_under_the_same_crc32_and_etag_only(
    tmp_path: Path, client: ApiClient, zarr_id: str, s3: Any, public: str, key: str
) -> None:
    dest = tmp_path / "dest"
    last = 6 * PART
    with (
        Downloader(
            client, jobs=1, fetcher=CountingFetcher(fail_at=last), big_file=BIG_FILE, part_size=PART
        ) as d,
        pytest.raises(TransferError, match="refused range"),
    ):
        d.download(zarr_id, dest)
    record = record_of(dest)
    assert record is not None and record["check"] == "crc32"
    etag = s3.head_object(Bucket=public, Key=key)["ETag"]
    assert record["etag"] == etag and record["done"] == [0, 1, 2, 3, 4, 5]
    # the same object: the missing part only
    fetcher = CountingFetcher()
    with downloader(client, fetcher) as d:
        result = d.download(zarr_id, dest)
    assert result.ok and result.crc32 == ["arr/0"]
    assert (dest / "arr" / "0").read_bytes() == BIG
    assert [(s, e) for p, s, e in fetcher.ranges if p == "arr/0"] == [(last, len(BIG))]

    # interrupted again, then the object is replaced (the same bytes, another ETag): the
    # parts read under the old ETag are not kept
    again = tmp_path / "again"
    with (
        Downloader(
            client, jobs=1, fetcher=CountingFetcher(fail_at=last), big_file=BIG_FILE, part_size=PART
        ) as d,
        pytest.raises(TransferError, match="refused range"),
    ):
        d.download(zarr_id, again)
    put_object(s3, public, key, BIG, meta_md5=md5(BIG), part=6 * MIB)
    assert s3.head_object(Bucket=public, Key=key)["ETag"] != etag
    fetcher = CountingFetcher()
    with downloader(client, fetcher) as d:
        result = d.download(zarr_id, again)
    assert result.ok and (again / "arr" / "0").read_bytes() == BIG
    assert len([s for p, s, _ in fetcher.ranges if p == "arr/0"]) == 7


def test_a_record_made_under_the_md5_is_not_resumed_under_the_crc32(
    tmp_path: Path, client: ApiClient, zarr_id: str
) -> None:
    dest = tmp_path / "dest"
    (dest / "arr").mkdir(parents=True)
    (dest / "arr" / ("0" + PARTIAL_SUFFIX)).write_bytes(bytes(len(BIG)))
    record = {"md5": md5(BIG), "size": len(BIG), "part_size": PART, "done": [0, 1, 2, 3, 4, 5]}
    (dest / "arr" / ("0" + PARTIAL_SUFFIX + PARTS_SUFFIX)).write_text(json.dumps(record))
    fetcher = CountingFetcher()
    with downloader(client, fetcher) as d:
        result = d.download(zarr_id, dest)
    assert result.ok and result.crc32 == ["arr/0"]
    assert (dest / "arr" / "0").read_bytes() == BIG
    assert len([s for p, s, _ in fetcher.ranges if p == "arr/0"]) == 7  # all, not one


def test_an_embargoed_zarr_is_checked_by_crc32_through_its_presigned_head(
    tmp_path: Path, client: ApiClient, records: BatchRecords, archive: Archive, s3: Any
) -> None:
    dandiset = client.create_dandiset("secret", embargo=True)
    zarr_id = upload(tmp_path, client, dandiset, records)
    private = archive.settings.s3_embargo_bucket
    given: list[DownloadLink] = []

    class Linking(Downloader):
        """The archive's links; a presigned HEAD where the archive gives none (yet)."""

        def _private_links(self, zarr: ZarrInfo, paths: list[str]) -> dict[str, DownloadLink]:
            links = super()._private_links(zarr, paths)
            given.extend(links.values())
            for path, link in links.items():
                if link.head_url is None:
                    params = {"Bucket": private, "Key": f"zarr/{zarr_id}/{path}"}
                    head = s3.generate_presigned_url(
                        "head_object", Params={**params, "ChecksumMode": "ENABLED"}
                    )
                    links[path] = DownloadLink(link.url, head)
            return links

    with Linking(client, jobs=3, big_file=BIG_FILE, part_size=PART) as d:
        result = d.download(zarr_id, tmp_path / "dest")
    assert result.ok and result.crc32 == ["arr/0"]
    assert (tmp_path / "dest" / "arr" / "0").read_bytes() == BIG
    assert given  # the private path: presigned links from the archive
    # without a HEAD URL: the md5
    with Downloader(client, jobs=3, big_file=BIG_FILE, part_size=PART) as d:
        plain = d.download(zarr_id, tmp_path / "plain")
    assert plain.ok
    if all(link.head_url is None for link in given):
        assert plain.crc32 == []
    else:  # the archive gives presigned HEADs
        assert plain.crc32 == ["arr/0"]


def test_only_a_full_object_crc32_tied_to_the_listed_md5_and_size_is_used() -> None:
    file = RemoteFile("arr/0", md5(BIG), len(BIG), "http://s3/b/k")
    good = {
        "Content-Length": str(len(BIG)),
        "ETag": '"e-2"',
        "x-amz-checksum-crc32": crc32_b64(BIG),
        "x-amz-checksum-type": "FULL_OBJECT",
        "x-amz-meta-zarrchive-md5": md5(BIG).upper(),
    }
    assert ObjectHead.from_headers(good).crc32_for(file) == f"{zlib.crc32(BIG):08x}"
    for name, value in [
        ("x-amz-checksum-type", "COMPOSITE"),  # (the CRC32 of the parts' CRC32s)
        ("x-amz-checksum-crc32", f"{crc32_b64(BIG)}-2"),
        ("x-amz-meta-zarrchive-md5", md5(OTHER)),
        ("Content-Length", str(len(BIG) + 1)),
    ]:
        assert ObjectHead.from_headers({**good, name: value}).crc32_for(file) is None, name
    for name in good:
        missing = {k: v for k, v in good.items() if k != name}
        assert ObjectHead.from_headers(missing).crc32_for(file) is None, name
