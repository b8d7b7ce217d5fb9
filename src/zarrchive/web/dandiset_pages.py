"""The dandisets, one dandiset and its versions, and a version's files."""

from __future__ import annotations

import urllib.parse
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from zarrchive.services import assets, blobs, dandisets, embargo, versions
from zarrchive.services.auth import is_owner
from zarrchive.web import queries
from zarrchive.web.render import ArchiveOf, HtmlRoute, WebUser, page

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def dandiset_list(
    request: Request,
    archive: ArchiveOf,
    user: WebUser,
    search: str = "",
    page_param: Annotated[str | None, Query(alias="page")] = None,
) -> HTMLResponse:
    number = queries.parse_page(page_param)
    with archive.db.session() as session:
        found = queries.dandiset_page(session, user, search=search, page=number)
    return page(request, "dandisets.html", found=found, search=search)


def _show(
    request: Request, archive: ArchiveOf, user: WebUser, dandiset_id: str, version: str | None
) -> HTMLResponse:
    with archive.db.session() as session:
        dandiset = dandisets.get_dandiset(session, user, dandiset_id)
        every = versions.list_versions(session, user, dandiset_id)
        if version is None:
            published = [v for v in every if v.version != versions.DRAFT]
            version = (published or every)[-1].version
        shown = next((v for v in every if v.version == version), None)
        if shown is None:
            # the same message as the API's
            versions.find_version(session, dandiset, version)
        context: dict[str, Any] = {
            "dandiset": dandiset,
            "owners": sorted(o.username for o in dandiset.owners),
            "embargo_status": embargo.embargo_status(dandiset),
            "is_owner": is_owner(user, dandiset),
            "versions": list(reversed(every)),
            "shown": shown,
        }
    return page(request, "dandiset.html", **context)


@router.get("/dandiset/{dandiset_id}", response_class=HTMLResponse)
def dandiset(request: Request, archive: ArchiveOf, user: WebUser, dandiset_id: str) -> HTMLResponse:
    """Its latest published version, else its draft."""
    return _show(request, archive, user, dandiset_id, None)


@router.get("/dandiset/{dandiset_id}/{version}", response_class=HTMLResponse)
def dandiset_version(
    request: Request, archive: ArchiveOf, user: WebUser, dandiset_id: str, version: str
) -> HTMLResponse:
    return _show(request, archive, user, dandiset_id, version)


@router.get("/dandiset/{dandiset_id}/{version}/files", response_class=HTMLResponse)
def files(
    request: Request,
    archive: ArchiveOf,
    user: WebUser,
    dandiset_id: str,
    version: str,
    location: str = "",
) -> HTMLResponse:
    folder = queries.normalize_location(location)
    with archive.db.session() as session:
        dandiset = dandisets.get_dandiset(session, user, dandiset_id)
        found = versions.find_version(session, dandiset, version)
        tree = queries.asset_tree(session, found, folder)
    crumbs = []
    if folder:
        parts = folder.split("/")
        crumbs = [(part, "/".join(parts[: i + 1])) for i, part in enumerate(parts)]
    return page(
        request,
        "files.html",
        dandiset=dandiset,
        version=version,
        tree=tree,
        crumbs=crumbs,
        quote=urllib.parse.quote,
    )


@router.get("/download/asset/{asset_id}")
def download_asset(
    request: Request, archive: ArchiveOf, user: WebUser, asset_id: str
) -> RedirectResponse:
    """A blob: to its URL (presigned when embargoed); a Zarr: to its page."""
    with archive.db.session() as session:
        asset = assets.get_asset_by_id(session, user, asset_id)
        if asset.blob is not None:
            return RedirectResponse(blobs.blob_url(archive, asset.blob), status_code=302)
        return RedirectResponse(f"/zarr/{asset.zarr_id}/", status_code=302)
