"""The dandisets, one dandiset and its versions, and a version's files."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from zarrchive.errors import InvalidInput
from zarrchive.services import assets, catalog, owners
from zarrchive.services.auth import require_user
from zarrchive.web.forms import TOKEN_FIELD, parse_form, require_form_from_here
from zarrchive.web.render import ArchiveOf, HtmlRoute, WebUser, page

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)


def parse_page(value: str | None) -> int:
    """``?page=``: a positive whole number (absent: 1)."""
    if value is None or value == "":
        return 1
    if not value.isascii() or not value.isdigit() or len(value) > 9 or int(value) < 1:
        raise InvalidInput(f"page must be a positive whole number, not {value[:40]!r}")
    return int(value)


@router.get("/", response_class=HTMLResponse)
def dandiset_list(
    request: Request,
    archive: ArchiveOf,
    user: WebUser,
    search: str = "",
    page_param: Annotated[str | None, Query(alias="page")] = None,
) -> HTMLResponse:
    number = parse_page(page_param)
    found = catalog.dandiset_page(archive, user, search=search, page=number)
    return page(request, "dandisets.html", found=found, search=search)


def _show(
    request: Request, archive: ArchiveOf, user: WebUser, dandiset_id: str, version: str | None
) -> HTMLResponse:
    view = catalog.dandiset_view(archive, user, dandiset_id, version)
    return page(request, "dandiset.html", dandiset=view, versions=list(reversed(view.versions)))


@router.get("/dandiset/{dandiset_id}", response_class=HTMLResponse)
def dandiset(request: Request, archive: ArchiveOf, user: WebUser, dandiset_id: str) -> HTMLResponse:
    """Its latest published version, else its draft."""
    return _show(request, archive, user, dandiset_id, None)


@router.get("/dandiset/{dandiset_id}/{version}", response_class=HTMLResponse)
def dandiset_version(
    request: Request, archive: ArchiveOf, user: WebUser, dandiset_id: str, version: str
) -> HTMLResponse:
    return _show(request, archive, user, dandiset_id, version)


@router.post("/dandiset/{dandiset_id}/owners", response_model=None)
async def set_owners(
    request: Request, archive: ArchiveOf, user: WebUser, dandiset_id: str
) -> RedirectResponse:
    """The owners form of a dandiset's page: one user name per line (or comma-separated)."""
    fields = parse_form(await request.body())
    require_form_from_here(request, fields.get(TOKEN_FIELD), request.state.form_token)
    names = [n.strip() for n in fields.get("owners", "").replace(",", "\n").splitlines()]
    await run_in_threadpool(_set_owners, archive, user, dandiset_id, [n for n in names if n])
    return RedirectResponse(f"/dandiset/{dandiset_id}", status_code=303)


def _set_owners(archive: ArchiveOf, user: WebUser, dandiset_id: str, names: list[str]) -> None:
    with archive.db.write_session() as session:
        owners.set_owners(session, require_user(user), dandiset_id, names)


@router.get("/dandiset/{dandiset_id}/{version}/files", response_class=HTMLResponse)
def files(
    request: Request,
    archive: ArchiveOf,
    user: WebUser,
    dandiset_id: str,
    version: str,
    location: str = "",
) -> HTMLResponse:
    tree = catalog.asset_tree(archive, user, dandiset_id, version, location)
    crumbs = []
    if tree.location:
        parts = tree.location.split("/")
        crumbs = [(part, "/".join(parts[: i + 1])) for i, part in enumerate(parts)]
    return page(request, "files.html", tree=tree, crumbs=crumbs)


@router.get("/download/asset/{asset_id}")
def download_asset(
    request: Request, archive: ArchiveOf, user: WebUser, asset_id: str
) -> RedirectResponse:
    """A blob: to its URL (presigned when embargoed); a Zarr: to its page."""
    target = assets.download_target(archive, user, asset_id)
    if target.url is not None:
        return RedirectResponse(target.url, status_code=302)
    return RedirectResponse(f"/zarr/{target.zarr_id}/", status_code=302)
