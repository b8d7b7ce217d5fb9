"""``/api/zarr/{id}/snapshots/``: the states of a Zarr that published versions pin.

Mounted before the Zarr router, so these routes win over the live catch-all
``GET /api/zarr/{id}/{path}`` (a directory named ``snapshots`` at a Zarr's root is listed
with ``GET /api/zarr/{id}/files/?prefix=snapshots``).  Visibility is the live routes': an
embargoed Zarr's snapshots are 404 to anyone but its owners and admins, and their URLs
are presigned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from zarrchive.api.bodies import JsonBody, batch_limit
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.schemas import HEAD_URL_DESCRIPTION, DeleteFile, DirectoryOut, FileOut
from zarrchive.services.zarr_engine import snapshots, zarrs
from zarrchive.wire.zarrs import doc

router = APIRouter(tags=["snapshots"])
PATHS = JsonBody(list[DeleteFile], login=False, max_items=batch_limit)


class SnapshotOut(BaseModel):
    zarr_id: str
    checksum: str = Field(description="The pinned Dandi Zarr checksum")
    file_count: int
    size: int
    frozen: bool = Field(
        description="The publication froze the Zarr (freeze mode): its live state is this one"
    )
    versions: list[str] = Field(description="The published versions that pin this state")
    manifest_url: str | None = Field(
        description="The manifest naming every file's S3 version (presigned when embargoed)"
    )
    refs_url: str = Field(
        description="This state as an fsspec reference file (a URL on this API), every file "
        "at its pinned version"
    )


@dataclass(frozen=True, kw_only=True)
class SnapshotFileOut(FileOut):
    version_id: str = field(metadata=doc("The S3 version of the object this snapshot pins"))


class SnapshotUrlOut(BaseModel):
    path: str
    url: str = Field(description="GET it: exactly the pinned version (presigned if embargoed)")
    version_id: str
    head_url: str | None = Field(default=None, description=HEAD_URL_DESCRIPTION)


def snapshot_url_out(link: snapshots.SnapshotLink) -> SnapshotUrlOut:
    return SnapshotUrlOut(
        path=link.path, url=link.url, version_id=link.version_id, head_url=link.head_url
    )


def _out(info: snapshots.SnapshotInfo) -> SnapshotOut:
    refs = f"/api/zarr/{info.zarr_id}/snapshots/{info.checksum}/refs.json"
    return SnapshotOut(**info.__dict__, refs_url=refs)


@router.get(
    "/api/zarr/{zarr_id}/snapshots/",
    response_model=list[SnapshotOut],
    summary="The published snapshots of a Zarr",
)
def list_snapshots(zarr_id: str, archive: ArchiveDep, user: UserDep) -> list[SnapshotOut]:
    """Every checksum of the Zarr that published versions pin, with those versions (oldest
    first)."""
    with archive.db.session() as session:
        zarr = zarrs.get_zarr(session, user, zarr_id)
        return [_out(s) for s in snapshots.list_snapshots(archive, session, zarr)]


@router.get(
    "/api/zarr/{zarr_id}/snapshots/{checksum}/",
    response_model=SnapshotOut,
    summary="One published snapshot of a Zarr",
)
def get_snapshot(zarr_id: str, checksum: str, archive: ArchiveDep, user: UserDep) -> SnapshotOut:
    """Checksum, file count, size, the versions that pin it and its manifest's URL."""
    with archive.db.session() as session:
        zarr = zarrs.get_zarr(session, user, zarr_id)
        return _out(snapshots.snapshot_info(archive, session, zarr, checksum))


@router.post(
    "/api/zarr/{zarr_id}/snapshots/{checksum}/download/",
    response_model=list[SnapshotUrlOut],
    response_model_exclude_none=True,  # (no `head_url` for public URLs)
    summary="URLs that read exactly the pinned versions of files",
    openapi_extra=PATHS.openapi,
)
def snapshot_download_urls(
    zarr_id: str,
    checksum: str,
    body: Annotated[list[DeleteFile], Depends(PATHS)],
    archive: ArchiveDep,
    user: UserDep,
) -> list[SnapshotUrlOut]:
    """For each `{"path"}` (at most `max_batch_files`, each a file of the snapshot, else 404
    naming the others), a URL with the pinned `versionId`: public, or presigned for an
    embargoed Zarr, and then also a presigned `head_url` of that version (sending
    `x-amz-checksum-mode: ENABLED`)."""
    zarr, pin = snapshots.find_snapshot(archive, user, zarr_id, checksum)
    links = snapshots.snapshot_download_links(archive, zarr, pin, [f.path for f in body])
    return [snapshot_url_out(x) for x in links]


@router.get(
    "/api/zarr/{zarr_id}/snapshots/{checksum}/files/",
    response_model=DirectoryOut,
    summary="A page of a directory of a snapshot (the root by default)",
)
def list_snapshot_directory(
    zarr_id: str,
    checksum: str,
    archive: ArchiveDep,
    user: UserDep,
    prefix: Annotated[str, Query(description="The directory, e.g. `arr/0`; empty: the root")] = "",
    page_size: Annotated[int, Query(ge=1, le=zarrs.MAX_PAGE_SIZE)] = 100,
    cursor: str | None = None,
) -> DirectoryOut:
    """As `GET /api/zarr/{id}/files/?prefix=DIR`, from the snapshot's manifest."""
    directory = prefix.strip("/")
    zarr, pin = snapshots.find_snapshot(archive, user, zarr_id, checksum)
    listing = snapshots.browse_snapshot(
        archive, zarr, pin, directory + "/" if directory else "", page_size=page_size, cursor=cursor
    )
    assert isinstance(listing, zarrs.DirectoryListing)
    return DirectoryOut.of(listing)


@router.get(
    "/api/zarr/{zarr_id}/snapshots/{checksum}/{path:path}",
    response_model=SnapshotFileOut | DirectoryOut,
    summary="A file of a snapshot, or a page of one of its directories",
)
def browse_snapshot(
    zarr_id: str,
    checksum: str,
    path: str,
    archive: ArchiveDep,
    user: UserDep,
    page_size: Annotated[int, Query(ge=1, le=zarrs.MAX_PAGE_SIZE)] = 100,
    cursor: str | None = None,
) -> SnapshotFileOut | DirectoryOut:
    """As `GET /api/zarr/{id}/{path}`, from the snapshot's manifest: a path ending in `/`
    is a directory; otherwise a file if the snapshot has one, else a directory."""
    zarr, pin = snapshots.find_snapshot(archive, user, zarr_id, checksum)
    result = snapshots.browse_snapshot(archive, zarr, pin, path, page_size=page_size, cursor=cursor)
    if isinstance(result, snapshots.SnapshotFile):
        return SnapshotFileOut.of(result)
    return DirectoryOut.of(result)
