"""Signing in with an API token, and out.

Signing in exchanges the token for a server-side session (:mod:`zarrchive.services.identity.web_sessions`):
the browser's cookie holds the session's random id, never the token.  Both forms are
protected against cross-site posts (:mod:`zarrchive.web.forms`): the sign-in form by a
pre-session cookie it repeats in a field, the sign-out form by its session's form token.
"""

from __future__ import annotations

import contextlib
import secrets

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from zarrchive.config import OidcProvider
from zarrchive.errors import AuthenticationRequired, ZarrchiveError
from zarrchive.services.identity.oidc import PROVIDERS, origin_of
from zarrchive.services.identity.web_sessions import SESSION_LIFETIME, sign_in, sign_out
from zarrchive.web.forms import (
    TOKEN_FIELD,
    parse_form,
    require_form_from_here,
    session_form_token,
)
from zarrchive.web.render import (
    LEGACY_TOKEN_COOKIE,
    ArchiveOf,
    HtmlRoute,
    WebUser,
    archive_of,
    delete_cookie,
    page,
    session_cookie_name,
    set_cookie,
)
from zarrchive.web.security_headers import page_csp

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

#: The pre-session cookie of the sign-in form: sent back to ``/signin`` only.
SIGNIN_COOKIE = "zarrchive_signin"
SIGNIN_PATH = "/signin"
#: How long a sign-in form stays good to send (seconds).
SIGNIN_FORM_MAX_AGE = 24 * 3600
#: A signed-in browser keeps its cookie this long (the session ends then too).
COOKIE_MAX_AGE = int(SESSION_LIFETIME.total_seconds())
_SIGNIN_TOKEN_LENGTH = 43  # secrets.token_urlsafe(32)


def _signin_form_token(request: Request) -> str:
    """The browser's pre-session token: kept while it is one of ours, so that several tabs
    of the sign-in page all work."""
    known = request.cookies.get(SIGNIN_COOKIE, "")
    if len(known) == _SIGNIN_TOKEN_LENGTH and known.replace("-", "").replace("_", "").isalnum():
        return known
    return secrets.token_urlsafe(32)


def _signin_page(request: Request, status_code: int = 200, error: str | None = None) -> Response:
    form_token = _signin_form_token(request)
    providers = archive_of(request).settings.oidc_providers
    response = page(
        request,
        "signin.html",
        status_code=status_code,
        error=error,
        signin_token=form_token,
        providers=providers,
    )
    set_cookie(request, response, SIGNIN_COOKIE, form_token, SIGNIN_FORM_MAX_AGE, path=SIGNIN_PATH)
    if providers:  # the buttons' forms are redirected to the providers
        response.headers["Content-Security-Policy"] = page_csp(provider_origins(providers))
    return response


def provider_origins(providers: tuple[OidcProvider, ...]) -> list[str]:
    """The origins the providers' buttons lead to: each issuer's, and its authorization
    endpoint's (fetched now if need be; a provider that can't be reached keeps its button,
    which then says why)."""
    origins = []
    for provider in providers:
        origins.append(origin_of(provider.issuer))
        with contextlib.suppress(ZarrchiveError):
            origins.append(origin_of(PROVIDERS.metadata(provider).authorization_endpoint))
    return origins


@router.get(SIGNIN_PATH, response_class=HTMLResponse)
def signin_form(request: Request, user: WebUser) -> Response:
    return _signin_page(request)


@router.post(SIGNIN_PATH, response_model=None)
async def signin(request: Request, archive: ArchiveOf) -> Response:
    fields = parse_form(await request.body())
    request.state.web_user = None
    require_form_from_here(request, fields.get(TOKEN_FIELD), request.cookies.get(SIGNIN_COOKIE))
    token = fields.get("token", "").strip()
    if token.lower().startswith("token "):
        token = token[6:].strip()
    try:
        signed_in = sign_in(archive, token)
    except AuthenticationRequired as exc:
        reason = exc.message[:1].upper() + exc.message[1:]  # revoked, expired, read-only
        return await run_in_threadpool(  # the providers' metadata may be fetched
            _signin_page,
            request,
            status_code=401,
            error="This token is not valid: paste a token that 'zarrchive admin create-user' "
            "printed or your account page (/account) made."
            + ("" if "is not valid" in exc.message else f" {reason}."),
        )
    session_cookie = session_cookie_name(request)
    previous = request.cookies.get(session_cookie)
    if previous:  # this browser's earlier session (if any) ends: one browser, one session
        sign_out(archive, previous)
    response = RedirectResponse("/", status_code=303)
    set_cookie(request, response, session_cookie, signed_in.session_id, COOKIE_MAX_AGE)
    delete_cookie(response, SIGNIN_COOKIE, path=SIGNIN_PATH)
    if LEGACY_TOKEN_COOKIE in request.cookies:
        delete_cookie(response, LEGACY_TOKEN_COOKIE)
    return response


@router.post("/signout", response_model=None)
async def signout(request: Request, archive: ArchiveOf, user: WebUser) -> Response:
    """End the session on the server (a copy of the cookie is then worth nothing) and
    forget the cookie."""
    fields = parse_form(await request.body())
    session_cookie = session_cookie_name(request)
    session_id = request.cookies.get(session_cookie)
    # the form's token derives from the cookie, not the database: a browser whose session
    # has expired can still sign out (and lose its cookie)
    expected = session_form_token(session_id) if session_id else None
    require_form_from_here(request, fields.get(TOKEN_FIELD), expected)
    if session_id:
        sign_out(archive, session_id)
    response = RedirectResponse("/", status_code=303)
    delete_cookie(response, session_cookie)
    if LEGACY_TOKEN_COOKIE in request.cookies:
        delete_cookie(response, LEGACY_TOKEN_COOKIE)
    return response
