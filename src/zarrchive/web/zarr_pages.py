"""The Zarr browser: a Zarr's state, its directories page by page, its files, its arrays
(metadata and a thumbnail)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from zarrchive.errors import InvalidInput, NotFound
from zarrchive.paths import validate_directory_path
from zarrchive.services.views import arrays, ngff
from zarrchive.services.views.thumbnail import NoThumbnail
from zarrchive.services.zarr_engine import snapshots, zarr_info, zarrs
from zarrchive.web.attributes import render_attributes
from zarrchive.web.render import ArchiveOf, HtmlRoute, WebUser, page

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

#: Entries per page of a directory, unless ``?page_size=`` says otherwise.
PAGE_SIZE = 100


def parse_page_size(value: str | None) -> int:
    if value is None or value == "":
        return PAGE_SIZE
    if not value.isascii() or not value.isdigit() or len(value) > 6:
        raise InvalidInput(f"page_size must be a whole number, not {value[:40]!r}")
    return int(value)


@router.get("/zarr/{zarr_id}")
def zarr_root(zarr_id: str) -> RedirectResponse:
    return RedirectResponse(f"/zarr/{zarrs.parse_zarr_id(zarr_id)}/", status_code=307)


@router.get("/zarr/{zarr_id}/{path:path}", response_class=HTMLResponse)
def zarr_page(
    request: Request,
    archive: ArchiveOf,
    user: WebUser,
    zarr_id: str,
    path: str,
    cursor: str | None = None,
    page_size: Annotated[str | None, Query()] = None,
) -> HTMLResponse:
    size = parse_page_size(page_size)
    with archive.db.session() as session:
        row = zarrs.get_zarr(session, user, zarr_id)
        zarr = zarrs.ZarrRef.of(row)
        info = zarr_info.zarr_info(archive, session, row)
        pinned = snapshots.list_snapshots(archive, session, row) if path == "" else []
    found = zarrs.browse(archive, zarr, path, page_size=size, cursor=cursor or None)
    if isinstance(found, zarrs.FileEntry):
        return page(
            request,
            "zarr_file.html",
            info=info,
            file=found,
            crumbs=_crumbs(found.path.rpartition("/")[0]),
            embargoed=zarr.embargoed,
        )
    meta = arrays.describe(archive, zarr, found.path)
    shown = meta if isinstance(meta, arrays.ArrayMeta | arrays.GroupMeta) else None
    group = meta if isinstance(meta, arrays.GroupMeta) else None
    name = found.path.rpartition("/")[2] or info.name
    return page(
        request,
        "zarr_directory.html",
        info=info,
        embargoed=zarr.embargoed,
        listing=found,
        snapshots=pinned,
        crumbs=_crumbs(found.path),
        meta=shown,
        refused=meta.reason if isinstance(meta, arrays.RefusedMeta) else None,
        is_array=isinstance(meta, arrays.ArrayMeta),
        multiscale=group.multiscale if group is not None and group.ome else None,
        ngff_invalid=(
            group.multiscale.reason
            if group is not None and isinstance(group.multiscale, ngff.InvalidMultiscales)
            else None
        ),
        levels=group.levels if group is not None else [],
        child_arrays=_child_arrays(group),
        smallest=group.smallest_level if group is not None else None,
        viewers=arrays.viewers(archive, zarr, found.path, shown, name),
        page_size=size,
        custom_page_size=page_size is not None and page_size != "",
        attributes=render_attributes(shown.attributes) if shown is not None else None,
        raw_attributes=_raw_url(zarr.id, found.path, shown.attributes_document) if shown else "",
        cursor=cursor,
    )


def _child_arrays(group: arrays.GroupMeta | None) -> list[tuple[str, tuple[int, ...], str]]:
    """The group's child arrays, but for the levels of its multiscale image (shown apart)."""
    if group is None:
        return []
    levels = {level.path for level in group.levels}
    return [found for found in group.arrays if found[0] not in levels]


def _raw_url(zarr_id: str, directory: str, document: str) -> str:
    """Where the raw metadata document *document* of *directory* is downloaded."""
    return f"/download/zarr/{zarr_id}/{directory + '/' if directory else ''}{document}"


def _crumbs(path: str) -> list[tuple[str, str]]:
    """``(name, directory path)`` of each segment of *path*."""
    parts = [p for p in path.split("/") if p]
    return [(part, "/".join(parts[: i + 1])) for i, part in enumerate(parts)]


@router.get("/thumbnail/zarr/{zarr_id}/{path:path}")
def thumbnail(
    request: Request, archive: ArchiveOf, user: WebUser, zarr_id: str, path: str
) -> Response:
    """A PNG of a 2-D slice of the array in directory *path* (see ``services/views/thumbnail.py``)."""
    zarr = zarrs.zarr_ref(archive, user, zarr_id)
    directory = validate_directory_path(path)
    try:
        png = arrays.thumbnail_png(archive, zarr, directory)
    except NoThumbnail as exc:
        raise NotFound(f"no thumbnail: {exc}") from None
    return Response(png, media_type="image/png", headers={"Cache-Control": "private, max-age=60"})


@router.get("/download/zarr/{zarr_id}/{path:path}")
def download_file(
    request: Request, archive: ArchiveOf, user: WebUser, zarr_id: str, path: str
) -> RedirectResponse:
    """To the file's URL: public, or presigned when the Zarr is embargoed."""
    zarr = zarrs.zarr_ref(archive, user, zarr_id)
    [(_path, url)] = zarrs.download_urls(archive, zarr, [path])
    return RedirectResponse(url, status_code=302)
