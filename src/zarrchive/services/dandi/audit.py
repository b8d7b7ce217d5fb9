"""The audit trail: every change of a dandiset, who made it, when and what (DANDI's audit
records: ``record_type`` and ``details`` as DANDI writes them).

A record is written in the transaction of the change it records, so a committed change always
has its record and a rolled-back one none ("never loses a change").  Writing it cannot fail
the change: the details are bounded (an uploader's metadata is hostile: beyond
:data:`MAX_DETAILS` characters of JSON it is replaced by its size and sha256) and the
insert runs in a savepoint whose failure is logged, not raised.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from zarrchive.db.models import Asset, AuditRecord, Dandiset
from zarrchive.errors import InvalidInput, PermissionDenied
from zarrchive.services.identity.auth import Caller, is_owner, refuse_unless_approved, require_user

log = logging.getLogger(__name__)

#: The longest JSON of a record's details; larger values are summarised.
MAX_DETAILS = 256 * 1024
#: Records per page of ``GET /api/dandisets/{id}/audit/``.
MAX_PAGE_SIZE = 1000
#: Paths listed in a Zarr batch's record (the count is always given).
MAX_PATHS = 1000


class RecordType(StrEnum):
    """DANDI's audit record types."""

    CREATE_DANDISET = "create_dandiset"
    CHANGE_OWNERS = "change_owners"
    #: not DANDI's: the dandiset's reviewers changed (details as ``change_owners``'s)
    CHANGE_REVIEWERS = "change_reviewers"
    UPDATE_METADATA = "update_metadata"
    ADD_ASSET = "add_asset"
    UPDATE_ASSET = "update_asset"
    REMOVE_ASSET = "remove_asset"
    CREATE_ZARR = "create_zarr"
    UPLOAD_ZARR_CHUNKS = "upload_zarr_chunks"
    DELETE_ZARR_CHUNKS = "delete_zarr_chunks"
    FINALIZE_ZARR = "finalize_zarr"
    UNEMBARGO_DANDISET = "unembargo_dandiset"
    PUBLISH_DANDISET = "publish_dandiset"
    DELETE_DANDISET = "delete_dandiset"
    #: out of the trash (:mod:`zarrchive.services.dandi.trash`)
    RESTORE_ASSET = "restore_asset"
    RESTORE_DANDISET = "restore_dandiset"
    #: not DANDI's: a Zarr rolled back to an earlier checksum (:mod:`~.zarr_restore`)
    RESTORE_ZARR = "restore_zarr"


def bounded(value: Any) -> Any:
    """*value*, or if its JSON is longer than :data:`MAX_DETAILS`, a summary of it."""
    text = json.dumps(value, sort_keys=True, default=str)
    if len(text) <= MAX_DETAILS:
        return value
    return {
        "truncated": True,
        "json_characters": len(text),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }


def record(
    session: Session,
    dandiset: Dandiset | int,
    user: Caller | None,
    record_type: RecordType,
    details: dict[str, Any],
) -> None:
    """Record a change of *dandiset* by *user* in the caller's transaction (see the module).
    An administrator who does not own the dandiset is recorded ``admin``."""
    dandiset_id = dandiset if isinstance(dandiset, int) else dandiset.id
    admin = False
    if user is not None and user.is_admin and isinstance(dandiset, Dandiset):
        admin = not any(o.id == user.id for o in dandiset.owners)
    row = AuditRecord(
        dandiset_id=dandiset_id,
        username=user.username if user is not None else "",
        user_email="",
        user_fullname="",
        admin=admin,
        record_type=record_type.value,
        details={k: bounded(v) for k, v in details.items()},
    )
    try:
        with session.begin_nested():
            session.add(row)
    except SQLAlchemyError:
        log.exception("could not record %s of dandiset %s", record_type, dandiset_id)


def asset_details(asset: Asset) -> dict[str, Any]:
    """DANDI's details of an added or changed asset."""
    checksum = (asset.blob.etag if asset.blob is not None else None) or (
        asset.zarr.checksum if asset.zarr is not None else None
    )
    size = (
        asset.blob.size
        if asset.blob is not None
        else (asset.zarr.size if asset.zarr is not None else 0)
    )
    return {
        "path": asset.path,
        "size": size,
        "asset_blob_id": asset.blob_id,
        "zarr_archive_id": asset.zarr_id,
        "asset_id": asset.id,
        "checksum": checksum,
        "metadata": asset.metadata_,
    }


def zarr_paths(zarr_id: str, paths: list[str]) -> dict[str, Any]:
    """The details of a Zarr batch applied (``upload_zarr_chunks``) or of files deleted
    (``delete_zarr_chunks``): the Zarr and the paths (the first :data:`MAX_PATHS`)."""
    return {"zarr_id": zarr_id, "paths": paths[:MAX_PATHS], "path_count": len(paths)}


@dataclass(frozen=True)
class AuditEntry:
    """One record, in DANDI's shape."""

    id: int
    timestamp: datetime
    dandiset: str
    username: str
    user_email: str
    user_fullname: str
    admin: bool
    record_type: str
    details: dict[str, Any]


def list_records(
    session: Session,
    user: Caller | None,
    dandiset: Dandiset,
    *,
    offset: int = 0,
    limit: int = 100,
    record_type: str | None = None,
) -> tuple[int, list[AuditEntry]]:
    """``(count, page)`` of the records of *dandiset* (one *user* may see: see
    :func:`~zarrchive.services.dandi.dandisets.get_dandiset`), oldest first (owners and admins)."""
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidInput(f"page_size must be between 1 and {MAX_PAGE_SIZE}")
    reader = require_user(user)
    refuse_unless_approved(reader)
    if not may_read(reader, dandiset):
        raise PermissionDenied(
            f"user {reader.username!r} does not own dandiset {dandiset.identifier}: only its "
            "owners and admins may read its audit trail"
        )
    condition = AuditRecord.dandiset_id == dandiset.id
    if record_type:
        try:
            condition = condition & (AuditRecord.record_type == RecordType(record_type).value)
        except ValueError:
            raise InvalidInput(
                f"unknown record_type {record_type[:40]!r}: use one of "
                + ", ".join(t.value for t in RecordType)
            ) from None
    count = session.scalar(select(func.count()).select_from(AuditRecord).where(condition)) or 0
    rows = session.scalars(
        select(AuditRecord)
        .where(condition)
        .order_by(AuditRecord.timestamp, AuditRecord.id)
        .offset(offset)
        .limit(limit)
    )
    return int(count), [
        AuditEntry(
            id=r.id,
            timestamp=r.timestamp,
            dandiset=dandiset.identifier,
            username=r.username,
            user_email=r.user_email,
            user_fullname=r.user_fullname,
            admin=r.admin,
            record_type=r.record_type,
            details=r.details,
        )
        for r in rows
    ]


def may_read(user: Caller | None, dandiset: Dandiset) -> bool:
    """Owners and admins read the audit trail, with keys of any scope (reviewers do not:
    they read the dandiset, not who changed it)."""
    return is_owner(user, dandiset)
