"""A dandiset's rows as every module of the DANDI domain reads them: its identifier, the
dandiset (for a caller who may see it), its draft and the metadata a version serves.

The pieces :mod:`.dandisets`, :mod:`.versions`, :mod:`.trash` and :mod:`.dois` share, kept
below all of them: each imports them from here, none imports another for them (no cycle).
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.db.models import Dandiset, Version
from zarrchive.errors import NotFound
from zarrchive.services.dandi.validation import instance_name
from zarrchive.services.identity.auth import Caller, require_read

#: The name of every dandiset's mutable version.
DRAFT = "draft"

_IDENTIFIER = re.compile(r"[0-9]{6}")


def parse_identifier(identifier: str) -> int:
    """The number of a dandiset identifier: exactly six ASCII digits (``000001``)."""
    if not isinstance(identifier, str) or _IDENTIFIER.fullmatch(identifier) is None:
        raise NotFound(f"{identifier!r} is not a dandiset identifier (six digits, e.g. 000001)")
    return int(identifier)


def get_dandiset(
    session: Session, user: Caller | None, identifier: str | int, *, lock: bool = False
) -> Dandiset:
    """The dandiset, if it exists and *user* may see it: else :class:`NotFound`, or for an
    anonymous caller of an embargoed one :class:`AuthenticationRequired`.  *lock* takes its
    row lock (and reads the row afresh), as publishing and a change of owners do."""
    number = parse_identifier(identifier) if isinstance(identifier, str) else identifier
    if lock:
        dandiset = session.scalar(
            select(Dandiset)
            .where(Dandiset.id == number)
            .with_for_update(of=Dandiset)
            .execution_options(populate_existing=True)
        )
    else:
        dandiset = session.get(Dandiset, number)
    if dandiset is None or dandiset.deleted_at is not None:  # in the trash: see trash.py
        raise NotFound(f"no dandiset {number:06d}")
    require_read(user, dandiset, f"no dandiset {number:06d}")
    return dandiset


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


def draft_metadata(
    identifier: str, name: str, metadata: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The draft's metadata as stored: the given one with the fields the archive sets
    (``identifier`` ``DANDI:000001``, ``id``, ``version``, ``name``) as DANDI sets them."""
    instance = instance_name()
    stored = dict(metadata or {})
    stored.update(
        identifier=f"{instance}:{identifier}",
        id=f"{instance}:{identifier}/{DRAFT}",
        version=DRAFT,
        name=name,
    )
    return stored


def served_metadata(dandiset: Dandiset, version: Version) -> dict[str, Any]:
    """The version's metadata as stored, with the fields the archive sets filled in for
    versions stored before it set them (``identifier``, ``id``, ``version``, ``name``)."""
    metadata = dict(version.metadata_ or {})
    if version.is_draft:
        name = str(metadata.get("name") or dandiset.name)
        return {**draft_metadata(dandiset.identifier, name, None), **metadata}
    metadata.setdefault("identifier", f"{instance_name()}:{dandiset.identifier}")
    metadata.setdefault("id", f"{instance_name()}:{dandiset.identifier}/{version.version}")
    metadata.setdefault("version", version.version)
    metadata.setdefault("name", dandiset.name)
    return metadata
