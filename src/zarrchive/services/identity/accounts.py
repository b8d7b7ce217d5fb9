"""Accounts and their approval (DANDI's statuses, :class:`~zarrchive.db.models.AccountStatus`).

A new account (made by a sign-in through an identity provider) is ``PENDING``: it signs in
and reads what is public, and every change and every API key is refused
(:func:`zarrchive.services.identity.auth.require_writer`) until an admin approves it, on
``/admin/users`` or with ``zarrchive admin approve USERNAME``.  A verified e-mail in one of
``ZARRCHIVE_AUTO_APPROVE_EMAIL_DOMAINS`` approves it at once (:func:`status_for_new_account`).
Accounts made by ``zarrchive admin create-user`` are approved.  A status change takes effect
with the account's next request: its keys and sessions are checked against the row each
time.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from zarrchive.db.models import AccountStatus as AccountStatus  # the pages' (web/ imports no db/)
from zarrchive.db.models import User
from zarrchive.errors import InvalidInput, NotFound, PermissionDenied
from zarrchive.services.identity.auth import Caller, require_user

#: The most accounts ``/admin/users`` lists on one page.
USERS_PAGE = 200


@dataclass(frozen=True)
class AccountInfo:
    """``GET /api/users/me/`` in DANDI's shape, and a row of ``/admin/users``."""

    username: str
    name: str
    admin: bool
    status: AccountStatus
    email: str | None = None


def _info(user: User) -> AccountInfo:
    return AccountInfo(
        username=user.username,
        name=user.name or user.username,
        admin=user.is_admin,
        status=AccountStatus(user.status),
        email=user.email,
    )


def email_domain_approved(email: str, domains: tuple[str, ...]) -> bool:
    """Whether *email*'s domain is one of *domains* or below one (``mit.edu`` is below
    ``edu``; ``notedu`` is not): compared label by label, case-insensitively."""
    _, at, domain = email.strip().rpartition("@")
    domain = domain.lower().rstrip(".")
    if not at or not domain:
        return False
    return any(domain == d or domain.endswith("." + d) for d in domains)


def status_for_new_account(
    email: str | None, email_verified: bool | None, domains: tuple[str, ...]
) -> AccountStatus:
    """The status of an account an identity provider just made: approved at once for a
    verified e-mail (``email_verified`` true, not merely present) in *domains*, else pending."""
    if email and email_verified is True and email_domain_approved(email, domains):
        return AccountStatus.APPROVED
    return AccountStatus.PENDING


def me(session: Session, user: Caller | None) -> AccountInfo:
    """The caller's account (any status: a pending account learns that it is pending)."""
    caller = require_user(user)
    row = session.get(User, caller.id)
    if row is None:
        raise NotFound(f"user {caller.username!r} no longer exists")
    return _info(row)


def _require_admin(user: Caller | None) -> Caller:
    caller = require_user(user)
    if not (caller.is_admin and caller.approved):
        raise PermissionDenied("only this archive's administrators manage accounts")
    return caller


def list_accounts(
    session: Session, user: Caller | None, status: AccountStatus | None = None
) -> list[AccountInfo]:
    """Accounts (admins only), the pending ones first, then by name; at most
    :data:`USERS_PAGE`."""
    _require_admin(user)
    query = select(User)
    if status is not None:
        query = query.where(User.status == status.value)
    waiting = User.status != AccountStatus.PENDING.value  # False (pending) sorts first
    rows = session.scalars(query.order_by(waiting, User.username).limit(USERS_PAGE))
    return [_info(u) for u in rows]


def set_status(
    session: Session, user: Caller | None, username: str, status: AccountStatus
) -> AccountInfo:
    """Approve or reject (or set back to pending) the account *username*: an admin's
    (*user*; ``None``: the server's own ``zarrchive admin`` command).  An admin can't change
    their own status (nobody locks themselves out by mistake)."""
    if user is not None:
        caller = _require_admin(user)
        if caller.username == username.strip():
            raise InvalidInput("an administrator can't change their own account's status")
    if status not in (AccountStatus.APPROVED, AccountStatus.REJECTED, AccountStatus.PENDING):
        raise InvalidInput(f"an account can be approved, rejected or pending, not {status}")
    row = session.scalar(select(User).where(User.username == username.strip()))
    if row is None:
        raise NotFound(f"there is no user named {username.strip()!r}")
    row.status = status.value
    session.flush()
    return _info(row)
