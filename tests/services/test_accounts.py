"""Approval at once by e-mail domain (``ZARRCHIVE_AUTO_APPROVE_EMAIL_DOMAINS``): pure rules,
property-tested."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrchive.config import Settings
from zarrchive.db.models import AccountStatus
from zarrchive.errors import ConfigurationError
from zarrchive.services.identity.accounts import email_domain_approved, status_for_new_account

LABEL = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
DOMAIN = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
LOCAL = st.text("abcdefghijklmnopqrstuvwxyz.+_", min_size=1, max_size=12)


@given(LOCAL, st.lists(LABEL, max_size=3), DOMAIN)
def test_an_address_at_or_below_a_domain_is_approved(local: str, sub: list[str], d: str) -> None:
    email = f"{local}@{'.'.join([*sub, d])}"
    assert email_domain_approved(email, (d,))
    assert email_domain_approved(email.upper(), (d,))
    assert status_for_new_account(email, True, (d,)) == AccountStatus.APPROVED


@given(LOCAL, LABEL, DOMAIN)
def test_a_domain_that_merely_ends_with_the_text_is_not(local: str, prefix: str, d: str) -> None:
    # "notedu" ends with "edu" but is not below it
    assert not email_domain_approved(f"{local}@{prefix}{d}", (d,))


@given(LOCAL, DOMAIN, st.sampled_from([False, None]))
def test_an_unverified_address_waits(local: str, d: str, verified: bool | None) -> None:
    assert status_for_new_account(f"{local}@{d}", verified, (d,)) == AccountStatus.PENDING
    assert status_for_new_account(None, True, (d,)) == AccountStatus.PENDING
    assert status_for_new_account(f"{local}@{d}", True, ()) == AccountStatus.PENDING


def test_examples() -> None:
    assert email_domain_approved("a@cs.mit.edu", ("nih.gov", "edu"))
    assert not email_domain_approved("edu@example.org", ("edu",))  # the local part is no domain
    assert not email_domain_approved("a@notedu", ("edu",))
    assert not email_domain_approved("no address", ("edu",))


def test_the_setting_is_parsed_and_checked() -> None:
    env = {"ZARRCHIVE_AUTO_APPROVE_EMAIL_DOMAINS": " EDU, .nih.gov ,@mit.edu,"}
    assert Settings.from_env(env).auto_approve_email_domains == ("edu", "nih.gov", "mit.edu")
    assert Settings.from_env({}).auto_approve_email_domains == ()
    for bad in ("ex ample.org", "a..b", "é.fr", "*.edu"):
        with pytest.raises(ConfigurationError, match="AUTO_APPROVE_EMAIL_DOMAINS"):
            Settings.from_env({"ZARRCHIVE_AUTO_APPROVE_EMAIL_DOMAINS": bad})
