"""FastAPI dependencies: the archive runtime and the current user."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from zarrchive.api.middleware import USER_STATE_KEY, parse_token
from zarrchive.services.identity.auth import Caller, authenticate
from zarrchive.services.runtime import Archive


def get_archive(request: Request) -> Archive:
    archive: Archive = request.app.state.archive
    return archive


def get_user(
    request: Request,
    archive: Annotated[Archive, Depends(get_archive)],
    authorization: Annotated[str | None, Header()] = None,
) -> Caller | None:
    """The user of ``Authorization: token KEY``; ``None`` for anonymous requests.

    The request guard (:mod:`zarrchive.api.middleware`) has authenticated the token before
    the body was read; its user is reused here.
    """
    if authorization is None:
        return None
    known: Caller | None = getattr(request.state, USER_STATE_KEY, None)
    if known is not None:
        return known
    return authenticate(archive, parse_token(authorization))


ArchiveDep = Annotated[Archive, Depends(get_archive)]
UserDep = Annotated[Caller | None, Depends(get_user)]
