"""The ``.checksum`` node codec, the incremental node operations and digest parsing."""

from __future__ import annotations

import json

import pytest

from zarrchive.checksum import (
    EMPTY_CHECKSUM,
    ChecksumNode,
    ChildDigest,
    ZarrDigest,
    is_md5,
    is_zarr_checksum,
    md5_hex,
    validate_md5,
)
from zarrchive.errors import InvalidChecksumNode, InvalidDigest, InvalidInput

A32 = "a" * 32
B32 = "b" * 32
BAR_BAZ = "4e67de4393d14c1e9c472438f0f1f8b1-2--3"
BAR_BAZ_JSON = (
    '{"checksums":{"directories":[],"files":['
    f'{{"digest":"{A32}","name":"bar","size":1}},'
    f'{{"digest":"{B32}","name":"baz","size":2}}]}},'
    f'"digest":"{BAR_BAZ}"}}'
)
SUBDIRS = "859ca1926affe9c7d0424030f26fbd89-2--3"
SUBDIRS_JSON = (
    '{"checksums":{"directories":['
    f'{{"digest":"{A32}-1--1","name":"bar","size":1}},'
    f'{{"digest":"{B32}-1--2","name":"baz","size":2}}],"files":[]}},'
    f'"digest":"{SUBDIRS}"}}'
)


# -- encoding ---------------------------------------------------------------------
def test_to_json_files() -> None:
    node = ChecksumNode()
    node.set_file("baz", B32, 2)
    node.set_file("bar", A32, 1)
    assert node.to_json() == BAR_BAZ_JSON.encode()
    assert node.digest == BAR_BAZ


def test_to_json_directories() -> None:
    node = ChecksumNode()
    node.set_directory("baz", B32 + "-1--2")
    node.set_directory("bar", A32 + "-1--1")
    assert node.to_json() == SUBDIRS_JSON.encode()


def test_to_json_mixed_and_escaped() -> None:
    node = ChecksumNode()
    node.set_file("é", A32, 1)
    node.set_file("\U00010000", B32, 0)
    node.set_directory("a", "c" * 32 + "-3--7")
    node.set_directory('q"', "d" * 32 + "-1--0")
    listing = (
        '{"directories":['
        f'{{"digest":"{"c" * 32}-3--7","name":"a","size":7}},'
        f'{{"digest":"{"d" * 32}-1--0","name":"q\\"","size":0}}],"files":['
        f'{{"digest":"{A32}","name":"\\u00e9","size":1}},'
        f'{{"digest":"{B32}","name":"\\ud800\\udc00","size":0}}]}}'
    )
    digest = f"{md5_hex(listing.encode())}-6--8"
    assert node.digest == digest
    assert node.to_json() == ('{"checksums":' + listing + f',"digest":"{digest}"}}').encode()
    assert (node.count, node.size) == (6, 8)
    assert list(node.iter_children()) == [
        ("a", True, ChildDigest("c" * 32 + "-3--7", 7)),
        ('q"', True, ChildDigest("d" * 32 + "-1--0", 0)),
        ("é", False, ChildDigest(A32, 1)),
        ("\U00010000", False, ChildDigest(B32, 0)),
    ]


def test_file_and_directory_with_the_same_name() -> None:
    node = ChecksumNode()
    node.set_file("a", A32, 1)
    node.set_directory("a", B32 + "-1--2")
    assert (node.count, node.size) == (2, 3)
    decoded = ChecksumNode.from_json(node.to_json())
    assert decoded == node
    assert decoded.files == {"a": ChildDigest(A32, 1)}
    assert decoded.directories == {"a": ChildDigest(B32 + "-1--2", 2)}


# -- decoding ---------------------------------------------------------------------
@pytest.mark.parametrize("doc", [BAR_BAZ_JSON, SUBDIRS_JSON])
def test_from_json_round_trip(doc: str) -> None:
    node = ChecksumNode.from_json(doc)
    assert node.to_json() == doc.encode()
    assert ChecksumNode.from_json(doc.encode()) == node


def test_from_json_accepts_whitespace_and_unsorted_rows() -> None:
    # The codec checks the digest, not the bytes: a node written with spaces or
    # unsorted rows is still the same node, and is re-encoded canonically.
    rows = json.loads(BAR_BAZ_JSON)
    rows["checksums"]["files"].reverse()
    node = ChecksumNode.from_json(json.dumps(rows, indent=2))
    assert node.to_json() == BAR_BAZ_JSON.encode()


def _doc(files: object = (), directories: object = (), digest: object = None) -> str:
    listing = {"directories": list(directories), "files": list(files)}  # type: ignore[call-overload]
    return json.dumps({"checksums": listing, "digest": digest}, separators=(",", ":"))


def _row(name: object, digest: object, size: object) -> dict[str, object]:
    return {"digest": digest, "name": name, "size": size}


MALFORMED: list[tuple[object, str]] = [
    (b"{", "is not valid JSON"),
    (b"\xff\xfe{}", "is not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, "is not valid JSON"),
    ("[]", 'must be an object with exactly the keys "checksums" and "digest"'),
    ('{"checksums":{"directories":[],"files":[]}}', 'exactly the keys "checksums" and "digest"'),
    (
        f'{{"checksums":{{"directories":[],"files":[]}},"digest":"{EMPTY_CHECKSUM}","x":1}}',
        'exactly the keys "checksums" and "digest"',
    ),
    (f'{{"checksums":[],"digest":"{EMPTY_CHECKSUM}"}}', '"checksums" must be an object'),
    (
        f'{{"checksums":{{"files":[]}},"digest":"{EMPTY_CHECKSUM}"}}',
        'exactly the keys "directories" and "files"',
    ),
    (
        f'{{"checksums":{{"directories":{{}},"files":[]}},"digest":"{EMPTY_CHECKSUM}"}}',
        '"checksums.directories" must be a list',
    ),
    (
        f'{{"checksums":{{"directories":[],"files":"x"}},"digest":"{EMPTY_CHECKSUM}"}}',
        '"checksums.files" must be a list',
    ),
    (_doc(files=[["bar", A32, 1]]), 'each entry of "checksums.files" must be an object'),
    (
        _doc(files=[{"name": "bar", "digest": A32, "size": 1}]),
        '"digest", "name", "size" in that order',
    ),
    (_doc(directories=[{"digest": A32, "name": "b"}]), 'each entry of "checksums.directories"'),
    (
        _doc(files=[{"digest": A32, "name": "b", "size": 1, "x": 0}]),
        '"digest", "name", "size" in that order',
    ),
    (_doc(files=[_row(1, A32, 1)]), "name and digest must be strings"),
    (_doc(files=[_row("bar", None, 1)]), "name and digest must be strings"),
    (_doc(files=[_row("bar", A32, "1")]), "'bar': size must be an integer"),
    (_doc(files=[_row("bar", A32, 1.0)]), "'bar': size must be an integer"),
    (_doc(files=[_row("bar", A32, True)]), "'bar': size must be an integer"),
    (_doc(files=[_row("bar", A32, -1)]), "file 'bar': size -1 is negative"),
    (_doc(files=[_row("", A32, 1)]), "'' is not a valid entry name"),
    (_doc(files=[_row("a/b", A32, 1)]), "'a/b' is not a valid entry name"),
    (_doc(directories=[_row("a/b", A32 + "-1--1", 1)]), "'a/b' is not a valid entry name"),
    (_doc(files=[_row("bar", A32.upper(), 1)]), "is not an md5 digest"),
    (_doc(files=[_row("bar", A32 + "-1--1", 1)]), "is not an md5 digest"),
    (_doc(directories=[_row("bar", A32, 1)]), "is not a Dandi Zarr checksum"),
    (_doc(directories=[_row("bar", A32 + "-1--01", 1)]), "is not a Dandi Zarr checksum"),
    (_doc(files=[_row("bar", A32, 1), _row("bar", B32, 2)]), "duplicate file 'bar'"),
    (
        _doc(directories=[_row("d", A32 + "-1--1", 1), _row("d", B32 + "-1--1", 1)]),
        "duplicate directory 'd'",
    ),
    (
        _doc(directories=[_row("d", A32 + "-1--1", 2)]),
        f"directory 'd': size 2 disagrees with its digest {A32}-1--1",
    ),
    (_doc(files=[_row("bar", A32, 1), _row("baz", B32, 2)], digest=None), "says digest None"),
    (
        _doc(files=[_row("bar", A32, 1), _row("baz", B32, 2)], digest=BAR_BAZ.replace("-2", "-3")),
        f"but its listing hashes to '{BAR_BAZ}'",
    ),
    (_doc(digest=EMPTY_CHECKSUM + " "), "says digest"),
]


@pytest.mark.parametrize(("data", "message"), MALFORMED)
def test_from_json_rejects(data: bytes | str, message: str) -> None:
    with pytest.raises(InvalidChecksumNode) as info:
        ChecksumNode.from_json(data)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_from_json_accepts_the_empty_node() -> None:
    node = ChecksumNode.from_json(_doc(digest=EMPTY_CHECKSUM))
    assert node.is_empty
    assert node.to_json() == (
        b'{"checksums":{"directories":[],"files":[]},"digest":"' + EMPTY_CHECKSUM.encode() + b'"}'
    )


# -- incremental operations -------------------------------------------------------------
def test_incremental_operations() -> None:
    node = ChecksumNode.from_json(BAR_BAZ_JSON)
    node.set_file("qux", "c" * 32, 4)
    assert node.digest != BAR_BAZ
    assert (node.count, node.size) == (3, 7)
    node.remove_file("qux")
    assert node.digest == BAR_BAZ
    node.set_file("bar", "c" * 32, 1)  # replace
    assert (node.count, node.size, node.files["bar"]) == (2, 3, ChildDigest("c" * 32, 1))
    assert node.digest != BAR_BAZ
    node.set_file("bar", A32, 1)
    assert node.digest == BAR_BAZ
    node.set_directory("sub", "d" * 32 + "-5--100")
    assert (node.count, node.size) == (7, 103)
    node.set_directory("sub", "d" * 32 + "-6--101")
    assert (node.count, node.size) == (8, 104)
    node.remove_directory("sub")
    assert node.to_json() == BAR_BAZ_JSON.encode()
    node.remove_file("bar")
    node.remove_file("baz")
    assert node.is_empty
    assert node.digest == EMPTY_CHECKSUM


def test_incremental_operation_errors() -> None:
    node = ChecksumNode.from_json(BAR_BAZ_JSON)
    with pytest.raises(KeyError):
        node.remove_file("nope")
    with pytest.raises(KeyError):
        node.remove_directory("bar")  # a file, not a directory
    with pytest.raises(InvalidDigest, match="is not an md5 digest"):
        node.set_file("x", "z" * 32, 1)
    with pytest.raises(InvalidChecksumNode, match="size -2 is negative"):
        node.set_file("x", A32, -2)
    with pytest.raises(InvalidChecksumNode, match="is not a valid entry name"):
        node.set_file("x/y", A32, 1)
    with pytest.raises(InvalidDigest, match="is not a Dandi Zarr checksum"):
        node.set_directory("x", A32)
    with pytest.raises(InvalidChecksumNode, match="is not a valid entry name"):
        node.set_directory("", A32 + "-1--1")
    # Nothing was changed by the failed operations.
    assert node.to_json() == BAR_BAZ_JSON.encode()


def test_digest_cache_is_invalidated() -> None:
    node = ChecksumNode()
    assert node.digest == EMPTY_CHECKSUM
    node.set_file("bar", A32, 1)
    first = node.digest
    assert first != EMPTY_CHECKSUM
    node.set_file("baz", B32, 2)
    assert node.digest == BAR_BAZ
    node.remove_file("baz")
    assert node.digest == first


def test_equality_and_repr() -> None:
    node = ChecksumNode.from_json(BAR_BAZ_JSON)
    assert node == ChecksumNode(files={"bar": ChildDigest(A32, 1), "baz": ChildDigest(B32, 2)})
    assert node != ChecksumNode(files={"bar": ChildDigest(A32, 1)})
    assert node.__eq__("x") is NotImplemented
    assert repr(node) == f"ChecksumNode(digest='{BAR_BAZ}', files=2, dirs=0)"


# -- digests ----------------------------------------------------------------------------
def test_zarr_digest_parse() -> None:
    parsed = ZarrDigest.parse(BAR_BAZ)
    assert parsed == ZarrDigest("4e67de4393d14c1e9c472438f0f1f8b1", 2, 3)
    assert str(parsed) == BAR_BAZ
    assert ZarrDigest.parse(EMPTY_CHECKSUM) == ZarrDigest("481a2f77ab786a0f45aafd5db0971caa", 0, 0)
    big = ZarrDigest.parse(A32 + "-1000000--262144000000")
    assert (big.count, big.size) == (1_000_000, 262_144_000_000)


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"4e67de4393d14c1e9c472438f0f1f8b1-2--3",
        42,
        "",
        A32,
        A32 + "-2-3",
        A32 + "-2--",
        A32 + "--2--3",
        A32 + "-02--3",
        A32 + "-2--03",
        A32 + "-2--3\n",
        " " + A32 + "-2--3",
        A32 + "-2--3-",
        A32.upper() + "-2--3",
        "a" * 31 + "-2--3",
        "a" * 33 + "-2--3",
        "g" * 32 + "-2--3",
        A32 + "--1--3",
        A32 + "-١--3",  # a non-ASCII digit
    ],
)
def test_zarr_digest_parse_rejects(value: object) -> None:
    with pytest.raises(InvalidDigest, match="is not a Dandi Zarr checksum") as info:
        ZarrDigest.parse(value)
    assert isinstance(info.value, InvalidInput)
    assert repr(value) in info.value.message
    assert is_zarr_checksum(value) is False


def test_is_zarr_checksum() -> None:
    assert is_zarr_checksum(BAR_BAZ) is True
    assert is_zarr_checksum(EMPTY_CHECKSUM) is True


def test_validate_md5() -> None:
    assert validate_md5(A32) == A32
    assert validate_md5(f'"{A32}"') == A32
    assert validate_md5("0123456789abcdef0123456789abcdef") == "0123456789abcdef0123456789abcdef"
    assert is_md5(A32) is True


@pytest.mark.parametrize(
    "value",
    [
        None,
        1,
        A32.encode(),
        "",
        "a" * 31,
        "a" * 33,
        A32.upper(),
        "g" * 32,
        f"'{A32}'",
        f'"{A32}',
        f'{A32}"',
        f'""{A32}""',
        f'"{"a" * 31}"',
        A32 + "\n",
        "d41d8cd98f00b204e9800998ecf8427e-2",  # a multipart ETag
        '"d41d8cd98f00b204e9800998ecf8427e-2"',
    ],
)
def test_validate_md5_rejects(value: object) -> None:
    with pytest.raises(InvalidDigest, match="expected 32 lowercase hexadecimal characters"):
        validate_md5(value)
    assert is_md5(value) is False


def test_md5_hex() -> None:
    assert md5_hex(b"") == "d41d8cd98f00b204e9800998ecf8427e"
    assert md5_hex(b"a") == "0cc175b9c0f1b6a831c399e269772661"


@pytest.mark.parametrize(
    ("checksum", "totals"),
    [
        ("481a2f77ab786a0f45aafd5db0971caa-0--0", (0, 0)),
        ("d41d8cd98f00b204e9800998ecf8427e-1000000--262144000000", (1_000_000, 262_144_000_000)),
        ("not a checksum", (0, 0)),
        ("D41D8CD98F00B204E9800998ECF8427E-3--7", (0, 0)),
        (None, (0, 0)),
    ],
)
def test_zarr_digest_totals(checksum: object, totals: tuple[int, int]) -> None:
    assert ZarrDigest.totals(checksum) == totals
