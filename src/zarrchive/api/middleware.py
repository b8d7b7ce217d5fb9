"""The request guard: what every request passes before a handler parses anything.

FastAPI reads and parses a request's body before it resolves the dependencies that
authenticate, so without this guard anyone could make the archive read and parse bodies
of any size.  The guard, a plain ASGI middleware:

1. refuses NUL characters in the path and the query string (400: PostgreSQL can't store
   them, and no name of the archive contains one);
2. authenticates a request that carries ``Authorization`` before reading its body (401 for
   a bad token, the body unread); the user is handed to the handlers (``get_user``);
3. caps the body: ``max_request_body`` for authenticated requests, 1 MiB for anonymous
   ones, by ``Content-Length`` before reading and by counting the bytes that arrive (413);
4. refuses NUL characters in the body's text (raw or JSON-escaped ``\\u0000``, 400).

Bodies are small once capped: the guard reads the whole body, checks it, and hands it to
the application.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from zarrchive.config import ANONYMOUS_BODY_LIMIT
from zarrchive.errors import AuthenticationRequired, InvalidInput, RequestTooLarge, ZarrchiveError
from zarrchive.http_common.errors import DATABASE_DOWN, database_unavailable, error_response
from zarrchive.services.identity.auth import Caller, authenticate
from zarrchive.services.runtime import Archive

#: Where the guard leaves the authenticated user for ``api.deps.get_user``.
USER_STATE_KEY = "zarrchive_user"
_ANONYMOUS = object()


def _has_nul(text: bytes) -> bool:
    return b"\x00" in text or b"\\u0000" in text


def parse_token(authorization: str) -> str:
    """The token of an ``Authorization: token KEY`` header."""
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "token" or not token.strip():
        raise AuthenticationRequired(
            "malformed Authorization header: send 'Authorization: token KEY'"
        )
    return token.strip()


class RequestGuard:
    """ASGI middleware; see the module's docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            receive = await self._check(scope, receive)
        except ZarrchiveError as exc:
            await error_response(exc)(scope, receive, send)
            return
        except DATABASE_DOWN as exc:  # authenticating needs the database
            await error_response(database_unavailable(exc))(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _check(self, scope: Scope, receive: Receive) -> Receive:
        path = str(scope.get("path", ""))
        query = urllib.parse.unquote_to_bytes(bytes(scope.get("query_string", b"")))
        if "\x00" in path or b"\x00" in query:
            raise InvalidInput("NUL characters are not allowed in paths or query parameters")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        archive: Archive | None = getattr(scope["app"].state, "archive", None)
        state: dict[str, Any] = scope.setdefault("state", {})
        user: Caller | None = None
        authorization = headers.get("authorization")
        if authorization is not None and archive is not None:
            user = await run_in_threadpool(authenticate, archive, parse_token(authorization))
            state[USER_STATE_KEY] = user
        limit = ANONYMOUS_BODY_LIMIT
        if user is not None and archive is not None:
            limit = max(archive.settings.max_request_body, ANONYMOUS_BODY_LIMIT)
        too_large = RequestTooLarge(
            f"the request body is larger than {limit} bytes, the most this archive accepts"
            + ("" if user is not None else " from an anonymous request (send your API token)")
        )
        length = headers.get("content-length")
        if length is not None:
            if not length.isascii() or not length.isdigit():
                raise InvalidInput(f"invalid Content-Length {length!r}")
            if int(length) > limit:
                raise too_large
        if scope.get("method") in ("GET", "HEAD", "OPTIONS") and length is None:
            return receive
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return _replay(None, receive)
            body += message.get("body", b"")
            if len(body) > limit:
                raise too_large
            more = bool(message.get("more_body", False))
        if _has_nul(bytes(body)):
            raise InvalidInput("NUL characters are not allowed in the request body")
        return _replay(bytes(body), receive)


def _replay(body: bytes | None, original: Receive) -> Receive:
    """A ``receive`` that hands the application the body read by the guard (once), then
    passes on what the server sends next (the client's disconnect).  ``None``: the client
    is already gone."""
    sent = body is None

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        if body is None:
            return {"type": "http.disconnect"}
        return await original()

    return receive
