"""``/api/zarr/{view_id}/``: a pinned state of a Zarr as a read-only Zarr of its own id.

What a shared asset in ``snapshot`` mode names as its ``zarr`` (see
:mod:`zarrchive.services.zarr_engine.pinned_views`).  The routes match only view ids (UUIDs of
version 5: the ``pinned_view`` path convertor; a Zarr's id is of version 4) and are mounted
before every other Zarr router, so a view never reaches the live routes.  They answer the
live routes' shapes from the state's manifest, every file at its pinned S3 version; every
write (any other method, any path) is 409 and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC
from email.utils import format_datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import RedirectResponse, StreamingResponse
from starlette.convertors import StringConvertor, register_url_convertor

from zarrchive.api.bodies import JsonBody, batch_limit
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.routers import readers, snapshots
from zarrchive.api.schemas import (
    DeleteFile,
    DirectoryOut,
    DownloadUrlOut,
    FileOut,
    ZarrObjectPageOut,
    ZarrOut,
)
from zarrchive.errors import NotFound, NoUploadInProgress
from zarrchive.http_common.public_url import public_base
from zarrchive.services.zarr_engine import pinned_views
from zarrchive.services.zarr_engine import snapshots as snapshot_service
from zarrchive.services.zarr_engine import zarrs as zarr_service
from zarrchive.services.zarr_engine.pinned_views import PinnedView
from zarrchive.wire.zarrs import doc


class PinnedViewConvertor(StringConvertor):
    """A pinned view's id: a UUID of version 5 (any case)."""

    regex = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-5[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}"


register_url_convertor("pinned_view", PinnedViewConvertor())

#: Out of the OpenAPI schema: a view's paths are the Zarr routes' own (``/api/zarr/{id}/...``),
#: which document them; docs/api.md says what a view answers.
router = APIRouter(tags=["pinned views"], include_in_schema=False)
PATHS = JsonBody(list[DeleteFile], login=False, max_items=batch_limit)
VIEW = "/api/zarr/{view_id:pinned_view}"
WRITES = ["POST", "PUT", "PATCH", "DELETE"]


@dataclass(frozen=True, kw_only=True)
class PinnedViewOut(ZarrOut):
    view_of: str = field(
        metadata=doc("The Zarr whose published state (`checksum`) this read-only view shows")
    )


def _view(archive: ArchiveDep, user: UserDep, view_id: str) -> PinnedView:
    return pinned_views.find_view(archive, user, view_id)


@router.get(VIEW + "/", response_model=PinnedViewOut, summary="A pinned view of a Zarr")
def get_view(view_id: str, request: Request, archive: ArchiveDep, user: UserDep) -> PinnedViewOut:
    """The Zarr's info at the pinned state: its checksum, file count and size, at rest for
    ever; `s3_url` is this API's `read/` route of the view (each file: a redirect to its
    pinned version); `view_of` names the Zarr."""
    view = _view(archive, user, view_id)
    base = public_base(request)
    return PinnedViewOut(
        zarr_id=view.view_id,
        name=view.name,
        dandiset=view.dandiset,
        s3_path=pinned_views.s3_path(view),
        s3_url=f"{base}/api/zarr/{view.view_id}/read/",
        checksum=view.checksum,
        file_count=view.file_count,
        size=view.size,
        upload_in_progress=False,
        upload_state="at_rest",
        status="Complete",
        created=view.pinned_at,
        modified=view.pinned_at,
        manifest_url=pinned_views.the_manifest_url(archive, view),
        manifest_status="available",
        refs_url=f"/api/zarr/{view.view_id}/refs.json",
        checksum_mismatch=None,
        published_versions=view.pin.versions,
        view_of=view.zarr.id,
    )


@router.get(VIEW + "/upload/", status_code=204, summary="A pinned view has no upload batch")
def upload_status(view_id: str, archive: ArchiveDep, user: UserDep) -> Response:
    """Always 404: a view never changes."""
    view = _view(archive, user, view_id)
    raise NoUploadInProgress(f"Zarr {view.view_id} is read-only: it has no upload batch")


@router.post(
    VIEW + "/download/",
    response_model=list[DownloadUrlOut],
    response_model_exclude_none=True,  # (no `head_url` for public URLs)
    summary="URLs of the pinned versions of files",
    openapi_extra=PATHS.openapi,
)
def download_urls(
    view_id: str,
    body: Annotated[list[DeleteFile], Depends(PATHS)],
    archive: ArchiveDep,
    user: UserDep,
) -> list[DownloadUrlOut]:
    view = _view(archive, user, view_id)
    links = pinned_views.download_links(archive, view, [f.path for f in body])
    return [DownloadUrlOut(path=x.path, url=x.url, head_url=x.head_url) for x in links]


def _head(archive: ArchiveDep, view: PinnedView, path: str, version_id: str | None) -> Response:
    """A HEAD of the pinned version of *path*: a public view's 302 to its plain versioned
    URL (S3 answers the HEAD there); an embargoed view's URLs are presigned for GET, which
    S3 refuses a HEAD, so the answer is the version's own headers (200, no body), as S3
    would give them."""
    if not view.zarr.embargoed:
        url = pinned_views.object_url(archive, view, path, version_id=version_id)
        return RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})
    found = pinned_views.object_head(archive, view, path, version_id=version_id)
    headers = {
        "Content-Length": str(found.size),
        "ETag": f'"{found.etag}"',
        "Last-Modified": format_datetime(found.last_modified.astimezone(UTC), usegmt=True),
        "Cache-Control": "private, no-store",
    }
    if found.version_id is not None:
        headers["x-amz-version-id"] = found.version_id
    return Response(status_code=200, headers=headers)


@router.head(VIEW + "/files/", response_class=Response, include_in_schema=False)
@router.head(VIEW + "/files", response_class=Response, include_in_schema=False)
def head_object(view_id: str, archive: ArchiveDep, user: UserDep, prefix: str = "") -> Response:
    """The pinned version of the file `prefix` names: 302 to it (an embargoed view: its
    headers, see :func:`_head`)."""
    return _head(archive, _view(archive, user, view_id), prefix, None)


@router.get(
    VIEW + "/files/",
    response_model=ZarrObjectPageOut,
    responses={302: {"description": "`download=true`: the pinned version's URL"}},
    summary="DANDI's flat listing of a pinned view",
)
@router.get(VIEW + "/files", response_model=ZarrObjectPageOut, include_in_schema=False)
def list_objects(
    view_id: str,
    request: Request,
    archive: ArchiveDep,
    user: UserDep,
    prefix: str = "",
    after: str = "",
    limit: Annotated[int, Query(ge=0, le=zarr_service.MAX_OBJECT_PAGE)] = (
        zarr_service.MAX_OBJECT_PAGE
    ),
    download: bool = False,
) -> ZarrObjectPageOut | Response:
    """As `GET /api/zarr/{id}/files/`, of the pinned state; `download=true` redirects (302)
    to the pinned version of the file `prefix` names."""
    view = _view(archive, user, view_id)
    if download:
        return RedirectResponse(pinned_views.object_url(archive, view, prefix), status_code=302)
    entries, more = pinned_views.list_objects(
        archive, view, prefix=prefix, after=after, limit=limit
    )
    return ZarrObjectPageOut.of(request, entries, more)


@router.get(
    VIEW + "/node/{path:path}",
    response_class=Response,
    responses={200: {"content": {"application/json": {}}}},
    summary="A directory's .checksum node in a pinned view",
)
def checksum_node(view_id: str, path: str, archive: ArchiveDep, user: UserDep) -> Response:
    """As `GET /api/zarr/{id}/node/{path}`, of the pinned state."""
    view = _view(archive, user, view_id)
    body = pinned_views.checksum_node(archive, view, path)
    return Response(body, media_type="application/json")


@router.head(VIEW + "/refs.json", include_in_schema=False)
@router.get(
    VIEW + "/refs.json",
    response_class=StreamingResponse,
    summary="A pinned view as an fsspec reference file",
)
def reference_file(
    view_id: str, request: Request, archive: ArchiveDep, user: UserDep
) -> StreamingResponse:
    """The snapshot's reference file: every file at its pinned version."""
    view = _view(archive, user, view_id)
    return readers.snapshot_reference_file(view.zarr.id, view.checksum, request, archive, user)


@router.head(VIEW + "/read/{path:path}", include_in_schema=False, response_class=Response)
def head_read(
    view_id: str,
    path: str,
    archive: ArchiveDep,
    user: UserDep,
    version_id: Annotated[str | None, Query(alias="versionId")] = None,
) -> Response:
    """HEAD of `read/{path}`: as DANDI's HEAD of the file (:func:`_head`)."""
    return _head(archive, _view(archive, user, view_id), path, version_id)


@router.get(
    VIEW + "/read/{path:path}",
    status_code=302,
    response_class=Response,
    summary="Read a file of a pinned view: redirect to its pinned version",
)
def read_object(
    view_id: str,
    path: str,
    archive: ArchiveDep,
    user: UserDep,
    version_id: Annotated[str | None, Query(alias="versionId")] = None,
) -> Response:
    """302 to the pinned version of the file (404 for any other path or version)."""
    view = _view(archive, user, view_id)
    url = pinned_views.object_url(archive, view, path, version_id=version_id)
    return RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})


# -- the view's one snapshot (what a published version's reader asks of its Zarr) -------------
def _snapshot(archive: ArchiveDep, user: UserDep, view_id: str, checksum: str) -> PinnedView:
    view = _view(archive, user, view_id)
    if checksum != view.checksum:
        raise NotFound(
            f"Zarr {view.view_id} has no published snapshot {checksum[:80]!r}: it is the "
            f"snapshot {view.checksum}"
        )
    return view


@router.get(VIEW + "/snapshots/", response_model=list[snapshots.SnapshotOut], summary="Its state")
def list_snapshots(view_id: str, archive: ArchiveDep, user: UserDep) -> list[snapshots.SnapshotOut]:
    """The one state the view shows."""
    view = _view(archive, user, view_id)
    return [snapshots.get_snapshot(view.zarr.id, view.checksum, archive, user)]


@router.get(
    VIEW + "/snapshots/{checksum}/",
    response_model=snapshots.SnapshotOut,
    summary="The state of a pinned view",
)
def get_snapshot(
    view_id: str, checksum: str, archive: ArchiveDep, user: UserDep
) -> snapshots.SnapshotOut:
    view = _snapshot(archive, user, view_id, checksum)
    return snapshots.get_snapshot(view.zarr.id, checksum, archive, user)


@router.post(
    VIEW + "/snapshots/{checksum}/download/",
    response_model=list[snapshots.SnapshotUrlOut],
    response_model_exclude_none=True,  # (no `head_url` for public URLs)
    summary="URLs of the pinned versions of files",
    openapi_extra=PATHS.openapi,
)
def snapshot_download_urls(
    view_id: str,
    checksum: str,
    body: Annotated[list[DeleteFile], Depends(PATHS)],
    archive: ArchiveDep,
    user: UserDep,
) -> list[snapshots.SnapshotUrlOut]:
    view = _snapshot(archive, user, view_id, checksum)
    links = snapshot_service.snapshot_download_links(
        archive, view.zarr, view.pin, [f.path for f in body]
    )
    return [snapshots.snapshot_url_out(x) for x in links]


@router.get(
    VIEW + "/snapshots/{checksum}/files/",
    response_model=DirectoryOut,
    summary="A page of a directory of a pinned view",
)
def list_snapshot_directory(
    view_id: str,
    checksum: str,
    archive: ArchiveDep,
    user: UserDep,
    prefix: str = "",
    page_size: Annotated[int, Query(ge=1, le=zarr_service.MAX_PAGE_SIZE)] = 100,
    cursor: str | None = None,
) -> DirectoryOut:
    view = _snapshot(archive, user, view_id, checksum)
    return snapshots.list_snapshot_directory(
        view.zarr.id, checksum, archive, user, prefix, page_size, cursor
    )


# -- browsing ----------------------------------------------------------------------------------
def _browse(
    view: PinnedView, path: str, archive: ArchiveDep, page_size: int, cursor: str | None
) -> FileOut | DirectoryOut:
    result = snapshot_service.browse_snapshot(
        archive, view.zarr, view.pin, path, page_size=page_size, cursor=cursor
    )
    if isinstance(result, snapshot_service.SnapshotFile):
        return snapshots.SnapshotFileOut.of(result)
    return DirectoryOut.of(result)


@router.get(
    "/api/zarr/{view_id:pinned_view}.zarr/{path:path}",
    response_model=snapshots.SnapshotFileOut | DirectoryOut,
    summary="A file, or a page of a directory, of a pinned view (any path)",
)
def browse_tree(
    view_id: str,
    path: str,
    archive: ArchiveDep,
    user: UserDep,
    page_size: Annotated[int, Query(ge=1, le=zarr_service.MAX_PAGE_SIZE)] = 100,
    cursor: str | None = None,
) -> FileOut | DirectoryOut:
    return _browse(_view(archive, user, view_id), path, archive, page_size, cursor)


@router.get(
    VIEW + "/{path:path}",
    response_model=snapshots.SnapshotFileOut | DirectoryOut,
    summary="A file, or a page of a directory, of a pinned view",
)
def browse(
    view_id: str,
    path: str,
    archive: ArchiveDep,
    user: UserDep,
    page_size: Annotated[int, Query(ge=1, le=zarr_service.MAX_PAGE_SIZE)] = 100,
    cursor: str | None = None,
) -> FileOut | DirectoryOut:
    """As `GET /api/zarr/{id}/{path}`, of the pinned state (from its manifest)."""
    return _browse(_view(archive, user, view_id), path, archive, page_size, cursor)


# -- every write: refused ----------------------------------------------------------------------
@router.api_route(VIEW + "/", methods=WRITES, status_code=409, summary="Refused: read-only")
@router.api_route(
    VIEW + "/{path:path}", methods=WRITES, status_code=409, summary="Refused: read-only"
)
def refuse_write(view_id: str, archive: ArchiveDep, user: UserDep) -> Response:
    """Any change through a view (an upload batch, files, deletions, a restore): 409,
    naming the Zarr and the state; nothing changes."""
    raise pinned_views.refuse_write(_view(archive, user, view_id))
