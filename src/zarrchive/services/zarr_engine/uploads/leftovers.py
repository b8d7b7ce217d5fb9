"""What a Zarr's ended or abandoned uploads leave in S3, as gc finds and removes it: the
staging areas of batches that no longer exist, and multipart uploads nothing will finish."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select

from zarrchive.db.models import UploadBatch
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads.abandoned import abandoned_uploads
from zarrchive.services.zarr_engine.uploads.multipart import StrayUpload, abort_stray, stray_uploads
from zarrchive.services.zarr_engine.uploads.staging import purge_stale_staging, stale_staging
from zarrchive.storage.protocol import ObjectStoreProtocol


@dataclass(frozen=True)
class Leftovers:
    #: staging prefixes of batches that no longer exist, with their bytes
    staging: list[tuple[str, int]]
    #: multipart uploads nothing will finish
    stray: list[StrayUpload]

    @property
    def multipart(self) -> list[tuple[str, str, str]]:
        """``(key, upload id, why)`` of each stray upload."""
        return [(u.key, u.upload_id, u.why) for u in self.stray]


def find_leftovers(
    archive: Archive,
    store: ObjectStoreProtocol,
    zarr_id: str,
    *,
    abandoned_after: timedelta | None = None,
    now: datetime | None = None,
) -> Leftovers:
    """The Zarr's leftovers; with *abandoned_after*, also the multipart uploads of open
    batches nothing was sent to for that long."""
    with archive.db.session() as session:
        live = set(session.scalars(select(UploadBatch.uid).where(UploadBatch.zarr_id == zarr_id)))
    stray = stray_uploads(archive, store, zarr_id)
    if abandoned_after is not None:
        stray += [
            StrayUpload(u.key, u.upload_id, u.why)
            for u in abandoned_uploads(archive, store, zarr_id, grace=abandoned_after, now=now)
        ]
    return Leftovers(stale_staging(store, zarr_id, live), stray)


def remove_leftovers(
    archive: Archive, store: ObjectStoreProtocol, zarr_id: str, found: Leftovers
) -> None:
    """Abort the stray uploads and purge the stale staging areas *found*."""
    abort_stray(store, found.stray)
    if found.staging:
        purge_stale_staging(archive, zarr_id)
