"""What every page shares: the templates, the signed-in user, and errors as HTML pages."""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape

from zarrchive.errors import DatabaseUnavailable, ZarrchiveError
from zarrchive.http_common.errors import DATABASE_DOWN, RETRY_AFTER_SECONDS, status_code_for
from zarrchive.services.identity.auth import Caller
from zarrchive.services.identity.web_sessions import session_user
from zarrchive.services.runtime import Archive
from zarrchive.web.forms import session_form_token

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
#: The cookie holding a signed-in browser's session id (HttpOnly, SameSite=Strict); the
#: session lives in the database (:mod:`zarrchive.services.identity.web_sessions`).
SESSION_COOKIE = "zarrchive_session"
#: Over https the session cookie's name has this prefix: browsers then keep it only as set
#: Secure, for ``Path=/`` and without ``Domain`` (for this host alone), and no other host,
#: a sibling subdomain serving uploaded content included, can set one (issue #35 item 6).
HOST_ONLY_PREFIX = "__Host-"
#: Where browsers signed in before sessions existed kept their API token: deleted on sight.
LEGACY_TOKEN_COOKIE = "zarrchive_token"


def filesize(size: int | None) -> str:
    """``1.5 MiB``: binary units, one decimal above bytes."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def quote_path(path: str) -> str:
    """A Zarr path as a URL's path segments."""
    return urllib.parse.quote(path, safe="/")


def when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment is not None else "-"


templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters["filesize"] = filesize
templates.filters["when"] = when
templates.filters["path"] = quote_path


def archive_of(request: Request) -> Archive:
    archive: Archive = request.app.state.archive
    return archive


def session_cookie_name(request: Request) -> str:
    """The session cookie's name for *request*: :data:`HOST_ONLY_PREFIX` + name over https
    (a same-named cookie without the prefix, as another host could plant, is ignored)."""
    return HOST_ONLY_PREFIX + SESSION_COOKIE if request.url.scheme == "https" else SESSION_COOKIE


def signed_in_user(request: Request) -> Caller | None:
    """The user of the browser's session; ``None`` without one (or with one that has ended).
    Sets what the pages' forms need (their token). The only place the archive reads the
    session cookie."""
    request.state.web_user = None
    request.state.form_token = None
    session_id = request.cookies.get(session_cookie_name(request))
    if not session_id:
        return None
    user = session_user(archive_of(request), session_id)
    if user is None:
        return None
    request.state.web_user = user
    request.state.form_token = session_form_token(session_id)
    return user


WebUser = Annotated[Caller | None, Depends(signed_in_user)]
ArchiveOf = Annotated[Archive, Depends(archive_of)]


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    user = getattr(request.state, "web_user", None)
    context.setdefault("form_token", getattr(request.state, "form_token", None))
    html = templates.get_template(template).render(request=request, user=user, **context)
    response = HTMLResponse(html, status_code=status_code)
    if LEGACY_TOKEN_COOKIE in request.cookies:  # an API token has no business in a cookie
        delete_cookie(response, LEGACY_TOKEN_COOKIE)
    return response


def set_cookie(
    request: Request, response: Response, name: str, value: str, max_age: int, path: str = "/"
) -> None:
    """Set one of the pages' cookies: HttpOnly, SameSite=Strict, Secure over https."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=path,
    )


def delete_cookie(response: Response, name: str, path: str = "/") -> None:
    secure = name.startswith(HOST_ONLY_PREFIX)  # (browsers take such a cookie only Secure)
    response.delete_cookie(name, path=path, httponly=True, samesite="strict", secure=secure)


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    response = page(request, "error.html", status_code=status, status=status, message=message)
    if status == 503:
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


#: What a page that needs a signed-in user says to a visitor who is not.
SIGN_IN_MESSAGE = "This page is visible only to signed-in users who may see it: sign in first."


class HtmlRoute(APIRoute):
    """Errors of a page's handler are HTML pages with the API's status codes."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except ZarrchiveError as exc:
                status = status_code_for(exc)
                if status >= 500:
                    log.error("%s: %s", type(exc).__name__, exc.message)
                if status == 401:  # the API's words are about headers: a person signs in
                    return error_page(request, 401, SIGN_IN_MESSAGE)
                return error_page(request, status, exc.message)
            except DATABASE_DOWN as exc:
                down = DatabaseUnavailable(f"the database is unavailable ({type(exc).__name__})")
                return error_page(request, 503, down.message)

        return route
