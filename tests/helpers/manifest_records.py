"""Manifests from the apply's records, checked against what a listing of S3 gives.

The apply engine records, when it applies a batch, every version it copied into place and
every path it deleted (:mod:`zarrchive.services.zarr_engine.manifest_changes`); the manifest job merges
them into the previous manifest.  These helpers make the manifest a listing gives for the
same state (what the job wrote before records), and make a Zarr look like one applied
before records existed.
"""

from __future__ import annotations

import io
import tempfile

from sqlalchemy import delete, select

from zarrchive.db.models import ZarrChangedObject, ZarrChangeSet
from zarrchive.manifest import generate_manifest, manifest_key
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import (
    ManifestSource,
    ManifestStatus,
    current_entries,
    write_manifest,
)


def listed_manifest(
    archive: Archive, zarr_id: str, checksum: str, embargoed: bool = False
) -> bytes:
    """The manifest a listing of S3 gives for the Zarr now (what the job wrote before)."""
    store = archive.store_for(embargoed)
    with tempfile.SpooledTemporaryFile() as body:
        generated = generate_manifest(
            current_entries(store, zarr_id), body, database_checksum=checksum
        )
        out = io.BytesIO()
        generated.write_to(out)
    return out.getvalue()


def manifest_as_listed(
    archive: Archive,
    zarr_id: str,
    checksum: str,
    source: ManifestSource,
    *,
    embargoed: bool = False,
) -> bytes:
    """Write the manifest of the Zarr's state, check how it was made (*source*) and that it
    is the listing's, byte for byte; return it."""
    outcome = write_manifest(archive, zarr_id)
    assert outcome.status is ManifestStatus.WRITTEN and outcome.checksum == checksum, outcome
    assert outcome.source is source and not outcome.mismatch, outcome
    stored = archive.store_for(embargoed).get(manifest_key(zarr_id, checksum))
    assert stored is not None
    assert stored == listed_manifest(archive, zarr_id, checksum, embargoed)
    return stored


def forget_records(archive: Archive, zarr_id: str) -> None:
    """Drop the Zarr's change records: it looks like a Zarr applied before records existed
    (its next manifest is listed)."""
    with archive.db.write_session() as session:
        ids = select(ZarrChangeSet.id).where(ZarrChangeSet.zarr_id == zarr_id)
        session.execute(delete(ZarrChangedObject).where(ZarrChangedObject.change_set_id.in_(ids)))
        session.execute(delete(ZarrChangeSet).where(ZarrChangeSet.zarr_id == zarr_id))


def change_sets(archive: Archive, zarr_id: str) -> list[tuple[bool, bool]]:
    """The Zarr's change sets, oldest first: (a batch's, not a rest mark; manifest written)."""
    with archive.db.session() as session:
        rows = session.execute(
            select(ZarrChangeSet.seq, ZarrChangeSet.manifest_written)
            .where(ZarrChangeSet.zarr_id == zarr_id)
            .order_by(ZarrChangeSet.id)
        )
        return [(seq is not None, written) for seq, written in rows]


def recorded_versions(archive: Archive, zarr_id: str) -> dict[str, str | None]:
    """Path -> the version id the newest change set of that path recorded (None: deleted)."""
    with archive.db.session() as session:
        rows = session.execute(
            select(ZarrChangedObject.path, ZarrChangedObject.version_id)
            .join(ZarrChangeSet, ZarrChangeSet.id == ZarrChangedObject.change_set_id)
            .where(ZarrChangeSet.zarr_id == zarr_id)
            .order_by(ZarrChangeSet.id)
        )
        return {path: version for path, version in rows}
