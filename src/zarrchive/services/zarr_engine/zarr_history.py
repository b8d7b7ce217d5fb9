"""A Zarr's history: the checksums it had, newest first, and which it can be restored to.

Read from the archive's own records, never from S3: its manifests (``zarr_manifests``: one
per checksum at which it came to rest) and its change records (``zarr_change_sets``: the
checksum after each applied batch, kept until a manifest covers them).  Each checksum is
listed once, at the last time the Zarr came to it (a change record's time; a manifest's
when no record is left); its file count and size are those the checksum itself carries
(``{md5}-{count}--{size}``).  A checksum is *restorable*
(:mod:`zarrchive.services.zarr_engine.zarr_restore`) when it has a good manifest that gc keeps with the
object versions it names (:func:`zarrchive.version_retention.keep_reasons`: pinned by a
published version or another dandiset's asset, current, younger than
``ZARRCHIVE_VERSION_RETENTION_DAYS``, or the Zarr in the trash).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from zarrchive.checksum import ZarrDigest
from zarrchive.db.models import ZarrChangeSet, ZarrManifest
from zarrchive.services.identity.auth import Caller
from zarrchive.services.zarr_engine.zarr_holds import zarr_holds
from zarrchive.services.zarr_engine.zarrs import get_zarr
from zarrchive.version_retention import ManifestRecord, keep_reasons


@dataclass(frozen=True)
class ZarrState:
    """One checksum a Zarr had."""

    checksum: str
    #: the last time the Zarr came to it (UTC)
    time: datetime
    file_count: int
    size: int
    #: it has a manifest that describes it and gc keeps (see the module): the Zarr can be
    #: restored to it
    restorable: bool
    #: the Zarr's checksum now
    current: bool


def zarr_history(
    session: Session,
    user: Caller | None,
    zarr_id: str,
    *,
    now: datetime,
    retention: timedelta,
) -> list[ZarrState]:
    """The checksums of the Zarr (readable by *user*), newest first (see the module), with
    gc's *retention* at *now*."""
    zarr = get_zarr(session, user, zarr_id)
    holds = zarr_holds(session, zarr)
    times: dict[str, datetime] = {}
    restorable: dict[str, bool] = {}
    for checksum, created, listing in session.execute(
        select(ZarrManifest.checksum, ZarrManifest.created_at, ZarrManifest.listing_checksum).where(
            ZarrManifest.zarr_id == zarr.id
        )
    ):
        times[checksum] = created
        kept = keep_reasons(ManifestRecord(checksum, created), holds, now=now, retention=retention)
        restorable[checksum] = listing == checksum and bool(kept)
    applied: dict[str, datetime] = {}
    for checksum, when in session.execute(
        select(ZarrChangeSet.checksum_after, ZarrChangeSet.applied_at).where(
            ZarrChangeSet.zarr_id == zarr.id, ZarrChangeSet.seq.is_not(None)
        )
    ):
        applied[checksum] = max(when, applied.get(checksum, when))
    times.update(applied)  # when the Zarr came to it, not when its manifest was written
    # the current state is the newest (its records may be pruned, its manifest old)
    times[zarr.checksum] = max(zarr.modified_at, times.get(zarr.checksum, zarr.modified_at))
    states = []
    for checksum, when in times.items():
        count, size = ZarrDigest.totals(checksum)
        states.append(
            ZarrState(
                checksum,
                when,
                count,
                size,
                restorable.get(checksum, False),
                checksum == zarr.checksum,
            )
        )
    # newest first; the current state first among states of the same second
    states.sort(key=lambda s: (s.time, s.current, s.checksum), reverse=True)
    return states
