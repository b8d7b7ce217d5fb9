"""A dandiset's roles given by a list of user names (its owners, its reviewers): a ``PUT``'s
names checked, and the role's members replaced by them with an audit record of the change.

Each role's own rules (who may change it, whether it may become empty) stay in its module
(:mod:`zarrchive.services.dandi.owners`, :mod:`zarrchive.services.dandi.reviewers`).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from zarrchive.db.models import Dandiset, DandisetOwner, DandisetReviewer, User
from zarrchive.errors import InvalidInput
from zarrchive.services.dandi import audit
from zarrchive.services.identity.auth import Caller

#: The table of a role's members (one row per dandiset and user).
RoleTable = type[DandisetOwner] | type[DandisetReviewer]

#: A role's setter (``owners.set_owners``, ``reviewers.set_reviewers``):
#: ``(session, caller, dandiset id, user names)``.
MemberSetter = Callable[[Session, Caller, str, list[str]], object]


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


def replace_members(
    session: Session,
    user: Caller | None,
    dandiset: Dandiset,
    table: RoleTable,
    current: list[User],
    wanted: list[str],
    record_type: audit.RecordType,
    what: str,
) -> None:
    """Make the users named *wanted* (parsed, see :func:`parse_usernames`) the members of
    the role whose rows *table* holds and whose members now are *current*; 400 naming the
    first that does not exist.  A change is recorded as *record_type* (``removed_<what>``,
    ``added_<what>``); the dandiset's relationship *what* is expired."""
    found = find_users(session, wanted) if wanted else {}
    by_name = {u.username: u for u in current}
    removed = sorted(set(by_name) - set(wanted))
    added = sorted(set(wanted) - set(by_name))
    if removed:
        session.execute(
            delete(table).where(
                table.dandiset_id == dandiset.id,
                table.user_id.in_([by_name[n].id for n in removed]),
            )
        )
    for name in added:
        session.add(table(dandiset_id=dandiset.id, user_id=found[name].id))
    if removed or added:
        audit.record(
            session,
            dandiset,
            user,
            record_type,
            {
                f"removed_{what}": [user_info(n) for n in removed],
                f"added_{what}": [user_info(n) for n in added],
            },
        )
    session.flush()
    session.expire(dandiset, [what])
