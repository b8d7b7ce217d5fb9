"""A dandiset's owners (DANDI's ``/api/dandisets/{id}/users/``): anyone who may see the
dandiset may list them; any owner (or an admin) replaces the list, which never becomes empty.

Every rule that says "owner" reads the owners in the request's own transaction
(:func:`zarrchive.services.identity.auth.is_owner`): a removed owner loses write access, and for an
embargoed dandiset its visibility, with the next request.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from zarrchive.db.models import Dandiset, DandisetOwner, EmbargoStatus, User
from zarrchive.errors import Conflict, InvalidInput
from zarrchive.services.dandi import audit
from zarrchive.services.dandi.dandiset_roles import parse_usernames, replace_members
from zarrchive.services.dandi.dandisets import get_dandiset
from zarrchive.services.identity.auth import Caller, require_owner

#: The most owners one dandiset can have (a PUT listing more is refused).
MAX_OWNERS = 100


@dataclass(frozen=True)
class OwnerInfo:
    """An owner as DANDI lists them: the name an identity provider gave (else the user
    name); no e-mail (it is not shown to others)."""

    username: str
    name: str
    email: str | None = None


def _owners(dandiset: Dandiset) -> list[OwnerInfo]:
    return [
        OwnerInfo(o.username, o.name or o.username) for o in sorted(dandiset.owners, key=_by_name)
    ]


def _by_name(user: User) -> str:
    return user.username


def list_owners(session: Session, user: Caller | None, dandiset_id: str) -> list[OwnerInfo]:
    """The owners of a dandiset *user* may see, by user name."""
    return _owners(get_dandiset(session, user, dandiset_id))


def set_owners(
    session: Session, user: Caller | None, dandiset_id: str, usernames: list[str]
) -> list[OwnerInfo]:
    """Replace the owners by the users named *usernames* (owners and admins only; at least
    one; every name an existing user); records the change."""
    locked = get_dandiset(session, user, dandiset_id, lock=True)
    require_owner(user, locked)
    if not usernames:
        raise InvalidInput("Cannot remove all draft owners: a dandiset keeps at least one owner")
    wanted = parse_usernames(usernames, MAX_OWNERS, "owners")
    if locked.embargo_status == EmbargoStatus.UNEMBARGOING:
        raise Conflict(f"dandiset {locked.identifier} is being unembargoed: try again later")
    replace_members(
        session,
        user,
        locked,
        DandisetOwner,
        list(locked.owners),
        wanted,
        audit.RecordType.CHANGE_OWNERS,
        "owners",
    )
    return _owners(locked)
