"""Browsers signed in to the web pages: server-side sessions instead of tokens in cookies.

Signing in with an API token creates a session: a random id (the cookie's value, never
stored) whose sha256 is a row of ``web_sessions`` mapping it to the user until it expires.
Signing out deletes the row; so do rotating the user's token
(:func:`zarrchive.services.identity.auth.rotate_token`) and deleting the user.  The token itself
never reaches the browser.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from zarrchive.db.models import TokenScope, WebSession, utcnow
from zarrchive.errors import AuthenticationRequired
from zarrchive.services.identity.auth import Caller, live_key
from zarrchive.services.runtime import Archive

#: A session ends this long after signing in, whatever happens in between.
SESSION_LIFETIME = timedelta(days=30)
#: A user's live sessions beyond this many end, oldest first, as new ones start.
MAX_SESSIONS_PER_USER = 50
#: Longer cookie values (or tokens) are not ours: refused before any hashing or query.
MAX_SECRET_LENGTH = 200


@dataclass(frozen=True)
class SignedIn:
    """A new session: *session_id* goes into the browser's cookie, shown nowhere else."""

    session_id: str
    user: Caller
    expires_at: datetime


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _invalid_token() -> AuthenticationRequired:
    return AuthenticationRequired(
        "the API token is not valid: paste a token that 'zarrchive admin create-user' printed"
    )


def sign_in(archive: Archive, token: str) -> SignedIn:
    """A new session of the user owning *token* (401 for a token that isn't one)."""
    if not token or len(token) > MAX_SECRET_LENGTH:
        raise _invalid_token()
    now = utcnow()
    with archive.db.write_session() as session:
        row = live_key(session, token, now)  # 401 revoked/expired, 403 not approved
        if row.scope != TokenScope.WRITE:  # the session would do what the key may not
            raise AuthenticationRequired(
                "a read-only API key can't sign in to the pages: use a 'write' key"
            )
        return start_session(session, Caller.of(row.user), now)


def start_session(session: Session, user: Caller, now: datetime) -> SignedIn:
    """A new session of *user* (who has proven who it is: a key, an identity provider)."""
    session_id = secrets.token_urlsafe(32)
    _forget_old_sessions(session, user.id, now)
    web_session = WebSession(
        session_hash=_hash(session_id),
        user_id=user.id,
        created_at=now,
        expires_at=now + SESSION_LIFETIME,
    )
    session.add(web_session)
    session.flush()
    return SignedIn(session_id=session_id, user=user, expires_at=web_session.expires_at)


def _forget_old_sessions(session: Session, user_id: int, now: datetime) -> None:
    """Delete the user's expired sessions, and its oldest live ones past the cap, to make
    room for one more."""
    session.execute(
        delete(WebSession).where(WebSession.user_id == user_id, WebSession.expires_at <= now)
    )
    live = session.scalar(
        select(func.count()).select_from(WebSession).where(WebSession.user_id == user_id)
    )
    excess = (live or 0) - (MAX_SESSIONS_PER_USER - 1)
    if excess > 0:
        oldest = (
            select(WebSession.id)
            .where(WebSession.user_id == user_id)
            .order_by(WebSession.created_at, WebSession.id)
            .limit(excess)
        )
        ids = list(session.scalars(oldest))
        session.execute(delete(WebSession).where(WebSession.id.in_(ids)))


def session_user(archive: Archive, session_id: str) -> Caller | None:
    """The user of a live session; ``None`` for an unknown, ended or expired one."""
    if not session_id or len(session_id) > MAX_SECRET_LENGTH:
        return None
    with archive.db.session() as session:
        row = session.scalar(
            select(WebSession).where(
                WebSession.session_hash == _hash(session_id),
                WebSession.expires_at > utcnow(),
            )
        )
        return Caller.of(row.user) if row is not None else None


def sign_out(archive: Archive, session_id: str) -> None:
    """End the session (nothing happens for one that has already ended)."""
    if not session_id or len(session_id) > MAX_SECRET_LENGTH:
        return
    with archive.db.write_session() as session:
        session.execute(delete(WebSession).where(WebSession.session_hash == _hash(session_id)))
