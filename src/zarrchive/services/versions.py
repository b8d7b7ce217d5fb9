"""Versions of a dandiset: the mutable ``draft`` and published ``0.YYMMDD.HHMM`` versions.

Every dandiset has a draft (created with the dandiset; created on first use for
dandisets older than versions).  Published versions never change: their
metadata and their assets' metadata are pinned at publication.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.db.models import Asset, Blob, Dandiset, User, Version, Zarr, utcnow
from zarrchive.errors import InvalidInput, NotFound, PermissionDenied
from zarrchive.services.auth import require_owner
from zarrchive.services.dandisets import get_dandiset

DRAFT = "draft"


@dataclass(frozen=True)
class ZarrAtVersion:
    """A Zarr referenced by an asset of a version, with its checksum there."""

    zarr_id: str
    path: str
    checksum: str
    file_count: int
    size: int


@dataclass(frozen=True)
class VersionInfo:
    dandiset: str
    version: str
    metadata: dict[str, Any]
    asset_count: int
    size: int
    zarrs: list[ZarrAtVersion]
    created: datetime
    modified: datetime


def ensure_draft(session: Session, dandiset: Dandiset) -> Version:
    """The draft of *dandiset*, created if it has none yet."""
    draft = session.scalar(
        select(Version).where(Version.dandiset_id == dandiset.id, Version.version == DRAFT)
    )
    if draft is not None:
        return draft
    try:
        with session.begin_nested():
            draft = Version(
                dandiset_id=dandiset.id, version=DRAFT, metadata_={"name": dandiset.name}
            )
            session.add(draft)
    except IntegrityError:  # created concurrently
        draft = session.scalar(
            select(Version).where(Version.dandiset_id == dandiset.id, Version.version == DRAFT)
        )
        assert draft is not None
    return draft


def find_version(
    session: Session, dandiset: Dandiset, version: str, *, lock: bool = False
) -> Version:
    """*version* (``draft`` or a published one) of *dandiset*, else :class:`NotFound`."""
    if version == DRAFT:
        draft = ensure_draft(session, dandiset)
        if lock:
            session.scalar(
                select(Version)
                .where(Version.id == draft.id)
                .with_for_update(of=Version)
                .execution_options(populate_existing=True)
            )
        return draft
    query = select(Version).where(Version.dandiset_id == dandiset.id, Version.version == version)
    if lock:
        query = query.with_for_update(of=Version)
    found = session.scalar(query)
    if found is None:
        raise NotFound(f"dandiset {dandiset.identifier} has no version {version!r}")
    return found


def require_draft(version: Version, dandiset: Dandiset, what: str) -> None:
    """Refuse changes to a published version (403)."""
    if not version.is_draft:
        raise PermissionDenied(
            f"version {version.version} of dandiset {dandiset.identifier} is published and "
            f"can no longer change: {what} the draft instead"
        )


def version_zarrs(session: Session, version: Version) -> list[ZarrAtVersion]:
    """The Zarrs of *version*'s assets: live values in the draft, pinned ones if published."""
    rows = session.execute(
        select(Asset.path, Asset.metadata_, Zarr)
        .join(Zarr, Zarr.id == Asset.zarr_id)
        .where(Asset.version_id == version.id)
        .order_by(Asset.path)
    ).all()
    result = []
    for path, metadata, zarr in rows:
        if version.is_draft:
            result.append(ZarrAtVersion(zarr.id, path, zarr.checksum, zarr.file_count, zarr.size))
        else:
            digest = (metadata.get("digest") or {}).get("dandi:dandi-zarr-checksum", "")
            count = _file_count(digest)
            result.append(
                ZarrAtVersion(zarr.id, path, digest, count, int(metadata.get("contentSize", 0)))
            )
    return result


def _file_count(checksum: str) -> int:
    """The file count in a Dandi Zarr checksum ``{md5}-{count}--{size}``."""
    try:
        return int(checksum.split("-")[1])
    except (IndexError, ValueError):
        return 0


def version_info(session: Session, dandiset: Dandiset, version: Version) -> VersionInfo:
    count = session.scalar(select(func.count()).where(Asset.version_id == version.id)) or 0
    blob_size = (
        session.scalar(
            select(func.coalesce(func.sum(Blob.size), 0))
            .join(Asset, Asset.blob_id == Blob.id)
            .where(Asset.version_id == version.id)
        )
        or 0
    )
    zarrs = version_zarrs(session, version)
    return VersionInfo(
        dandiset=dandiset.identifier,
        version=version.version,
        metadata=dict(version.metadata_ or {}),
        asset_count=int(count),
        size=int(blob_size) + sum(z.size for z in zarrs),
        zarrs=zarrs,
        created=version.created_at,
        modified=version.modified_at,
    )


def get_version_info(
    session: Session, user: User | None, dandiset_id: str, version: str
) -> VersionInfo:
    dandiset = get_dandiset(session, user, dandiset_id)
    return version_info(session, dandiset, find_version(session, dandiset, version))


def list_versions(session: Session, user: User | None, dandiset_id: str) -> list[VersionInfo]:
    """Every published version, oldest first, then the draft."""
    dandiset = get_dandiset(session, user, dandiset_id)
    ensure_draft(session, dandiset)
    versions = session.scalars(
        select(Version).where(Version.dandiset_id == dandiset.id).order_by(Version.id)
    ).all()
    ordered = [v for v in versions if not v.is_draft] + [v for v in versions if v.is_draft]
    return [version_info(session, dandiset, v) for v in ordered]


def update_draft_metadata(
    session: Session, user: User | None, dandiset_id: str, version: str, metadata: dict[str, Any]
) -> VersionInfo:
    """Replace the draft's metadata (owners only; published versions: 403)."""
    dandiset = get_dandiset(session, user, dandiset_id)
    require_owner(user, dandiset)
    found = find_version(session, dandiset, version, lock=True)
    require_draft(found, dandiset, "change the metadata of")
    if not isinstance(metadata, dict):
        raise InvalidInput("the metadata must be a JSON object")
    found.metadata_ = dict(metadata)
    found.modified_at = utcnow()
    session.flush()
    return version_info(session, dandiset, found)
