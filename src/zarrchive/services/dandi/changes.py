"""What follows every change of a draft's assets, in the transaction of the change: the draft's
validation becomes pending (:mod:`~zarrchive.services.dandi.validation`) and the change is
recorded (:mod:`~zarrchive.services.dandi.audit`), and the search index follows
(:mod:`~zarrchive.services.dandi.search`).  One call per change from the services that
make them."""

from __future__ import annotations

from sqlalchemy.orm import Session

from zarrchive.db.models import Asset, BatchKind, Dandiset, UploadBatch, User, Version, Zarr
from zarrchive.services.dandi import audit, search, validation
from zarrchive.services.identity.auth import Caller


def asset_added(
    session: Session, user: Caller | None, dandiset: Dandiset, version: Version, asset: Asset
) -> None:
    validation.asset_changed(session, version, asset)
    search.index_asset(session, dandiset.id, asset.id, asset.path)
    audit.record(session, dandiset, user, audit.RecordType.ADD_ASSET, audit.asset_details(asset))


def asset_updated(
    session: Session, user: Caller | None, dandiset: Dandiset, version: Version, asset: Asset
) -> None:
    validation.asset_changed(session, version, asset)
    search.index_asset(session, dandiset.id, asset.id, asset.path)
    audit.record(session, dandiset, user, audit.RecordType.UPDATE_ASSET, audit.asset_details(asset))


def asset_restored(
    session: Session, user: Caller | None, dandiset: Dandiset, version: Version, asset: Asset
) -> None:
    """A deleted asset back from the trash (:mod:`zarrchive.services.dandi.trash`)."""
    validation.asset_changed(session, version, asset)
    search.index_asset(session, dandiset.id, asset.id, asset.path)
    audit.record(
        session, dandiset, user, audit.RecordType.RESTORE_ASSET, audit.asset_details(asset)
    )


def asset_removed(
    session: Session, user: Caller | None, dandiset: Dandiset, version: Version, asset: Asset
) -> None:
    validation.asset_changed(session, version)
    search.unindex_asset(session, asset.id)
    audit.record(
        session,
        dandiset,
        user,
        audit.RecordType.REMOVE_ASSET,
        {"path": asset.path, "asset_id": asset.id},
    )


def zarr_batch_applied(session: Session, zarr: Zarr, batch: UploadBatch) -> None:
    """A Zarr's upload batch was applied, or its files deleted (in the applying transaction,
    before the batch's row goes): recorded as the batch's creator's change
    (``upload_zarr_chunks`` / ``delete_zarr_chunks``), and the drafts holding the Zarr are
    validated again (its size and checksum changed)."""
    creator = session.get(User, batch.created_by) if batch.created_by is not None else None
    kind = (
        audit.RecordType.DELETE_ZARR_CHUNKS
        if batch.kind == BatchKind.DELETE
        else audit.RecordType.UPLOAD_ZARR_CHUNKS
    )
    audit.record(
        session,
        zarr.dandiset_id,
        Caller.of(creator) if creator is not None else None,
        kind,
        audit.zarr_paths(zarr.id, [f.path for f in batch.files]),
    )
    validation.request_validation(session, zarr.dandiset_id)
