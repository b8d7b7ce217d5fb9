"""Users, API tokens and who may do what.

Who makes a request is a :class:`Caller`: plain values read when its token (or web session)
is checked, so it outlives that session (the ORM ``User`` row does not: see
:mod:`zarrchive.services`).  It carries the account's status and the key's scope, and the
rules below read them:

- every change goes through :func:`require_writer` (via :func:`require_owner` for changes
  of a dandiset): an account not approved, or a ``read`` key, is refused there (403), and
  nowhere else;
- every read of an embargoed dandiset goes through :func:`can_read` (or its SQL twin
  :func:`readable_dandisets`): owners and admins, and the dandiset's reviewers, of an
  approved account, whatever the key's scope.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, delete, or_, select, true, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.db.models import (
    AccountStatus,
    ApiToken,
    Dandiset,
    DandisetOwner,
    DandisetReviewer,
    TokenScope,
    User,
    WebSession,
    utcnow,
)
from zarrchive.errors import (
    AuthenticationRequired,
    Conflict,
    InvalidInput,
    NotFound,
    PermissionDenied,
)
from zarrchive.services.runtime import Archive

#: A key's ``last_used_at`` is written at most this often (not on every request).
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class Caller:
    """An authenticated user, as the services check what it may do: who it is, its
    account's status, and the scope of the key it came with (a web session: ``write``)."""

    id: int
    username: str
    is_admin: bool
    status: AccountStatus = AccountStatus.APPROVED
    scope: TokenScope = TokenScope.WRITE

    @classmethod
    def of(cls, user: User, scope: TokenScope = TokenScope.WRITE) -> Caller:
        return cls(
            id=user.id,
            username=user.username,
            is_admin=user.is_admin,
            status=AccountStatus(user.status),
            scope=scope,
        )

    @property
    def approved(self) -> bool:
        """Only an approved account sees more than what is public, or changes anything."""
        return self.status == AccountStatus.APPROVED


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_user(session: Session, username: str, *, admin: bool = False) -> tuple[User, str]:
    """Create an approved user and a first (write) API token; returns ``(user, token)``."""
    username = username.strip()
    if not username or len(username) > 150:
        raise InvalidInput("a user name must have 1 to 150 characters")
    user = User(username=username, is_admin=admin, status=AccountStatus.APPROVED)
    session.add(user)
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict(f"a user named {username!r} already exists") from exc
    return user, create_token(session, user)


def create_token(
    session: Session,
    user: User,
    *,
    name: str = "default",
    scope: TokenScope = TokenScope.WRITE,
    expires_at: datetime | None = None,
) -> str:
    """A new API token for *user* (only its hash is stored)."""
    token = secrets.token_hex(20)
    session.add(
        ApiToken(
            user_id=user.id,
            token_hash=token_hash(token),
            name=name,
            scope=scope.value,
            expires_at=expires_at,
        )
    )
    session.flush()
    return token


def token_hash(token: str) -> str:
    """What is stored of a key (or looked up)."""
    return _hash(token)


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


def live_key(session: Session, token: str, now: datetime) -> ApiToken:
    """The row of *token* if it may authenticate now: not revoked, not expired, of an
    approved account (401 for the first three, 403 for an account not approved)."""
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == _hash(token)))
    if row is None:
        raise AuthenticationRequired(
            "the API token is not valid: check ZARRCHIVE_TOKEN / --token / DANDI_API_KEY "
            "(make one on your account page, /account)"
        )
    if row.revoked_at is not None:
        raise AuthenticationRequired(
            f"the API key {row.name!r} was revoked: make a new one on your account page (/account)"
        )
    if row.expires_at is not None and row.expires_at <= now:
        raise AuthenticationRequired(
            f"the API key {row.name!r} expired on {row.expires_at:%Y-%m-%d %H:%M} UTC: make a "
            "new one on your account page (/account)"
        )
    refuse_unless_approved(Caller.of(row.user))
    return row


def authenticate(archive: Archive, token: str) -> Caller:
    """The user owning *token*, with the key's scope."""
    now = utcnow()
    with archive.db.session() as session:
        row = live_key(session, token, now)
        caller = Caller.of(row.user, TokenScope(row.scope))
        stale = row.last_used_at is None or row.last_used_at <= now - LAST_USED_RESOLUTION
        key_id = row.id
    if stale:
        _note_use(archive, key_id, now)
    return caller


def _note_use(archive: Archive, key_id: int, now: datetime) -> None:
    """Record that the key was used (at most once per :data:`LAST_USED_RESOLUTION`)."""
    with archive.db.write_session() as session:
        session.execute(
            update(ApiToken)
            .where(
                ApiToken.id == key_id,
                or_(
                    ApiToken.last_used_at.is_(None),
                    ApiToken.last_used_at <= now - LAST_USED_RESOLUTION,
                ),
            )
            .values(last_used_at=now)
        )


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


def refuse_unless_approved(user: Caller) -> None:
    """Refuse (403) anything an account that is not approved may not do."""
    if user.status == AccountStatus.APPROVED:
        return
    if user.status == AccountStatus.REJECTED:
        raise PermissionDenied(
            f"the account {user.username!r} was rejected by this archive's administrators: "
            "it can read only what is public"
        )
    raise PermissionDenied(
        f"the account {user.username!r} awaits approval by this archive's administrators: "
        "until then it can read only what is public, and it can make no change and no API key"
    )


def require_writer(user: Caller | None) -> Caller:
    """*user*, if it may change anything: an approved account, with a ``write`` key (or a
    web session).  The one place where every change checks the account and the key."""
    user = require_user(user)
    refuse_unless_approved(user)
    if user.scope != TokenScope.WRITE:
        raise PermissionDenied(
            "this API key is read-only (scope 'read'): it reads, it changes nothing; use a "
            "'write' key (make one on your account page, /account)"
        )
    return user


def is_owner(user: Caller | None, dandiset: Dandiset) -> bool:
    """*user* owns *dandiset* (or is an admin), with an approved account (whatever its key's
    scope: see :func:`require_owner` for changes)."""
    return (
        user is not None
        and user.approved
        and (user.is_admin or any(o.id == user.id for o in dandiset.owners))
    )


def is_reviewer(user: Caller | None, dandiset: Dandiset) -> bool:
    """*user* reviews *dandiset* (read in the request's transaction: a removed reviewer is
    refused with the next request)."""
    return user is not None and user.approved and any(r.id == user.id for r in dandiset.reviewers)


def require_owner(user: Caller | None, dandiset: Dandiset) -> Caller:
    """*user*, if it may change *dandiset*: an owner (or an admin) that may change anything
    (:func:`require_writer`)."""
    user = require_writer(user)
    if not is_owner(user, dandiset):
        raise PermissionDenied(
            f"user {user.username!r} does not own dandiset {dandiset.identifier}: "
            "only its owners may change it"
        )
    return user


def can_read(user: Caller | None, dandiset: Dandiset) -> bool:
    """Public dandisets are readable by anyone; embargoed ones by owners, admins and the
    dandiset's reviewers (of approved accounts, with keys of any scope)."""
    return not dandiset.embargoed or is_owner(user, dandiset) or is_reviewer(user, dandiset)


def require_read(user: Caller | None, dandiset: Dandiset, missing: str) -> None:
    """Refuse to show an embargoed *dandiset* to anyone but who may read it
    (:func:`can_read`): anonymous callers are asked to authenticate (401: DANDI's clients
    send their key only then), others are told *missing* (404), revealing nothing."""
    if can_read(user, dandiset):
        return
    if user is None:
        raise AuthenticationRequired(
            f"dandiset {dandiset.identifier} is embargoed: send the API token of one of its "
            "owners or reviewers ('Authorization: token KEY')"
        )
    raise NotFound(missing)


def readable_dandisets(user: Caller | None) -> ColumnElement[bool]:
    """:func:`can_read` as a SQL condition on ``dandisets``: filter visibility in the query,
    before any LIMIT, so pages are never short."""
    public = Dandiset.embargoed.is_(False)
    if user is None or not user.approved:
        return public
    if user.is_admin:
        return true()
    owned = select(DandisetOwner.dandiset_id).where(DandisetOwner.user_id == user.id)
    reviewed = select(DandisetReviewer.dandiset_id).where(DandisetReviewer.user_id == user.id)
    return or_(public, Dandiset.id.in_(owned), Dandiset.id.in_(reviewed))
