"""Routes for readers without zarrchive's code: fsspec reference files of every state of a
Zarr, and a read route that redirects to each object (embargoed Zarrs with stock clients).

Mounted before the snapshot and Zarr routers, so ``refs.json`` and ``read/`` win over the
catch-all ``GET /api/zarr/{id}/{path}`` (a Zarr's own ``refs.json`` or ``read`` directory
is browsed at ``GET /api/zarr/{id}.zarr/{path}``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse, StreamingResponse

from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.http_common.public_url import public_base
from zarrchive.services.zarr_engine import references, snapshots, zarrs

router = APIRouter(tags=["readers"])

_JSON = "application/json"
_REFS_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {_JSON: {}}, "description": "An fsspec reference file"}
}


def _api_base(request: Request) -> str:
    return public_base(request)


def _send(
    request: Request, body: references.ReferenceBody, cache_control: str
) -> StreamingResponse:
    """The body (none for ``HEAD``: fsspec asks a reference file's size first)."""
    chunks = body.chunks
    if request.method == "HEAD":
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
        chunks = iter(())
    return StreamingResponse(
        chunks,
        media_type=_JSON,
        headers={"Content-Length": str(body.size), "Cache-Control": cache_control},
    )


@router.head("/api/zarr/{zarr_id}/refs.json", include_in_schema=False)
@router.get(
    "/api/zarr/{zarr_id}/refs.json",
    response_class=StreamingResponse,
    responses=_REFS_DOC,
    summary="The live state as an fsspec reference file",
)
def live_reference_file(
    zarr_id: str, request: Request, archive: ArchiveDep, user: UserDep
) -> StreamingResponse:
    """The kerchunk/fsspec `version: 1` reference file of the Zarr as it is now: metadata
    documents inline, every other file by its object's URL (an embargoed Zarr's by
    `read/{path}` of this API, for its owners).  Open it with
    `fsspec.filesystem("reference", fo=URL)`; a Zarr that changes later may no longer
    match it (use a snapshot's reference file for a state that never changes)."""
    zarr = zarrs.zarr_ref(archive, user, zarr_id)
    body = references.live_references(archive, zarr, _api_base(request))
    return _send(request, body, "private, no-store" if zarr.embargoed else "no-cache")


@router.head("/api/zarr/{zarr_id}/snapshots/{checksum}/refs.json", include_in_schema=False)
@router.get(
    "/api/zarr/{zarr_id}/snapshots/{checksum}/refs.json",
    response_class=StreamingResponse,
    responses=_REFS_DOC,
    summary="A published snapshot as an fsspec reference file",
)
def snapshot_reference_file(
    zarr_id: str, checksum: str, request: Request, archive: ArchiveDep, user: UserDep
) -> StreamingResponse:
    """The reference file of exactly the state the snapshot pins: every file at its
    pinned `versionId`.  It never changes (generated once, then kept)."""
    zarr, pin = snapshots.find_snapshot(archive, user, zarr_id, checksum)
    body = references.snapshot_references(archive, zarr, pin, _api_base(request))
    return _send(request, body, "private, no-store" if zarr.embargoed else "public, max-age=86400")


@router.head(
    "/api/zarr/{zarr_id}/read/{path:path}", include_in_schema=False, response_class=Response
)
@router.get(
    "/api/zarr/{zarr_id}/read/{path:path}",
    status_code=302,
    response_class=Response,
    responses={302: {"description": "The object's URL (presigned, short-lived, if embargoed)"}},
    summary="Read a file: redirect to its object",
)
def read_object(
    zarr_id: str,
    path: str,
    request: Request,
    archive: ArchiveDep,
    user: UserDep,
    version_id: Annotated[
        str | None, Query(alias="versionId", description="An S3 version of the file")
    ] = None,
) -> Response:
    """302 to the file's object: its public URL, or for an embargoed Zarr (owners only) a
    presigned URL that expires soon.  Lay a Zarr reader's base URL on
    `/api/zarr/{id}/read/` with `Authorization: token KEY` to read an embargoed Zarr with
    stock fsspec/zarr-python: a path that is no file of the Zarr answers 404."""
    zarr = zarrs.zarr_ref(archive, user, zarr_id)
    method = "HEAD" if request.method == "HEAD" else "GET"
    url = references.read_url(archive, zarr, path, method=method, version_id=version_id)
    return RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})
