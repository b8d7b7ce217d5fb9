"""Sign-in through a real OpenID Connect provider (oidc-provider), driven without a browser:
an account made from the claims and linked to (issuer, sub); each forged, replayed or
invalid answer refused with a page that says why (4xx), making nothing."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from tests.conftest import LiveServer, make_settings
from tests.helpers.oidc_provider import (
    Providers,
    TamperingProxy,
    running_providers,
    sign_in_at_provider,
    start_sign_in,
)
from zarrchive.config import OidcProvider, Settings
from zarrchive.db.models import AccountStatus, User, UserIdentity, WebSession
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import SeaweedFS

#: A provider that can't be reached (nothing listens on the discard port).
DOWN = OidcProvider("down", "http://127.0.0.1:9", "zarrchive", None, "Down Provider")


@pytest.fixture(scope="module")
def providers(
    live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Providers]:
    with running_providers(
        f"{live_server.url}/signin/oidc/callback", tmp_path_factory.mktemp("oidc")
    ) as running:
        yield running


@pytest.fixture
def settings(
    seaweedfs: SeaweedFS,
    bucket: str,
    embargo_bucket: str,
    database_url: str,
    tmp_path: Path,
    providers: Providers,
) -> Settings:
    return make_settings(
        seaweedfs,
        bucket,
        database_url,
        tmp_path,
        oidc_providers=(providers.direct, providers.proxied, DOWN),
    )


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: what these tests show does not depend on the database (the accounts'
    service runs on both in tests/services/test_identities.py)."""
    return f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}"


@pytest.fixture
def browser(live_server: LiveServer, archive: Archive) -> Iterator[httpx.Client]:
    """The archive as a browser sees it: cookies kept, redirects not followed."""
    live_server.app.state.archive = archive
    with httpx.Client(base_url=live_server.url, timeout=60) as client:
        yield client


@pytest.fixture(autouse=True)
def honest_proxy(providers: Providers) -> Iterator[TamperingProxy]:
    providers.proxy.mode = None
    yield providers.proxy
    providers.proxy.mode = None


def _counts(archive: Archive) -> tuple[int, int, int]:
    with archive.db.session() as session:
        return (
            session.scalar(select(func.count()).select_from(User)) or 0,
            session.scalar(select(func.count()).select_from(UserIdentity)) or 0,
            session.scalar(select(func.count()).select_from(WebSession)) or 0,
        )


def _callback(browser: httpx.Client, url: str) -> httpx.Response:
    parts = urllib.parse.urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == str(browser.base_url).rstrip("/"), url
    return browser.get(parts.path + "?" + parts.query)


def test_first_sign_in_makes_a_pending_account_linked_to_the_identity(
    browser: httpx.Client, archive: Archive, providers: Providers
) -> None:
    callback = sign_in_at_provider(start_sign_in(browser, "direct"), "ada")
    assert "state=" in callback and "code=" in callback
    answer = _callback(browser, callback)
    assert answer.status_code == 200, answer.text
    assert "Signed in as <strong>ada</strong>" in answer.text
    assert "zarrchive_session" in browser.cookies
    home = browser.get("/")
    assert "ada" in home.text
    with archive.db.session() as session:
        user = session.scalars(select(User).where(User.username == "ada")).one()
        assert (user.name, user.email) == ("Test ada", "ada@lab.example.org")
        assert user.status == AccountStatus.PENDING
        identity = session.scalars(select(UserIdentity)).one()
        assert (identity.issuer, identity.subject, identity.email_verified) == (
            providers.direct.issuer,
            "ada",
            True,
        )

    # a second sign-in of the same identity finds the same account
    again = _callback(browser, sign_in_at_provider(start_sign_in(browser, "direct"), "ada"))
    assert again.status_code == 200, again.text
    # the same login at another provider is another identity: another account, a unique name
    other = _callback(browser, sign_in_at_provider(start_sign_in(browser, "proxied"), "ada"))
    assert other.status_code == 200, other.text
    assert "Signed in as <strong>ada-2</strong>" in other.text
    assert _counts(archive)[:2] == (2, 2)

    # a rejected account can't sign in (and nothing is made)
    with archive.db.write_session() as session:
        session.scalars(
            select(User).where(User.username == "ada")
        ).one().status = AccountStatus.REJECTED
    before = _counts(archive)
    rejected = _callback(browser, sign_in_at_provider(start_sign_in(browser, "direct"), "ada"))
    assert rejected.status_code == 403, rejected.text
    assert "not approved" in rejected.text
    assert _counts(archive) == before


def test_the_signin_page_lets_its_buttons_go_to_the_providers(
    browser: httpx.Client, providers: Providers
) -> None:
    page = browser.get("/signin")
    assert "Sign in with Test Provider" in page.text
    assert "Sign in with Proxied Provider" in page.text
    csp = page.headers["content-security-policy"]
    assert providers.direct.issuer in csp.split("form-action")[1].split(";")[0]
    assert "frame-ancestors 'none'" in csp


def test_the_flow_cookie_comes_back_on_a_cross_site_navigation(browser: httpx.Client) -> None:
    start_sign_in(browser, "direct")
    cookie = next(c for c in browser.cookies.jar if c.name == "zarrchive_oidc")
    assert cookie.get_nonstandard_attr("SameSite", cookie.get_nonstandard_attr("samesite")) in (
        "lax",
        "Lax",
    )
    assert cookie.has_nonstandard_attr("HttpOnly") or cookie.has_nonstandard_attr("httponly")


def test_a_tampered_state_is_refused(browser: httpx.Client, archive: Archive) -> None:
    callback = sign_in_at_provider(start_sign_in(browser, "direct"), "mallory")
    before = _counts(archive)
    state = urllib.parse.parse_qs(urllib.parse.urlsplit(callback).query)["state"][0]
    answer = _callback(browser, callback.replace(f"state={state}", "state=forged" + state[6:]))
    assert answer.status_code == 400, answer.text
    assert "state is not the one this sign-in sent" in answer.text
    assert _counts(archive) == before


def test_a_callback_without_the_flow_cookie_is_refused(
    browser: httpx.Client, archive: Archive, live_server: LiveServer
) -> None:
    callback = sign_in_at_provider(start_sign_in(browser, "direct"), "mallory")
    before = _counts(archive)
    with httpx.Client(base_url=live_server.url, timeout=60) as stranger:  # another browser
        answer = _callback(stranger, callback)
    assert answer.status_code == 400, answer.text
    assert "not started in this browser" in answer.text
    assert _counts(archive) == before


def test_a_replayed_authorization_code_is_refused(browser: httpx.Client, archive: Archive) -> None:
    start = start_sign_in(browser, "direct")
    flow_cookie = browser.cookies["zarrchive_oidc"]
    callback = sign_in_at_provider(start, "grace")
    assert _callback(browser, callback).status_code == 200
    before = _counts(archive)
    browser.cookies.set("zarrchive_oidc", flow_cookie)  # the same answer, sent again
    answer = _callback(browser, callback)
    assert answer.status_code == 400, answer.text
    assert "refused the authorization code (invalid_grant" in answer.text
    assert _counts(archive) == before


def test_the_providers_refusal_is_a_page_not_an_account(
    browser: httpx.Client, archive: Archive
) -> None:
    callback = sign_in_at_provider(start_sign_in(browser, "direct"), "x", abort=True)
    before = _counts(archive)
    answer = _callback(browser, callback)
    assert answer.status_code == 400, answer.text
    assert "did not sign you in (access_denied" in answer.text
    assert _counts(archive) == before


def test_an_id_token_signed_again_with_the_providers_key_is_accepted(
    browser: httpx.Client, honest_proxy: TamperingProxy
) -> None:
    """The control of the refusals below: the proxy's rewriting alone refuses nothing."""
    honest_proxy.mode = "resigned"
    answer = _callback(browser, sign_in_at_provider(start_sign_in(browser, "proxied"), "heidi"))
    assert answer.status_code == 200, answer.text
    assert "Signed in as <strong>heidi</strong>" in answer.text


#: Each way of spoiling the ID token (tests/helpers/oidc_provider.py), and the check that
#: refuses it (named on the page).
INVALID_ID_TOKENS = [
    ("issuer", "iss"),
    ("audience", "aud"),
    ("nonce", "nonce"),
    ("expired", "ExpiredTokenError"),
    ("other-key", "BadSignatureError"),
]


def test_invalid_id_tokens_are_refused(
    browser: httpx.Client, archive: Archive, honest_proxy: TamperingProxy
) -> None:
    """A wrong issuer, audience or nonce, an expired token, one signed with another key
    (one archive for the five: each sign-in is independent of the others)."""
    for mode, reason in INVALID_ID_TOKENS:
        honest_proxy.mode = mode
        callback = sign_in_at_provider(start_sign_in(browser, "proxied"), "ivan")
        before = _counts(archive)
        answer = _callback(browser, callback)
        assert answer.status_code == 400, (mode, answer.text)
        assert "the ID token is not valid" in answer.text, mode
        assert reason in answer.text, (mode, answer.text)
        assert _counts(archive) == before, mode
        assert "zarrchive_session" not in browser.cookies, mode


def test_a_provider_that_cant_be_reached_is_a_page_and_buttons_are_forms_from_here(
    browser: httpx.Client, archive: Archive
) -> None:
    before = _counts(archive)
    page = browser.get("/signin")  # the other buttons and the token form still work
    assert page.status_code == 200 and "Sign in with Down Provider" in page.text
    token = page.text.split('action="/signin/oidc/down"')[1].split('value="')[1].split('"')[0]
    origin = {"Origin": str(browser.base_url).rstrip("/")}
    down = browser.post("/signin/oidc/down", data={"csrf_token": token}, headers=origin)
    assert down.status_code == 502, down.text
    assert "can&#39;t be reached" in down.text
    unknown = browser.post("/signin/oidc/nobody", data={"csrf_token": token}, headers=origin)
    assert unknown.status_code == 404, unknown.text
    forged = browser.post("/signin/oidc/direct", data={"csrf_token": "x"}, headers=origin)
    assert forged.status_code == 403, forged.text
    evil = {"Origin": "https://evil.example"}
    cross_site = browser.post("/signin/oidc/direct", data={"csrf_token": token}, headers=evil)
    assert cross_site.status_code == 403, cross_site.text
    assert "zarrchive_oidc" not in browser.cookies
    assert _counts(archive) == before
