"""The dandisets, one dandiset and its versions, and a version's files."""

from __future__ import annotations

import urllib.parse
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from zarrchive.errors import InvalidInput
from zarrchive.http_common.pagination import PageRequest, make_page, page_request
from zarrchive.http_common.public_url import public_base
from zarrchive.services.dandi import assets, dois, embargo, owners, reviewers, trash, versions
from zarrchive.services.dandi.audit_trail import audit_page
from zarrchive.services.dandi.dandiset_roles import MemberSetter
from zarrchive.services.identity.auth import require_user
from zarrchive.services.views import catalog
from zarrchive.services.views.dandiset_summary import summarize
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
    summary = summarize(
        view.shown.metadata,
        identifier=view.identifier,
        version=view.shown.version,
        web_url=public_base(request),
        now=datetime.now(UTC),
    )
    return page(
        request,
        "dandiset.html",
        dandiset=view,
        summary=summary,
        versions=list(reversed(view.versions)),
        dois=_dois(archive, view),
        doi_admin=user is not None and user.is_admin,
        trashed=_trash(archive, user, view),
        trash_days=archive.settings.trash_days,
        embargo_end=embargo.shown_end_date(archive, user, view.identifier),
    )


def _trash(archive: ArchiveOf, user: WebUser, view: catalog.DandisetView) -> list[trash.TrashItem]:
    """The deleted assets of the draft, to its owners and admins (none to anyone else)."""
    if not view.can_manage:
        return []
    with archive.db.session() as session:
        return trash.list_trash(session, user, view.identifier, archive.settings.trash_days)


def _dois(archive: ArchiveOf, view: catalog.DandisetView) -> list[dois.DoiStatus]:
    """The DOIs of the dandiset and of the version shown (none without ``ZARRCHIVE_DOI_*``)."""
    if archive.settings.doi is None:
        return []
    with archive.db.session() as session:
        found = dois.dandiset_dois(session, view.identifier)
    return [d for d in found if d.version in (None, view.shown.version)]


# The pages' JSON links: the API's answers, for the signed-in visitor.  The API itself never
# reads the pages' cookie (so no other site's page can act as the visitor through it); these
# read-only copies do, so that an owner's links work on an embargoed dandiset's page too.
# SameSite=Strict keeps the cookie off other sites' requests, and no CORS header is sent.


@router.get("/dandiset/{dandiset_id}/audit.json", response_class=JSONResponse)
def audit_json(
    request: Request,
    archive: ArchiveOf,
    user: WebUser,
    dandiset_id: str,
    asked: Annotated[PageRequest, Depends(page_request)],
    record_type: Annotated[str | None, Query(max_length=32)] = None,
) -> JSONResponse:
    """``/api/dandisets/{id}/audit/`` (owners and admins)."""
    count, rows = audit_page(
        archive,
        user,
        dandiset_id,
        offset=asked.offset,
        limit=asked.page_size,
        record_type=record_type,
    )
    return JSONResponse(make_page(request, asked, count, rows).model_dump(mode="json"))


@router.get("/dandiset/{dandiset_id}/{version}/metadata.json", response_class=JSONResponse)
def version_json(archive: ArchiveOf, user: WebUser, dandiset_id: str, version: str) -> JSONResponse:
    """``/api/dandisets/{id}/versions/{version}/``: the version's metadata."""
    with archive.db.session() as session:
        return JSONResponse(versions.get_version_info(session, user, dandiset_id, version).metadata)


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
    return await _members_form(request, archive, user, dandiset_id, "owners", owners.set_owners)


@router.post("/dandiset/{dandiset_id}/reviewers", response_model=None)
async def set_reviewers(
    request: Request, archive: ArchiveOf, user: WebUser, dandiset_id: str
) -> RedirectResponse:
    """The reviewers form of a dandiset's page: one user name per line (or comma-separated;
    none removes every reviewer)."""
    return await _members_form(
        request, archive, user, dandiset_id, "reviewers", reviewers.set_reviewers
    )


async def _members_form(
    request: Request,
    archive: ArchiveOf,
    user: WebUser,
    dandiset_id: str,
    field: str,
    setter: MemberSetter,
) -> RedirectResponse:
    """A role's form (owners, reviewers): the names of its field, checked as every form."""
    fields = parse_form(await request.body())
    require_form_from_here(request, fields.get(TOKEN_FIELD), request.state.form_token)
    names = [n.strip() for n in fields.get(field, "").replace(",", "\n").splitlines()]

    def save() -> None:
        with archive.db.write_session() as session:
            setter(session, require_user(user), dandiset_id, [n for n in names if n])

    await run_in_threadpool(save)
    return RedirectResponse(f"/dandiset/{dandiset_id}", status_code=303)


@router.post("/dandiset/{dandiset_id}/trash/{asset_id}/restore", response_model=None)
async def restore_asset(
    request: Request, archive: ArchiveOf, user: WebUser, dandiset_id: str, asset_id: str
) -> RedirectResponse:
    """The trash's restore button of a dandiset's page (owners)."""
    fields = parse_form(await request.body())
    require_form_from_here(request, fields.get(TOKEN_FIELD), request.state.form_token)
    await run_in_threadpool(_restore_asset, archive, user, dandiset_id, asset_id)
    return RedirectResponse(f"/dandiset/{dandiset_id}/draft", status_code=303)


def _restore_asset(archive: ArchiveOf, user: WebUser, dandiset_id: str, asset_id: str) -> None:
    with archive.db.write_session() as session:
        trash.restore_asset(session, require_user(user), dandiset_id, asset_id)


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
    """A blob: to its URL (presigned when embargoed); a Zarr: to its page; a Zarr read as a
    published snapshot (another dandiset's shared Zarr): to the snapshot's files."""
    target = assets.download_target(archive, user, asset_id)
    if target.url is not None:
        return RedirectResponse(target.url, status_code=302)
    if target.snapshot is not None and target.zarr_id is not None:
        quoted = urllib.parse.quote(target.snapshot, safe="")
        return RedirectResponse(f"/api/zarr/{target.zarr_id}/snapshots/{quoted}/", status_code=302)
    return RedirectResponse(f"/zarr/{target.zarr_id}/", status_code=302)
