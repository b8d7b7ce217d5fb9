"""What ``GET /api/zarr/{id}/`` (and the Zarr's web page) tells about one Zarr: its
checksum, size, upload state, DANDI's status, manifest and published versions, as the wire
type :class:`~zarrchive.wire.zarrs.ZarrInfo` (the client reads the same type back).

Above :mod:`~zarrchive.services.zarr_engine.zarrs`, :mod:`~zarrchive.services.zarr_engine.uploads` and
:mod:`~zarrchive.services.zarr_engine.manifests`, which it reads, so none of them imports another
upwards.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from zarrchive.db.models import Asset, Version, Zarr, ZarrManifest
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import manifest_url
from zarrchive.services.zarr_engine.uploads import UploadState, upload_status
from zarrchive.services.zarr_engine.zarrs import ZarrRef
from zarrchive.storage.keys import zarr_prefix
from zarrchive.wire.zarrs import ZarrInfo, ZarrStatus

_STATUS_OF_STATE = {
    UploadState.AT_REST: ZarrStatus.COMPLETE,
    UploadState.OPEN: ZarrStatus.PENDING,
    UploadState.APPLYING: ZarrStatus.INGESTING,
}


def zarr_info(archive: Archive, session: Session, zarr: Zarr) -> ZarrInfo:
    """The Zarr as the API answers it (the wire type both sides import)."""
    status = upload_status(session, zarr.id)
    ref = ZarrRef.of(zarr)
    manifest = session.scalar(
        select(ZarrManifest).where(
            ZarrManifest.zarr_id == zarr.id, ZarrManifest.checksum == zarr.checksum
        )
    )
    return ZarrInfo(
        zarr_id=zarr.id,
        name=zarr.name,
        dandiset=zarr.dandiset.identifier,
        s3_path=zarr_prefix(zarr.id),
        s3_url=archive.store_for(ref.embargoed).public_url(zarr_prefix(zarr.id)),
        checksum=zarr.checksum,
        file_count=zarr.file_count,
        size=zarr.size,
        upload_in_progress=status.open,
        upload_state=status.state.value,
        status=_STATUS_OF_STATE[status.state].value,
        created=zarr.created_at,
        modified=zarr.modified_at,
        manifest_url=manifest_url(archive, ref, zarr.checksum) if manifest else None,
        manifest_status="available" if manifest else "pending",
        refs_url=f"/api/zarr/{zarr.id}/refs.json",
        checksum_mismatch=manifest.listing_checksum if manifest and manifest.mismatch else None,
        published_versions=list(
            session.scalars(
                select(Version.version)
                .join(Asset, Asset.version_id == Version.id)
                .where(Asset.zarr_id == zarr.id, Version.version != "draft")
                .order_by(Version.id)
            )
        ),
    )
