"""Publishing a dandiset's draft as an immutable version.

A published version is a copy of the draft's asset *rows*: they reference the
same blobs and the same Zarrs (nothing in S3 is copied), with their metadata
pinned, including each Zarr's checksum and size at publication, and a pin
(:class:`~zarrchive.db.models.ZarrPin`) of each Zarr's checksum.  What the pin does
follows ``ZARRCHIVE_PUBLISHED_ZARRS``:

- ``freeze`` (the spec): every Zarr of the version is frozen for good
  (:func:`zarrchive.services.zarr_engine.zarrs.ensure_writable`); its manifest is written by the
  background job afterwards.
- ``snapshot``: the draft's Zarrs stay writable; the version reads each pinned state
  through the manifest of its checksum (:mod:`zarrchive.services.zarr_engine.snapshots`).  The
  manifests are written (or found fresh) first, and checked again under the Zarrs' locks
  in the transaction that makes the version visible: a Zarr that changed in between is
  prepared again (a few rounds, then 503).

Version names follow the DANDI Archive: ``0.YYMMDD.HHMM`` from the UTC time of
publication; when that name is taken (two publications in one minute) the
minute is advanced until it is free.

Consistency: publishing runs in one write transaction holding the dandiset's
and the draft's row locks, then every Zarr's row lock (in id order) while it
checks that no Zarr has a batch open and reads their checksums.  Zarr writes
take the same Zarr lock before :func:`ensure_writable`, so each either
completes before the publication (which then pins its result) or sees it
and is refused.

A shared asset (a Zarr of another dandiset: :mod:`zarrchive.services.zarr_engine.shared_zarrs`)
already reads one published state of that Zarr: the version pins that state (its
checksum, whose manifest the other dandiset's publication wrote) and the published copy
keeps it (:func:`~zarrchive.services.zarr_engine.shared_zarrs.carry_to_published`).  What the other
dandiset does meanwhile (a batch open, an emptied draft Zarr, a state with no manifest
yet) is none of this publication's business: those Zarrs are neither locked nor checked.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from zarrchive.config import PublishedZarrs
from zarrchive.db.models import (
    Asset,
    Dandiset,
    EmbargoStatus,
    MetadataStatus,
    UploadBatch,
    Version,
    Zarr,
    pinned_view_id,
    utcnow,
)
from zarrchive.errors import ArchiveBusy, Conflict, CorruptManifest
from zarrchive.services.dandi import audit, dois, validation, validation_jobs
from zarrchive.services.dandi.dandisets import get_dandiset
from zarrchive.services.dandi.versions import (
    DRAFT,
    VersionInfo,
    find_version,
    served_metadata,
    version_info,
)
from zarrchive.services.identity.auth import Caller, require_owner
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import shared_zarrs
from zarrchive.services.zarr_engine.snapshots import (
    add_pins,
    manifest_is_fresh,
    manifest_row,
    prepare_manifest,
)
from zarrchive.services.zarr_engine.uploads import queue_manifest
from zarrchive.services.zarr_engine.zarrs import get_zarr

log = logging.getLogger(__name__)


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


def _assets_summary(published_assets: list[dict[str, Any]]) -> dict[str, Any]:
    """dandischema's ``assetsSummary`` of the published assets; the counts alone for
    metadata dandischema cannot summarise (an archive publishing what is not valid)."""
    counted = {
        "schemaKey": "AssetsSummary",
        "numberOfBytes": sum(
            a["contentSize"] for a in published_assets if isinstance(a.get("contentSize"), int)
        ),
        "numberOfFiles": len(published_assets),
    }
    try:
        return validation.summary(published_assets)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        log.info("assetsSummary: dandischema could not summarise the assets (%s)", exc)
        return counted


#: Rounds of "prepare the manifests, then publish" before giving up (503) on Zarrs that
#: keep changing meanwhile.
PUBLISH_ROUNDS = 4


class _ZarrsMoved(Exception):
    """A Zarr changed between the preparation of its manifest and the transaction."""


def publish(
    archive: Archive, user: Caller | None, dandiset_id: str, *, now: datetime | None = None
) -> VersionInfo:
    """Publish the draft of *dandiset_id* (owners only); returns the new version."""
    mode = archive.settings.published_zarrs
    if mode == PublishedZarrs.FREEZE:
        info, zarr_ids = _publish(archive, user, dandiset_id, mode, now)
        # A published checksum always has its manifest (the job skips it if it exists).
        for zarr_id in zarr_ids:
            queue_manifest(archive, zarr_id)
        return info
    for _ in range(PUBLISH_ROUNDS):
        for zarr_id in _draft_zarr_ids(archive, user, dandiset_id):
            prepare_manifest(archive, zarr_id)
        try:
            return _publish(archive, user, dandiset_id, mode, now)[0]
        except _ZarrsMoved:
            continue
    raise ArchiveBusy(
        f"the Zarrs of dandiset {dandiset_id} kept changing while it was being published: "
        "publish again when they are at rest"
    )


def _draft_zarr_ids(archive: Archive, user: Caller | None, dandiset_id: str) -> list[str]:
    with archive.db.session() as session:
        dandiset = get_dandiset(session, user, dandiset_id)
        require_owner(user, dandiset)
        draft = find_version(session, dandiset, DRAFT)
        # the dandiset's own Zarrs: a shared one's pinned state has its manifest already
        return sorted(
            {
                z
                for z in session.scalars(
                    select(Asset.zarr_id)
                    .join(Zarr, Zarr.id == Asset.zarr_id)
                    .where(Asset.version_id == draft.id, Zarr.dandiset_id == dandiset.id)
                )
                if z is not None
            }
        )


def _check_manifests(session: Session, zarrs: list[Zarr]) -> None:
    """Under the Zarrs' locks: each has a fresh manifest of its current checksum that hashes
    to it (else :class:`_ZarrsMoved`, or a 500 for a mismatch)."""
    for zarr in zarrs:
        row = manifest_row(session, zarr.id, zarr.checksum)
        if row is None or not manifest_is_fresh(session, zarr, row):
            raise _ZarrsMoved(zarr.id)
        if row.mismatch:
            raise CorruptManifest(
                f"Zarr {zarr.id}: its S3 objects hash to {row.listing_checksum}, not to the "
                f"checksum the archive holds ({zarr.checksum}): not publishing it; an "
                f"administrator must run 'zarrchive admin fsck {zarr.id}'"
            )


def _refuse_empty_zarrs(assets: list[Asset], zarrs: list[Zarr]) -> None:
    """A Zarr asset without a file is never published.  The API lets a draft hold one
    (dandi-cli makes a new Zarr's asset before it uploads the files), so the rule is here."""
    empty = {z.id for z in zarrs if z.file_count == 0}
    paths = [a.path for a in assets if a.zarr_id in empty]
    if paths:
        raise Conflict(
            f"{len(paths)} Zarr asset(s) of the draft have no files ({', '.join(paths[:10])}): "
            "upload their files or delete those assets, then publish",
            detail={
                "message": "Zarr assets of the draft have no files",
                "zarrs": [
                    {"path": a.path, "zarr_id": a.zarr_id} for a in assets if a.zarr_id in empty
                ],
            },
        )


def _published_view(
    asset: Asset, shared: shared_zarrs.SharedState | None, mode: PublishedZarrs
) -> str | None:
    """The pinned view a Zarr asset's published copy names (as the API's ``zarr``): the
    state a snapshot-mode publication pins of its own Zarr, or the snapshot of another
    dandiset's Zarr it shares; ``None`` for a blob and a frozen Zarr (read live)."""
    if shared is not None:
        return pinned_view_id(shared.zarr_id, shared.checksum) if shared.snapshot else None
    if asset.zarr is not None and mode == PublishedZarrs.SNAPSHOT:
        return pinned_view_id(asset.zarr.id, asset.zarr.checksum)
    return None


def _publish(
    archive: Archive,
    user: Caller | None,
    dandiset_id: str,
    mode: PublishedZarrs,
    now: datetime | None,
) -> tuple[VersionInfo, list[str]]:
    with archive.db.write_session() as session:
        dandiset = get_dandiset(session, user, dandiset_id, lock=True)
        require_owner(user, dandiset)
        if dandiset.embargoed or dandiset.embargo_status != EmbargoStatus.OPEN:
            raise Conflict(
                f"dandiset {dandiset.identifier} is embargoed: unembargo it first, "
                "then publish (a published version is public)"
            )
        draft = find_version(session, dandiset, DRAFT, lock=True)
        assets = list(
            session.scalars(select(Asset).where(Asset.version_id == draft.id).order_by(Asset.path))
        )
        if archive.settings.publish_requires_valid:
            validation_jobs.publishable(archive, session, dandiset, draft)
        if not assets:
            raise Conflict(
                f"the draft of dandiset {dandiset.identifier} has no assets: nothing to publish"
            )
        shared = {a.id: state for a in assets if (state := shared_zarrs.shared_state(a))}
        own = [a for a in assets if a.id not in shared]
        zarr_ids = sorted({a.zarr_id for a in own if a.zarr_id is not None})
        zarrs = []
        for zarr_id in zarr_ids:
            # the row lock, and fresh values: the checksum pinned below is the locked one
            zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
            session.refresh(zarr)
            zarrs.append(zarr)
        busy = sorted(
            session.scalars(select(UploadBatch.zarr_id).where(UploadBatch.zarr_id.in_(zarr_ids)))
        )
        if busy:
            paths = [a.path for a in own if a.zarr_id in busy]
            raise Conflict(
                f"{len(busy)} Zarr(s) of the draft have an upload batch open "
                f"({', '.join(paths[:10])}): complete or cancel them, then publish",
                detail={
                    "message": "Zarrs of the draft have an upload batch open",
                    "zarrs": [
                        {"path": a.path, "zarr_id": a.zarr_id} for a in own if a.zarr_id in busy
                    ],
                },
            )
        _refuse_empty_zarrs(own, zarrs)
        if mode == PublishedZarrs.SNAPSHOT:
            _check_manifests(session, zarrs)
        moment = now or datetime.now(UTC)
        name = next_version_name(session, dandiset, moment)
        stamp = utcnow()
        copies = []
        for asset in assets:
            new_id = str(uuid.uuid4())
            computed = validation_jobs.asset_inputs(asset, dandiset.embargoed)[0]
            pinned = validation.published_asset(
                computed,
                asset_id=new_id,
                content_urls=validation.content_urls(
                    archive, session, asset, view=_published_view(asset, shared.get(asset.id), mode)
                ),
                embargoed=dandiset.embargoed,
                now=moment,
            )
            copies.append((new_id, asset, pinned))
        facts = validation.VersionFacts(
            dandiset.identifier,
            name,
            dandiset.embargoed,
            dandiset.created_at,
            validation.web_url(archive),
        )
        metadata = validation.populated_dandiset(
            served_metadata(dandiset, draft), facts, now=moment
        )
        metadata["assetsSummary"] = _assets_summary([c[2] for c in copies])
        doi = dois.version_published(archive, session, dandiset, name)
        if doi is not None:  # named from the start; DataCite gets it in the background
            metadata["doi"] = doi
            metadata["citation"] = validation.citation(metadata, moment.year)
        published = Version(
            dandiset_id=dandiset.id,
            version=name,
            metadata_=metadata,
            status=MetadataStatus.VALID.value,
            validated=draft.validated,
        )
        session.add(published)
        session.flush()
        for new_id, asset, pinned in copies:
            session.add(
                Asset(
                    id=new_id,
                    version_id=published.id,
                    path=asset.path,
                    metadata_=pinned,
                    blob_id=asset.blob_id,
                    zarr_id=asset.zarr_id,
                    created_at=stamp,
                    modified_at=stamp,
                    status=MetadataStatus.VALID.value,
                    validated=asset.validated,
                )
            )
        add_pins(session, published.id, zarrs, mode)
        shared_zarrs.pin_states(session, published.id, list(shared.values()))
        shared_zarrs.carry_to_published(
            session, [(asset.id, new_id) for new_id, asset, _ in copies if asset.id in shared]
        )
        audit.record(session, dandiset, user, audit.RecordType.PUBLISH_DANDISET, {"version": name})
        session.flush()
        return version_info(session, dandiset, published), zarr_ids
