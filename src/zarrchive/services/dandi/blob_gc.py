"""``admin gc`` of blobs: a blob that no asset of any version, no trash item and no validated
upload names, and that nobody was given or let go of for the grace period, is removed (its
row, its LINDI file's row, and every version of its object and LINDI file in S3).

Why the grace period counts from ``touched_at`` too: an upload of content the archive holds
is answered with the existing blob's id (:func:`zarrchive.services.dandi.blobs.stored_twin` touches
it) and the uploader creates its asset afterwards (as after a validated upload: its receipt
keeps the blob for the grace period); an asset that let go of a blob (its content replaced,
or purged from the trash) touches it as well.  Nothing a published version
or a restorable trash item names is ever a candidate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, exists, or_, select
from sqlalchemy.sql.elements import ColumnElement

from zarrchive.db.models import Asset, Blob, BlobUpload, LindiFile, TrashedAsset, utcnow
from zarrchive.services.dandi.lindi_files import lindi_key
from zarrchive.services.runtime import Archive

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnreferencedBlob:
    blob_id: str
    key: str
    size: int
    embargoed: bool
    #: since when nothing references it (as far as the archive knows)
    since: datetime


def _unreferenced(cutoff: datetime) -> list[ColumnElement[bool]]:
    return [
        ~exists().where(Asset.blob_id == Blob.id),
        ~exists().where(TrashedAsset.blob_id == Blob.id),
        # a validated upload's receipt: its uploader creates the asset next
        ~exists().where(BlobUpload.validated_blob_id == Blob.id, BlobUpload.created_at > cutoff),
        Blob.created_at <= cutoff,
        or_(Blob.touched_at.is_(None), Blob.touched_at <= cutoff),
    ]


def unreferenced_blobs(
    archive: Archive, *, grace: timedelta, now: datetime | None = None
) -> list[UnreferencedBlob]:
    """The blobs gc removes (see the module), oldest first."""
    cutoff = (now or utcnow()) - grace
    with archive.db.session() as session:
        rows = session.scalars(
            select(Blob).where(*_unreferenced(cutoff)).order_by(Blob.created_at, Blob.id)
        )
        return [
            UnreferencedBlob(
                b.id, b.key, b.size, b.embargoed, max(b.created_at, b.touched_at or b.created_at)
            )
            for b in rows
        ]


def remove_unreferenced_blob(
    archive: Archive, blob_id: str, *, grace: timedelta, now: datetime | None = None
) -> bool:
    """Remove the blob for good if it is still a candidate (checked again under its row
    lock): the row first (from then on nothing can name it), then its objects.  False
    (nothing removed) when something took it meanwhile."""
    cutoff = (now or utcnow()) - grace
    with archive.db.write_session() as session:
        blob = session.scalar(
            select(Blob).where(Blob.id == blob_id, *_unreferenced(cutoff)).with_for_update()
        )
        if blob is None:
            return False
        key, embargoed = blob.key, blob.embargoed
        session.execute(delete(LindiFile).where(LindiFile.blob_id == blob_id))
        session.delete(blob)
    store = archive.store_for(embargoed)
    store.delete_all_versions(key)
    store.delete_all_versions(lindi_key(blob_id))
    log.info("removed the unreferenced blob %s (%s)", blob_id, key)
    return True
