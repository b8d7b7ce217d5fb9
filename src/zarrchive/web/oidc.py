"""Signing in through an OpenID Connect provider (``ZARRCHIVE_OIDC_*``).

- ``POST /signin/oidc/{key}`` (a button of ``/signin``, protected as the sign-in form is)
  starts a flow (:mod:`zarrchive.web.oidc_flow`): its signed cookie, ``SameSite=Lax``, and
  a redirect to the provider's authorization endpoint with ``state``, ``nonce`` and the PKCE
  challenge;
- ``GET /signin/oidc/callback`` (the redirect URI to register at every provider:
  :func:`redirect_uri`) checks ``state`` against the cookie, redeems the code, checks the
  ID token (:mod:`zarrchive.services.identity.oidc`), finds or makes the account linked to the
  provider's (issuer, ``sub``) (:mod:`zarrchive.services.identity.identities`) and starts a web session
  as the token sign-in does.  Whatever fails gives a page saying why (4xx, or 502 for a
  provider that can't be reached) and makes nothing; the flow's cookie is used once.

The session cookie is ``SameSite=Strict``: a browser arriving from the provider (a
cross-site navigation) would not send it on a redirect, so the callback answers a page that
moves on to ``/`` by itself, from this site.
"""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from zarrchive.config import OidcProvider
from zarrchive.errors import NotFound, PermissionDenied, SignInRefused, ZarrchiveError
from zarrchive.http_common.errors import status_code_for
from zarrchive.http_common.public_url import public_base
from zarrchive.services.identity import oidc
from zarrchive.services.identity.accounts import AccountStatus
from zarrchive.services.identity.auth import Caller
from zarrchive.services.identity.identities import account_for
from zarrchive.services.identity.web_sessions import sign_out, start_session
from zarrchive.services.runtime import Archive
from zarrchive.web.forms import TOKEN_FIELD, parse_form, require_form_from_here
from zarrchive.web.oidc_flow import FLOW_MAX_AGE, SignInFlow, decode_flow, encode_flow, flow_key
from zarrchive.web.render import (
    HOST_ONLY_PREFIX,
    ArchiveOf,
    HtmlRoute,
    delete_cookie,
    error_page,
    page,
    session_cookie_name,
    set_cookie,
)
from zarrchive.web.signin import COOKIE_MAX_AGE, SIGNIN_COOKIE, SIGNIN_PATH

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

CALLBACK_PATH = "/signin/oidc/callback"
FLOW_COOKIE = "zarrchive_oidc"
#: The longest ``code``, ``state``, ``error``... the callback takes.
MAX_PARAMETER = 2048


def redirect_uri(base: str) -> str:
    """The redirect URI to register at a provider, for the archive at *base*."""
    return base.rstrip("/") + CALLBACK_PATH


def _flow_cookie_name(request: Request) -> str:
    return HOST_ONLY_PREFIX + FLOW_COOKIE if request.url.scheme == "https" else FLOW_COOKIE


def _key(archive: Archive) -> bytes:
    settings = archive.settings
    return flow_key(settings.s3_secret_access_key or settings.database_url)


def _provider(archive: Archive, key: str) -> OidcProvider:
    for provider in archive.settings.oidc_providers:
        if provider.key == key:
            return provider
    raise NotFound(f"no identity provider {key[:50]!r} is configured here: see /signin")


@router.post(SIGNIN_PATH + "/oidc/{key}", response_model=None)
async def start_signin(request: Request, key: str, archive: ArchiveOf) -> Response:
    fields = parse_form(await request.body())
    require_form_from_here(request, fields.get(TOKEN_FIELD), request.cookies.get(SIGNIN_COOKIE))
    provider = _provider(archive, key)
    metadata = await run_in_threadpool(oidc.PROVIDERS.metadata, provider)  # may ask it
    flow = SignInFlow.start(provider.key, redirect_uri(public_base(request)), int(time.time()))
    url = oidc.authorization_url(
        provider,
        metadata,
        redirect_uri=flow.redirect_uri,
        state=flow.state,
        nonce=flow.nonce,
        code_verifier=flow.code_verifier,
    )
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(
        _flow_cookie_name(request),
        encode_flow(flow, _key(archive)),
        max_age=FLOW_MAX_AGE,
        httponly=True,
        samesite="lax",  # comes back on the provider's (cross-site) redirect; Strict would not
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


def _refusal(request: Request, exc: ZarrchiveError) -> Response:
    response = error_page(request, status_code_for(exc), exc.message)
    response.delete_cookie(
        _flow_cookie_name(request),
        path="/",
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
    return response


def _parameter(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return value[:MAX_PARAMETER] if value is not None else None


@router.get(CALLBACK_PATH, response_class=HTMLResponse)
def callback(request: Request, archive: ArchiveOf) -> Response:
    request.state.web_user = None
    try:
        signed_in = _finish(request, archive)
    except ZarrchiveError as exc:
        return _refusal(request, exc)
    session_cookie = session_cookie_name(request)
    previous = request.cookies.get(session_cookie)
    if previous:  # this browser's earlier session (if any) ends: one browser, one session
        sign_out(archive, previous)
    response = page(request, "signed_in.html", username=signed_in.username)
    set_cookie(request, response, session_cookie, signed_in.session_id, COOKIE_MAX_AGE)
    response.delete_cookie(
        _flow_cookie_name(request),
        path="/",
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
    delete_cookie(response, SIGNIN_COOKIE, path=SIGNIN_PATH)
    return response


@dataclass(frozen=True)
class _SignedIn:
    username: str
    session_id: str


def _finish(request: Request, archive: Archive) -> _SignedIn:
    flow = decode_flow(
        request.cookies.get(_flow_cookie_name(request), ""), _key(archive), int(time.time())
    )
    if flow is None:
        raise SignInRefused(
            "this sign-in was not started in this browser, or it took longer than "
            f"{FLOW_MAX_AGE // 60} minutes, or the browser refused the archive's cookie: "
            "nothing was changed; start again from /signin"
        )
    state = _parameter(request, "state")
    if state is None or not _same(state, flow.state):
        raise SignInRefused(
            "the answer's state is not the one this sign-in sent (a forged or mixed-up "
            "answer): nothing was changed; start again from /signin"
        )
    provider = _provider(archive, flow.provider)
    error = _parameter(request, "error")
    if error is not None:
        description = _parameter(request, "error_description") or ""
        raise SignInRefused(
            f"the identity provider {provider.name!r} did not sign you in ({error[:100]}"
            + (f": {description[:200]}" if description else "")
            + "): nothing was changed; start again from /signin"
        )
    issuer = _parameter(request, "iss")  # RFC 9207: which provider answered
    if issuer is not None and issuer != provider.issuer:
        raise SignInRefused(
            f"the answer comes from {issuer[:200]!r}, not from {provider.issuer!r} where this "
            "sign-in went: nothing was changed; start again from /signin"
        )
    code = _parameter(request, "code")
    if not code:
        raise SignInRefused("the identity provider's answer has no code: start again from /signin")
    metadata = oidc.PROVIDERS.metadata(provider)
    claims = oidc.exchange_code(
        provider,
        metadata,
        code=code,
        redirect_uri=flow.redirect_uri,
        code_verifier=flow.code_verifier,
        nonce=flow.nonce,
    )
    with archive.db.write_session() as session:
        user, _created = account_for(session, claims, archive.settings.auto_approve_email_domains)
        if user.status == AccountStatus.REJECTED:
            raise PermissionDenied(
                "this account was not approved by the archive's admins: it can't sign in"
            )
        started = start_session(session, Caller.of(user), datetime.now(UTC))
        return _SignedIn(user.username, started.session_id)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))
