"""Exact vectors of the Dandi Zarr checksum (the values DANDI and zarr-checksum produce)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.fixtures import ZARR_MANIFESTS

from zarrchive.checksum import (
    EMPTY_CHECKSUM,
    ChecksumNode,
    ChildDigest,
    ZarrEntry,
    compute_checksum,
    iter_directory_digests,
    listing_json,
)

MANIFESTS = ZARR_MANIFESTS
A32 = "a" * 32
B32 = "b" * 32


def _manifest_entries(tree: dict[str, Any], prefix: str = "") -> Iterator[ZarrEntry]:
    """Walk a manifest's nested ``entries``: leaves are [versionId, lastModified, size, ETag]."""
    for name, value in tree.items():
        if isinstance(value, dict):
            yield from _manifest_entries(value, f"{prefix}{name}/")
        else:
            _version, _modified, size, etag = value
            yield ZarrEntry(f"{prefix}{name}", size, etag)


def _manifest(prefix: str) -> tuple[str, list[ZarrEntry]]:
    (path,) = MANIFESTS.glob(f"{prefix}*.json")
    doc = json.loads(path.read_text())
    return doc["statistics"]["zarrChecksum"], list(_manifest_entries(doc["entries"]))


def test_empty_tree() -> None:
    assert EMPTY_CHECKSUM == "481a2f77ab786a0f45aafd5db0971caa-0--0"
    assert compute_checksum([]) == "481a2f77ab786a0f45aafd5db0971caa-0--0"
    assert compute_checksum([], grouped=True) == "481a2f77ab786a0f45aafd5db0971caa-0--0"
    assert hashlib.md5(b'{"directories":[],"files":[]}').hexdigest() == (
        "481a2f77ab786a0f45aafd5db0971caa"
    )
    (root,) = iter_directory_digests([], with_nodes=True)
    assert (root.path, root.digest, root.count, root.size) == ("", EMPTY_CHECKSUM, 0, 0)
    assert root.node_json == (
        '{"checksums":{"directories":[],"files":[]},'
        '"digest":"481a2f77ab786a0f45aafd5db0971caa-0--0"}'
    )
    assert ChecksumNode().digest == EMPTY_CHECKSUM


def test_nested_and_top_level_file() -> None:
    entries = [
        ("a/b", 1, "9dd4e461268c8034f5c8564e155c67a6"),
        ("c", 1, "415290769594460e2e485922904f345d"),
    ]
    expected = "26054e501f570a8bfa69a2bc75e7c82d-2--2"
    assert compute_checksum(entries) == expected
    assert compute_checksum(entries[::-1]) == expected
    assert compute_checksum(entries, grouped=True) == expected
    digests = list(iter_directory_digests(entries))
    assert [(d.path, d.count, d.size) for d in digests] == [("a", 1, 1), ("", 2, 2)]
    assert digests[-1].digest == expected
    # The subdirectory "a" holds the single file "b".
    listing = '{"directories":[],"files":[{"digest":"9dd4e461268c8034f5c8564e155c67a6","name":"b","size":1}]}'
    assert digests[0].digest == hashlib.md5(listing.encode()).hexdigest() + "-1--1"


def test_directory_with_two_files() -> None:
    expected = "4e67de4393d14c1e9c472438f0f1f8b1-2--3"
    node = ChecksumNode(files={"bar": ChildDigest(A32, 1), "baz": ChildDigest(B32, 2)})
    assert node.digest == expected
    assert (node.count, node.size) == (2, 3)
    # Same directory built by the incremental operations, in the other order.
    other = ChecksumNode()
    other.set_file("baz", B32, 2)
    other.set_file("bar", A32, 1)
    assert other.digest == expected
    assert other == node
    # And by the tree hasher, as the root or as a subdirectory.
    assert compute_checksum([("bar", 1, A32), ("baz", 2, B32)]) == expected
    digests = list(iter_directory_digests([("dir/baz", 2, B32), ("dir/bar", 1, A32)]))
    assert (digests[0].path, digests[0].digest) == ("dir", expected)
    listing = (
        '{"directories":[],"files":['
        f'{{"digest":"{A32}","name":"bar","size":1}},'
        f'{{"digest":"{B32}","name":"baz","size":2}}]}}'
    )
    assert listing_json([], [("bar", A32, 1), ("baz", B32, 2)]) == listing
    assert hashlib.md5(listing.encode()).hexdigest() == "4e67de4393d14c1e9c472438f0f1f8b1"


def test_directory_with_two_subdirectories() -> None:
    expected = "859ca1926affe9c7d0424030f26fbd89-2--3"
    node = ChecksumNode()
    node.set_directory("baz", B32 + "-1--2")
    node.set_directory("bar", A32 + "-1--1")
    assert node.digest == expected
    assert (node.count, node.size) == (2, 3)
    assert node.directories == {
        "bar": ChildDigest(A32 + "-1--1", 1),
        "baz": ChildDigest(B32 + "-1--2", 2),
    }
    listing = (
        '{"directories":['
        f'{{"digest":"{A32}-1--1","name":"bar","size":1}},'
        f'{{"digest":"{B32}-1--2","name":"baz","size":2}}],"files":[]}}'
    )
    assert hashlib.md5(listing.encode()).hexdigest() == "859ca1926affe9c7d0424030f26fbd89"


def test_non_ascii_name_is_escaped() -> None:
    expected = "e370b4e8f0c6463419f65e5fa8cb0f42-1--1"
    assert compute_checksum([("é", 1, A32)]) == expected
    node = ChecksumNode()
    node.set_file("é", A32, 1)
    assert node.digest == expected
    assert node.to_json() == (
        b'{"checksums":{"directories":[],"files":[{"digest":"' + A32.encode() + b'",'
        b'"name":"\\u00e9","size":1}]},"digest":"e370b4e8f0c6463419f65e5fa8cb0f42-1--1"}'
    )
    # The decomposed form (e + combining acute) is another name, with another digest.
    assert compute_checksum([("e\u0301", 1, A32)]) != expected


def test_escaping_matches_json_dumps() -> None:
    names = ['q"uote', "back\\slash", "tab\t", "nl\n", "\x00nul", "\x7f", "\U0001f600", "\ud800"]
    for name in names:
        expected_row = json.dumps({"digest": A32, "name": name, "size": 1}, separators=(",", ":"))
        assert listing_json([], [(name, A32, 1)]) == (
            '{"directories":[],"files":[' + expected_row + "]}"
        )
    assert listing_json([], [("\U0001f600", A32, 1)]).count("\\ud83d\\ude00") == 1


def test_real_manifest_fixture() -> None:
    stated, entries = _manifest("1284a14f-")
    expected = "6ddc4625befef8d6f9796835648162be-509--710206390"
    assert stated == expected
    assert len(entries) == 509
    assert sum(e.size for e in entries) == 710206390
    assert compute_checksum(entries) == expected
    assert compute_checksum(sorted(entries), grouped=True) == expected
    digests = list(iter_directory_digests(entries, with_nodes=True))
    root = digests[-1]
    assert (root.path, root.digest, root.count, root.size) == ("", expected, 509, 710206390)
    assert [d.path for d in digests].count("") == 1
    # Every node decodes to a node with the same digest and re-encodes to the same bytes.
    for d in digests:
        assert d.node_json is not None
        node = ChecksumNode.from_json(d.node_json)
        assert node.digest == d.digest
        assert node.to_json() == d.node_json.encode()


def test_empty_manifest_fixture() -> None:
    stated, entries = _manifest("003eb053-")
    assert (stated, entries) == ("481a2f77ab786a0f45aafd5db0971caa-0--0", [])
    assert compute_checksum(entries) == stated


@pytest.mark.parametrize("grouped", [False, True])
def test_node_json_of_every_directory(grouped: bool) -> None:
    entries = [
        ZarrEntry("a/b/c", 3, "c" * 32),
        ZarrEntry("a/b/d", 4, "d" * 32),
        ZarrEntry("a/e", 5, "e" * 32),
        ZarrEntry("f", 6, "f" * 32),
    ]
    digests = list(iter_directory_digests(entries, grouped=grouped, with_nodes=True))
    assert [(d.path, d.count, d.size) for d in digests] == [
        ("a/b", 2, 7),
        ("a", 3, 12),
        ("", 4, 18),
    ]
    ab, a, root = digests
    ab_listing = (
        '{"directories":[],"files":['
        f'{{"digest":"{"c" * 32}","name":"c","size":3}},'
        f'{{"digest":"{"d" * 32}","name":"d","size":4}}]}}'
    )
    ab_md5 = hashlib.md5(ab_listing.encode()).hexdigest()
    assert ab.digest == f"{ab_md5}-2--7"
    assert ab.node_json == '{"checksums":' + ab_listing + f',"digest":"{ab_md5}-2--7"}}'
    a_listing = (
        f'{{"directories":[{{"digest":"{ab_md5}-2--7","name":"b","size":7}}],"files":['
        f'{{"digest":"{"e" * 32}","name":"e","size":5}}]}}'
    )
    a_md5 = hashlib.md5(a_listing.encode()).hexdigest()
    assert a.digest == f"{a_md5}-3--12"
    assert a.node_json == '{"checksums":' + a_listing + f',"digest":"{a_md5}-3--12"}}'
    root_listing = (
        f'{{"directories":[{{"digest":"{a_md5}-3--12","name":"a","size":12}}],"files":['
        f'{{"digest":"{"f" * 32}","name":"f","size":6}}]}}'
    )
    root_md5 = hashlib.md5(root_listing.encode()).hexdigest()
    assert root.node_json == '{"checksums":' + root_listing + f',"digest":"{root_md5}-4--18"}}'
    assert compute_checksum(entries) == f"{root_md5}-4--18"
    # Without with_nodes, no node documents.
    assert [d.node_json for d in iter_directory_digests(entries)] == [None, None, None]


def test_every_printable_ascii_name_is_encoded_like_json_dumps() -> None:
    def dumps(dirs: list[tuple[str, str, int]], files: list[tuple[str, str, int]]) -> str:
        doc = {
            "directories": [{"digest": d, "name": n, "size": s} for n, d, s in dirs],
            "files": [{"digest": d, "name": n, "size": s} for n, d, s in files],
        }
        return json.dumps(doc, separators=(",", ":"))

    rows = [(chr(c) + "x", A32, c) for c in range(0x20, 0x7F)]
    plain = [row for row in rows if row[0][0] not in '"\\']
    assert len(plain) == 93
    assert listing_json([], rows) == dumps([], rows)  # with '"' and '\\': escaped
    assert listing_json(plain, []) == dumps(plain, [])  # no escaping needed
    assert listing_json(plain, rows) == dumps(plain, rows)
