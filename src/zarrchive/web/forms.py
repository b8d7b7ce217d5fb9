"""Form POSTs of the pages come from the pages only (no cross-site request forgery).

Every form carries a ``csrf_token`` field the server checks:

- a signed-in browser's forms carry a token derived from its session id
  (:func:`session_form_token`): another site can't read it (it never sees the HttpOnly
  cookie, nor the pages), and it changes with every sign-in;
- the sign-in form, shown before any session exists, carries the random value of a
  pre-session cookie (``SameSite=Strict``: a cross-site POST arrives without it), compared
  with the field.

On top of that, a request whose ``Origin`` (or, without one, ``Referer``) names another site
is refused whatever it carries.  Refusals are :class:`PermissionDenied` (403 pages).
"""

from __future__ import annotations

import hashlib
import hmac
import urllib.parse

from fastapi import Request

from zarrchive.errors import PermissionDenied

#: A form's body has at most this many fields (a sign-in form has two).
MAX_FORM_FIELDS = 10
#: The field holding the form's token.
TOKEN_FIELD = "csrf_token"
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def parse_form(body: bytes) -> dict[str, str]:
    """The fields of an ``application/x-www-form-urlencoded`` *body* (the first value of
    each); nothing for a body with more fields than a form of the pages has."""
    text = body.decode("utf-8", errors="replace")
    try:
        fields = urllib.parse.parse_qs(text, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:  # too many fields
        return {}
    return {name: values[0] for name, values in fields.items()}


def session_form_token(session_id: str) -> str:
    """The forms' token of a session (one-way: it reveals nothing of the session id)."""
    return hashlib.sha256(b"zarrchive form token\x00" + session_id.encode("utf-8")).hexdigest()


def _origin(url: str) -> tuple[str, str] | None:
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.netloc:
        return None
    return scheme, _without_default_port(scheme, parts.netloc.lower())


def _without_default_port(scheme: str, netloc: str) -> str:
    default = _DEFAULT_PORTS.get(scheme, "")
    return netloc[: -len(default)] if default and netloc.endswith(default) else netloc


def is_same_origin(request: Request, url: str) -> bool:
    """Whether *url* (an ``Origin`` or ``Referer``) is this archive as the request reached it
    (its ``Host``).  Behind a proxy terminating TLS the request is ``http`` and the page
    ``https``; an ``https`` request never accepts an ``http`` origin."""
    found = _origin(url)
    if found is None:  # "null" (sandboxed frames, privacy redirects) or garbage
        return False
    scheme, netloc = found
    own_scheme = request.url.scheme.lower()
    if own_scheme == "https" and scheme != "https":
        return False
    own = _without_default_port(own_scheme, request.url.netloc.lower())
    return netloc == _without_default_port(scheme, own)


def require_form_from_here(request: Request, sent_token: str | None, expected: str | None) -> None:
    """Refuse a form POST from another site: a foreign ``Origin``/``Referer``, or a token
    that isn't the one the archive gave this browser (*expected*; ``None`` when it gave
    none)."""
    origin = request.headers.get("origin")
    referer = request.headers.get("referer")
    claimed = origin if origin is not None else referer
    if claimed is not None and not is_same_origin(request, claimed):
        raise PermissionDenied(
            "this form was sent from another site, not from this archive's pages: "
            "nothing was done (open the page here and send its form again)"
        )
    if (
        not sent_token
        or not expected
        or not hmac.compare_digest(sent_token.encode("utf-8"), expected.encode("utf-8"))
    ):
        raise PermissionDenied(
            "this form did not come from a page this archive showed this browser (or the "
            "page is out of date, or the browser refused the archive's cookie): nothing was "
            "done; reload the page and send its form again"
        )
