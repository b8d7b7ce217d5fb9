"""A dandiset's reviewers: users who read everything of it while it is embargoed (pages,
metadata, assets, blobs, Zarrs, LINDI files, manifests, downloads) and change nothing.

Only owners and admins list or replace them (a reviewer's name is not shown to anyone else:
reviews are often anonymous).  Every read rule reads the reviewers in the request's own
transaction (:func:`zarrchive.services.identity.auth.can_read`, :func:`~zarrchive.services.identity.auth.
readable_dandisets`, :func:`zarrchive.services.dandi.blobs.may_read_blob`): a removed reviewer is
refused with its next request, through the API and the pages alike.  Unembargoing keeps the
list: reviewers then read what everyone reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from zarrchive.db.models import Dandiset, DandisetReviewer, User
from zarrchive.errors import PermissionDenied
from zarrchive.services.dandi import audit
from zarrchive.services.dandi.dandiset_roles import parse_usernames, replace_members
from zarrchive.services.dandi.dandisets import get_dandiset
from zarrchive.services.identity.auth import (
    Caller,
    is_owner,
    refuse_unless_approved,
    require_owner,
    require_user,
)

#: The most reviewers one dandiset can have (a PUT listing more is refused).
MAX_REVIEWERS = 100


@dataclass(frozen=True)
class ReviewerInfo:
    username: str
    name: str


def _reviewers(session: Session, dandiset: Dandiset) -> list[ReviewerInfo]:
    rows = session.scalars(
        select(User)
        .join(DandisetReviewer, DandisetReviewer.user_id == User.id)
        .where(DandisetReviewer.dandiset_id == dandiset.id)
        .order_by(User.username)
    )
    return [ReviewerInfo(u.username, u.name or u.username) for u in rows]


def _require_manager(user: Caller | None, dandiset: Dandiset) -> Caller:
    """Owners and admins (with keys of any scope) see the reviewers."""
    caller = require_user(user)
    refuse_unless_approved(caller)
    if not is_owner(caller, dandiset):
        raise PermissionDenied(
            f"user {caller.username!r} does not own dandiset {dandiset.identifier}: only its "
            "owners and admins see and change its reviewers"
        )
    return caller


def list_reviewers(session: Session, user: Caller | None, dandiset_id: str) -> list[ReviewerInfo]:
    """The reviewers of a dandiset, by user name (owners and admins only)."""
    dandiset = get_dandiset(session, user, dandiset_id)
    _require_manager(user, dandiset)
    return _reviewers(session, dandiset)


def set_reviewers(
    session: Session, user: Caller | None, dandiset_id: str, usernames: list[str]
) -> list[ReviewerInfo]:
    """Replace the reviewers by the users named *usernames* (owners and admins only; may be
    none; every name an existing user); records the change (``change_reviewers``)."""
    locked = get_dandiset(session, user, dandiset_id, lock=True)
    require_owner(user, locked)
    wanted = parse_usernames(usernames, MAX_REVIEWERS, "reviewers")
    replace_members(
        session,
        user,
        locked,
        DandisetReviewer,
        _current(session, locked),
        wanted,
        audit.RecordType.CHANGE_REVIEWERS,
        "reviewers",
    )
    return _reviewers(session, locked)


def _current(session: Session, dandiset: Dandiset) -> list[User]:
    return list(
        session.scalars(
            select(User)
            .join(DandisetReviewer, DandisetReviewer.user_id == User.id)
            .where(DandisetReviewer.dandiset_id == dandiset.id)
        )
    )
