"""Signing in with an API token (kept in an HttpOnly, SameSite=Strict cookie) and out."""

from __future__ import annotations

import urllib.parse

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from zarrchive.errors import AuthenticationRequired
from zarrchive.services.auth import authenticate
from zarrchive.web.render import TOKEN_COOKIE, ArchiveOf, HtmlRoute, WebUser, page

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

#: A signed-in browser stays signed in this long (seconds) unless it signs out.
COOKIE_MAX_AGE = 30 * 24 * 3600


@router.get("/signin", response_class=HTMLResponse)
def signin_form(request: Request, user: WebUser) -> HTMLResponse:
    return page(request, "signin.html", error=None)


@router.post("/signin", response_model=None)
async def signin(request: Request, archive: ArchiveOf) -> Response:
    body = (await request.body()).decode("utf-8", errors="replace")
    try:
        fields = urllib.parse.parse_qs(body, max_num_fields=10)
    except ValueError:  # more fields than a sign-in form has
        fields = {}
    token = (fields.get("token") or [""])[0].strip()
    if token.lower().startswith("token "):
        token = token[6:].strip()
    user = None
    if token and len(token) <= 200:
        try:
            user = authenticate(archive, token)
        except AuthenticationRequired:
            user = None
    if user is None:
        request.state.web_user = None
        return page(
            request,
            "signin.html",
            status_code=401,
            error="This token is not valid: paste a token that 'zarrchive admin create-user' "
            "printed.",
        )
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        TOKEN_COOKIE,
        token,
        max_age=COOKIE_MAX_AGE,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/signout")
def signout() -> RedirectResponse:
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(TOKEN_COOKIE, path="/", httponly=True, samesite="strict")
    return response
