"""The copy into place of a big file, checked by its CRC32s (#39), on the in-memory store: the
read that gives the md5 computes each part's CRC32 and the whole object's in one pass
(:class:`~zarrchive.storage.crc32.CopyDigest`); a copy whose parts S3 answered with other
CRC32s than the read's is not what was read (``COPY_DIFFERS``, refused as a wrong md5); a
good one completes with S3's full-object CRC32."""

from __future__ import annotations

import hashlib
import random
import zlib

import pytest

from zarrchive.services.zarr_engine.uploads.multipart import (
    COPY_DIFFERS,
    finish_verified_copy,
    prepare_verified_copy,
)
from zarrchive.storage.crc32 import CopyDigest, crc32_base64
from zarrchive.storage.memory import MemoryObjectStore
from zarrchive.storage.objects import CopiedPart

pytestmark = pytest.mark.unit

PART = 5 * 1024**2
DATA = random.Random(7).randbytes(2 * PART + 777)  # three parts


@pytest.mark.parametrize("chunk", [1000, PART - 1, PART, 3 * PART])
def test_one_read_gives_the_md5_and_every_crc32(chunk: int) -> None:
    digest = CopyDigest(PART)
    for start in range(0, len(DATA), chunk):
        digest.update(DATA[start : start + chunk])
    assert digest.md5 == hashlib.md5(DATA).hexdigest()
    assert digest.crc32 == crc32_base64(zlib.crc32(DATA))
    assert digest.part_crc32s == [
        crc32_base64(zlib.crc32(DATA[start : start + PART])) for start in range(0, len(DATA), PART)
    ]


def test_an_empty_file_is_one_empty_part() -> None:
    digest = CopyDigest(PART)
    assert digest.part_crc32s == ["AAAAAA=="]
    assert digest.crc32 == "AAAAAA=="


class CorruptingStore(MemoryObjectStore):
    """A store whose copy of part 2 is not what a read of the source gives (a fault)."""

    def upload_part_copy(
        self,
        source_key: str,
        version_id: str | None,
        key: str,
        upload_id: str,
        part_number: int,
        first: int,
        last: int,
    ) -> CopiedPart:
        if part_number == 2:
            source_key, version_id = "corrupt", None
        return super().upload_part_copy(
            source_key, version_id, key, upload_id, part_number, first, last
        )


def test_a_copy_whose_parts_are_not_what_was_read_differs() -> None:
    store = CorruptingStore()
    try:
        store.put("staged", DATA)
        store.put("corrupt", DATA[:PART] + bytes(PART) + DATA[2 * PART :])
        md5 = hashlib.md5(DATA).hexdigest()
        copy = prepare_verified_copy(store, "staged", None, "zarr/x/big", len(DATA), PART, md5)
        assert copy.md5 == COPY_DIFFERS  # (the read's md5 is the declared one)
        finish_verified_copy(store, copy, keep=False)
        assert store.head("zarr/x/big") is None
        assert list(store.iter_multipart_uploads("zarr/")) == []
    finally:
        store.close()


def test_a_good_copy_completes_with_its_full_object_crc32() -> None:
    store = MemoryObjectStore()
    try:
        store.put("staged", DATA)
        md5 = hashlib.md5(DATA).hexdigest()
        copy = prepare_verified_copy(store, "staged", None, "zarr/x/big", len(DATA), PART, md5)
        assert (copy.md5, copy.crc32) == (md5, crc32_base64(zlib.crc32(DATA)))
        finish_verified_copy(store, copy, keep=True)
        info = store.head("zarr/x/big")
        assert info is not None
        assert (info.full_object_crc32, info.recorded_md5) == (copy.crc32, md5)
    finally:
        store.close()
