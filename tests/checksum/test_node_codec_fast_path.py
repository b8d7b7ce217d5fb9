"""The codec's fast path (canonical documents) accepts exactly what the slow path accepts."""

from __future__ import annotations

import hashlib

import pytest

from zarrchive.checksum import ChecksumNode
from zarrchive.errors import InvalidChecksumNode


def document(listing: str, digest: str) -> bytes:
    return ('{"checksums":' + listing + ',"digest":"' + digest + '"}').encode()


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


A, B = "a" * 32, "b" * 32


def test_canonical_document_round_trips_byte_for_byte() -> None:
    node = ChecksumNode()
    node.set_file("x", A, 3)
    node.set_file("é", B, 4)
    node.set_directory("d", f"{A}-2--10")
    data = node.to_json()
    parsed = ChecksumNode.from_json(data)
    assert parsed == node and parsed.to_json() == data and parsed.digest == node.digest


def test_right_md5_wrong_totals_is_refused() -> None:
    listing = '{"directories":[],"files":[{"digest":"' + A + '","name":"x","size":3}]}'
    assert ChecksumNode.from_json(document(listing, f"{md5(listing)}-1--3")).size == 3
    with pytest.raises(InvalidChecksumNode, match="hashes to"):
        ChecksumNode.from_json(document(listing, f"{md5(listing)}-2--3"))
    with pytest.raises(InvalidChecksumNode, match="hashes to"):
        ChecksumNode.from_json(document(listing, f"{md5(listing)}-1--4"))


def test_self_consistent_but_unsorted_listing_is_refused() -> None:
    rows = [f'{{"digest":"{A}","name":"{n}","size":1}}' for n in ("b", "a")]
    listing = '{"directories":[],"files":[' + ",".join(rows) + "]}"
    with pytest.raises(InvalidChecksumNode, match="hashes to"):
        ChecksumNode.from_json(document(listing, f"{md5(listing)}-2--2"))


def test_spaces_are_accepted_when_the_digest_is_the_canonical_one() -> None:
    node = ChecksumNode()
    node.set_file("x", A, 3)
    spaced = node.to_json().decode().replace(",", ", ").encode()
    assert ChecksumNode.from_json(spaced).to_json() == node.to_json()


def test_wrong_key_order_is_refused() -> None:
    listing = '{"directories":[],"files":[{"name":"x","digest":"' + A + '","size":3}]}'
    with pytest.raises(InvalidChecksumNode, match="in that order"):
        ChecksumNode.from_json(document(listing, f"{md5(listing)}-1--3"))
