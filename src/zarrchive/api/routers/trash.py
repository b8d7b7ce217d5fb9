"""The trash (``/api/dandisets/{id}/trash/``, ``.../restore/``) and DANDI's ``/api/stats/``."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel

from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.routers.assets import asset_out
from zarrchive.api.routers.dandisets import dandiset_out
from zarrchive.api.schemas import AssetOut, DandisetOut
from zarrchive.services.dandi import trash, usage

router = APIRouter(tags=["trash"])


class TrashItemOut(BaseModel):
    asset_id: str
    path: str
    size: int
    deleted: datetime
    deleted_by: str
    restorable_until: datetime


class StatsOut(BaseModel):
    dandiset_count: int
    published_dandiset_count: int
    user_count: int
    size: int


@router.get(
    "/api/dandisets/{dandiset_id}/trash/",
    response_model=list[TrashItemOut],
    summary="The deleted assets of a dandiset's draft",
)
def list_trash(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> list[TrashItemOut]:
    """Owners and admins: each deleted asset's path, size, when and by whom, newest first;
    restorable until `ZARRCHIVE_TRASH_DAYS` after its deletion."""
    with archive.db.session() as session:
        items = trash.list_trash(session, user, dandiset_id, archive.settings.trash_days)
    return [
        TrashItemOut(
            asset_id=i.asset_id,
            path=i.path,
            size=i.size,
            deleted=i.deleted_at,
            deleted_by=i.deleted_by,
            restorable_until=i.restorable_until,
        )
        for i in items
    ]


@router.post(
    "/api/dandisets/{dandiset_id}/trash/{asset_id}/restore/",
    response_model=AssetOut,
    summary="Put a deleted asset back",
)
def restore_asset(dandiset_id: str, asset_id: str, archive: ArchiveDep, user: UserDep) -> AssetOut:
    """Owners and admins: the asset comes back at its path in the draft, with its id, blob
    or Zarr and metadata; 409 if an asset holds that path now."""
    with archive.db.write_session() as session:
        return asset_out(trash.restore_asset(session, user, dandiset_id, asset_id))


@router.post(
    "/api/dandisets/{dandiset_id}/restore/",
    response_model=DandisetOut,
    summary="Take a deleted dandiset out of the trash",
)
def restore_dandiset(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> DandisetOut:
    """Owners and admins (`GET /api/dandisets/?deleted=true` lists theirs): the dandiset comes
    back with its draft's assets; 404 for anyone else."""
    with archive.db.write_session() as session:
        return dandiset_out(session, trash.restore_dandiset(session, user, dandiset_id))


@router.get("/api/stats/", response_model=StatsOut, summary="The archive's figures (DANDI's)")
def stats(archive: ArchiveDep) -> StatsOut:
    """DANDI's `dandiset_count`, `published_dandiset_count`, `user_count` and `size` (bytes
    of the draft and published assets of every dandiset, each blob and Zarr counted once)."""
    with archive.db.session() as session:
        figures = usage.stats(session)
    return StatsOut(
        dandiset_count=figures.dandiset_count,
        published_dandiset_count=figures.published_dandiset_count,
        user_count=figures.user_count,
        size=figures.size,
    )
