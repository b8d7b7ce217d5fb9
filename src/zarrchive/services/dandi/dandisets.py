"""Dandisets: creation (with DANDI's metadata), listing with DANDI's filters, deletion."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from zarrchive.db.models import Asset, Dandiset, DandisetOwner, EmbargoStatus, Version, Zarr
from zarrchive.errors import Conflict, InvalidInput
from zarrchive.services.dandi import audit, dois, search, trash
from zarrchive.services.dandi.dandiset_rows import DRAFT, draft_metadata

# the lookups live in dandiset_rows (below trash, dois and versions); named here too
from zarrchive.services.dandi.dandiset_rows import get_dandiset as get_dandiset
from zarrchive.services.dandi.dandiset_rows import parse_identifier as parse_identifier
from zarrchive.services.dandi.embargo_dates import embargo_access
from zarrchive.services.dandi.validation import request_validation, schema_version
from zarrchive.services.identity.auth import (
    Caller,
    readable_dandisets,
    require_owner,
    require_user,
    require_writer,
    user_row,
)


def create_dandiset(
    session: Session,
    user: Caller | None,
    name: str,
    *,
    embargoed: bool = False,
    metadata: dict[str, Any] | None = None,
    embargo_end: date | None = None,
    funder: tuple[str, str] | None = None,
) -> Dandiset:
    """A new dandiset owned by *user*; identifiers are sequential: ``000001``...

    An embargoed one ends its embargo on *embargo_end* (checked by the caller:
    :func:`~zarrchive.services.dandi.embargo_dates.embargo_end_date`), shown as its draft's
    ``access[0].embargoedUntil``; *funder* (a funding source and an award number) is added
    to its contributors as DANDI adds it."""
    caller = require_writer(user)
    if not isinstance(name, str):
        raise InvalidInput("a dandiset name must be a string")
    name = name.strip()
    if not name or len(name) > 300:
        raise InvalidInput("a dandiset name must have 1 to 300 characters")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidInput("the dandiset's metadata must be a JSON object")
    # as DANDI creates a draft: of the current schema unless the metadata says otherwise
    metadata = {"schemaKey": "Dandiset", "schemaVersion": schema_version(), **(metadata or {})}
    if embargoed:  # as DANDI: the access of an embargoed draft says until when
        metadata["access"] = embargo_access(True, embargo_end)
        if funder is not None:
            metadata["contributor"] = [*_contributors(metadata), _funder(*funder)]
    dandiset = Dandiset(name=name, embargoed=embargoed, embargo_end_date=embargo_end)
    dandiset.owners.append(user_row(session, caller))
    session.add(dandiset)
    session.flush()
    session.add(
        Version(
            dandiset_id=dandiset.id,
            version=DRAFT,
            metadata_=draft_metadata(dandiset.identifier, name, metadata),
        )
    )
    session.flush()
    request_validation(session, dandiset.id)
    stored = draft_metadata(dandiset.identifier, name, metadata)
    search.index_dandiset(session, dandiset.id, name, stored)
    audit.record(
        session,
        dandiset,
        user,
        audit.RecordType.CREATE_DANDISET,
        {"metadata": stored, "embargoed": embargoed},
    )
    dois.dandiset_created(session, dandiset)
    return dandiset


def _contributors(metadata: dict[str, Any]) -> list[Any]:
    given = metadata.get("contributor")
    return list(given) if isinstance(given, list) else []


def _funder(source: str, award: str) -> dict[str, Any]:
    """DANDI's contributor of an embargoed dandiset's funding source and award."""
    return {
        "schemaKey": "Organization",
        "name": source,
        "awardNumber": award,
        "roleName": ["dcite:Funder"],
        "includeInCitation": False,
    }


class Ordering(StrEnum):
    """DANDI's ``?ordering=`` of dandisets (``-`` before a field reverses it)."""

    ID = "id"
    NAME = "name"
    MODIFIED = "modified"
    CREATED = "created"


@dataclass(frozen=True)
class DandisetFilter:
    """DANDI's filters of ``GET /api/dandisets/``."""

    #: include dandisets without a published version (DANDI's default: yes)
    draft: bool = True
    #: include dandisets whose draft has no asset (DANDI's default: yes)
    empty: bool = True
    #: include embargoed dandisets the caller may see (DANDI's default: no)
    embargoed: bool = False
    #: only the caller's own (``user=me``)
    mine: bool = False
    search: str | None = None
    ordering: str = "id"
    #: only the deleted ones (in the trash) the caller owns (admins: all); not DANDI's
    deleted: bool = False


def list_dandisets(
    session: Session, user: Caller | None, filters: DandisetFilter, *, offset: int, limit: int
) -> tuple[int, list[Dandiset]]:
    """``(count, page)`` of the dandisets *user* may see that pass *filters*."""
    condition: ColumnElement[bool] = readable_dandisets(user) & Dandiset.deleted_at.is_(None)
    if filters.deleted:
        caller = require_user(user)
        condition = Dandiset.deleted_at.is_not(None)
        if not caller.is_admin:
            mine = select(DandisetOwner.dandiset_id).where(DandisetOwner.user_id == caller.id)
            condition = condition & Dandiset.id.in_(mine)
    elif not filters.embargoed:
        condition = condition & Dandiset.embargoed.is_(False)
    if filters.mine:
        owner = require_user(user)
        owned = select(DandisetOwner.dandiset_id).where(DandisetOwner.user_id == owner.id)
        condition = condition & Dandiset.id.in_(owned)
    if not filters.draft:
        published = select(Version.dandiset_id).where(Version.version != DRAFT)
        condition = condition & Dandiset.id.in_(published)
    if not filters.empty:
        with_assets = (
            select(Version.dandiset_id)
            .join(Asset, Asset.version_id == Version.id)
            .where(Version.version == DRAFT)
        )
        condition = condition & Dandiset.id.in_(with_assets)
    ranks: dict[int, float] | None = None
    if filters.search and filters.search.strip():
        words = filters.search.strip()
        if re.fullmatch(r"[0-9]{1,9}", words):  # an identifier (ASCII digits, in range)
            condition = condition & (Dandiset.id == int(words))
        else:
            ranks = search.matches(session, words)
            # and, as before full-text search, any name containing the text
            for found_id in session.scalars(
                select(Dandiset.id).where(
                    func.lower(Dandiset.name).contains(words.lower(), autoescape=True)
                )
            ):
                ranks.setdefault(found_id, search.NAME_SUBSTRING_RANK)
    field = filters.ordering.lstrip("-")
    try:
        ordering = Ordering(field)
    except ValueError:
        raise InvalidInput(
            f"unknown ordering {filters.ordering!r}: use one of "
            + ", ".join(o.value for o in Ordering)
            + " (prefix '-' to reverse)"
        ) from None
    draft_modified = (
        select(Version.modified_at)
        .where(Version.dandiset_id == Dandiset.id, Version.version == DRAFT)
        .scalar_subquery()
    )
    column: Any = {
        Ordering.ID: Dandiset.id,
        Ordering.NAME: Dandiset.name,
        Ordering.CREATED: Dandiset.created_at,
        Ordering.MODIFIED: func.coalesce(draft_modified, Dandiset.created_at),
    }[ordering]
    reverse = filters.ordering.startswith("-")
    if ranks is not None:  # a search: by rank unless an ordering is asked for
        ids = set(session.scalars(select(Dandiset.id).where(condition)))
        found = [i for i in ranks if i in ids]
        if filters.ordering == "id":
            page_ids = search.ranked(found, ranks)[offset : offset + limit]
            loaded = {
                d.id: d for d in session.scalars(select(Dandiset).where(Dandiset.id.in_(page_ids)))
            }
            return len(found), [loaded[i] for i in page_ids]
        condition = condition & Dandiset.id.in_(found)
    count = session.scalar(select(func.count()).select_from(Dandiset).where(condition)) or 0
    rows = session.scalars(
        select(Dandiset)
        .where(condition)
        .order_by(column.desc() if reverse else column, Dandiset.id)
        .offset(offset)
        .limit(limit)
    ).all()
    return int(count), list(rows)


def delete_dandiset(session: Session, user: Caller | None, identifier: str) -> None:
    """Delete a dandiset that was never published and holds no Zarr (owners only): it goes
    to the trash with its draft's assets (:mod:`zarrchive.services.dandi.trash`: restorable for
    ``ZARRCHIVE_TRASH_DAYS``, then purged by ``admin gc``)."""
    dandiset = get_dandiset(session, user, identifier)
    require_owner(user, dandiset)
    if dandiset.embargo_status == EmbargoStatus.UNEMBARGOING:
        raise Conflict(f"dandiset {dandiset.identifier} is being unembargoed: try again later")
    published = session.scalar(
        select(Version.version).where(Version.dandiset_id == dandiset.id, Version.version != DRAFT)
    )
    if published is not None:
        raise Conflict(
            f"dandiset {dandiset.identifier} has published versions ({published}): it can "
            "no longer be deleted"
        )
    zarr = session.scalar(select(Zarr.id).where(Zarr.dandiset_id == dandiset.id).limit(1))
    if zarr is not None:
        raise Conflict(
            f"dandiset {dandiset.identifier} holds Zarrs (e.g. {zarr}): this archive does not "
            "delete Zarrs, so the dandiset stays"
        )
    audit.record(session, dandiset, user, audit.RecordType.DELETE_DANDISET, {})
    dois.dandiset_deleted(session, dandiset.identifier)
    trash.trash_dandiset(session, user, dandiset)
