"""Request and response bodies of the API."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Self

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from zarrchive.http_common.pagination import after_url
from zarrchive.services.dandi.blobs import MAX_PARTS
from zarrchive.services.zarr_engine.recorded_listing import ObjectEntry
from zarrchive.services.zarr_engine.uploads.parts import MAX_OBJECT_SIZE, MAX_PARTS_PER_REQUEST
from zarrchive.services.zarr_engine.zarrs import FileEntry
from zarrchive.wire import zarrs as wire


class RequestModel(BaseModel):
    """An object of a request body: unknown keys are refused, and so are lists longer than
    the model allows (:attr:`list_limits`), before anything in them is validated.

    pydantic builds one costly error per unknown key or bad item, and a hostile megabyte
    holds a hundred thousand of them: an object with more keys than the model has names
    for is refused with one error (``api.bodies`` bounds the whole body before this).
    """

    model_config = ConfigDict(extra="forbid")
    #: The most items of each list field (by name).
    list_limits: ClassVar[Mapping[str, int]] = {}
    #: The keys the model knows: its fields' names and aliases (set per subclass).
    known_keys: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        names = set(cls.model_fields)
        names.update(f.alias for f in cls.model_fields.values() if f.alias)
        cls.known_keys = frozenset(names)

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if len(data) > len(cls.known_keys):
            unknown = itertools.islice((k for k in data if k not in cls.known_keys), 5)
            raise PydanticCustomError(
                "extra_forbidden",
                "{count} keys given, more than this object's {most} fields; unknown: {names}",
                {"count": len(data), "most": len(cls.known_keys), "names": ", ".join(unknown)},
            )
        for name, most in cls.list_limits.items():
            items = data.get(name)
            if isinstance(items, list) and len(items) > most:
                raise PydanticCustomError(
                    "too_long",
                    "{name}: {count} items; at most {most} are allowed",
                    {"name": name, "count": len(items), "most": most},
                )
        return data


class ZarrCreate(RequestModel):
    name: str = Field(description="The Zarr's name, unique within the dandiset")
    dandiset: str = Field(description="The dandiset's six-digit identifier")


def _answered_whole(schema: dict[str, Any]) -> None:
    """The schema of a wire type's answer: the archive sends every field, so each is
    required and none shows a default (the defaults are for a client reading an older
    archive)."""
    for prop in schema.get("properties", {}).values():
        prop.pop("default", None)


@dataclass(frozen=True)
class ZarrOut(wire.ZarrInfo):
    # The wire type under the name /docs gives it: every field required, no default shown.
    __pydantic_config__ = ConfigDict(
        json_schema_serialization_defaults_required=True, json_schema_extra=_answered_whole
    )


class ManifestOut(BaseModel):
    checksum: str
    key: str
    url: str
    entries: int
    listing_checksum: str
    created: datetime


class UploadFile(RequestModel):
    path: str = Field(description="Path of the file relative to the Zarr root")
    etag: str = Field(description="The file's md5, 32 lowercase hex characters")
    size: int | None = Field(
        None,
        ge=0,
        le=MAX_OBJECT_SIZE,
        description="The file's size in bytes (up to 5 TiB). Files above the archive's "
        "multipart threshold are uploaded in parts (`POST .../upload/parts/`); a file of "
        "more than 5 GiB must declare its size. A declared size is checked at `complete`.",
    )


class UploadUrlOut(BaseModel):
    path: str
    upload_url: str | None = Field(
        description="Presigned PUT URL; send the Content-MD5 and Content-Type headers. `null` "
        "for a file uploaded in parts: ask `POST .../upload/parts/` for its parts' URLs"
    )
    content_type: str | None = Field(
        None,
        description="The Content-Type to send with the PUT: the URL signs it, and S3 refuses "
        "any other (or none). `application/json` for Zarr metadata documents (`.zarray`, "
        "`.zgroup`, `.zattrs`, `.zmetadata`, `zarr.json`), else `application/octet-stream`",
    )
    part_size: int | None = Field(
        None, description="Uploaded in parts: every part but the last has this many bytes"
    )
    part_count: int | None = Field(None, description="Uploaded in parts: how many parts")


class UploadPartIn(RequestModel):
    part_number: int = Field(ge=1, le=MAX_PARTS, description="1-based")
    md5: str = Field(description="The part's md5 (hex): its URL signs it as Content-MD5")


class UploadPartsIn(RequestModel):
    list_limits = {"parts": MAX_PARTS_PER_REQUEST}
    path: str = Field(description="A file of the open batch uploaded in parts")
    parts: list[UploadPartIn] = Field(
        description=f"At most {MAX_PARTS_PER_REQUEST} parts per request"
    )


class UploadPartOut(BaseModel):
    part_number: int
    upload_url: str | None = Field(
        description="Presigned PUT URL signing the part's Content-MD5; `null` when S3 "
        "already holds this part with this md5 (`done`): do not send it again"
    )
    done: bool


class UploadPartsOut(BaseModel):
    path: str
    size: int
    part_size: int
    part_count: int
    parts: list[UploadPartOut]


#: Files one ``POST .../upload/import/`` names at most (a batch holds at most the server's
#: ``max_batch_files``; the batch decides).
MAX_IMPORT_FILES = 10_000


class ImportFileIn(RequestModel):
    path: str = Field(description="A file of the batch (its key is `{prefix}/{path}`)")
    etag: str = Field(max_length=80, description="The source object's ETag, as listed")
    version_id: str | None = Field(
        None, max_length=1024, description="The source object's version, as listed"
    )


class ImportIn(RequestModel):
    list_limits = {"files": MAX_IMPORT_FILES}
    batch: str = Field(
        min_length=32,
        max_length=32,
        pattern="^[0-9a-f]{32}$",
        description="The uid of your open batch (or the batch opened ahead of it)",
    )
    bucket: str = Field(max_length=63, description="The source bucket, on the archive's S3")
    prefix: str = Field("", max_length=1024, description="The Zarr's prefix in the bucket")
    files: list[ImportFileIn] = Field(description=f"At most {MAX_IMPORT_FILES} files")


class ImportOut(BaseModel):
    batch: str
    copied: int = Field(description="Files copied into the batch's staging area")
    declined: list[str] = Field(
        description="Files not copied, to PUT to their URLs yourself. Always empty from "
        "this archive (sources in parts are copied and hashed server-side too); kept so "
        "that a client written for an archive that declines some keeps working"
    )


#: Sources one ``POST .../upload/import/hash/`` names at most (the service's bound:
#: ``import_hash.MAX_HASH_FILES``, 413 beyond it; this caps the body).
MAX_HASH_SOURCES = 10_000


class HashSourceIn(RequestModel):
    path: str = Field(description="A file of the Zarr (its key is `{prefix}/{path}`)")
    size: int = Field(ge=0, description="The source object's size, as listed")
    etag: str = Field(max_length=80, description="The source object's ETag, as listed")
    version_id: str | None = Field(
        None, max_length=1024, description="The source object's version, as listed"
    )


class HashSourcesIn(RequestModel):
    list_limits = {"files": MAX_HASH_SOURCES}
    bucket: str = Field(max_length=63, description="The source bucket, on the archive's S3")
    prefix: str = Field("", max_length=1024, description="The Zarr's prefix in the bucket")
    files: list[HashSourceIn] = Field(
        description="The objects to hash (those uploaded in parts: their ETag is no md5)"
    )


class HashedSourceOut(BaseModel):
    path: str
    md5: str = Field(description="The md5 of the source object's bytes, read by the archive")


class HashSourcesOut(BaseModel):
    files: list[HashedSourceOut]


class RefusedUploadOut(BaseModel):
    batch: str = Field(description="The batch's uid")
    path: str
    expected_md5: str = Field(description="The md5 declared")
    found_md5: str = Field(description="The md5 of the content received")
    created_at: datetime


#: ``head_url`` of a download answer (:class:`DownloadUrlOut`, the snapshots' ``SnapshotUrlOut``).
HEAD_URL_DESCRIPTION = (
    "Only when `url` is presigned (an embargoed Zarr): a presigned URL to HEAD the same "
    "object (and version), since S3 refuses a HEAD of a URL presigned for GET. It signs the "
    "header `x-amz-checksum-mode: ENABLED`: send exactly that header; S3 then answers the "
    "object's `x-amz-checksum-crc32` and `x-amz-checksum-type` (`FULL_OBJECT` for a big file "
    "the archive copied in parts) and `x-amz-meta-zarrchive-md5` (the md5 it verified). "
    "Absent when `url` is a plain public URL: HEAD `url` itself (anonymously, with that "
    "header)."
)


class DownloadUrlOut(BaseModel):
    path: str
    url: str = Field(description="GET it (presigned and short-lived for embargoed Zarrs)")
    head_url: str | None = Field(default=None, description=HEAD_URL_DESCRIPTION)


class DeleteFile(RequestModel):
    path: str


@dataclass(frozen=True, kw_only=True)
class FileOut(wire.FileEntry):
    # The wire type under the name /docs gives it, with DANDI's `type` and `etag`.
    #: always ``file`` (a page of a directory's listing is ``directory``)
    type: str = "file"
    #: DANDI's etag: the md5 again
    etag: str

    @classmethod
    def of(cls, entry: FileEntry) -> Self:
        """A file of a Zarr (or of a snapshot: subclasses add its fields)."""
        return cls(**asdict(entry), etag=entry.md5)


class ListingEntryOut(wire.ListingEntry):
    # The wire type under the name /docs gives it.
    pass


@dataclass(frozen=True, kw_only=True)
class DirectoryOut(wire.DirectoryPage):
    # The wire type under the name /docs gives it (its entries under theirs).
    directories: Sequence[ListingEntryOut]
    files: Sequence[ListingEntryOut]

    @classmethod
    def of(cls, page: wire.DirectoryPage) -> Self:
        return cls(
            path=page.path,
            digest=page.digest,
            file_count=page.file_count,
            size=page.size,
            directories=[ListingEntryOut(**asdict(e)) for e in page.directories],
            files=[ListingEntryOut(**asdict(e)) for e in page.files],
            next=page.next,
        )


# -- DANDI's shapes (server info, dandisets, versions, assets, blob uploads) -----------------
class ServiceUrl(BaseModel):
    url: str


class Services(BaseModel):
    api: ServiceUrl = Field(description="The API's base URL (`.../api`) as the client reached it")
    webui: ServiceUrl


class ServerInfo(BaseModel):
    """DANDI's server info (``/server-info``, ``/api/info/``) with the archive's own fields."""

    model_config = ConfigDict(populate_by_name=True)
    version: str
    schema_version: str = Field(description="The dandischema version of the metadata")
    schema_url: str
    allowed_schema_versions: list[str]
    services: Services
    cli_minimal_version: str = Field(alias="cli-minimal-version")
    cli_bad_versions: list[str] = Field(alias="cli-bad-versions")
    s3_endpoint_url: str | None
    bucket: str
    max_batch_files: int
    published_zarrs: str = Field(
        "freeze",
        description="What publishing does to Zarrs: `freeze` (immutable) or `snapshot` "
        "(the version pins the Zarr's state; the draft stays writable)",
    )


class DandiVersionOut(BaseModel):
    """A version as DANDI lists it."""

    version: str = Field(description="'draft' or a published version 0.YYMMDD.HHMM")
    name: str
    asset_count: int
    size: int
    status: str = Field(description="DANDI's: Pending, Validating, Valid, Invalid, Published")
    created: datetime
    modified: datetime


class DandisetOut(BaseModel):
    """A dandiset in DANDI's shape (plus `name`, `embargoed`, `owners`)."""

    identifier: str
    created: datetime
    modified: datetime
    contact_person: str
    embargo_status: str = Field(description="OPEN, EMBARGOED or UNEMBARGOING")
    draft_version: DandiVersionOut | None
    most_recent_published_version: DandiVersionOut | None
    name: str
    embargoed: bool
    owners: list[str]


class DandisetCreate(RequestModel):
    name: str = Field(description="The dandiset's name")
    metadata: dict[str, Any] | None = Field(
        default=None, description="The draft's metadata (DANDI's); `name` is set from `name`"
    )
    embargo: bool = Field(default=False, description="Create the dandiset embargoed")


class VersionMetadataIn(RequestModel):
    metadata: dict[str, Any] = Field(description="The draft's new metadata (replaces it)")
    name: str | None = Field(default=None, description="The new name (default: metadata's)")


class VersionZarrOut(BaseModel):
    zarr_id: str
    path: str = Field(description="The path of the Zarr's asset")
    checksum: str = Field(description="Live in the draft; as at publication otherwise")
    file_count: int
    size: int


class ValidationErrorOut(BaseModel):
    field: str
    message: str
    path: str | None = None


class VersionInfoOut(DandiVersionOut):
    """DANDI's version info (``.../versions/{v}/info/``), with the Zarrs of the version."""

    dandiset: DandisetOut
    metadata: dict[str, Any]
    contact_person: str
    asset_validation_errors: list[ValidationErrorOut]
    version_validation_errors: list[ValidationErrorOut]
    zarrs: list[VersionZarrOut]


class AssetIn(RequestModel):
    metadata: dict[str, Any] = Field(description="The asset's metadata, with its 'path'")
    blob_id: str | None = Field(default=None, description="A validated blob's id")
    zarr_id: str | None = Field(
        default=None,
        description="A Zarr of the same dandiset, or a published one of another dandiset",
    )
    zarr_checksum: str | None = Field(
        default=None,
        max_length=80,
        description="A Zarr of another dandiset: the published state to read (its checksum; "
        "default: the newest)",
    )


class LindiFileState(StrEnum):
    """Where an HDF5 asset's LINDI file is."""

    PENDING = "pending"
    READY = "ready"
    FAILED = "failed"


class SharedZarrOut(BaseModel):
    """The state of another dandiset's Zarr that an asset reads."""

    dandiset: str = Field(description="The Zarr's own dandiset")
    zarr_id: str
    mode: str = Field(description="freeze (the Zarr is frozen: read live) or snapshot")
    checksum: str = Field(description="The state read, for ever")
    snapshot_url: str | None = Field(
        default=None, description="snapshot mode: where the state's files are listed"
    )


class AssetOut(BaseModel):
    """An asset as DANDI lists it (`asset_id`, `blob` or `zarr`, `path`, `size`, `created`,
    `modified`, `metadata`) plus `blob_id`/`zarr_id`, `dandiset` and `version`, and for an
    HDF5 (NWB) blob its LINDI file: `lindi_url`, `lindi_state`, `lindi_error`."""

    asset_id: str
    blob: str | None
    zarr: str | None
    path: str
    size: int
    created: datetime
    modified: datetime
    metadata: dict[str, Any] | None = Field(
        default=None, description="In list items only with ?metadata=true"
    )
    dandiset: str
    version: str
    blob_id: str | None
    zarr_id: str | None
    lindi_url: str | None = Field(
        default=None,
        description="The asset's LINDI file (HDF5/NWB blobs only; readable when `ready`)",
    )
    lindi_state: LindiFileState | None = Field(
        default=None, description="pending, ready or failed (null: not HDF5, or a Zarr)"
    )
    lindi_error: str | None = Field(default=None, description="Why it failed")
    shared_zarr: SharedZarrOut | None = Field(
        default=None, description="A Zarr of another dandiset: the state this asset reads"
    )


class AssetPathOut(BaseModel):
    """One entry of DANDI's ``.../assets/paths/``: a file (with its asset) or a folder."""

    path: str
    aggregate_files: int
    aggregate_size: int
    asset: dict[str, str] | None = Field(description="`{asset_id}` of a file; null for folders")


class DigestIn(RequestModel):
    algorithm: str = Field(description="'dandi:dandi-etag' (or 'dandi:md5')")
    value: str


class BlobUploadIn(RequestModel):
    """DANDI's `{contentSize, digest, dandiset}`, or our own `{size, md5, dandiset}`."""

    model_config = ConfigDict(populate_by_name=True)
    dandiset: str = Field(description="The dandiset the file is for (six digits)")
    content_size: int | None = Field(default=None, alias="contentSize")
    digest: DigestIn | None = Field(default=None, description="`dandi:dandi-etag` of the file")
    size: int | None = Field(default=None, description="Our flow: the file's size in bytes")
    md5: str | None = Field(default=None, description="Our flow: the file's md5")


class BlobPartOut(BaseModel):
    part_number: int
    size: int
    upload_url: str


class BlobUploadOut(BaseModel):
    upload_id: str | None = Field(description="None when the content is already stored")
    parts: list[BlobPartOut] = Field(
        description="DANDI's flow: one URL per part (DANDI's part rule); ours: one PUT URL "
        "(send Content-MD5 and Content-Type: application/octet-stream, both signed) or one "
        "URL per part"
    )
    blob_id: str | None = Field(default=None, description="Our flow: an existing blob's id")
    multipart: bool = True
    part_size: int | None = None


class BlobExistsOut(BaseModel):
    detail: str
    blob_id: str


class BlobPartIn(RequestModel):
    part_number: int
    etag: str = Field(description="The ETag S3 answered to the part's PUT")
    size: int | None = None


class BlobCompleteIn(RequestModel):
    list_limits = {"parts": MAX_PARTS}  # S3's most parts of an upload
    parts: list[BlobPartIn]


class BlobCompleteOut(BaseModel):
    upload_id: str
    etag: str = Field(description="The multipart object's ETag (not an md5)")


class CompletionOut(BaseModel):
    complete_url: str = Field(description="POST `body` here (S3's CompleteMultipartUpload)")
    body: str


class BlobOut(BaseModel):
    blob_id: str
    etag: str | None = Field(description="dandi:dandi-etag")
    sha256: str | None = None
    size: int
    md5: str | None = Field(description="Known for blobs uploaded with our flow")


class ValidatingOut(BaseModel):
    """A multipart upload being validated in the background: ask again."""

    upload_id: str
    status: str


# -- DANDI's Zarr routes (files/, finalize/) -----------------------------------------------
class ZarrFileIn(RequestModel):
    """One file DANDI's ``POST /api/zarr/{id}/files/`` announces."""

    path: str = Field(description="Path of the file relative to the Zarr root")
    base64md5: str = Field(description="The file's md5, base64 (the Content-MD5 value)")


class ZarrObjectOut(BaseModel):
    """One object of DANDI's flat listing (names as in S3's ``ListObjectsV2``)."""

    Key: str = Field(description="The path relative to the Zarr's root")
    LastModified: datetime
    ETag: str = Field(description="The md5, unquoted")
    Size: int


class ZarrObjectPageOut(BaseModel):
    next: str | None = Field(description="The URL of the next page (`after` set); null at the end")
    results: list[ZarrObjectOut]

    @classmethod
    def of(cls, request: Request, entries: list[ObjectEntry], more: bool) -> Self:
        """A page of DANDI's flat listing: *entries*, and the next page's URL if *more*."""
        return cls(
            next=after_url(request, entries[-1].key) if more and entries else None,
            results=[
                ZarrObjectOut(Key=e.key, LastModified=e.last_modified, ETag=e.etag, Size=e.size)
                for e in entries
            ],
        )


class DroppedFileOut(BaseModel):
    path: str
    expected: str | None = Field(description="The md5 announced")
    found: str | None = Field(description="The md5 in S3; null if never PUT")
    reason: str = Field(description="`missing`, `differs` or `file_and_directory`")


class FinalizeOut(BaseModel):
    zarr_id: str
    status: str = Field(description="The Zarr's status now: `Ingesting` until it is applied")
    batch: str | None = Field(description="The batch finalized; null when none was open")
    files: int = Field(description="Files verified and queued")
    dropped: list[DroppedFileOut] = Field(
        description="Files announced but left out: never PUT, another md5, or both a file and "
        "a directory"
    )
