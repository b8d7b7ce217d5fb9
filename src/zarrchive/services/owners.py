"""A dandiset's owners (DANDI's ``/api/dandisets/{id}/users/``): anyone who may see the
dandiset may list them; any owner (or an admin) replaces the list, which never becomes empty.

Every rule that says "owner" reads the owners in the request's own transaction
(:func:`zarrchive.services.auth.is_owner`): a removed owner loses write access, and for an
embargoed dandiset its visibility, with the next request.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from zarrchive.db.models import Dandiset, DandisetOwner, EmbargoStatus, User
from zarrchive.errors import Conflict, InvalidInput
from zarrchive.services import audit
from zarrchive.services.auth import Caller, require_owner
from zarrchive.services.dandisets import get_dandiset

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
    found = find_users(session, wanted)
    current = {o.username: o for o in locked.owners}
    removed = sorted(set(current) - set(wanted))
    added = sorted(set(wanted) - set(current))
    if removed:
        session.execute(
            delete(DandisetOwner).where(
                DandisetOwner.dandiset_id == locked.id,
                DandisetOwner.user_id.in_([current[n].id for n in removed]),
            )
        )
    for name in added:
        session.add(DandisetOwner(dandiset_id=locked.id, user_id=found[name].id))
    if removed or added:
        audit.record(
            session,
            locked,
            user,
            audit.RecordType.CHANGE_OWNERS,
            {
                "removed_owners": [user_info(n) for n in removed],
                "added_owners": [user_info(n) for n in added],
            },
        )
    session.flush()
    session.expire(locked, ["owners"])
    return _owners(locked)


def parse_usernames(usernames: list[str], most: int, what: str) -> list[str]:
    """The distinct user names of a ``PUT`` of a dandiset's *what* (at most *most*), in
    order; 400 for a name no user can have."""
    if len(usernames) > most:
        raise InvalidInput(f"a dandiset has at most {most} {what}")
    wanted: list[str] = []
    for name in usernames:
        if not isinstance(name, str) or not 1 <= len(name.strip()) <= 150:
            raise InvalidInput("a user name has 1 to 150 characters")
        if any(ord(c) < 32 for c in name):
            raise InvalidInput(
                f"User {name[:40]!r} not found: user names have no control characters"
            )
        if name.strip() not in wanted:
            wanted.append(name.strip())
    return wanted


def find_users(session: Session, usernames: list[str]) -> dict[str, User]:
    """The users named *usernames*, by name (400 naming the first that does not exist)."""
    found = {
        u.username: u for u in session.scalars(select(User).where(User.username.in_(usernames)))
    }
    for name in usernames:
        if name not in found:
            raise InvalidInput(f"User {name} not found")
    return found


def user_info(username: str) -> dict[str, str]:
    """DANDI's ``glean_user_info`` of a user."""
    return {"username": username, "email": "", "name": username}
