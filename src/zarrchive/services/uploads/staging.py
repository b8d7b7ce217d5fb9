"""The staging area of batches: ``zarr-staging/{zarr_id}/{uid}/``, dropped once a batch ends."""

from __future__ import annotations

import logging

from sqlalchemy import select

from zarrchive.db.models import (
    UploadBatch,
)
from zarrchive.errors import (
    StorageError,
)
from zarrchive.services.runtime import Archive
from zarrchive.services.zarrs import get_zarr
from zarrchive.storage.keys import (
    staging_prefix,
    staging_zarr_prefix,
)
from zarrchive.storage.objects import ObjectStore

log = logging.getLogger(__name__)


def _drop_staging(store: ObjectStore, zarr_id: str, uid: str) -> None:
    """Remove a finished batch's staging objects for good (best effort: garbage if it fails)."""
    try:
        store.purge(staging_prefix(zarr_id, uid))
    except StorageError:
        log.warning("Zarr %s: could not remove the staging objects of batch %s", zarr_id, uid)


def purge_stale_staging(archive: Archive, zarr_id: str) -> int:
    """Remove the staging objects of every batch of *zarr_id* that no longer exists (e.g.
    written by a URL replayed after its batch ended); returns how many batches' areas."""
    with archive.db.session() as session:
        zarr = get_zarr(session, None, zarr_id, check_read=False)
        zarr_id = zarr.id
        live = set(session.scalars(select(UploadBatch.uid).where(UploadBatch.zarr_id == zarr_id)))
        store = archive.store_for(zarr.dandiset.embargoed)
    root = staging_zarr_prefix(zarr_id)
    stale = [p for p in store.iter_prefixes(root) if p[len(root) :].rstrip("/") not in live]
    # (some S3s, SeaweedFS among them, list emptied "directories": count what held objects)
    return sum(1 for prefix in stale if store.purge(prefix) > 0)
