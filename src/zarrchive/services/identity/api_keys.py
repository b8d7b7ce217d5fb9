"""Self-service API keys: a user's named keys, each ``read`` or ``write``
(:class:`~zarrchive.db.models.TokenScope`), with an optional expiry.

A key is shown once, when made; only its sha256 is stored.  Revoking sets ``revoked_at``
(the row stays, so that whoever still sends it is told it was revoked); a revoked or expired
key authenticates nothing from that moment (:func:`zarrchive.services.identity.auth.live_key`).
Making and revoking keys are changes: an account awaiting approval, or a read key, is
refused (:func:`zarrchive.services.identity.auth.require_writer`).  DANDI's ``POST /api/auth/token/``
replaces the key named "default" (:func:`replace_default_key`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, func, or_, select, update
from sqlalchemy.orm import Session

from zarrchive.db.models import ApiToken, TokenScope, utcnow
from zarrchive.errors import InvalidInput, NotFound
from zarrchive.services.identity.auth import (
    Caller,
    create_token,
    require_user,
    require_writer,
    token_hash,
    user_row,
)

#: The most live keys (not revoked, not expired) one user holds.
MAX_KEYS = 50
#: The farthest expiry a key may have.
MAX_LIFETIME = timedelta(days=5 * 366)
#: The name of the key DANDI's ``/api/auth/token/`` replaces.
DEFAULT_NAME = "default"


@dataclass(frozen=True)
class KeyInfo:
    """A key as its user sees it (never its secret)."""

    id: int
    name: str
    scope: TokenScope
    created: datetime
    last_used: datetime | None
    expires: datetime | None


def _info(row: ApiToken) -> KeyInfo:
    return KeyInfo(
        id=row.id,
        name=row.name,
        scope=TokenScope(row.scope),
        created=row.created_at,
        last_used=row.last_used_at,
        expires=row.expires_at,
    )


def _live(user_id: int, now: datetime) -> list[ColumnElement[bool]]:
    return [
        ApiToken.user_id == user_id,
        ApiToken.revoked_at.is_(None),
        or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now),
    ]


def list_keys(session: Session, user: Caller | None) -> list[KeyInfo]:
    """The caller's live keys, newest first."""
    caller = require_user(user)
    rows = session.scalars(
        select(ApiToken)
        .where(*_live(caller.id, utcnow()))
        .order_by(ApiToken.created_at.desc(), ApiToken.id.desc())
    )
    return [_info(r) for r in rows]


def parse_name(name: object) -> str:
    if not isinstance(name, str) or not 1 <= len(name.strip()) <= 100:
        raise InvalidInput("a key's name has 1 to 100 characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidInput("a key's name has no control characters")
    return name.strip()


def parse_scope(scope: object) -> TokenScope:
    try:
        return TokenScope(str(scope).strip().lower())
    except ValueError:
        raise InvalidInput(f"a key's scope is 'read' or 'write', not {str(scope)[:20]!r}") from None


def check_expiry(expires: datetime | None, now: datetime) -> datetime | None:
    """*expires* as an aware UTC time (a naive one is UTC), if it is in the future and
    within :data:`MAX_LIFETIME`."""
    if expires is None:
        return None
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=UTC)
    expires = expires.astimezone(UTC)
    if expires <= now:
        raise InvalidInput("a key's expiry must be in the future")
    if expires > now + MAX_LIFETIME:
        raise InvalidInput("a key expires within 5 years (or never: give no expiry)")
    return expires


def create_key(
    session: Session,
    user: Caller | None,
    name: object,
    scope: object,
    expires: datetime | None = None,
) -> tuple[KeyInfo, str]:
    """A new key of the caller: ``(info, secret)``; the secret is shown this once."""
    caller = require_writer(user)
    now = utcnow()
    checked_name, checked_scope = parse_name(name), parse_scope(scope)
    checked_expiry = check_expiry(expires, now)
    live = session.scalar(select(func.count()).select_from(ApiToken).where(*_live(caller.id, now)))
    if (live or 0) >= MAX_KEYS:
        raise InvalidInput(f"an account holds at most {MAX_KEYS} live keys: revoke one first")
    secret = create_token(
        session,
        user_row(session, caller),
        name=checked_name,
        scope=checked_scope,
        expires_at=checked_expiry,
    )
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash(secret)))
    assert row is not None
    return _info(row), secret


def revoke_key(session: Session, user: Caller | None, key_id: int) -> None:
    """Revoke one of the caller's keys (404 for a key that isn't a live one of theirs)."""
    caller = require_writer(user)
    done = session.execute(
        update(ApiToken)
        .where(ApiToken.id == key_id, *_live(caller.id, utcnow()))
        .values(revoked_at=utcnow())
    )
    if not getattr(done, "rowcount", 0):
        raise NotFound(f"you have no live API key {key_id}")


def replace_default_key(session: Session, user: Caller | None) -> str:
    """DANDI's ``POST /api/auth/token/``: revoke the caller's keys named "default" and make
    a new ``write`` one (returned, shown once)."""
    caller = require_writer(user)
    now = utcnow()
    session.execute(
        update(ApiToken)
        .where(ApiToken.name == DEFAULT_NAME, *_live(caller.id, now))
        .values(revoked_at=now)
    )
    return create_token(session, user_row(session, caller), name=DEFAULT_NAME)
