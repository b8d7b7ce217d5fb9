"""``/api/dandisets/``, in DANDI's shapes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy.orm import Session

from zarrchive.api.bodies import JsonBody
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.schemas import DandisetCreate, DandisetOut, DandiVersionOut
from zarrchive.db.models import Dandiset
from zarrchive.http_common.pagination import Page, PageRequest, make_page, page_request
from zarrchive.services.dandi import dandisets, embargo, embargo_dates, versions

router = APIRouter(tags=["dandisets"])
NEW_DANDISET = JsonBody(DandisetCreate, login=True)


def version_summary(info: versions.VersionInfo) -> DandiVersionOut:
    return DandiVersionOut(
        version=info.version,
        name=info.name,
        asset_count=info.asset_count,
        size=info.size,
        status=info.status.value,
        created=info.created,
        modified=info.modified,
    )


def dandiset_out(session: Session, dandiset: Dandiset) -> DandisetOut:
    draft = versions.version_info(session, dandiset, versions.ensure_draft(session, dandiset))
    latest = versions.latest_published(session, dandiset)
    published = versions.version_info(session, dandiset, latest) if latest else None
    return DandisetOut(
        identifier=dandiset.identifier,
        created=dandiset.created_at,
        modified=max(dandiset.created_at, draft.modified),
        contact_person=draft.contact_person,
        embargo_status=embargo.embargo_status(dandiset).upper(),
        draft_version=version_summary(draft),
        most_recent_published_version=version_summary(published) if published else None,
        name=dandiset.name,
        embargoed=dandiset.embargoed,
        owners=sorted(o.username for o in dandiset.owners),
    )


@router.post(
    "/api/dandisets/",
    response_model=DandisetOut,
    summary="Create a dandiset",
    openapi_extra=NEW_DANDISET.openapi,
)
def create_dandiset(
    body: Annotated[DandisetCreate, Depends(NEW_DANDISET)],
    archive: ArchiveDep,
    user: UserDep,
    embargo_query: Annotated[
        bool, Query(alias="embargo", description="Create it embargoed (DANDI's way)")
    ] = False,
    embargo_end_date: Annotated[
        str | None,
        Query(
            max_length=64,
            description="The day (YYYY-MM-DD, UTC) the archive unembargoes it by itself: "
            "after today, at most two years on (five with an award); default two years",
        ),
    ] = None,
    funding_source: Annotated[
        str | None, Query(max_length=300, description="The award's funder (with award_number)")
    ] = None,
    award_number: Annotated[
        str | None, Query(max_length=300, description="The award (with funding_source)")
    ] = None,
) -> DandisetOut:
    """DANDI's `{name, metadata}` (`?embargo=true` for an embargoed one, with DANDI's
    `embargo_end_date`, `funding_source` and `award_number`), or `{name, embargo}`.  The
    creator owns it; identifiers are sequential (`000001`, ...)."""
    embargoed = body.embargo or embargo_query
    funder = embargo_dates.funder(funding_source, award_number) if embargoed else None
    end = embargo_dates.embargo_end_date(
        embargo_end_date,
        embargoed=embargoed,
        funded=funder is not None,
        today=embargo_dates.utc_today(),
    )
    with archive.db.write_session() as session:
        dandiset = dandisets.create_dandiset(
            session,
            user,
            body.name,
            embargoed=embargoed,
            metadata=body.metadata,
            embargo_end=end,
            funder=funder,
        )
        return dandiset_out(session, dandiset)


@router.get("/api/dandisets/", response_model=Page[DandisetOut], summary="A page of the dandisets")
def list_dandisets(
    request: Request,
    archive: ArchiveDep,
    user: UserDep,
    asked: Annotated[PageRequest, Depends(page_request)],
    draft: bool = True,
    empty: bool = True,
    embargoed: bool = False,
    user_filter: Annotated[str | None, Query(alias="user", description="`me`: yours")] = None,
    search: Annotated[str | None, Query(max_length=300)] = None,
    ordering: Annotated[str, Query(description="id, name, created, modified; '-' reverses")] = "id",
    deleted: Annotated[
        bool, Query(description="only your deleted ones, in the trash (admins: all)")
    ] = False,
) -> Page[DandisetOut]:
    """DANDI's filters: `draft=false` only published ones, `empty=false` only those with
    assets, `embargoed=true` also the embargoed ones you may see, `user=me` only yours."""
    filters = dandisets.DandisetFilter(
        draft=draft,
        empty=empty,
        embargoed=embargoed,
        mine=user_filter == "me",
        search=search,
        ordering=ordering,
        deleted=deleted,
    )
    with archive.db.session() as session:
        count, rows = dandisets.list_dandisets(
            session, user, filters, offset=asked.offset, limit=asked.page_size
        )
        results = [dandiset_out(session, d) for d in rows]
    return make_page(request, asked, count, results)


@router.get("/api/dandisets/{dandiset_id}/", response_model=DandisetOut, summary="A dandiset")
def get_dandiset(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> DandisetOut:
    """Embargoed dandisets: 401 without a token, 404 for others than owners and admins."""
    with archive.db.session() as session:
        return dandiset_out(session, dandisets.get_dandiset(session, user, dandiset_id))


@router.delete(
    "/api/dandisets/{dandiset_id}/", status_code=204, summary="Delete an unpublished dandiset"
)
def delete_dandiset(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> Response:
    """Owners only; refused (409) once published or while it holds Zarrs."""
    with archive.db.write_session() as session:
        dandisets.delete_dandiset(session, user, dandiset_id)
    return Response(status_code=204)


@router.post(
    "/api/dandisets/{dandiset_id}/unembargo/",
    response_model=DandisetOut,
    summary="Make an embargoed dandiset public",
)
def unembargo(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> DandisetOut:
    """Owners only.  Moves every object of the dandiset to the public bucket (a background
    job: `embargo_status` is `UNEMBARGOING` until it is done, and its Zarrs refuse writes
    meanwhile)."""
    identifier = embargo.start_unembargo(archive, user, dandiset_id)
    with archive.db.session() as session:
        return dandiset_out(session, dandisets.get_dandiset(session, user, identifier))
