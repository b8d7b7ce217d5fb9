"""Security headers on every answer, pages and API alike (a plain ASGI middleware).

- ``X-Content-Type-Options: nosniff`` everywhere: a browser renders an answer only as the
  type it is declared (an uploader's bytes served as ``application/octet-stream`` or JSON
  never become a page).
- No framing, anywhere (``X-Frame-Options: DENY`` and CSP ``frame-ancestors 'none'``):
  against clickjacking of the pages (the sign-out button, ...).  On the API's answers it
  costs nothing, and covers whatever a browser might render of them.
- Pages (``text/html``) get a CSP that also pins ``<base>`` and form targets to this archive
  and forbids plugins; every other answer gets ``default-src 'none'``: opened in a
  browser, it loads and runs nothing.
- ``Referrer-Policy: same-origin``: the paths browsed (names of embargoed files, ...) are
  not sent to other sites; forms posted here still send their ``Referer``.

A header the handler set itself is kept.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGE_CSP = "frame-ancestors 'none'; base-uri 'self'; form-action 'self'; object-src 'none'"


def page_csp(form_targets: Iterable[str] = ()) -> str:
    """The pages' CSP, its forms also allowed to lead to *form_targets* (origins): the
    sign-in page's provider buttons post here and are redirected to the provider, a
    redirect ``form-action`` governs too."""
    targets = " ".join(sorted(set(form_targets)))
    return PAGE_CSP.replace("form-action 'self'", f"form-action 'self' {targets}".rstrip())


OTHER_CSP = "default-src 'none'; frame-ancestors 'none'"


def security_headers(content_type: str) -> dict[str, str]:
    """The headers an answer of *content_type* carries."""
    is_page = content_type.split(";")[0].strip().lower() == "text/html"
    return {
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": PAGE_CSP if is_page else OTHER_CSP,
        "Referrer-Policy": "same-origin",
    }


class SecurityHeaders:
    """ASGI middleware; see the module's docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in security_headers(headers.get("content-type", "")).items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
