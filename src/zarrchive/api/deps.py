"""FastAPI dependencies: the archive runtime and the current user."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from zarrchive.api.middleware import USER_STATE_KEY, parse_token
from zarrchive.db.models import User
from zarrchive.services.auth import authenticate
from zarrchive.services.runtime import Archive


def get_archive(request: Request) -> Archive:
    archive: Archive = request.app.state.archive
    return archive


def get_user(
    request: Request,
    archive: Annotated[Archive, Depends(get_archive)],
    authorization: Annotated[str | None, Header()] = None,
) -> User | None:
    """The user of ``Authorization: token KEY``; ``None`` for anonymous requests.

    The request guard (:mod:`zarrchive.api.middleware`) has authenticated the token before
    the body was read; its user is reused here.
    """
    if authorization is None:
        return None
    known: User | None = getattr(request.state, USER_STATE_KEY, None)
    if known is not None:
        return known
    token = parse_token(authorization)
    with archive.db.session() as session:
        user = authenticate(session, token)
        session.expunge(user)
        return user


ArchiveDep = Annotated[Archive, Depends(get_archive)]
UserDep = Annotated[User | None, Depends(get_user)]
