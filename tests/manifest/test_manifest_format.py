"""Manifest files: exact bytes, statistics, checksum, errors, reader."""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from tests.fixtures import ZARR_MANIFESTS

from zarrchive.checksum import EMPTY_CHECKSUM, compute_checksum
from zarrchive.errors import (
    InvalidDigest,
    InvalidManifest,
    InvalidPath,
    UngroupedEntries,
)
from zarrchive.manifest import (
    FIELDS,
    SCHEMA_VERSION,
    ManifestEntry,
    format_timestamp,
    generate_manifest,
    manifest_bytes,
    manifest_key,
    read_manifest,
    write_manifest,
)

FIXTURES = ZARR_MANIFESTS
EMPTY_FIXTURE = (
    FIXTURES / "003eb053-d45c-42e2-a040-79bca28c84ae__481a2f77ab786a0f45aafd5db0971caa-0--0.json"
)
BIG_FIXTURE = (
    FIXTURES
    / "1284a14f-fe4f-4dc3-b10d-48e5db8bf18d__6ddc4625befef8d6f9796835648162be-509--710206390.json"
)


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


T0 = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)

LISTING = [
    ManifestEntry(".zgroup", "v1", T0, 24, md5(b"zgroup")),
    ManifestEntry("arr/.zarray", "v2", T0 + timedelta(seconds=1), 310, '"' + md5(b"zarray") + '"'),
    ManifestEntry(
        "arr/0/0",
        "v.3_x",
        datetime(2024, 1, 2, 7, 0, 0, tzinfo=timezone(timedelta(hours=2))),
        1000,
        md5(b"c00"),
    ),
    ManifestEntry("arr/0/1", "v4", T0, 999, md5(b"c01")),
    ManifestEntry("arr/1/0", "null", T0, 0, md5(b"c10")),
    ManifestEntry("attrs.json", "v6", T0 + timedelta(days=1), 5, md5(b"attrs")),
]

EXPECTED_CHECKSUM = compute_checksum((e.path, e.size, e.etag.strip('"')) for e in LISTING)

EXPECTED = (
    "{\n"
    ' "schemaVersion": 2,\n'
    ' "fields": ["versionId","lastModified","size","ETag"],\n'
    ' "statistics": {\n'
    '  "entries": 6,\n'
    '  "depth": 2,\n'
    '  "totalSize": 2338,\n'
    '  "lastModified": "2024-01-03T03:04:05+00:00",\n'
    f'  "zarrChecksum": "{EXPECTED_CHECKSUM}",\n'
    '  "zarrChecksumMismatch": null\n'
    " },\n"
    ' "entries": {\n'
    '  ".zgroup": ["v1","2024-01-02T03:04:05+00:00",24,"560caf43c150875fea0e4733f58d4b95"],\n'
    '  "arr": {\n'
    '   ".zarray": ["v2","2024-01-02T03:04:06+00:00",310,"4e0340e5de186250a89b7f3c7bce5a19"],\n'
    '   "0": {\n'
    '    "0": ["v.3_x","2024-01-02T05:00:00+00:00",1000,"ffc987113c7a22fb2a52b6f9842f79be"],\n'
    '    "1": ["v4","2024-01-02T03:04:05+00:00",999,"c3efe96c7639c426350c130586506ccb"]\n'
    "   },\n"
    '   "1": {\n'
    '    "0": ["null","2024-01-02T03:04:05+00:00",0,"47cfc27c36f07700a44a24887ded7cec"]\n'
    "   }\n"
    "  },\n"
    '  "attrs.json": ["v6","2024-01-03T03:04:05+00:00",5,"425ce871530e0633c917f98d8e9b1bc7"]\n'
    " }\n"
    "}"
)


def rewrite(data: bytes) -> bytes:
    """Read a manifest and write it back with the same mismatch information."""
    parsed = read_manifest(data)
    stats = parsed.statistics
    return manifest_bytes(
        parsed.entries,
        database_checksum=stats.zarr_checksum_mismatch or stats.zarr_checksum,
        include_mismatch_field=stats.has_mismatch_field,
    )


# -- fixtures ----------------------------------------------------------------------
@pytest.mark.parametrize("path", [EMPTY_FIXTURE, BIG_FIXTURE], ids=["empty", "509-entries"])
def test_fixture_round_trips_byte_for_byte(path: Path) -> None:
    data = path.read_bytes()
    assert rewrite(data) == data


def test_fixture_statistics_and_entries() -> None:
    parsed = read_manifest(BIG_FIXTURE.read_bytes())
    assert parsed.schema_version == 2
    assert parsed.fields == FIELDS
    stats = parsed.statistics
    assert (stats.entries, stats.depth, stats.total_size) == (509, 5, 710206390)
    assert stats.last_modified == datetime(2022, 6, 27, 23, 9, 39, tzinfo=UTC)
    assert stats.zarr_checksum == "6ddc4625befef8d6f9796835648162be-509--710206390"
    assert stats.zarr_checksum_mismatch is None
    assert stats.has_mismatch_field is False
    entries = list(parsed.entries)
    assert len(entries) == 509
    assert entries[0] == ManifestEntry(
        ".zattrs",
        "VwOSu7IVLAQcQHcqOesmlrEDm2sL_Tfs",
        datetime(2022, 6, 27, 23, 7, 47, tzinfo=UTC),
        8312,
        "cb32b88f6488d55818aba94746bcc19a",
    )
    assert entries[-1].path == "info"
    assert entries[4].path == "0/0/0/13/8/100"
    assert compute_checksum(((e.path, e.size, e.etag) for e in entries), grouped=True) == (
        stats.zarr_checksum
    )


def test_empty_fixture() -> None:
    parsed = read_manifest(EMPTY_FIXTURE.read_bytes())
    assert parsed.statistics.zarr_checksum == EMPTY_CHECKSUM
    assert parsed.statistics.has_mismatch_field is True
    assert parsed.statistics.last_modified is None
    assert list(parsed.entries) == []


# -- generation ------------------------------------------------------------------
def test_generated_manifest_is_exactly_the_expected_text() -> None:
    assert manifest_bytes(LISTING).decode("ascii") == EXPECTED


def test_generated_manifest_streams_header_body_footer() -> None:
    with tempfile.SpooledTemporaryFile(max_size=10) as body:
        manifest = generate_manifest(LISTING, body, database_checksum=EXPECTED_CHECKSUM)
        assert manifest.statistics.zarr_checksum == EXPECTED_CHECKSUM
        assert manifest.size == len(EXPECTED)
        assert b"".join(manifest.iter_bytes(chunk_size=7)) == EXPECTED.encode()
        assert manifest.open().read() == EXPECTED.encode()
        assert manifest.getvalue() == EXPECTED.encode()  # repeatable: rereads the sink
        assert manifest.header.endswith(b'"entries": ')


def test_write_manifest_into_a_file(tmp_path: Path) -> None:
    target = tmp_path / "m.json"
    with target.open("wb") as out:
        stats = write_manifest(LISTING, out)
    assert target.read_text() == EXPECTED
    assert stats.entries == 6


def test_empty_manifest() -> None:
    data = manifest_bytes([], database_checksum=EMPTY_CHECKSUM)
    assert (
        data
        == (
            "{\n"
            ' "schemaVersion": 2,\n'
            ' "fields": ["versionId","lastModified","size","ETag"],\n'
            ' "statistics": {\n'
            '  "entries": 0,\n'
            '  "depth": 0,\n'
            '  "totalSize": 0,\n'
            '  "lastModified": null,\n'
            f'  "zarrChecksum": "{EMPTY_CHECKSUM}",\n'
            '  "zarrChecksumMismatch": null\n'
            " },\n"
            ' "entries": {}\n'
            "}"
        ).encode()
    )
    assert data == EMPTY_FIXTURE.read_bytes()  # the same as the real one


def test_statistics_of_flat_nested_and_empty_zarrs() -> None:
    t = datetime(2020, 5, 6, 7, 8, 9, tzinfo=UTC)

    def stats_of(paths: list[tuple[str, datetime, int]]) -> tuple[object, ...]:
        entries = [ManifestEntry(p, "v", d, s, md5(p.encode())) for p, d, s in paths]
        with io.BytesIO() as body:
            s = generate_manifest(entries, body).statistics
        return s.entries, s.depth, s.total_size, s.last_modified

    assert stats_of([]) == (0, 0, 0, None)
    flat = [("a", t, 1), ("b", t + timedelta(hours=1), 2), ("c", t - timedelta(days=1), 3)]
    assert stats_of(flat) == (3, 0, 6, t + timedelta(hours=1))
    nested = [("a/b", t, 10), ("a/c/d/e", t, 20), ("z", t + timedelta(seconds=5), 30)]
    assert stats_of(nested) == (3, 3, 60, t + timedelta(seconds=5))
    one_level = [("x/.zarray", t, 4), ("y/0", t, 5)]
    assert stats_of(one_level) == (2, 1, 9, t)


def test_checksum_is_the_tree_hash_of_the_listing() -> None:
    with io.BytesIO() as body:
        stats = generate_manifest(LISTING, body).statistics
    assert stats.zarr_checksum == EXPECTED_CHECKSUM
    assert stats.zarr_checksum.endswith("-6--2338")


def test_mismatch_records_the_database_checksum() -> None:
    stale = "0123456789abcdef0123456789abcdef-5--2000"
    data = manifest_bytes(LISTING, database_checksum=stale)
    doc = json.loads(data)
    assert doc["statistics"]["zarrChecksum"] == EXPECTED_CHECKSUM
    assert doc["statistics"]["zarrChecksumMismatch"] == stale
    parsed = read_manifest(data)
    assert parsed.statistics.zarr_checksum_mismatch == stale
    assert parsed.statistics.mismatch is True
    assert rewrite(data) == data
    # agreement: null
    agreed = json.loads(manifest_bytes(LISTING, database_checksum=EXPECTED_CHECKSUM))
    assert agreed["statistics"]["zarrChecksumMismatch"] is None
    # omitted key (proof-of-concept files)
    omitted = json.loads(manifest_bytes(LISTING, include_mismatch_field=False))
    assert list(omitted["statistics"]) == [
        "entries",
        "depth",
        "totalSize",
        "lastModified",
        "zarrChecksum",
    ]


def test_key_order_of_the_document() -> None:
    doc = json.loads(manifest_bytes(LISTING))
    assert list(doc) == ["schemaVersion", "fields", "statistics", "entries"]
    assert doc["schemaVersion"] == SCHEMA_VERSION == 2
    assert list(doc["statistics"]) == [
        "entries",
        "depth",
        "totalSize",
        "lastModified",
        "zarrChecksum",
        "zarrChecksumMismatch",
    ]


def test_non_ascii_names_are_escaped() -> None:
    entries = [ManifestEntry('dé/ü"x', "v", T0, 1, md5(b"1"))]
    data = manifest_bytes(entries)
    assert b'"d\\u00e9": {' in data
    assert b'"\\u00fc\\"x": ["v",' in data
    assert list(read_manifest(data).entries) == [
        entries[0]._replace(last_modified=T0.replace(microsecond=0))
    ]


def test_timestamps() -> None:
    assert format_timestamp(datetime(2022, 3, 16, 2, 39, 36, 999999, tzinfo=UTC)) == (
        "2022-03-16T02:39:36+00:00"
    )
    minus5 = timezone(timedelta(hours=-5))
    assert format_timestamp(datetime(2022, 3, 15, 23, 0, 0, tzinfo=minus5)) == (
        "2022-03-16T04:00:00+00:00"
    )
    with pytest.raises(InvalidManifest, match="no timezone"):
        format_timestamp(datetime(2022, 1, 1))


def test_manifest_key() -> None:
    assert (
        manifest_key("1284a14f", EMPTY_CHECKSUM) == f"zarr-manifest/1284a14f/{EMPTY_CHECKSUM}.json"
    )
    with pytest.raises(InvalidManifest):
        manifest_key("a/b", EMPTY_CHECKSUM)


# -- bad listings ----------------------------------------------------------------
def entry(path: str, etag: str | None = None) -> ManifestEntry:
    return ManifestEntry(path, "v", T0, 1, etag or md5(path.encode()))


@pytest.mark.parametrize(
    ("paths", "error", "message"),
    [
        (["a/x", "b", "a/y"], UngroupedEntries, "grouped by directory"),
        (["a", "a"], InvalidPath, "more than once"),
        (["a", "a/b"], InvalidManifest, "both a file and a directory"),
        (["a/b", "a"], InvalidManifest, "both a file and a directory"),
        (["a//b"], InvalidPath, "empty segment"),
        (["a/../b"], InvalidPath, "'..' segment"),
        (["/a"], InvalidPath, "starts with '/'"),
    ],
)
def test_bad_listings_are_refused(paths: list[str], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        manifest_bytes([entry(p) for p in paths])


def test_bad_etag_and_naive_timestamp_are_refused() -> None:
    with pytest.raises(InvalidDigest, match="not an md5"):
        manifest_bytes([entry("a", etag="abc-2")])
    with pytest.raises(InvalidManifest, match="no timezone"):
        manifest_bytes([ManifestEntry("a", "v", datetime(2022, 1, 1), 1, md5(b"a"))])


# -- reader: other layouts and inconsistencies -------------------------------------
def test_reader_accepts_other_json_layouts() -> None:
    doc = json.loads(manifest_bytes(LISTING))
    expected = list(read_manifest(manifest_bytes(LISTING)).entries)
    for text in (json.dumps(doc), json.dumps(doc, indent=2), json.dumps(doc, indent="\t")):
        assert list(read_manifest(text.encode()).entries) == expected
    # entries first, fields reordered
    reordered = {
        "entries": {
            ".zgroup": [24, "v1", "560caf43c150875fea0e4733f58d4b95", "2024-01-02T03:04:05+00:00"]
        },
        "fields": ["size", "versionId", "ETag", "lastModified"],
        "statistics": {
            "entries": 1,
            "depth": 0,
            "totalSize": 24,
            "lastModified": "2024-01-02T03:04:05+00:00",
            "zarrChecksum": compute_checksum([(".zgroup", 24, md5(b"zgroup"))]),
        },
    }
    parsed = read_manifest(json.dumps(reordered, indent=1).encode())
    assert parsed.schema_version is None
    assert list(parsed.entries) == [expected[0]]


def test_reader_detects_statistics_that_disagree() -> None:
    data = manifest_bytes(LISTING).replace(b'"totalSize": 2338', b'"totalSize": 2339')
    parsed = read_manifest(data)
    assert parsed.statistics.total_size == 2339
    with pytest.raises(InvalidManifest, match="totalSize says 2339 but the entries give 2338"):
        list(parsed.entries)
    assert len(list(read_manifest(data, verify=False).entries)) == 6


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[: d.rindex(b"\n", 0, len(d) // 2) + 1], "truncated"),
        (lambda d: d[: len(d) // 2], "Unterminated string"),
        (lambda d: d.replace(b'"fields": ["versionId",', b'"fields": ['), "must name each"),
        (lambda d: d.replace(b',999,"', b',"999","'), "size must be"),
        (lambda d: d.replace(b'"arr": {', b'"a/r": {'), "not a valid entry or directory name"),
        (lambda d: b"[]", "must be a JSON object"),
        (lambda d: d + b"}", "does not end"),
    ],
)
def test_reader_refuses_broken_files(mutate: object, message: str) -> None:
    data = mutate(manifest_bytes(LISTING))  # type: ignore[operator]
    with pytest.raises(InvalidManifest, match=message):
        list(read_manifest(data).entries)


def test_entry_from_an_s3_version() -> None:
    item = {
        "ETag": '"560caf43c150875fea0e4733f58d4b95"',
        "Size": 24,
        "Key": "zarr/abc/arr/.zgroup",
        "VersionId": "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY",
        "IsLatest": True,
        "LastModified": T0,
    }
    assert ManifestEntry.from_s3_version(item, "zarr/abc/") == ManifestEntry(
        "arr/.zgroup",
        "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY",
        T0,
        24,
        "560caf43c150875fea0e4733f58d4b95",
    )
    with pytest.raises(InvalidManifest, match="not an entry below 'zarr/other/'"):
        ManifestEntry.from_s3_version(item, "zarr/other/")


# -- chunk_stream: a streamed GET read as a file ---------------------------------------------
@pytest.mark.parametrize(
    "chunks",
    [
        [],
        [b""],
        [b"a"],
        [b"", b"ab\ncd", b"", b"\n", b"efg\n\nh"],
        [bytes([i % 256]) * (100_000 + i) for i in range(30)],
        [bytearray(b"xy\n"), memoryview(b"z\nw")],
    ],
)
def test_chunk_stream_reads_the_chunks_back_in_lines_and_reads(chunks: list[bytes]) -> None:
    from zarrchive.manifest.writer import chunk_stream

    whole = b"".join(bytes(c) for c in chunks)
    assert chunk_stream(iter(chunks)).read() == whole
    assert b"".join(chunk_stream(iter(chunks))) == whole  # line by line
    stream = chunk_stream(iter(chunks))
    pieces = []
    while piece := stream.read(777):
        pieces.append(piece)
    assert b"".join(pieces) == whole


def test_chunk_stream_takes_a_chunk_only_once_the_last_is_read_through() -> None:
    """Memory bounded by the chunk size, whatever the file's: never more than the reader's
    buffer and one chunk taken from the iterator ahead of what was read."""
    from zarrchive.manifest.writer import _COPY_CHUNK, chunk_stream

    size = 256 * 1024
    taken = 0

    def chunks() -> Iterator[bytes]:
        nonlocal taken
        for i in range(40):
            taken += 1
            yield (b"%07d\n" % i) * (size // 8)

    stream = chunk_stream(chunks())
    read = 0
    lines = 0
    for line in stream:
        read += len(line)
        lines += 1
        assert taken * size <= read + _COPY_CHUNK + size
    assert (lines, read, taken) == (40 * size // 8, 40 * size, 40)


def test_chunk_stream_holds_one_chunk_never_a_copy_of_its_rest() -> None:
    """The Python memory of reading a stream of 4 MiB chunks line by line: one chunk and the
    reader's buffer (slicing off what was read, as it once did, held a second, near-whole
    copy of each chunk)."""
    import tracemalloc

    from zarrchive.manifest.writer import _COPY_CHUNK, chunk_stream

    size = 4 * 1024 * 1024

    def chunks() -> Iterator[bytes]:
        for i in range(6):
            yield (b"%07d\n" % i) * (size // 8)

    tracemalloc.start()
    try:
        stream = chunk_stream(chunks())
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        read = sum(len(line) for line in stream)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert read == 6 * size
    assert peak < size + _COPY_CHUNK + 256 * 1024
