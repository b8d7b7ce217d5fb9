"""Assets of a version (blobs and Zarrs alike) and downloads, in DANDI's shapes."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import RedirectResponse
from sqlalchemy.orm import Session

from zarrchive.api.bodies import JsonBody
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.schemas import (
    AssetIn,
    AssetOut,
    AssetPathOut,
    LindiFileState,
    SharedZarrOut,
)
from zarrchive.db.models import LindiState, pinned_view_id
from zarrchive.errors import InvalidInput
from zarrchive.http_common.pagination import Page, PageRequest, make_page, page_request
from zarrchive.http_common.public_url import public_base
from zarrchive.services.dandi import assets, lindi_files
from zarrchive.services.zarr_engine import pinned_views

router = APIRouter(tags=["assets"])
ASSET = JsonBody(AssetIn, login=True)

ASSETS = "/api/dandisets/{dandiset_id}/versions/{version}/assets/"
DRAFT = "draft"


def api_base(request: Request) -> str:
    """The archive's external address (the LINDI routes are named from it)."""
    return public_base(request)


def lindi_fields(
    info: assets.AssetInfo, status: lindi_files.LindiStatus | None, base: str
) -> dict[str, Any]:
    """``lindi_url``, ``lindi_state``, ``lindi_error`` of an asset (none for non-HDF5 blobs
    and Zarrs; a blob not looked at yet is ``pending``)."""
    if info.blob_id is None or (status is not None and not status.has_file):
        return {}
    state = LindiState.PENDING if status is None else status.state
    return {
        "lindi_url": lindi_files.asset_lindi_route(base, info.asset_id),
        "lindi_state": LindiFileState(state.value),
        "lindi_error": status.reason if status is not None else None,
    }


def lindi_statuses(
    session: Session, infos: list[assets.AssetInfo]
) -> dict[str, lindi_files.LindiStatus]:
    return lindi_files.statuses(session, (i.blob_id for i in infos))


def published_views(session: Session, infos: list[assets.AssetInfo]) -> dict[str, str]:
    """Asset id -> the pinned view a published Zarr asset names (``snapshot`` mode: its
    Zarr stays writable, so its own id would read the draft's live state)."""
    wanted = [
        i.asset_id
        for i in infos
        if i.zarr_id is not None and i.shared is None and i.version != DRAFT
    ]
    return pinned_views.published_views(session, wanted) if wanted else {}


def snapshot_route(zarr_id: str, checksum: str) -> str:
    return f"/api/zarr/{zarr_id}/snapshots/{urllib.parse.quote(checksum, safe='')}/"


def shared_out(info: assets.AssetInfo) -> SharedZarrOut | None:
    shared = info.shared
    if shared is None:
        return None
    return SharedZarrOut(
        dandiset=shared.dandiset,
        zarr_id=shared.zarr_id,
        mode=shared.mode.value,
        checksum=shared.checksum,
        snapshot_url=(
            snapshot_route(shared.zarr_id, shared.snapshot) if shared.snapshot is not None else None
        ),
    )


def _zarr_reference(archive: ArchiveDep, body: AssetIn) -> tuple[str | None, str | None]:
    """``zarr_id`` and ``zarr_checksum`` of the body; a pinned view's id (what this API names
    a shared snapshot by, and dandi-cli sends back) stands for its Zarr at its state."""
    zarr_id, checksum = body.zarr_id, body.zarr_checksum
    found = pinned_views.view_of(archive, zarr_id) if zarr_id is not None else None
    if found is not None:
        if checksum is not None and checksum != found[1]:
            raise InvalidInput(
                f"Zarr {zarr_id} is the state {found[1]} of Zarr {found[0]}: give its own id "
                "with zarr_checksum for another state"
            )
        zarr_id, checksum = found
    return zarr_id, checksum


def asset_out(
    info: assets.AssetInfo,
    *,
    metadata: bool = True,
    lindi: dict[str, lindi_files.LindiStatus] | None = None,
    base: str | None = None,
    views: Mapping[str, str] | None = None,
) -> AssetOut:
    """The asset in DANDI's shape; *views*: :func:`published_views` of the assets shown."""
    extra = (
        lindi_fields(info, (lindi or {}).get(info.blob_id or ""), base) if base is not None else {}
    )
    # a snapshot of another dandiset's Zarr, or a published version's snapshot of its own,
    # is named by its read-only view: what reads the Zarr by id (dandi-cli, `zarrchive
    # download`) reads that state, never the live Zarr
    shared = info.shared
    zarr_id = (
        pinned_view_id(shared.zarr_id, shared.checksum)
        if shared is not None and shared.snapshot is not None
        else (views or {}).get(info.asset_id, info.zarr_id)
    )
    return AssetOut(
        asset_id=info.asset_id,
        blob=info.blob_id,
        zarr=zarr_id,
        path=info.path,
        size=info.size,
        created=info.created,
        modified=info.modified,
        metadata=info.metadata if metadata else None,
        dandiset=info.dandiset,
        version=info.version,
        blob_id=info.blob_id,
        zarr_id=zarr_id,
        shared_zarr=shared_out(info),
        **extra,
    )


@router.post(
    ASSETS,
    response_model=AssetOut,
    summary="Add an asset (a blob or a Zarr)",
    openapi_extra=ASSET.openapi,
)
def create_asset(
    dandiset_id: str,
    version: str,
    body: Annotated[AssetIn, Depends(ASSET)],
    archive: ArchiveDep,
    user: UserDep,
    request: Request,
) -> AssetOut:
    """Give `metadata` with its `path` and either `blob_id` or `zarr_id`.  Paths are unique
    per version.  Owners only, in the draft only.

    A Zarr of **another dandiset** that you may read is shared, never copied: the asset
    reads one published state of it for ever (`zarr_checksum`, default the newest): a
    frozen Zarr (`freeze` mode) live, else the published snapshot of that checksum,
    whatever the other dandiset's draft does.  404 for a Zarr you can't read; 409 for a
    Zarr with no published state or a checksum no published version pins; an embargoed
    Zarr: 403 unless you own its dandiset, 409 unless this dandiset is embargoed too."""
    zarr_id, zarr_checksum = _zarr_reference(archive, body)
    with archive.db.write_session() as session:
        info = assets.create_asset(
            session,
            user,
            dandiset_id,
            version,
            body.metadata,
            blob_id=body.blob_id,
            zarr_id=zarr_id,
            zarr_checksum=zarr_checksum,
        )
        lindi = lindi_statuses(session, [info])
    return asset_out(info, lindi=lindi, base=api_base(request))


@router.get(ASSETS, response_model=Page[AssetOut], summary="A page of a version's assets")
def list_assets(
    dandiset_id: str,
    version: str,
    request: Request,
    archive: ArchiveDep,
    user: UserDep,
    asked: Annotated[PageRequest, Depends(page_request)],
    path: Annotated[str | None, Query(description="Paths starting with it")] = None,
    glob: Annotated[str | None, Query(description="Paths matching it (`*` spans `/`)")] = None,
    order: Annotated[str | None, Query(description="path, created, modified; '-'")] = None,
    metadata: Annotated[bool, Query(description="Include each asset's metadata")] = False,
) -> Page[AssetOut]:
    """DANDI's filters: `path` (a prefix), `glob`, `order` (`path` by default)."""
    with archive.db.session() as session:
        page = assets.list_assets(
            session,
            user,
            dandiset_id,
            version,
            path=path,
            glob=glob,
            order=order,
            offset=asked.offset,
            limit=asked.page_size,
        )
        lindi = lindi_statuses(session, page.results)
        views = published_views(session, page.results)
    base = api_base(request)
    results = [
        asset_out(a, metadata=metadata, lindi=lindi, base=base, views=views) for a in page.results
    ]
    return make_page(request, asked, page.count, results)


@router.get(
    ASSETS + "paths/",
    response_model=Page[AssetPathOut],
    summary="The files and folders of a folder of the version",
)
def list_paths(
    dandiset_id: str,
    version: str,
    request: Request,
    archive: ArchiveDep,
    user: UserDep,
    asked: Annotated[PageRequest, Depends(page_request)],
    path_prefix: Annotated[str, Query(description="The folder ('' for the root)")] = "",
) -> Page[AssetPathOut]:
    """DANDI's `assets/paths/`: each entry a file (with `asset.asset_id`) or a folder, with
    the number of files and bytes under it."""
    with archive.db.session() as session:
        entries = assets.list_paths(session, user, dandiset_id, version, path_prefix)
    page = entries[asked.offset : asked.offset + asked.page_size]
    results = [
        AssetPathOut(
            path=e.path,
            aggregate_files=e.aggregate_files,
            aggregate_size=e.aggregate_size,
            asset={"asset_id": e.asset_id} if e.asset_id else None,
        )
        for e in page
    ]
    return make_page(request, asked, len(entries), results)


@router.get(ASSETS + "{asset_id}/", response_model=dict[str, Any], summary="An asset's metadata")
def get_asset(
    dandiset_id: str, version: str, asset_id: str, archive: ArchiveDep, user: UserDep
) -> dict[str, Any]:
    """The metadata (DANDI's): as given, with `path`, `identifier`, and for the draft
    `digest` and `contentSize` from the content (`dandi:dandi-etag` of a blob, the
    `dandi:dandi-zarr-checksum` of a Zarr)."""
    with archive.db.session() as session:
        return assets.get_asset(session, user, dandiset_id, version, asset_id).metadata


@router.get(ASSETS + "{asset_id}/info/", response_model=AssetOut, summary="An asset")
def get_asset_info(
    dandiset_id: str,
    version: str,
    asset_id: str,
    archive: ArchiveDep,
    user: UserDep,
    request: Request,
) -> AssetOut:
    with archive.db.session() as session:
        info = assets.get_asset(session, user, dandiset_id, version, asset_id)
        lindi = lindi_statuses(session, [info])
        views = published_views(session, [info])
    return asset_out(info, lindi=lindi, base=api_base(request), views=views)


@router.put(
    ASSETS + "{asset_id}/",
    response_model=AssetOut,
    summary="Change an asset",
    openapi_extra=ASSET.openapi,
)
def update_asset(
    dandiset_id: str,
    version: str,
    asset_id: str,
    body: Annotated[AssetIn, Depends(ASSET)],
    archive: ArchiveDep,
    user: UserDep,
    request: Request,
) -> AssetOut:
    """Replaces the metadata (and path); with `blob_id` or `zarr_id`, the content too.
    Draft only: published assets never change (403)."""
    zarr_id, zarr_checksum = _zarr_reference(archive, body)
    with archive.db.write_session() as session:
        info = assets.update_asset(
            session,
            user,
            dandiset_id,
            version,
            asset_id,
            body.metadata,
            blob_id=body.blob_id,
            zarr_id=zarr_id,
            zarr_checksum=zarr_checksum,
        )
        lindi = lindi_statuses(session, [info])
    return asset_out(info, lindi=lindi, base=api_base(request))


@router.delete(ASSETS + "{asset_id}/", status_code=204, summary="Remove an asset from the draft")
def delete_asset(
    dandiset_id: str, version: str, asset_id: str, archive: ArchiveDep, user: UserDep
) -> Response:
    """Owners only; the draft only.  The content stays: a blob is kept (published versions
    may use it).  **A Zarr asset's Zarr is kept**: published versions may pin its
    states, and another asset may take it (`POST .../assets/` with its `zarr_id`); once no
    asset and no version has referenced it for the grace period (7 days by default),
    `zarrchive admin gc --apply` removes it with its objects."""
    with archive.db.write_session() as session:
        assets.delete_asset(session, user, dandiset_id, version, asset_id)
    return Response(status_code=204)


@router.get(
    "/api/assets/{asset_id}/", response_model=dict[str, Any], summary="An asset's metadata, by id"
)
def get_asset_by_id(asset_id: str, archive: ArchiveDep, user: UserDep) -> dict[str, Any]:
    with archive.db.session() as session:
        asset = assets.get_asset_by_id(session, user, asset_id)
        return assets.served_metadata(asset)


@router.get("/api/assets/{asset_id}/info/", response_model=AssetOut, summary="An asset, by id")
def get_asset_info_by_id(
    asset_id: str, archive: ArchiveDep, user: UserDep, request: Request
) -> AssetOut:
    """The asset with its metadata, `dandiset` and `version` (how `dandi download` of an
    `/api/assets/{asset_id}/download/` URL finds it), and its LINDI file's URL and state."""
    with archive.db.session() as session:
        info = assets.asset_info_by_id(session, user, asset_id)
        lindi = lindi_statuses(session, [info])
        views = published_views(session, [info])
    return asset_out(info, lindi=lindi, base=api_base(request), views=views)


def _download(archive: ArchiveDep, user: UserDep, asset_id: str) -> RedirectResponse:
    target = assets.download_target(archive, user, asset_id)
    if target.url is not None:
        return RedirectResponse(target.url, status_code=302)
    where = f"/api/zarr/{target.zarr_id}/"
    if target.snapshot is not None and target.zarr_id is not None:
        where = snapshot_route(target.zarr_id, target.snapshot)
    raise InvalidInput(
        "Unable to provide download link for zarr assets: browse the Zarr's files at "
        f"{where} (or download it with `zarrchive download` or `dandi download`)"
    )


@router.get(
    "/api/assets/{asset_id}/download/",
    status_code=302,
    responses={302: {"description": "Redirect to the blob's URL"}},
    summary="Download an asset",
)
def download_asset(asset_id: str, archive: ArchiveDep, user: UserDep) -> RedirectResponse:
    """A blob: 302 to its URL (plain for public dandisets, presigned for embargoed ones).
    A Zarr: 400, as DANDI answers, naming where its files are listed (of a published
    version in snapshot mode: the snapshot it pins)."""
    return _download(archive, user, asset_id)


@router.get(
    ASSETS + "{asset_id}/download/",
    status_code=302,
    responses={302: {"description": "Redirect to the blob's URL"}},
    summary="Download an asset of a version",
)
def download_version_asset(
    dandiset_id: str, version: str, asset_id: str, archive: ArchiveDep, user: UserDep
) -> RedirectResponse:
    """As `GET /api/assets/{asset_id}/download/`, for an asset of this version."""
    with archive.db.session() as session:
        assets.get_asset(session, user, dandiset_id, version, asset_id)
    return _download(archive, user, asset_id)


# -- LINDI files -------------------------------------------------------------------------------
@router.get(
    "/api/assets/{asset_id}/lindi.json",
    responses={
        200: {"description": "The LINDI file of an embargoed asset (owners)"},
        302: {"description": "Redirect to the public LINDI file in the bucket"},
    },
    summary="An HDF5/NWB asset's LINDI file",
)
def asset_lindi(asset_id: str, archive: ArchiveDep, user: UserDep, request: Request) -> Response:
    """The LINDI JSON of an HDF5 (NWB) asset, for `lindi.LindiH5pyFile.from_lindi_file`:
    public assets: a 302 to the file in the public bucket (its chunks reference the blob's
    plain URL); embargoed ones: the file itself, to owners (with `Authorization: token
    ...`), its chunks referencing `/api/lindi/blobs/{blob_id}/data/`.  503 while it is being
    written; 404 for non-HDF5 assets, failed conversions and those who may not read it."""
    document = lindi_files.asset_lindi(archive, user, asset_id, api_base(request))
    if document.redirect is not None:
        return RedirectResponse(document.redirect, status_code=302)
    assert document.content is not None
    return Response(
        document.content,
        media_type=lindi_files.CONTENT_TYPE,
        headers={"Cache-Control": "private, no-store"},
    )


@router.get(
    "/api/lindi/blobs/{blob_id}/data/",
    status_code=302,
    responses={302: {"description": "Redirect to the blob's bytes (presigned if embargoed)"}},
    summary="The bytes a LINDI file's chunk references name",
)
@router.head(
    "/api/lindi/blobs/{blob_id}/data/",
    status_code=302,
    response_class=RedirectResponse,
    operation_id="lindi_blob_data_head",  # the GET's twin, with an id of its own
    summary="The same, for HEAD",
)
def lindi_blob_data(blob_id: str, archive: ArchiveDep, user: UserDep) -> RedirectResponse:
    """Where an embargoed blob's LINDI chunk references resolve: a 302 to a presigned URL
    (send `Range` there) for those who may read the blob, 404 for others.  The token goes
    to this route only (in the `Authorization` header), never to S3."""
    return RedirectResponse(lindi_files.blob_data_url(archive, user, blob_id), status_code=302)
