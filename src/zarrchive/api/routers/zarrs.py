"""``/api/zarr/``: Zarr archives, batched uploads and file deletion."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from sqlalchemy.orm import Session

from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.schemas import (
    DeleteFile,
    DirectoryOut,
    DownloadUrlOut,
    FileOut,
    ListingEntryOut,
    ManifestOut,
    UploadFile,
    UploadUrlOut,
    ZarrCreate,
    ZarrOut,
)
from zarrchive.db.models import Zarr
from zarrchive.errors import NoUploadInProgress
from zarrchive.services import manifests, uploads, zarrs
from zarrchive.services.runtime import Archive

router = APIRouter(tags=["zarr"])


def zarr_out(archive: Archive, zarr_id: str, user: UserDep) -> ZarrOut:
    with archive.db.session() as session:
        zarr = zarrs.get_zarr(session, user, zarr_id)
        return _zarr_out(archive, session, zarr)


def _zarr_out(archive: Archive, session: Session, zarr: Zarr) -> ZarrOut:
    info = zarrs.zarr_info(archive, session, zarr)
    return ZarrOut(**info.__dict__)


@router.post("/api/zarr/", response_model=ZarrOut, summary="Create a Zarr archive")
def create_zarr(body: ZarrCreate, archive: ArchiveDep, user: UserDep) -> ZarrOut:
    """Mint a new, empty Zarr in a dandiset (owners only); names are unique per dandiset."""
    with archive.db.write_session() as session:
        zarr = zarrs.create_zarr(session, user, body.name, body.dandiset)
        return _zarr_out(archive, session, zarr)


@router.get("/api/zarr/", response_model=list[ZarrOut], summary="List Zarr archives")
def list_zarrs(
    archive: ArchiveDep,
    user: UserDep,
    dandiset: str | None = None,
    name: str | None = None,
    page_size: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: str | None = None,
) -> list[ZarrOut]:
    """Zarrs visible to the caller, filtered by dandiset and/or exact name, ordered by id;
    pass the last id as `after` for the next page."""
    with archive.db.session() as session:
        found = zarrs.list_zarrs(
            session, user, dandiset_id=dandiset, name=name, limit=page_size, after=after
        )
        return [_zarr_out(archive, session, z) for z in found]


@router.get("/api/zarr/{zarr_id}/", response_model=ZarrOut, summary="A Zarr archive")
def get_zarr(zarr_id: str, archive: ArchiveDep, user: UserDep) -> ZarrOut:
    """Name, dandiset, S3 location, checksum, file count and size."""
    return zarr_out(archive, zarr_id, user)


@router.post(
    "/api/zarr/{zarr_id}/download/",
    response_model=list[DownloadUrlOut],
    summary="URLs to read files (presigned for embargoed Zarrs)",
)
def download_urls(
    zarr_id: str, body: list[DeleteFile], archive: ArchiveDep, user: UserDep
) -> list[DownloadUrlOut]:
    """For each `{"path"}` (at most `max_batch_files`), a URL to GET the file: the public
    URL, or for an embargoed Zarr (owners and admins) a presigned one."""
    with archive.db.session() as session:
        zarr = zarrs.get_zarr(session, user, zarr_id)
        urls = zarrs.download_urls(archive, zarr, [f.path for f in body])
    return [DownloadUrlOut(path=p, url=u) for p, u in urls]


@router.get(
    "/api/zarr/{zarr_id}/manifests/",
    response_model=list[ManifestOut],
    summary="The checksums that have manifest files",
)
def list_manifests(zarr_id: str, archive: ArchiveDep, user: UserDep) -> list[ManifestOut]:
    """Every manifest written for the Zarr (`zarr-manifest/{zarr_id}/{checksum}.json`),
    oldest first."""
    with archive.db.session() as session:
        zarr = zarrs.get_zarr(session, user, zarr_id)
        return [ManifestOut(**m.__dict__) for m in manifests.list_manifests(archive, session, zarr)]


@router.get(
    "/api/zarr/{zarr_id}/upload/",
    status_code=204,
    responses={204: {"description": "A batch is open"}, 404: {"description": "No batch open"}},
    summary="Is an upload batch open?",
)
def upload_status(zarr_id: str, archive: ArchiveDep, user: UserDep) -> Response:
    if not uploads.upload_in_progress(archive, user, zarr_id):
        raise NoUploadInProgress(f"Zarr {zarr_id} has no upload batch open")
    return Response(status_code=204)


@router.post(
    "/api/zarr/{zarr_id}/upload/",
    response_model=list[UploadUrlOut],
    summary="Open an upload batch and get presigned PUT URLs",
)
def start_upload(
    zarr_id: str, body: list[UploadFile], archive: ArchiveDep, user: UserDep
) -> list[UploadUrlOut]:
    """Each URL signs `Content-MD5`: send that header with the file's md5 (base64), and S3
    refuses any other body.  At most `max_batch_files` files; one open batch per Zarr."""
    urls = uploads.start_batch(archive, user, zarr_id, [(f.path, f.etag) for f in body])
    return [UploadUrlOut(path=u.path, upload_url=u.upload_url) for u in urls]


@router.post(
    "/api/zarr/{zarr_id}/upload/complete/",
    response_model=ZarrOut,
    summary="Verify the batch and update the checksum",
)
def complete_upload(
    zarr_id: str,
    archive: ArchiveDep,
    user: UserDep,
    wait: Annotated[
        bool,
        Query(description="Apply the batch before answering (`checksum` is then the new one)"),
    ] = False,
) -> ZarrOut:
    """Checks every file of the batch in S3 (present, ETag == md5); on any problem answers
    400 naming each file and leaves the batch open.  Otherwise the batch is queued to be
    applied (in order, after earlier batches) and the answer comes at once with
    `upload_state` `applying`: the next batch may be opened right away; `checksum` changes
    when the Zarr is `at_rest` again.  With `wait=true` the batch is applied first."""
    uploads.complete_batch(archive, user, zarr_id, wait=wait)
    return zarr_out(archive, zarr_id, user)


@router.delete("/api/zarr/{zarr_id}/upload/", status_code=204, summary="Cancel the open batch")
def cancel_upload(zarr_id: str, archive: ArchiveDep, user: UserDep) -> Response:
    """Forgets the open batch and what it uploaded (the Zarr never saw it); batches already
    completed are still applied."""
    uploads.cancel_batch(archive, user, zarr_id)
    return Response(status_code=204)


@router.delete("/api/zarr/{zarr_id}/files/", response_model=ZarrOut, summary="Delete files")
def delete_files(
    zarr_id: str, body: list[DeleteFile], archive: ArchiveDep, user: UserDep
) -> ZarrOut:
    """All paths must be files of the Zarr, else 404 naming the missing ones and nothing is
    deleted.  Allowed while an upload batch is open; completed batches are applied first."""
    uploads.delete_files(archive, user, zarr_id, [f.path for f in body])
    return zarr_out(archive, zarr_id, user)


@router.get(
    "/api/zarr/{zarr_id}/files/",
    response_model=DirectoryOut,
    summary="A page of a directory's listing (the root by default)",
)
def list_directory(
    zarr_id: str,
    archive: ArchiveDep,
    user: UserDep,
    prefix: Annotated[str, Query(description="The directory, e.g. `arr/0`; empty: the root")] = "",
    page_size: Annotated[int, Query(ge=1, le=zarrs.MAX_PAGE_SIZE)] = 100,
    cursor: str | None = None,
) -> DirectoryOut:
    """Directories and files with their digests and sizes, from the `.checksum` nodes."""
    directory = prefix.strip("/")
    with archive.db.session() as session:
        zarr = zarrs.get_zarr(session, user, zarr_id)
    listing = zarrs.list_directory(archive, zarr, directory, page_size=page_size, cursor=cursor)
    return _directory_out(listing)


@router.get(
    "/api/zarr/{zarr_id}/{path:path}",
    response_model=FileOut | DirectoryOut,
    summary="A file, or a page of a directory's listing",
)
def browse(
    zarr_id: str,
    path: str,
    archive: ArchiveDep,
    user: UserDep,
    page_size: Annotated[int, Query(ge=1, le=zarrs.MAX_PAGE_SIZE)] = 100,
    cursor: str | None = None,
) -> FileOut | DirectoryOut:
    """A path ending in `/` (or empty) is a directory; otherwise a file if there is one,
    else a directory."""
    with archive.db.session() as session:
        zarr = zarrs.get_zarr(session, user, zarr_id)
    result = zarrs.browse(archive, zarr, path, page_size=page_size, cursor=cursor)
    if isinstance(result, zarrs.FileEntry):
        return FileOut(
            name=result.name,
            path=result.path,
            size=result.size,
            md5=result.md5,
            etag=result.md5,
            s3_key=result.s3_key,
            s3_url=result.s3_url,
        )
    return _directory_out(result)


def _directory_out(listing: zarrs.DirectoryListing) -> DirectoryOut:
    return DirectoryOut(
        path=listing.path,
        digest=listing.digest,
        file_count=listing.file_count,
        size=listing.size,
        directories=[ListingEntryOut(**e.__dict__) for e in listing.directories],
        files=[ListingEntryOut(**e.__dict__) for e in listing.files],
        next=listing.next,
    )
