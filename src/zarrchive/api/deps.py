"""FastAPI dependencies: the archive runtime and the current user."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from zarrchive.db.models import User
from zarrchive.errors import AuthenticationRequired
from zarrchive.services.auth import authenticate
from zarrchive.services.runtime import Archive


def get_archive(request: Request) -> Archive:
    archive: Archive = request.app.state.archive
    return archive


def get_user(
    archive: Annotated[Archive, Depends(get_archive)],
    authorization: Annotated[str | None, Header()] = None,
) -> User | None:
    """The user of ``Authorization: token KEY``; ``None`` for anonymous requests."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "token" or not token.strip():
        raise AuthenticationRequired(
            "malformed Authorization header: send 'Authorization: token KEY'"
        )
    with archive.db.session() as session:
        user = authenticate(session, token.strip())
        session.expunge(user)
        return user


ArchiveDep = Annotated[Archive, Depends(get_archive)]
UserDep = Annotated[User | None, Depends(get_user)]
