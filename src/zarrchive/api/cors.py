"""Cross-origin access to the API (CORS), for browser viewers and notebooks on other sites.

- Reads (``GET``, ``HEAD`` and their preflights) are open to every origin, or to
  ``ZARRCHIVE_CORS_ORIGINS`` only when it is set.
- State-changing methods are allowed only from the configured origins (and from the
  archive's own pages, same origin): a cross-origin ``POST``/``PUT``/``PATCH``/``DELETE``
  from anywhere else is refused (403) before the request reaches a handler.
- ``Authorization`` is allowed as a request header, so a page can send an API token it was
  given.  Credentials mode is never allowed: the API never honours the web pages' cookie
  (SameSite=Strict), so no other site can act as a signed-in user.

Only the API's own addresses (``/api/``, ``/server-info``, ``/openapi.json``) answer
cross-origin; the HTML pages don't.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The methods any allowed origin may use: they change nothing.
READ_METHODS = frozenset({"GET", "HEAD"})
#: What a viewer needs to read of an answer (sizes, ranges, versions, retry hints).
EXPOSED_HEADERS = "ETag, Content-Length, Content-Range, Accept-Ranges, Retry-After, Location"
#: Request headers a page may send.
ALLOWED_HEADERS = "Authorization, Content-Type, Range, Content-MD5"
#: How long a browser may keep a preflight's answer (seconds).
PREFLIGHT_MAX_AGE = "600"
_API_PREFIXES = ("/api/", "/server-info", "/openapi.json")


def is_api_path(path: str) -> bool:
    return path.startswith(_API_PREFIXES)


class CorsPolicy:
    """Which origins may read and which may change things (pure)."""

    def __init__(self, origins: Iterable[str] = ()) -> None:
        self.origins = frozenset(o.rstrip("/") for o in origins if o.strip())

    def allows(self, origin: str, method: str, own_origin: str) -> bool:
        """Whether a request of *method* from *origin* may proceed."""
        if origin == own_origin or origin in self.origins:
            return True
        return method in READ_METHODS and not self.origins

    def allow_origin_value(self, origin: str, method: str) -> str:
        """``Access-Control-Allow-Origin`` for an allowed request: ``*`` for an open read."""
        if method in READ_METHODS and not self.origins:
            return "*"
        return origin


def _own_origin(scope: Scope, headers: Headers) -> str:
    host = headers.get("host", "")
    return f"{scope.get('scheme', 'http')}://{host}"


class CorsMiddleware:
    """ASGI middleware applying the archive's :class:`CorsPolicy` (its settings'
    ``cors_origins``, read from the app's archive at each request) to the API's addresses."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._policies: dict[tuple[str, ...], CorsPolicy] = {}

    def _policy(self, scope: Scope) -> CorsPolicy:
        archive = getattr(scope["app"].state, "archive", None)
        origins: tuple[str, ...] = archive.settings.cors_origins if archive is not None else ()
        policy = self._policies.get(origins)
        if policy is None:
            policy = self._policies[origins] = CorsPolicy(origins)
        return policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_api_path(str(scope.get("path", ""))):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        policy = self._policy(scope)
        method = str(scope.get("method", "GET")).upper()
        own = _own_origin(scope, headers)
        requested = headers.get("access-control-request-method")
        if method == "OPTIONS" and requested is not None:
            await _preflight(policy, origin, requested.upper(), own, send)
            return
        if not policy.allows(origin, method, own):
            await _refuse(origin, method, send)
            return
        allow = policy.allow_origin_value(origin, method)

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                out["Access-Control-Allow-Origin"] = allow
                out["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
                out.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, send_with_cors)


async def _preflight(policy: CorsPolicy, origin: str, requested: str, own: str, send: Send) -> None:
    if not policy.allows(origin, requested, own):
        await _refuse(origin, requested, send)
        return
    methods = "GET, HEAD, OPTIONS"
    if requested not in READ_METHODS:
        methods += ", POST, PUT, PATCH, DELETE"
    headers = [
        (b"access-control-allow-origin", policy.allow_origin_value(origin, requested)),
        (b"access-control-allow-methods", methods),
        (b"access-control-allow-headers", ALLOWED_HEADERS),
        (b"access-control-max-age", PREFLIGHT_MAX_AGE),
        (b"vary", "Origin"),
        (b"content-length", "0"),
    ]
    await send(
        {
            "type": "http.response.start",
            "status": 204,
            "headers": [(k, v.encode("latin-1")) for k, v in headers],
        }
    )
    await send({"type": "http.response.body", "body": b""})


async def _refuse(origin: str, method: str, send: Send) -> None:
    body = json.dumps(
        {
            "detail": f"cross-origin {method} from {origin} is not allowed: this archive "
            "accepts changes only from the origins in ZARRCHIVE_CORS_ORIGINS"
        }
    ).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
                (b"vary", b"Origin"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
