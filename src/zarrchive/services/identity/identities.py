"""Accounts from an OpenID Connect provider's verified claims (:mod:`zarrchive.web.oidc`).

A sign-in is linked to the provider's (``iss``, ``sub``) pair (a ``user_identities`` row),
never to an e-mail alone: two providers, or two people, may give the same address.  The
first sign-in of an identity makes its account: the username from ``preferred_username``
(else the e-mail's local part, the name, ``sub``, or ``user``), reduced to letters, digits
and ``._-`` and made unique with a number; the name and e-mail from the claims; the status
:func:`~zarrchive.services.identity.accounts.status_for_new_account` says (pending, or approved for a
verified e-mail of an approved domain).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.db.models import User, UserIdentity
from zarrchive.errors import Conflict
from zarrchive.services.identity.accounts import status_for_new_account

#: The longest username made from claims (a number may follow to make it unique).
USERNAME_LENGTH = 40
#: The longest name and e-mail kept from claims (the columns' sizes).
NAME_LENGTH = 300
EMAIL_LENGTH = 320
#: Attempts at a unique username before giving up (each a numbered candidate).
MAX_USERNAME_ATTEMPTS = 50
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class IdentityClaims:
    """What the archive keeps of a verified ID token (and user info)."""

    issuer: str
    subject: str
    preferred_username: str | None = None
    name: str | None = None
    email: str | None = None
    email_verified: bool | None = None


def _text(value: object, limit: int) -> str | None:
    """A claim as bounded text (``None`` for anything but a non-blank string)."""
    if not isinstance(value, str):
        return None
    text = " ".join(value.split())[:limit]
    return text or None


def claims_of(issuer: str, claims: dict[str, object]) -> IdentityClaims:
    """The :class:`IdentityClaims` of a verified token's *claims* (``sub`` is a string: the
    token's validation checked it is there)."""
    verified = claims.get("email_verified")
    email = _text(claims.get("email"), EMAIL_LENGTH)
    return IdentityClaims(
        issuer=issuer,
        subject=str(claims["sub"]),
        preferred_username=_text(claims.get("preferred_username"), 200),
        name=_text(claims.get("name"), NAME_LENGTH),
        email=email if email is not None and "@" in email else None,
        email_verified=verified if isinstance(verified, bool) else None,
    )


def base_username(claims: IdentityClaims) -> str:
    """The username an account made from *claims* asks for: ``preferred_username``, else the
    e-mail's local part, else the name, else ``sub`` (an ORCID iD), reduced to ``[A-Za-z0-9._-]`` (at most :data:`USERNAME_LENGTH`),
    ``user`` when nothing is left."""
    local_part = (claims.email or "").rpartition("@")[0]
    for raw in (claims.preferred_username, local_part, claims.name, claims.subject):
        if raw:
            name = _NOT_ALLOWED.sub("-", raw).strip("-.")[:USERNAME_LENGTH].strip("-.")
            if name:
                return name
    return "user"


def username_candidates(base: str) -> Iterator[str]:
    """*base*, then ``base-2``, ``base-3``, ...: the names tried in turn."""
    yield base
    for number in range(2, MAX_USERNAME_ATTEMPTS + 1):
        yield f"{base}-{number}"


def _linked(session: Session, claims: IdentityClaims) -> UserIdentity | None:
    return session.scalar(
        select(UserIdentity).where(
            UserIdentity.issuer == claims.issuer, UserIdentity.subject == claims.subject
        )
    )


def account_for(
    session: Session, claims: IdentityClaims, approved_domains: tuple[str, ...]
) -> tuple[User, bool]:
    """The account linked to *claims*' identity, made now if there is none; ``(user,
    created)``.  A later sign-in updates ``email_verified`` and fills a name or e-mail the
    account lacks (it never changes the status)."""
    identity = _linked(session, claims)
    if identity is not None:
        identity.email_verified = claims.email_verified
        user = identity.user
        user.name = user.name or claims.name
        user.email = user.email or claims.email
        return user, False
    status = status_for_new_account(claims.email, claims.email_verified, approved_domains)
    for username in username_candidates(base_username(claims)):
        taken = session.scalar(select(User.id).where(User.username == username))
        if taken is not None:
            continue
        try:
            with session.begin_nested():  # a concurrent sign-in may take the name or identity
                user = User(
                    username=username, status=status.value, name=claims.name, email=claims.email
                )
                session.add(user)
                session.flush()
                session.add(
                    UserIdentity(
                        user_id=user.id,
                        issuer=claims.issuer,
                        subject=claims.subject,
                        email_verified=claims.email_verified,
                    )
                )
                session.flush()
        except IntegrityError:
            identity = _linked(session, claims)
            if identity is not None:  # the same person's other tab made it first
                return identity.user, False
            continue
        return user, True
    raise Conflict(
        f"no free username like {base_username(claims)!r} after {MAX_USERNAME_ATTEMPTS} tries: "
        "ask the archive's admins to make the account"
    )
