"""The signed copies of an unembargo (:mod:`zarrchive.storage.signed_copy`): from another
bucket of the endpoint, and ``UploadPartCopy``; what they make equals what botocore makes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from tests.helpers.s3 import object_history, object_store
from zarrchive.storage.objects import ObjectStore, copy_object_version
from zarrchive.storage.seaweedfs import SeaweedFS
from zarrchive.storage.signed_copy import S3Refused, parse_copy_answer

PART_RESULT = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<CopyPartResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<LastModified>2026-11-29T01:15:56.683Z</LastModified>"
    b"<ETag>&quot;e54024e77d3fe3471c7341750edc4b90&quot;</ETag></CopyPartResult>"
)


def test_a_part_copy_answer_gives_its_etag_and_only_a_part_result_is_one() -> None:
    answer = parse_copy_answer(200, {}, PART_RESULT, result="CopyPartResult")
    assert answer.etag == "e54024e77d3fe3471c7341750edc4b90"
    with pytest.raises(S3Refused):  # a part copy answered with an object copy's result
        parse_copy_answer(
            200, {}, PART_RESULT.replace(b"CopyPart", b"CopyObject"), result="CopyPartResult"
        )
    with pytest.raises(S3Refused):
        parse_copy_answer(200, {}, PART_RESULT)


@pytest.fixture
def stores(seaweedfs: SeaweedFS) -> Iterator[tuple[ObjectStore, ObjectStore]]:
    from tests.conftest import _new_bucket

    made = [object_store(seaweedfs, _new_bucket(seaweedfs, p)) for p in ("zsrc-", "zdst-")]
    for store in made:
        store.ensure_bucket(versioned=True)
    yield made[0], made[1]
    for store in made:
        store.close()


def test_copies_across_buckets_signed_equal_botocores(
    stores: tuple[ObjectStore, ObjectStore],
) -> None:
    """Whole and in parts, by version: the signed copies (both stores sign) and botocore's
    (the target's signer taken away) leave the same bytes, ETags and metadata."""
    source, target = stores
    small, big = b"small " * 10, bytes(range(256)) * (11 * 1024 * 1024 // 256 + 3)
    old = source.put("o/small", b"old")
    source.put("o/small", small)
    source.put("o/big", big)
    assert old is not None and target._copier is not None and source._copier is not None
    copier = target._copier
    results = {}
    for way in ("signed", "botocore"):
        if way == "botocore":
            target._copier = None
        try:
            for key, size, version in (
                ("o/small", len(b"old"), old),
                ("o/small", len(small), None),
                ("o/big", len(big), None),
            ):
                copy_object_version(
                    target,
                    source,
                    f"{way}/{key}",
                    size=size,
                    source_key=key,
                    version_id=version,
                    threshold=8 * 1024**2,
                    part_size=5 * 1024**2,
                )
        finally:
            target._copier = copier
        heads = {k: target.head(f"{way}/o/{k}") for k in ("small", "big")}
        results[way] = {k: (h.etag, h.size) if h else None for k, h in heads.items()}
        assert object_history(target, f"{way}/o/small") == [b"old", small]
        got = target.get(f"{way}/o/big")
        assert got is not None and hashlib.md5(got).digest() == hashlib.md5(big).digest()
    assert results["signed"] == results["botocore"]
    assert results["signed"]["big"] is not None and results["signed"]["big"][0].endswith("-3")
