"""``/api/dandisets/{id}/users/``: a dandiset's owners, in DANDI's shapes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from zarrchive.api.bodies import JsonBody
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.services import owners

router = APIRouter(tags=["dandisets"])


class OwnerIn(BaseModel):
    """One owner of DANDI's ``PUT`` body (``name`` and ``email`` are ignored, as DANDI does)."""

    model_config = ConfigDict(extra="ignore")
    username: str = Field(max_length=150, description="An existing user's name")


class OwnerOut(BaseModel):
    username: str
    name: str
    email: str | None = None


def _out(found: list[owners.OwnerInfo]) -> list[OwnerOut]:
    return [OwnerOut(username=o.username, name=o.name, email=o.email) for o in found]


@router.get(
    "/api/dandisets/{dandiset_id}/users/",
    response_model=list[OwnerOut],
    summary="The dandiset's owners",
)
def get_owners(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> list[OwnerOut]:
    """Anyone who may see the dandiset may list its owners."""
    with archive.db.session() as session:
        return _out(owners.list_owners(session, user, dandiset_id))


#: DANDI's body carries each owner's ``name`` and ``email`` too (ignored): not a
#: :class:`~zarrchive.api.schemas.RequestModel`, so bounded by the body's size (8 MiB, a
#: signed-in caller's: anonymous callers get their 401 unread).
NEW_OWNERS = JsonBody(list[OwnerIn], login=True)


@router.put(
    "/api/dandisets/{dandiset_id}/users/",
    response_model=list[OwnerOut],
    summary="Replace the dandiset's owners",
    openapi_extra=NEW_OWNERS.openapi,
)
def put_owners(
    dandiset_id: str,
    body: Annotated[list[OwnerIn], Depends(NEW_OWNERS)],
    archive: ArchiveDep,
    user: UserDep,
) -> list[OwnerOut]:
    """DANDI's `[{"username": ...}, ...]`: the new owners (owners and admins only; at least
    one; 400 naming a user that does not exist).  A removed owner loses write access, and an
    embargoed dandiset's visibility, at once."""
    with archive.db.write_session() as session:
        return _out(owners.set_owners(session, user, dandiset_id, [o.username for o in body]))
