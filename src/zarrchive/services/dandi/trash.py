"""The trash: deleted assets and unpublished dandisets, restorable for ``ZARRCHIVE_TRASH_DAYS``.

Why a table for assets and a column for dandisets:

* a deleted asset's row *moves* to ``trashed_assets`` (same id, path, metadata, blob or
  Zarr): every read path of assets (listings, paths, search, catalog, DANDI's routes,
  downloads by id, validation, publication) reads ``assets`` only, so none of them can show
  a trashed asset, and none had to learn a filter.  Restoring moves the row back: the asset
  is the same id on the same blob or Zarr, byte for byte.
* a deleted dandiset keeps its row (its identifier is never given to another, its owners
  stay) with ``deleted_at`` set, and its draft's assets move to the trash with it
  (``with_dandiset``).  Dandisets are read through :func:`~zarrchive.services.dandi.dandisets.
  get_dandiset` and :func:`~zarrchive.services.dandi.dandisets.list_dandisets` only: both leave
  deleted ones out (only this module asks for them).

What a trash item references stays: ``admin gc`` never removes a Zarr or a blob a trashed
asset names, and a trashed asset's Zarr can't change (:func:`refuse_trashed_zarr`) while
restorable.  :func:`purge_expired` (run by ``admin gc``) removes what was deleted more than
the trash period ago.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from zarrchive.checksum.digest import ZarrDigest
from zarrchive.db.models import (
    Asset,
    Blob,
    Dandiset,
    SharedZarrAsset,
    TrashedAsset,
    Version,
    Zarr,
    utcnow,
)
from zarrchive.errors import Conflict, NotFound
from zarrchive.services.dandi import audit, changes, dois, search
from zarrchive.services.dandi.asset_views import AssetInfo, asset_info, parse_asset_id
from zarrchive.services.dandi.dandiset_rows import (
    DRAFT,
    ensure_draft,
    get_dandiset,
    parse_identifier,
)
from zarrchive.services.identity.auth import Caller, is_owner, require_owner, require_writer


@dataclass(frozen=True)
class TrashItem:
    """A deleted asset, as ``GET /api/dandisets/{id}/trash/`` lists it."""

    asset_id: str
    path: str
    size: int
    deleted_at: datetime
    deleted_by: str
    #: the last day it can be restored (``admin gc`` purges it after)
    restorable_until: datetime


def item_size(row: TrashedAsset, shared: dict[str, str] | None = None) -> int:
    """The trashed asset's size; a Zarr of another dandiset (*shared*: asset id -> the
    checksum it pinned): the pinned state's, not the Zarr's live one."""
    if row.blob is not None:
        return row.blob.size
    pinned = (shared or {}).get(row.id)
    if pinned is not None:
        return ZarrDigest.totals(pinned)[1]
    if row.zarr is not None:
        return row.zarr.size
    return 0


def _draft(session: Session, dandiset: Dandiset, *, lock: bool = False) -> Version:
    query = select(Version).where(Version.dandiset_id == dandiset.id, Version.version == DRAFT)
    if lock:
        query = query.with_for_update(of=Version)
    draft = session.scalar(query)
    if draft is None:
        raise NotFound(f"dandiset {dandiset.identifier} has no draft")
    return draft


def _trash_row(asset: Asset, dandiset_id: int, who: str, *, with_dandiset: bool) -> TrashedAsset:
    return TrashedAsset(
        id=asset.id,
        dandiset_id=dandiset_id,
        path=asset.path,
        metadata_=dict(asset.metadata_ or {}),
        blob_id=asset.blob_id,
        zarr_id=asset.zarr_id,
        created_at=asset.created_at,
        modified_at=asset.modified_at,
        deleted_by=who,
        with_dandiset=with_dandiset,
    )


def _asset_row(row: TrashedAsset, version: Version) -> Asset:
    return Asset(
        id=row.id,
        version_id=version.id,
        path=row.path,
        metadata_=dict(row.metadata_ or {}),
        blob_id=row.blob_id,
        zarr_id=row.zarr_id,
        created_at=row.created_at,
        modified_at=utcnow(),
    )


def trash_asset(session: Session, user: Caller | None, asset: Asset) -> None:
    """Move a draft's *asset* to the trash (the caller checked it may, and records the
    change)."""
    dandiset_id = asset.version.dandiset_id
    who = user.username if user is not None else ""
    session.add(_trash_row(asset, dandiset_id, who, with_dandiset=False))
    session.delete(asset)
    session.flush()


def trash_dandiset(session: Session, user: Caller | None, dandiset: Dandiset) -> None:
    """Put an unpublished *dandiset* in the trash: its row stays (``deleted_at``), its draft's
    assets move to the trash with it; it leaves the search index."""
    who = user.username if user is not None else ""
    draft = ensure_draft(session, dandiset)
    for asset in session.scalars(select(Asset).where(Asset.version_id == draft.id)):
        session.add(_trash_row(asset, dandiset.id, who, with_dandiset=True))
        session.delete(asset)
    dandiset.deleted_at = utcnow()
    dandiset.deleted_by = who
    search.unindex_dandiset(session, dandiset.id)
    session.flush()


def _trashed_dandiset(session: Session, user: Caller | None, identifier: str) -> Dandiset:
    number = parse_identifier(identifier)
    dandiset = session.scalar(
        select(Dandiset)
        .where(Dandiset.id == number)
        .with_for_update(of=Dandiset)
        .execution_options(populate_existing=True)
    )
    require_writer(user)
    if dandiset is None or dandiset.deleted_at is None or not is_owner(user, dandiset):
        # a deleted dandiset is its owners' and admins' only: others learn nothing
        raise NotFound(f"no deleted dandiset {number:06d}")
    return dandiset


def restore_dandiset(session: Session, user: Caller | None, identifier: str) -> Dandiset:
    """Take a deleted dandiset out of the trash (owners and admins), with its draft's assets."""
    dandiset = _trashed_dandiset(session, user, identifier)
    draft = ensure_draft(session, dandiset)
    rows = list(
        session.scalars(
            select(TrashedAsset).where(
                TrashedAsset.dandiset_id == dandiset.id, TrashedAsset.with_dandiset.is_(True)
            )
        )
    )
    restored = [_asset_row(row, draft) for row in rows]
    for row in rows:
        session.delete(row)
    session.flush()
    session.add_all(restored)
    dandiset.deleted_at = None
    dandiset.deleted_by = None
    session.flush()
    search.index_dandiset(session, dandiset.id, dandiset.name, dict(draft.metadata_ or {}))
    search.index_assets(session, [(dandiset.id, a.id, a.path) for a in restored])
    audit.record(
        session,
        dandiset,
        user,
        audit.RecordType.RESTORE_DANDISET,
        {"assets": len(restored)},
    )
    dois.dandiset_created(session, dandiset)
    return dandiset


def list_trash(
    session: Session, user: Caller | None, identifier: str, days: int
) -> list[TrashItem]:
    """The deleted assets of a dandiset's draft, newest deletion first (owners and admins)."""
    dandiset = get_dandiset(session, user, identifier)
    if not is_owner(user, dandiset):  # owners' and admins' keys of any scope
        require_owner(user, dandiset)
    rows = list(
        session.scalars(
            select(TrashedAsset)
            .where(TrashedAsset.dandiset_id == dandiset.id, TrashedAsset.with_dandiset.is_(False))
            .order_by(TrashedAsset.deleted_at.desc(), TrashedAsset.path)
        )
    )
    shared = {
        asset_id: checksum
        for asset_id, checksum in session.execute(
            select(SharedZarrAsset.asset_id, SharedZarrAsset.checksum).where(
                SharedZarrAsset.asset_id.in_([r.id for r in rows if r.zarr_id is not None])
            )
        )
    }
    return [
        TrashItem(
            asset_id=row.id,
            path=row.path,
            size=item_size(row, shared),
            deleted_at=row.deleted_at,
            deleted_by=row.deleted_by,
            restorable_until=row.deleted_at + timedelta(days=days),
        )
        for row in rows
    ]


def restore_asset(
    session: Session, user: Caller | None, identifier: str, asset_id: str
) -> AssetInfo:
    """Put a deleted asset back at its path in the draft (owners): 409 if an asset holds the
    path now, or (a Zarr asset) if another asset holds its Zarr."""
    dandiset = get_dandiset(session, user, identifier)
    require_owner(user, dandiset)
    draft = _draft(session, dandiset, lock=True)
    row = session.scalar(
        select(TrashedAsset).where(
            TrashedAsset.id == parse_asset_id(asset_id),
            TrashedAsset.dandiset_id == dandiset.id,
            TrashedAsset.with_dandiset.is_(False),
        )
    )
    if row is None:
        raise NotFound(f"dandiset {dandiset.identifier} has no asset {asset_id} in its trash")
    taken = session.scalar(
        select(Asset.id).where(Asset.version_id == draft.id, Asset.path == row.path)
    )
    if taken is not None:
        raise Conflict(
            f"the draft of dandiset {dandiset.identifier} has an asset at {row.path!r} "
            f"({taken}): move or delete it first"
        )
    if row.blob is not None and row.blob.embargoed and not dandiset.embargoed:
        # unembargoing moved the draft's blobs, not the trash's: this one is still private
        raise Conflict(
            f"dandiset {dandiset.identifier} was unembargoed after {row.path!r} was deleted: "
            "its file is still in the embargoed bucket; upload it again"
        )
    if row.zarr_id is not None:
        holder = session.scalar(
            select(Asset.path).where(Asset.version_id == draft.id, Asset.zarr_id == row.zarr_id)
        )
        if holder is not None:
            raise Conflict(f"Zarr {row.zarr_id} is the asset {holder!r} of the draft now")
    asset = _asset_row(row, draft)
    session.delete(row)
    session.flush()
    session.add(asset)
    draft.modified_at = utcnow()
    session.flush()
    session.refresh(asset)
    changes.asset_restored(session, user, dandiset, draft, asset)
    return asset_info(asset, dandiset)


def refuse_trashed_zarr(session: Session, zarr_id: str) -> None:
    """Refuse to change a Zarr that a trashed asset of its own dandiset holds: restoring it
    gives it back as it was deleted (restore the asset first).  A trashed asset of another
    dandiset that shared the Zarr (:mod:`~zarrchive.services.zarr_engine.shared_zarrs`) reads a pinned
    state, which no change of the Zarr touches: it does not count."""
    path = session.scalar(
        select(TrashedAsset.path)
        .join(Zarr, Zarr.id == TrashedAsset.zarr_id)
        .where(TrashedAsset.zarr_id == zarr_id, TrashedAsset.dandiset_id == Zarr.dandiset_id)
        .limit(1)
    )
    if path is not None:
        raise Conflict(
            f"Zarr {zarr_id} is the deleted asset {path!r}, in its dandiset's trash: restore "
            "the asset before changing the Zarr"
        )


@dataclass(frozen=True)
class Purged:
    assets: int
    dandisets: int


def purge_expired(
    session: Session, *, days: int, apply: bool = True, now: datetime | None = None
) -> Purged:
    """Remove for good what was deleted more than *days* ago: trashed assets (their blobs and
    Zarrs are then unreferenced: ``admin gc`` removes them after its grace period) and
    deleted dandisets (their rows, draft and trash).  Without *apply*, only count them."""
    cutoff = (now or utcnow()) - timedelta(days=days)
    expired = list(
        session.scalars(
            select(Dandiset.id).where(
                Dandiset.deleted_at.is_not(None), Dandiset.deleted_at <= cutoff
            )
        )
    )
    due = (TrashedAsset.deleted_at <= cutoff) | TrashedAsset.dandiset_id.in_(expired)
    if not apply:
        count = session.scalar(select(func.count()).select_from(TrashedAsset).where(due))
        return Purged(assets=int(count or 0), dandisets=len(expired))
    assets = session.scalar(select(func.count()).select_from(TrashedAsset).where(due))
    released = select(TrashedAsset.blob_id).where(due, TrashedAsset.blob_id.is_not(None))
    # let go of: gc's grace period starts now (see zarrchive.services.dandi.blob_gc)
    session.execute(update(Blob).where(Blob.id.in_(released)).values(touched_at=now or utcnow()))
    session.execute(delete(TrashedAsset).where(due))
    if expired:
        session.execute(delete(Version).where(Version.dandiset_id.in_(expired)))
        for dandiset in session.scalars(select(Dandiset).where(Dandiset.id.in_(expired))):
            session.delete(dandiset)  # and its owners (the relationship's rows)
    session.flush()
    return Purged(assets=int(assets or 0), dandisets=len(expired))
