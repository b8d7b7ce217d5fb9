"""Publishing a dandiset's draft as an immutable version.

A published version is a copy of the draft's asset *rows*: they reference the
same blobs and the same Zarrs (nothing in S3 is copied), with their metadata
pinned, including each Zarr's checksum and size at publication.  From then on
every Zarr of the version is frozen (:func:`zarrchive.services.zarrs.ensure_writable`).

Version names follow the DANDI Archive: ``0.YYMMDD.HHMM`` from the UTC time of
publication; when that name is taken (two publications in one minute) the
minute is advanced until it is free.

Consistency: publishing runs in one write transaction holding the dandiset's
and the draft's row locks, then every Zarr's row lock (in id order) while it
checks that no Zarr has a batch open and reads their checksums.  Zarr writes
take the same Zarr lock before :func:`ensure_writable`, so each either
completes before the publication (which then pins its result) or sees it
and is refused.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from zarrchive.db.models import Asset, Dandiset, UploadBatch, User, Version, utcnow
from zarrchive.errors import Conflict
from zarrchive.services.assets import computed_metadata
from zarrchive.services.auth import require_owner
from zarrchive.services.dandisets import get_dandiset
from zarrchive.services.runtime import Archive
from zarrchive.services.uploads import queue_manifest
from zarrchive.services.versions import DRAFT, VersionInfo, find_version, version_info
from zarrchive.services.zarrs import get_zarr


def version_name(moment: datetime) -> str:
    """The DANDI version name of a UTC moment: ``0.YYMMDD.HHMM``."""
    return moment.astimezone(UTC).strftime("0.%y%m%d.%H%M")


def next_version_name(session: Session, dandiset: Dandiset, now: datetime | None = None) -> str:
    """The first free ``0.YYMMDD.HHMM`` at or after *now* (a minute later per collision)."""
    moment = now or datetime.now(UTC)
    taken = set(session.scalars(select(Version.version).where(Version.dandiset_id == dandiset.id)))
    while version_name(moment) in taken:
        moment += timedelta(minutes=1)
    return version_name(moment)


def publish(
    archive: Archive, user: User | None, dandiset_id: str, *, now: datetime | None = None
) -> VersionInfo:
    """Publish the draft of *dandiset_id* (owners only); returns the new version."""
    with archive.db.write_session() as session:
        dandiset = get_dandiset(session, user, dandiset_id)
        require_owner(user, dandiset)
        locked = session.scalar(
            select(Dandiset)
            .where(Dandiset.id == dandiset.id)
            .with_for_update(of=Dandiset)
            .execution_options(populate_existing=True)
        )
        assert locked is not None
        dandiset = locked
        if dandiset.embargoed or dandiset.embargo_status != "open":
            raise Conflict(
                f"dandiset {dandiset.identifier} is embargoed: unembargo it first, "
                "then publish (a published version is public)"
            )
        draft = find_version(session, dandiset, DRAFT, lock=True)
        assets = list(
            session.scalars(select(Asset).where(Asset.version_id == draft.id).order_by(Asset.path))
        )
        if not assets:
            raise Conflict(
                f"the draft of dandiset {dandiset.identifier} has no assets: nothing to publish"
            )
        zarr_ids = sorted({a.zarr_id for a in assets if a.zarr_id is not None})
        for zarr_id in zarr_ids:
            # the row lock, and fresh values: the checksum pinned below is the locked one
            session.refresh(get_zarr(session, None, zarr_id, lock=True, check_read=False))
        busy = sorted(
            session.scalars(select(UploadBatch.zarr_id).where(UploadBatch.zarr_id.in_(zarr_ids)))
        )
        if busy:
            paths = [a.path for a in assets if a.zarr_id in busy]
            raise Conflict(
                f"{len(busy)} Zarr(s) of the draft have an upload batch open "
                f"({', '.join(paths[:10])}): complete or cancel them, then publish",
                detail={
                    "message": "Zarrs of the draft have an upload batch open",
                    "zarrs": [
                        {"path": a.path, "zarr_id": a.zarr_id} for a in assets if a.zarr_id in busy
                    ],
                },
            )
        moment = now or datetime.now(UTC)
        name = next_version_name(session, dandiset, moment)
        metadata = dict(draft.metadata_ or {})
        metadata.update(version=name, datePublished=moment.astimezone(UTC).isoformat())
        published = Version(dandiset_id=dandiset.id, version=name, metadata_=metadata)
        session.add(published)
        session.flush()
        stamp = utcnow()
        for asset in assets:
            session.add(
                Asset(
                    id=str(uuid.uuid4()),
                    version_id=published.id,
                    path=asset.path,
                    metadata_=computed_metadata(asset),
                    blob_id=asset.blob_id,
                    zarr_id=asset.zarr_id,
                    created_at=stamp,
                    modified_at=stamp,
                )
            )
        session.flush()
        info = version_info(session, dandiset, published)
    # A published checksum always has its manifest (the job skips it if it exists).
    for zarr_id in zarr_ids:
        queue_manifest(archive, zarr_id)
    return info
