"""Accounts from an identity provider's claims: linked to (issuer, sub), never to an e-mail;
a unique username; pending unless a verified e-mail of an approved domain."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select

from zarrchive.db.models import AccountStatus, User, UserIdentity
from zarrchive.services.identity.auth import create_user
from zarrchive.services.identity.identities import (
    USERNAME_LENGTH,
    IdentityClaims,
    account_for,
    base_username,
    claims_of,
)
from zarrchive.services.runtime import Archive

ISSUER = "https://idp.example"


@given(
    preferred=st.none() | st.text(max_size=300),
    email=st.none() | st.emails(),
)
def test_the_username_is_short_and_plain(preferred: str | None, email: str | None) -> None:
    name = base_username(IdentityClaims(ISSUER, "s", preferred_username=preferred, email=email))
    assert 1 <= len(name) <= USERNAME_LENGTH
    assert re.fullmatch(r"[A-Za-z0-9._-]+", name), name


def test_the_username_comes_from_preferred_username_then_the_email() -> None:
    assert base_username(IdentityClaims(ISSUER, "s", "ada.l", email="x@y.org")) == "ada.l"
    assert base_username(IdentityClaims(ISSUER, "s", None, email="grace@navy.mil")) == "grace"
    assert base_username(IdentityClaims(ISSUER, "s", "  ", name="Josiah Carberry")) == (
        "Josiah-Carberry"
    )
    orcid = IdentityClaims("https://orcid.org", "0000-0002-1825-0097")
    assert base_username(orcid) == "0000-0002-1825-0097"
    assert base_username(IdentityClaims(ISSUER, "---", "  ", email=None)) == "user"
    assert base_username(IdentityClaims(ISSUER, "s", "José Ñ")) == "Jos"


def test_claims_are_bounded_and_typed() -> None:
    claims = claims_of(
        ISSUER,
        {"sub": "1", "name": "x" * 1000, "email": "no-at-sign", "email_verified": "true"},
    )
    assert claims.name is not None and len(claims.name) == 300
    assert claims.email is None  # not an address
    assert claims.email_verified is None  # a string is not a verified flag


def _counts(archive: Archive) -> tuple[int, int]:
    with archive.db.session() as session:
        return (
            session.scalar(select(func.count()).select_from(User)) or 0,
            session.scalar(select(func.count()).select_from(UserIdentity)) or 0,
        )


def test_an_identity_makes_one_account_found_again(archive: Archive) -> None:
    claims = IdentityClaims(ISSUER, "0001", "ada", "Ada L", "ada@lab.edu", True)
    with archive.db.write_session() as session:
        create_user(session, "ada")  # the name is taken: the new account gets another
        user, created = account_for(session, claims, ())
        assert created and user.username == "ada-2"
        assert user.status == AccountStatus.PENDING
        assert (user.name, user.email) == ("Ada L", "ada@lab.edu")
    with archive.db.write_session() as session:
        again, created = account_for(session, claims, ())
        assert not created and again.username == "ada-2"
    assert _counts(archive) == (2, 1)


def test_the_same_email_at_another_provider_is_another_account(archive: Archive) -> None:
    with archive.db.write_session() as session:
        first, _ = account_for(session, IdentityClaims(ISSUER, "1", "x", None, "x@a.edu", True), ())
        other, _ = account_for(
            session, IdentityClaims("https://other.example", "1", "x", None, "x@a.edu", True), ()
        )
        assert first.id != other.id
    assert _counts(archive) == (2, 2)


def test_only_a_verified_email_of_an_approved_domain_approves(archive: Archive) -> None:
    domains = ("edu",)
    cases = [
        ("1", "a@mit.edu", True, AccountStatus.APPROVED),
        ("2", "b@mit.edu", None, AccountStatus.PENDING),
        ("3", "c@mit.edu", False, AccountStatus.PENDING),
        ("4", "d@notedu.com", True, AccountStatus.PENDING),
    ]
    with archive.db.write_session() as session:
        for sub, email, verified, status in cases:
            user, _ = account_for(
                session, IdentityClaims(ISSUER, sub, None, None, email, verified), domains
            )
            assert user.status == status, email
