"""Dandisets (minimal: enough for Zarrs to have owners)."""

from __future__ import annotations

import re

from sqlalchemy.orm import Session

from zarrchive.db.models import Dandiset, User, Version
from zarrchive.errors import InvalidInput, NotFound
from zarrchive.services.auth import can_read, require_user


def create_dandiset(
    session: Session, user: User | None, name: str, *, embargoed: bool = False
) -> Dandiset:
    """A new dandiset owned by *user*; identifiers are sequential: ``000001``..."""
    owner = require_user(user)
    name = name.strip()
    if not name or len(name) > 300:
        raise InvalidInput("a dandiset name must have 1 to 300 characters")
    dandiset = Dandiset(name=name, embargoed=embargoed)
    dandiset.owners.append(owner)
    session.add(dandiset)
    session.flush()
    session.add(Version(dandiset_id=dandiset.id, version="draft", metadata_={"name": name}))
    session.flush()
    return dandiset


_IDENTIFIER = re.compile(r"[0-9]{6}")


def parse_identifier(identifier: str) -> int:
    """The number of a dandiset identifier: exactly six ASCII digits (``000001``)."""
    if not isinstance(identifier, str) or _IDENTIFIER.fullmatch(identifier) is None:
        raise NotFound(f"{identifier!r} is not a dandiset identifier (six digits, e.g. 000001)")
    return int(identifier)


def get_dandiset(session: Session, user: User | None, identifier: str | int) -> Dandiset:
    """The dandiset, if it exists and *user* may see it (else :class:`NotFound`)."""
    number = parse_identifier(identifier) if isinstance(identifier, str) else identifier
    dandiset = session.get(Dandiset, number)
    if dandiset is None or not can_read(user, dandiset):
        raise NotFound(f"no dandiset {number:06d}")
    return dandiset
