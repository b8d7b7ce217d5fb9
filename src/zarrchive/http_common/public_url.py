"""The archive's external address: the one place absolute URLs are made from.

Without ``ZARRCHIVE_PUBLIC_URL`` the archive names itself as the client reached it (the
request's scheme and ``Host``).  With it, the ``Host`` a request carries is never written
into an answer: pagination links, ``/api/info/``'s ``services``, the API address inside
LINDI files, the web pages' absolute links and redirects all use the configured address.

- :func:`public_base` (``scheme://host[:port]``) and :func:`public_request_url` (the
  request's own URL on that base) are what routes use;
- :class:`PublicAddress` (outermost middleware) rewrites the scope's scheme and ``Host`` to
  the configured address, so that what Starlette builds by itself from the request (the
  trailing-slash redirects, ``request.url``) and the same-origin checks (CORS, web forms)
  see the archive's address, not the one a client forged.
"""

from __future__ import annotations

import urllib.parse

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send


def configured_public_url(scope: Scope) -> str | None:
    """``ZARRCHIVE_PUBLIC_URL`` of the archive serving *scope*'s app (``None``: unset)."""
    archive = getattr(scope["app"].state, "archive", None) if "app" in scope else None
    return archive.settings.public_url if archive is not None else None


def public_base(request: Request) -> str:
    """``scheme://host[:port]`` of the archive for *request*'s client (no trailing ``/``)."""
    configured = configured_public_url(request.scope)
    if configured is not None:
        return configured
    return str(request.base_url).rstrip("/")


def public_request_url(request: Request) -> URL:
    """The request's own URL (path and query) on the archive's external address."""
    configured = configured_public_url(request.scope)
    if configured is None:
        return request.url
    parts = urllib.parse.urlsplit(configured)
    return request.url.replace(scheme=parts.scheme, netloc=parts.netloc)


class PublicAddress:
    """ASGI middleware: with ``ZARRCHIVE_PUBLIC_URL`` set, every HTTP request is seen with the
    configured scheme and ``Host`` (the forged or internal ``Host`` it came with is
    dropped); without it, requests pass untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            configured = configured_public_url(scope)
            if configured is not None:
                parts = urllib.parse.urlsplit(configured)
                headers = [(k, v) for k, v in scope["headers"] if k != b"host"]
                headers.append((b"host", parts.netloc.encode("ascii")))
                scope = dict(scope, headers=headers, scheme=_scheme(scope, parts.scheme))
        await self.app(scope, receive, send)


def _scheme(scope: Scope, configured: str) -> str:
    """The configured scheme, as a websocket's (``ws``/``wss``) when *scope* is one."""
    if scope["type"] == "websocket":
        return "wss" if configured == "https" else "ws"
    return configured
