"""Assets of a version (blobs and Zarrs alike) and download URLs."""

from __future__ import annotations

import urllib.parse
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import RedirectResponse

from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.routers.zarrs import zarr_out
from zarrchive.api.schemas import AssetIn, AssetOut, AssetPageOut, ZarrOut
from zarrchive.services import assets, blobs, snapshots

router = APIRouter(tags=["assets"])

ASSETS = "/api/dandisets/{dandiset_id}/versions/{version}/assets/"


def asset_out(info: assets.AssetInfo) -> AssetOut:
    return AssetOut(**info.__dict__)


@router.post(ASSETS, response_model=AssetOut, summary="Add an asset (a blob or a Zarr)")
def create_asset(
    dandiset_id: str, version: str, body: AssetIn, archive: ArchiveDep, user: UserDep
) -> AssetOut:
    """Give `metadata` with its `path` and either `blob_id` or `zarr_id` (a Zarr of the same
    dandiset).  Paths are unique per version.  Owners only, in the draft only."""
    with archive.db.write_session() as session:
        info = assets.create_asset(
            session,
            user,
            dandiset_id,
            version,
            body.metadata,
            blob_id=body.blob_id,
            zarr_id=body.zarr_id,
        )
        return asset_out(info)


@router.get(ASSETS, response_model=AssetPageOut, summary="A page of a version's assets")
def list_assets(
    dandiset_id: str,
    version: str,
    archive: ArchiveDep,
    user: UserDep,
    path: str | None = None,
    page_size: Annotated[int, Query(ge=1, le=assets.MAX_PAGE_SIZE)] = 100,
    cursor: str | None = None,
) -> AssetPageOut:
    """Ordered by path; `path` keeps the assets whose path starts with it."""
    with archive.db.session() as session:
        page = assets.list_assets(
            session, user, dandiset_id, version, path=path, page_size=page_size, cursor=cursor
        )
        return AssetPageOut(
            count=page.count, next=page.next, results=[asset_out(a) for a in page.results]
        )


@router.get(ASSETS + "{asset_id}/", response_model=AssetOut, summary="An asset")
def get_asset(
    dandiset_id: str, version: str, asset_id: str, archive: ArchiveDep, user: UserDep
) -> AssetOut:
    with archive.db.session() as session:
        return asset_out(assets.get_asset(session, user, dandiset_id, version, asset_id))


@router.put(ASSETS + "{asset_id}/", response_model=AssetOut, summary="Change an asset")
def update_asset(
    dandiset_id: str,
    version: str,
    asset_id: str,
    body: AssetIn,
    archive: ArchiveDep,
    user: UserDep,
) -> AssetOut:
    """Replaces the metadata (and path); with `blob_id` or `zarr_id`, the content too.
    Draft only: published assets never change (403)."""
    with archive.db.write_session() as session:
        info = assets.update_asset(
            session,
            user,
            dandiset_id,
            version,
            asset_id,
            body.metadata,
            blob_id=body.blob_id,
            zarr_id=body.zarr_id,
        )
        return asset_out(info)


@router.delete(ASSETS + "{asset_id}/", status_code=204, summary="Remove an asset from the draft")
def delete_asset(
    dandiset_id: str, version: str, asset_id: str, archive: ArchiveDep, user: UserDep
) -> Response:
    with archive.db.write_session() as session:
        assets.delete_asset(session, user, dandiset_id, version, asset_id)
    return Response(status_code=204)


@router.get(
    "/api/assets/{asset_id}/download/",
    response_model=ZarrOut,
    responses={302: {"description": "Redirect to the blob's URL"}},
    summary="Download an asset",
)
def download_asset(asset_id: str, archive: ArchiveDep, user: UserDep) -> RedirectResponse | ZarrOut:
    """A blob: 302 to its URL (plain for public dandisets, presigned for embargoed ones).
    A Zarr of the draft: its info (as `GET /api/zarr/{zarr_id}/`); of a published version in
    snapshot mode: 302 to the snapshot it pins (`GET /api/zarr/{zarr_id}/snapshots/{checksum}/`)."""
    with archive.db.session() as session:
        asset = assets.get_asset_by_id(session, user, asset_id)
        blob, zarr_id = asset.blob, asset.zarr_id
        if blob is not None:
            return RedirectResponse(blobs.blob_url(archive, blob), status_code=302)
        pinned = snapshots.published_asset_checksum(session, asset.id)
    if pinned is not None:
        url = f"/api/zarr/{pinned[0]}/snapshots/{urllib.parse.quote(pinned[1], safe='')}/"
        return RedirectResponse(url, status_code=302)
    assert zarr_id is not None
    return zarr_out(archive, zarr_id, user)
