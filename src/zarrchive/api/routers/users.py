"""``/api/users/me/``: the caller's account, in DANDI's shape."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel

from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.services.identity import accounts

router = APIRouter(tags=["users"])


class MeOut(BaseModel):
    username: str
    name: str
    admin: bool
    status: Literal["INCOMPLETE", "PENDING", "APPROVED", "REJECTED"]


@router.get("/api/users/me/", response_model=MeOut, summary="Your account")
def me(archive: ArchiveDep, user: UserDep) -> MeOut:
    """Who the key belongs to, and whether the account is approved (DANDI's statuses)."""
    with archive.db.session() as session:
        info = accounts.me(session, user)
    return MeOut(username=info.username, name=info.name, admin=info.admin, status=info.status.value)
