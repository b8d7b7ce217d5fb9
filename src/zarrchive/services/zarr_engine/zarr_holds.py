"""What holds a Zarr's states (so the manifests of those states, and the object versions
they name, are kept): read from the database, for ``admin gc``
(:mod:`~zarrchive.services.zarr_engine.version_gc`) and for the Zarr's history and its
restorable states (:mod:`~zarrchive.services.zarr_engine.zarr_history`,
:mod:`~zarrchive.services.zarr_engine.zarr_restore`); the decision what they keep is
:func:`zarrchive.version_retention.keep_reasons`'.
"""

from __future__ import annotations

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from zarrchive.db.models import TrashedAsset, Zarr, ZarrPin
from zarrchive.services.zarr_engine.shared_zarrs import held_checksums
from zarrchive.version_retention import ZarrHolds


def zarr_holds(session: Session, zarr: Zarr) -> ZarrHolds:
    """What holds states of *zarr*: its published pins, the states other dandisets' assets
    read, the trash, its current checksum."""
    pins: dict[str, bool] = {}
    for checksum, frozen in session.execute(
        select(ZarrPin.checksum, ZarrPin.frozen).where(ZarrPin.zarr_id == zarr.id)
    ):
        pins[checksum] = pins.get(checksum, False) or bool(frozen)
    for checksum in held_checksums(session, zarr.id):  # other dandisets' assets read these
        pins.setdefault(checksum, False)
    trashed = bool(session.scalar(select(exists().where(TrashedAsset.zarr_id == zarr.id))))
    return ZarrHolds(zarr.checksum, pins, trashed=trashed, rollback_targets=frozenset())
