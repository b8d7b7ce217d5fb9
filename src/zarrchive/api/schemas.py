"""Request and response bodies of the API."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class Info(BaseModel):
    version: str
    s3_endpoint_url: str | None
    bucket: str
    max_batch_files: int


class DandisetCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="The dandiset's name")
    embargo: bool = Field(default=False, description="Create the dandiset embargoed")


class DandisetOut(BaseModel):
    identifier: str
    name: str
    embargoed: bool
    owners: list[str]
    created: datetime


class ZarrCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="The Zarr's name, unique within the dandiset")
    dandiset: str = Field(description="The dandiset's six-digit identifier")


class ZarrOut(BaseModel):
    zarr_id: str
    name: str
    dandiset: str
    s3_path: str = Field(description="zarr/{zarr_id}/")
    s3_url: str
    checksum: str = Field(description="The Dandi Zarr checksum of the whole Zarr")
    file_count: int
    size: int
    upload_in_progress: bool
    created: datetime
    modified: datetime = Field(description="Last change of the Zarr's content or upload state")
    manifest_url: str | None = Field(
        description="URL of the manifest of the current checksum; null while it is pending"
    )
    checksum_mismatch: str | None = Field(
        description="ALARM: the tree hash of the Zarr's S3 objects when it differs from "
        "`checksum` (found while writing the manifest); null when they agree"
    )


class ManifestOut(BaseModel):
    checksum: str
    key: str
    url: str
    entries: int
    listing_checksum: str
    created: datetime


class UploadFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="Path of the file relative to the Zarr root")
    etag: str = Field(description="The file's md5, 32 lowercase hex characters")


class UploadUrlOut(BaseModel):
    path: str
    upload_url: str = Field(description="Presigned PUT URL; send the Content-MD5 header")


class DeleteFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str


class FileOut(BaseModel):
    type: str = "file"
    name: str
    path: str
    size: int
    md5: str
    etag: str
    s3_key: str
    s3_url: str


class ListingEntryOut(BaseModel):
    name: str
    path: str
    digest: str
    size: int


class DirectoryOut(BaseModel):
    type: str = "directory"
    path: str
    digest: str
    file_count: int
    size: int
    directories: list[ListingEntryOut]
    files: list[ListingEntryOut]
    next: str | None = Field(description="Cursor of the next page (pass as ?cursor=)")
