"""The Zarr wire types (zarrchive.wire.zarrs): what the API answers is what the client reads
back, and the API's models are those types under the names of /docs (the file with
DANDI's ``type`` and ``etag``)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import TypeAdapter

from zarrchive.api.routers.snapshots import SnapshotFileOut
from zarrchive.api.schemas import DirectoryOut, FileOut, ListingEntryOut, ZarrOut
from zarrchive.services.zarr_engine.snapshots import SnapshotFile
from zarrchive.wire.zarrs import (
    DirectoryPage,
    FileEntry,
    ListingEntry,
    UploadState,
    ZarrInfo,
    ZarrStatus,
)

pytestmark = pytest.mark.unit

INFO = ZarrInfo(
    zarr_id="0b7a4c9e-5f6d-4e0a-9d39-4b1c0e6f2a11",
    name="sample.zarr",
    dandiset="000001",
    s3_path="zarr/0b7a4c9e-5f6d-4e0a-9d39-4b1c0e6f2a11/",
    s3_url="http://127.0.0.1:9000/zarrchive/zarr/0b7a4c9e-5f6d-4e0a-9d39-4b1c0e6f2a11/",
    checksum="4d1c5b0ec5e8b1f0b2a4c2a3d8e1f9a0-3--1234",
    file_count=3,
    size=1234,
    upload_in_progress=True,
    upload_state=UploadState.OPEN,
    status=ZarrStatus.PENDING,
    created=datetime(2026, 11, 29, 13, 0, tzinfo=UTC),
    modified=datetime(2026, 11, 29, 13, 5, 30, 123456, tzinfo=UTC),
    manifest_url=None,
    manifest_status="pending",
    refs_url="/api/zarr/0b7a4c9e-5f6d-4e0a-9d39-4b1c0e6f2a11/refs.json",
    checksum_mismatch=None,
    published_versions=["0.261129.1300"],
)
PAGE = DirectoryPage(
    path="arr",
    digest="0d7f2b8c1a9e4f6b3c5d7e9f1a2b4c6d-2--20",
    file_count=2,
    size=20,
    directories=[ListingEntry("0", "arr/0", "9c1e...-1--10", 10)],
    files=[ListingEntry(".zarray", "arr/.zarray", "5d41402abc4b2a76b9719d911017c592", 10)],
    next="WzEsIi56YXJyYXkiXQ",
)


def answered(model: type[Any], value: Any) -> Any:
    """*value* as the API writes it in JSON (pydantic, as FastAPI serializes a response)."""
    return json.loads(TypeAdapter(model).dump_json(value))


def test_the_client_reads_back_the_zarr_the_api_answers() -> None:
    sent = answered(ZarrOut, ZarrOut(**dataclasses.asdict(INFO)))
    assert ZarrInfo.from_json(sent) == INFO
    assert sent["upload_state"] == "open" and sent["status"] == "Pending"


def test_the_client_reads_back_the_page_the_api_answers() -> None:
    sent = answered(DirectoryOut, DirectoryOut.of(PAGE))
    assert sent["type"] == "directory"
    assert DirectoryPage.from_json(sent) == PAGE
    last = DirectoryPage.from_json({**sent, "next": None, "directories": [], "files": []})
    assert last.next is None and last.directories == []


def test_the_api_models_are_the_wire_types() -> None:
    assert issubclass(DirectoryOut, DirectoryPage)
    assert issubclass(ListingEntryOut, ListingEntry)
    assert issubclass(ZarrOut, ZarrInfo)
    assert issubclass(FileOut, FileEntry)
    for api, wire in ((DirectoryOut, DirectoryPage), (ZarrOut, ZarrInfo)):
        assert [f.name for f in dataclasses.fields(api)] == [
            f.name for f in dataclasses.fields(wire)
        ]


def test_zarr_out_documents_every_field_as_sent() -> None:
    """/docs: the archive sends every field of a Zarr, so each is required in the answer's
    schema and none shows the default a client reading an older archive falls back on; the
    descriptions are the wire type's."""
    schema = TypeAdapter(ZarrOut).json_schema(mode="serialization")
    wire = {f.name: f.metadata.get("description") for f in dataclasses.fields(ZarrInfo)}
    assert schema["required"] == list(wire)
    assert not [name for name, p in schema["properties"].items() if "default" in p]
    assert {name: p.get("description") for name, p in schema["properties"].items()} == wire


def test_an_answer_of_another_shape_is_refused() -> None:
    sent = answered(ZarrOut, ZarrOut(**dataclasses.asdict(INFO)))
    del sent["checksum"]
    with pytest.raises(KeyError):
        ZarrInfo.from_json(sent)


def test_object_url_quotes_the_path() -> None:
    assert INFO.object_url("a b/c#d").endswith(
        "/zarr/0b7a4c9e-5f6d-4e0a-9d39-4b1c0e6f2a11/a%20b/c%23d"
    )


def test_an_older_archive_s_answer_reads_with_the_defaults() -> None:
    """The first nine fields are all an archive ever had to send; the rest default to a
    Zarr at rest (as the client always read an answer without ``upload_state``)."""
    first_nine = {f.name: getattr(INFO, f.name) for f in dataclasses.fields(ZarrInfo)[:9]}
    read = ZarrInfo.from_json(first_nine)
    assert read == ZarrInfo(*first_nine.values())
    assert (read.upload_state, read.status) == (UploadState.AT_REST, ZarrStatus.COMPLETE)
    assert read.published_versions == [] and read.manifest_url is None


def test_the_client_reads_back_the_file_the_api_answers() -> None:
    entry = FileEntry(
        name="0",
        path="arr/0",
        size=10,
        md5="5d41402abc4b2a76b9719d911017c592",
        s3_key="zarr/0b7a4c9e-5f6d-4e0a-9d39-4b1c0e6f2a11/arr/0",
        s3_url="http://127.0.0.1:9000/zarrchive/zarr/0b7a4c9e-5f6d-4e0a-9d39-4b1c0e6f2a11/arr/0",
    )
    sent = answered(FileOut, FileOut.of(entry))
    assert (sent["type"], sent["etag"]) == ("file", entry.md5)
    assert FileEntry.from_json(sent) == entry


def test_file_out_is_the_wire_file_with_type_and_etag() -> None:
    wire = [f.name for f in dataclasses.fields(FileEntry)]
    assert [f.name for f in dataclasses.fields(FileOut)] == [*wire, "type", "etag"]
    schema = TypeAdapter(FileOut).json_schema(mode="serialization")
    assert set(schema["required"]) == {*wire, "etag"}  # `type` shows its default, "file"


def test_a_snapshot_file_is_answered_with_its_version() -> None:
    pinned = SnapshotFile("0", "arr/0", 10, "5d41402abc4b2a76b9719d911017c592", "k", "u", "v1")
    sent = answered(SnapshotFileOut, SnapshotFileOut.of(pinned))
    assert (sent["type"], sent["etag"], sent["version_id"]) == ("file", pinned.md5, "v1")
    assert FileEntry.from_json(sent) == FileEntry(*dataclasses.astuple(pinned)[:6])
