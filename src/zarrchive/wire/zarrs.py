"""The Zarr wire types: ``GET /api/zarr/{id}/`` (:class:`ZarrInfo`), a file
(:class:`FileEntry`) and a page of a directory's listing (:class:`DirectoryPage` of
:class:`ListingEntry`).

The server builds them (:func:`zarrchive.services.zarr_engine.zarr_info.zarr_info`,
:func:`zarrchive.services.zarr_engine.zarrs.list_directory`); the API answers them under the
names of its ``/docs`` (``ZarrOut``, ``FileOut`` with DANDI's ``type`` and ``etag``,
``DirectoryOut``, ``ListingEntryOut``: :mod:`zarrchive.api.schemas`); the client reads them
back with ``from_json`` (:mod:`zarrchive.client.api`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from urllib.parse import quote


def doc(description: str) -> Mapping[str, str]:
    """The metadata of a field described in the API's ``/docs``:
    ``field(metadata=doc("..."))`` (pydantic reads ``metadata["description"]``)."""
    return {"description": description}


class UploadState(StrEnum):
    """Where a Zarr is in its uploads (``upload_state``; DANDI's Complete / Pending /
    Ingesting: :class:`ZarrStatus`)."""

    #: no batch: what the Zarr shows is all there is
    AT_REST = "at_rest"
    #: an upload batch is open (the client PUTs), nothing waits to be applied
    OPEN = "open"
    #: verified batches (or a deletion) are being applied; a batch may also be open
    APPLYING = "applying"


class ZarrStatus(StrEnum):
    """DANDI's ``status`` of a Zarr (``ZarrArchiveStatus``), from its batches: ``Pending``
    while an upload batch is open, ``Ingesting`` while verified batches (or a deletion) are
    being applied, ``Complete`` when the Zarr is at rest (its ``checksum`` is final)."""

    PENDING = "Pending"
    INGESTING = "Ingesting"
    COMPLETE = "Complete"


#: The time of a Zarr an answer did not date (the epoch).
UNDATED = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ZarrInfo:
    """One Zarr: its checksum, size, upload state, DANDI's status, manifest and published
    versions (``GET /api/zarr/{id}/``, and what changes a Zarr answer).

    The archive always sends every field.  The first nine are what every archive answered
    (a client needs no more); the others have defaults, a Zarr at rest with nothing more
    known, so that a client reads an older archive's answer and a test builds a Zarr from
    the first nine."""

    zarr_id: str
    name: str
    dandiset: str
    s3_path: str = field(metadata=doc("zarr/{zarr_id}/"))
    s3_url: str
    checksum: str = field(metadata=doc("The Dandi Zarr checksum of the whole Zarr"))
    file_count: int
    size: int
    upload_in_progress: bool = field(metadata=doc("An upload batch is open"))
    #: an :class:`UploadState`, kept as the server's text (a newer server may add states)
    upload_state: str = field(
        default=UploadState.AT_REST,
        metadata=doc(
            "`at_rest`; `open` (an upload batch is open); `applying` (verified "
            "batches are being applied: `checksum` changes when they are done)"
        ),
    )
    #: a :class:`ZarrStatus`, kept as the server's text
    status: str = field(
        default=ZarrStatus.COMPLETE,
        metadata=doc(
            "DANDI's status: `Pending` (an upload batch is open), `Ingesting` "
            "(verified batches are being applied), `Complete` (at rest: `checksum` is final)"
        ),
    )
    created: datetime = UNDATED
    modified: datetime = field(
        default=UNDATED, metadata=doc("Last change of the Zarr's content or upload state")
    )
    manifest_url: str | None = field(
        default=None,
        metadata=doc("URL of the manifest of the current checksum; null while it is pending"),
    )
    manifest_status: str = field(
        default="pending",
        metadata=doc("`available`, or `pending` until the background job has written it"),
    )
    refs_url: str = field(
        default="",
        metadata=doc(
            "The live state as an fsspec reference file (a URL on this API): "
            "`fsspec.filesystem('reference', fo=...)` opens it with stock zarr-python"
        ),
    )
    checksum_mismatch: str | None = field(
        default=None,
        metadata=doc(
            "ALARM: the tree hash of the Zarr's S3 objects when it differs from "
            "`checksum` (found while writing the manifest); null when they agree"
        ),
    )
    published_versions: list[str] = field(
        default_factory=list,
        metadata=doc("Published versions containing the Zarr; when any, the Zarr is immutable"),
    )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ZarrInfo:
        """The Zarr an API answer describes (``KeyError``, ``TypeError`` or ``ValueError``
        for an answer without the first nine fields or of another shape; the others take
        their defaults when absent)."""

        def text(name: str, default: str | None) -> str | None:
            value = data.get(name, default)
            return None if value is None else str(value)

        def time(name: str) -> datetime:
            value = data.get(name)
            return UNDATED if value is None else datetime.fromisoformat(str(value))

        return cls(
            zarr_id=str(data["zarr_id"]),
            name=str(data["name"]),
            dandiset=str(data["dandiset"]),
            s3_path=str(data["s3_path"]),
            s3_url=str(data["s3_url"]),
            checksum=str(data["checksum"]),
            file_count=int(data["file_count"]),
            size=int(data["size"]),
            upload_in_progress=bool(data["upload_in_progress"]),
            upload_state=str(data.get("upload_state", UploadState.AT_REST)),
            status=str(data.get("status", ZarrStatus.COMPLETE)),
            created=time("created"),
            modified=time("modified"),
            manifest_url=text("manifest_url", None),
            manifest_status=str(data.get("manifest_status", "pending")),
            refs_url=str(data.get("refs_url", "")),
            checksum_mismatch=text("checksum_mismatch", None),
            published_versions=[str(v) for v in data.get("published_versions", ())],
        )

    def object_url(self, path: str) -> str:
        """The plain S3 URL of the Zarr's file *path*."""
        base = self.s3_url if self.s3_url.endswith("/") else self.s3_url + "/"
        return base + quote(path, safe="/~")


@dataclass(frozen=True)
class FileEntry:
    """A file of a Zarr (``GET /api/zarr/{id}/{path}``; the API's ``FileOut`` adds
    ``type`` and DANDI's ``etag``, the md5 again): its size and md5, its key in the bucket
    and its plain S3 URL."""

    name: str
    path: str
    size: int
    md5: str
    s3_key: str
    s3_url: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileEntry:
        return cls(
            name=str(data["name"]),
            path=str(data["path"]),
            size=int(data["size"]),
            md5=str(data["md5"]),
            s3_key=str(data["s3_key"]),
            s3_url=str(data["s3_url"]),
        )


@dataclass(frozen=True)
class ListingEntry:
    """A child in a directory's listing: a file (its digest is its md5) or a directory
    (its digest is its Zarr checksum)."""

    name: str
    path: str
    digest: str
    size: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ListingEntry:
        return cls(str(data["name"]), str(data["path"]), str(data["digest"]), int(data["size"]))


@dataclass(frozen=True, kw_only=True)
class DirectoryPage:
    """A page of a directory's listing: the directory's own digest, file count and size,
    a page of its children (directories first, each kind by name), the cursor of the
    next page."""

    type: str = "directory"
    path: str
    digest: str
    file_count: int
    size: int
    directories: Sequence[ListingEntry]
    files: Sequence[ListingEntry]
    next: str | None = field(metadata=doc("Cursor of the next page (pass as ?cursor=)"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DirectoryPage:
        cursor = data.get("next")
        return cls(
            path=str(data["path"]),
            digest=str(data["digest"]),
            file_count=int(data["file_count"]),
            size=int(data["size"]),
            directories=[ListingEntry.from_json(e) for e in data["directories"]],
            files=[ListingEntry.from_json(e) for e in data["files"]],
            next=None if cursor is None else str(cursor),
        )
