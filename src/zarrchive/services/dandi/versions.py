"""Versions of a dandiset: the mutable ``draft`` and published ``0.YYMMDD.HHMM`` versions.

Every dandiset has a draft (created with the dandiset; created on first use for
dandisets older than versions).  Published versions never change: their
metadata and their assets' metadata are pinned at publication.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from zarrchive.checksum.digest import ZarrDigest
from zarrchive.db.models import Asset, Blob, Dandiset, MetadataStatus, Version, Zarr, utcnow
from zarrchive.errors import InvalidInput, NotFound, PermissionDenied
from zarrchive.services.dandi import audit, search
from zarrchive.services.dandi.dandiset_rows import DRAFT as DRAFT
from zarrchive.services.dandi.dandiset_rows import draft_metadata, get_dandiset
from zarrchive.services.dandi.dandiset_rows import ensure_draft as ensure_draft
from zarrchive.services.dandi.dandiset_rows import served_metadata as served_metadata
from zarrchive.services.dandi.embargo_dates import embargo_access
from zarrchive.services.dandi.validation import (
    DraftValidation,
    mark_pending,
    request_validation,
    stored_validation,
)
from zarrchive.services.identity.auth import Caller, require_owner
from zarrchive.services.zarr_engine import shared_zarrs


class VersionStatus(StrEnum):
    """DANDI's version statuses: a draft is ``Pending`` after a change, ``Validating``, then
    ``Valid`` or ``Invalid`` (:mod:`zarrchive.services.dandi.validation`) or, while valid and
    unchanged since its last publication, ``Published``; published versions are
    ``Published``."""

    PENDING = "Pending"
    VALIDATING = "Validating"
    VALID = "Valid"
    INVALID = "Invalid"
    PUBLISHING = "Publishing"
    PUBLISHED = "Published"


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
    name: str
    status: VersionStatus
    metadata: dict[str, Any]
    asset_count: int
    size: int
    zarrs: list[ZarrAtVersion]
    created: datetime
    modified: datetime
    #: The validation state (filled in where ``/info/`` is answered).
    validation: DraftValidation | None = None

    @property
    def contact_person(self) -> str:
        return contact_person(self.metadata)


def contact_person(metadata: dict[str, Any]) -> str:
    """The name of the first contributor with DANDI's ``dcite:ContactPerson`` role."""
    contributors = metadata.get("contributor")
    if not isinstance(contributors, list):
        return ""
    for person in contributors:
        if isinstance(person, dict) and "dcite:ContactPerson" in (person.get("roleName") or []):
            return str(person.get("name") or "")
    return ""


def version_status(session: Session, version: Version) -> VersionStatus:
    if not version.is_draft:
        return VersionStatus.PUBLISHED
    latest = session.scalar(
        select(func.max(Version.created_at)).where(
            Version.dandiset_id == version.dandiset_id, Version.version != DRAFT
        )
    )
    if latest is not None and version.modified_at <= latest:
        return VersionStatus.PUBLISHED
    status = VersionStatus(version.status or VersionStatus.PENDING.value)
    if status is not VersionStatus.VALID:
        return status
    return _with_assets(session, version)


def _with_assets(session: Session, version: Version) -> VersionStatus:
    """A draft whose own metadata is valid is ``Valid`` only when every asset's is too:
    ``Invalid`` while one is invalid, else ``Pending`` while one is not validated yet (the
    status never says ``Valid`` while the draft's info lists an error)."""
    others = set(
        session.scalars(
            select(Asset.status)
            .where(Asset.version_id == version.id, Asset.status != MetadataStatus.VALID.value)
            .distinct()
        )
    )
    if MetadataStatus.INVALID.value in others:
        return VersionStatus.INVALID
    if others:
        return VersionStatus.PENDING
    return VersionStatus.VALID


def latest_published(session: Session, dandiset: Dandiset) -> Version | None:
    return session.scalar(
        select(Version)
        .where(Version.dandiset_id == dandiset.id, Version.version != DRAFT)
        .order_by(Version.created_at.desc(), Version.id.desc())
        .limit(1)
    )


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
    """The Zarrs of *version*'s assets: live values in the draft, pinned ones if published
    (and the pinned state of another dandiset's Zarr in the draft too)."""
    rows = session.execute(
        select(Asset.id, Asset.path, Asset.metadata_, Zarr)
        .join(Zarr, Zarr.id == Asset.zarr_id)
        .where(Asset.version_id == version.id)
        .order_by(Asset.path)
    ).all()
    # another dandiset's Zarr: the state the asset pinned, never the Zarr's live values
    shared = shared_zarrs.version_states(session, version) if version.is_draft else {}
    result = []
    for asset_id, path, metadata, zarr in rows:
        state = shared.get(asset_id)
        if state is not None:
            result.append(
                ZarrAtVersion(zarr.id, path, state.checksum, state.file_count, state.size)
            )
        elif version.is_draft:
            result.append(ZarrAtVersion(zarr.id, path, zarr.checksum, zarr.file_count, zarr.size))
        else:
            digest = (metadata.get("digest") or {}).get("dandi:dandi-zarr-checksum", "")
            count = ZarrDigest.totals(digest)[0]
            result.append(
                ZarrAtVersion(zarr.id, path, digest, count, int(metadata.get("contentSize", 0)))
            )
    return result


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
    metadata = served_metadata(dandiset, version)
    return VersionInfo(
        dandiset=dandiset.identifier,
        version=version.version,
        name=str(metadata.get("name") or dandiset.name),
        status=version_status(session, version),
        metadata=metadata,
        asset_count=int(count),
        size=int(blob_size) + sum(z.size for z in zarrs),
        zarrs=zarrs,
        created=version.created_at,
        modified=version.modified_at,
    )


def get_version_info(
    session: Session, user: Caller | None, dandiset_id: str, version: str
) -> VersionInfo:
    dandiset = get_dandiset(session, user, dandiset_id)
    return version_info(session, dandiset, find_version(session, dandiset, version))


def with_validation(session: Session, info: VersionInfo, version: Version) -> VersionInfo:
    """*info* with the version's validation state (what ``/info/`` lists)."""
    return replace(info, validation=stored_validation(session, version))


def get_version_detail(
    session: Session, user: Caller | None, dandiset_id: str, version: str
) -> VersionInfo:
    """The version's info with its validation state (``/info/``)."""
    dandiset = get_dandiset(session, user, dandiset_id)
    found = find_version(session, dandiset, version)
    if found.is_draft and found.status in (MetadataStatus.PENDING, MetadataStatus.VALIDATING):
        request_validation(session, dandiset.id)  # again: a job lost in a crash (coalesced)
    return with_validation(session, version_info(session, dandiset, found), found)


VERSION_ORDERINGS = ("created", "modified", "version")


def list_versions(
    session: Session, user: Caller | None, dandiset_id: str, order: str | None = None
) -> list[VersionInfo]:
    """The dandiset's versions: by default every published version, oldest first, then the
    draft; DANDI's ``order`` (``created``, ``modified``, ``version``, ``-`` to reverse)."""
    dandiset = get_dandiset(session, user, dandiset_id)
    ensure_draft(session, dandiset)
    versions = session.scalars(
        select(Version).where(Version.dandiset_id == dandiset.id).order_by(Version.id)
    ).all()
    ordered = [v for v in versions if not v.is_draft] + [v for v in versions if v.is_draft]
    if order:
        field = order.lstrip("-")
        if field not in VERSION_ORDERINGS:
            raise InvalidInput(
                f"unknown order {order!r}: use {', '.join(VERSION_ORDERINGS)} ('-' to reverse)"
            )
        keys = {
            "created": lambda v: (v.created_at, v.id),
            "modified": lambda v: (v.modified_at, v.id),
            "version": lambda v: (v.version, v.id),
        }
        ordered = sorted(versions, key=keys[field], reverse=order.startswith("-"))
    return [version_info(session, dandiset, v) for v in ordered]


def update_draft_metadata(
    session: Session,
    user: Caller | None,
    dandiset_id: str,
    version: str,
    metadata: dict[str, Any],
    name: str | None = None,
) -> VersionInfo:
    """Replace the draft's metadata (owners only; published versions: 403)."""
    dandiset = get_dandiset(session, user, dandiset_id)
    require_owner(user, dandiset)
    found = find_version(session, dandiset, version, lock=True)
    require_draft(found, dandiset, "change the metadata of")
    if not isinstance(metadata, dict):
        raise InvalidInput("the metadata must be a JSON object")
    if name is not None and (not isinstance(name, str) or not 1 <= len(name.strip()) <= 300):
        raise InvalidInput("a dandiset name must have 1 to 300 characters")
    new_name = (name or str(metadata.get("name") or "") or dandiset.name).strip()
    found.metadata_ = draft_metadata(dandiset.identifier, new_name, metadata)
    if dandiset.embargoed or dandiset.embargo_end_date is not None:
        # the archive's, as DANDI rewrites it on every save: the embargo it enforces
        found.metadata_["access"] = embargo_access(dandiset.embargoed, dandiset.embargo_end_date)
    dandiset.name = new_name
    found.modified_at = utcnow()
    mark_pending(session, found)
    session.flush()
    search.index_dandiset(session, dandiset.id, new_name, found.metadata_)
    audit.record(
        session, dandiset, user, audit.RecordType.UPDATE_METADATA, {"metadata": found.metadata_}
    )
    return with_validation(session, version_info(session, dandiset, found), found)
