"""Signing in to the pages (issue #25, item 7): no cross-site form posts, no API token in a
cookie, sessions that end on the server, and the security headers on every answer."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text, update

from tests.conftest import LiveServer
from tests.helpers.reliability import Tokens, count
from tests.helpers.web_forms import form_token, sign_in, sign_out
from tests.helpers.zarr_client import create_dandiset
from zarrchive.api import create_app
from zarrchive.db.models import User, WebSession
from zarrchive.errors import NotFound
from zarrchive.services.identity.auth import create_user, rotate_token
from zarrchive.services.identity.web_sessions import MAX_SESSIONS_PER_USER, session_user
from zarrchive.services.identity.web_sessions import sign_in as sign_in_service
from zarrchive.services.runtime import Archive
from zarrchive.web.render import LEGACY_TOKEN_COOKIE, SESSION_COOKIE
from zarrchive.web.signin import SIGNIN_COOKIE

PART = "web sessions"
TEMPLATES = Path(__file__).parents[2] / "src" / "zarrchive" / "web" / "templates"
#: Every form POST of the pages: a new one fails :func:`test_every_form_post_is_known`.
#: the owners' and reviewers' forms are tested in tests/api/test_dandiset_owners.py and
#: test_reviewers.py, the account and accounts pages' in tests/api/test_accounts.py
FORM_POSTS = {
    "/signin",
    "/signin/oidc/{key}",  # an identity provider's button: tests/web/test_oidc_signin.py
    "/signout",
    "/dandiset/{dandiset_id}/owners",
    "/dandiset/{dandiset_id}/reviewers",
    "/dandiset/{dandiset_id}/trash/{asset_id}/restore",  # tests/api/test_trash.py
    "/account/keys",
    "/account/keys/{key_id}/revoke",
    "/admin/users/approve",
    "/admin/users/reject",
}
THIRTY_DAYS = 30 * 24 * 3600
_names = itertools.count()


@pytest.fixture
def base_url(live_server: LiveServer, module_archive: Archive, module_tokens: Tokens) -> str:
    live_server.app.state.archive = module_archive
    return live_server.url


@pytest.fixture
def browser(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=60) as client:
        yield client


def new_user(archive: Archive) -> tuple[str, str]:
    """A user of its own (a test that rotates tokens must not touch the module's)."""
    name = f"user{next(_names)}"
    with archive.db.write_session() as session:
        return name, create_user(session, name)[1]


def signed_in_as(client: httpx.Client) -> str | None:
    page = client.get("/")
    assert page.status_code == 200, page.text
    found = re.search(r'id="signed-in-user">([^<]*)<', page.text)
    return found.group(1) if found else None


def replay(base_url: str, cookie: str) -> str | None:
    """Who a fresh browser holding only this session cookie is."""
    with httpx.Client(base_url=base_url, timeout=60, cookies={SESSION_COOKIE: cookie}) as c:
        return signed_in_as(c)


def session_cookie(response: httpx.Response) -> str:
    assert response.status_code == 303, response.text
    for header in response.headers.get_list("set-cookie"):
        if header.startswith(f"{SESSION_COOKIE}="):
            return header.split(";")[0].split("=", 1)[1]
    raise AssertionError(f"no session cookie in {response.headers.get_list('set-cookie')}")


def refused(response: httpx.Response) -> str:
    """A clear 403 page that set no session."""
    assert response.status_code == 403, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("text/html")
    assert "nothing was done" in response.text
    assert SESSION_COOKIE not in response.headers.get("set-cookie", "")
    return response.text


def test_a_cross_site_sign_in_post_is_refused(
    browser: httpx.Client, base_url: str, module_tokens: Tokens
) -> None:
    """Login CSRF: another site's form posting a token (the attacker's) to ``/signin``."""
    good = {"token": module_tokens.owner}
    # what a form on another site sends: its Origin, no pre-session cookie (SameSite=Strict)
    refused(browser.post("/signin", data=good, headers={"Origin": "https://evil.example"}))
    refused(browser.post("/signin", data=good, headers={"Referer": "https://evil.example/x"}))
    refused(browser.post("/signin", data=good, headers={"Origin": "null"}))
    refused(browser.post("/signin", data=good))  # no Origin, no token: refused too
    # even with this browser's own pre-session token, another Origin is refused
    csrf = form_token(browser.get("/signin").text)
    assert browser.cookies.get(SIGNIN_COOKIE) == csrf
    for origin in ("https://evil.example", "http://127.0.0.1.evil.example", base_url + ".evil"):
        refused(
            browser.post("/signin", data={**good, "csrf_token": csrf}, headers={"Origin": origin})
        )
    # a token that isn't the cookie's, or no cookie at all
    refused(browser.post("/signin", data={**good, "csrf_token": csrf[::-1]}))
    with httpx.Client(base_url=base_url, timeout=60) as stranger:
        refused(stranger.post("/signin", data={**good, "csrf_token": csrf}))
    assert signed_in_as(browser) is None
    # the same form from this site's own page signs in
    assert sign_in(browser, module_tokens.owner).status_code == 303
    assert signed_in_as(browser) == "owner"
    count(PART, cases=10)


def test_the_cookie_holds_a_random_session_id_never_the_token(
    base_url: str, module_archive: Archive, module_tokens: Tokens
) -> None:
    cookies = []
    for _ in range(2):
        with httpx.Client(base_url=base_url, timeout=60) as client:
            response = sign_in(client, module_tokens.owner)
            for header in response.headers.get_list("set-cookie"):
                assert module_tokens.owner not in header
                if header.startswith(f"{SESSION_COOKIE}="):
                    assert "HttpOnly" in header and "SameSite=strict" in header
                    assert f"Max-Age={THIRTY_DAYS}" in header
            cookies.append(session_cookie(response))
    assert cookies[0] != cookies[1] and all(len(c) >= 40 for c in cookies)
    hashes = {hashlib.sha256(c.encode()).hexdigest() for c in cookies}
    with module_archive.db.session() as session:
        rows = session.execute(select(WebSession)).scalars().all()
        stored = {r.session_hash for r in rows}
        everything = repr(session.execute(text("SELECT * FROM web_sessions")).all())
        lifetimes = {r.session_hash: r.expires_at - r.created_at for r in rows}
    assert hashes <= stored  # only hashes: a copy of the database holds no live session
    assert not any(c in everything for c in cookies) and module_tokens.owner not in everything
    assert all(lifetimes[h] == timedelta(days=30) for h in hashes)
    count(PART, cases=2)


def test_the_cookies_are_secure_over_https(base_url: str, module_archive: Archive) -> None:
    """Behind a proxy terminating TLS (uvicorn trusts ``X-Forwarded-Proto`` from 127.0.0.1)."""
    _, token = new_user(module_archive)
    https = base_url.replace("http://", "https://")
    proxied = {"X-Forwarded-Proto": "https"}
    with httpx.Client(base_url=base_url, timeout=60, headers=proxied) as client:
        form = client.get("/signin")
        assert "Secure" in form.headers["set-cookie"]
        csrf = form_token(form.text)
        # httpx keeps Secure cookies for https: send the pre-session cookie as a browser would
        sent = {"Cookie": f"{SIGNIN_COOKIE}={csrf}", "Origin": https}
        response = client.post("/signin", data={"token": token, "csrf_token": csrf}, headers=sent)
        cookie = next(c for c in response.headers.get_list("set-cookie") if SESSION_COOKIE in c)
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        # an https archive refuses a form from its http twin
        sent["Origin"] = base_url
        refused(client.post("/signin", data={"token": token, "csrf_token": csrf}, headers=sent))
    count(PART, cases=2)


def test_signing_out_ends_the_session_on_the_server(
    browser: httpx.Client, base_url: str, module_archive: Archive, module_tokens: Tokens
) -> None:
    cookie = session_cookie(sign_in(browser, module_tokens.other))
    assert replay(base_url, cookie) == "other"
    out = sign_out(browser)
    assert out.status_code == 303
    assert signed_in_as(browser) is None
    assert replay(base_url, cookie) is None  # a copy of the cookie is worth nothing now
    digest = hashlib.sha256(cookie.encode()).hexdigest()
    with module_archive.db.session() as session:
        assert session.scalar(select(WebSession).where(WebSession.session_hash == digest)) is None
    count(PART, cases=1)


def test_a_sign_out_post_needs_the_form_token_of_its_session(
    browser: httpx.Client, base_url: str, module_tokens: Tokens
) -> None:
    cookie = session_cookie(sign_in(browser, module_tokens.other))
    token = form_token(browser.get("/").text)
    with httpx.Client(base_url=base_url, timeout=60) as elsewhere:
        theirs = form_token(elsewhere.get("/signin").text)
        sign_in(elsewhere, module_tokens.other)
        other_session_token = form_token(elsewhere.get("/").text)
    assert other_session_token != token and theirs != token
    own = {"Origin": base_url}
    refused(browser.post("/signout", headers=own))
    refused(browser.post("/signout", data={"csrf_token": ""}, headers=own))
    refused(browser.post("/signout", data={"csrf_token": other_session_token}, headers=own))
    refused(browser.post("/signout", data={"csrf_token": cookie}, headers=own))
    refused(
        browser.post(
            "/signout", data={"csrf_token": token}, headers={"Origin": "https://evil.example"}
        )
    )
    refused(
        browser.post(
            "/signout", data={"csrf_token": token}, headers={"Referer": "https://evil.example/"}
        )
    )
    assert replay(base_url, cookie) == "other"  # none of them ended the session
    assert browser.post("/signout", data={"csrf_token": token}).status_code == 303
    assert replay(base_url, cookie) is None
    count(PART, cases=7)


def test_rotating_a_token_ends_the_users_sessions(base_url: str, module_archive: Archive) -> None:
    name, token = new_user(module_archive)
    bystander, bystander_token = new_user(module_archive)
    cookies = []
    for signed in (token, token, bystander_token):
        with httpx.Client(base_url=base_url, timeout=60) as client:
            cookies.append(session_cookie(sign_in(client, signed)))
    assert [replay(base_url, c) for c in cookies] == [name, name, bystander]
    with module_archive.db.write_session() as session:
        new_token = rotate_token(session, name)
    assert new_token != token
    assert [replay(base_url, c) for c in cookies] == [None, None, bystander]
    with httpx.Client(base_url=base_url, timeout=60) as client:
        assert (
            client.get("/api/auth/token/", headers={"Authorization": f"token {token}"}).status_code
            == 401
        )
        assert sign_in(client, token).status_code == 401
        assert sign_in(client, new_token).status_code == 303
        assert signed_in_as(client) == name
    count(PART, cases=3)


def test_sessions_expire(browser: httpx.Client, base_url: str, module_archive: Archive) -> None:
    name, token = new_user(module_archive)
    cookie = session_cookie(sign_in(browser, token))
    assert replay(base_url, cookie) == name
    digest = hashlib.sha256(cookie.encode()).hexdigest()
    with module_archive.db.write_session() as session:
        session.execute(
            update(WebSession)
            .where(WebSession.session_hash == digest)
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    assert replay(base_url, cookie) is None
    # the next sign-in of the user deletes the expired session
    with httpx.Client(base_url=base_url, timeout=60) as client:
        sign_in(client, token)
    with module_archive.db.session() as session:
        assert session.scalar(select(WebSession).where(WebSession.session_hash == digest)) is None
    count(PART, cases=1)


def test_a_user_has_a_bounded_number_of_sessions(module_archive: Archive) -> None:
    """Signing in again and again ends the oldest sessions: the table can't be filled."""
    _, token = new_user(module_archive)
    made = [sign_in_service(module_archive, token) for _ in range(MAX_SESSIONS_PER_USER + 5)]
    user_id = made[0].user.id
    alive = [session_user(module_archive, m.session_id) for m in made]
    assert alive[:5] == [None] * 5 and all(u is not None for u in alive[5:])
    with module_archive.db.session() as session:
        rows = session.scalars(select(WebSession).where(WebSession.user_id == user_id)).all()
        assert len(rows) == MAX_SESSIONS_PER_USER
    with module_archive.db.write_session() as session, pytest.raises(NotFound):
        rotate_token(session, "nobody by that name")
    count(PART, cases=1)


def test_deleting_a_user_deletes_its_sessions(base_url: str, module_archive: Archive) -> None:
    name, token = new_user(module_archive)
    with httpx.Client(base_url=base_url, timeout=60) as client:
        cookie = session_cookie(sign_in(client, token))
    with module_archive.db.write_session() as session:
        user_id = session.scalar(select(User.id).where(User.username == name))
        assert session.scalar(select(WebSession).where(WebSession.user_id == user_id))
        session.execute(text("DELETE FROM users WHERE id = :id"), {"id": user_id})
    assert replay(base_url, cookie) is None
    with module_archive.db.session() as session:
        assert session.scalar(select(WebSession).where(WebSession.user_id == user_id)) is None


def test_the_api_never_honours_the_web_cookie(
    browser: httpx.Client, module_api: httpx.Client, module_tokens: Tokens
) -> None:
    sign_in(browser, module_tokens.owner)
    assert signed_in_as(browser) == "owner"
    hidden = create_dandiset(module_api, "hidden", embargo=True)
    assert module_api.get(f"/api/dandisets/{hidden}/").status_code == 200
    assert browser.get(f"/api/dandisets/{hidden}/").status_code == 401
    assert browser.get("/api/auth/token/").status_code == 401
    assert browser.post("/api/dandisets/", json={"name": "by cookie"}).status_code == 401
    count(PART, cases=3)


def test_odd_cookies_are_anonymous_never_errors(base_url: str, module_tokens: Tokens) -> None:
    odd = [
        b"x" * 5000,
        b"%ff%fe",
        b"",
        "\u00e9t\u00e9".encode(),
        b"\xff",
        module_tokens.owner.encode(),
    ]
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for value in odd:
            home = client.get("/", headers=[(b"Cookie", SESSION_COOKIE.encode() + b"=" + value)])
            assert home.status_code == 200 and 'id="signed-in-user"' not in home.text
    # a cookie of the old kind (the raw token) signs nobody in and is deleted on sight
    with httpx.Client(base_url=base_url, timeout=60) as client:
        client.cookies.set(LEGACY_TOKEN_COOKIE, module_tokens.owner)
        home = client.get("/")
        assert 'id="signed-in-user"' not in home.text
        assert f'{LEGACY_TOKEN_COOKIE}="";' in home.headers["set-cookie"]
    count(PART, cases=len(odd) + 1)


def test_every_answer_carries_the_security_headers(
    browser: httpx.Client, module_tokens: Tokens
) -> None:
    pages = ["/", "/signin", "/docs", "/?page=x", "/dandiset/999999", "/zarr/nope/"]
    others = [
        "/api/info/",
        "/api/dandisets/",
        "/api/dandisets/999999/",
        "/openapi.json",
        "/static/web/web.css",
    ]
    answers = [browser.get(p) for p in pages + others]
    answers.append(browser.get("/api/dandisets/", headers={"Authorization": "token bad"}))
    answers.append(browser.post("/signin", data={}))
    sign_in(browser, module_tokens.owner)
    answers.append(browser.get("/"))  # signed in
    for response in answers:
        where = (response.request.method, str(response.request.url), response.status_code)
        assert response.status_code < 500, where
        headers = response.headers
        assert headers.get("x-content-type-options") == "nosniff", where
        # no framing anywhere: the pages (clickjacking), and nothing else either
        assert headers.get("x-frame-options") == "DENY", where
        assert "frame-ancestors 'none'" in headers.get("content-security-policy", ""), where
        if not headers["content-type"].startswith("text/html"):
            assert "default-src 'none'" in headers["content-security-policy"], where
    assert sum(r.headers["content-type"].startswith("text/html") for r in answers) >= 7
    count(PART, cases=len(answers))


def test_every_form_post_is_known() -> None:
    """Every form of the templates and every POST route outside /api is one of
    :data:`FORM_POSTS` (each tested above), and each form carries a ``csrf_token``."""
    forms = []
    for template in TEMPLATES.glob("*.html"):
        source = template.read_text()
        for found in re.finditer(r"<form\b[^>]*>.*?</form>", source, re.S | re.I):
            form = found.group(0)
            if re.search(r'method="post"', form, re.I):
                action = re.search(r'action="([^"]*)"', form)
                assert action is not None, (template.name, form)
                forms.append(_placeholders(action.group(1)))
                assert 'name="csrf_token"' in form, (template.name, form)
    assert set(forms) == {_placeholders(p) for p in FORM_POSTS}
    routes = list(_routes(create_app(None).routes))  # type: ignore[arg-type]
    posts = {path for path, methods in routes if "POST" in methods and not path.startswith("/api/")}
    assert "/api/dandisets/" in {path for path, methods in routes if "POST" in methods}
    assert posts == FORM_POSTS


def _placeholders(path: str) -> str:
    """*path* with its parameters as ``{}``: a template's ``{{ dandiset.identifier }}`` and a
    route's ``{dandiset_id}`` alike."""
    return re.sub(r"\{\{[^}]*\}\}|\{[^}]*\}", "{}", path)


def _routes(routes: Iterable[Any]) -> Iterator[tuple[str, set[str]]]:
    """``(path, methods)`` of every route, in included routers too."""
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI >= 0.16x
        if included is not None:
            yield from _routes(included.routes)
        else:
            yield getattr(route, "path", ""), set(getattr(route, "methods", None) or ())
