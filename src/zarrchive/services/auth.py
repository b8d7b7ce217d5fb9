"""Users, API tokens and who may do what.

Who makes a request is a :class:`Caller`: plain values read when its token is checked, so
it outlives that session (the ORM ``User`` row does not: see :mod:`zarrchive.services`).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import ColumnElement, delete, or_, select, true
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.db.models import ApiToken, Dandiset, DandisetOwner, User, WebSession
from zarrchive.errors import (
    AuthenticationRequired,
    Conflict,
    InvalidInput,
    NotFound,
    PermissionDenied,
)
from zarrchive.services.runtime import Archive


@dataclass(frozen=True)
class Caller:
    """An authenticated user, as the services check what it may do."""

    id: int
    username: str
    is_admin: bool

    @classmethod
    def of(cls, user: User) -> Caller:
        return cls(id=user.id, username=user.username, is_admin=user.is_admin)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_user(session: Session, username: str, *, admin: bool = False) -> tuple[User, str]:
    """Create a user and a first API token; returns ``(user, token)``."""
    username = username.strip()
    if not username or len(username) > 150:
        raise InvalidInput("a user name must have 1 to 150 characters")
    user = User(username=username, is_admin=admin)
    session.add(user)
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict(f"a user named {username!r} already exists") from exc
    return user, create_token(session, user)


def create_token(session: Session, user: User) -> str:
    """A new API token for *user* (only its hash is stored)."""
    token = secrets.token_hex(20)
    session.add(ApiToken(user_id=user.id, token_hash=_hash(token)))
    session.flush()
    return token


def rotate_token(session: Session, username: str) -> str:
    """Replace every API token of the user named *username* by one new token (returned, shown
    once) and sign out all its browsers: whoever held an old token or a web session signed
    in with one is shut out."""
    user = session.scalar(select(User).where(User.username == username.strip()))
    if user is None:
        raise NotFound(f"there is no user named {username.strip()!r}")
    session.execute(delete(ApiToken).where(ApiToken.user_id == user.id))
    revoke_web_sessions(session, user.id)
    return create_token(session, user)


def revoke_web_sessions(session: Session, user_id: int) -> int:
    """Sign the user out of every browser; returns how many sessions that ended."""
    ended = session.execute(delete(WebSession).where(WebSession.user_id == user_id))
    return int(getattr(ended, "rowcount", 0) or 0)


def authenticate(archive: Archive, token: str) -> Caller:
    """The user owning *token*."""
    with archive.db.session() as session:
        row = session.scalar(select(ApiToken).where(ApiToken.token_hash == _hash(token)))
        if row is None:
            raise AuthenticationRequired(
                "the API token is not valid: check ZARRCHIVE_TOKEN / --token (create one with "
                "'zarrchive admin create-user')"
            )
        return Caller.of(row.user)


def user_row(session: Session, caller: Caller) -> User:
    """The caller's row, for what records a user (a dandiset's owners)."""
    user = session.get(User, caller.id)
    if user is None:
        raise AuthenticationRequired(f"user {caller.username!r} no longer exists")
    return user


def require_user(user: Caller | None) -> Caller:
    if user is None:
        raise AuthenticationRequired(
            "this operation needs an API token: send 'Authorization: token KEY'"
        )
    return user


def is_owner(user: Caller | None, dandiset: Dandiset) -> bool:
    return user is not None and (user.is_admin or any(o.id == user.id for o in dandiset.owners))


def require_owner(user: Caller | None, dandiset: Dandiset) -> Caller:
    """*user*, if it owns *dandiset* (or is an admin)."""
    user = require_user(user)
    if not is_owner(user, dandiset):
        raise PermissionDenied(
            f"user {user.username!r} does not own dandiset {dandiset.identifier}: "
            "only its owners may change it"
        )
    return user


def can_read(user: Caller | None, dandiset: Dandiset) -> bool:
    """Public dandisets are readable by anyone; embargoed ones by owners and admins."""
    return not dandiset.embargoed or is_owner(user, dandiset)


def require_read(user: Caller | None, dandiset: Dandiset, missing: str) -> None:
    """Refuse to show an embargoed *dandiset* to anyone but its owners and admins: anonymous
    callers are asked to authenticate (401: DANDI's clients send their key only then),
    others are told *missing* (404), revealing nothing."""
    if can_read(user, dandiset):
        return
    if user is None:
        raise AuthenticationRequired(
            f"dandiset {dandiset.identifier} is embargoed: send the API token of one of its "
            "owners ('Authorization: token KEY')"
        )
    raise NotFound(missing)


def readable_dandisets(user: Caller | None) -> ColumnElement[bool]:
    """:func:`can_read` as a SQL condition on ``dandisets``: filter visibility in the query,
    before any LIMIT, so pages are never short."""
    if user is not None and user.is_admin:
        return true()
    public = Dandiset.embargoed.is_(False)
    if user is None:
        return public
    owned = select(DandisetOwner.dandiset_id).where(DandisetOwner.user_id == user.id)
    return or_(public, Dandiset.id.in_(owned))
