"""Embargo: everything of an embargoed dandiset lives in the private bucket.

The archive has two buckets: the public one is world-readable (anonymous GET),
the embargo bucket is not.  An embargoed dandiset's Zarr objects, ``.checksum``
nodes, manifests and blobs are written to the embargo bucket, and the API
answers 404 about them to anyone but owners and admins.  This works the same on
AWS S3 (a bucket policy granting ``s3:GetObject`` to ``*`` on the public bucket)
and on SeaweedFS (an ``anonymous`` identity with ``Read:{public bucket}``).

Unembargoing moves the objects: the dandiset is marked ``unembargoing`` (its
Zarrs refuse writes), every current object is copied server-side to the public
bucket, the dandiset flips to public, manifests are regenerated (S3 version ids
change with the copy) and the embargo bucket's copies are purged.  Each step is
idempotent, so an interrupted move is finished by running it again.
"""

from __future__ import annotations

import logging
import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from zarrchive.db.models import Asset, Blob, Dandiset, User, Version, Zarr, ZarrManifest
from zarrchive.errors import Conflict
from zarrchive.services.auth import require_owner
from zarrchive.services.dandisets import get_dandiset
from zarrchive.services.runtime import Archive, current_archive
from zarrchive.services.uploads import open_batch, queue_manifest
from zarrchive.storage.keys import blob_key, checksum_prefix, manifest_prefix, zarr_prefix

log = logging.getLogger(__name__)

UNEMBARGO_JOB = "zarrchive.services.embargo:unembargo_job"


def embargo_status(dandiset: Dandiset) -> str:
    """``embargoed``, ``unembargoing`` or ``open``."""
    if dandiset.embargo_status == "unembargoing":
        return "unembargoing"
    return "embargoed" if dandiset.embargoed else "open"


def start_unembargo(archive: Archive, user: User | None, identifier: str) -> Dandiset:
    """Begin making an embargoed dandiset public (owners); the move runs as a job."""
    with archive.db.write_session() as session:
        dandiset = get_dandiset(session, user, identifier)
        require_owner(user, dandiset)
        if not dandiset.embargoed:
            raise Conflict(f"dandiset {dandiset.identifier} is not embargoed")
        if dandiset.embargo_status != "unembargoing":
            zarrs = session.scalars(
                select(Zarr).where(Zarr.dandiset_id == dandiset.id).with_for_update(of=Zarr)
            )
            busy = [z.id for z in zarrs if open_batch(session, z) is not None]
            if busy:
                raise Conflict(
                    f"Zarrs {', '.join(busy)} have upload batches open: complete or cancel "
                    "them, then unembargo"
                )
            dandiset.embargo_status = "unembargoing"
        number = dandiset.id
    if archive.jobs is not None:
        archive.jobs.enqueue(UNEMBARGO_JOB, {"dandiset_id": number}, key=f"unembargo:{number}")
    else:
        move_to_public(archive, number)
    with archive.db.session() as session:
        return get_dandiset(session, user, number)


def _prefixes(zarr_ids: list[str]) -> list[str]:
    return [p(z) for z in zarr_ids for p in (zarr_prefix, checksum_prefix)]


def move_to_public(archive: Archive, dandiset_id: int) -> None:
    """Copy the dandiset's objects to the public bucket, flip it public, purge the copies.

    A blob that an other (still embargoed) dandiset uses too is copied, not moved: this
    dandiset's assets get a public blob of their own and the other keeps its private one.
    """
    with archive.db.session() as session:
        dandiset = session.get(Dandiset, dandiset_id)
        if dandiset is None:
            return
        zarr_ids = list(session.scalars(select(Zarr.id).where(Zarr.dandiset_id == dandiset_id)))
        blobs = _dandiset_blobs(session, dandiset_id)
        shared = {b.id for b in blobs if _used_elsewhere(session, b, dandiset_id)}
        moving = dandiset.embargo_status == "unembargoing"
    source, target = archive.embargo_store, archive.store
    if moving:
        keys = [o.key for p in _prefixes(zarr_ids) for o in source.iter_objects(p)]
        keys += [b.key for b in blobs if b.id not in shared]
        target.map(lambda key: target.copy_from(source, key), keys)
        copies = {b.id: str(uuid.uuid4()) for b in blobs if b.id in shared}
        target.map(
            lambda b: target.copy_from(source, blob_key(copies[b.id]), b.key),
            [b for b in blobs if b.id in shared],
        )
        with archive.db.write_session() as session:
            dandiset = session.get(Dandiset, dandiset_id)
            assert dandiset is not None
            dandiset.embargoed = False
            dandiset.embargo_status = "open"
            for blob in session.scalars(select(Blob).where(Blob.id.in_([b.id for b in blobs]))):
                if blob.id in shared:
                    _copy_blob(session, blob, copies[blob.id], dandiset_id)
                else:
                    _publish_blob(session, blob)
            # version ids changed with the copy: manifests are written anew
            for row in session.scalars(
                select(ZarrManifest).where(ZarrManifest.zarr_id.in_(zarr_ids))
            ):
                session.delete(row)
        log.info("dandiset %06d is public: %d objects moved", dandiset_id, len(keys))
    for prefix in [*_prefixes(zarr_ids), *(manifest_prefix(z) for z in zarr_ids)]:
        source.purge(prefix)
    for blob in blobs:
        if blob.id not in shared:
            source.purge(blob.key)
    for zarr_id in zarr_ids:
        queue_manifest(archive, zarr_id)


def _dandiset_blobs(session: Session, dandiset_id: int) -> list[Blob]:
    query = (
        select(Blob)
        .join(Asset, Asset.blob_id == Blob.id)
        .join(Version, Version.id == Asset.version_id)
        .where(Version.dandiset_id == dandiset_id, Blob.embargoed.is_(True))
        .distinct()
    )
    return list(session.scalars(query))


def _publish_blob(session: Session, blob: Blob) -> None:
    """Mark *blob* public, or merge it into the public blob of the same content."""
    twin = session.scalar(
        select(Blob).where(Blob.md5 == blob.md5, Blob.size == blob.size, Blob.embargoed.is_(False))
    )
    if twin is None:
        blob.embargoed = False
        return
    for asset in session.scalars(select(Asset).where(Asset.blob_id == blob.id)):
        asset.blob_id = twin.id
    session.flush()
    session.delete(blob)


def _used_elsewhere(session: Session, blob: Blob, dandiset_id: int) -> bool:
    query = (
        select(Asset.id)
        .join(Version, Version.id == Asset.version_id)
        .where(Asset.blob_id == blob.id, Version.dandiset_id != dandiset_id)
        .limit(1)
    )
    return session.scalar(query) is not None


def _copy_blob(session: Session, blob: Blob, copy_id: str, dandiset_id: int) -> None:
    """Point this dandiset's assets at a public blob with *blob*'s content."""
    twin = session.scalar(
        select(Blob).where(Blob.md5 == blob.md5, Blob.size == blob.size, Blob.embargoed.is_(False))
    )
    if twin is None:
        twin = Blob(
            id=copy_id, md5=blob.md5, size=blob.size, key=blob_key(copy_id), embargoed=False
        )
        session.add(twin)
        session.flush()
    mine = select(Version.id).where(Version.dandiset_id == dandiset_id)
    for asset in session.scalars(
        select(Asset).where(Asset.blob_id == blob.id, Asset.version_id.in_(mine))
    ):
        asset.blob_id = twin.id


def unembargo_job(dandiset_id: int) -> None:
    """The background job (see :mod:`zarrchive.jobs`)."""
    move_to_public(current_archive(), dandiset_id)
