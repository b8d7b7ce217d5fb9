"""``/api/dandisets/``."""

from __future__ import annotations

from fastapi import APIRouter

from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.schemas import DandisetCreate, DandisetOut
from zarrchive.db.models import Dandiset
from zarrchive.services import dandisets, embargo

router = APIRouter(tags=["dandisets"])


def dandiset_out(dandiset: Dandiset) -> DandisetOut:
    return DandisetOut(
        identifier=dandiset.identifier,
        name=dandiset.name,
        embargoed=dandiset.embargoed,
        embargo_status=embargo.embargo_status(dandiset),
        owners=sorted(o.username for o in dandiset.owners),
        created=dandiset.created_at,
    )


@router.post("/api/dandisets/", response_model=DandisetOut, summary="Create a dandiset")
def create_dandiset(body: DandisetCreate, archive: ArchiveDep, user: UserDep) -> DandisetOut:
    with archive.db.write_session() as session:
        dandiset = dandisets.create_dandiset(session, user, body.name, embargoed=body.embargo)
        return dandiset_out(dandiset)


@router.get("/api/dandisets/{dandiset_id}/", response_model=DandisetOut, summary="A dandiset")
def get_dandiset(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> DandisetOut:
    with archive.db.session() as session:
        return dandiset_out(dandisets.get_dandiset(session, user, dandiset_id))


@router.post(
    "/api/dandisets/{dandiset_id}/unembargo/",
    response_model=DandisetOut,
    summary="Make an embargoed dandiset public",
)
def unembargo(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> DandisetOut:
    """Owners only.  Moves every object of the dandiset to the public bucket (a background
    job: `embargo_status` is `unembargoing` until it is done, and its Zarrs refuse writes
    meanwhile)."""
    dandiset = embargo.start_unembargo(archive, user, dandiset_id)
    return dandiset_out(dandiset)
